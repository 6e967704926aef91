package conversation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/transcript"
)

// piSamples holds the real pi transcripts that ship with the repository
// (testdata/transcripts/README.md gives their sources and licences).
const piSamples = "../../testdata/transcripts/pi"

// The reference implementations below are the CLI's former encoding/json-based code: the
// scanner-based one must print the same bytes for well-formed transcripts.

type refBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	MimeType  string          `json:"mimeType"`
	Data      string          `json:"data"`
	Redacted  bool            `json:"redacted"`
}

type refMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	ToolName     string          `json:"toolName"`
	IsError      bool            `json:"isError"`
	Command      string          `json:"command"`
	Summary      string          `json:"summary"`
	StopReason   string          `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	Usage        *struct {
		Input       int64 `json:"input"`
		Output      int64 `json:"output"`
		CacheRead   int64 `json:"cacheRead"`
		CacheWrite  int64 `json:"cacheWrite"`
		TotalTokens int64 `json:"totalTokens"`
		Cost        struct {
			Total float64 `json:"total"`
		} `json:"cost"`
	} `json:"usage"`
}

func refContentBlocks(raw json.RawMessage) []refBlock {
	if len(raw) == 0 {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []refBlock{{Type: "text", Text: s}}
		}
		return nil
	}
	var bs []refBlock
	if json.Unmarshal(raw, &bs) != nil {
		return nil
	}
	return bs
}

func refFirstText(bs []refBlock) string {
	for _, b := range bs {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			return b.Text
		}
	}
	return ""
}

func refOneLine(s string, n int) string {
	if len(s) > 8*n {
		s = s[:8*n]
	}
	s = strings.ToValidUTF8(s, "")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func refMessagePreview(raw json.RawMessage) string {
	var m refMessage
	_ = json.Unmarshal(raw, &m)
	bs := refContentBlocks(m.Content)
	switch m.Role {
	case "user", "custom":
		return refFirstText(bs)
	case "assistant":
		if t := refFirstText(bs); t != "" {
			return t
		}
		var calls []string
		for _, b := range bs {
			if b.Type == "toolCall" {
				calls = append(calls, b.Name)
			}
		}
		if len(calls) > 0 {
			return "[tool call: " + strings.Join(calls, ", ") + "]"
		}
		if m.ErrorMessage != "" {
			return "[" + m.StopReason + ": " + m.ErrorMessage + "]"
		}
		if m.StopReason != "" && m.StopReason != "stop" {
			return "[" + m.StopReason + "]"
		}
		return ""
	case "toolResult":
		t := refFirstText(bs)
		if m.IsError {
			return fmt.Sprintf("[%s error] %s", m.ToolName, t)
		}
		return fmt.Sprintf("[%s] %s", m.ToolName, t)
	case "bashExecution":
		return "$ " + m.Command
	case "compactionSummary", "branchSummary":
		return m.Summary
	}
	return ""
}

func refAbbreviate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + fmt.Sprintf("\n… [%d more characters]", len(r)-n)
}

// edgeTranscript writes a v3 transcript whose texts sit on every boundary the previews cut at:
// blank heads, multi-byte characters, escapes, surrogate pairs and invalid UTF-8 around byte
// previewBytes, bidi and control characters, blank first blocks, tool calls without text.
func edgeTranscript(t *testing.T) string {
	t.Helper()
	texts := []string{
		`"` + strings.Repeat(` \n\t `, 200) + `text after a long blank head"`,
		`"` + strings.Repeat("a", previewBytes-6) + "éééé" + `rest"`,
		`"` + strings.Repeat("a", previewBytes-2) + `\ud83d\ude00` + strings.Repeat("b", 20) + `"`,
		`"` + strings.Repeat("a", previewBytes-1) + `\ud83d` + strings.Repeat("b", 20) + `"`,
		`"` + strings.Repeat("a", previewBytes-3) + "\xff\xfe" + strings.Repeat("b", 20) + `"`,
		`"` + strings.Repeat(`\u00e9`, 400) + `"`,
		`"` + strings.Repeat(`x\"y\\z\/`, 100) + `"`,
		`"` + strings.Repeat("\u202e\u200b\u00a0\u0085 bidi", 80) + `"`,
		`"` + strings.Repeat(`\u0000\u001f ctl `, 50) + `"`,
		`"` + strings.Repeat("日本語テキスト", 60) + `"`,
		// Mostly blank heads: the visible text ends right at the cut.
		`"` + strings.Repeat(" ", previewBytes-6) + `abcdefghij"`,
		`"` + strings.Repeat(`\t`, previewBytes-5) + `éééé"`,
		`"` + strings.Repeat(`\u0001`, previewBytes-3) + `\ud83d\ude00\ud83d\ude00"`,
		`"short"`, `""`, `"   "`,
	}
	var b strings.Builder
	b.WriteString(`{"type":"session","version":3,"id":"edge","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}` + "\n")
	n := 0
	add := func(typ, body string) {
		n++
		parent := "null"
		if n > 1 {
			parent = fmt.Sprintf(`"%08x"`, n-1)
		}
		fmt.Fprintf(&b, `{"type":%q,"id":"%08x","parentId":%s,"timestamp":"2026-01-01T00:00:00.000Z",%s}`+"\n", typ, n, parent, body)
	}
	msg := func(m string) { add("message", `"message":`+m) }
	for i, p := range texts {
		msg(`{"role":"user","content":` + p + `,"timestamp":1}`)
		msg(`{"role":"user","content":[{"type":"text","text":"  "},{"type":"image","mimeType":"image/png","data":"QUJD\/RA=="},{"type":"text","text":` + p + `}],"timestamp":1}`)
		msg(fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":%s},{"type":"thinking","thinking":"","redacted":true},{"type":"text","text":%s},`+
			`{"type":"toolCall","id":"c%d","name":"bash","arguments":{"command":%s}}],"provider":"p","model":"m",`+
			`"usage":{"input":1,"output":2.5,"cacheRead":3,"cacheWrite":4,"cost":{"total":0.0001234567}},"stopReason":"toolUse","timestamp":2}`, p, p, i, p))
		msg(fmt.Sprintf(`{"role":"toolResult","toolCallId":"c%d","toolName":"bash","content":[{"type":"text","text":%s}],"isError":%v,"timestamp":3}`, i, p, i%2 == 1))
		msg(`{"role":"assistant","content":[],"provider":"p","model":"m","usage":{"input":0,"output":0,"totalTokens":0},"stopReason":"aborted","errorMessage":"boom"}`)
		msg(`{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"read","arguments":{}},{"type":"toolCall","id":"b","name":"write","arguments":null}],` +
			`"provider":"p","model":"m","usage":{"input":10,"output":20,"totalTokens":30,"cost":{"total":1e-7}},"stopReason":"toolUse"}`)
		msg(fmt.Sprintf(`{"role":"bashExecution","command":"ls -la","output":%s,"exitCode":%d,"cancelled":false,"truncated":false}`, p, i))
		msg(`{"role":"custom","customType":"ext","content":` + p + `,"display":true}`)
		add("custom_message", `"customType":"note","content":[{"type":"text","text":""},{"type":"text","text":`+p+`}],"display":true`)
		msg(`{"role":"assistant","content":"plain string content","provider":"p","model":"m","stopReason":"length"}`)
		msg(`{"role":"assistant","content":[{"type":"text","text":"  "}],"provider":"","model":"","stopReason":"error","errorMessage":"rate limited"}`)
		msg(`{"role":"compactionSummary","summary":` + p + `,"tokensBefore":5}`)
		msg(`{"role":"unknown","content":` + p + `}`)
	}
	p := filepath.Join(t.TempDir(), "edge.jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// transcripts returns the pi samples and the edge transcript. The samples are part of the
// repository, so their absence is a broken checkout and fails the test.
func transcripts(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(piSamples, "*.jsonl"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no pi samples under %s (%v)", piSamples, err)
	}
	return append(paths, edgeTranscript(t))
}

func openT(t *testing.T, p string) *transcript.File {
	t.Helper()
	f, err := transcript.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestPreviewMatchesDecode: the previews of every entry equal those of the full encoding/json
// decode, and so do the blocks the exports render.
func TestPreviewMatchesDecode(t *testing.T) {
	t.Parallel()
	for _, p := range transcripts(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f := openT(t, p)
			for _, e := range f.Entries {
				full, err := f.Full(e)
				if err != nil {
					t.Fatal(err)
				}
				var want string
				var content json.RawMessage
				switch e.Type {
				case "message":
					want = refOneLine(refMessagePreview(full.Message), PreviewLen)
					var m refMessage
					_ = json.Unmarshal(full.Message, &m)
					content = m.Content
				case "custom_message":
					want = refOneLine(e.CustomType+": "+refFirstText(refContentBlocks(full.Content())), PreviewLen)
					content = full.Content()
				default:
					continue
				}
				if got := preview(full); got != want {
					t.Fatalf("line %d: preview %q, want %q", e.Line, got, want)
				}
				ref := refContentBlocks(content)
				got := blocksOf(content)
				if len(got) != len(ref) {
					t.Fatalf("line %d: %d blocks, want %d", e.Line, len(got), len(ref))
				}
				for i, b := range got {
					r := ref[i]
					if b.Type != r.Type || b.Text != r.Text || b.Thinking != r.Thinking || b.ID != r.ID || b.Name != r.Name ||
						!bytes.Equal(b.Arguments, r.Arguments) || b.MimeType != r.MimeType || transcript.StringValue(b.Data) != r.Data || b.Redacted != r.Redacted {
						t.Fatalf("line %d block %d: %+v, want %+v", e.Line, i, b, r)
					}
				}
			}
		})
	}
}

