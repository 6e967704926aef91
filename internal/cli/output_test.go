package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/nexus-run/nexus/internal/abi"
)

func dataEvent(t *testing.T, seq uint64, content string, ct abi.ContentType) abi.Event {
	t.Helper()
	p, err := json.Marshal(abi.TerminalOutput{Type: abi.PayloadTerminalOutput, Content: content, ContentType: ct})
	if err != nil {
		t.Fatal(err)
	}
	return abi.Event{Event: abi.EventData, SessionID: "s", Seq: seq, Payload: p}
}

func TestEventWriter(t *testing.T) {
	status := abi.Event{Event: abi.EventStatus, SessionID: "s", Seq: 1, Payload: json.RawMessage(`{"type":"status","status":"connected"}`)}
	for _, tc := range []struct {
		name   string
		format string
		ct     abi.ContentType
		chunks []string
		want   string
	}{
		// Output that was only escape sequences reads as "" in text: no line for it.
		{"compact skips empty content", eventsCompact, abi.ContentText, []string{"", "a"},
			`{"seq":1,"event":"status","status":"connected"}` + "\n" + `{"seq":3,"event":"data","content":"a"}` + "\n"},
		{"raw skips empty content", eventsRaw, abi.ContentText, []string{""}, ""},
		{"text: CRLF and lone CR are line ends", eventsText, abi.ContentText, []string{"a\r\n", "\r", "b\r\n$ "}, "a\n\nb\n$ "},
		{"text: CRLF split between chunks", eventsText, abi.ContentText, []string{"a\r", "\nb\r", "c"}, "a\nb\nc"},
		{"text: a CR at the very end", eventsText, abi.ContentText, []string{"a\r"}, "a\n"},
		{"text keeps ansi as it is", eventsText, abi.ContentANSI, []string{"\x1b[1ma\r\n"}, "\x1b[1ma\r\n"},
		{"text decodes raw", eventsText, abi.ContentRaw, []string{base64.StdEncoding.EncodeToString([]byte("\x00b\r\n"))}, "\x00b\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &eventWriter{out: &out, format: tc.format, ct: tc.ct}
			events := []abi.Event{status}
			for i, c := range tc.chunks {
				events = append(events, dataEvent(t, uint64(i+2), c, tc.ct))
			}
			for _, e := range events {
				if err := w.write(e); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if tc.format == eventsRaw {
				// The status line is the envelope; only the data lines matter here.
				got = strings.Join(strings.SplitAfter(got, "\n")[1:], "")
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKVTable(t *testing.T) {
	var out bytes.Buffer
	v := map[string]any{
		"key":   "agent:main:main",
		"entry": map[string]any{"sessionId": "s1", "updatedAt": 1783600001000, "origin": map[string]any{}},
		"list":  []any{"a", 2, nil},
		"empty": []any{},
		"text":  "two\nlines\t",
		"blank": "",
		"ok":    true,
	}
	if err := kvTable(&out, v); err != nil {
		t.Fatal(err)
	}
	want := `blank            ""
empty            -
entry.origin     -
entry.sessionId  s1
entry.updatedAt  1783600001000
key              agent:main:main
list.0           a
list.1           2
list.2           -
ok               true
text             "two\nlines\t"
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// A struct keeps its field order (JSON's), not an alphabetical one.
func TestKVTableStructOrder(t *testing.T) {
	var out bytes.Buffer
	if err := kvTable(&out, struct {
		Z string `json:"z"`
		A int    `json:"a"`
	}{"last-named", 1}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "z  last-named\na  1\n" {
		t.Errorf("got %q", got)
	}
}

func TestUnescapeHTML(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":"\u003ctool_call\u003e"}`, `{"a":"<tool_call>"}`},
		{`"\u0026amp; \u003C"`, `"&amp; <"`},
		// An escaped backslash followed by u003c is text, not an escape: kept.
		{`"\\u003c"`, `"\\u003c"`},
		{`"\\\u003c"`, `"\\<"`},
		{`"\u00e9 \n \""`, `"\u00e9 \n \""`},
		{`"\u003`, `"\u003`},
		{`"\`, `"\`},
	} {
		if got := string(unescapeHTML([]byte(tc.in))); got != tc.want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", tc.in, got, tc.want)
		}
		var in, out any
		if json.Unmarshal([]byte(tc.in), &in) == nil {
			if err := json.Unmarshal(unescapeHTML([]byte(tc.in)), &out); err != nil || !reflect.DeepEqual(in, out) {
				t.Errorf("unescapeHTML(%s) changed the value: %v, want %v (%v)", tc.in, out, in, err)
			}
		}
	}
}

// TestToolCallPrintedUnescaped: a tool call's arguments (raw JSON the gateway encoded with Go's
// HTML escapes) print with <, > and & as themselves, like its result, in text and in JSON.
func TestToolCallPrintedUnescaped(t *testing.T) {
	args, err := json.Marshal(map[string]string{"command": "echo '<tool_call>' && true"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(args, []byte(`\u003c`)) {
		t.Fatalf("json.Marshal no longer escapes: %s", args)
	}
	payload, err := json.Marshal(abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseDetected, Name: "bash", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	e := abi.Event{Event: abi.EventData, SessionID: "s", Seq: 7, Payload: payload}
	for _, format := range []string{eventsText, formatJSON, eventsCompact} {
		var out, errOut bytes.Buffer
		p := &aiPrinter{out: &out, errOut: &errOut, format: format}
		if err := p.print(e); err != nil {
			t.Fatal(err)
		}
		got := out.String() + errOut.String()
		if !strings.Contains(got, `echo '<tool_call>' && true`) || strings.Contains(got, `\u00`) {
			t.Errorf("--format %s printed %q", format, got)
		}
	}
}

// TestErrorPrintedOnce: a failed command's error is printed in the format asked for: the error
// response on stdout in JSON (and its line on stderr for a pipe's reader), only the line with
// --format table, and once on a terminal that shows both.
func TestErrorPrintedOnce(t *testing.T) {
	const msg = "unknown flag: --bogus"
	run := func(stdout, stderr io.Writer, args ...string) int {
		args = append([]string{"--state-dir", t.TempDir(), "session", "list"}, args...)
		return Main(t.Context(), args, Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr})
	}
	for _, tc := range []struct {
		name               string
		args               []string
		inStdout, inStderr bool
	}{
		{"json", []string{"--bogus"}, true, true},
		{"table", []string{"--format", "table", "--bogus"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(&out, &errOut, tc.args...); code != 1 {
				t.Fatalf("exit %d", code)
			}
			if strings.Contains(out.String(), msg) != tc.inStdout || strings.Contains(errOut.String(), msg) != tc.inStderr {
				t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
			}
			if tc.inStdout && !strings.Contains(out.String(), `"type": "INVALID_ARGUMENT"`) {
				t.Fatalf("stdout is no error response: %q", out.String())
			}
		})
	}
	t.Run("terminal", func(t *testing.T) {
		ptm, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ptm.Close() }()
		var screen bytes.Buffer
		copied := make(chan struct{})
		go func() {
			_, _ = io.Copy(&screen, ptm) // until the terminal's other end closes (EIO)
			close(copied)
		}()
		code := run(tty, tty, "--bogus")
		_ = tty.Close()
		<-copied
		if code != 1 || strings.Count(screen.String(), msg) != 2 { // the response's message and its errors[0]
			t.Fatalf("exit %d, the terminal shows:\n%s", code, screen.String())
		}
		if strings.Contains(screen.String(), "nexus: INVALID_ARGUMENT") {
			t.Fatalf("the message twice on the terminal:\n%s", screen.String())
		}
	})
}
