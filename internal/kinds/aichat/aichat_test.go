package aichat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/acpengine/acptest"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/testkit"
)

// env is one gateway's worth of ai-chat: a state directory, a kind on a scripted model, and a
// registry serving it. A second registry on the same state directory is a restarted gateway.
type env struct {
	t     *testing.T
	state string
	ws    string
	m     *model
	chats *conversation.Service
	// window is the backend's context window (default 1000).
	window int
	// extra is appended to config.toml.
	extra string
	// queues, when set (withBroker), is the kind's durable queue.
	queues  broker.Queues
	collect aichat.CollectOptions
	// k is the kind of the last gateway; resume: gateways resume what is queued (as nexus
	// serve does).
	k      *aichat.Kind
	resume bool
	// limits are the kinds' subagent limits; now, when set, their clock (and runs.json's).
	limits aichat.SubagentLimits
	now    func() time.Time
	// leases and node make the env's kinds a node of a cluster (lease_test.go).
	leases conversation.Leases
	node   string
}

// withBroker gives the env's kinds the durable queue of its state directory.
func (e *env) withBroker(t *testing.T) *env {
	t.Helper()
	q, err := broker.Open(context.Background(), broker.Path(e.state), broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	e.queues = q
	return e
}

func newEnv(t *testing.T, reply func(chatRequest, *sse)) *env {
	t.Helper()
	e := &env{t: t, state: t.TempDir(), ws: t.TempDir(), m: newModel(t, reply)}
	e.chats = conversation.New(conversation.Options{Dir: conversation.SessionsDir(e.state)})
	return e
}

func (e *env) kind(t *testing.T) *aichat.Kind {
	shells := agentshell.New(agentshell.Config{AuditDir: filepath.Join(e.state, "audit"), IdleTimeout: -1})
	t.Cleanup(shells.Close)
	window := e.window
	if window == 0 {
		window = 1000
	}
	cfg := fmt.Sprintf("[backends.fake]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"fake-1\"\nsummary_model = \"fake-small\"\ncontext_window = %d\n", e.m.srv.URL+"/v1", window) + e.extra
	return &aichat.Kind{
		Chats:    e.chats,
		StateDir: e.state,
		Config:   func() (*provider.Config, error) { return provider.ParseConfig([]byte(cfg)) },
		Getenv: func(v string) string {
			switch v {
			case "PATH", "HOME":
				return os.Getenv(v)
			case mcpServerVar:
				return "1"
			}
			return ""
		},
		Shells:    shells,
		Logs:      &aichat.LogOptions{Context: true, Verbose: true, Raw: true},
		Broker:    e.queues,
		Collect:   e.collect,
		Subagents: e.limits,
		Now:       e.now,
		Leases:    e.leases,
		Node:      e.node,
	}
}

// gateway starts a registry serving a fresh kind on e's state.
func (e *env) gateway(t *testing.T) *live.Registry {
	t.Helper()
	return e.gatewayWith(t, live.Config{IdleTimeout: -1})
}

func (e *env) gatewayWith(t *testing.T, cfg live.Config) *live.Registry {
	t.Helper()
	k := e.kind(t)
	r, err := live.New(context.Background(), cfg, k)
	if err != nil {
		t.Fatal(err)
	}
	if e.queues != nil {
		runs, err := chatstore.OpenSubagents(filepath.Join(e.state, "subagents"), e.now)
		if err != nil {
			t.Fatal(err)
		}
		k.Runs, k.Sessions = runs, r
	}
	e.k = k
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		_ = r.Shutdown(ctx)
	})
	if e.resume {
		life, stop := context.WithCancel(context.Background())
		t.Cleanup(stop) // runs before the shutdown above, as the gateway's context ends first
		k.Resume(life)
	}
	return r
}

func (e *env) open(t *testing.T, r *live.Registry, key, level string) abi.Session {
	t.Helper()
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: "fake", Level: level, Workspace: e.ws})
	s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return s
}

// watcher reads a session's events in order.
type watcher struct {
	r     *live.Registry
	id    string
	after uint64
	seen  []*live.Event
}

// until reads events until one satisfies pred and returns it.
func (w *watcher) until(t *testing.T, what string, pred func(*live.Event) bool) *live.Event {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for {
		b, err := w.r.Read(context.Background(), w.id, w.after, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, e := range b.Events {
			w.seen = append(w.seen, e)
			w.after = max(w.after, e.Seq)
			if pred(e) {
				return e
			}
		}
		if b.Done || time.Now().After(deadline) {
			t.Fatalf("never saw %s; saw %s", what, describe(w.seen))
		}
	}
}

func (w *watcher) turnEnded(t *testing.T) abi.AITurn {
	t.Helper()
	e := w.until(t, "the turn's end", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AITurn)
		return ok && p.Phase == abi.PhaseEnded
	})
	return e.Payload.(abi.AITurn)
}

