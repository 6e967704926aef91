package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nexus-run/nexus/internal/jsonrpcline"
)

// Limits on one line of client input. The SDK's stdio reader ends the connection, and with it
// `nexus mcp` and every shell it holds, on the first line it cannot decode, so every line is
// checked here first: a line that would end the connection is answered with a JSON-RPC error
// instead and never reaches the SDK.
const (
	// MaxMessageBytes bounds one message (one line of input).
	MaxMessageBytes = sdk.DefaultMaxLineLength
	// MaxMessageDepth bounds how deeply a message's JSON may nest: well under the SDK's own
	// limit (1000 levels), past which its decoder fails and ends the connection.
	MaxMessageDepth = 512
)

// ServeStdio serves one client over newline-delimited JSON-RPC on in and out (stdin and
// stdout for `nexus mcp`) until in ends or ctx does, then closes every session.
//
// Each line is one message (the MCP stdio transport forbids newlines inside a message). A line
// that is not JSON, nests deeper than MaxMessageDepth, is longer than MaxMessageBytes or is
// not a JSON-RPC message is answered with a parse error (-32700) or an invalid-request error
// (-32600) and dropped; the server goes on with the next line.
//
// When in ends, the requests already read are answered before the server stops: the SDK
// would cancel them at once, so `printf '...' | nexus mcp` would lose its last answers. A
// client that closes stdin to stop the server and cannot wait sends SIGTERM, which ends ctx.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	st := newStdioState(ctx)
	w := &stdioWriter{w: out, st: st}
	g := &guard{src: in, st: st, w: w, log: s.log}
	g.in = jsonrpcline.NewInput(jsonrpcline.NewReader(in, MaxMessageBytes, MaxMessageDepth, "message"), g.check,
		func(r jsonrpcline.Refusal) { g.refuse(r.Code, r.ID, r.Message) }, st.wait)
	// The guard bounds every line, so the SDK's own cap (which would end the connection) is off.
	return s.Run(ctx, &sdk.IOTransport{Reader: g, Writer: w, MaxLineLength: -1})
}

// stdioState is what the reader and the writer share: the client's requests not answered yet
// (end of input waits for them) and the protocol version the session agreed on.
type stdioState struct {
	ctx     context.Context
	mu      sync.Mutex
	pending map[jsonrpc.ID]int
	idle    chan struct{} // closed whenever pending becomes empty; replaced when it fills
	// batched holds the ids of requests passed on in batches and not answered yet: the SDK
	// ends the connection over a batch that reuses one.
	batched map[jsonrpc.ID]bool

	// initID is the id of the initialize request while it is unanswered; version is the
	// protocol version its answer agreed on.
	initID  jsonrpc.ID
	version string

	closeOnce sync.Once
	closed    chan struct{} // closed when the transport closes the reader
}

func newStdioState(ctx context.Context) *stdioState {
	idle := make(chan struct{})
	close(idle)
	return &stdioState{ctx: ctx, pending: map[jsonrpc.ID]int{}, batched: map[jsonrpc.ID]bool{}, idle: idle, closed: make(chan struct{})}
}

func (d *stdioState) add(id jsonrpc.ID, method string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) == 0 {
		d.idle = make(chan struct{})
	}
	d.pending[id]++
	if method == "initialize" && !d.initID.IsValid() && d.version == "" {
		d.initID = id
	}
}

// answering notes an answer about to be written: the protocol version an answer to initialize
// agrees on, and that id is free again for a batch. It runs before the answer is written: a
// client that reads it may send a batch at once.
func (d *stdioState) answering(id jsonrpc.ID, result []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.batched, id)
	if !d.initID.IsValid() || id != d.initID {
		return
	}
	d.initID = jsonrpc.ID{}
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(result, &r) == nil && r.ProtocolVersion != "" {
		d.version = r.ProtocolVersion
	} else {
		d.version = "unknown" // a failed initialize: batches stay refused
	}
}

