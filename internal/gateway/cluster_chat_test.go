package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// chatModel is an OpenAI-compatible chat completions server for the cluster's ai-chat tests:
// it answers each request with "answer to <the last user message> #<n>" (n: how many requests
// carried that message so far), streamed in words, and can hold one reply after its first
// word until the test releases it.
type chatModel struct {
	srv *httptest.Server

	mu   sync.Mutex
	seen map[string]int // requests by their last user message
	// holdOn: the first request whose last user message is this holds; holding is told it
	// holds, release lets it go on.
	holdOn  string
	holding chan struct{}
	release chan struct{}
}

func newChatModel(t *testing.T) *chatModel {
	t.Helper()
	m := &chatModel{seen: map[string]int{}, holding: make(chan struct{}), release: make(chan struct{})}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	t.Cleanup(m.releaseHeld) // a held request ends before the server closes
	return m
}

// hold makes the first request whose last user message is text hold after its first word.
func (m *chatModel) hold(text string) {
	m.mu.Lock()
	m.holdOn = text
	m.mu.Unlock()
}

func (m *chatModel) releaseHeld() {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.release:
	default:
		close(m.release)
	}
}

// requests is how many requests carried text as their last user message.
func (m *chatModel) requests(text string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[text]
}

func (m *chatModel) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	last := ""
	for _, msg := range req.Messages {
		if msg.Role == "user" {
			last = contentText(msg.Content)
		}
	}
	m.mu.Lock()
	m.seen[last]++
	n := m.seen[last]
	held := last == m.holdOn && n == 1
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	chunk := func(delta map[string]any, finish string) {
		c := map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}}
		if finish != "" {
			c["choices"] = []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}
			c["usage"] = map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		f.Flush()
	}
	words := strings.SplitAfter(fmt.Sprintf("answer to %s #%d", last, n), " ")
	chunk(map[string]any{"role": "assistant", "content": words[0]}, "")
	if held {
		close(m.holding)
		select {
		case <-m.release:
		case <-r.Context().Done():
			return
		}
	}
	for _, word := range words[1:] {
		chunk(map[string]any{"content": word}, "")
	}
	chunk(map[string]any{}, "stop")
	fmt.Fprint(w, "data: [DONE]\n\n")
	f.Flush()
}

// contentText is a message's text: a string, or text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// chatNode is a cluster node serving ai-chat sessions, and what its test looks at.
type chatNode struct {
	*assembled
	name, state string
	px          *testkit.Proxy // nil: the node reaches NATS directly
}

// startChatCluster runs a real nats-server and a gateway per name on it, nodes of one
// cluster serving ai-chat against m (NEXUS_HOME/config.toml names it as backend "fake"). A
// node named in proxied reaches the server through a proxy the test cuts (its px).
func startChatCluster(t *testing.T, m *chatModel, nodeLost time.Duration, proxied []string, names ...string) map[string]*chatNode {
	t.Helper()
	srv, err := jetstore.StartEmbedded(testCtx(t), jetstore.EmbeddedOptions{Name: "nats", Dir: t.TempDir(), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() }) // after the gateways' cleanups
	addr := strings.TrimPrefix(srv.ClientURL(), "nats://")
	home := t.TempDir()
	cfg := fmt.Sprintf("[backends.fake]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"fake-1\"\ncontext_window = 100000\n", m.srv.URL+"/v1")
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(v string) string {
		switch v {
		case "NEXUS_HOME":
			return home
		case "PATH", "HOME":
			return os.Getenv(v)
		}
		return ""
	}
	out := map[string]*chatNode{}
	for _, name := range names {
		url := "nats://tok@" + addr
		var px *testkit.Proxy
		if slices.Contains(proxied, name) {
			px = testkit.StartProxy(t, addr)
			url = "nats://tok@" + px.Addr
		}
		state := testkit.ShortTempDir(t)
		logs := &testkit.Buffer{}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("node %s's log:\n%s", name, logs.String())
			}
		})
		out[name] = &chatNode{name: name, state: state, px: px, assembled: runAssembled(t, gateway.Config{
			StateDir: state, IdleTimeout: -1, Types: []abi.SessionType{abi.TypeAIChat}, Getenv: getenv,
			Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			Cluster: &gateway.ClusterConfig{URLs: []string{url}, Node: name, Name: "chat", NodeLost: nodeLost},
		})}
	}
	return out
}

