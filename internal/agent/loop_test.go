package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/provider"
)

// scripted is a provider whose replies are given in advance. It checks every request it gets
// the way a real API does: each tool call of an assistant message must be answered by a result
// before the next assistant message, and no result may come without its call.
type scripted struct {
	t       *testing.T
	mu      sync.Mutex
	replies []provider.Message
	// next, when set, makes the reply to request n (from 0) instead of replies.
	next     func(n int) provider.Message
	requests []provider.Request
}

func (s *scripted) Stream(ctx context.Context, req provider.Request) (provider.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := checkPairing(req.Messages); err != nil {
		s.t.Errorf("request %d: %v", len(s.requests), err)
	}
	n := len(s.requests)
	s.requests = append(s.requests, req)
	var msg provider.Message
	switch {
	case s.next != nil:
		msg = s.next(n)
	case n < len(s.replies):
		msg = s.replies[n]
	default:
		return nil, fmt.Errorf("no reply scripted for request %d", n)
	}
	msg.Role = provider.RoleAssistant
	if msg.StopReason == "" {
		msg.StopReason = provider.StopEndTurn
		for _, c := range msg.Content {
			if c.Type == provider.BlockToolCall {
				msg.StopReason = provider.StopToolUse
			}
		}
	}
	return newStream(ctx, msg), nil
}

