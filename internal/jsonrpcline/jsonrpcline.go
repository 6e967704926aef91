// Package jsonrpcline reads newline-delimited JSON-RPC input one bounded, checked line at a
// time, for the stdio servers whose SDKs mishandle bad input (internal/mcp's `nexus mcp`,
// internal/acpagent's `nexus acp`): a line over the length limit, nested too deeply or not
// JSON is turned into the JSON-RPC error that answers it instead of reaching the SDK, which
// would end the connection or leave the client waiting.
package jsonrpcline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// JSON-RPC 2.0 error codes of malformed input.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
)

// MaxHead bounds what is kept of an over-long line, to find its id.
const MaxHead = 64 << 10

// Refusal is the answer to a line that is refused: a JSON-RPC error with the line's id when
// one could be read (nil otherwise).
type Refusal struct {
	Code    int
	ID      any
	Message string
}

// Reader reads lines of at most MaxLine bytes from its input. The bytes of a longer line are
// read and dropped (only its head is kept, to find its id), so no line holds more memory than
// the limit.
type Reader struct {
	br       *bufio.Reader
	maxLine  int
	maxDepth int
	// noun names a line in refusals ("message", "frame").
	noun string

	line []byte // the current line, up to maxLine bytes
	over int    // bytes of the current line past maxLine (0: not too long)
}

// NewReader reads in's lines, refusing those longer than maxLine bytes or nested deeper than
// maxDepth; noun is what a refusal calls a line ("a message of N bytes").
func NewReader(in io.Reader, maxLine, maxDepth int, noun string) *Reader {
	return &Reader{br: bufio.NewReaderSize(in, 64<<10), maxLine: maxLine, maxDepth: maxDepth, noun: noun}
}

// Next reads one line. It returns the line, trimmed and valid JSON within the limits (valid
// until the next call), or the refusal that answers it, or neither for a blank line; err is
// the input's error (io.EOF at its end), returned with what an unterminated last line gave.
func (r *Reader) Next() (line []byte, refused *Refusal, err error) {
	if cap(r.line) > 1<<20 {
		r.line = nil // a big line passed: do not keep its buffer
	} else {
		r.line = r.line[:0]
	}
	r.over = 0
	for {
		frag, err := r.br.ReadSlice('\n')
		if r.over == 0 && len(r.line)+len(frag) <= r.maxLine {
			r.line = append(r.line, frag...)
		} else {
			if r.over == 0 {
				r.over = len(r.line)
				r.line = r.line[:min(len(r.line), MaxHead)]
			}
			r.over += len(frag)
			if room := MaxHead - len(r.line); room > 0 {
				r.line = append(r.line, frag[:min(room, len(frag))]...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(r.line) > 0 || r.over > 0 {
			line, refused = r.check()
		}
		return line, refused, err //nolint:wrapcheck // the input's own error (io.EOF)
	}
}

func (r *Reader) check() ([]byte, *Refusal) {
	if r.over > 0 {
		return nil, &Refusal{CodeParseError, IDFromHead(r.line), fmt.Sprintf(
			"Parse error: a %s of %d bytes is over the limit of %d bytes; it was dropped", r.noun, r.over, r.maxLine)}
	}
	line := bytes.TrimSpace(r.line)
	if len(line) == 0 {
		return nil, nil
	}
	if err := CheckDepth(line, r.maxDepth); err != nil {
		return nil, &Refusal{CodeParseError, nil, "Parse error: " + err.Error()}
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		return nil, &Refusal{CodeParseError, nil, fmt.Sprintf(
			"Parse error: the line is not JSON (%v); send each JSON-RPC message as one line of JSON", err)}
	}
	return line, nil
}

// ErrorLine is a JSON-RPC error response (id null when id is nil) with its newline.
func ErrorLine(code int, id any, msg string) []byte {
	type wireErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, err := json.Marshal(struct {
		JSONRPC string  `json:"jsonrpc"`
		ID      any     `json:"id"`
		Error   wireErr `json:"error"`
	}{"2.0", id, wireErr{code, msg}})
	if err != nil { // an id that will not encode: answer with id null
		b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": wireErr{code, msg}})
	}
	return append(b, '\n')
}

// CheckDepth fails when JSON nests deeper than maxDepth. It counts brackets outside strings in
// one loop (no recursion), so no input can exhaust the stack.
func CheckDepth(b []byte, maxDepth int) error {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > maxDepth {
				return fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// IDFromHead finds the id of a message cut short (the head of an over-long line): the
// top-level "id" member when it comes before the cut and is a string or a number.
func IDFromHead(head []byte) any {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if t == "id" {
			switch v.(type) {
			case string, float64:
				return v
			}
			return nil
		}
	}
	return nil
}

// Input is an SDK transport's input: the lines of a Reader that pass, each with its newline.
// A refused line is answered by refuse, and a line within the limits is passed on when
// check says so (check answers the others itself).
type Input struct {
	lines  *Reader
	check  func(line []byte) bool
	refuse func(Refusal)
	// drain runs before the end of input is returned: the requests passed on are answered
	// first (an SDK would cancel them at once).
	drain func()

	ready []byte // a line passed and its newline, not yet read
	err   error  // the input's error, returned once ready is empty
}

// NewInput reads r's lines; drain may be nil.
func NewInput(r *Reader, check func(line []byte) bool, refuse func(Refusal), drain func()) *Input {
	return &Input{lines: r, check: check, refuse: refuse, drain: drain}
}

func (in *Input) Read(p []byte) (int, error) {
	for len(in.ready) == 0 {
		if in.err != nil {
			if errors.Is(in.err, io.EOF) && in.drain != nil {
				in.drain()
			}
			return 0, in.err
		}
		line, refused, err := in.lines.Next()
		switch {
		case refused != nil:
			in.refuse(*refused)
		case line != nil && in.check(line):
			in.ready = append(append(in.ready[:0], line...), '\n')
		}
		in.err = err
	}
	n := copy(p, in.ready)
	in.ready = in.ready[n:]
	return n, nil
}