func describe(evs []*live.Event) string {
	var b strings.Builder
	for _, e := range evs {
		switch p := e.Payload.(type) {
		case abi.AIToken:
			fmt.Fprintf(&b, "token(%q) ", p.Content)
		case abi.AITool:
			fmt.Fprintf(&b, "tool(%s %s %q) ", p.Phase, p.Name, p.Output)
		case abi.AITurn:
			fmt.Fprintf(&b, "turn(%s %s %s) ", p.Phase, p.End, p.Reason)
		case abi.AIConfirmation:
			fmt.Fprintf(&b, "confirm(%s %s) ", p.RequestID, p.Tool)
		case abi.ErrorPayload:
			fmt.Fprintf(&b, "error(%s %s) ", p.Error.Code, p.Error.Message)
		default:
			fmt.Fprintf(&b, "%s ", livetest.Describe(e))
		}
	}
	return b.String()
}

// chatState is the conversation's state in sessions.json.
func (e *env) chatState(t *testing.T, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(conversation.SessionsDir(e.state), "sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx map[string]struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	return idx[key].State
}

// rawHistory is the conversation's context as its JSON messages.
func (e *env) rawHistory(t *testing.T, key string) []string {
	t.Helper()
	h, err := e.chats.History(context.Background(), key, conversation.HistoryOptions{})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	defer func() { _ = h.Close() }()
	var raw []string
	for m, err := range h.Messages {
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, string(m))
	}
	return raw
}

