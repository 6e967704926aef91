package aichat_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

// liveChats are the registry's live ai-chat sessions.
func liveChats(t *testing.T, r *live.Registry) []abi.Session {
	t.Helper()
	var out []abi.Session
	all, err := r.List(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Type == abi.TypeAIChat && !s.Status.Final() {
			out = append(out, s)
		}
	}
	return out
}

// delivered waits until the conversation's queue has no message left waiting.
func (e *env) delivered(t *testing.T, key string) {
	t.Helper()
	testkit.Eventually(t, "the queue of "+key+" delivered", func() bool {
		q, err := e.queues.Queued(context.Background(), key)
		return err == nil && len(q) == 0
	})
}

func (e *env) options() abi.AIChatOptions {
	return abi.AIChatOptions{Backend: "fake", Level: "yolo", Workspace: e.ws}
}

// TestDeliverOpensABackgroundSession: a message for a conversation no session is open on
// opens a background session, which delivers it as a turn and closes once the queue is empty;
// the same delivery id is stored once.
func TestDeliverOpensABackgroundSession(t *testing.T) {
	e := newEnv(t, echo).withBroker(t)
	r := e.gateway(t)
	ctx := context.Background()
	d, err := e.k.Deliver(ctx, aichat.Delivery{Key: "cron:nightly", Text: "tick", ID: "cron_nightly_1", From: "cron:nightly", Options: e.options()})
	if err != nil {
		t.Fatal(err)
	}
	if d.Key != "agent:main:cron:nightly" || d.MessageID != "cron_nightly_1" || d.Duplicate {
		t.Fatalf("delivered %+v", d)
	}
	e.delivered(t, d.Key)
	testkit.Eventually(t, "the background session closed", func() bool { return len(liveChats(t, r)) == 0 })
	if got := userTexts(t, e, d.Key); got != "tick" {
		t.Fatalf("user messages %q", got)
	}
	again, err := e.k.Deliver(ctx, aichat.Delivery{Key: "cron:nightly", Text: "tick", ID: "cron_nightly_1", Options: e.options()})
	if err != nil || !again.Duplicate {
		t.Fatalf("the same id again: %+v %v", again, err)
	}
	testkit.Eventually(t, "no session left", func() bool { return len(liveChats(t, r)) == 0 })
	if got := userTexts(t, e, d.Key); got != "tick" {
		t.Fatalf("user messages after the duplicate %q", got)
	}
	// The options the session had are recorded for the next one.
	sh, err := e.chats.Show(ctx, d.Key)
	if err != nil {
		t.Fatal(err)
	}
	var rec abi.AIChatOptions
	if err := json.Unmarshal(sh.Entry.Extra[aichat.OptionsField], &rec); err != nil || rec.Backend != "fake" || rec.Level != "yolo" || rec.Workspace != e.ws || rec.Model != "fake-1" {
		t.Fatalf("recorded %s: %+v %v", sh.Entry.Extra[aichat.OptionsField], rec, err)
	}
	if _, err := e.k.Deliver(ctx, aichat.Delivery{Key: "not a key", Text: "x"}); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a bad key: %v", err)
	}
}

func isCode(err error, code abi.Code) bool {
	var ae *abi.Error
	return errors.As(err, &ae) && ae.Code == code
}

// TestDeliverWakesTheLiveSession: with a session open on the conversation, a delivery is a
// turn there; no other session opens.
func TestDeliverWakesTheLiveSession(t *testing.T) {
	e := newEnv(t, echo).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:live"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	if _, err := e.k.Deliver(context.Background(), aichat.Delivery{Key: key, Text: "from a trigger", From: "hook:h1"}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	if n := len(liveChats(t, r)); n != 1 {
		t.Fatalf("%d live sessions", n)
	}
	if got := userTexts(t, e, key); got != "from a trigger" {
		t.Fatalf("user messages %q", got)
	}
}

