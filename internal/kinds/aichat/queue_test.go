package aichat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
)

// sendMode sends text with a queue mode and returns the stored message's id.
func sendMode(t *testing.T, r *live.Registry, id, text, mode string) string {
	t.Helper()
	res, err := r.Send(context.Background(), id, live.SendRequest{Data: []byte(text), Mode: mode})
	if err != nil {
		t.Fatalf("send %q (%s): %v", text, mode, err)
	}
	if res.MessageID == "" {
		t.Fatal("no message id")
	}
	return res.MessageID
}

// userTexts are the user messages of the conversation's context, in order.
func userTexts(t *testing.T, e *env, key string) string {
	t.Helper()
	var out []string
	for _, m := range e.history(t, key) {
		if m.Role == provider.RoleUser {
			out = append(out, m.Content[0].Text)
		}
	}
	return strings.Join(out, "|")
}

// hangOrEcho hangs on the message "hang" (until its turn is aborted) and echoes the rest.
func hangOrEcho(req chatRequest, w *sse) {
	if req.lastUser() == "hang" {
		w.hang("...")
		return
	}
	echo(req, w)
}

func (w *watcher) started(t *testing.T) {
	t.Helper()
	w.until(t, "the reply's first token", func(e *live.Event) bool { _, ok := e.Payload.(abi.AIToken); return ok })
}

// TestQueueSteerAndFollowup: during a turn, followup and queue messages wait; a steer aborts
// the turn and goes first; the rest follow in order, each its own turn, exactly once.
func TestQueueSteerAndFollowup(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:queue"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	if _, err := r.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("x"), Mode: "shout"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("an unknown mode: %v", err)
	}
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	sendMode(t, r, s.SessionID, "f1", "followup")
	sendMode(t, r, s.SessionID, "q1", "queue")
	sendMode(t, r, s.SessionID, "s1", "steer")
	var ends []string
	for len(ends) < 4 {
		ends = append(ends, w.turnEnded(t).End)
	}
	if fmt.Sprint(ends) != "[cancelled completed completed completed]" {
		t.Fatalf("turns %v: %s", ends, describe(w.seen))
	}
	if got := userTexts(t, e, key); got != "hang|s1|f1|q1" {
		t.Fatalf("delivered %s", got)
	}
	q, err := e.queues.Queued(context.Background(), key)
	if err != nil || len(q) != 0 {
		t.Fatalf("still queued %v %v", q, err)
	}
}

// TestQueueInterrupt: an interrupt message clears the queue (the cleared message is reported,
// not delivered) and replaces the running turn.
func TestQueueInterrupt(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:queue-interrupt"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	cleared := sendMode(t, r, s.SessionID, "later", "followup")
	sendMode(t, r, s.SessionID, "now", "interrupt")
	w.until(t, "the cleared message", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AIQueue)
		return ok && p.Phase == abi.QueueCleared && slicesContains(p.MessageIDs, cleared)
	})
	w.turnEnded(t)
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	if got := userTexts(t, e, key); got != "hang|now" {
		t.Fatalf("delivered %s", got)
	}
}