// history is the conversation's context as the model would get it next.
func (e *env) history(t *testing.T, key string) []provider.Message {
	t.Helper()
	h, err := e.chats.History(context.Background(), key, conversation.HistoryOptions{})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	defer func() { _ = h.Close() }()
	var raw []json.RawMessage
	for m, err := range h.Messages {
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, append(json.RawMessage(nil), m...))
	}
	msgs, err := provider.FromContext(raw)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func roles(msgs []provider.Message) string {
	var out []string
	for _, m := range msgs {
		s := m.Role
		if m.Role == provider.RoleAssistant {
			s += "/" + string(m.StopReason)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func send(t *testing.T, r *live.Registry, id, text string) {
	t.Helper()
	if _, err := r.Send(context.Background(), id, live.SendRequest{Data: []byte(text)}); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// echo answers every request with "echo: " and the last user message.
func echo(req chatRequest, w *sse) { w.text("echo: " + req.lastUser()) }

// TestKindContract runs the kind's part of the registry contract on a scripted model that
// echoes each message.
func TestKindContract(t *testing.T) {
	e := newEnv(t, echo)
	good, _ := json.Marshal(abi.AIChatOptions{Backend: "fake", Level: "yolo", Workspace: e.ws})
	bad := func(o abi.AIChatOptions) json.RawMessage {
		if o.Workspace == "" {
			o.Workspace = e.ws
		}
		b, _ := json.Marshal(o)
		return b
	}
	livetest.RunKind(t, livetest.KindHarness{
		New:     func(t *testing.T) live.Kind { return e.kind(t) },
		Request: abi.CreateRequest{Type: abi.TypeAIChat, Options: good},
		BadRequests: []abi.CreateRequest{
			{Type: abi.TypeAIChat, Options: bad(abi.AIChatOptions{Backend: "no-such-backend"})},
			{Type: abi.TypeAIChat, Options: bad(abi.AIChatOptions{Backend: "fake", Level: "godmode"})},
			{Type: abi.TypeAIChat, Options: bad(abi.AIChatOptions{Backend: "fake", Workspace: "relative/dir"})},
			{Type: abi.TypeAIChat, Options: bad(abi.AIChatOptions{Backend: "fake", Agent: "nobody"})},
			{Type: abi.TypeAIChat, Options: json.RawMessage(`{"backend":"fake","colour":"red"}`)},
			{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:a:x"}, Options: bad(abi.AIChatOptions{Backend: "fake", Agent: "b"})},
			// A backend whose key variable is not set.
			{Type: abi.TypeAIChat, Options: bad(abi.AIChatOptions{Backend: "claude"})},
		},
		// A message whose echo is the text; it returns when the turn has ended, so the
		// session takes the next message.
		Print: func(t *testing.T, r live.Backend, id, text string) {
			t.Helper()
			sayAndWait(t, r, id, text)
		},
		Input: []byte("a message"),
	})
}

// sayAndWait sends text and waits for the end of the turn it starts.
func sayAndWait(t *testing.T, r live.Backend, id, text string) {
	t.Helper()
	ctx := context.Background()
	after, err := r.LastSeq(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testkit.Patience())
	// A turn the suite started with its own input may still run: wait for events until the
	// session takes the message.
	for {
		_, err := r.Send(ctx, id, live.SendRequest{Data: []byte(text)})
		if err == nil {
			break
		}
		if abi.CodeOf(err) != abi.CodeResourceUnavailable || time.Now().After(deadline) {
			t.Fatalf("send: %v", err)
		}
		b, err := r.Read(ctx, id, after, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		after = b.Next
	}
	for time.Now().Before(deadline) {
		b, err := r.Read(ctx, id, after, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			if p, ok := e.Payload.(abi.AITurn); ok && p.Phase == abi.PhaseEnded {
				return
			}
		}
		after = b.Next
	}
	t.Fatal("the turn never ended")
}

// TestTurnWithTool: the model calls bash, a real agent shell runs it, the result goes back,
// the answer streams; the transcript holds the four messages, paired.
func TestTurnWithTool(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("the shell said " + req.last().text())
			return
		}
		w.call("call_1", "bash", map[string]any{"command": "echo hi-from-$((40+2))"})
	})
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:tool", "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "run it")
	end := w.turnEnded(t)
	if end.End != abi.TurnCompleted || end.Iterations != 2 || end.Usage == nil || end.Usage.Output != 20 {
		t.Fatalf("turn %+v; events %s", end, describe(w.seen))
	}
	// The run's lifecycle: start with the turn, end with its outcome.
	runEnd := w.until(t, "the run's end", func(e *live.Event) bool { p, ok := e.Payload.(abi.AIRun); return ok && p.Phase != abi.RunStart })
	if p := runEnd.Payload.(abi.AIRun); p.Phase != abi.RunEnd || p.Outcome != "ok" || p.RunID != end.RunID {
		t.Fatalf("run end %+v, turn %+v", p, end)
	}
	var runStart *abi.AIRun
	for _, ev := range w.seen {
		if p, ok := ev.Payload.(abi.AIRun); ok && p.Phase == abi.RunStart {
			runStart = &p
		}
	}
	if runStart == nil || runStart.RunID != end.RunID || end.RunID == "" {
		t.Fatalf("run start %+v; events %s", runStart, describe(w.seen))
	}
	var tokens strings.Builder
	var toolOut string
	for _, ev := range w.seen {
		switch p := ev.Payload.(type) {
		case abi.AIToken:
			tokens.WriteString(p.Content)
		case abi.AITool:
			if p.Phase == abi.PhaseCompleted {
				toolOut = p.Output
			}
		}
	}
	if !strings.Contains(toolOut, "hi-from-42") || !strings.Contains(tokens.String(), "the shell said") {
		t.Fatalf("tool output %q, tokens %q", toolOut, tokens.String())
	}
	msgs := e.history(t, "agent:main:test:tool")
	if got := roles(msgs); got != "user assistant/toolUse toolResult assistant/stop" {
		t.Fatalf("transcript %s", got)
	}
	got, err := r.Get(context.Background(), s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata["tokenCount"] != 110 || got.Metadata["remainingTokens"] != 890 || got.Metadata["state"] != "idle" {
		t.Errorf("metadata %v", got.Metadata)
	}
}

// TestConfirmation: at level trusted a command asks; allow-exec-global runs it and is
// remembered, by the conversation, across sessions (a restarted gateway); deny refuses.
func TestConfirmation(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("result: " + req.last().text())
			return
		}
		w.call("call_"+fmt.Sprint(len(req.Messages)), "bash", map[string]any{"command": "echo " + req.lastUser()})
	})
	r := e.gateway(t)
	key := "agent:main:test:confirm"
	s := e.open(t, r, key, "trusted")
	w := &watcher{r: r, id: s.SessionID}
	asked := func() abi.AIConfirmation {
		ev := w.until(t, "a confirmation request", func(e *live.Event) bool {
			_, ok := e.Payload.(abi.AIConfirmation)
			return ok
		})
		return ev.Payload.(abi.AIConfirmation)
	}

	send(t, r, s.SessionID, "one")
	c := asked()
	if c.Tool != "bash" || c.Command != "echo one" || !isProgram(c.Programs, "echo") || !slicesContains(c.Options, "allow-exec-global") {
		t.Fatalf("request %+v", c)
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "allow-everything"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("a bad answer: %v", err)
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: "confirm-99", Answer: "deny"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("an unknown request: %v", err)
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "allow-exec-global"}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	// The same program again: no question.
	send(t, r, s.SessionID, "two")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	for _, ev := range w.seen {
		if c, ok := ev.Payload.(abi.AIConfirmation); ok && c.Command == "echo two" {
			t.Fatalf("asked again: %+v", c)
		}
	}

	// A restarted gateway: the conversation's allowance is back.
	r2 := e.gateway(t)
	s2 := e.open(t, r2, key, "trusted")
	w2 := &watcher{r: r2, id: s2.SessionID}
	send(t, r2, s2.SessionID, "three")
	if end := w2.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	for _, ev := range w2.seen {
		if _, ok := ev.Payload.(abi.AIConfirmation); ok {
			t.Fatalf("asked after the restart: %s", describe(w2.seen))
		}
	}

	// A compound command naming another program asks, for that program only; deny refuses.
	e.m.reply = func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("result: " + req.last().text())
			return
		}
		w.call("call_x", "bash", map[string]any{"command": "echo ok && touch x"})
	}
	send(t, r2, s2.SessionID, "four")
	w = w2
	c = asked()
	if !isProgram(c.Programs, "touch") {
		t.Fatalf("programs %v", c.Programs)
	}
	if _, err := r2.Control(context.Background(), s2.SessionID, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "deny"}); err != nil {
		t.Fatal(err)
	}
	w2.turnEnded(t)
	msgs := e.history(t, key)
	last := msgs[len(msgs)-2]
	if last.Role != provider.RoleToolResult || !last.IsError || !strings.Contains(last.Content[0].Text, "denied") {
		t.Fatalf("the denied call's result %+v", last)
	}
}

