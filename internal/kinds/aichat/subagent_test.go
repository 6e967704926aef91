package aichat_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/transcript"
)

// manager answers as a manager and its workers do: "delegate ..." spawns a subagent with the
// rest as its task (cleanup and level from the message), a task answers "done: <task>", and an
// announcement is acknowledged with "got it".
func manager(req chatRequest, w *sse) {
	last := req.last()
	switch {
	case last.Role == "tool":
		w.text("spawned: " + last.text())
	case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
		w.text("got it")
	case strings.HasPrefix(req.lastUser(), "delegate "):
		f := strings.Fields(req.lastUser())
		args := map[string]any{"task": strings.Join(f[3:], " "), "label": "worker", "cleanup": f[1]}
		if f[2] != "-" {
			args["level"] = f[2]
		}
		w.call("call_spawn", "sessions_spawn", args)
	default:
		w.text("done: " + req.lastUser())
	}
}

func runsOf(t *testing.T, e *env) []chatstore.SubagentRunRecord {
	t.Helper()
	g, err := chatstore.OpenSubagents(filepath.Join(e.state, "subagents"), nil)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := g.List(chatstore.SubagentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// TestSubagentAnnounce: sessions_spawn starts a child conversation linked to its parent (the
// transcript header, sessions.json, runs.json), returns at once, and the child's answer is
// announced into the parent as a message, which starts the parent's next turn.
func TestSubagentAnnounce(t *testing.T) {
	e := newEnv(t, manager).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:manager"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "delegate keep - count the files")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted { // the announcement's turn
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	users := userTexts(t, e, key)
	if !strings.HasPrefix(users, "delegate keep - count the files|[subagent worker completed] task: count the files") || !strings.HasSuffix(users, "done: count the files") {
		t.Fatalf("the parent's messages: %q", users)
	}
	runs := runsOf(t, e)
	if len(runs) != 1 || runs[0].RequesterSessionKey != key || runs[0].EndedAt == 0 || runs[0].Outcome == nil || runs[0].Outcome.Status != chatstore.OutcomeOK || runs[0].Label != "worker" {
		t.Fatalf("runs %+v", runs)
	}
	child := runs[0].ChildSessionKey
	if !strings.HasPrefix(child, "agent:main:subagent:") {
		t.Fatalf("child key %s", child)
	}
	sh, err := e.chats.Show(context.Background(), child)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := e.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	en := sh.Entry
	if en.SpawnedBy != key || en.ParentSessionID != parent.Entry.SessionID || en.ToolCallID != "call_spawn" || !en.IsSubagent || en.TaskDescription != "count the files" || en.TaskStatus != "completed" {
		t.Fatalf("child entry %+v", en)
	}
	f, err := transcript.Open(sh.File)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if f.Header.ParentSession != parent.File {
		t.Fatalf("child header parentSession %q, want %q", f.Header.ParentSession, parent.File)
	}
	// The child's session closed once it had answered.
	got, err := r.List(context.Background(), false)
	if err != nil || len(got) != 1 {
		t.Fatalf("live sessions %d %v", len(got), err)
	}
}

// TestSubagentCleanupDelete: a delete child's conversation is archived once announced.
func TestSubagentCleanupDelete(t *testing.T) {
	e := newEnv(t, manager).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:manager-delete"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "delegate delete - tidy up")
	w.turnEnded(t)
	w.turnEnded(t)
	runs := runsOf(t, e)
	if len(runs) != 1 || runs[0].ArchiveAtMs == 0 {
		t.Fatalf("runs %+v", runs)
	}
	// The archive follows the announcement (which the parent's turn above took).
	testkit.Eventually(t, "the child's conversation archived", func() bool {
		_, err := e.chats.Show(context.Background(), runs[0].ChildSessionKey)
		return abi.CodeOf(err) == abi.CodeSessionNotFound || abi.CodeOf(err) == abi.CodeInvalidArgument
	})
}

// TestSubagentLimits: a level above the parent's and a depth past the limit are refused, the
// tool result says why, and nothing is spawned.
func TestSubagentLimits(t *testing.T) {
	e := newEnv(t, manager).withBroker(t)
	r := e.gateway(t)
	for _, tc := range []struct{ key, level, msg, want string }{
		{"agent:main:test:trusted-parent", "trusted", "delegate keep yolo escalate", "higher than this conversation's"},
		{"agent:main:subagent:a:subagent:b:subagent:c", "yolo", "delegate keep - deeper", "depth 3"},
	} {
		s := e.open(t, r, tc.key, tc.level)
		w := &watcher{r: r, id: s.SessionID}
		send(t, r, s.SessionID, tc.msg)
		w.turnEnded(t)
		msgs := e.history(t, tc.key)
		res := msgs[2]
		if !res.IsError || !strings.Contains(res.Content[0].Text, tc.want) {
			t.Errorf("%s: the tool result %+v", tc.key, res)
		}
	}
	if runs := runsOf(t, e); len(runs) != 0 {
		t.Fatalf("spawned %+v", runs)
	}
}

// TestSubagentAnnounceOnceAfterARestart: a run its gateway left running is ended as failed
// and announced by the next gateway, once, whatever the restarts.
func TestSubagentAnnounceOnceAfterARestart(t *testing.T) {
	e := newEnv(t, manager).withBroker(t)
	key := "agent:main:test:orphan-parent"
	g, err := chatstore.OpenSubagents(filepath.Join(e.state, "subagents"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Put(context.Background(), chatstore.SubagentRunRecord{RunID: "run-orphan", ChildSessionKey: "agent:main:subagent:run-orphan",
		RequesterSessionKey: key, Task: "long job", Cleanup: "keep", CreatedAt: 1, StartedAt: 1}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := e.gateway(t)
		s := e.open(t, r, "agent:main:test:someone-else", "yolo")
		if _, err := r.Close(context.Background(), s.SessionID, abi.CloseRequested); err != nil {
			t.Fatal(err)
		}
	}
	hist, err := e.queues.History(context.Background(), key, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].ID != "announce_run-orphan" || !strings.Contains(hist[0].Content, "failed: the gateway stopped while it ran") {
		t.Fatalf("announcements %+v", hist)
	}
	// The parent, opened again, gets it as a turn.
	r := e.gateway(t)
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	if got := userTexts(t, e, key); !strings.HasPrefix(got, "[subagent run-orphan failed: the gateway stopped while it ran] task: long job") {
		t.Fatalf("delivered %q", got)
	}
	b, _ := os.ReadFile(g.Path())
	var doc struct {
		Runs map[string]json.RawMessage `json:"runs"`
	}
	_ = json.Unmarshal(b, &doc)
	if !strings.Contains(string(doc.Runs["run-orphan"]), `"endedAt"`) {
		t.Fatalf("runs.json %s", b)
	}
}
