package aichat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/acpengine/acptest"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

// withACP adds the backend "agent": this test binary as an ACP agent (acptest), its sessions
// in dir.
func (e *env) withACP(t *testing.T) *env {
	t.Helper()
	e.extra += fmt.Sprintf("[backends.agent]\nkind = \"acp\"\ncommand = %q\nenv = { %s = \"1\", %s = %q }\n",
		os.Args[0], acptest.EnvAgent, acptest.EnvDir, t.TempDir())
	return e
}

func (e *env) openACP(t *testing.T, r *live.Registry, key, level string) abi.Session {
	t.Helper()
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: "agent", Level: level, Workspace: e.ws})
	s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return s
}

// reply is the text of the session's last ai-token events since the turn started.
func (w *watcher) tokens(from int) string {
	var b strings.Builder
	for _, ev := range w.seen[from:] {
		if p, ok := ev.Payload.(abi.AIToken); ok {
			b.WriteString(p.Content)
		}
	}
	return b.String()
}

func (w *watcher) turn(t *testing.T, r *live.Registry, text string) (abi.AITurn, string) {
	t.Helper()
	from := len(w.seen)
	send(t, r, w.id, text)
	end := w.turnEnded(t)
	return end, w.tokens(from)
}

var whoami = regexp.MustCompile(`session (\S+) loaded=(\w+) pid=(\d+)`)

