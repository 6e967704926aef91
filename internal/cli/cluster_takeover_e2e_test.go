package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestClusterConversationTakeover runs issue 27's point 6 through the binaries: three nexus
// nodes on a three-server NATS cluster at R3, an ai-chat on node a against the real model
// server, a killed -9 while the turn streams its reply and two more messages wait in the
// conversation's queue. Another node takes the conversation over: the cut reply is kept as
// aborted, the turn continues there, each queued message is delivered once and answered, and
// the old session id leads to the new session.
func TestClusterConversationTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster's end-to-end test runs six processes and the model server")
	}
	gate := newTokenGate(t, llm.URL(t))
	c := newCluster(t)
	for _, s := range c.servers {
		c.startServer(s)
	}
	c.waitJetStream()
	// The same workspace and backend on every node: a conversation taken over goes on with
	// the options it was opened with.
	ws := t.TempDir()
	cfg := fmt.Sprintf("[backends.local]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"probe\"\ncontext_window = 4096\nmax_tokens = 256\n", gate.url()+"/v1")
	for _, name := range []string{"a", "b", "c"} {
		n := c.addNode(name, "--nats", c.urls(), "--node", name, "--nats-replicas", "3", "--node-lost", "3s")
		if err := os.WriteFile(filepath.Join(n.home, "config.toml"), []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		c.startNode(n)
		// An agent with no tools: the tiny model answers in text at once (tools/llm/README.md).
		n.ok(t, "agent", "add", "quiet", "--backend", "local", "--level", "yolo", "--description", "no tools", "--disable-tool",
			"bash,read_file,write_file,edit_file,copy_file,list_dir,glob,grep,sessions_spawn,sessions_list,sessions_history,sessions_send,nexus_status,nexus_cancel,nexus_destroy,agents_list")
	}
	a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The surviving nodes' goroutines of nexus's own packages: where a takeover stands.
		for _, n := range []*node{b, cn} {
			if n.p.exited() {
				continue
			}
			mark := n.p.out.Len()
			n.p.kill(t, syscall.SIGQUIT)
			t.Logf("node %s's goroutines of nexus's own packages at the failure:\n%s", n.name, ownStacks(n.p.out.String()[mark:], 30000))
		}
	})

	var opened struct {
		SessionID string `json:"sessionId"`
		Metadata  struct {
			ChatKey string `json:"chatKey"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(a.ok(t, "ai", "chat", "open", "--agent", "quiet", "--workspace", ws, "--temperature", "0")), &opened); err != nil {
		t.Fatal(err)
	}
	old, key := opened.SessionID, opened.Metadata.ChatKey

	// The first message's reply streams its first token, then the gate holds the rest: a is
	// killed mid-turn whatever the machine's speed.
	const story = "Write a long story about a lighthouse keeper"
	gate.arm(story)
	acked := []string{a.send(t, old, story, "")}
	seen := &aiReader{n: b, id: old}
	seen.waitFor(t, "the first ai-token of the turn, read on b", func(e aiEvent) bool { return e.Payload["type"] == abi.PayloadAIToken })
	// Two messages wait behind the running turn, one sent on a, one on b (forwarded to a).
	queued := []string{a.send(t, old, "first queued message", "followup"), b.send(t, old, "second queued message", "followup")}
	acked = append(acked, queued...)
	seen.more(t)
	tokens := 0
	for _, e := range seen.evs {
		if e.Payload["type"] == abi.PayloadAIToken {
			tokens++
		}
		if e.Payload["type"] == abi.PayloadAITurn && e.Payload["phase"] == abi.PhaseEnded {
			t.Fatalf("the turn ended before a was killed (the gate held %d replies): %v", gate.held.Load(), e.Payload)
		}
	}

	before, _ := gate.requests(0)
	killed := time.Now()
	a.p.kill(t, syscall.SIGKILL)
	gate.release()
	t.Logf("a killed -9 with its turn streaming (%d ai-token events read on b, the gate holding the reply) and %d messages acknowledged: %v", tokens, len(acked), acked)

	var listed session
	var found bool
	if !poll(func() bool {
		listed, found = find(b.list(t), old)
		return found && listed.Status == "error" && listed.Metadata.CloseReason == "node-lost"
	}) {
		t.Fatalf("b lists a's ai-chat as %+v (found %v) %s after a was killed, want error, node-lost", listed, found, testkit.Patience())
	}
	lost := seen.waitFor(t, "the node-lost close on a's ai-chat's log", func(e aiEvent) bool { return e.Type == abi.EventClose })
	if lost.Payload["reason"] != "node-lost" {
		t.Fatalf("a's ai-chat's log ends with the close %v, want reason node-lost", lost.Payload)
	}
	var moved string
	testkit.Eventually(t, "a's ai-chat names the session that took it over (movedTo)", func() bool {
		moved = b.sessionMeta(t, old)["movedTo"].(string)
		return moved != ""
	})
	owner := b
	if s, ok := find(b.list(t), moved); ok && s.Node == "c" {
		owner = cn
	} else if !ok || s.Node != "b" {
		t.Fatalf("the session a's conversation moved to, %s, is %+v (found %v): want one on b or c", moved, s, ok)
	}
	meta := owner.sessionMeta(t, moved)
	if meta["replaces"] != old || meta["chatKey"] != key {
		t.Fatalf("the new session %s on %s: replaces %v, chatKey %v; want %s, %s", moved, owner.name, meta["replaces"], meta["chatKey"], old, key)
	}

	// The new session runs the continued turn and the two queued messages, then idles with
	// an empty queue.
	next := &aiReader{n: owner, id: moved}
	next.waitFor(t, "the new session's three turns ended", func(aiEvent) bool {
		return len(next.turns(abi.PhaseEnded)) >= 3
	})
	testkit.Eventually(t, "the conversation's queue is empty on "+owner.name, func() bool {
		var q struct {
			Messages []json.RawMessage `json:"messages"`
		}
		return json.Unmarshal([]byte(owner.ok(t, "ai", "queue", "--session-id", moved, "--format", "json")), &q) == nil && len(q.Messages) == 0
	})
	first := next.evs[0]
	for _, e := range next.evs {
		if e.Payload["type"] == abi.PayloadAITurn && e.Payload["phase"] == abi.PhaseStarted {
			first = e
			break
		}
	}
	t.Logf("from the kill (--node-lost 3s, so a lease of 3s): a's session node-lost after %v, the new session %s on %s started the continued turn after %v (the events' times)",
		lost.Time.Sub(killed).Round(10*time.Millisecond), moved, owner.name, first.Time.Sub(killed).Round(10*time.Millisecond))
	for _, tr := range next.turns("") {
		t.Logf("the new session's turn: %v", tr)
	}

	// The conversation goes on as it was opened: every model call after the takeover asks
	// for the temperature the session was opened with.
	if _, temps := gate.requests(before); len(temps) == 0 || slices.ContainsFunc(temps, func(s string) bool { return s != "0" }) {
		t.Fatalf("the model calls after the takeover asked for temperatures %v; the session was opened with --temperature 0", temps)
	}

	// The transcript, as the new owner gives it.
	entries := owner.transcript(t, key)
	check := checkTakeover(t, entries, story, acked[0], queued)
	t.Logf("acknowledged: the message and %d queued ones (%d in all); found in the transcript on %s: %s\n%s", len(queued), len(acked), owner.name, check, dumpEntries(entries))

	// pi reads the rebuilt file with the context nexus builds from it on the new owner.
	t.Run("PiReadsTheRebuiltFile", func(t *testing.T) {
		nodeBin, err := exec.LookPath("node")
		if err != nil {
			testkit.SkipUnlessCI(t, "node is not installed: pi cannot read the transcript back")
		}
		repo, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		if !fileExists(filepath.Join(repo, "tools", "pi", "node_modules", "@mariozechner", "pi-coding-agent")) {
			testkit.SkipUnlessCI(t, "the pi coding agent is not installed: make pi-deps")
		}
		path, _ := meta["transcript"].(string)
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		cmd := exec.CommandContext(ctx, nodeBin, filepath.Join(repo, "tools", "pi", "context.mjs"), path) //nolint:gosec // the repository's script
		cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+t.TempDir())
		piOut, err := cmd.Output()
		if err != nil {
			t.Fatalf("pi's context of %s: %v", path, err)
		}
		var pi, nexus any
		if err := json.Unmarshal(piOut, &pi); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(owner.ok(t, "chat", "history", key)), &nexus); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(pi, nexus) {
			t.Fatalf("pi's context of the rebuilt %s differs from nexus chat history on %s:\npi:    %s\nnexus: %s", path, owner.name, piOut, owner.ok(t, "chat", "history", key))
		}
	})

	// The old id, used from c, leads to the new session, which answers.
	out := cn.ok(t, "ai", "message", "send", "--session-id", old, "one more")
	if !strings.Contains(out, "Hello from a tiny model") {
		t.Fatalf("nexus ai message send --session-id %s (a's, moved to %s) on c printed %q, want the model's reply", old, moved, out)
	}
	var es []tentry
	if !poll(func() bool {
		es = owner.transcript(t, key)
		at := -1
		for i, e := range es {
			if e.role() == "user" && strings.Contains(e.text(), "one more") {
				if at >= 0 {
					t.Fatalf("one more is in two user entries, %d and %d\n%s", at, i, dumpEntries(es))
				}
				at = i
			}
		}
		return at >= 0 && slices.ContainsFunc(es[at+1:], func(e tentry) bool { return e.role() == "assistant" && e.Message.StopReason == "stop" })
	}) {
		t.Fatalf("one more, sent from c with a's session id, is not in %s's transcript, answered\n%s", owner.name, dumpEntries(es))
	}
}

// dumpEntries is a transcript's entries, one a line, to read a failure by.
func dumpEntries(es []tentry) string {
	var b strings.Builder
	for i, e := range es {
		fmt.Fprintf(&b, "  %d %s %s%s ids=%v stop=%s err=%q text=%q\n", i, e.Type, e.role(), e.CustomType, e.ids(), e.Message.StopReason, e.Message.ErrorMessage, e.text())
	}
	return b.String()
}

// checkTakeover checks a transcript taken over: the first message once; after it the cut
// reply (aborted, with the restart's wording) and a reply of the continued turn; each queued
// message once as a user message, answered. It returns what it found.
func checkTakeover(t *testing.T, es []tentry, story, firstID string, queued []string) string {
	t.Helper()
	dump := func() string { return dumpEntries(es) }
	userAt := map[string][]int{} // message id → the user entries carrying it
	stories := 0
	for i, e := range es {
		if e.role() != "user" {
			continue
		}
		if strings.Contains(e.text(), story) {
			stories++
		}
		for _, id := range e.ids() {
			userAt[id] = append(userAt[id], i)
		}
	}
	if stories != 1 || len(userAt[firstID]) != 1 {
		t.Fatalf("the first message: %d user entries with its text, %d with its id %s; want 1\n%s", stories, len(userAt[firstID]), firstID, dump())
	}
	// After the first message: the cut reply, then the continued turn's reply, before any
	// other user message.
	aborted, continued := -1, -1
	for i := userAt[firstID][0] + 1; i < len(es) && es[i].role() != "user"; i++ {
		switch {
		case es[i].role() == "assistant" && es[i].Message.StopReason == "aborted":
			if !strings.Contains(es[i].Message.ErrorMessage, "was lost during this reply") || es[i].text() == "" {
				t.Fatalf("the cut reply (entry %d): error %q, text %q; want the restart's wording and what streamed\n%s", i, es[i].Message.ErrorMessage, es[i].text(), dump())
			}
			aborted = i
		case es[i].role() == "assistant" && es[i].Message.StopReason == "stop" && aborted >= 0:
			continued = i
		}
	}
	if aborted < 0 || continued < 0 {
		t.Fatalf("after the first message: the cut reply at %d, the continued turn's reply at %d; want both\n%s", aborted, continued, dump())
	}
	for _, id := range queued {
		at := userAt[id]
		if len(at) != 1 {
			t.Fatalf("queued message %s is in %d user entries, want 1\n%s", id, len(at), dump())
		}
		answered := false
		for i := at[0] + 1; i < len(es) && es[i].role() != "user"; i++ {
			if es[i].role() == "assistant" && es[i].Message.StopReason == "stop" && es[i].text() != "" {
				answered = true
			}
		}
		if !answered {
			t.Fatalf("queued message %s (entry %d) has no reply\n%s", id, at[0], dump())
		}
	}
	return fmt.Sprintf("the first message once (entry %d), the cut reply aborted (entry %d: %q), the continued reply (entry %d: %q), each of %d queued messages once and answered (entries %v, %v)",
		userAt[firstID][0], aborted, es[aborted].text(), continued, es[continued].text(), len(queued), userAt[queued[0]], userAt[queued[1]])
}

// send sends text to session id on n with --no-wait (mode: "" the conversation's) and returns
// the message's id: the message is acknowledged, stored in the cluster's queue.
func (n *node) send(t *testing.T, id, text, mode string) string {
	t.Helper()
	args := []string{"ai", "message", "send", "--session-id", id, "--no-wait"}
	if mode != "" {
		args = append(args, "--mode", mode)
	}
	var sent struct {
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal([]byte(n.ok(t, append(args, text)...)), &sent); err != nil || sent.MessageID == "" {
		t.Fatalf("node %s: send %q: %q, %v", n.name, text, sent.MessageID, err)
	}
	return sent.MessageID
}

// sessionMeta is session id's metadata as n gives it.
func (n *node) sessionMeta(t *testing.T, id string) map[string]any {
	t.Helper()
	var s struct {
		Metadata map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(n.ok(t, "session", "get", "--id", id, "--format", "json")), &s); err != nil {
		t.Fatalf("node %s: session get %s: %v", n.name, id, err)
	}
	if _, ok := s.Metadata["movedTo"].(string); !ok {
		s.Metadata["movedTo"] = ""
	}
	return s.Metadata
}

// tentry is a transcript entry as the test reads it.
type tentry struct {
	Type       string `json:"type"`
	CustomType string `json:"customType"`
	Message    struct {
		Role         string          `json:"role"`
		Content      json.RawMessage `json:"content"`
		StopReason   string          `json:"stopReason"`
		ErrorMessage string          `json:"errorMessage"`
	} `json:"message"`
	MessageIDs []string `json:"nexusMessageIds"`
}

func (e tentry) role() string {
	if e.Type != "message" {
		return ""
	}
	return e.Message.Role
}

func (e tentry) ids() []string { return e.MessageIDs }

// text is the entry's text content.
func (e tentry) text() string {
	var s string
	if json.Unmarshal(e.Message.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(e.Message.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// transcript is conversation key's transcript as n exports it (its raw jsonl).
func (n *node) transcript(t *testing.T, key string) []tentry {
	t.Helper()
	var es []tentry
	for line := range strings.Lines(n.ok(t, "chat", "export", key, "--format", "jsonl")) {
		var e tentry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("node %s: transcript line %q: %v", n.name, line, err)
		}
		es = append(es, e)
	}
	return es
}

// aiEvent is an ai-chat session's event as read through the CLI.
type aiEvent struct {
	Seq     uint64
	Time    time.Time
	Type    abi.EventType
	Payload map[string]any
}

// aiReader reads an ai-chat session's events from a node, each read after the last seq.
type aiReader struct {
	n   *node
	id  string
	evs []aiEvent
}

func (r *aiReader) more(t *testing.T) {
	t.Helper()
	var after uint64
	if len(r.evs) > 0 {
		after = r.evs[len(r.evs)-1].Seq
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	out, _, err := r.n.run(ctx, t, "session", "events", "--session-id", r.id, "--transport", "polling", "--after", strconv.FormatUint(after, 10))
	if err != nil {
		if strings.Contains(err.Error(), string(abi.CodeResourceUnavailable)) {
			return // the cluster's store not answering for now
		}
		t.Fatal(err)
	}
	for line := range strings.Lines(out) {
		var e abi.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("node %s: event %q: %v", r.n.name, line, err)
		}
		ev := aiEvent{Seq: e.Seq, Type: e.Event}
		ev.Time, _ = time.Parse(time.RFC3339Nano, e.Timestamp)
		_ = json.Unmarshal(e.Payload, &ev.Payload)
		r.evs = append(r.evs, ev)
	}
}

// waitFor reads until an event read satisfies ok, and returns the first that does.
func (r *aiReader) waitFor(t *testing.T, what string, ok func(aiEvent) bool) aiEvent {
	t.Helper()
	checked := 0
	testkit.Eventually(t, what, func() bool {
		r.more(t)
		for ; checked < len(r.evs); checked++ {
			if ok(r.evs[checked]) {
				return true
			}
		}
		return false
	})
	return r.evs[checked]
}

// turns are the session's ai-turn events of phase ("" any), as text.
func (r *aiReader) turns(phase string) []string {
	var out []string
	for _, e := range r.evs {
		if e.Payload["type"] == abi.PayloadAITurn && (phase == "" || e.Payload["phase"] == phase) {
			out = append(out, fmt.Sprintf("seq %d %s %v end=%v ids=%v reason=%v", e.Seq, e.Time.Format("15:04:05.000"), e.Payload["phase"], e.Payload["end"], e.Payload["messageIds"], e.Payload["reason"]))
		}
	}
	return out
}

// tokenGate is a proxy in front of the real model server that holds a reply: the first
// request whose body holds the armed text streams llama-server's answer up to its first token
// of text, and no further until released (or its client goes). The tiny model replies in a
// few milliseconds; the gate makes "killed mid-turn" the same on any machine. Every other
// request passes through as it streams.
type tokenGate struct {
	srv      *httptest.Server
	upstream string
	mu       sync.Mutex
	marker   string
	temps    []*float64 // each request's temperature, in order (nil: none asked)
	held     atomic.Int32
	released chan struct{}
	once     sync.Once
}

func newTokenGate(t *testing.T, upstream string) *tokenGate {
	t.Helper()
	g := &tokenGate{upstream: upstream, released: make(chan struct{})}
	g.srv = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(func() {
		g.release()
		g.srv.Close()
	})
	return g
}

func (g *tokenGate) url() string { return g.srv.URL }

// arm makes the next request holding text the one held.
func (g *tokenGate) arm(text string) {
	g.mu.Lock()
	g.marker = text
	g.mu.Unlock()
}

// requests is how many requests came, and their temperatures from the first'th on, as text.
func (g *tokenGate) requests(first int) (int, []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, tp := range g.temps[min(first, len(g.temps)):] {
		if tp == nil {
			out = append(out, "none")
		} else {
			out = append(out, strconv.FormatFloat(*tp, 'g', -1, 64))
		}
	}
	return len(g.temps), out
}

func (g *tokenGate) release() { g.once.Do(func() { close(g.released) }) }

func (g *tokenGate) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var sampling struct {
		Temperature *float64 `json:"temperature"`
	}
	_ = json.Unmarshal(body, &sampling)
	g.mu.Lock()
	hold := g.marker != "" && bytes.Contains(body, []byte(g.marker))
	if hold {
		g.marker = ""
	}
	g.temps = append(g.temps, sampling.Temperature)
	g.mu.Unlock()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, g.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	br := bufio.NewReader(resp.Body)
	text := false // the event being read carries text
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return
			}
		}
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			text = text || hasText(data)
		}
		if len(bytes.TrimSpace(line)) == 0 || err != nil {
			if fl != nil {
				fl.Flush()
			}
			if hold && text {
				// The first token of text has gone out: the rest waits.
				g.held.Add(1)
				select {
				case <-g.released:
				case <-r.Context().Done():
					return
				}
				hold = false
			}
			text = false
		}
		if err != nil {
			return
		}
	}
}

// hasText reports whether an event of a chat completion's stream carries text.
func hasText(data []byte) bool {
	var chunk struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	return json.Unmarshal(data, &chunk) == nil && len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != ""
}
