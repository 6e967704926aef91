package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves one client over newline-delimited JSON-RPC on in and out (stdin and
// stdout for `nexus mcp`) until in ends or ctx does, then closes every session.
//
// When in ends, the requests already read are answered before the server stops: the SDK
// would cancel them at once, so `printf '...' | nexus mcp` would lose its last answers. A
// client that closes stdin to stop the server and cannot wait sends SIGTERM, which ends ctx.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	d := newDrain(ctx)
	return s.Run(ctx, &sdk.IOTransport{
		Reader: &drainReader{r: in, d: d},
		Writer: &drainWriter{w: out, d: d},
	})
}

// drain tracks the client's requests that have not been answered yet.
type drain struct {
	ctx     context.Context
	mu      sync.Mutex
	pending map[string]int
	idle    chan struct{} // closed whenever pending becomes empty; replaced when it fills

	closeOnce sync.Once
	closed    chan struct{} // closed when the transport closes the reader
}

func newDrain(ctx context.Context) *drain {
	idle := make(chan struct{})
	close(idle)
	return &drain{ctx: ctx, pending: map[string]int{}, idle: idle, closed: make(chan struct{})}
}

func (d *drain) add(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) == 0 {
		d.idle = make(chan struct{})
	}
	d.pending[id]++
}

func (d *drain) done(id string) {
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

// wait returns once every request read has been answered, ctx ends or the reader is closed.
func (d *drain) wait() {
	d.mu.Lock()
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
	case <-d.ctx.Done():
	case <-d.closed:
	}
}

// maxHead bounds what is kept of an input line to find its id and method.
const maxHead = 1 << 20

// drainReader notes the id of every request it passes on and holds back the end of input
// until they are all answered.
type drainReader struct {
	r       io.Reader
	d       *drain
	line    []byte // the current line, up to maxHead bytes
	long    bool   // the current line is longer than maxHead
	eofHeld error
}

func (r *drainReader) Read(p []byte) (int, error) {
	if r.eofHeld != nil {
		r.d.wait()
		return 0, r.eofHeld
	}
	n, err := r.r.Read(p)
	r.scan(p[:n])
	if err != nil {
		if n > 0 {
			r.eofHeld = err
			return n, nil
		}
		if errors.Is(err, io.EOF) {
			r.d.wait()
		}
	}
	return n, err
}

// Close unblocks a Read waiting for answers and closes the input when it can be closed.
func (r *drainReader) Close() error {
	r.d.closeOnce.Do(func() { close(r.d.closed) })
	if c, ok := r.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (r *drainReader) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !r.long {
			if len(r.line)+len(chunk) > maxHead {
				r.long, r.line = true, r.line[:0]
			} else {
				r.line = append(r.line, chunk...)
			}
		}
		if i < 0 {
			return
		}
		if !r.long {
			for _, m := range messages(r.line) {
				if m.id != "" && m.method {
					r.d.add(m.id)
				}
			}
		}
		r.line, r.long = r.line[:0], false
		p = p[i+1:]
	}
}

// drainWriter notes the id of every response written.
type drainWriter struct {
	w io.Writer
	d *drain
}

func (w *drainWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	// Count the response as answered even if the write failed: nobody will read it anyway.
	for _, m := range messages(p) {
		if m.id != "" && !m.method {
			w.d.done(m.id)
		}
	}
	return n, err
}

func (w *drainWriter) Close() error { return nil }

type msgHead struct {
	id     string // canonical JSON of the id; empty for a notification
	method bool   // a request or notification (not a response)
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

// head reads a message's id and whether it has a method, stopping at the first "result" or
// "error" key, so a large result is not parsed.
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
			if json.Unmarshal(raw, &v) != nil || v == nil {
				continue
			}
			canon, _ := json.Marshal(v)
			h.id = string(canon)
		case "method":
			h.method = true
			if err := dec.Decode(&raw); err != nil {
				return msgHead{}, false
			}
		case "result", "error":
			if h.id != "" {
				return h, true
			}
			if err := dec.Decode(&raw); err != nil {
				return msgHead{}, false
			}
		default:
			if err := dec.Decode(&raw); err != nil {
				return msgHead{}, false
			}
		}
	}
	return h, true
}