// openChat opens an ai-chat session on key through n's API.
func (n *chatNode) openChat(ctx context.Context, key, ws string) (abi.Session, error) {
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: "fake", Workspace: ws})
	return n.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
}

// turnEnds are the ends of the turns in session id's events, read through cl.
func turnEnds(ctx context.Context, cl *client.Client, id string) ([]abi.AITurn, error) {
	var out []abi.AITurn
	var after uint64
	for {
		r, err := cl.Poll(ctx, id, after, 0, 0, "")
		if err != nil {
			return nil, err
		}
		for _, e := range r.Events {
			var p abi.AITurn
			if e.Event == abi.EventData && json.Unmarshal(e.Payload, &p) == nil && p.Type == abi.PayloadAITurn && p.Phase == abi.PhaseEnded {
				out = append(out, p)
			}
		}
		if len(r.Events) == 0 || r.Next <= after {
			return out, nil
		}
		after = r.Next
	}
}

// waitTurns waits until session id has ended n turns, all completed.
func waitTurns(t *testing.T, cl *client.Client, id string, n int) {
	t.Helper()
	ctx := testCtx(t)
	var ends []abi.AITurn
	testkit.Eventually(t, fmt.Sprintf("%d turns ended in %s", n, id), func() bool {
		var err error
		ends, err = turnEnds(ctx, cl, id)
		return err == nil && len(ends) >= n
	})
	for _, e := range ends {
		if e.End != abi.TurnCompleted {
			t.Fatalf("a turn of %s ended %s: %s", id, e.End, e.Reason)
		}
	}
	if len(ends) != n {
		t.Fatalf("%s ended %d turns, want %d: %+v", id, len(ends), n, ends)
	}
}

