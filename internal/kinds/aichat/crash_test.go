package aichat_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/transcript"
)

// diskGateway starts a gateway on e's state whose sessions are kept in state/live, as nexus
// serve's are, and which resumes what an earlier gateway left, as nexus serve does.
func (e *env) diskGateway(t *testing.T) *live.Registry {
	t.Helper()
	store, err := live.OpenDiskStore(filepath.Join(e.state, "live"), live.DiskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return e.gatewayWith(t, live.Config{IdleTimeout: -1, Store: store})
}

// crashCopy is the state a gateway killed now leaves: a copy of its state directory, taken
// while it runs (what its processes wrote is in the files; nothing is closed or ended). The
// returned env runs on the copy with the same model.
func (e *env) crashCopy(t *testing.T) *env {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(e.state, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(e.state, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil // the gateway's socket and the like
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if d.Name() == "sessions.json" {
			// It names transcripts by absolute path: the copy's are elsewhere.
			b = []byte(strings.ReplaceAll(string(b), e.state, dst))
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &env{t: t, state: dst, ws: e.ws, m: e.m, window: e.window, extra: e.extra, resume: true}
	n.chats = conversation.New(conversation.Options{Dir: conversation.SessionsDir(dst)})
	return n.withBroker(t)
}

// transcriptRuns reads the runs recorded in key's transcript.
func transcriptRuns(t *testing.T, e *env, key string) []chatstore.RunSummary {
	t.Helper()
	sh, err := e.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := transcript.Open(sh.File)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := chatstore.RunsFromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// TestCrashMidTurn: a gateway killed mid-stream, mid-tool or mid-confirmation leaves a
// transcript with an open run; the next gateway closes it (the cut reply kept as aborted,
// every call answered with a result saying the gateway restarted, never run again, the run
// ended with the reason), continues the turn so the user's message is answered, and opens
// the conversation's session again under a new id that names the old one, which answers
// with where it went.
func TestCrashMidTurn(t *testing.T) {
	cases := []struct {
		name  string
		level string
		// first answers the request of the turn the crash interrupts; crashAt is the event
		// after which the gateway is killed.
		first   func(w *sse)
		crashAt func(*live.Event) bool
		// result is the synthetic result the continuation must see ("" none); partial the
		// aborted reply the transcript must keep ("" none).
		result, partial string
	}{
		{
			name:    "mid-stream",
			level:   "yolo",
			first:   func(w *sse) { w.hang("Half an ans") },
			crashAt: func(e *live.Event) bool { p, ok := e.Payload.(abi.AIToken); return ok && p.Content != "" },
			partial: "Half an ans",
		},
		{
			name:  "mid-tool",
			level: "yolo",
			first: func(w *sse) {
				w.call("c1", "bash", map[string]any{"command": "echo ran >> ran.txt; sleep 600"})
				w.done()
			},
			crashAt: func(e *live.Event) bool {
				p, ok := e.Payload.(abi.AITool)
				return ok && p.Phase == abi.PhaseStarted
			},
			result: "the gateway restarted while this call was running",
		},
		{
			name:    "mid-confirmation",
			level:   "trusted",
			first:   func(w *sse) { w.call("c1", "bash", map[string]any{"command": "echo ran >> ran.txt"}); w.done() },
			crashAt: func(e *live.Event) bool { _, ok := e.Payload.(abi.AIConfirmation); return ok },
			result:  "the gateway restarted before this call ran: it was not run",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var restarted atomic.Bool
			var seen atomic.Value // the continuation's last message
			e := newEnv(t, func(req chatRequest, w *sse) {
				if !restarted.Load() {
					tc.first(w)
					return
				}
				seen.Store(req.last())
				w.text("the answer")
				w.done()
			}).withBroker(t)
			key := "agent:main:test:crash"
			r := e.diskGateway(t)
			s := e.open(t, r, key, tc.level)
			w := &watcher{r: r, id: s.SessionID}
			if _, err := r.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("the question")}); err != nil {
				t.Fatal(err)
			}
			w.until(t, "the moment of the crash", tc.crashAt)
			e2 := e.crashCopy(t)
			if runs := transcriptRuns(t, e2, key); len(runs) != 1 || runs[0].Ended {
				t.Fatalf("the killed gateway's runs: %+v", runs)
			}
			restarted.Store(true)
			r2 := e2.diskGateway(t)

			// The conversation's session is open again, naming the old one.
			var now abi.Session
			testkit.Eventually(t, "the session reopened", func() bool {
				for _, c := range liveChats(t, r2) {
					if c.Metadata["replaces"] == s.SessionID {
						now = c
						return true
					}
				}
				return false
			})
			if now.SessionID == s.SessionID || now.Context.ChatID != key {
				t.Fatalf("reopened as %+v", now)
			}
			old, err := r2.Get(context.Background(), s.SessionID)
			if err != nil || old.Metadata["movedTo"] != now.SessionID {
				t.Fatalf("the old session: %+v %v", old.Metadata, err)
			}
			if _, err := r2.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("x")}); !isCode(err, abi.CodeSessionClosed) || !strings.Contains(err.Error(), "moved to session "+now.SessionID) {
				t.Fatalf("send to the old id: %v", err)
			}

			// The turn continued: the model answered on the recorded context.
			testkit.Eventually(t, "the question answered", func() bool {
				runs := transcriptRuns(t, e2, key)
				return len(runs) == 2 && runs[1].Ended
			})
			runs := transcriptRuns(t, e2, key)
			if !runs[0].Ended || runs[0].Outcome != chatstore.OutcomeError || runs[0].Error != aichat.RestartReason || runs[1].Outcome != chatstore.OutcomeOK {
				t.Fatalf("runs %+v", runs)
			}
			hist := e2.history(t, key)
			var answer, aborted *provider.Message
			var results []provider.Message
			users := 0
			for i, m := range hist {
				switch {
				case m.Role == provider.RoleUser:
					users++
				case m.Role == provider.RoleAssistant && m.StopReason == provider.StopAborted:
					aborted = &hist[i]
				case m.Role == provider.RoleAssistant && m.StopReason == provider.StopEndTurn:
					answer = &hist[i]
				case m.Role == provider.RoleToolResult:
					results = append(results, m)
				}
			}
			if users != 1 || answer == nil || answer.Content[0].Text != "the answer" {
				t.Fatalf("history %+v", hist)
			}
			if tc.partial != "" && (aborted == nil || aborted.Content[0].Text != tc.partial || aborted.ErrorMessage == "") {
				t.Fatalf("the cut reply: %+v", aborted)
			}
			if tc.partial == "" && aborted != nil {
				t.Fatalf("an aborted reply: %+v", aborted)
			}
			if tc.result != "" {
				if len(results) != 1 || !results[0].IsError || !strings.HasPrefix(results[0].Content[0].Text, tc.result) {
					t.Fatalf("results %+v", results)
				}
				last, _ := seen.Load().(chatMessage)
				if last.Role != "tool" || !strings.HasPrefix(last.text(), tc.result) {
					t.Fatalf("the continuation's last message %+v", last)
				}
			} else if last, _ := seen.Load().(chatMessage); last.Role != "user" || last.text() != "the question" {
				t.Fatalf("the continuation's last message %+v", last)
			}
			// The call is never run a second time.
			if b, _ := os.ReadFile(filepath.Join(e.ws, "ran.txt")); strings.Count(string(b), "ran") > 1 {
				t.Fatalf("ran.txt %q", b)
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
			if got := userTexts(t, e2, key); got != "the question|and then?" {
				t.Fatalf("user messages %q", got)
			}
			sh, err := e2.chats.Show(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			piSameContext(t, e2, key, sh.File)
		})
	}
}

// TestCrashNoContinue: with [recovery] continue_turns = false the interrupted turn is closed
// but no model call answers it; the conversation waits for its next message.
func TestCrashNoContinue(t *testing.T) {
	var restarted atomic.Bool
	var calls atomic.Int32
	e := newEnv(t, func(req chatRequest, w *sse) {
		if !restarted.Load() {
			w.hang("Half")
			return
		}
		calls.Add(1)
		w.text("answer to " + req.lastUser())
		w.done()
	}).withBroker(t)
	e.extra = "\n[recovery]\ncontinue_turns = false\n"
	key := "agent:main:test:nocontinue"
	r := e.diskGateway(t)
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	if _, err := r.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("the question")}); err != nil {
		t.Fatal(err)
	}
	w.started(t)
	e2 := e.crashCopy(t)
	restarted.Store(true)
	r2 := e2.diskGateway(t)
	var now abi.Session
	testkit.Eventually(t, "the session reopened", func() bool {
		for _, c := range liveChats(t, r2) {
			if c.Metadata["replaces"] == s.SessionID {
				now = c
				return true
			}
		}
		return false
	})
	runs := transcriptRuns(t, e2, key)
	if len(runs) != 1 || !runs[0].Ended || runs[0].Error != aichat.RestartReason {
		t.Fatalf("runs %+v", runs)
	}
	sayAndWait(t, r2, now.SessionID, "again")
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d model calls after the restart, want the one of the next message", n)
	}
	if got := userTexts(t, e2, key); got != "the question|again" {
		t.Fatalf("user messages %q", got)
	}
}

