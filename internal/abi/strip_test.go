package abi

import (
	"testing"

	"github.com/charmbracelet/x/ansi"
)

var stripCases = []string{
	"",
	"plain text\r\n",
	"\x1b[1;31mred\x1b[0m and \x1b[38;2;1;2;3mtrue colour\x1b[m",
	"\x1b]0;window title\x07prompt$ ",
	"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
	"\x1bP1$r0m\x1b\\dcs done",
	"\x1b[?2004hbracketed\x1b[?2004l",
	"progress 10%\rprogress 100%\r\n",
	"tab\there\x08back",
	"€uro ünïcödé 日本語 🎉",
	"\x1b(Bcharset\x1b)0",
	"\x9b31mC1 CSI\x9c",
	"broken \xff\xfe bytes \xe2\x82",
	"\x1b[",
	"\x1b]unterminated osc",
	"\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\end",
}

// TestStripANSIMatchesCharmbracelet holds StripANSI to the library it replaces.
func TestStripANSIMatchesCharmbracelet(t *testing.T) {
	for _, tc := range stripCases {
		if got, want := StripANSI([]byte(tc)), ansi.Strip(tc); got != want {
			t.Errorf("StripANSI(%q) = %q, ansi.Strip = %q", tc, got, want)
		}
	}
}

func FuzzStripANSI(f *testing.F) {
	for _, tc := range stripCases {
		f.Add([]byte(tc))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := StripANSI(b), ansi.Strip(string(b)); got != want {
			t.Fatalf("StripANSI(%q) = %q, ansi.Strip = %q", b, got, want)
		}
	})
}

func BenchmarkStripANSI(b *testing.B) {
	in := []byte("\x1b[1;32mok\x1b[0m   github.com/nexus-run/nexus/internal/runtime\t0.052s\r\n")
	for range 6 {
		in = append(in, in...)
	}
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		_ = StripANSI(in)
	}
}