// transcriptMessages reads a transcript file: its entries' ids in order, checked to make one
// chain (each entry's parent is the one before), and the text of each message, as
// "role: text".
func transcriptMessages(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	ids := map[string]bool{}
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			Type     string `json:"type"`
			ID       string `json:"id"`
			ParentID *string
			Message  *struct {
				Role       string          `json:"role"`
				Content    json.RawMessage `json:"content"`
				StopReason string          `json:"stopReason"`
			} `json:"message"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Bytes())
		}
		if e.Type == "session" {
			continue // the header
		}
		if ids[e.ID] {
			t.Errorf("%s: entry %s twice", path, e.ID)
		}
		ids[e.ID] = true
		parent := ""
		if e.ParentID != nil {
			parent = *e.ParentID
		}
		if parent != prev {
			t.Errorf("%s: entry %s follows %q, its parent is %q", path, e.ID, prev, parent)
		}
		prev = e.ID
		if e.Message != nil && (e.Message.Role == "user" || e.Message.Role == "assistant") {
			role := e.Message.Role
			if e.Message.StopReason == "aborted" {
				role += " (aborted)"
			}
			msgs = append(msgs, role+": "+strings.TrimSpace(contentText(e.Message.Content)))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestClusterConversationPartition: node a, cut off from NATS mid-turn (its model's reply
// held), loses its conversation to b: b marks a's session node-lost, takes the conversation
// over (a session replacing a's, a's record naming it) and finishes the turn; a's reply,
// released after the cut, is not written (a no longer holds the lease) and its turn ends with
// an error. When a is back its session is closed, it opens nothing on the conversation and
// what is sent through it goes to b or is refused naming b; b's transcript has every entry
// once, in order, and no message was delivered twice.
func TestClusterConversationPartition(t *testing.T) {
	m := newChatModel(t)
	nodes := startChatCluster(t, m, 3*time.Second, []string{"a"}, "a", "b")
	a, b := nodes["a"], nodes["b"]
	px := a.px
	ctx := testCtx(t)
	ws := t.TempDir()
	const key = "agent:main:partition"

	s, err := a.openChat(ctx, key, ws)
	if err != nil {
		t.Fatal(err)
	}
	old := s.SessionID
	if _, err := a.cl.SendMessage(ctx, old, []byte("first"), ""); err != nil {
		t.Fatal(err)
	}
	waitTurns(t, a.cl, old, 1)

	// The second turn's reply holds after its first word; a is cut off meanwhile.
	m.hold("second")
	if _, err := a.cl.SendMessage(ctx, old, []byte("second"), ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.holding:
	case <-ctx.Done():
		t.Fatal("the second turn's request never reached the model")
	}
	px.Cut()

	// b finds a lost and takes the conversation over: a session of its own replaces a's,
	// and continues the turn (the model answers b's request for "second").
	var moved abi.Session
	testkit.Eventually(t, "b takes a's conversation over", func() bool {
		list, err := b.cl.List(ctx, true, abi.TypeAIChat)
		if err != nil {
			return false
		}
		for _, x := range list {
			if x.Node == "b" && x.Metadata["replaces"] == old {
				moved = x
				return true
			}
		}
		return false
	})
	waitTurns(t, b.cl, moved.SessionID, 1)
	if got, err := b.cl.Get(ctx, old); err != nil || got.Status != abi.StatusError || got.Metadata["closeReason"] != "node-lost" || got.Metadata["movedTo"] != moved.SessionID {
		t.Fatalf("a's session as b sees it: %+v %v; want error, node-lost, movedTo %s", got, err, moved.SessionID)
	}

	// a's reply, released now, cannot be written: its lease expired. Its turn ends with an
	// error (a's log of the session says so: its events cannot reach the cluster).
	m.releaseHeld()
	verbose := filepath.Join(a.state, "logs", old, "verbose.md")
	var log string
	testkit.Eventually(t, "a's held turn ends", func() bool {
		b, _ := os.ReadFile(verbose)
		log = string(b)
		return strings.Count(log, "turn ended") >= 2
	})
	if !strings.Contains(log, `"end":"error"`) || !strings.Contains(log, "lease") {
		t.Errorf("a's held turn did not end with a lease error:\n%s", log)
	}
	aFile := chatFile(t, a, key)
	if mine := transcriptMessages(t, aFile); slices.Contains(mine, "assistant: answer to second #1") {
		t.Errorf("a wrote the reply it held without the lease: %q", mine)
	}

	// a is back: its renewal finds b's lease and closes its session there.
	px.Restore(t)
	testkit.Eventually(t, "a's session closes on a", func() bool {
		got, err := a.d.Registry.Get(ctx, old)
		return err == nil && got.Status.Final()
	})
	got, _ := a.d.Registry.Get(ctx, old)
	if r := got.Metadata["closeReason"]; r != aichat.CloseLeaseLost && r != "node-lost" {
		t.Errorf("a's session closed on a with %v", r)
	}

	// What goes through a now: a message to a's old session is refused, naming the session
	// that replaced it, which a's answer for the old one names too (nexus ai send follows
	// it: followMoved); a message sent there through a goes to b.
	_, err = a.cl.SendMessage(ctx, old, []byte("to the old one"), "")
	livetest.WantCode(t, err, abi.CodeSessionClosed)
	if !strings.Contains(err.Error(), "moved to session "+moved.SessionID) {
		t.Errorf("a message to a's old session through a: %v; want it to name %s", err, moved.SessionID)
	}
	if got, err := a.cl.Get(ctx, old); err != nil || got.Metadata["movedTo"] != moved.SessionID {
		t.Fatalf("a's old session, got through a: %+v %v; want movedTo %s", got, err, moved.SessionID)
	}
	// A session opened on the conversation through a is b's (placement sends the create to
	// the conversation's owner), or, if a could not tell who owns it, refused naming b.
	if x, err := a.openChat(ctx, key, ws); err == nil {
		if x.Node != "b" {
			t.Fatalf("a session on the conversation opened through a is on %q: %+v", x.Node, x)
		}
		if _, err := a.cl.Control(ctx, x.SessionID, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
			t.Fatal(err)
		}
	} else {
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Code != abi.CodeResourceUnavailable || !strings.Contains(ae.Message, "node b") {
			t.Fatalf("a session on the conversation opened through a: %v; want it on b, or RESOURCE_UNAVAILABLE naming b", err)
		}
	}
	if _, err := a.cl.SendMessage(ctx, moved.SessionID, []byte("third"), ""); err != nil {
		t.Fatalf("a message to b's session through a: %v", err)
	}
	waitTurns(t, b.cl, moved.SessionID, 2)
	// A message a's kind stores (a trigger's, another agent's) is delivered by b's session.
	d, err := a.d.AIChat.Deliver(ctx, aichat.Delivery{Key: key, Text: "fourth"})
	if err != nil {
		t.Fatal(err)
	}
	waitTurns(t, b.cl, moved.SessionID, 3)

	// a runs nothing on the conversation.
	running, err := a.d.Registry.List(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range running {
		if x.Type == abi.TypeAIChat && x.Node == "a" {
			t.Errorf("a has a live ai-chat session: %+v", x)
		}
	}
	// b's transcript: every entry once, in order, with the turns b finished and none of
	// a's held reply.
	want := []string{"user: first", "assistant: answer to first #1", "user: second", "assistant: answer to second #2",
		"user: third", "assistant: answer to third #1", "user: fourth", "assistant: answer to fourth #1"}
	bFile := chatFile(t, b, key)
	if got := transcriptMessages(t, bFile); !slices.Equal(withoutCut(t, got, "answer to second #1"), want) {
		t.Errorf("b's transcript:\n%q\nwant\n%q", got, want)
	}
	if got := transcriptMessages(t, aFile); slices.Equal(withoutCut(t, got, "answer to second #1"), want) {
		t.Errorf("a's transcript is the cluster's: %q", got)
	}
	// Each message was asked of the model once, but for the turn a was cut off in (asked
	// again by b), and the queue delivered each once.
	for text, n := range map[string]int{"first": 1, "second": 2, "third": 1, "fourth": 1} {
		if got := m.requests(text); got != n {
			t.Errorf("the model was asked about %q %d times, want %d", text, got, n)
		}
	}
	hist, err := b.d.Broker.History(ctx, key, 100)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]bool{}
	for _, msg := range hist {
		if msg.State != broker.StateDelivered || msg.EntryID == "" || entries[msg.EntryID] {
			t.Errorf("queued message %+v: want delivered once, into an entry of its own", msg)
		}
		entries[msg.EntryID] = true
	}
	if len(hist) != 4 || hist[3].ID != d.MessageID {
		t.Errorf("the conversation's queue: %+v", hist)
	}
}

// withoutCut is msgs without the aborted reply a takeover keeps of the turn the lost node was
// running (what its events had streamed of it, if any reached the cluster), checked to be a
// beginning of reply.
func withoutCut(t *testing.T, msgs []string, reply string) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		if cut, ok := strings.CutPrefix(m, "assistant (aborted): "); ok {
			if !strings.HasPrefix(reply, cut) {
				t.Errorf("an aborted reply %q, not a beginning of %q", cut, reply)
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

// chatFile is key's transcript file on node n.
func chatFile(t *testing.T, n *chatNode, key string) string {
	t.Helper()
	sh, err := n.d.AIChat.Chats.Show(testCtx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return sh.File
}

// TestClusterConversationOneOwner: two nodes open an ai-chat session on one conversation at
// once, round after round: every session opened is on one node, the owner (a create on the
// other node that saw the owner's lease was placed there); a create that found it taken as it
// started is refused RESOURCE_UNAVAILABLE naming the owner. A message the other node's kind
// stores for the conversation (a trigger's, another agent's) is delivered by the owner's
// session, once. Once the owner's sessions close (its lease released) the other node opens the
// conversation, with what the owner wrote.
func TestClusterConversationOneOwner(t *testing.T) {
	m := newChatModel(t)
	nodes := startChatCluster(t, m, 0, nil, "a", "b")
	ctx := testCtx(t)
	ws := t.TempDir()
	const rounds = 4
	for round := range rounds {
		key := fmt.Sprintf("agent:main:one-owner-%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var opened []abi.Session
		var refused []error
		for _, name := range []string{"a", "b", "a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := nodes[name].openChat(ctx, key, ws)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
				} else {
					opened = append(opened, s)
				}
			}()
		}
		wg.Wait()
		if len(opened) == 0 {
			t.Fatalf("round %d: no open succeeded: %v", round, refused)
		}
		owner := opened[0].Node
		for _, s := range opened {
			if s.Node != owner {
				t.Fatalf("round %d: sessions on the conversation on %s and %s", round, owner, s.Node)
			}
		}
		for _, err := range refused {
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != abi.CodeResourceUnavailable || !strings.Contains(ae.Message, "owned by node "+owner) {
				t.Fatalf("round %d: a refused open: %v; want RESOURCE_UNAVAILABLE naming %s", round, err, owner)
			}
		}
		other := map[string]string{"a": "b", "b": "a"}[owner]
		t.Logf("round %d: %d sessions on %s, %d refused", round, len(opened), owner, len(refused))

		// Stored on the other node, delivered by one of the owner's sessions, once.
		text := fmt.Sprintf("message %d", round)
		d, err := nodes[other].d.AIChat.Deliver(ctx, aichat.Delivery{Key: key, Text: text})
		if err != nil {
			t.Fatalf("round %d: deliver on %s: %v", round, other, err)
		}
		testkit.Eventually(t, "the message delivered on "+owner, func() bool {
			got, err := nodes[owner].d.Broker.Get(ctx, []string{d.MessageID})
			if err != nil || len(got) != 1 || got[0].State != broker.StateDelivered {
				return false
			}
			n := 0
			for _, s := range opened {
				ends, err := turnEnds(ctx, nodes[owner].cl, s.SessionID)
				if err != nil {
					return false
				}
				n += len(ends)
			}
			return n == 1
		})
		if n := m.requests(text); n != 1 {
			t.Errorf("round %d: the model was asked about %q %d times", round, text, n)
		}
		all, err := nodes[other].d.Registry.List(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range all {
			if x.Node == other && x.Context.ChatID == key {
				t.Errorf("round %d: %s has a session on the conversation: %+v", round, other, x)
			}
		}
		if round < rounds-1 {
			continue
		}
		// The owner lets go: the other node opens the conversation and goes on from it.
		for _, s := range opened {
			if _, err := nodes[owner].cl.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
				t.Fatal(err)
			}
		}
		next, err := nodes[other].openChat(ctx, key, ws)
		if err != nil || next.Node != other {
			t.Fatalf("the conversation opened on %s after %s's sessions closed: %+v %v", other, owner, next, err)
		}
		if _, err := nodes[other].cl.SendMessage(ctx, next.SessionID, []byte("after the move"), ""); err != nil {
			t.Fatal(err)
		}
		waitTurns(t, nodes[other].cl, next.SessionID, 1)
		want := []string{"user: " + text, "assistant: answer to " + text + " #1", "user: after the move", "assistant: answer to after the move #1"}
		if got := transcriptMessages(t, chatFile(t, nodes[other], key)); !slices.Equal(got, want) {
			t.Errorf("the transcript on %s:\n%q\nwant\n%q", other, got, want)
		}
	}
}

// TestClusterConversationSessionsLost: a node lost with two sessions on one conversation has
// it taken over once, by a session that replaces the newer, and both old ones name it
// (movedTo): a client of either follows it.
func TestClusterConversationSessionsLost(t *testing.T) {
	m := newChatModel(t)
	nodes := startChatCluster(t, m, 3*time.Second, []string{"a"}, "a", "b")
	a, b := nodes["a"], nodes["b"]
	ctx := testCtx(t)
	ws := t.TempDir()
	const key = "agent:main:two-sessions"
	var olds []string
	for range 2 {
		s, err := a.openChat(ctx, key, ws)
		if err != nil {
			t.Fatal(err)
		}
		olds = append(olds, s.SessionID)
	}
	a.px.Cut()
	var moved []abi.Session
	testkit.Eventually(t, "b takes a's conversation over", func() bool {
		list, err := b.cl.List(ctx, true, abi.TypeAIChat)
		if err != nil {
			return false
		}
		moved = moved[:0]
		for _, x := range list {
			if x.Node == "b" && x.Metadata["replaces"] != nil {
				moved = append(moved, x)
			}
		}
		return len(moved) > 0
	})
	if len(moved) != 1 || moved[0].Metadata["replaces"] != olds[1] {
		t.Fatalf("b's sessions replacing a's: %+v; want one, replacing the newer (%s)", moved, olds[1])
	}
	for _, old := range olds {
		testkit.Eventually(t, "a's session "+old+" names the new one", func() bool {
			got, err := b.cl.Get(ctx, old)
			return err == nil && got.Metadata["movedTo"] == moved[0].SessionID
		})
	}
	a.px.Restore(t) // a's shutdown is quick with its connection back
}
