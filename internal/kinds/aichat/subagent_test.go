package aichat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/provider"
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
	// parentMessageId names the parent's reply that holds the call, and the label is the run's.
	if en.Label != "worker" {
		t.Fatalf("child label %q, want worker", en.Label)
	}
	// The run's record names the child's session, the call and the reply; the child's
	// transcript ends with the run's end.
	if r := runs[0]; r.ChildSessionID != en.SessionID || r.ToolCallID != "call_spawn" || r.ParentMessageID != en.ParentMessageID {
		t.Fatalf("run %+v, child entry %+v", r, en)
	}
	if raw, err := f.Raw(f.Leaf()); err != nil || !strings.Contains(string(raw), `"customType":"`+aichat.RunEndCustomType+`"`) || !strings.Contains(string(raw), `"status":"ok"`) {
		t.Fatalf("the child's last entry: %s %v", raw, err)
	}
	pf, err := transcript.Open(parent.File)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Close() }()
	pe := pf.Entry(en.ParentMessageID)
	if en.ParentMessageID == "" || pe == nil {
		t.Fatalf("child parentMessageId %q names no entry of the parent", en.ParentMessageID)
	}
	if raw, err := pf.Raw(pe); err != nil || !strings.Contains(string(raw), `"role":"assistant"`) || !strings.Contains(string(raw), `"id":"call_spawn"`) {
		t.Fatalf("the parent's entry %s is not the reply with the call: %s %v", en.ParentMessageID, raw, err)
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

// fanOut answers as a manager that hands out tasks at once: "fan out N" is one reply of N
// sessions_spawn calls run in parallel, and each child holds its task until hold is closed,
// so every child started is still running when the batch ends.
func fanOut(hold <-chan struct{}) func(chatRequest, *sse) {
	return func(req chatRequest, w *sse) {
		switch {
		case req.lastUser() == "hold": // a child
			select {
			case <-hold:
				w.text("held")
			case <-w.r.Context().Done():
			}
		case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
			w.text("got it")
		case req.last().Role == "tool":
			w.text("fanned out")
		case strings.HasPrefix(req.lastUser(), "fan out "):
			n, _ := strconv.Atoi(strings.TrimPrefix(req.lastUser(), "fan out "))
			cs := make([][3]any, n)
			for i := range cs {
				cs[i] = [3]any{fmt.Sprintf("spawn_%d", i), "sessions_spawn", map[string]any{"task": "hold", "label": fmt.Sprintf("w%d", i), "cleanup": "keep", "_parallel": true}}
			}
			w.calls(cs...)
		default:
			w.text("noted")
		}
	}
}

// spawnResults counts a conversation's sessions_spawn results: started, and refused with
// the limit's error code.
func spawnResults(t *testing.T, e *env, key string) (started, limited int, other []string) {
	t.Helper()
	for _, m := range e.history(t, key) {
		if m.Role != "toolResult" || m.ToolName != "sessions_spawn" {
			continue
		}
		text := m.Content[0].Text
		switch {
		case !m.IsError && strings.Contains(text, `"status":"started"`):
			started++
		case m.IsError && strings.HasPrefix(text, string(abi.CodeLimitExceeded)+": "):
			limited++
		default:
			other = append(other, text)
		}
	}
	return started, limited, other
}

// TestSubagentCapsHoldUnderParallelSpawns: the caps are checked and the run recorded in one
// transaction, so parallel spawns cannot pass the check together: 12 parallel spawns with a
// per-conversation cap of 5 start exactly 5 (7 get LIMIT_EXCEEDED), and three conversations
// spawning 10 each with a gateway cap of 16 start exactly 16.
func TestSubagentCapsHoldUnderParallelSpawns(t *testing.T) {
	for _, tc := range []struct {
		name          string
		limits        aichat.SubagentLimits
		config        string // config.toml's [subagents], for the limits the kind does not set
		conversations int
		each          int
		want          int
	}{
		{"per conversation", aichat.SubagentLimits{MaxChildren: 5}, "", 1, 12, 5},
		{"gateway", aichat.SubagentLimits{MaxChildren: 10, MaxRunning: 16}, "", 3, 10, 16},
		{"config.toml", aichat.SubagentLimits{}, "\n[subagents]\nmax_children = 3\n", 1, 8, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hold := make(chan struct{})
			release := sync.OnceFunc(func() { close(hold) })
			t.Cleanup(release)
			e := newEnv(t, fanOut(hold)).withBroker(t)
			e.limits = tc.limits
			e.extra = tc.config
			r := e.gateway(t)
			var keys []string
			var ws []*watcher
			for i := range tc.conversations {
				key := fmt.Sprintf("agent:main:test:fan-%d", i)
				s := e.open(t, r, key, "yolo")
				keys, ws = append(keys, key), append(ws, &watcher{r: r, id: s.SessionID})
			}
			for _, w := range ws {
				send(t, r, w.id, fmt.Sprintf("fan out %d", tc.each))
			}
			// The refusals may end the turn as a loop (the same tool failing in a row): the
			// results are in the transcript either way.
			for _, w := range ws {
				w.turnEnded(t)
			}
			running := 0
			for _, run := range runsOf(t, e) {
				if run.EndedAt == 0 {
					running++
				}
			}
			started, limited := 0, 0
			for _, key := range keys {
				s, l, other := spawnResults(t, e, key)
				started, limited = started+s, limited+l
				if len(other) > 0 {
					t.Errorf("%s: other results %q", key, other)
				}
			}
			t.Logf("%d × %d parallel spawns: %d started, %d running, %d refused with LIMIT_EXCEEDED", tc.conversations, tc.each, started, running, limited)
			if started != tc.want || running != tc.want || limited != tc.conversations*tc.each-tc.want {
				t.Fatalf("started %d, running %d, limited %d; want %d, %d, %d", started, running, limited, tc.want, tc.want, tc.conversations*tc.each-tc.want)
			}
			release()
			// A run's end is recorded, then written to its child's transcript and announced:
			// the test's directories go once the last announcement is stored.
			testkit.Eventually(t, "every run ended and announced", func() bool {
				for _, run := range runsOf(t, e) {
					if done, err := e.queues.Has(context.Background(), "announce_"+run.RunID); run.EndedAt == 0 || err != nil || !done {
						return false
					}
				}
				return true
			})
			// ... and each parent has taken its announcements and answered the last: no model
			// call is in flight when the sessions close.
			testkit.Eventually(t, "the announcements answered", func() bool {
				for _, run := range runsOf(t, e) {
					key := run.RequesterSessionKey
					if q, err := e.queues.Queued(context.Background(), key); err != nil || len(q) > 0 || lastAnswer(e, key) != "got it" {
						return false
					}
				}
				return true
			})
		})
	}
}