// isProgram reports whether a confirmation lists one program, the one PATH finds by name:
// requests name programs by path.
func isProgram(progs []string, name string) bool {
	return len(progs) == 1 && filepath.IsAbs(progs[0]) && filepath.Base(progs[0]) == name
}

func slicesContains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestInterruptMidStream: an interrupt while the reply streams keeps what came as an aborted
// message; the conversation goes on, and what the model gets next is valid.
func TestInterruptMidStream(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.lastUser() == "hang" {
			w.hang("Hel")
			return
		}
		echo(req, w)
	})
	r := e.gateway(t)
	key := "agent:main:test:interrupt"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "hang")
	w.until(t, "the first token", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AIToken)
		return ok && p.Content == "Hel"
	})
	// One turn at a time.
	if _, err := r.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("meanwhile")}); abi.CodeOf(err) != abi.CodeResourceUnavailable {
		t.Fatalf("a second message during a turn: %v", err)
	}
	if st := e.chatState(t, key); st != "running" {
		t.Errorf("sessions.json state %q during the turn", st)
	}
	if got, _ := r.Get(context.Background(), s.SessionID); got.Metadata["state"] != "streaming" {
		t.Errorf("metadata state %v while the reply streams", got.Metadata["state"])
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCancelled {
		t.Fatalf("turn %+v", end)
	}
	if st := e.chatState(t, key); st != "idle" {
		t.Errorf("sessions.json state %q after the interrupt", st)
	}
	send(t, r, s.SessionID, "after")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	raw := e.rawHistory(t, key)
	if n := e.m.count(); n != 2 {
		t.Errorf("the model got %d requests, want 2 (the interrupted one, then the next turn's)", n)
	}
	if len(raw) != 4 || !strings.Contains(raw[1], `"stopReason":"aborted"`) || !strings.Contains(raw[1], `"text":"Hel"`) {
		t.Fatalf("transcript:\n%s", strings.Join(raw, "\n"))
	}
}

// TestInterruptMidTool: an interrupt while a command runs stops it; the call is answered and
// the transcript stays valid for the next turn.
func TestInterruptMidTool(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		switch {
		case req.last().Role == "tool":
			w.text("after the tool")
		case req.lastUser() == "sleep":
			w.call("call_s", "bash", map[string]any{"command": "sleep 300"})
		default:
			echo(req, w)
		}
	})
	r := e.gateway(t)
	key := "agent:main:test:interrupt-tool"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "sleep")
	w.until(t, "the tool's start", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AITool)
		return ok && p.Phase == abi.PhaseStarted
	})
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCancelled {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	send(t, r, s.SessionID, "next")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	msgs := e.history(t, key)
	if got := roles(msgs); got != "user assistant/toolUse toolResult user assistant/stop" {
		t.Fatalf("transcript %s", got)
	}
	if !msgs[2].IsError {
		t.Errorf("the interrupted call's result %+v", msgs[2])
	}
}