// TestQueueCollect: collect messages sent during a turn are delivered together, in one turn,
// once the turn is over and none has come for the debounce; over the cap, the summarize
// policy names what it left out.
func TestQueueCollect(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	e.collect = aichat.CollectOptions{Debounce: 20 * time.Millisecond, Cap: 2, Drop: aichat.DropSummarize}
	r := e.gateway(t)
	key := "agent:main:test:collect"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	for _, m := range []string{"one", "two", "three"} {
		sendMode(t, r, s.SessionID, m, "collect")
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	w.turnEnded(t)
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	want := "hang|(1 earlier messages were left out; they began: \"one\")\n\ntwo\n\nthree"
	if got := userTexts(t, e, key); got != want {
		t.Fatalf("delivered %q", got)
	}
}

// TestQueueExactlyOnceAfterACrash: a message whose delivery reached the transcript but not
// the broker's record (a crash between the two) is recognized and not delivered again; one
// queued before the restart is delivered once.
func TestQueueExactlyOnceAfterACrash(t *testing.T) {
	e := newEnv(t, echo).withBroker(t)
	ctx := context.Background()
	key := "agent:main:test:crash"
	m1, err := e.queues.Enqueue(ctx, key, broker.Followup, "reached the transcript", "")
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.chats.Hold(ctx, key, conversation.HoldOptions{Cwd: e.ws})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(provider.UserText(m1.Content, 1), map[string]any{aichat.MessageIDsField: []string{m1.ID}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := e.queues.Enqueue(ctx, key, broker.Followup, "queued before the restart", "")
	if err != nil {
		t.Fatal(err)
	}
	r := e.gateway(t)
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	if got := userTexts(t, e, key); got != "reached the transcript|queued before the restart" {
		t.Fatalf("delivered %s", got)
	}
	if n := e.m.count(); n != 1 {
		t.Fatalf("the model got %d requests, want 1", n)
	}
	hist, err := e.queues.History(ctx, key, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range hist {
		if m.State != broker.StateDelivered || m.EntryID == "" || (m.ID != m1.ID && m.ID != m2.ID) {
			t.Errorf("%+v", m)
		}
	}
}

// calls streams several tool calls in one reply.
func (s *sse) calls(calls ...[3]any) {
	var tc []any
	for i, c := range calls {
		b, _ := json.Marshal(c[2])
		tc = append(tc, map[string]any{"index": i, "id": c[0], "type": "function", "function": map[string]any{"name": c[1], "arguments": string(b)}})
	}
	s.chunk(map[string]any{"role": "assistant", "tool_calls": tc}, "")
	s.chunk(map[string]any{}, "tool_calls")
	s.done()
}

// TestSteerMidBatch: a steer while the second of three calls (a long bash) runs ends the
// batch, in order or in parallel: the finished calls keep their results, the running one and
// any not started get results saying so, and the steering message's turn (whose request the
// model server checks for pairing) follows; nothing is left unanswered in the transcript.
func TestSteerMidBatch(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		t.Run(fmt.Sprintf("parallel=%v", parallel), func(t *testing.T) {
			e := newEnv(t, func(req chatRequest, w *sse) {
				switch {
				case req.lastUser() == "batch" && req.last().Role == "user":
					args := func(k, v string) map[string]any {
						a := map[string]any{k: v}
						if parallel {
							a["_parallel"] = true
						}
						return a
					}
					w.calls([3]any{"c1", "read_file", args("path", "one.txt")}, [3]any{"c2", "bash", args("command", "sleep 300")}, [3]any{"c3", "list_dir", args("path", ".")})
				case req.last().Role == "tool":
					w.text("after the tools")
				default:
					echo(req, w)
				}
			}).withBroker(t)
			if err := os.WriteFile(filepath.Join(e.ws, "one.txt"), []byte("one\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := e.gateway(t)
			key := "agent:main:test:steer-batch"
			s := e.open(t, r, key, "yolo")
			w := &watcher{r: r, id: s.SessionID}
			sendMode(t, r, s.SessionID, "batch", "")
			// In order, c1 has finished when c2 starts; at once, c1 and c3 finish while c2 runs.
			want := map[string]bool{"c1 completed": true, "c2 started": true}
			if parallel {
				want["c3 completed"] = true
			}
			w.until(t, "the sleep running with the others done", func(ev *live.Event) bool {
				if p, ok := ev.Payload.(abi.AITool); ok {
					delete(want, p.ToolCallID+" "+p.Phase)
				}
				return len(want) == 0
			})
			sendMode(t, r, s.SessionID, "steered", "steer")
			if end := w.turnEnded(t); end.End != abi.TurnCancelled {
				t.Fatalf("the batch's turn %+v", end)
			}
			if end := w.turnEnded(t); end.End != abi.TurnCompleted {
				t.Fatalf("the steer's turn %+v: %s", end, describe(w.seen))
			}
			msgs := e.history(t, key)
			results := map[string]provider.Message{}
			for _, m := range msgs {
				if m.Role == provider.RoleToolResult {
					results[m.ToolCallID] = m
				}
			}
			if len(results) != 3 {
				t.Fatalf("results %+v (roles %s)", results, roles(msgs))
			}
			if r := results["c1"]; r.IsError || !strings.Contains(r.Content[0].Text, "one") {
				t.Fatalf("c1 %+v", r)
			}
			if r := results["c2"]; !r.IsError {
				t.Fatalf("c2 %+v", r)
			}
			if r := results["c3"]; r.IsError == parallel {
				t.Fatalf("c3 (parallel %v) %+v", parallel, r)
			}
			if got := userTexts(t, e, key); got != "batch|steered" {
				t.Fatalf("user messages %q", got)
			}
		})
	}
}
