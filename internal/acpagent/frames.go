package acpagent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
)

// Limits on one frame (one line) of the client's input. The ACP SDK's reader drops a line it
// cannot parse without answering (the client waits forever for its request), and ends the
// connection, and with it every session of the editor, at a line over 10 MB. So every line is
// checked here first: one the SDK would mishandle is answered with a JSON-RPC error and
// dropped, and `nexus acp` goes on with the next.
const (
	// MaxFrameBytes bounds one frame: under the SDK's 10 MB, so a bigger frame is answered
	// and dropped instead of ending the connection.
	MaxFrameBytes = 8 << 20
	// MaxFrameDepth bounds how deeply a frame's JSON may nest (encoding/json gives up at
	// 10000 levels, which the SDK would drop unanswered).
	MaxFrameDepth = 512
)

// maxHead bounds what is kept of an over-long line, to find its id.
const maxHead = 64 << 10

// JSON-RPC error codes of malformed frames.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
)

// lockedWriter serializes the SDK's messages with the guard's answers, so lines never
// interleave (the SDK writes each message in one Write), and notes the answers written.
type lockedWriter struct {
	mu      sync.Mutex
	w       io.Writer
	pending *pending
}

// responsePrefix begins every message the SDK writes with an id (it encodes jsonrpc, id, method
// in that order): a response, or a request of the agent's when "method" follows the id.
var responsePrefix = []byte(`{"jsonrpc":"2.0","id":`)

func (w *lockedWriter) Write(p []byte) (int, error) {
	var id string
	if w.pending != nil && bytes.HasPrefix(p, responsePrefix) {
		id = answeredID(p)
	}
	w.mu.Lock()
	n, err := w.w.Write(p)
	w.mu.Unlock()
	if id != "" {
		// Counted as answered even if the write failed: nobody will read it anyway.
		w.pending.done(id)
	}
	return n, err //nolint:wrapcheck // a writer passes its errors through
}

// answeredID is the id of a response (compact JSON), "" for a request.
func answeredID(p []byte) string {
	dec := json.NewDecoder(bytes.NewReader(p))
	var raw json.RawMessage
	for _, want := range []string{"{", "jsonrpc", "", "id"} {
		t, err := dec.Token()
		if err != nil {
			return ""
		}
		if want != "" && fmt.Sprint(t) != want && t != json.Delim('{') {
			return ""
		}
	}
	if dec.Decode(&raw) != nil {
		return ""
	}
	if t, err := dec.Token(); err != nil || t == "method" {
		return ""
	}
	return compactID(raw)
}

func compactID(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return ""
	}
	return b.String()
}

// pending counts the client's requests passed on and not answered yet, but prompts: the end of
// the input waits for them (a client that writes its requests and closes stdin still gets its
// answers, as from nexus mcp), while a prompt's turn is interrupted when the client goes.
type pending struct {
	mu   sync.Mutex
	n    map[string]int
	idle chan struct{} // closed whenever n is empty
}

func newPending() *pending {
	idle := make(chan struct{})
	close(idle)
	return &pending{n: map[string]int{}, idle: idle}
}

func (p *pending) add(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.n) == 0 {
		p.idle = make(chan struct{})
	}
	p.n[id]++
}

func (p *pending) done(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.n[id]
	switch {
	case !ok:
		return
	case c > 1:
		p.n[id] = c - 1
		return
	}
	delete(p.n, id)
	if len(p.n) == 0 {
		close(p.idle)
	}
}

func (p *pending) wait(stop <-chan struct{}) {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
	case <-stop:
	}
}

// guard is the SDK's input: the client's lines, each checked; valid frames are passed on, the
// others answered and dropped.
type guard struct {
	// start is closed once the agent holds its connection: the SDK starts reading at once,
	// and a request handled before then would find no connection to send updates on.
	start   chan struct{}
	stop    <-chan struct{} // the end of input stops waiting for answers
	pending *pending
	// notify takes the client's notifications, which are not passed on (see
	// Agent.notification); nil passes them on.
	notify   func(method string, params json.RawMessage)
	br       *bufio.Reader
	w        io.Writer
	log      *slog.Logger
	maxLine  int
	maxDepth int

	line  []byte
	over  int    // bytes of the current line past maxLine (0: not too long)
	ready []byte // a checked frame and its newline, not yet read by the SDK
	err   error
}

func newGuard(in io.Reader, w *lockedWriter, stop <-chan struct{}, log *slog.Logger) *guard {
	if w.pending == nil {
		w.pending = newPending()
	}
	return &guard{start: make(chan struct{}), stop: stop, pending: w.pending, br: bufio.NewReaderSize(in, 64<<10),
		w: w, log: log, maxLine: MaxFrameBytes, maxDepth: MaxFrameDepth}
}

