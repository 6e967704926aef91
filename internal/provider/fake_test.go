package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A fake provider: an HTTP server that answers each request with the next scripted reply,
// replaying recorded streams byte for byte, and checks every request it receives: tool calls
// and results paired by id in the request's wire format, and the API key where one is expected.

// reply is one scripted answer.
type reply struct {
	status int
	header map[string]string
	// body is sent as is; file names a testdata file sent instead (as text/event-stream
	// unless header says otherwise).
	body string
	file string
	// cutAfter > 0 sends that many bytes of the body, then drops the connection without
	// ending the chunked body (the client sees an unexpected EOF).
	cutAfter int
	// closeAfter > 0 sends that many bytes of the body without chunking, then closes the
	// connection cleanly, as a proxy that gives up might (the client sees a plain EOF).
	closeAfter int
	// hold sends the body, then waits until the client goes away and reports it on gone.
	hold bool
}

type recorded struct {
	path   string
	header http.Header
	body   []byte
}

type fakeServer struct {
	t   *testing.T
	srv *httptest.Server
	// key is the API key every request must carry ("" for none).
	key string

	mu       sync.Mutex
	replies  []reply
	requests []recorded
	gone     chan struct{}
}

func newFake(t *testing.T, key string, replies ...reply) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, key: key, replies: replies, gone: make(chan struct{}, 8)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) url() string { return f.srv.URL }

func (f *fakeServer) received() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.requests...)
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("fake: read request: %v", err)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, recorded{path: r.URL.Path, header: r.Header.Clone(), body: body})
	var rep reply
	ok := len(f.replies) > 0
	if ok {
		rep, f.replies = f.replies[0], f.replies[1:]
	}
	f.mu.Unlock()
	if err := checkPairing(r.URL.Path, body); err != nil {
		f.t.Errorf("fake: request %s: %v\n%s", r.URL.Path, err, body)
		http.Error(w, `{"error":{"message":"bad pairing"}}`, http.StatusBadRequest)
		return
	}
	if err := f.checkKey(r); err != nil {
		f.t.Errorf("fake: request %s: %v", r.URL.Path, err)
		http.Error(w, `{"error":{"message":"bad key"}}`, http.StatusUnauthorized)
		return
	}
	if !ok {
		f.t.Errorf("fake: unexpected request %s", r.URL.Path)
		http.Error(w, `{"error":{"message":"no reply scripted"}}`, http.StatusInternalServerError)
		return
	}
	data := []byte(rep.body)
	if rep.file != "" {
		data, err = os.ReadFile(filepath.Join("testdata", rep.file))
		if err != nil {
			f.t.Errorf("fake: %v", err)
			return
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	if rep.status >= 400 || strings.HasPrefix(strings.TrimSpace(string(data)), "{") || strings.HasPrefix(strings.TrimSpace(string(data)), "[") {
		h.Set("Content-Type", "application/json")
	}
	for k, v := range rep.header {
		h.Set(k, v)
	}
	status := rep.status
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case rep.closeAfter > 0:
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			f.t.Errorf("fake: hijack: %v", err)
			return
		}
		_, _ = fmt.Fprintf(buf, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nConnection: close\r\n\r\n", status, http.StatusText(status), h.Get("Content-Type"))
		_, _ = buf.Write(data[:rep.closeAfter])
		_ = buf.Flush()
		_ = conn.Close()
	case rep.cutAfter > 0:
		w.WriteHeader(status)
		_, _ = w.Write(data[:rep.cutAfter])
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		conn, _, err := rc.Hijack()
		if err != nil {
			f.t.Errorf("fake: hijack: %v", err)
			return
		}
		_ = conn.Close()
	default:
		w.WriteHeader(status)
		_, _ = w.Write(data)
		_ = http.NewResponseController(w).Flush()
		if rep.hold {
			<-r.Context().Done()
			f.gone <- struct{}{}
		}
	}
}

