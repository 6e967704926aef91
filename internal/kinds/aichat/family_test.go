package aichat_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestInterSessionTools: a subagent finds its parent with sessions_list, reports to it with
// sessions_send (a durable message that becomes a turn there), and is refused a conversation
// outside its family; the parent reads its child with sessions_history and nexus_status.
func TestInterSessionTools(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		last := req.last()
		first := ""
		for _, m := range req.Messages {
			if m.Role == "user" {
				first = m.text()
				break
			}
		}
		switch {
		case first == "report back": // the child
			switch {
			case last.Role == "user":
				w.call("c1", "sessions_list", map[string]any{})
			case strings.Contains(last.text(), `"relation":"parent"`):
				var l struct {
					Sessions []struct{ Key string } `json:"sessions"`
				}
				_ = json.Unmarshal([]byte(last.text()), &l)
				w.call("c2", "sessions_send", map[string]any{"key": l.Sessions[0].Key, "message": "progress from the child"})
			case strings.Contains(last.text(), `"status":"queued"`):
				w.call("c3", "sessions_history", map[string]any{"key": "agent:main:test:stranger"})
			default:
				w.text("child done; the stranger said: " + last.text())
			}
		case strings.HasPrefix(req.lastUser(), "delegate"):
			if last.Role == "tool" {
				w.text("spawned")
				return
			}
			w.call("p1", "sessions_spawn", map[string]any{"task": "report back", "label": "reporter", "cleanup": "keep"})
		case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
			if last.Role == "tool" {
				w.text("the child: " + last.text())
				return
			}
			var key string
			for _, m := range req.Messages {
				if i := strings.Index(m.text(), `"childSessionKey":"`); i >= 0 {
					key = strings.SplitN(m.text()[i+len(`"childSessionKey":"`):], `"`, 2)[0]
				}
			}
			w.call("p2", "sessions_history", map[string]any{"key": key, "limit": 2})
		default:
			w.text("noted: " + req.lastUser())
		}
	}).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:family"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "delegate")
	for range 3 { // the spawn, the child's report, the announcement
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
	}
	users := userTexts(t, e, key)
	if !strings.Contains(users, "|[message from agent main (agent:main:subagent:") || !strings.Contains(users, ")]\n\nprogress from the child|") || !strings.Contains(users, "[subagent reporter completed]") {
		t.Fatalf("the parent's messages: %q", users)
	}
	if !strings.Contains(users, "refused: agent:main:test:stranger is not among the conversations this agent may reach (family)") {
		t.Fatalf("the child reached a stranger: %q", users)
	}
	msgs := e.history(t, key)
	last := msgs[len(msgs)-1]
	if !strings.Contains(last.Content[0].Text, "the child: ") || !strings.Contains(last.Content[0].Text, "child done") {
		t.Fatalf("the parent's reading of its child: %+v", last)
	}
}

