package abi_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
)

func TestValidUTF8Prefix(t *testing.T) {
	euro := "\xe2\x82\xac"     // €, 3 bytes
	grin := "\xf0\x9f\x98\x80" // 😀, 4 bytes
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"empty", "", 0},
		{"ascii", "hello", 5},
		{"complete 2-byte", "caf\xc3\xa9", 5},
		{"2-byte cut after lead", "caf\xc3", 3},
		{"complete 3-byte", "a" + euro, 4},
		{"3-byte cut after 1", "a" + euro[:1], 1},
		{"3-byte cut after 2", "a" + euro[:2], 1},
		{"complete 4-byte", "ab" + grin, 6},
		{"4-byte cut after 1", "ab" + grin[:1], 2},
		{"4-byte cut after 2", "ab" + grin[:2], 2},
		{"4-byte cut after 3", "ab" + grin[:3], 2},
		{"only a partial", grin[:3], 0},
		{"two characters, second cut", euro + grin[:2], 3},
		{"ends with escape sequence", "\x1b[0m", 4},
		// Invalid bytes are not held back forever: they are passed on (and rendered as U+FFFD).
		{"stray continuation byte", "a\x80", 2},
		{"invalid lead 0xff", "a\xff", 2},
		{"five continuation bytes", "a\x80\x80\x80\x80\x80", 6},
		{"overlong lead then complete", "\xc0\xaf", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := abi.ValidUTF8Prefix([]byte(tc.in)); got != tc.want {
				t.Errorf("ValidUTF8Prefix(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

// TestValidUTF8PrefixEveryCut: for valid text cut at any byte, the prefix ends at the last
// character boundary at or before the cut.
func TestValidUTF8PrefixEveryCut(t *testing.T) {
	s := []byte("héllo €uro 😀 日本語 ok")
	for i := 0; i <= len(s); i++ {
		got := abi.ValidUTF8Prefix(s[:i])
		want := i
		for want > 0 && want < len(s) && !utf8.RuneStart(s[want]) {
			want--
		}
		if got != want {
			t.Errorf("cut at %d: ValidUTF8Prefix = %d, want %d", i, got, want)
		}
		if !utf8.Valid(s[:got]) {
			t.Errorf("cut at %d: prefix %q is not valid UTF-8", i, s[:got])
		}
	}
}

// TestValidUTF8PrefixStreaming: a stream read in chunks of every size and forwarded up to the
// valid prefix (carrying the rest into the next chunk) yields valid pieces whose concatenation
// is the original text.
func TestValidUTF8PrefixStreaming(t *testing.T) {
	src := []byte("ascii, é, €, 😀, 日本語 and \x1b[32mcolour\x1b[0m")
	for size := 1; size <= 8; size++ {
		var out, carry []byte
		for off := 0; off < len(src); off += size {
			end := min(off+size, len(src))
			buf := append(carry, src[off:end]...)
			n := abi.ValidUTF8Prefix(buf)
			if !utf8.Valid(buf[:n]) {
				t.Fatalf("size %d: forwarded invalid piece %q", size, buf[:n])
			}
			out = append(out, buf[:n]...)
			carry = append([]byte(nil), buf[n:]...)
		}
		out = append(out, carry...)
		if !bytes.Equal(out, src) {
			t.Errorf("size %d: reassembled %q", size, out)
		}
	}
}

func TestNewTerminalOutput(t *testing.T) {
	in := []byte("\x1b[1;31mred\x1b[0m \x1b]0;title\x07plain\r\n")
	tests := []struct {
		ct          abi.ContentType
		wantType    abi.ContentType
		wantContent string
	}{
		{abi.ContentANSI, abi.ContentANSI, string(in)},
		{"", abi.ContentANSI, string(in)},
		{"bogus", abi.ContentANSI, string(in)},
		{abi.ContentText, abi.ContentText, "red plain\r\n"},
		{abi.ContentRaw, abi.ContentRaw, base64.StdEncoding.EncodeToString(in)},
	}
	for _, tc := range tests {
		t.Run(string(tc.ct), func(t *testing.T) {
			o := abi.NewTerminalOutput(in, tc.ct)
			if o.Type != abi.PayloadTerminalOutput || o.ContentType != tc.wantType || o.Content != tc.wantContent {
				t.Errorf("NewTerminalOutput(%q) = %+v, want content %q type %s", tc.ct, o, tc.wantContent, tc.wantType)
			}
		})
	}
}

// TestTerminalOutputRawRoundTrip: raw carries the exact bytes, whatever they are, through JSON.
func TestTerminalOutputRawRoundTrip(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	inputs := map[string][]byte{
		"every byte":   all,
		"invalid utf8": []byte("a\xff\xfe\xc3"),
		"split rune":   []byte("\xf0\x9f"),
		"nul":          {0, 0, 0},
		"empty":        {},
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			wire, err := json.Marshal(abi.NewTerminalOutput(in, abi.ContentRaw))
			if err != nil {
				t.Fatal(err)
			}
			var back abi.TerminalOutput
			if err := abi.DecodeStrict(wire, &back); err != nil {
				t.Fatal(err)
			}
			got, err := back.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, in) {
				t.Errorf("raw round trip: got %q, want %q", got, in)
			}
		})
	}
}

func TestTerminalOutputBytes(t *testing.T) {
	o := abi.NewTerminalOutput([]byte("caf\xc3\xa9 \x1b[0m"), abi.ContentANSI)
	if b, err := o.Bytes(); err != nil || string(b) != "caf\xc3\xa9 \x1b[0m" {
		t.Errorf("ansi Bytes = %q, %v", b, err)
	}
	o = abi.NewTerminalOutput([]byte("caf\xc3\xa9 \x1b[0m"), abi.ContentText)
	if b, err := o.Bytes(); err != nil || string(b) != "caf\xc3\xa9 " {
		t.Errorf("text Bytes = %q, %v", b, err)
	}
	bad := abi.TerminalOutput{Type: abi.PayloadTerminalOutput, ContentType: abi.ContentRaw, Content: "not base64!"}
	if _, err := bad.Bytes(); err == nil {
		t.Error("Bytes of invalid base64 succeeded")
	}
}