func checkPairing(msgs []provider.Message) error {
	open := map[string]bool{}
	for i, m := range msgs {
		switch m.Role {
		case provider.RoleAssistant:
			if len(open) > 0 {
				return fmt.Errorf("message %d: an assistant message while calls %v have no result", i, open)
			}
			for _, c := range m.Content {
				if c.Type == provider.BlockToolCall {
					open[c.ID] = true
				}
			}
		case provider.RoleToolResult:
			if !open[m.ToolCallID] {
				return fmt.Errorf("message %d: a result for %s, which no open call made", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		case provider.RoleUser:
			if len(open) > 0 {
				return fmt.Errorf("message %d: a user message while calls %v have no result", i, open)
			}
		}
	}
	return nil
}

// stream replays a message as the provider's events.
type stream struct {
	ctx    context.Context
	msg    provider.Message
	events []provider.Event
	i      int
}

func newStream(ctx context.Context, msg provider.Message) *stream {
	s := &stream{ctx: ctx, msg: msg, i: -1}
	for i, c := range msg.Content {
		switch c.Type {
		case provider.BlockText:
			s.events = append(s.events, provider.Event{Type: provider.EventTextStart, Index: i},
				provider.Event{Type: provider.EventTextDelta, Index: i, Delta: c.Text},
				provider.Event{Type: provider.EventTextEnd, Index: i, Content: c.Text})
		case provider.BlockToolCall:
			call := &provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
			s.events = append(s.events, provider.Event{Type: provider.EventToolCallStart, Index: i, ToolCall: call},
				provider.Event{Type: provider.EventToolCallEnd, Index: i, ToolCall: call})
		}
	}
	s.events = append(s.events, provider.Event{Type: provider.EventDone, StopReason: msg.StopReason})
	return s
}

func (s *stream) Next() bool {
	if s.i+1 >= len(s.events) {
		return false
	}
	s.i++
	return true
}
func (s *stream) Event() provider.Event     { return s.events[s.i] }
func (s *stream) Message() provider.Message { return s.msg }
func (s *stream) Err() error                { return nil }
func (s *stream) Close() error              { return nil }

func call(id, name, args string) provider.Content {
	return provider.Content{Type: provider.BlockToolCall, ID: id, Name: name, Arguments: json.RawMessage(args)}
}

func reply(content ...provider.Content) provider.Message { return provider.Message{Content: content} }

// toolbox runs tools by name.
type toolbox struct {
	mu   sync.Mutex
	runs []string
	fn   map[string]func(ctx context.Context, args json.RawMessage) agent.Outcome
}

func (tb *toolbox) Specs() []provider.Tool {
	var out []provider.Tool
	for name := range tb.fn {
		out = append(out, provider.Tool{Name: name, Parameters: json.RawMessage(`{"type":"object"}`)})
	}
	return out
}

func (tb *toolbox) Run(ctx context.Context, c provider.ToolCall) agent.Outcome {
	tb.mu.Lock()
	tb.runs = append(tb.runs, c.ID)
	f := tb.fn[c.Name]
	tb.mu.Unlock()
	if f == nil {
		return agent.Outcome{Output: "unknown tool " + c.Name, IsError: true}
	}
	return f(ctx, c.Arguments)
}

func echoTools() *toolbox {
	return &toolbox{fn: map[string]func(context.Context, json.RawMessage) agent.Outcome{
		"echo": func(_ context.Context, a json.RawMessage) agent.Outcome { return agent.Outcome{Output: string(a)} },
		"fail": func(context.Context, json.RawMessage) agent.Outcome {
			return agent.Outcome{Output: "boom", IsError: true}
		},
	}}
}

type recorder struct {
	events   []agent.Event
	messages []provider.Message
}

func (r *recorder) opts() agent.Options {
	return agent.Options{
		Emit:   func(e agent.Event) { r.events = append(r.events, e) },
		Append: func(m provider.Message) error { r.messages = append(r.messages, m); return nil },
	}
}

func (r *recorder) types() []string {
	var out []string
	for _, e := range r.events {
		if e.Type != agent.EventStatus && e.Type != agent.EventUsage {
			out = append(out, string(e.Type))
		}
	}
	return out
}

func request(text string) provider.Request {
	return provider.Request{Messages: []provider.Message{provider.UserText(text, 1)}}
}

func roles(msgs []provider.Message) string {
	var out []string
	for _, m := range msgs {
		s := m.Role
		if m.Role == provider.RoleToolResult {
			s += ":" + m.ToolCallID
			if m.IsError {
				s += "!"
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestToolRoundTrip(t *testing.T) {
	p := &scripted{t: t, replies: []provider.Message{
		reply(provider.Text("let me look"), call("c1", "echo", `{"x": 1}`)),
		reply(provider.Text("it is 1")),
	}}
	var r recorder
	res, err := agent.Run(t.Context(), p, echoTools(), request("what is x?"), r.opts())
	if err != nil || res.End != agent.EndCompleted || res.Iterations != 2 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := roles(r.messages); got != "assistant toolResult:c1 assistant" {
		t.Fatalf("messages %s", got)
	}
	if out := r.messages[1].Content[0].Text; out != `{"x": 1}` {
		t.Fatalf("result %q", out)
	}
	if got := strings.Join(r.types(), " "); got != "token token tool_detected batch_started tool_started tool_completed batch_completed iteration_completed token token iteration_completed turn_ended" {
		t.Fatalf("events %s", got)
	}
	if len(p.requests) != 2 || roles(p.requests[1].Messages) != "user assistant toolResult:c1" || len(p.requests[1].Tools) != 2 {
		t.Fatalf("second request %s", roles(p.requests[1].Messages))
	}
}

func TestOrderedBatchHaltsOnError(t *testing.T) {
	p := &scripted{t: t, replies: []provider.Message{
		reply(call("c1", "echo", `{}`), call("c2", "fail", `{}`), call("c3", "echo", `{"n":3}`)),
		reply(provider.Text("ok")),
	}}
	tb := echoTools()
	var r recorder
	res, err := agent.Run(t.Context(), p, tb, request("go"), r.opts())
	if err != nil || res.End != agent.EndCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	if got := roles(r.messages); got != "assistant toolResult:c1 toolResult:c2! toolResult:c3! assistant" {
		t.Fatalf("messages %s", got)
	}
	if fmt.Sprint(tb.runs) != "[c1 c2]" || !strings.Contains(r.messages[3].Content[0].Text, "not run") {
		t.Fatalf("runs %v, c3 result %q", tb.runs, r.messages[3].Content[0].Text)
	}
	if !strings.Contains(strings.Join(r.types(), " "), "batch_halted") {
		t.Fatalf("events %v", r.types())
	}
}

// A batch marked _parallel runs at once: each call waits for the other to have started,
// which would never happen one after the other.
func TestParallelBatch(t *testing.T) {
	p := &scripted{t: t, replies: []provider.Message{
		reply(call("a", "meet", `{"_parallel": true}`), call("b", "meet", `{"_parallel": true}`)),
		reply(provider.Text("done")),
	}}
	var started sync.WaitGroup
	started.Add(2)
	tb := &toolbox{fn: map[string]func(context.Context, json.RawMessage) agent.Outcome{
		"meet": func(ctx context.Context, _ json.RawMessage) agent.Outcome {
			started.Done()
			met := make(chan struct{})
			go func() { started.Wait(); close(met) }()
			select {
			case <-met:
				return agent.Outcome{Output: "met"}
			case <-ctx.Done():
				return agent.Outcome{Output: "alone", IsError: true}
			}
		},
	}}
	var r recorder
	res, err := agent.Run(t.Context(), p, tb, request("go"), r.opts())
	if err != nil || res.End != agent.EndCompleted || roles(r.messages) != "assistant toolResult:a toolResult:b assistant" {
		t.Fatalf("%+v %v %s", res, err, roles(r.messages))
	}
}

func TestMaxIterations(t *testing.T) {
	p := &scripted{t: t, next: func(n int) provider.Message {
		return reply(call(fmt.Sprintf("c%d", n), "echo", fmt.Sprintf(`{"n":%d}`, n)))
	}}
	var r recorder
	o := r.opts()
	o.MaxIterations = 4
	res, err := agent.Run(t.Context(), p, echoTools(), request("go"), o)
	if err != nil || res.End != agent.EndMaxIterations || res.Iterations != 4 || len(p.requests) != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	if got := roles(r.messages); got != "assistant toolResult:c0 assistant toolResult:c1 assistant toolResult:c2 assistant toolResult:c3" {
		t.Fatalf("messages %s", got)
	}
}

func TestLoopDetection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   func(n int) (tool, args string)
		reason string
		runs   int
	}{
		{"same call three times", func(int) (string, string) { return "echo", `{"a":1}` }, "the same call (echo) 3 times", 2},
		{"same call, other spacing", func(n int) (string, string) {
			return "echo", []string{`{"a":1}`, `{ "a" : 1 }`, `{"a": 1}`}[n%3]
		}, "the same call (echo) 3 times", 2},
		{"a cycle of two", func(n int) (string, string) { return "echo", fmt.Sprintf(`{"a":%d}`, n%2) }, "a cycle of 2 calls repeated", 3},
		{"a cycle of three", func(n int) (string, string) { return "echo", fmt.Sprintf(`{"a":%d}`, n%3) }, "a cycle of 3 calls repeated", 5},
		{"five failures in a row", func(n int) (string, string) { return "fail", fmt.Sprintf(`{"a":%d}`, n) }, "fail failed 5 times in a row", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &scripted{t: t, next: func(n int) provider.Message {
				tool, args := tc.args(n)
				return reply(call(fmt.Sprintf("c%d", n), tool, args))
			}}
			tb := echoTools()
			var r recorder
			res, err := agent.Run(t.Context(), p, tb, request("go"), r.opts())
			if err != nil || res.End != agent.EndLoop || res.Reason != tc.reason || len(tb.runs) != tc.runs {
				t.Fatalf("%+v %v, runs %v", res, err, tb.runs)
			}
			// The call that was not run still has its result.
			last := r.messages[len(r.messages)-1]
			if last.Role != provider.RoleToolResult {
				t.Fatalf("last message %s", roles(r.messages))
			}
		})
	}
}

// Interrupting the turn while a tool runs ends it cancelled, with every call answered.
func TestInterruptMidTool(t *testing.T) {
	p := &scripted{t: t, replies: []provider.Message{reply(call("c1", "block", `{}`), call("c2", "echo", `{}`))}}
	ctx, cancel := context.WithCancel(t.Context())
	tb := &toolbox{fn: map[string]func(context.Context, json.RawMessage) agent.Outcome{
		"block": func(ctx context.Context, _ json.RawMessage) agent.Outcome {
			cancel()
			<-ctx.Done()
			return agent.Outcome{Output: "stopped", IsError: true}
		},
		"echo": func(context.Context, json.RawMessage) agent.Outcome { return agent.Outcome{Output: "ran"} },
	}}
	var r recorder
	res, err := agent.Run(ctx, p, tb, request("go"), r.opts())
	if err != nil || res.End != agent.EndCancelled {
		t.Fatalf("%+v %v", res, err)
	}
	if got := roles(r.messages); got != "assistant toolResult:c1! toolResult:c2!" || fmt.Sprint(tb.runs) != "[c1]" {
		t.Fatalf("messages %s runs %v", got, tb.runs)
	}
}

// A tool that outlives its timeout is answered with an error and the turn goes on.
func TestToolTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{t: t, replies: []provider.Message{reply(call("c1", "hang", `{}`)), reply(provider.Text("moving on"))}}
		tb := &toolbox{fn: map[string]func(context.Context, json.RawMessage) agent.Outcome{
			"hang": func(ctx context.Context, _ json.RawMessage) agent.Outcome {
				<-ctx.Done()
				return agent.Outcome{Output: "late"}
			},
		}}
		var r recorder
		o := r.opts()
		o.ToolTimeout = 5 * time.Second
		res, err := agent.Run(context.Background(), p, tb, request("go"), o)
		if err != nil || res.End != agent.EndCompleted {
			t.Fatalf("%+v %v", res, err)
		}
		if m := r.messages[1]; !m.IsError || m.Content[0].Text != "timed out after 5s" {
			t.Fatalf("result %+v", m)
		}
	})
}

