package jsonrpcline_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/jsonrpcline"
)

func TestCheckDepth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		fail bool
	}{
		{`{"a":[1,{"b":2}]}`, 3, false},
		{`{"a":[1,{"b":2}]}`, 2, true},
		{`"[[[[[[[["`, 1, false}, // brackets inside a string do not nest
		{`["\"", [[1]]]`, 3, false},
		{`["\"", [[1]]]`, 2, true},
		{strings.Repeat("[", 100000), 512, true},
	} {
		if err := jsonrpcline.CheckDepth([]byte(tc.in), tc.max); (err != nil) != tc.fail {
			t.Errorf("CheckDepth(%.30q, %d) = %v", tc.in, tc.max, err)
		}
	}
}

// TestReader: each line is passed on checked, refused with the answer's code and id, or
// skipped when blank; a line over the limit is dropped whole (the next one is read as it is),
// and an unterminated last line comes with io.EOF.
func TestReader(t *testing.T) {
	long := `{"jsonrpc":"2.0","id":"big","params":"` + strings.Repeat("x", 200) + `"}`
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"a"}`,
		"   ",
		long,
		`{"id":2,`,
		`[[[[1]]]]`,
		` {"jsonrpc":"2.0","method":"last"}`,
	}, "\n")
	r := jsonrpcline.NewReader(strings.NewReader(in), 100, 3, "frame")
	type got struct {
		line    string
		code    int
		id      any
		message string
		err     error
	}
	want := []got{
		{line: `{"jsonrpc":"2.0","id":1,"method":"a"}`},
		{},
		{code: jsonrpcline.CodeParseError, id: "big", message: "a frame of 241 bytes is over the limit of 100 bytes"},
		{code: jsonrpcline.CodeParseError, message: "not JSON"},
		{code: jsonrpcline.CodeParseError, message: "nested deeper than 3"},
		{line: `{"jsonrpc":"2.0","method":"last"}`, err: io.EOF},
	}
	for i, w := range want {
		line, refused, err := r.Next()
		if string(line) != w.line || !errors.Is(err, w.err) {
			t.Fatalf("line %d: %q, %v; want %q, %v", i, line, err, w.line, w.err)
		}
		switch {
		case w.code == 0 && refused != nil:
			t.Fatalf("line %d refused: %+v", i, refused)
		case w.code != 0 && (refused == nil || refused.Code != w.code || refused.ID != w.id || !strings.Contains(refused.Message, w.message)):
			t.Fatalf("line %d: refusal %+v; want code %d, id %v, %q", i, refused, w.code, w.id, w.message)
		}
	}
}

func TestErrorLine(t *testing.T) {
	for _, tc := range []struct {
		id   any
		want string
	}{
		{"a", `{"jsonrpc":"2.0","id":"a","error":{"code":-32600,"message":"no"}}` + "\n"},
		{nil, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}` + "\n"},
		{func() {}, `{"error":{"code":-32600,"message":"no"},"id":null,"jsonrpc":"2.0"}` + "\n"}, // will not encode
	} {
		if got := string(jsonrpcline.ErrorLine(jsonrpcline.CodeInvalidRequest, tc.id, "no")); got != tc.want {
			t.Errorf("ErrorLine(%v) = %s, want %s", tc.id, got, tc.want)
		}
	}
}

// TestInput: the lines check passes are read with their newlines, the others not; a refused
// line is answered; the end of input comes after drain.
func TestInput(t *testing.T) {
	var refused []jsonrpcline.Refusal
	drained := false
	in := jsonrpcline.NewInput(jsonrpcline.NewReader(strings.NewReader("{\"a\":1}\n{\"b\":2}\nnot json\n{\"c\":3}"), 100, 8, "line"),
		func(line []byte) bool { return !strings.Contains(string(line), "b") },
		func(r jsonrpcline.Refusal) { refused = append(refused, r) },
		func() { drained = true })
	got, err := io.ReadAll(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "{\"a\":1}\n{\"c\":3}\n" || len(refused) != 1 || refused[0].Code != jsonrpcline.CodeParseError || !drained {
		t.Fatalf("read %q, refused %+v, drained %v", got, refused, drained)
	}
}