// TestStatsMatchDecode: tool and token counts of `chat show` equal those of the encoding/json
// decode of every message.
func TestStatsMatchDecode(t *testing.T) {
	t.Parallel()
	for _, p := range transcripts(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f := openT(t, p)
			st, err := statsOf(f, p)
			if err != nil {
				t.Fatal(err)
			}
			var want TokenTotals
			calls, results, errs := 0, 0, 0
			var context int64
			total := func(m refMessage) int64 {
				u := m.Usage
				if u.TotalTokens > 0 {
					return u.TotalTokens
				}
				return u.Input + u.Output + u.CacheRead + u.CacheWrite
			}
			for _, e := range f.Entries {
				if e.Type != "message" || (e.Role != "assistant" && e.Role != "toolResult") {
					continue
				}
				full, err := f.Full(e)
				if err != nil {
					t.Fatal(err)
				}
				var m refMessage
				_ = json.Unmarshal(full.Message, &m)
				if m.Role == "toolResult" {
					results++
					if m.IsError {
						errs++
					}
					continue
				}
				for _, b := range refContentBlocks(m.Content) {
					if b.Type == "toolCall" {
						calls++
					}
				}
				if m.Usage != nil {
					want.Input += m.Usage.Input
					want.Output += m.Usage.Output
					want.CacheRead += m.Usage.CacheRead
					want.CacheWrite += m.Usage.CacheWrite
					want.Total += total(m)
					want.Cost += m.Usage.Cost.Total
				}
			}
			path := f.Path("")
			for i := len(path) - 1; i >= 0 && context == 0; i-- {
				if e := path[i]; e.Type == "message" && e.Role == "assistant" {
					full, err := f.Full(e)
					if err != nil {
						t.Fatal(err)
					}
					var m refMessage
					_ = json.Unmarshal(full.Message, &m)
					if m.Usage != nil {
						context = total(m)
					}
				}
			}
			want.Cost = math.Round(want.Cost*1e6) / 1e6
			if st.ToolCalls != calls || st.ToolResults != results || st.ToolErrors != errs || st.Tokens != want || st.ContextTokens != context {
				t.Errorf("stats calls %d results %d errors %d tokens %+v context %d; want %d %d %d %+v %d",
					st.ToolCalls, st.ToolResults, st.ToolErrors, st.Tokens, st.ContextTokens, calls, results, errs, want, context)
			}
		})
	}
}