// done notes that the answer to id was written.
func (d *stdioState) done(id jsonrpc.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.pending[id]
	if !ok {
		return
	}
	if n > 1 {
		d.pending[id] = n - 1
		return
	}
	delete(d.pending, id)
	if len(d.pending) == 0 {
		close(d.idle)
	}
}

// batchRefusal says why a batch cannot be passed on now, or "" (and then notes its request
// ids as batched). Batches are part of the MCP
// protocol versions before 2025-06-18 only: the SDK ends the connection over a batch under a
// later version, and leaves one unanswered in a session that never called initialize, so a
// batch is passed on only once initialize agreed on an earlier version. A batch reusing the id
// of a request of an earlier batch not answered yet, or one id twice, would also end it.
func (d *stdioState) batchRefusal(ids []jsonrpc.ID) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.initID.IsValid():
		return "a batch cannot be sent while initialize is unanswered"
	case d.version == "" || d.version >= "2025-06-18":
		v := d.version
		if v == "" {
			v = "none agreed by initialize"
		}
		return fmt.Sprintf("JSON-RPC batches are part of MCP protocol versions before 2025-06-18 only (this session's: %s); send one message per line", v)
	}
	seen := map[jsonrpc.ID]bool{}
	for _, id := range ids {
		if seen[id] || d.batched[id] {
			return fmt.Sprintf("request id %v is already in use", id.Raw())
		}
		seen[id] = true
	}
	for _, id := range ids {
		d.batched[id] = true
	}
	return ""
}

// wait returns once every request read has been answered, ctx ends or the reader is closed.
func (d *stdioState) wait() {
	d.mu.Lock()
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
	case <-d.ctx.Done():
	case <-d.closed:
	}
}

// guard is the SDK's input: it reads the client's lines, passes on the valid messages (one per
// line, noting the requests) and answers the others itself. It holds back the end of input
// until every request passed on is answered.
type guard struct {
	src io.Reader
	in  *jsonrpcline.Input
	st  *stdioState
	w   *stdioWriter
	log *slog.Logger
}

func (g *guard) Read(p []byte) (int, error) {
	return g.in.Read(p) //nolint:wrapcheck // the input's own errors (io.EOF)
}