// TestNexusDestroy: a parent ends a subagent that hangs: its session closes, its run ends as
// failed (its turn was cancelled) and is announced, its conversation is archived.
func TestNexusDestroy(t *testing.T) {
	childKey := func(req chatRequest) string {
		for _, m := range req.Messages {
			if i := strings.Index(m.text(), `"childSessionKey":"`); i >= 0 {
				return strings.SplitN(m.text()[i+len(`"childSessionKey":"`):], `"`, 2)[0]
			}
		}
		return ""
	}
	e := newEnv(t, func(req chatRequest, w *sse) {
		last := req.last()
		switch {
		case req.lastUser() == "hang":
			w.hang("...")
		case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
			w.text("ok")
		case last.Role == "tool" && strings.Contains(last.text(), `"status":"started"`):
			w.call("d1", "nexus_destroy", map[string]any{"key": childKey(req)})
		case last.Role == "tool":
			w.text("destroyed: " + last.text())
		default:
			w.call("s1", "sessions_spawn", map[string]any{"task": "hang", "cleanup": "keep"})
		}
	}).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:destroyer"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "start and stop a worker")
	w.turnEnded(t)
	if end := w.turnEnded(t); end.End != abi.TurnCompleted { // the announcement
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	users := userTexts(t, e, key)
	if !strings.Contains(users, "failed: cancelled") {
		t.Fatalf("the parent's messages %q", users)
	}
	msgs := e.history(t, key)
	for _, m := range msgs {
		if m.Role == "toolResult" && m.ToolName == "nexus_destroy" && (m.IsError || !strings.Contains(m.Content[0].Text, `"archived":true`) || !strings.Contains(m.Content[0].Text, `"sessionsClosed":1`)) {
			t.Fatalf("nexus_destroy answered %+v", m)
		}
	}
	runs := runsOf(t, e)
	if len(runs) != 1 || runs[0].Outcome == nil || runs[0].Outcome.Status != "error" {
		t.Fatalf("runs %+v", runs)
	}
}

// writeAgent makes state/agents/<id>/agent.toml.
func writeAgent(t *testing.T, e *env, id, toml string) {
	t.Helper()
	dir := filepath.Join(e.state, "agents", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAgentMessages: a manager lists the worker catalogue and messages a worker agent by its
// id (seed 003's AgentMessage: from, to, content, conversation); the message goes through the
// durable queue into the worker's main conversation, which no session had open (a background
// session opens with the worker's own settings), says who sent it, and the worker answers
// back the same way. An agent the manager's allowed_targets do not name is refused.
func TestAgentMessages(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		last := req.last()
		switch {
		case strings.HasPrefix(req.lastUser(), "ask the worker") && last.Role == "user":
			w.call("m1", "agents_list", map[string]any{})
		case strings.HasPrefix(req.lastUser(), "ask the worker") && strings.Contains(last.text(), `"agents":`):
			w.call("m2", "sessions_send", map[string]any{"agent": "worker", "message": "how many files?"})
		case strings.HasPrefix(req.lastUser(), "ask the worker") && strings.Contains(last.text(), `"status":"queued"`):
			w.call("m3", "sessions_send", map[string]any{"agent": "stranger", "message": "hello?"})
		case strings.HasPrefix(req.lastUser(), "ask the worker"):
			w.text("asked; " + last.text())
		case strings.Contains(req.lastUser(), "how many files?") && last.Role == "user":
			// The worker answers its sender (the key in the message's first line).
			from := strings.TrimSuffix(strings.SplitN(req.lastUser(), "(", 2)[1], ")]\n\nhow many files?")
			w.call("w1", "sessions_send", map[string]any{"key": from, "message": "three files"})
		case last.Role == "tool":
			w.text("sent")
		default:
			w.text("noted: " + req.lastUser())
		}
	}).withBroker(t)
	writeAgent(t, e, "main", "allowed_targets = [\"agent:worker\"]\n")
	writeAgent(t, e, "worker", "description = \"counts things\"\nlevel = \"yolo\"\nallowed_targets = [\"agent:main\"]\n")
	writeAgent(t, e, "stranger", "description = \"not for you\"\n")
	r := e.gateway(t)
	key := "agent:main:test:manager"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "ask the worker")
	for range 2 { // the manager's turn, then the worker's answer as its next turn
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
	}
	users := userTexts(t, e, key)
	if !strings.Contains(users, "|[message from agent worker (agent:worker:main)]\n\nthree files") {
		t.Fatalf("the manager's messages: %q", users)
	}
	msgs := e.history(t, key)
	var results []string
	for _, m := range msgs {
		if m.Role == "toolResult" {
			results = append(results, m.Content[0].Text)
		}
	}
	if len(results) != 3 || !strings.Contains(results[0], `"description":"counts things","id":"worker","level":"yolo"`) ||
		!strings.Contains(results[1], `"to":"agent:worker:main"`) ||
		!strings.Contains(results[2], "refused: agent:stranger:main is not among the conversations this agent may reach (agent:worker)") {
		t.Fatalf("tool results %q", results)
	}
	// The worker's conversation: the manager's message, its answer; its session was a
	// background one, opened with the worker's level, and closed.
	if got := userTexts(t, e, "agent:worker:main"); got != "[message from agent main (agent:main:test:manager)]\n\nhow many files?" {
		t.Fatalf("the worker's messages: %q", got)
	}
	sh, err := e.chats.Show(context.Background(), "agent:worker:main")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sh.Entry.Extra[aichat.OptionsField]), `"level":"yolo"`) || !strings.Contains(string(sh.Entry.Extra[aichat.OptionsField]), `"agent":"worker"`) {
		t.Fatalf("the worker's options %s", sh.Entry.Extra[aichat.OptionsField])
	}
	testkit.Eventually(t, "the worker's session closed", func() bool { return len(liveChats(t, r)) == 1 })
	hist, err := e.queues.History(context.Background(), "agent:worker:main", 5)
	if err != nil || len(hist) != 1 || hist[0].From != key || hist[0].State != "delivered" {
		t.Fatalf("the worker's queue %+v %v", hist, err)
	}
}