func (g *guard) Read(p []byte) (int, error) {
	<-g.start
	for len(g.ready) == 0 {
		if g.err != nil {
			if errors.Is(g.err, io.EOF) {
				g.pending.wait(g.stop)
			}
			return 0, g.err
		}
		g.next()
	}
	n := copy(p, g.ready)
	g.ready = g.ready[n:]
	return n, nil
}

func (g *guard) next() {
	for {
		frag, err := g.br.ReadSlice('\n')
		if g.over == 0 && len(g.line)+len(frag) <= g.maxLine {
			g.line = append(g.line, frag...)
		} else {
			if g.over == 0 {
				g.over = len(g.line)
				g.line = g.line[:min(len(g.line), maxHead)]
			}
			g.over += len(frag)
			if room := maxHead - len(g.line); room > 0 {
				g.line = append(g.line, frag[:min(room, len(frag))]...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(g.line) > 0 || g.over > 0 {
			g.check()
		}
		if err != nil {
			g.err = err
		}
		return
	}
}

func (g *guard) check() {
	line, over := g.line, g.over
	defer func() {
		if cap(g.line) > 1<<20 {
			g.line = nil // a big frame passed: do not keep its buffer
		} else {
			g.line = g.line[:0]
		}
		g.over = 0
	}()
	if over > 0 {
		g.refuse(codeParseError, idFromHead(line), fmt.Sprintf(
			"Parse error: a frame of %d bytes is over the limit of %d bytes; it was dropped", over, g.maxLine))
		return
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if err := checkDepth(line, g.maxDepth); err != nil {
		g.refuse(codeParseError, nil, "Parse error: "+err.Error())
		return
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		g.refuse(codeParseError, nil, fmt.Sprintf(
			"Parse error: the line is not JSON (%v); send each JSON-RPC message as one line of JSON", err))
		return
	}
	if why, id := invalidMessage(line); why != "" {
		g.refuse(codeInvalidRequest, id, "Invalid request: "+why)
		return
	}
	id, method, params := requestOf(line)
	if method != "" && id == "" && g.notify != nil {
		g.notify(method, params)
		return
	}
	if id != "" && method != "session/prompt" {
		g.pending.add(id)
	}
	g.ready = append(append(g.ready[:0], line...), '\n')
}

// invalidMessage says why a line of valid JSON is not a JSON-RPC 2.0 message the SDK can
// handle, with its id when it has a usable one ("" when it is one).
func invalidMessage(line []byte) (string, any) {
	if line[0] == '[' {
		return "ACP does not use JSON-RPC batches; send one message per line", nil
	}
	if line[0] != '{' {
		return "a JSON-RPC message is a JSON object", nil
	}
	var m struct {
		JSONRPC *string          `json:"jsonrpc"`
		ID      *json.RawMessage `json:"id"`
		Method  *json.RawMessage `json:"method"`
		Result  *json.RawMessage `json:"result"`
		Error   *json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Sprintf("a member has the wrong type (%v)", err), nil
	}
	var id any
	if m.ID != nil {
		var v any
		_ = json.Unmarshal(*m.ID, &v)
		switch v.(type) {
		case string, float64, nil:
			id = v
		default:
			return "id must be a string, a number or null", nil
		}
	}
	switch {
	case m.JSONRPC == nil || *m.JSONRPC != "2.0":
		return `"jsonrpc" must be "2.0"`, id
	case m.Method != nil:
		var s string
		if json.Unmarshal(*m.Method, &s) != nil || s == "" {
			return "method must be a non-empty string", id
		}
	case m.ID == nil:
		return "a message needs a method (a request or notification) or an id (a response)", nil
	case m.Result == nil && m.Error == nil:
		return "a response needs a result or an error", id
	}
	return "", nil
}

// requestOf is a message's method, params and id (compact JSON; "" for a notification or a
// response, whose method is "").
func requestOf(line []byte) (id, method string, params json.RawMessage) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || m.Method == "" {
		return "", "", nil
	}
	if len(m.ID) > 0 && string(m.ID) != "null" {
		id = compactID(m.ID)
	}
	return id, m.Method, m.Params
}

func (g *guard) refuse(code int, id any, msg string) {
	g.log.Warn("refused a frame from the client", "code", code, "error", msg)
	_, _ = g.w.Write(errorLine(code, id, msg))
}

// errorLine is a JSON-RPC error response (id null when id is nil) with its newline.
func errorLine(code int, id any, msg string) []byte {
	type wireErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	b, err := json.Marshal(struct {
		JSONRPC string  `json:"jsonrpc"`
		ID      any     `json:"id"`
		Error   wireErr `json:"error"`
	}{"2.0", id, wireErr{code, msg}})
	if err != nil {
		b, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": wireErr{code, msg}})
	}
	return append(b, '\n')
}

// checkDepth fails when JSON nests deeper than maxDepth, counting brackets outside strings in
// one loop (no recursion).
func checkDepth(b []byte, maxDepth int) error {
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

// idFromHead finds the top-level "id" of a frame cut short, if it comes before the cut.
func idFromHead(head []byte) any {
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
