package aichat_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// model is a scripted OpenAI-compatible chat completions server. Each request is checked the
// way a real API checks it (every tool result answers a call of an earlier assistant message,
// every call is answered before the next user or assistant message) and answered by reply.
type model struct {
	t     *testing.T
	srv   *httptest.Server
	reply func(req chatRequest, w *sse)

	// countTokens reports prompt tokens as the characters of the messages / 4 (default 100).
	countTokens bool

	mu       sync.Mutex
	requests []chatRequest
}

type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// text is a message's text content (a string or text parts).
func (m chatMessage) text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// lastUser is the text of the request's last user message.
func (r chatRequest) lastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].text()
		}
	}
	return ""
}

// last is the request's last message.
func (r chatRequest) last() chatMessage { return r.Messages[len(r.Messages)-1] }

func newModel(t *testing.T, reply func(req chatRequest, w *sse)) *model {
	m := &model{t: t, reply: reply}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *model) serve(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		m.t.Errorf("model: bad request body: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := checkPairing(req.Messages); err != nil {
		m.t.Errorf("model: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	s := &sse{w: w, f: w.(http.Flusher), r: r, prompt: 100}
	if m.countTokens {
		n := 0
		for _, msg := range req.Messages {
			n += len(msg.Content)
		}
		s.prompt = n / 4
	}
	m.reply(req, s)
}

func (m *model) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// checkPairing is what real APIs refuse: a result without its call, or a call without a result.
func checkPairing(msgs []chatMessage) error {
	open := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case "assistant", "user":
			if len(open) > 0 {
				return fmt.Errorf("message %d (%s) while calls %v have no result", i, m.Role, open)
			}
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		case "tool":
			if !open[m.ToolCallID] {
				return fmt.Errorf("message %d: a result for %q, which no open call has", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("the request ends with calls %v unanswered", open)
	}
	return nil
}

// sse writes one streamed chat completion.
type sse struct {
	w      http.ResponseWriter
	f      http.Flusher
	r      *http.Request
	prompt int
}

func (s *sse) chunk(delta map[string]any, finish string) {
	c := map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake",
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nilIfEmpty(finish)}}}
	if finish != "" {
		c["usage"] = map[string]any{"prompt_tokens": s.prompt, "completion_tokens": 10, "total_tokens": s.prompt + 10}
	}
	b, _ := json.Marshal(c)
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	s.f.Flush()
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// text streams an answer in words and ends it.
func (s *sse) text(answer string) {
	for i, w := range strings.SplitAfter(answer, " ") {
		d := map[string]any{"content": w}
		if i == 0 {
			d["role"] = "assistant"
		}
		s.chunk(d, "")
	}
	s.chunk(map[string]any{}, "stop")
	s.done()
}

// call streams one tool call, its arguments in two pieces.
func (s *sse) call(id, name string, args any) {
	b, _ := json.Marshal(args)
	half := len(b) / 2
	s.chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
		"function": map[string]any{"name": name, "arguments": string(b[:half])}}}}, "")
	s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": string(b[half:])}}}}, "")
	s.chunk(map[string]any{}, "tool_calls")
	s.done()
}

func (s *sse) done() {
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	s.f.Flush()
}

// overflow answers as OpenAI does a request larger than the window.
func (s *sse) overflow() {
	s.w.Header().Set("Content-Type", "application/json")
	s.w.WriteHeader(http.StatusBadRequest)
	fmt.Fprint(s.w, `{"error":{"message":"This model's maximum context length is 4000 tokens. However, your messages resulted in 5210 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`)
}

// isSummary reports a compaction's summary request.
func (r chatRequest) isSummary() bool {
	return len(r.Messages) > 0 && r.Messages[0].Role == "system" && strings.Contains(r.Messages[0].text(), "You compact a conversation")
}

// has reports whether any message holds text.
func (r chatRequest) has(text string) bool {
	for _, m := range r.Messages {
		if strings.Contains(string(m.Content), text) {
			return true
		}
	}
	return false
}

// hang streams a first word and then nothing until the client goes away.
func (s *sse) hang(first string) {
	s.chunk(map[string]any{"role": "assistant", "content": first}, "")
	<-s.r.Context().Done()
}