// TestACPBackend: an acp backend's agent is the engine of an ai-chat session; messages go
// through the queue as any, its updates are the session's events, its permission requests
// confirmation requests answered by the confirm command, an interrupt cancels its prompt, a
// crash is the turn's error and the next message starts it again in the same agent session,
// which a restarted gateway loads too. The transcript has it all.
func TestACPBackend(t *testing.T) {
	e := newEnv(t, echo).withBroker(t).withACP(t)
	r := e.gateway(t)
	key := "agent:main:test:acp"
	s := e.openACP(t, r, key, "trusted")
	w := &watcher{r: r, id: s.SessionID}

	// Streaming: tokens and reasoning.
	end, said := w.turn(t, r, "hello")
	if end.End != abi.TurnCompleted || said != "Hello, world" {
		t.Fatalf("turn %+v, tokens %q: %s", end, said, describe(w.seen))
	}
	reasoned := false
	for _, ev := range w.seen {
		if p, ok := ev.Payload.(abi.AIReasoning); ok && p.Content == "thinking it over" {
			reasoned = true
		}
	}
	if !reasoned {
		t.Fatalf("no ai-reasoning: %s", describe(w.seen))
	}

	// A permission request is a confirmation request; the CLI's confirm answers it.
	from := len(w.seen)
	send(t, r, s.SessionID, "perm")
	ev := w.until(t, "a confirmation request", func(e *live.Event) bool {
		_, ok := e.Payload.(abi.AIConfirmation)
		return ok
	})
	c := ev.Payload.(abi.AIConfirmation)
	if c.Tool != "acp_execute" || c.Command != "rm -rf build" || !slicesContains(c.Options, "allow-once") {
		t.Fatalf("request %+v", c)
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "allow-once"}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted || w.tokens(from) != "chose yes" {
		t.Fatalf("turn %+v, tokens %q", end, w.tokens(from))
	}
	tools := 0
	for _, ev := range w.seen[from:] {
		if p, ok := ev.Payload.(abi.AITool); ok && p.ToolCallID == "call-rm" {
			tools++
		}
	}
	if tools < 2 {
		t.Fatalf("no ai-tool events for the call: %s", describe(w.seen[from:]))
	}

	// Interrupt: session/cancel, the reply so far kept.
	from = len(w.seen)
	send(t, r, s.SessionID, "wait")
	w.until(t, "the first token", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AIToken)
		return ok && p.Content == "waiting"
	})
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCancelled {
		t.Fatalf("turn %+v: %s", end, describe(w.seen[from:]))
	}

	_, who := w.turn(t, r, "whoami")
	m := whoami.FindStringSubmatch(who)
	if m == nil {
		t.Fatalf("whoami: %q", who)
	}
	sid, pid := m[1], m[3]

	// A crash: the turn's error, then the next message starts the agent again, on the
	// same agent session.
	end, _ = w.turn(t, r, "crash")
	if end.End != abi.TurnError || !strings.Contains(end.Reason, "exit status 3") || !strings.Contains(end.Reason, "boom") {
		t.Fatalf("crash turn %+v", end)
	}
	_, who = w.turn(t, r, "whoami")
	if m := whoami.FindStringSubmatch(who); m == nil || m[1] != sid || m[2] != "true" || m[3] == pid {
		t.Fatalf("after the crash: %q (session %s, pid %s)", who, sid, pid)
	}
	logs, err := os.ReadFile(filepath.Join(e.state, "logs", s.SessionID, "agent-stderr.log"))
	if err != nil || !strings.Contains(string(logs), "boom") {
		t.Fatalf("the agent's stderr in the session's logs: %q %v", logs, err)
	}

	// The transcript: prompts, replies, tool calls and their results.
	msgs := e.history(t, key)
	if got := roles(msgs); !strings.Contains(got, "user assistant/stop user assistant/toolUse toolResult assistant/stop user assistant/aborted") {
		t.Fatalf("transcript roles %s", got)
	}
	var texts []string
	for _, m := range msgs {
		texts = append(texts, m.TextContent())
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"hello", "Hello, world", "option yes", "chose yes", "waiting"} {
		if !strings.Contains(all, want) {
			t.Fatalf("transcript lacks %q: %s", want, all)
		}
	}
	if msgs[1].API != "acp" || msgs[1].Provider != "agent" {
		t.Fatalf("reply %+v", msgs[1])
	}

	sh, err := e.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	indexFinds(t, e.state, "chose", sh.Entry.SessionID)

	// sessions.json keeps the agent's session id; a restarted gateway loads it.
	b, err := os.ReadFile(filepath.Join(e.state, "sessions", "sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	var rec struct{ Backend, ID string }
	if err := json.Unmarshal(idx[key][aichat.ACPSessionField], &rec); err != nil || rec.ID != sid || rec.Backend != "agent" {
		t.Fatalf("sessions.json %s: %s", aichat.ACPSessionField, idx[key][aichat.ACPSessionField])
	}
	if _, err := r.Close(context.Background(), s.SessionID, "test"); err != nil {
		t.Fatal(err)
	}
	r2 := e.gateway(t)
	s2 := e.openACP(t, r2, key, "trusted")
	w2 := &watcher{r: r2, id: s2.SessionID}
	_, who = w2.turn(t, r2, "whoami")
	if m := whoami.FindStringSubmatch(who); m == nil || m[1] != sid || m[2] != "true" {
		t.Fatalf("after the restart: %q (session %s)", who, sid)
	}
	// The agent dies with its session.
	m = whoami.FindStringSubmatch(who)
	p, _ := strconv.Atoi(m[3])
	if _, err := r2.Close(context.Background(), s2.SessionID, "test"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the agent process to be gone", func() bool {
		return errors.Is(syscall.Kill(p, 0), syscall.ESRCH)
	})
	piSameContext(t, e, key, sh.File) // last: a skip (pi not installed) ends the test
}

// TestACPLevels: yolo allows the agent's requests, sandboxed rejects them, neither asks.
func TestACPLevels(t *testing.T) {
	for _, tc := range []struct{ level, want string }{{"yolo", "chose yes"}, {"sandboxed", "chose no"}} {
		t.Run(tc.level, func(t *testing.T) {
			e := newEnv(t, echo).withBroker(t).withACP(t)
			r := e.gateway(t)
			s := e.openACP(t, r, "agent:main:test:acp-"+tc.level, tc.level)
			w := &watcher{r: r, id: s.SessionID}
			end, said := w.turn(t, r, "perm")
			if end.End != abi.TurnCompleted || said != tc.want {
				t.Fatalf("turn %+v, tokens %q", end, said)
			}
			for _, ev := range w.seen {
				if _, ok := ev.Payload.(abi.AIConfirmation); ok {
					t.Fatalf("asked at level %s", tc.level)
				}
			}
		})
	}
}