// TestFigureSpawnLoop measures how many runs a model that spawns a subagent at every
// announcement makes in 10 s with the default limits (docs/ai-chat.md, Subagents). It is a
// measurement, not a check: it runs only with NEXUS_FIGURES=1.
func TestFigureSpawnLoop(t *testing.T) {
	if os.Getenv("NEXUS_FIGURES") == "" {
		t.Skip("a 10 s measurement: set NEXUS_FIGURES=1")
	}
	var n atomic.Int64
	e := newEnv(t, spawnLoop(&n)).withBroker(t)
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:loop", "yolo")
	start := time.Now()
	send(t, r, s.SessionID, "go")
	time.Sleep(10 * time.Second)
	t.Logf("runs in %v: %d", time.Since(start).Round(time.Millisecond), len(runsOf(t, e)))
}

// escaper answers as a worker that tries to escape its limits through a subagent: "spawn
// <agent> [<agent>...]" spawns the first agent on the task "spawn <the rest>", or "escape"
// for the last, whose every "escape" message tries a write_file, then sessions_history of a
// stranger's conversation, then says what it got.
func escaper(req chatRequest, w *sse) {
	var first string
	for _, m := range req.Messages {
		if m.Role == "user" {
			first = m.text()
			break
		}
	}
	last := req.last()
	switch {
	case req.lastUser() == "escape":
		tried := 0
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role != "user"; i-- {
			if req.Messages[i].Role == "tool" {
				tried++
			}
		}
		switch tried {
		case 0:
			w.call("e1", "write_file", map[string]any{"path": "escaped.txt", "content": "out"})
		case 1:
			w.call("e2", "sessions_history", map[string]any{"key": "agent:main:test:stranger"})
		default:
			w.text("tried")
		}
	case strings.HasPrefix(first, "spawn "):
		switch {
		case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
			w.text("ok")
		case last.Role == "tool":
			w.text("spawned")
		default:
			agents := strings.Fields(strings.TrimPrefix(first, "spawn "))
			task := "escape"
			if len(agents) > 1 {
				task = "spawn " + strings.Join(agents[1:], " ")
			}
			w.call("s1", "sessions_spawn", map[string]any{"task": task, "agent": agents[0], "cleanup": "keep"})
		}
	default:
		w.text("noted: " + req.lastUser())
	}
}