// TestCrashLeftovers: transcripts a killed gateway left, written with the real writer and
// never closed by a turn: a run open after the model's last reply is ended but not continued
// (nothing waits for the model), and a run an older crash left open, with turns after it, is
// history: nothing is appended and no model is called.
func TestCrashLeftovers(t *testing.T) {
	cases := []struct {
		name  string
		write func(t *testing.T, w conversation.TurnWriter, sid string)
		// ended: the runs' Ended after the restart; appended: whether entries are added.
		ended    []bool
		appended bool
	}{
		{
			name: "answered, not ended",
			write: func(t *testing.T, w conversation.TurnWriter, sid string) {
				if _, err := chatstore.StartRun(w, sid); err != nil {
					t.Fatal(err)
				}
				mustAppend(t, w, provider.UserText("q", 1))
				mustAppend(t, w, provider.Message{Role: provider.RoleAssistant, Content: []provider.Content{provider.Text("a")}, StopReason: provider.StopEndTurn, API: provider.APIOpenAICompletions, Provider: "fake", Model: "fake-1", Timestamp: 2})
			},
			ended:    []bool{true},
			appended: true,
		},
		{
			name: "an older crash",
			write: func(t *testing.T, w conversation.TurnWriter, sid string) {
				if _, err := chatstore.StartRun(w, sid); err != nil {
					t.Fatal(err)
				}
				mustAppend(t, w, provider.UserText("q", 1))
				r, err := chatstore.StartRun(w, sid)
				if err != nil {
					t.Fatal(err)
				}
				mustAppend(t, w, provider.UserText("q2", 3))
				mustAppend(t, w, provider.Message{Role: provider.RoleAssistant, Content: []provider.Content{provider.Text("a2")}, StopReason: provider.StopEndTurn, API: provider.APIOpenAICompletions, Provider: "fake", Model: "fake-1", Timestamp: 4})
				if err := r.End(chatstore.OutcomeOK, nil); err != nil {
					t.Fatal(err)
				}
			},
			ended: []bool{false, true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			e := newEnv(t, func(req chatRequest, w *sse) {
				calls.Add(1)
				w.text("unexpected")
				w.done()
			}).withBroker(t)
			e.resume = true
			key := "agent:main:test:leftover"
			h, err := e.chats.Hold(context.Background(), key, conversation.HoldOptions{Cwd: e.ws})
			if err != nil {
				t.Fatal(err)
			}
			tc.write(t, h, h.SessionID)
			opts, _ := json.Marshal(e.options())
			if err := h.Patch(context.Background(), map[string]any{"state": aichat.StateRunning, aichat.OptionsField: json.RawMessage(opts)}); err != nil {
				t.Fatal(err)
			}
			before := len(h.File().Entries)
			// The writer's Close appends nothing (every entry was written as it was appended):
			// the file is what a kill leaves; Close only lets go of the lock, as the kill does.
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			r := e.diskGateway(t)
			testkit.Eventually(t, "the conversation idle", func() bool { return e.chatState(t, key) == aichat.StateIdle })
			s := e.open(t, r, key, "yolo") // a session's start looks too
			runs := transcriptRuns(t, e, key)
			if len(runs) != len(tc.ended) {
				t.Fatalf("runs %+v", runs)
			}
			for i, want := range tc.ended {
				if runs[i].Ended != want {
					t.Fatalf("run %d: %+v", i, runs[i])
				}
			}
			sh, err := e.chats.Show(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			f, err := transcript.Open(sh.File)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(f.Entries) > before; got != tc.appended {
				t.Fatalf("entries %d → %d", before, len(f.Entries))
			}
			// A continuation would run before the next message: the model is called once.
			sayAndWait(t, r, s.SessionID, "next")
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d model calls", n)
			}
			piSameContext(t, e, key, sh.File)
		})
	}
}

func mustAppend(t *testing.T, w conversation.TurnWriter, m provider.Message) {
	t.Helper()
	if _, err := w.AppendMessage(m, nil); err != nil {
		t.Fatal(err)
	}
}
