package acpagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/nexus-run/nexus/internal/jsonrpcline"
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
	notify func(method string, params json.RawMessage)
	in     *jsonrpcline.Input
	w      io.Writer
	log    *slog.Logger
}

func newGuard(in io.Reader, w *lockedWriter, stop <-chan struct{}, log *slog.Logger) *guard {
	if w.pending == nil {
		w.pending = newPending()
	}
	g := &guard{start: make(chan struct{}), stop: stop, pending: w.pending, w: w, log: log}
	g.in = jsonrpcline.NewInput(jsonrpcline.NewReader(in, MaxFrameBytes, MaxFrameDepth, "frame"), g.check,
		func(r jsonrpcline.Refusal) { g.refuse(r.Code, r.ID, r.Message) }, func() { g.pending.wait(g.stop) })
	return g
}

func (g *guard) Read(p []byte) (int, error) {
	<-g.start
	return g.in.Read(p) //nolint:wrapcheck // the input's own errors (io.EOF)
}

// check passes on a line of JSON that is a JSON-RPC message the SDK can handle, and answers
// the others.
func (g *guard) check(line []byte) bool {
	if why, id := invalidMessage(line); why != "" {
		g.refuse(jsonrpcline.CodeInvalidRequest, id, "Invalid request: "+why)
		return false
	}
	id, method, params := requestOf(line)
	if method != "" && id == "" && g.notify != nil {
		g.notify(method, params)
		return false
	}
	if id != "" && method != "session/prompt" {
		g.pending.add(id)
	}
	return true
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
	_, _ = g.w.Write(jsonrpcline.ErrorLine(code, id, msg))
}
