package aichat_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/testkit"
)

// reopened waits for the session a restart opened on key in place of old, and checks that the
// old one says where it went.
func reopened(t *testing.T, r *live.Registry, key, old string) abi.Session {
	t.Helper()
	var now abi.Session
	testkit.Eventually(t, "the session of "+key+" reopened", func() bool {
		for _, c := range liveChats(t, r) {
			if c.Metadata["replaces"] == old {
				now = c
				return true
			}
		}
		return false
	})
	if now.SessionID == old || now.Context.ChatID != key {
		t.Fatalf("reopened as %+v", now)
	}
	if o, err := r.Get(context.Background(), old); err != nil || o.Metadata["movedTo"] != now.SessionID {
		t.Fatalf("the old session: %+v %v", o.Metadata, err)
	}
	return now
}

// transcriptOf is key's transcript file.
func transcriptOf(t *testing.T, e *env, key string) string {
	t.Helper()
	sh, err := e.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return sh.File
}

// TestCrashMidCompaction: a gateway killed while a turn compacts the conversation (its
// summary request unanswered) leaves the run open and sessions.json saying it compacts. The
// next gateway closes the run with the reason, continues the turn (the compaction is done
// again, then the model answers), opens the conversation's session again on the same key, and
// pi reads the transcript with the context nexus builds.
func TestCrashMidCompaction(t *testing.T) {
	big1, big2 := strings.Repeat("alpha ", 400), strings.Repeat("bravo ", 400) // about 600 tokens each
	var restarted atomic.Bool
	e := newEnv(t, func(req chatRequest, w *sse) {
		switch {
		case req.isSummary() && !restarted.Load():
			w.hang("SUMM")
		case req.isSummary():
			w.text("SUMMARY: the user sent alphas")
		case req.lastUser() == big1:
			w.text("ok")
		default:
			w.text("the answer")
		}
	}).withBroker(t)
	e.m.countTokens = true
	key := "agent:main:test:crash-compaction"
	r := e.diskGateway(t)
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, big1)
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	send(t, r, s.SessionID, big2)
	w.until(t, "the compaction's start", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AICompaction)
		return ok && p.Phase == abi.PhaseStarted
	})
	testkit.Eventually(t, "the summary requested", func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		n := len(e.m.requests)
		return n > 0 && e.m.requests[n-1].isSummary()
	})
	e2 := e.crashCopy(t)
	if runs := transcriptRuns(t, e2, key); len(runs) != 2 || runs[1].Ended {
		t.Fatalf("the killed gateway's runs: %+v", runs)
	}
	if st := e2.chatState(t, key); st != aichat.StateCompacting {
		t.Fatalf("the killed gateway's state %q", st)
	}
	restarted.Store(true)
	r2 := e2.diskGateway(t)
	now := reopened(t, r2, key, s.SessionID)

	testkit.Eventually(t, "the question answered", func() bool {
		runs := transcriptRuns(t, e2, key)
		return len(runs) == 3 && runs[2].Ended
	})
	runs := transcriptRuns(t, e2, key)
	if runs[1].Outcome != chatstore.OutcomeError || runs[1].Error != aichat.RestartReason || runs[2].Outcome != chatstore.OutcomeOK {
		t.Fatalf("runs %+v", runs)
	}
	hist := e2.history(t, key)
	if got := roles(hist); got != "user user assistant/stop" { // the summary, the question, the answer
		t.Fatalf("context after the restart: %s", got)
	}
	if !strings.Contains(hist[0].Content[0].Text, "SUMMARY: the user sent alphas") || hist[1].Content[0].Text != big2 || hist[2].Content[0].Text != "the answer" {
		t.Fatalf("history %+v", hist)
	}
	sh, err := e2.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Entry.CompactionCount != 1 {
		t.Fatalf("compactionCount %d", sh.Entry.CompactionCount)
	}
	if st := e2.chatState(t, key); st != aichat.StateIdle {
		t.Fatalf("state %q", st)
	}
	// The conversation goes on in the new session.
	w2 := &watcher{r: r2, id: now.SessionID}
	w2.until(t, "the continued turn's end", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AITurn)
		return ok && p.Phase == abi.PhaseEnded
	})
	sayAndWait(t, r2, now.SessionID, "and then?")
	piSameContext(t, e2, key, sh.File)
}