// TestBadInput: an empty message, and commands the kind does not have.
func TestBadInput(t *testing.T) {
	e := newEnv(t, echo)
	r := e.gateway(t)
	s := e.open(t, r, "", "yolo")
	if _, err := r.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("  \n")}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("empty message: %v", err)
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandResize, Width: 80, Height: 24}); abi.CodeOf(err) != abi.CodeCapabilityUnsupported {
		t.Errorf("resize: %v", err)
	}
	res, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt})
	if err != nil || !strings.Contains(fmt.Sprint(res.Result), "interrupted:false") {
		t.Errorf("interrupt with no turn: %+v %v", res, err)
	}
	if !strings.HasPrefix(fmt.Sprint(s.Metadata["chatKey"]), "agent:main:ai:") {
		t.Errorf("default key %v", s.Metadata["chatKey"])
	}
}

// TestCompactionThreshold: a context past 0.9 of the window is compacted before the turn's
// model call, by the summary model, in a request that fits; the model then sees the summary
// and the recent part, paired.
func TestCompactionThreshold(t *testing.T) {
	big1, big2 := strings.Repeat("alpha ", 400), strings.Repeat("bravo ", 400) // 2400 characters: about 600 tokens each
	var summaryReq chatRequest
	e := newEnv(t, func(req chatRequest, w *sse) {
		switch {
		case req.isSummary():
			summaryReq = req
			w.text("SUMMARY: the user sent alphas")
		case req.last().Role == "user":
			// Each turn calls a tool first, so the cut has pairs to keep together.
			w.call(fmt.Sprintf("call_%d", len(req.Messages)), "list_dir", map[string]any{"path": "."})
		default:
			w.text("ok")
		}
	})
	e.m.countTokens = true
	r := e.gateway(t)
	key := "agent:main:test:compact"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, big1)
	w.turnEnded(t)
	send(t, r, s.SessionID, big2)
	w.until(t, "the compaction's end", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AICompaction)
		return ok && p.Phase == abi.PhaseEnded
	})
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if summaryReq.Model != "fake-small" || !summaryReq.has("alpha alpha") || summaryReq.has("bravo bravo") {
		t.Fatalf("summary request: model %s, %d messages", summaryReq.Model, len(summaryReq.Messages))
	}
	last := e.m.requests[len(e.m.requests)-1]
	if last.isSummary() || !last.has("SUMMARY: the user sent alphas") || last.has("alpha alpha") || !last.has("bravo bravo") {
		t.Fatalf("the turn after the compaction sent %+v", last.Messages)
	}
	msgs := e.history(t, key)
	if got := roles(msgs); got != "user user assistant/toolUse toolResult assistant/stop" { // the summary (as user text), then the kept turn
		t.Fatalf("context after compaction: %s", got)
	}
	sh, err := e.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Entry == nil || sh.Entry.CompactionCount != 1 {
		t.Errorf("sessions.json after compaction: %+v", sh.Entry)
	}
}

// TestCompactionOverflow: a request the provider refuses as too large for the window is
// compacted and tried once more; the turn completes.
func TestCompactionOverflow(t *testing.T) {
	big1, big2 := strings.Repeat("alpha ", 1000), strings.Repeat("bravo ", 1000) // about 1500 tokens each
	e := newEnv(t, func(req chatRequest, w *sse) {
		switch {
		case req.isSummary():
			w.text("SUMMARY of alphas")
		case req.lastUser() == "next" && req.has("alpha alpha"):
			w.overflow()
		default:
			w.text("ok")
		}
	})
	e.window = 4000
	e.m.countTokens = true
	r := e.gateway(t)
	key := "agent:main:test:overflow"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	for _, m := range []string{big1, big2, "next"} {
		send(t, r, s.SessionID, m)
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
	}
	var reasons []string
	for _, ev := range w.seen {
		if p, ok := ev.Payload.(abi.AICompaction); ok && p.Phase == abi.PhaseEnded {
			reasons = append(reasons, p.Reason)
		}
	}
	if fmt.Sprint(reasons) != "[overflow]" {
		t.Fatalf("compactions %v: %s", reasons, describe(w.seen))
	}
	last := e.m.requests[len(e.m.requests)-1]
	if !last.has("SUMMARY of alphas") || !last.has("bravo bravo") || last.lastUser() != "next" {
		t.Fatalf("the retried request: %+v", last.Messages)
	}
}

