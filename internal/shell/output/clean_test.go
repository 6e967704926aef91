package output

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
	"github.com/nexus-run/nexus/internal/shell"
)

// collect runs in through a collector with budget b in one Write.
func collect(t testing.TB, b shell.Budget, r *Redactor, in string) (string, shell.StreamReport, bool) {
	t.Helper()
	c, err := NewCollector(b, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	return c.Finish()
}

func TestClean(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain", "hello\nworld\n", "hello\nworld\n"},
		{"no final newline", "a\nb", "a\nb"},
		{"sgr colours", "\x1b[1;31mred\x1b[0m and \x1b[38;2;1;2;3mtrue colour\x1b[m\n", "red and true colour\n"},
		{"osc title bel", "\x1b]0;window title\x07prompt$ \n", "prompt$ \n"},
		{"osc 8 hyperlink", "see \x1b]8;;https://example.com/x?a=1\x1b\\the docs\x1b]8;;\x1b\\ now\n", "see the docs now\n"},
		{"osc 8 with params and bel", "\x1b]8;id=1;file:///tmp/a\x07a\x1b]8;;\x07\n", "a\n"},
		{"dcs", "\x1bP1$r0m\x1b\\dcs done\n", "dcs done\n"},
		{"apc pm sos", "\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\end\n", "end\n"},
		{"private modes", "\x1b[?2004hbracketed\x1b[?2004l\x1b[?25l\n", "bracketed\n"},
		{"charset", "\x1b(Bcharset\x1b)0\x1b7\x1b8\n", "charset\n"},
		{"cursor moves and erase", "\x1b[2K\x1b[1G\x1b[3Aup\x1b[K\n", "up\n"},
		{"cr frames", "a\rb\rc\n", "c\n"},
		{"progress bar", "  0%\r 50%\r100%\r\ndone\n", "100%\ndone\n"},
		{"crlf", "one\r\ntwo\r\n", "one\ntwo\n"},
		{"cr at end of stream", "50%\r100%\r", "100%"},
		{"cr then erase-line sequence", "50%\r\x1b[K100%\n", "100%\n"},
		{"shorter last frame", "downloading 100%\rdone\n", "done\n"},
		{"backspace", "abc\b\bX\n", "aX\n"},
		{"overstrike", "N\bNA\bAM\bME\bE\n", "NAME\n"},
		{"backspace at line start", "\bx\n", "x\n"},
		{"tab kept", "a\tb\n", "a\tb\n"},
		{"nul and controls", "a\x00b\x01c\x07d\x0be\x0cf\x7fg\x1ah\n", "abcdefgh\n"},
		{"invalid utf8", "broken \xff\xfe bytes \xe2\x82\n", "broken \ufffd\ufffd bytes \ufffd\ufffd\n"},
		{"invalid utf8 at end", "x\xe2\x82", "x\ufffd\ufffd"},
		{"valid utf8", "€uro ünïcödé 日本語 🎉\n", "€uro ünïcödé 日本語 🎉\n"},
		{"replacement char kept", "\ufffd\n", "\ufffd\n"},
		{"8-bit bytes are not C1 controls", "\x9b31mX\n", "\ufffd31mX\n"},
		{"C1 code points removed", "a\u009b31mb\u0085c\n", "a31mbc\n"},
		{"utf8 inside osc", "\x1b]0;títle ✜\x07ok\n", "ok\n"},
		{"newline inside csi", "\x1b[1\n;31mX\n", "\nX\n"},
		{"unterminated csi at end", "ok\n\x1b[", "ok\n"},
		{"unterminated osc swallows", "ok\n\x1b]unterminated\nstill\n", "ok\n"},
		{"can aborts", "\x1b[31\x18X\n", "X\n"},
		{"empty last line not counted", "a\n\x1b[0m", "a\n"},
		{"empty lines", "\n\n", "\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _, _ := collect(t, shell.Budget{}, nil, tc.in)
			if got != tc.want {
				t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got2 := collectChunked(t, shell.Budget{}, nil, tc.in, 1); got2 != got {
				t.Errorf("byte by byte: %q, one write: %q", got2, got)
			}
		})
	}
}

func TestCleanLineCount(t *testing.T) {
	cases := []struct {
		in    string
		lines int
	}{
		{"", 0}, {"a", 1}, {"a\n", 1}, {"a\nb", 2}, {"\n", 1}, {"\n\n", 2}, {"a\n\x1b[0m", 1},
		{"x\r", 1}, {"a\r\n", 1}, {"\x1b[31m\n", 1},
	}
	for _, tc := range cases {
		_, rep, _ := collect(t, shell.Budget{}, nil, tc.in)
		if rep.LinesTotal != tc.lines || rep.LinesKept != tc.lines {
			t.Errorf("%q: lines_total %d lines_kept %d, want %d", tc.in, rep.LinesTotal, rep.LinesKept, tc.lines)
		}
	}
}

// TestCleanSequenceCap: a string sequence that never ends swallows at most maxSeqBytes.
func TestCleanSequenceCap(t *testing.T) {
	in := "\x1b]" + strings.Repeat("x", maxSeqBytes+10) + "\nvisible\n"
	got, _, _ := collect(t, shell.Budget{}, nil, in)
	if !strings.HasSuffix(got, "\nvisible\n") || len(got) > 100 {
		t.Fatalf("got %d bytes ending %q", len(got), got[max(0, len(got)-20):])
	}
}

// TestCleanMatchesStripForSequences holds the escape-sequence walk to charmbracelet's Strip on
// ASCII text mixed with escape sequences (where the two should agree, after removing the C0
// controls Strip keeps).
func TestCleanMatchesStripForSequences(t *testing.T) {
	vocab := []string{
		"text", " ", "x", "\x1b[31m", "\x1b[0m", "\x1b[?25h", "\x1b]0;title\x07", "\x1b]8;;http://a\x1b\\",
		"\x1bP1$r\x1b\\", "\x1b_apc\x1b\\", "\x1b(B", "\x1b7", "\x1b[", "\x1b]", "\x1b", "\x07", "\x1b[1;2;3", "m",
		"\x18", "\x1b[38:2:1:2:3m", "\x1bc", "\t", ";", "[", "]",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString(vocab[rng.IntN(len(vocab))])
		}
		in := b.String()
		want := strings.Map(func(r rune) rune {
			if r < 0x20 && r != '\t' || r == 0x7f {
				return -1
			}
			return r
		}, ansi.Strip(in))
		got, _, _ := collect(t, shell.Budget{}, nil, in)
		if got != want {
			t.Fatalf("clean(%q) = %q, Strip = %q", in, got, want)
		}
	}
}