// TestCrashWhileSubagentsRun: a gateway killed while a parent's turn runs a tool and the
// subagent it spawned is mid-stream. The next gateway closes both turns (the parent's call
// answered as not run again, the child's cut reply kept as aborted, each run ended with the
// reason); the parent's turn continues and its session reopens on the same key; the child's
// run, whose gateway is gone, ends as an error and is announced to the parent, which answers
// it. pi reads both transcripts with the context nexus builds.
func TestCrashWhileSubagentsRun(t *testing.T) {
	var restarted, childAsked atomic.Bool
	e := newEnv(t, func(req chatRequest, w *sse) {
		first := ""
		for _, m := range req.Messages {
			if m.Role == "user" {
				first = m.text()
				break
			}
		}
		last := req.last()
		switch {
		case first == "child task" && !restarted.Load():
			childAsked.Store(true)
			w.hang("working")
		case first == "child task":
			w.text("the child's answer")
		case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
			w.text("noted: " + strings.SplitN(req.lastUser(), "\n", 2)[0])
		case last.Role == "user":
			w.call("call_spawn", "sessions_spawn", map[string]any{"task": "child task", "label": "kid", "cleanup": "keep"})
		case last.Role == "tool" && strings.Contains(last.text(), `"childSessionKey"`):
			w.call("call_wait", "bash", map[string]any{"command": "sleep 600"})
		default:
			w.text("the answer")
		}
	}).withBroker(t)
	key := "agent:main:test:crash-parent"
	r := e.diskGateway(t)
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "delegate")
	spawned := w.until(t, "the subagent started", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AISubagent)
		return ok && p.Phase == abi.PhaseStarted
	}).Payload.(abi.AISubagent)
	w.until(t, "the parent's bash call", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AITool)
		return ok && p.Phase == abi.PhaseStarted && p.Name == "bash"
	})
	// The child's reply has begun (its first token is out, so its log holds it).
	cw := &watcher{r: r, id: spawned.SessionID}
	cw.started(t)
	testkit.Eventually(t, "the child mid-stream", childAsked.Load)
	runs := runsOf(t, e)
	if len(runs) != 1 || runs[0].EndedAt != 0 {
		t.Fatalf("the subagent runs: %+v", runs)
	}
	child := runs[0].ChildSessionKey
	e2 := e.crashCopy(t)
	restarted.Store(true)
	r2 := e2.diskGateway(t)
	reopened(t, r2, key, s.SessionID)

	// The parent's turn is closed and continued; the child's run ends and is announced.
	testkit.Eventually(t, "the parent answered and told of the child", func() bool {
		return strings.Contains(userTexts(t, e2, key), aichat.AnnouncePrefix) && len(transcriptRuns(t, e2, key)) == 3 && transcriptRuns(t, e2, key)[2].Ended
	})
	pruns := transcriptRuns(t, e2, key)
	if pruns[0].Outcome != chatstore.OutcomeError || pruns[0].Error != aichat.RestartReason || pruns[1].Outcome != chatstore.OutcomeOK || pruns[2].Outcome != chatstore.OutcomeOK {
		t.Fatalf("the parent's runs %+v", pruns)
	}
	var results, answers []string
	for _, m := range e2.history(t, key) {
		switch {
		case m.Role == provider.RoleToolResult:
			results = append(results, m.Content[0].Text)
		case m.Role == provider.RoleAssistant && m.StopReason == provider.StopEndTurn:
			answers = append(answers, m.Content[0].Text)
		}
	}
	if len(results) != 2 || !strings.Contains(results[0], `"childSessionKey"`) || !strings.HasPrefix(results[1], "the gateway restarted while this call was running") {
		t.Fatalf("the parent's results %q", results)
	}
	if len(answers) != 2 || answers[0] != "the answer" || !strings.HasPrefix(answers[1], "noted: "+aichat.AnnouncePrefix+" kid failed") {
		t.Fatalf("the parent's answers %q", answers)
	}
	// The child: its turn closed, the cut reply kept, not continued (its run ended with its
	// gateway).
	cruns := transcriptRuns(t, e2, child)
	if len(cruns) != 1 || !cruns[0].Ended || cruns[0].Outcome != chatstore.OutcomeError || cruns[0].Error != aichat.RestartReason {
		t.Fatalf("the child's runs %+v", cruns)
	}
	chist := e2.history(t, child)
	if got := roles(chist); got != "user assistant/aborted" || chist[1].Content[0].Text != "working" {
		t.Fatalf("the child's context %s: %+v", got, chist)
	}
	runs = runsOf(t, e2)
	if len(runs) != 1 || runs[0].EndedAt == 0 || runs[0].Outcome == nil || runs[0].Outcome.Status != chatstore.OutcomeError {
		t.Fatalf("the run after the restart: %+v", runs)
	}
	for _, k := range []string{key, child} {
		if st := e2.chatState(t, k); st != aichat.StateIdle {
			t.Fatalf("%s: state %q", k, st)
		}
		piSameContext(t, e2, k, transcriptOf(t, e2, k))
	}
}