func (f *fakeServer) checkKey(r *http.Request) error {
	got := r.Header.Get("X-Api-Key")
	if a := r.Header.Get("Authorization"); a != "" {
		got = strings.TrimPrefix(a, "Bearer ")
	}
	if got != f.key {
		return fmt.Errorf("API key %q, want %q", got, f.key)
	}
	return nil
}

// checkPairing checks the tool calls and results of a request body in the format its path
// names: every call has exactly one result before the conversation moves on, and every result
// answers an earlier call.
func checkPairing(path string, body []byte) error {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		var req struct {
			Messages []struct {
				Role      string `json:"role"`
				ToolCalls []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
				ToolCallID string `json:"tool_call_id"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("not a chat request: %w", err)
		}
		p := pairing{}
		for i, m := range req.Messages {
			switch m.Role {
			case "tool":
				if err := p.result(i, m.ToolCallID); err != nil {
					return err
				}
				continue
			case "assistant":
				if err := p.moveOn(i); err != nil {
					return err
				}
				for _, c := range m.ToolCalls {
					p.call(c.ID)
				}
				continue
			}
			if err := p.moveOn(i); err != nil {
				return err
			}
		}
		return p.moveOn(len(req.Messages))
	case strings.HasSuffix(path, "/messages"):
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content []struct {
					Type      string `json:"type"`
					ID        string `json:"id"`
					ToolUseID string `json:"tool_use_id"`
				} `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("not a messages request: %w", err)
		}
		p := pairing{}
		for i, m := range req.Messages {
			for _, b := range m.Content {
				if b.Type == "tool_result" {
					if err := p.result(i, b.ToolUseID); err != nil {
						return err
					}
				}
			}
			if err := p.moveOn(i); err != nil {
				return err
			}
			for _, b := range m.Content {
				if b.Type == "tool_use" {
					p.call(b.ID)
				}
			}
		}
		return p.moveOn(len(req.Messages))
	case strings.HasSuffix(path, "/responses"):
		var req struct {
			Input []struct {
				Type   string `json:"type"`
				Role   string `json:"role"`
				CallID string `json:"call_id"`
			} `json:"input"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return fmt.Errorf("not a responses request: %w", err)
		}
		p := pairing{}
		for i, it := range req.Input {
			switch {
			case it.Type == "function_call":
				p.call(it.CallID)
			case it.Type == "function_call_output":
				if err := p.result(i, it.CallID); err != nil {
					return err
				}
			case it.Role == "user":
				if err := p.moveOn(i); err != nil {
					return err
				}
			}
		}
		return p.moveOn(len(req.Input))
	}
	return fmt.Errorf("unknown path %s", path)
}

// pairing tracks the calls waiting for results; a call id used twice in a request, or
// empty, is refused as the APIs refuse it.
type pairing struct {
	open []string
	seen map[string]bool
	err  error
}

func (p *pairing) call(id string) {
	if p.seen == nil {
		p.seen = map[string]bool{}
	}
	if (id == "" || p.seen[id]) && p.err == nil {
		p.err = fmt.Errorf("tool call id %q used twice or empty", id)
	}
	p.seen[id] = true
	p.open = append(p.open, id)
}

func (p *pairing) result(i int, id string) error {
	for j, o := range p.open {
		if o == id {
			p.open = append(p.open[:j], p.open[j+1:]...)
			return nil
		}
	}
	return fmt.Errorf("message %d: tool result %q without its call", i, id)
}

func (p *pairing) moveOn(i int) error {
	if p.err != nil {
		return p.err
	}
	if len(p.open) > 0 {
		return fmt.Errorf("message %d: tool calls %q without results", i, p.open)
	}
	return nil
}

// sleeps records the waits of the retry policy: nothing sleeps.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// fixedNow is the injected clock.
var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testOptions are Options that never sleep: jitter is the whole ceiling, so waits are
// predictable.
func testOptions(s *sleeps, env map[string]string) Options {
	return Options{
		Getenv: func(k string) string { return env[k] },
		Sleep:  s.sleep,
		Now:    func() time.Time { return fixedNow },
		Jitter: func(c time.Duration) time.Duration { return c },
	}
}