// TestCompactRequested: nexus ai compact between turns; during a turn it is refused.
func TestCompactRequested(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		switch {
		case req.isSummary():
			w.text("SUMMARY")
		case req.lastUser() == "hang":
			w.hang("...")
		default:
			w.text("ok")
		}
	})
	e.window = 400 // 200-character messages: no compaction of its own before the one asked for
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:compact-now", "yolo")
	w := &watcher{r: r, id: s.SessionID}
	ctl := func(cmd abi.Command) (*abi.ControlData, error) {
		return r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: cmd})
	}
	if _, err := ctl(abi.CommandCompact); err != nil {
		t.Fatal(err) // an empty conversation: the error comes as an event
	}
	w.until(t, "the empty conversation's error", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.ErrorPayload)
		return ok && p.Error.Code == abi.CodeInvalidArgument
	})
	for _, m := range []string{strings.Repeat("one ", 50), strings.Repeat("two ", 50), strings.Repeat("three ", 34)} {
		send(t, r, s.SessionID, m)
		w.turnEnded(t)
	}
	res, err := ctl(abi.CommandCompact)
	if err != nil || !strings.Contains(fmt.Sprint(res.Result), "afterSeq") {
		t.Fatalf("compact: %+v %v", res, err)
	}
	ev := w.until(t, "the compaction's end", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AICompaction)
		return ok && p.Phase == abi.PhaseEnded
	})
	if p := ev.Payload.(abi.AICompaction); p.Reason != CompactRequestedName || p.CompactionID == "" || p.FirstKeptEntryID == "" {
		t.Fatalf("compaction %+v", p)
	}
	send(t, r, s.SessionID, "hang")
	w.until(t, "the reply's start", func(e *live.Event) bool { _, ok := e.Payload.(abi.AIToken); return ok })
	if _, err := ctl(abi.CommandCompact); abi.CodeOf(err) != abi.CodeResourceUnavailable {
		t.Fatalf("compact during a turn: %v", err)
	}
	if _, err := ctl(abi.CommandInterrupt); err != nil {
		t.Fatal(err)
	}
	w.turnEnded(t)
}

const CompactRequestedName = aichat.CompactRequested

// mcpServerVar makes the test binary an MCP server on stdio (TestMain) with one tool, echo.
const mcpServerVar = "NEXUS_TEST_MCP_SERVER"

func TestMain(m *testing.M) {
	acptest.Main() // the binary is an ACP agent when an acp backend starts it (acp_test.go)
	if os.Getenv(mcpServerVar) == "1" {
		srv := sdk.NewServer(&sdk.Implementation{Name: "fs", Version: "1"}, nil)
		sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "echoes text"}, func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
		// meet marks its own arrival in dir and waits for other's: two calls of it meet only
		// when they run at once (TestMaxConcurrentTools).
		sdk.AddTool(srv, &sdk.Tool{Name: "meet", Description: "waits for another call"}, func(ctx context.Context, _ *sdk.CallToolRequest, in struct {
			Dir   string `json:"dir"`
			Me    string `json:"me"`
			Other string `json:"other"`
		}) (*sdk.CallToolResult, any, error) {
			if err := os.WriteFile(filepath.Join(in.Dir, in.Me), nil, 0o600); err != nil {
				return nil, nil, err
			}
			for {
				if _, err := os.Stat(filepath.Join(in.Dir, in.Other)); err == nil {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Me + " met " + in.Other}}}, nil, nil
				}
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
		if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMCPServerTools: a configured MCP server (a real process speaking MCP on stdio) offers
// its tools as mcp_<server>_<tool> after the built-ins; the model calls one; at level trusted
// it asks first. A server that cannot start is reported in the metadata, the chat goes on.
func TestMCPServerTools(t *testing.T) {
	var offered []string
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("got " + req.last().text())
			return
		}
		offered = offered[:0]
		for _, tl := range req.Tools {
			offered = append(offered, tl.Function.Name)
		}
		w.call("call_m", "mcp_fs_echo", map[string]any{"text": "hi"})
	})
	e.extra = fmt.Sprintf("\n[mcp_servers.fs]\ncommand = %q\nenv_vars = [%q]\n\n[mcp_servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n", os.Args[0], mcpServerVar)
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:mcp", "yolo")
	st := fmt.Sprint(s.Metadata["mcpServers"])
	if !strings.Contains(st, "fs:map[connected:true]") || !strings.Contains(st, "broken:map[error:") {
		t.Fatalf("mcpServers %s", st)
	}
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "use it")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if len(offered) < 2 || fmt.Sprint(offered[len(offered)-2:]) != "[mcp_fs_echo mcp_fs_meet]" {
		t.Fatalf("tools offered %v (MCP tools come after the built-ins)", offered)
	}
	msgs := e.history(t, "agent:main:test:mcp")
	if res := msgs[2]; res.ToolName != "mcp_fs_echo" || res.IsError || res.Content[0].Text != "echo: hi" {
		t.Fatalf("result %+v", res)
	}

	// Trusted: the call asks, offering the tool-wide allowance.
	s2 := e.open(t, r, "agent:main:test:mcp2", "trusted")
	w2 := &watcher{r: r, id: s2.SessionID}
	send(t, r, s2.SessionID, "use it")
	ev := w2.until(t, "a confirmation request", func(e *live.Event) bool { _, ok := e.Payload.(abi.AIConfirmation); return ok })
	c := ev.Payload.(abi.AIConfirmation)
	if c.Tool != "mcp_fs_echo" || fmt.Sprint(c.Options) != "[deny allow-once allow-exec-global]" {
		t.Fatalf("request %+v", c)
	}
	if _, err := r.Control(context.Background(), s2.SessionID, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "allow-once"}); err != nil {
		t.Fatal(err)
	}
	if end := w2.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
}

