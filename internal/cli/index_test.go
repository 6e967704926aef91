package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/index"
)

func TestParseIndexSince(t *testing.T) {
	now := time.Date(2026, 3, 15, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"24h", now.Add(-24 * time.Hour)},
		{"90m", now.Add(-90 * time.Minute)},
		{"0s", now},
		{"7d", time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)},
		{"2w", time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{"0d", now},
		{"2026-01-02", time.Date(2026, 1, 2, 0, 0, 0, 0, time.Local)},
		{"2026-01-02T03:04:05Z", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{"2026-01-02T03:04:05+02:00", time.Date(2026, 1, 2, 1, 4, 5, 0, time.UTC)},
	} {
		got, err := parseIndexSince(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseIndexSince(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-24h", "7", "d", "1.5d", "7x", "2026-13-01", "99999999999d"} {
		if _, err := parseIndexSince(bad, now); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("parseIndexSince(%q): %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

func TestRenderMarks(t *testing.T) {
	for _, tc := range []struct{ in, plain, bold string }{
		{"a \ue000b\ue001 c", "a **b** c", "a \x1b[1mb\x1b[22m c"},
		{"\ue000x\ue001 and \ue000y\ue001", "**x** and **y**", "\x1b[1mx\x1b[22m and \x1b[1my\x1b[22m"},
		// A snippet cut inside a match still ends the bold.
		{"cut \ue000ma…", "cut **ma…", "cut \x1b[1mma…\x1b[22m"},
		// Markdown in the text is text.
		{"use **bold** for \ue000emphasis\ue001", "use **bold** for **emphasis**", "use **bold** for \x1b[1memphasis\x1b[22m"},
		{"none", "none", "none"},
	} {
		if got := renderMarks(tc.in, false); got != tc.plain {
			t.Errorf("plain %q = %q", tc.in, got)
		}
		if got := renderMarks(tc.in, true); got != tc.bold {
			t.Errorf("bold %q = %q, want %q", tc.in, got, tc.bold)
		}
	}
}

// A transcript's text is printed for a person: escape sequences and bidi overrides in it are
// shown, never sent to the terminal.
func TestPrintable(t *testing.T) {
	in := "ok\tline\nnext \x1b[31mred\x1b[0m \u202eevil\u202c \x00 bad\xffbyte"
	want := "ok\tline\nnext \\x1b[31mred\\x1b[0m \\u202eevil\\u202c \\x00 bad\uFFFDbyte"
	if got := printable(in); got != want {
		t.Fatalf("printable = %q, want %q", got, want)
	}
	var buf bytes.Buffer
	d := &index.SessionDetail{
		Session: index.SessionInfo{Source: "pi", ID: "s\x1b]0;title\x07"},
		Messages: []index.Message{{ID: "m1", Role: "user", Text: "hi \x1b[2J there", ToolCalls: []index.ToolCall{
			{ID: "c1", Name: "bash\x1b[1m", Params: `{"command":"ls"}`, Result: "out\x1b[2J\n" + strings.Repeat("line\n", 20), Status: "ok"},
		}}},
	}
	if err := showTranscript(&buf, d, ""); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune(buf.Bytes(), 0x1b) || bytes.ContainsRune(buf.Bytes(), 0x07) {
		t.Fatalf("an escape reached the output:\n%q", buf.String())
	}
	if !strings.Contains(buf.String(), "     … 13 more lines\n") {
		t.Fatalf("a long result is not cut:\n%s", buf.String())
	}
}

func TestHitsTableBold(t *testing.T) {
	hits := []index.Hit{{Kind: "message", Source: "pi", Session: "0123456789abcdefghij", Role: "user",
		Timestamp: "2026-01-01T00:00:00.000Z", Snippet: "a \ue000walrus\ue001\x1b[2J\nhere", Show: "nexus index show x", Resume: "pi --session /x"}}
	var plain, bold bytes.Buffer
	if err := hitsTable(&plain, hits, false); err != nil {
		t.Fatal(err)
	}
	if err := hitsTable(&bold, hits, true); err != nil {
		t.Fatal(err)
	}
	want := "1  2026-01-01T00:00:00.000Z  pi  0123456789ab…  user  a **walrus** [2J here\n" +
		"   show:   nexus index show x\n" +
		"   resume: pi --session /x\n"
	if plain.String() != want {
		t.Fatalf("plain:\n%q\nwant\n%q", plain.String(), want)
	}
	if !strings.Contains(bold.String(), "a \x1b[1mwalrus\x1b[22m [2J here") {
		t.Fatalf("bold: %q", bold.String())
	}
}

// The progress line is redrawn at most every progressEvery, and always for the last file.
func TestProgressBar(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	p := &progressBar{w: &buf, now: func() time.Time { return now }}
	p.update(index.Progress{Files: 1, FilesTotal: 4, Bytes: 1_500_000})
	p.update(index.Progress{Files: 2, FilesTotal: 4, Bytes: 2_000_000}) // too soon
	now = now.Add(progressEvery)
	p.update(index.Progress{Files: 3, FilesTotal: 4, Bytes: 2_500_000})
	p.update(index.Progress{Files: 4, FilesTotal: 4, Bytes: 3_000_000}) // the last one
	p.clear()
	p.clear() // once only
	want := "\r\x1b[K[######                  ] 1/4 files, 1.5 MB" +
		"\r\x1b[K[##################      ] 3/4 files, 2.5 MB" +
		"\r\x1b[K[########################] 4/4 files, 3.0 MB" +
		"\r\x1b[K"
	if buf.String() != want {
		t.Fatalf("progress:\n%q\nwant\n%q", buf.String(), want)
	}
	var none *progressBar
	none.clear() // no bar: nothing to clear
	if got := progressLine(index.Progress{}); got != "[########################] 0/0 files, 0.0 MB" {
		t.Fatalf("no files: %q", got)
	}
}
