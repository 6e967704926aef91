package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

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