// Close unblocks a Read waiting for answers and closes the input when it can be closed.
func (g *guard) Close() error {
	g.st.closeOnce.Do(func() { close(g.st.closed) })
	if c, ok := g.src.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// check handles one line of JSON within the limits: it reports whether the line is passed on.
func (g *guard) check(line []byte) bool {
	if line[0] == '[' {
		return g.batch(line)
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		g.refuse(jsonrpc.CodeInvalidRequest, idOf(line), fmt.Sprintf("Invalid Request: %v", err))
		return false
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
		g.st.add(req.ID, req.Method)
	}
	return true
}

// batch handles a JSON-RPC batch: passed on whole when the SDK will take it, refused whole
// (one error per request in it) otherwise.
func (g *guard) batch(line []byte) bool {
	var elems []json.RawMessage
	if err := json.Unmarshal(line, &elems); err != nil || len(elems) == 0 {
		g.refuse(jsonrpc.CodeInvalidRequest, nil, "Invalid Request: an empty batch")
		return false
	}
	var reqs []*jsonrpc.Request
	var ids []jsonrpc.ID
	why := ""
	for i, e := range elems {
		msg, err := jsonrpc.DecodeMessage(e)
		if err != nil {
			if why == "" {
				why = fmt.Sprintf("element %d of the batch is not a JSON-RPC message: %v", i, err)
			}
			continue
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
			reqs = append(reqs, req)
			ids = append(ids, req.ID)
		}
	}
	if why == "" {
		why = g.st.batchRefusal(ids)
	}
	if why == "" {
		for _, r := range reqs {
			g.st.add(r.ID, r.Method)
		}
		return true
	}
	g.log.Warn("refused a JSON-RPC batch from the client", "reason", redactFixed(why))
	if len(ids) == 0 {
		g.w.reply(jsonrpcline.ErrorLine(jsonrpc.CodeInvalidRequest, nil, "Invalid Request: "+why))
		return false
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(bytes.TrimSuffix(jsonrpcline.ErrorLine(jsonrpc.CodeInvalidRequest, id.Raw(), "Invalid Request: "+why), []byte("\n")))
	}
	b.WriteString("]\n")
	g.w.reply(b.Bytes())
	return false
}

func (g *guard) refuse(code int, id any, msg string) {
	g.log.Warn("refused a message from the client", "code", code, "error", redactFixed(msg))
	g.w.reply(jsonrpcline.ErrorLine(code, id, msg))
}

// idOf returns the id of a JSON object that is not a valid JSON-RPC message, when it has a
// usable one (a string or a number), so the error can be matched to the request.
func idOf(line []byte) any {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	if _, err := jsonrpc.MakeID(m.ID); err != nil {
		return nil
	}
	return m.ID
}

// stdioWriter is the SDK's output. It notes the answers to the client's requests, and
// serializes the SDK's messages with the guard's error answers so lines never interleave.
type stdioWriter struct {
	mu sync.Mutex
	w  io.Writer
	st *stdioState
}

func (w *stdioWriter) Write(p []byte) (int, error) {
	heads := messages(p)
	for _, m := range heads {
		if m.id.IsValid() && !m.method {
			w.st.answering(m.id, m.result)
		}
	}
	w.mu.Lock()
	n, err := w.w.Write(p)
	w.mu.Unlock()
	// Count the response as answered even if the write failed: nobody will read it anyway.
	for _, m := range heads {
		if m.id.IsValid() && !m.method {
			w.st.done(m.id)
		}
	}
	return n, err
}

// reply writes one of the guard's own answers.
func (w *stdioWriter) reply(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.w.Write(p)
}

func (w *stdioWriter) Close() error { return nil }

type msgHead struct {
	id     jsonrpc.ID // invalid for a notification
	method bool       // a request or notification (not a response)
	result []byte     // a response's result, when it came before any larger member
}

// messages returns the heads of the JSON-RPC messages of one line: an object or a batch.
func messages(line []byte) []msgHead {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil
	}
	if line[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(line, &batch) != nil {
			return nil
		}
		out := make([]msgHead, 0, len(batch))
		for _, m := range batch {
			if h, ok := head(m); ok {
				out = append(out, h)
			}
		}
		return out
	}
	if h, ok := head(line); ok {
		return []msgHead{h}
	}
	return nil
}

// maxResultKept bounds the result head keeps (an initialize answer is far smaller).
const maxResultKept = 64 << 10

// head reads a message's id and whether it has a method. Once it has the id of a response it
// stops at the "result" or "error" member, so a large result is not parsed; a small result
// that comes first is kept (an initialize answer's protocol version).
func head(b []byte) (msgHead, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return msgHead{}, false
	}
	var h msgHead
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return msgHead{}, false
		}
		key, _ := t.(string)
		var raw json.RawMessage
		switch key {
		case "id":
			if err := dec.Decode(&raw); err != nil {
				return msgHead{}, false
			}
			var v any
			if json.Unmarshal(raw, &v) != nil {
				continue
			}
			if id, err := jsonrpc.MakeID(v); err == nil {
				h.id = id
			}
		case "method":
			h.method = true
			if err := dec.Decode(&raw); err != nil {
				return msgHead{}, false
			}
		case "result", "error":
			if h.id.IsValid() && (key == "error" || len(b) > maxResultKept) {
				return h, true
			}
			if err := dec.Decode(&raw); err != nil {
				return h, h.id.IsValid()
			}
			if key == "result" {
				h.result = raw
			}
		default:
			if err := dec.Decode(&raw); err != nil {
				return msgHead{}, false
			}
		}
	}
	return h, true
}