// escapeResults are the results of the child's last write_file and sessions_history calls.
func escapeResults(t *testing.T, e *env, key string) (write, history provider.Message) {
	t.Helper()
	for _, m := range e.history(t, key) {
		switch {
		case m.Role == "toolResult" && m.ToolName == "write_file":
			write = m
		case m.Role == "toolResult" && m.ToolName == "sessions_history":
			history = m
		}
	}
	return write, history
}

// TestSubagentPowersAreBoundedBySpawner: a sandboxed worker without write_file that may reach
// only its parent spawns another agent (main, or one whose allowed_targets reach a stranger's
// conversation), directly or through a subagent of its own: the one that tries cannot
// write_file (the disabled tools are the union) nor read the stranger (every allowed_targets
// list must allow a target), and the bounds recorded with the run hold after a gateway
// restart, even in a session opened on it at level yolo.
func TestSubagentPowersAreBoundedBySpawner(t *testing.T) {
	for _, tc := range []struct{ name, agents string }{
		{"main", "main"},
		{"wide", "wide"},
		{"grandchild", "main wide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, escaper).withBroker(t)
			writeAgent(t, e, "worker", "level = \"sandboxed\"\ndisabled_tools = [\"write_file\"]\nallowed_targets = [\"parent\"]\n")
			writeAgent(t, e, "wide", "level = \"yolo\"\nallowed_targets = [\"agent:main\"]\n")
			r := e.gateway(t)
			stranger := e.open(t, r, "agent:main:test:stranger", "yolo")
			sw := &watcher{r: r, id: stranger.SessionID}
			send(t, r, stranger.SessionID, "secret plans")
			sw.turnEnded(t)

			s := e.open(t, r, "agent:worker:test:w", "sandboxed")
			w := &watcher{r: r, id: s.SessionID}
			send(t, r, s.SessionID, "spawn "+tc.agents)
			for range 2 { // the spawn, the announcement
				if end := w.turnEnded(t); end.End != abi.TurnCompleted {
					t.Fatalf("turn %+v: %s", end, describe(w.seen))
				}
			}
			// The last of the chain tries; a grandchild announces into its parent, whose
			// session has closed (a background one opens, bounded as well).
			want := len(strings.Fields(tc.agents))
			var runs []chatstore.SubagentRunRecord
			testkit.Eventually(t, "every run ended", func() bool {
				runs = runsOf(t, e)
				for _, run := range runs {
					if run.EndedAt == 0 {
						return false
					}
				}
				return len(runs) == want
			})
			agents := strings.Fields(tc.agents)
			var childKey string // the last of the chain
			for _, run := range runs {
				if strings.HasPrefix(run.ChildSessionKey, "agent:"+agents[len(agents)-1]+":subagent:") {
					childKey = run.ChildSessionKey
				}
			}
			check := func(when string) {
				t.Helper()
				write, hist := escapeResults(t, e, childKey)
				if !write.IsError || !strings.Contains(write.Content[0].Text, "disabled") {
					t.Errorf("%s: write_file answered %+v", when, write)
				}
				if !hist.IsError || !strings.Contains(hist.Content[0].Text, "refused") || strings.Contains(hist.Content[0].Text, "secret plans") {
					t.Errorf("%s: sessions_history answered %+v", when, hist)
				}
				if _, err := os.Stat(filepath.Join(e.ws, "escaped.txt")); err == nil {
					t.Errorf("%s: the child wrote escaped.txt", when)
				}
			}
			check("spawned")

			r2 := e.gateway(t)
			s2 := e.open(t, r2, childKey, "yolo")
			w2 := &watcher{r: r2, id: s2.SessionID}
			send(t, r2, s2.SessionID, "escape")
			if end := w2.turnEnded(t); end.End != abi.TurnCompleted {
				t.Fatalf("turn %+v: %s", end, describe(w2.seen))
			}
			check("after a restart, opened at yolo")
		})
	}
}

