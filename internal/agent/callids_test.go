package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/transcript"
)

// chatPairs checks a chat completions request the way the APIs do (every call id unique in the
// request and not empty, every result answering an open call, every call answered before the
// next user or assistant message) and returns, for each tool message, the arguments of the
// call it answers and its content.
func chatPairs(body []byte) ([][2]string, error) {
	var req struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	open := map[string]string{} // id -> arguments
	var pairs [][2]string
	for i, m := range req.Messages {
		switch m.Role {
		case "tool":
			args, ok := open[m.ToolCallID]
			if !ok {
				return nil, fmt.Errorf("message %d: a result for %q, which no open call has", i, m.ToolCallID)
			}
			delete(open, m.ToolCallID)
			var text string
			_ = json.Unmarshal(m.Content, &text)
			pairs = append(pairs, [2]string{args, text})
			continue
		}
		if len(open) > 0 {
			return nil, fmt.Errorf("message %d (%s) while calls %v have no result", i, m.Role, open)
		}
		for _, c := range m.ToolCalls {
			if c.ID == "" || seen[c.ID] {
				return nil, fmt.Errorf("message %d: call id %q empty or used twice", i, c.ID)
			}
			seen[c.ID] = true
			open[c.ID] = c.Function.Arguments
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("calls %v without results", open)
	}
	return pairs, nil
}

// refusing answers each request with reply, after checking it with chatPairs: a request a
// real API would refuse gets a 400, as from the API.
func refusing(tb testing.TB, reply func(n int, body []byte, w *chatSSE)) func(int, []byte, *chatSSE) {
	return func(n int, body []byte, w *chatSSE) {
		if _, err := chatPairs(body); err != nil {
			tb.Errorf("request %d: %v", n, err)
			w.refuse(err)
			return
		}
		reply(n, body, w)
	}
}

// conversation is a transcript and the turns run on it, each from its context as the ai-chat
// kind runs them.
type conversation struct {
	tb testing.TB
	w  *transcript.Writer
	p  provider.Provider
	// maxArgs is the requests' MaxToolArguments.
	maxArgs int
}

func (c *conversation) turn(tools agent.Tools, text string, opts agent.Options) *agent.Result {
	c.tb.Helper()
	cx, err := c.w.Context()
	if err != nil {
		c.tb.Fatal(err)
	}
	msgs, err := provider.FromContext(cx.Messages)
	if err != nil {
		c.tb.Fatal(err)
	}
	u := provider.UserText(text, 1)
	if _, err := c.w.AppendMessage(u); err != nil {
		c.tb.Fatal(err)
	}
	opts.Append = func(m provider.Message) error { _, err := c.w.AppendMessage(m); return err }
	res, err := agent.Run(c.tb.Context(), c.p, tools, provider.Request{Messages: append(msgs, u), MaxToolArguments: c.maxArgs}, opts)
	if err != nil {
		c.tb.Fatalf("turn %q: %v", text, err)
	}
	return res
}

// lines are the transcript's message lines.
func (c *conversation) messages() []provider.Message {
	c.tb.Helper()
	b, err := os.ReadFile(c.w.Path())
	if err != nil {
		c.tb.Fatal(err)
	}
	var out []provider.Message
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var e struct {
			Type    string           `json:"type"`
			Message provider.Message `json:"message"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			c.tb.Fatalf("%s: %v", line, err)
		}
		if e.Type == "message" {
			out = append(out, e.Message)
		}
	}
	return out
}

// Two calls of one reply with one id, or none: the turn completes, each result is recorded
// with its own call, and the next turn (from the transcript) works.
func TestDuplicateCallIDs(t *testing.T) {
	for _, id := range []string{"same", ""} {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			srv := newChatServer(t, true, refusing(t, func(n int, _ []byte, w *chatSSE) {
				if n == 0 {
					w.calls(chatCall{id, "echo", `{"x":1}`}, chatCall{id, "echo", `{"x":2}`})
					return
				}
				w.text("done")
			}))
			tw, err := transcript.Create(filepath.Join(t.TempDir(), "t.jsonl"), "/work", transcript.WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tw.Close() })
			c := &conversation{tb: t, w: tw, p: srv.open(t)}
			var r recorder
			if res := c.turn(echoTools(), "echo twice", r.opts()); res.End != agent.EndCompleted || res.Iterations != 2 {
				t.Fatalf("first turn %+v", res)
			}
			if res := c.turn(echoTools(), "again", agent.Options{}); res.End != agent.EndCompleted {
				t.Fatalf("second turn %+v", res)
			}
			msgs := c.messages()
			if got := roles(msgs); !strings.HasPrefix(got, "user assistant toolResult:") {
				t.Fatalf("transcript %s", got)
			}
			calls := msgs[1].ToolCalls()
			if len(calls) != 2 || calls[0].ID == "" || calls[1].ID == "" || calls[0].ID == calls[1].ID || id != "" && calls[0].ID != id {
				t.Fatalf("recorded calls %+v", calls)
			}
			for i, call := range calls {
				res := msgs[2+i]
				if res.ToolCallID != call.ID || res.IsError || res.Content[0].Text != string(call.Arguments) {
					t.Errorf("result %d %+v for call %+v", i, res, call)
				}
			}
			// The events name the calls as the transcript does.
			var detected, started []string
			for _, e := range r.events {
				switch e.Type {
				case agent.EventToolDetected:
					detected = append(detected, e.Call.ID)
				case agent.EventToolStarted:
					started = append(started, e.Call.ID)
				}
			}
			if want := []string{calls[0].ID, calls[1].ID}; fmt.Sprint(detected) != fmt.Sprint(want) || fmt.Sprint(started) != fmt.Sprint(want) {
				t.Errorf("detected %q, started %q, recorded %q", detected, started, want)
			}
			if bodies, _ := srv.requests(); len(bodies) != 3 {
				t.Fatalf("%d requests", len(bodies))
			}
		})
	}
}

// A transcript written before calls were renamed, holding a reply with two calls of one id (or
// none) and their results, opens, and a further turn sends each result with its own call, in
// order.
func TestDamagedTranscript(t *testing.T) {
	for _, file := range []string{"duplicate-ids.jsonl", "empty-ids.jsonl"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), file)
			src, err := os.Open(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = src.Close() }()
			dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(dst, src); err != nil {
				t.Fatal(err)
			}
			_ = dst.Close()
			srv := newChatServer(t, true, refusing(t, func(_ int, _ []byte, w *chatSSE) { w.text("fine") }))
			tw, err := transcript.OpenWriter(path, transcript.WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tw.Close() })
			c := &conversation{tb: t, w: tw, p: srv.open(t)}
			if res := c.turn(echoTools(), "go on", agent.Options{}); res.End != agent.EndCompleted {
				t.Fatalf("turn %+v %v", res, res.Err)
			}
			bodies, _ := srv.requests()
			if len(bodies) != 1 {
				t.Fatalf("%d requests", len(bodies))
			}
			pairs, err := chatPairs(bodies[0])
			if err != nil {
				t.Fatal(err)
			}
			want := [][2]string{{`{"x":1}`, `{"x":1}`}, {`{"x":2}`, `{"x":2}`}}
			if fmt.Sprint(pairs) != fmt.Sprint(want) {
				t.Fatalf("calls and results sent %q, want %q", pairs, want)
			}
		})
	}
}