// TestClientMCPServers: the MCP servers a client names for its session (an editor's, through
// nexus acp) are started for it with the variables it gives, their tools offered after the
// built-ins; one that fails is reported; a bad name is refused; and they are never recorded
// with the conversation (their env may carry secrets).
func TestClientMCPServers(t *testing.T) {
	var offered []string
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("got " + req.last().text())
			return
		}
		offered = offered[:0]
		for _, tl := range req.Tools {
			offered = append(offered, tl.Function.Name)
		}
		w.call("call_m", "mcp_editor_echo", map[string]any{"text": "hi"})
	})
	r := e.gateway(t)
	open := func(key string, servers []abi.AIMCPServer) (abi.Session, error) {
		opts, _ := json.Marshal(abi.AIChatOptions{Backend: "fake", Level: "yolo", Workspace: e.ws, MCPServers: servers})
		return r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
	}
	s, err := open("agent:main:test:client-mcp", []abi.AIMCPServer{
		{Name: "editor", Command: os.Args[0], Env: map[string]string{mcpServerVar: "1", "EDITOR_TOKEN": "s3cret-value"}},
		{Name: "broken", Command: "/nonexistent/mcp-server"},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := fmt.Sprint(s.Metadata["mcpServers"])
	if !strings.Contains(st, "editor:map[connected:true]") || !strings.Contains(st, "broken:map[error:") {
		t.Fatalf("mcpServers %s", st)
	}
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "use it")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if len(offered) < 2 || fmt.Sprint(offered[len(offered)-2:]) != "[mcp_editor_echo mcp_editor_meet]" {
		t.Fatalf("tools offered %v (the client's MCP tools come after the built-ins)", offered)
	}
	msgs := e.history(t, "agent:main:test:client-mcp")
	if res := msgs[2]; res.ToolName != "mcp_editor_echo" || res.IsError || res.Content[0].Text != "echo: hi" {
		t.Fatalf("result %+v", res)
	}
	sh, err := e.chats.Show(context.Background(), "agent:main:test:client-mcp")
	if err != nil {
		t.Fatal(err)
	}
	if rec := string(sh.Entry.Extra[aichat.OptionsField]); rec == "" || strings.Contains(rec, "mcpServers") || strings.Contains(rec, "s3cret") {
		t.Fatalf("recorded options %s: the client's servers must not be kept", rec)
	}

	for _, bad := range [][]abi.AIMCPServer{
		{{Name: "", Command: "x"}},
		{{Name: "a b", Command: "x"}},
		{{Name: "x", Command: ""}},
		{{Name: "x", Command: "y"}, {Name: "x", Command: "z"}},
		{{Name: "x", Command: "y", Env: map[string]string{"A=B": "c"}}},
	} {
		if _, err := open("", bad); !isCode(err, abi.CodeInvalidArgument) {
			t.Errorf("servers %+v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

// TestClientHTTPMCPServers: a client's MCP servers reached over HTTP (Streamable HTTP, and
// the older HTTP+SSE) are dialled for the session with the headers it gives on every request
// (an editor's token), and the model calls their tools; a bad URL or header is refused.
func TestClientHTTPMCPServers(t *testing.T) {
	var (
		mu   sync.Mutex
		auth = map[string][]string{} // the Authorization headers each server saw
	)
	server := func(name string) *sdk.Server {
		srv := sdk.NewServer(&sdk.Implementation{Name: name, Version: "1"}, nil)
		sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "echoes text"}, func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + " echo: " + in.Text}}}, nil, nil
		})
		return srv
	}
	serve := func(name string, h http.Handler) string {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			auth[name] = append(auth[name], r.Header.Get("Authorization"))
			mu.Unlock()
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	web, old := server("web"), server("old")
	webURL := serve("web", sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return web }, nil))
	oldURL := serve("old", sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return old }, nil))

	tool := "mcp_web_echo"
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("got " + req.last().text())
			return
		}
		w.call("call_h", tool, map[string]any{"text": "hi"})
	})
	r := e.gateway(t)
	open := func(key string, servers []abi.AIMCPServer) (abi.Session, error) {
		opts, _ := json.Marshal(abi.AIChatOptions{Backend: "fake", Level: "yolo", Workspace: e.ws, MCPServers: servers})
		return r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
	}
	servers := []abi.AIMCPServer{
		{Name: "web", Type: abi.MCPHTTP, URL: webURL, Headers: map[string]string{"Authorization": "Bearer web-token"}},
		{Name: "old", Type: abi.MCPSSE, URL: oldURL, Headers: map[string]string{"Authorization": "Bearer old-token"}},
	}
	for _, tl := range []string{"mcp_web_echo", "mcp_old_echo"} {
		tool = tl
		key := "agent:main:test:" + strings.ReplaceAll(tl, "_", "-")
		s, err := open(key, servers)
		if err != nil {
			t.Fatal(err)
		}
		if st := fmt.Sprint(s.Metadata["mcpServers"]); !strings.Contains(st, "web:map[connected:true]") || !strings.Contains(st, "old:map[connected:true]") {
			t.Fatalf("mcpServers %s", st)
		}
		w := &watcher{r: r, id: s.SessionID}
		send(t, r, s.SessionID, "use "+tl)
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
		res := e.history(t, key)[2]
		if want := strings.Split(tl, "_")[1] + " echo: hi"; res.ToolName != tl || res.IsError || res.Content[0].Text != want {
			t.Fatalf("result %+v, want %q", res, want)
		}
		// The headers (tokens) are never recorded with the conversation.
		sh, err := e.chats.Show(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if rec := string(sh.Entry.Extra[aichat.OptionsField]); rec == "" || strings.Contains(rec, "-token") {
			t.Fatalf("recorded options %s: the client's headers must not be kept", rec)
		}
	}
	mu.Lock()
	for name, got := range auth {
		for _, a := range got {
			if a != "Bearer "+name+"-token" {
				t.Errorf("server %s saw Authorization %q in %q", name, a, got)
			}
		}
	}
	if len(auth["web"]) == 0 || len(auth["old"]) == 0 {
		t.Errorf("requests seen %v", auth)
	}
	mu.Unlock()

	for _, bad := range [][]abi.AIMCPServer{
		{{Name: "x", Type: abi.MCPHTTP, URL: "ftp://host/mcp"}},
		{{Name: "x", Type: abi.MCPSSE, URL: "/relative"}},
		{{Name: "x", Type: abi.MCPHTTP, URL: webURL, Headers: map[string]string{"Bad Name": "v"}}},
		{{Name: "x", Type: abi.MCPHTTP, URL: webURL, Headers: map[string]string{"X": "a\r\nInjected: b"}}},
		{{Name: "x", Type: "ws", URL: webURL}},
	} {
		if _, err := open("", bad); !isCode(err, abi.CodeInvalidArgument) {
			t.Errorf("servers %+v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}

// TestTokensWaitForAFollower: a reply of many more tokens than the event ring holds reaches a
// WebSocket-style follower (Registry.Follow, acknowledging what it read) whole and in order.
// The follower starts reading only once the model has written the whole reply (about 50 KB,
// which the loopback socket's buffers hold): without flow control the tokens would lap it.
func TestTokensWaitForAFollower(t *testing.T) {
	const n = 400
	written := make(chan struct{})
	e := newEnv(t, func(_ chatRequest, w *sse) {
		for i := range n {
			d := map[string]any{"content": fmt.Sprintf("w%d ", i)}
			if i == 0 {
				d["role"] = "assistant"
			}
			w.chunk(d, "")
		}
		w.chunk(map[string]any{}, "stop")
		w.done()
		close(written)
	})
	r := e.gatewayWith(t, live.Config{IdleTimeout: -1, Log: live.LogLimits{Events: 32, MaxStall: time.Hour}})
	s := e.open(t, r, "", "yolo")
	ctx := context.Background()
	after, err := r.LastSeq(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := r.Follow(ctx, s.SessionID, after)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	send(t, r, s.SessionID, "talk")
	<-written
	var text strings.Builder
	for done := false; !done; {
		b, err := r.Read(ctx, s.SessionID, after, 8, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range b.Events {
			switch p := ev.Payload.(type) {
			case abi.ErrorPayload:
				t.Fatalf("the follower lost events: %+v", p.Error)
			case abi.AIToken:
				text.WriteString(p.Content)
			case abi.AITurn:
				done = p.Phase == abi.PhaseEnded
			}
		}
		after = b.Next
		fl.Ack(after)
	}
	if got := strings.Count(text.String(), " "); got != n || !strings.HasSuffix(text.String(), fmt.Sprintf("w%d ", n-1)) {
		t.Fatalf("received %d words", got)
	}
}
