package agent_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/provider"
)

// chatServer is a scripted OpenAI-compatible chat completions server: the real provider client
// talks to it, so what the loop sends is what a real API would get. Request n is answered by
// reply(n, body, w); keep, when false, keeps only the size of the bodies (a 45 MB request is
// measured, not held).
type chatServer struct {
	srv   *httptest.Server
	reply func(n int, body []byte, w *chatSSE)
	keep  bool

	mu     sync.Mutex
	bodies [][]byte
	sizes  []int64
}

func newChatServer(tb testing.TB, keep bool, reply func(n int, body []byte, w *chatSSE)) *chatServer {
	tb.Helper()
	s := &chatServer{reply: reply, keep: keep}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.srv.Close)
	return s
}

func (s *chatServer) serve(w http.ResponseWriter, r *http.Request) {
	var body []byte
	var size int64
	if s.keep {
		body, _ = io.ReadAll(r.Body)
		size = int64(len(body))
	} else {
		size, _ = io.Copy(io.Discard, r.Body)
	}
	s.mu.Lock()
	n := len(s.sizes)
	s.bodies = append(s.bodies, body)
	s.sizes = append(s.sizes, size)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	s.reply(n, body, &chatSSE{w: w, f: w.(http.Flusher)})
}

func (s *chatServer) backend() provider.Backend {
	return provider.Backend{Name: "fake", Kind: provider.KindOpenAICompatible, BaseURL: s.srv.URL + "/v1", Model: "fake", MaxAttempts: 1}
}

func (s *chatServer) open(tb testing.TB) provider.Provider {
	tb.Helper()
	p, err := provider.Open(s.backend(), provider.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func (s *chatServer) requests() ([][]byte, []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...), append([]int64(nil), s.sizes...)
}

// chatSSE writes one streamed chat completion.
type chatSSE struct {
	w io.Writer
	f http.Flusher
}

func (s *chatSSE) chunk(delta map[string]any, finish string) {
	c := map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}}
	if finish != "" {
		c["choices"].([]any)[0].(map[string]any)["finish_reason"] = finish
		c["usage"] = map[string]any{"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
	}
	b, _ := json.Marshal(c)
	fmt.Fprintf(s.w, "data: %s\n\n", b)
}

func (s *chatSSE) done() {
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	s.f.Flush()
}

// text streams an answer and ends the reply.
func (s *chatSSE) text(answer string) {
	s.chunk(map[string]any{"role": "assistant", "content": answer}, "")
	s.chunk(map[string]any{}, "stop")
	s.done()
}

// chatCall is one tool call of a reply.
type chatCall struct{ id, name, args string }

// calls streams tool calls (each with its index, id, name and arguments) and ends the reply.
func (s *chatSSE) calls(calls ...chatCall) {
	for i, c := range calls {
		s.chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": i, "id": c.id, "type": "function",
			"function": map[string]any{"name": c.name, "arguments": c.args}}}}, "")
	}
	s.chunk(map[string]any{}, "tool_calls")
	s.done()
}

// bigCall streams one call whose arguments are head, then filler bytes of 'a' in pieces of 32
// KiB, then tail: arguments of any size without the server holding them.
func (s *chatSSE) bigCall(id, name, head string, filler int, tail string) {
	s.chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
		"function": map[string]any{"name": name, "arguments": head}}}}, "")
	const piece = 32 << 10
	line := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":"fake","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` +
		strings.Repeat("a", piece) + `"}}]},"finish_reason":null}]}` + "\n\n"
	for ; filler >= piece; filler -= piece {
		_, _ = io.WriteString(s.w, line)
	}
	if filler > 0 {
		s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": strings.Repeat("a", filler)}}}}, "")
	}
	s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": tail}}}}, "")
	s.chunk(map[string]any{}, "tool_calls")
	s.done()
}

// refuse answers as an API refusing the request.
func (s *chatSSE) refuse(err error) {
	if rw, ok := s.w.(http.ResponseWriter); ok {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusBadRequest)
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
	_, _ = s.w.Write(b)
}