func TestBadArgumentsAndAppendFailure(t *testing.T) {
	p := &scripted{t: t, replies: []provider.Message{reply(call("c1", "echo", `[1,2]`)), reply(provider.Text("sorry"))}}
	tb := echoTools()
	var r recorder
	res, err := agent.Run(t.Context(), p, tb, request("go"), r.opts())
	if err != nil || res.End != agent.EndCompleted || len(tb.runs) != 0 || !r.messages[1].IsError {
		t.Fatalf("%+v %v runs %v", res, err, tb.runs)
	}
	p = &scripted{t: t, replies: []provider.Message{reply(provider.Text("hi"))}}
	o := r.opts()
	disk := errors.New("disk full")
	o.Append = func(provider.Message) error { return disk }
	res, err = agent.Run(t.Context(), p, tb, request("go"), o)
	if !errors.Is(err, disk) || res.End != agent.EndError {
		t.Fatalf("append failure: %+v %v", res, err)
	}
}

// TestBetween: Options.Between runs between iterations only (not before the first call nor
// after the last), and the messages it returns are what the next call sends; its error ends
// the turn.
func TestBetween(t *testing.T) {
	p := &scripted{t: t, replies: []provider.Message{
		reply(call("c1", "echo", `{}`)),
		reply(call("c2", "echo", `{}`)),
		reply(provider.Text("done")),
	}}
	var r recorder
	opts := r.opts()
	var seen []string
	opts.Between = func(_ context.Context, msgs []provider.Message) ([]provider.Message, error) {
		seen = append(seen, roles(msgs))
		// A compaction's shape: a summary in place of everything before the last call.
		return append([]provider.Message{provider.UserText("summary", 2)}, msgs[len(msgs)-2:]...), nil
	}
	res, err := agent.Run(t.Context(), p, echoTools(), request("go"), opts)
	if err != nil || res.End != agent.EndCompleted || res.Iterations != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	if fmt.Sprint(seen) != "[user assistant toolResult:c1 user assistant toolResult:c1 assistant toolResult:c2]" {
		t.Fatalf("between saw %q", seen)
	}
	if got := roles(p.requests[2].Messages); got != "user assistant toolResult:c2" || p.requests[2].Messages[0].Content[0].Text != "summary" {
		t.Fatalf("the call after it sent %s", got)
	}
	p2 := &scripted{t: t, replies: []provider.Message{reply(call("c1", "echo", `{}`))}}
	opts.Between = func(context.Context, []provider.Message) ([]provider.Message, error) {
		return nil, errors.New("disk full")
	}
	if res, err := agent.Run(t.Context(), p2, echoTools(), request("go"), opts); err == nil || res.End != agent.EndError || len(p2.requests) != 1 {
		t.Fatalf("a failing Between: %+v %v", res, err)
	}
}
