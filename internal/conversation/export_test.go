package conversation

import (
	"bytes"
	"strings"
	"testing"
)

func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"  a\n\tb\r\nc  ", 10, "a b c"},
		{"abcdefghij", 5, "abcd…"},
		{"héllo wörld", 7, "héllo …"},
		{"bidi\u202eevil\x1b[31m", 40, "bidi evil [31m"},
		{"", 5, ""},
		{strings.Repeat("x", 1<<20), 4, "xxx…"},
	} {
		if got := OneLine(tc.in, tc.n); got != tc.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", tc.in[:min(len(tc.in), 40)], tc.n, got, tc.want)
		}
	}
}

func TestFences(t *testing.T) {
	for _, tc := range []struct {
		in, fence, closed string
	}{
		{"plain", "```", "plain"},
		{"a ``` b", "````", "a ``` b"},
		{"```go\ncode\n```\n", "````", "```go\ncode\n```\n"},
		{"text\n```\nopen", "````", "text\n```\nopen\n```"},
		{"~~~~\nopen\n~~~\n", "```", "~~~~\nopen\n~~~\n~~~~"},
		{"    ```\nindented is code, not a fence", "````", "    ```\nindented is code, not a fence"},
	} {
		if got := fence(tc.in); got != tc.fence {
			t.Errorf("fence(%q) = %q, want %q", tc.in, got, tc.fence)
		}
		if got := closeFences(tc.in); got != tc.closed {
			t.Errorf("closeFences(%q) = %q, want %q", tc.in, got, tc.closed)
		}
	}
}

// TestExportEscapes renders adversarial text in every field the page shows and checks that no
// markup of the transcript survives in the HTML, and that Markdown prose cannot open raw HTML.
func TestExportEscapes(t *testing.T) {
	const evil = `</pre></div><script>alert(1)</script><img src=x onerror=alert(2)>"'&`
	d := &exportDoc{
		Title: evil, SessionID: evil, Cwd: evil, Created: evil, LeafID: evil,
		Items: []exportItem{{
			ID: evil, Kind: `user" onclick="x`, Heading: evil, Timestamp: evil, Label: evil,
			Parts: []exportPart{
				{Kind: "text", Text: evil}, {Kind: "thinking", Text: evil},
				{Kind: "note", Text: evil}, {Kind: "code", Title: evil, Text: evil},
			},
		}},
	}
	var h bytes.Buffer
	if err := writeHTML(&h, d); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	for _, bad := range []string{"<script", "<img", "</pre></div>", `onclick="x`} {
		if strings.Contains(page, bad) {
			t.Errorf("html export contains %q", bad)
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("html export lost the escaped text")
	}
	var m bytes.Buffer
	if err := writeMarkdown(&m, d); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(m.String()) {
		// Raw markup may appear only inside code spans and fences, which viewers show literally.
		if strings.Contains(line, "<script") && !strings.HasPrefix(line, "- ") && !strings.Contains(line, "`<") && line != evil+"\n" {
			t.Errorf("markdown prose line carries raw markup: %q", line)
		}
	}
	if !strings.Contains(m.String(), "\n&lt;/pre&gt;&lt;/div&gt;&lt;script&gt;") {
		t.Errorf("markdown prose not escaped:\n%s", m.String())
	}
}