// clock is a fake clock that moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// lastAnswer is the text of the conversation's last message if it is the model's, read while
// turns may be writing it ("" when it cannot be read yet).
func lastAnswer(e *env, key string) string {
	h, err := e.chats.History(context.Background(), key, conversation.HistoryOptions{})
	if err != nil {
		return ""
	}
	defer func() { _ = h.Close() }()
	var last json.RawMessage
	for m, err := range h.Messages {
		if err != nil {
			return ""
		}
		last = append(json.RawMessage(nil), m...)
	}
	msgs, err := provider.FromContext([]json.RawMessage{last})
	if err != nil || len(msgs) != 1 || msgs[0].Role != provider.RoleAssistant || len(msgs[0].Content) == 0 {
		return ""
	}
	return msgs[0].Content[0].Text
}

// spawnLoop answers as a model that spawns a subagent at every announcement (but that of a
// "final" task).
func spawnLoop(n *atomic.Int64) func(chatRequest, *sse) {
	return func(req chatRequest, w *sse) {
		last := req.last()
		switch {
		case req.lastUser() == "work" || req.lastUser() == "final": // a child
			w.text("worked")
		case strings.Contains(req.lastUser(), "] task: final"):
			w.text("done")
		// The model reuses the id "loop" in every reply; a request gives each call an id no
		// other call of it has ("loop", "loop_2", …).
		case last.Role == "tool" && strings.HasPrefix(last.ToolCallID, "loop"):
			w.text("spawn answered: " + last.text())
		default: // the first message and every announcement
			w.call("loop", "sessions_spawn", map[string]any{"task": "work", "label": fmt.Sprintf("w%d", n.Add(1))})
		}
	}
}

// TestSubagentRunsPerWindow: a model that spawns a subagent at every announcement starts
// MaxRuns runs in the window and then gets LIMIT_EXCEEDED as the tool's result (and stops, no
// announcement coming); the CLI's spawn gets the same code; once the window has passed on
// the clock, spawning works again.
func TestSubagentRunsPerWindow(t *testing.T) {
	var n atomic.Int64
	clk := newClock()
	e := newEnv(t, spawnLoop(&n)).withBroker(t)
	e.limits = aichat.SubagentLimits{MaxRuns: 3, Window: 10 * time.Minute}
	e.now = clk.Now
	r := e.gateway(t)
	key := "agent:main:test:looper"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "go")
	w.turnEnded(t)
	testkit.Eventually(t, "the loop stopped by the window", func() bool {
		return strings.HasPrefix(lastAnswer(e, key), "spawn answered: "+string(abi.CodeLimitExceeded)+": ")
	})
	started, limited, other := spawnResults(t, e, key)
	if started != 3 || limited != 1 || len(other) != 0 || len(runsOf(t, e)) != 3 {
		t.Fatalf("started %d, limited %d, other %q, runs %d", started, limited, other, len(runsOf(t, e)))
	}
	msgs := e.history(t, key)
	if want := "this conversation started 3 subagents in the last 10m0s, the most is 3; the next may start in 10m0s"; !strings.Contains(msgs[len(msgs)-1].Content[0].Text, want) {
		t.Errorf("the refusal %q, want %q", msgs[len(msgs)-1].Content[0].Text, want)
	}
	spawn := func() error {
		_, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandSpawn, Spawn: &abi.SpawnRequest{Task: "final", Cleanup: "keep"}})
		return err
	}
	clk.Advance(10*time.Minute - time.Millisecond)
	if err := spawn(); abi.CodeOf(err) != abi.CodeLimitExceeded {
		t.Fatalf("spawn inside the window: %v", err)
	}
	clk.Advance(time.Millisecond)
	if err := spawn(); err != nil {
		t.Fatalf("spawn once the window has passed: %v", err)
	}
	testkit.Eventually(t, "4 runs", func() bool { return len(runsOf(t, e)) == 4 })
	// The last child still writes its conversation and its announcement: the test's
	// directories go only once that is done.
	testkit.Eventually(t, "the final task announced", func() bool { return lastAnswer(e, key) == "done" })
}