// TestResumeDeliversAfterARestart: messages a stopped gateway left queued are delivered by
// the next one without anyone opening the conversation, as its last session was opened (its
// options, its roadmap).
func TestResumeDeliversAfterARestart(t *testing.T) {
	e := newEnv(t, echo).withBroker(t)
	key := "agent:main:test:resumed"
	r := e.gateway(t)
	opts, _ := json.Marshal(e.options())
	s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key, RoadmapID: "rm-release"}, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	sayAndWait(t, r, s.SessionID, "first")
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Acknowledged while no gateway ran (or just before one was killed).
	for _, text := range []string{"second", "third"} {
		if _, err := e.queues.Enqueue(context.Background(), key, broker.Followup, text, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.resume = true
	r2 := e.gateway(t)
	// The session the gateway opens is linked to the roadmap the conversation's last one was.
	testkit.Eventually(t, "the background session linked to the roadmap", func() bool {
		all, _ := r2.List(context.Background(), true)
		for _, s := range all {
			if s.Type == abi.TypeAIChat && s.Context.ChatID == key && s.Context.RoadmapID == "rm-release" {
				return true
			}
		}
		return false
	})
	e.delivered(t, key)
	testkit.Eventually(t, "the background session closed", func() bool { return len(liveChats(t, r2)) == 0 })
	if got := userTexts(t, e, key); got != "first|second|third" {
		t.Fatalf("user messages %q", got)
	}
}

// TestForegroundTakesOver: a person opening the conversation a background session delivers
// becomes its deliverer; their steer ends the background turn, and the background session
// closes.
func TestForegroundTakesOver(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:takeover"
	if _, err := e.k.Deliver(context.Background(), aichat.Delivery{Key: key, Text: "hang", Options: e.options()}); err != nil {
		t.Fatal(err)
	}
	var bg abi.Session
	testkit.Eventually(t, "a background session", func() bool {
		l := liveChats(t, r)
		if len(l) == 1 {
			bg = l[0]
		}
		return len(l) == 1
	})
	(&watcher{r: r, id: bg.SessionID}).started(t)
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	sendMode(t, r, s.SessionID, "hello", "steer")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	testkit.Eventually(t, "the background session closed", func() bool {
		l := liveChats(t, r)
		return len(l) == 1 && l[0].SessionID == s.SessionID
	})
	if got := userTexts(t, e, key); got != "hang|hello" || !strings.Contains(roles(e.history(t, key)), "assistant") {
		t.Fatalf("user messages %q", got)
	}
}

// TestSendOpensWithTheSendersPowers: sessions_send to a conversation that never ran opens it
// with the sender's powers intersected with the target agent's, not at the target agent's
// level (yolo here): from a sandboxed sender its bash is refused, from a trusted one it asks
// for confirmation; the sender's disabled write_file is disabled there too.
func TestSendOpensWithTheSendersPowers(t *testing.T) {
	for _, level := range []string{"sandboxed", "trusted"} {
		t.Run(level, func(t *testing.T) {
			e := newEnv(t, func(req chatRequest, w *sse) {
				switch {
				case strings.HasSuffix(req.lastUser(), "run it"): // the ops agent
					tried := 0
					for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != "user"; i-- {
						if req.Messages[i].Role == "tool" {
							tried++
						}
					}
					switch tried {
					case 0:
						w.call("o1", "bash", map[string]any{"command": "echo hi > bashed.txt"})
					case 1:
						w.call("o2", "write_file", map[string]any{"path": "written.txt", "content": "hi"})
					default:
						w.text("done")
					}
				case req.last().Role == "tool":
					w.text("sent")
				default:
					w.call("b1", "sessions_send", map[string]any{"agent": "ops", "message": "run it"})
				}
			}).withBroker(t)
			writeAgent(t, e, "boss", "disabled_tools = [\"write_file\"]\nallowed_targets = [\"agent:ops\"]\n")
			writeAgent(t, e, "ops", "level = \"yolo\"\n")
			r := e.gateway(t)
			s := e.open(t, r, "agent:boss:test:b", level)
			w := &watcher{r: r, id: s.SessionID}
			send(t, r, s.SessionID, "ask ops")
			if end := w.turnEnded(t); end.End != abi.TurnCompleted {
				t.Fatalf("turn %+v: %s", end, describe(w.seen))
			}
			const target = "agent:ops:main"
			if level == "trusted" {
				var bg string
				testkit.Eventually(t, "the background session on "+target, func() bool {
					for _, s := range liveChats(t, r) {
						if s.Metadata["chatKey"] == target {
							bg = s.SessionID
						}
					}
					return bg != ""
				})
				bw := &watcher{r: r, id: bg}
				ev := bw.until(t, "a confirmation request", func(e *live.Event) bool { _, ok := e.Payload.(abi.AIConfirmation); return ok })
				c := ev.Payload.(abi.AIConfirmation)
				if c.Tool != "bash" {
					t.Fatalf("confirmation %+v", c)
				}
				if _, err := r.Control(context.Background(), bg, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "deny"}); err != nil {
					t.Fatal(err)
				}
			}
			e.delivered(t, target)
			testkit.Eventually(t, "the ops turn's end", func() bool {
				msgs := e.history(t, target)
				return len(msgs) > 0 && msgs[len(msgs)-1].Role == "assistant" && msgs[len(msgs)-1].Content[0].Text == "done"
			})
			var results []string
			for _, m := range e.history(t, target) {
				if m.Role == "toolResult" {
					if !m.IsError {
						t.Errorf("%s ran: %q", m.ToolName, m.Content[0].Text)
					}
					results = append(results, m.ToolName+": "+m.Content[0].Text)
				}
			}
			t.Logf("results %q", results)
			if len(results) != 2 || !strings.Contains(results[1], "disabled") ||
				level == "sandboxed" && !strings.Contains(results[0], "not available at permission level sandboxed") {
				t.Errorf("results %q", results)
			}
			for _, f := range []string{"bashed.txt", "written.txt"} {
				if _, err := os.Stat(filepath.Join(e.ws, f)); err == nil {
					t.Errorf("%s was written", f)
				}
			}
			sh, err := e.chats.Show(context.Background(), target)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(sh.Entry.Extra[aichat.OptionsField]); !strings.Contains(got, `"level":"`+level+`"`) {
				t.Errorf("%s opened with %s", target, got)
			}
		})
	}
}
