package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// The real model server: llama.cpp's llama-server with the tiny deterministic model of
// tools/llm (its README): without tools it answers "Hello from a tiny model.", with tools
// it makes exactly one call, and after a tool result it answers in text. It is set up once per
// package run, on first use, and stopped by TestMain.

// llm is the package's one real model server, stopped by TestMain.
var llm llmserver.Once

func TestMain(m *testing.M) {
	code := m.Run()
	llm.Stop()
	os.Exit(code)
}

func llamaServer(t *testing.T) string {
	t.Helper()
	return llm.URL(t)
}

// sessionExec is the tool offered to the model (probe.mjs's).
var sessionExec = Tool{
	Name:        "session_exec",
	Description: "Run a shell command in a persistent session",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"session_id":{"type":"string"},"command":{"type":"string"}},"required":["session_id","command"]}`),
}

// collect reads a whole stream.
type collected struct {
	events []Event
	msg    Message
	err    error
}

func collect(t *testing.T, s Stream) collected {
	t.Helper()
	var c collected
	for s.Next() {
		c.events = append(c.events, s.Event())
	}
	c.msg, c.err = s.Message(), s.Err()
	if n := len(c.events); n == 0 || c.events[n-1].Type != EventDone {
		t.Fatalf("the stream did not end with EventDone: %v", c.events)
	}
	return c
}

func (c collected) count(typ EventType) int {
	n := 0
	for _, ev := range c.events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func (c collected) deltas(typ EventType) string {
	var b strings.Builder
	for _, ev := range c.events {
		if ev.Type == typ {
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}

func TestRealServer(t *testing.T) {
	base := llamaServer(t)
	zero := 0.0
	routes := []struct {
		name string
		b    Backend
	}{
		{"openai-chat-completions", Backend{Name: "local", Kind: KindOpenAICompatible, BaseURL: base + "/v1", Model: "probe", MaxTokens: 256}},
		{"anthropic-messages", Backend{Name: "local-anthropic", Kind: KindAnthropic, BaseURL: base, Model: "probe", MaxTokens: 256}},
	}
	user := UserText("What directory is the shell in?", 1)
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			p, err := Open(rt.b, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()

			// Plain text, no tools.
			s, err := p.Stream(ctx, Request{Messages: []Message{user}, Temperature: &zero})
			if err != nil {
				t.Fatal(err)
			}
			c := collect(t, s)
			if c.err != nil || c.msg.StopReason != StopEndTurn {
				t.Fatalf("plain: stop %q, err %v", c.msg.StopReason, c.err)
			}
			if got := c.msg.TextContent(); got != "Hello from a tiny model." {
				t.Fatalf("plain: text %q", got)
			}
			if c.deltas(EventTextDelta) != c.msg.TextContent() || c.count(EventTextDelta) < 2 {
				t.Fatalf("plain: %d text deltas %q do not make up the text", c.count(EventTextDelta), c.deltas(EventTextDelta))
			}
			if u := c.msg.Usage; u.Input+u.CacheRead == 0 || u.Output == 0 || u.TotalTokens != u.Input+u.Output+u.CacheRead+u.CacheWrite {
				t.Fatalf("plain: usage %+v", u)
			}
			if c.count(EventUsage) == 0 {
				t.Fatal("plain: no usage event")
			}

			// Tools offered: one call, arguments reassembled from deltas.
			req := Request{Messages: []Message{user}, Tools: []Tool{sessionExec}, Temperature: &zero}
			s, err = p.Stream(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			c = collect(t, s)
			if c.err != nil || c.msg.StopReason != StopToolUse {
				t.Fatalf("tools: stop %q, err %v", c.msg.StopReason, c.err)
			}
			calls := c.msg.ToolCalls()
			if len(calls) != 1 || calls[0].Name != "session_exec" || calls[0].ID == "" {
				t.Fatalf("tools: calls %+v", calls)
			}
			var args map[string]any
			if err := json.Unmarshal(calls[0].Arguments, &args); err != nil {
				t.Fatalf("tools: arguments %s: %v", calls[0].Arguments, err)
			}
			if _, ok := args["session_id"].(string); !ok {
				t.Fatalf("tools: arguments %s lack session_id", calls[0].Arguments)
			}
			if c.count(EventToolCallDelta) < 2 {
				t.Fatalf("tools: %d argument deltas: want them split over chunks", c.count(EventToolCallDelta))
			}
			if !jsonEqual(c.deltas(EventToolCallDelta), string(calls[0].Arguments)) {
				t.Fatalf("tools: deltas %q != arguments %s", c.deltas(EventToolCallDelta), calls[0].Arguments)
			}
			var end *ToolCall
			for _, ev := range c.events {
				if ev.Type == EventToolCallEnd {
					end = ev.ToolCall
				}
			}
			if end == nil || end.ID != calls[0].ID || end.ArgumentsError != "" {
				t.Fatalf("tools: end event %+v", end)
			}

			// The tool result sent back: a text answer.
			req.Messages = append(req.Messages, c.msg, Message{Role: RoleToolResult, ToolCallID: calls[0].ID, ToolName: calls[0].Name,
				Content: []Content{Text("/home/agent")}, Timestamp: 3})
			s, err = p.Stream(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			c = collect(t, s)
			if c.err != nil || c.msg.StopReason != StopEndTurn || c.msg.TextContent() == "" || len(c.msg.ToolCalls()) != 0 {
				t.Fatalf("after the result: stop %q, err %v, content %+v", c.msg.StopReason, c.err, c.msg.Content)
			}

			// Cancelled mid-stream: aborted, with what came so far.
			cctx, cancel := context.WithCancel(ctx)
			s, err = p.Stream(cctx, Request{Messages: []Message{user}, Tools: []Tool{sessionExec}, Temperature: &zero})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			var events []Event
			for s.Next() {
				ev := s.Event()
				events = append(events, ev)
				if ev.Type == EventToolCallDelta {
					cancel() // the call has begun; the server is still generating it
				}
			}
			cancel()
			msg, serr := s.Message(), s.Err()
			if msg.StopReason != StopAborted || !errors.Is(serr, context.Canceled) {
				t.Fatalf("cancel: stop %q, err %v", msg.StopReason, serr)
			}
			if len(msg.ToolCalls()) != 1 || events[len(events)-1].Type != EventDone || events[len(events)-1].StopReason != StopAborted {
				t.Fatalf("cancel: partial call lost or no done event: %+v", msg.Content)
			}
			// The server noticed the closed connection and serves the next request (one slot).
			s, err = p.Stream(ctx, Request{Messages: []Message{user}, Temperature: &zero})
			if err != nil {
				t.Fatal(err)
			}
			if c := collect(t, s); c.err != nil || c.msg.TextContent() != "Hello from a tiny model." {
				t.Fatalf("after cancel: %q, %v", c.msg.TextContent(), c.err)
			}

			// A prompt larger than the server's 8192-token context.
			s, err = p.Stream(ctx, Request{Messages: []Message{UserText(strings.Repeat("hello ", 9000), 1)}})
			if err == nil {
				_ = s.Close()
				t.Fatal("overflow: no error")
			}
			if !errors.Is(err, ErrContextOverflow) || abi.CodeOf(err) != abi.CodeInvalidArgument {
				t.Fatalf("overflow: %v (code %s)", err, abi.CodeOf(err))
			}
		})
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