// TestSubagentLevelIsTheStricter: a yolo conversation spawning a sandboxed agent gets a
// sandboxed child (the agent's level bounds it), recorded with the run and in the child's
// options.
func TestSubagentLevelIsTheStricter(t *testing.T) {
	e := newEnv(t, escaper).withBroker(t)
	writeAgent(t, e, "worker", "level = \"sandboxed\"\n")
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:boss", "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "spawn worker")
	for range 2 { // the spawn, the announcement
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
	}
	runs := runsOf(t, e)
	if len(runs) != 1 {
		t.Fatalf("runs %+v", runs)
	}
	var p aichat.Powers
	if err := json.Unmarshal(runs[0].Extra[aichat.PowersField], &p); err != nil || p.Level != "sandboxed" || p.Workspace != e.ws {
		t.Fatalf("the run's powers %s (%v)", runs[0].Extra[aichat.PowersField], err)
	}
	sh, err := e.chats.Show(context.Background(), runs[0].ChildSessionKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(sh.Entry.Extra[aichat.OptionsField]); !strings.Contains(got, `"level":"sandboxed"`) {
		t.Fatalf("the child ran with %s", got)
	}
}

// TestSubagentLabels: the run's label is the child's sessions.json label; a second run with
// the same label (a label names one conversation of the store) gets it with its run's id.
func TestSubagentLabels(t *testing.T) {
	e := newEnv(t, manager).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:labels"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	for _, task := range []string{"delegate keep - first", "delegate keep - second"} {
		send(t, r, s.SessionID, task)
		w.turnEnded(t)
		w.turnEnded(t) // the announcement's turn
	}
	runs := runsOf(t, e)
	if len(runs) != 2 {
		t.Fatalf("runs %+v", runs)
	}
	labels := map[string]bool{}
	for _, run := range runs {
		sh, err := e.chats.Show(context.Background(), run.ChildSessionKey)
		if err != nil {
			t.Fatal(err)
		}
		labels[sh.Entry.Label] = true
		if want := "worker#" + run.RunID[:8]; sh.Entry.Label != "worker" && sh.Entry.Label != want {
			t.Fatalf("child %s label %q, want worker or %s", run.ChildSessionKey, sh.Entry.Label, want)
		}
	}
	if len(labels) != 2 || !labels["worker"] {
		t.Fatalf("labels %v", labels)
	}
}

// TestSubagentRunTimeout: a child whose model never answers is interrupted at the run's
// timeout; the run ends as timeout, the parent is told in an announcement, and the child's
// session is closed.
func TestSubagentRunTimeout(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.lastUser() == "never answers" {
			w.hang("thinking")
			return
		}
		manager(req, w)
	}).withBroker(t)
	e.limits = aichat.SubagentLimits{RunTimeout: 50 * time.Millisecond}
	r := e.gateway(t)
	key := "agent:main:test:timeout"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "delegate keep - never answers")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted { // the announcement's turn
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if users := userTexts(t, e, key); !strings.Contains(users, "[subagent worker timed out: no answer within 50ms; its turn was interrupted] task: never answers") {
		t.Fatalf("the parent's messages: %q", users)
	}
	runs := runsOf(t, e)
	if len(runs) != 1 || runs[0].EndedAt == 0 || runs[0].Outcome == nil || runs[0].Outcome.Status != chatstore.OutcomeTimeout {
		t.Fatalf("runs %+v", runs)
	}
	sh, err := e.chats.Show(context.Background(), runs[0].ChildSessionKey)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Entry.TaskStatus != "failed" {
		t.Fatalf("child taskStatus %q", sh.Entry.TaskStatus)
	}
	testkit.Eventually(t, "the child's session closed", func() bool {
		got, err := r.List(context.Background(), false)
		return err == nil && len(got) == 1
	})
}