// TestACPCompact: an agent keeps its own context; nexus says it does not compact it.
func TestACPCompact(t *testing.T) {
	e := newEnv(t, echo).withBroker(t).withACP(t)
	r := e.gateway(t)
	s := e.openACP(t, r, "agent:main:test:acp-compact", "trusted")
	w := &watcher{r: r, id: s.SessionID}
	w.turn(t, r, "hello")
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandCompact}); err != nil {
		t.Fatal(err)
	}
	ev := w.until(t, "the compaction's error", func(e *live.Event) bool {
		_, ok := e.Payload.(abi.ErrorPayload)
		return ok
	})
	if p := ev.Payload.(abi.ErrorPayload); p.Error.Code != abi.CodeCapabilityUnsupported || !strings.Contains(p.Error.Message, "keeps its own context") {
		t.Fatalf("error %+v", p)
	}
}

// indexFinds checks that the history index (nexus index search) finds words in the
// conversation (its session id) of state's sessions.
func indexFinds(t *testing.T, state, words, session string) {
	t.Helper()
	ix, err := index.Open(context.Background(), filepath.Join(t.TempDir(), "index.db"), index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ix.Close() }()
	if _, err := ix.Sync(context.Background(), index.SyncOptions{Sources: []string{"nexus"}, Roots: map[string][]string{"nexus": {filepath.Join(state, "sessions")}}}); err != nil {
		t.Fatal(err)
	}
	hits, err := ix.Search(context.Background(), index.SearchOptions{Query: words})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		if h.Session == session {
			return
		}
	}
	t.Fatalf("the index does not find %q in %s: %+v", words, session, hits)
}

// TestACPHistory: an agent that cannot load sessions gets, in its new session's first prompt,
// what the conversation said before (here: after the gateway restarted).
func TestACPHistory(t *testing.T) {
	e := newEnv(t, echo).withBroker(t)
	e.extra += fmt.Sprintf("[backends.agent]\nkind = \"acp\"\ncommand = %q\nenv = { %s = \"1\", %s = %q, %s = \"1\" }\n",
		os.Args[0], acptest.EnvAgent, acptest.EnvDir, t.TempDir(), acptest.EnvNoLoad)
	key := "agent:main:test:acp-history"
	r := e.gateway(t)
	s := e.openACP(t, r, key, "trusted")
	w := &watcher{r: r, id: s.SessionID}
	if _, said := w.turn(t, r, "remember the plums"); said != "echo: remember the plums" {
		t.Fatalf("first turn: %q", said)
	}
	if _, said := w.turn(t, r, "and the pears"); said != "echo: and the pears" {
		t.Fatalf("second turn (same agent session): %q", said)
	}
	if _, err := r.Close(context.Background(), s.SessionID, "test"); err != nil {
		t.Fatal(err)
	}
	r2 := e.gateway(t)
	s2 := e.openACP(t, r2, key, "trusted")
	w2 := &watcher{r: r2, id: s2.SessionID}
	_, said := w2.turn(t, r2, "what fruit?")
	for _, want := range []string{"User: remember the plums", "Assistant: echo: remember the plums", "User: and the pears", "what fruit?"} {
		if !strings.Contains(said, want) {
			t.Fatalf("the new agent session's first prompt lacks %q: %q", want, said)
		}
	}
	// The transcript records the user's message, not what was sent with it.
	msgs := e.history(t, key)
	if u := msgs[len(msgs)-2]; u.Role != "user" || u.TextContent() != "what fruit?" {
		t.Fatalf("recorded %+v", u)
	}
}