// TestWriteTreeJSON: the streamed tree is byte for byte what encoding/json prints, indented
// (the CLI's form) and compact (the gateway's).
func TestWriteTreeJSON(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, []byte(`{"type":"session","version":3,"id":"e","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(transcripts(t), empty) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			tree, err := buildTree(openT(t, p))
			if err != nil {
				t.Fatal(err)
			}
			for _, indent := range []bool{true, false} {
				var want, got bytes.Buffer
				enc := json.NewEncoder(&want)
				enc.SetEscapeHTML(false)
				if indent {
					enc.SetIndent("", "  ")
				}
				if err := enc.Encode(tree); err != nil {
					t.Fatal(err)
				}
				if err := tree.WriteJSON(&got, indent); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Fatalf("streamed tree (indent %v) differs:\n%s\nwant\n%s", indent, got.Bytes(), want.Bytes())
				}
			}
		})
	}
}

// FuzzOneLine checks oneLine, which stops after the runes it shows, against squeezing the
// whole head and cutting it; and abbreviate, which slices the head, against the conversion
// to runes.
func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"hello", "  a\n\tb\r\nc  ", "héllo wörld", "bidi\u202eevil\x1b[31m", "",
		"a\xffb\xc3", "\u0085\u00a0x\u200by", strings.Repeat("ab ", 40), "日本語 テキスト\n\n"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = 1 + (n&0x7fffffff)%100
		if got, want := OneLine(s, n), refOneLine(s, n); got != want {
			t.Fatalf("OneLine(%q, %d) = %q, want %q", s, n, got, want)
		}
		if got, want := abbreviate(s, n), refAbbreviate(s, n); got != want {
			t.Fatalf("abbreviate(%q, %d) = %q, want %q", s, n, got, want)
		}
	})
}

func TestAbbreviate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc\n… [1 more characters]"},
		{"héllo", 2, "hé\n… [3 more characters]"},
		{"a\xffbc", 2, "a\uFFFD\n… [2 more characters]"},
		{"ab\xff", 2, "ab\n… [1 more characters]"},
		{"", 0, ""},
		{"x", 0, "\n… [1 more characters]"},
	} {
		if got := abbreviate(tc.in, tc.n); got != tc.want {
			t.Errorf("abbreviate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestMessagePreview covers the previews of each role from MessageInfo.
func TestMessagePreview(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ msg, want string }{
		{`{"role":"user","content":"hi"}`, "hi"},
		{`{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"read"},{"type":"toolCall","id":"b","name":"bash"}]}`, "[tool call: read, bash]"},
		{`{"role":"assistant","content":[],"stopReason":"error","errorMessage":"overloaded"}`, "[error: overloaded]"},
		{`{"role":"assistant","content":[],"stopReason":"length"}`, "[length]"},
		{`{"role":"assistant","content":[],"stopReason":"stop"}`, ""},
		{`{"role":"toolResult","toolName":"bash","isError":true,"content":[{"type":"text","text":"denied"}]}`, "[bash error] denied"},
		{`{"role":"bashExecution","command":"make"}`, "$ make"},
		{`{"role":"branchSummary","summary":"went left"}`, "went left"},
		{`{"role":"other","content":"x"}`, ""},
	} {
		m, err := transcript.ParseMessageInfo(json.RawMessage(tc.msg))
		if err != nil {
			t.Fatal(err)
		}
		if got := messagePreview(m); got != tc.want {
			t.Errorf("messagePreview(%s) = %q, want %q", tc.msg, got, tc.want)
		}
		if got := refMessagePreview(json.RawMessage(tc.msg)); got != tc.want {
			t.Errorf("reference preview(%s) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}
