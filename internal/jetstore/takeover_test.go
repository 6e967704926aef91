package jetstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// contextOf is the model's context at the leaf of the transcript at path, as JSON.
func contextOf(t *testing.T, path string) []byte {
	t.Helper()
	f, err := transcript.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	cx, err := f.BuildContext("")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cx)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTakeover: the protocol of a conversation's takeover at R3, each node with a state
// directory of its own. Node a holds the lease, names its transcript in it and writes a
// conversation (tool calls, a compaction) through its Held; two messages are acknowledged in
// a's queue and not delivered; a stops renewing (as when killed). Once the lease expired,
// node b acquires it, learns a's node and transcript from it, holds the conversation under
// that session id — the Hold rebuilds the file, with the same context as a's — delivers a's
// queued messages into it, once, and writes on; a's Held writes nothing more.
func TestTakeover(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cluster := clusterName()
	clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	const ttl = 10 * time.Second
	type node struct {
		leases *jetstore.Leases
		chats  *conversation.Service
		queues *jetstore.Queues
	}
	open := func(name string) node {
		nc := c.connect(t)
		l, err := jetstore.OpenLeases(ctx, nc, jetstore.LeaseOptions{Cluster: cluster, Replicas: 3, Node: name, TTL: ttl, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		return node{leases: l, queues: c.queues(t, nc, cluster, 3),
			chats: conversation.New(conversation.Options{Dir: t.TempDir(), Replica: c.transcripts(t, nc, cluster, 3)})}
	}
	a, b := open("a"), open("b")
	key := "agent:main:main"

	la, err := a.leases.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ha, err := a.chats.Hold(ctx, key, conversation.HoldOptions{Cwd: "/w", Lease: la})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ha.Close() }()
	if err := la.SetSession(ctx, ha.SessionID); err != nil {
		t.Fatal(err)
	}
	text := func(role, s string) map[string]any {
		return map[string]any{"role": role, "timestamp": 1, "content": []map[string]any{{"type": "text", "text": s}}}
	}
	call := map[string]any{"role": "assistant", "stopReason": "toolUse", "timestamp": 2,
		"content": []map[string]any{{"type": "toolCall", "id": "c1", "name": "bash", "arguments": map[string]any{"cmd": "ls"}}}}
	res := map[string]any{"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "isError": false, "timestamp": 3,
		"content": []map[string]any{{"type": "text", "text": "a.go"}}}
	for i, m := range []any{text("user", "list"), call, res, text("assistant", "a.go is there"), text("user", "and then?")} {
		if _, err := ha.AppendMessage(m, nil); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if _, err := ha.Compact(ctx, "listed a.go", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ha.AppendMessage(text("assistant", "then nothing"), nil); err != nil {
		t.Fatal(err)
	}
	qa := a.queues
	var queued []string
	for _, s := range []string{"first while a dies", "second"} {
		m, err := qa.Enqueue(ctx, key, broker.Followup, s, "")
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, m.ID)
	}
	wantContext := contextOf(t, ha.Path())

	// a stops renewing; before the lease's end b is refused.
	if _, err := b.leases.Acquire(ctx, key); !errors.Is(err, jetstore.ErrLeaseHeld) {
		t.Fatalf("acquire before the end of a's lease: %v", err)
	}
	clock.Add(ttl + time.Second)
	lb, err := b.leases.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	prev := lb.Previous()
	if prev.Node != "a" || prev.Session != ha.SessionID {
		t.Fatalf("previous holder %+v, want a with %s", prev, ha.SessionID)
	}
	hb, err := b.chats.Hold(ctx, key, conversation.HoldOptions{Lease: lb, Fields: map[string]any{"sessionId": prev.Session}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hb.Close() }()
	if hb.SessionID != ha.SessionID || hb.Path() == ha.Path() {
		t.Fatalf("b holds %s at %s, a %s at %s", hb.SessionID, hb.Path(), ha.SessionID, ha.Path())
	}
	if got := contextOf(t, hb.Path()); !bytes.Equal(got, wantContext) {
		t.Fatalf("context on b:\n%s\nwant a's:\n%s", got, wantContext)
	}

	// a's undelivered messages, delivered by b into the conversation, once.
	msgs, err := b.queues.Queued(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != len(queued) {
		t.Fatalf("b finds %d of a's queued messages, want %d", len(msgs), len(queued))
	}
	for i, m := range msgs {
		if m.ID != queued[i] {
			t.Fatalf("message %d: %s, want %s", i, m.ID, queued[i])
		}
		id, err := hb.AppendMessage(text("user", m.Content), map[string]any{"nexus": map[string]any{"messageId": m.ID}})
		if err != nil {
			t.Fatal(err)
		}
		if done, err := b.queues.Deliver(ctx, []string{m.ID}, id); err != nil || len(done) != 1 {
			t.Fatalf("deliver %s: %v %v", m.ID, done, err)
		}
	}
	if left, err := qa.Queued(ctx, key); err != nil || len(left) != 0 {
		t.Fatalf("a's queue after the takeover: %d left, %v", len(left), err)
	}
	if _, err := hb.AppendMessage(text("assistant", "taken over"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ha.AppendMessage(text("user", "a is back"), nil); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Fatalf("a's append after the takeover: %v", err)
	}
	if err := la.Renew(ctx); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Fatalf("a's renewal after the takeover: %v", err)
	}
	if err := lb.Renew(ctx); err != nil || lb.Session() != ha.SessionID {
		t.Fatalf("b's renewal: %v, session %q", err, lb.Session())
	}
}
