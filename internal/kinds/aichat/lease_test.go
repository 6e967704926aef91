package aichat_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/live"
)

// nodes are two envs as two nodes of a cluster: each its own state directory and registry,
// one model, and the cluster's transcript replica and leases shared (in memory).
func nodes(t *testing.T, reply func(chatRequest, *sse), clock func() time.Time) (a, b *env, table *conversation.LeaseTable) {
	t.Helper()
	rep := conversation.NewMemoryReplica()
	table = conversation.NewLeaseTable(time.Minute, clock)
	a = newEnv(t, reply).withBroker(t)
	b = newEnv(t, nil).withBroker(t)
	b.m = a.m
	for name, e := range map[string]*env{"a": a, "b": b} {
		e.chats.UseReplica(rep)
		e.leases, e.node = table.Node(name), name
	}
	return a, b, table
}

// TestConversationHasOneOwner: a conversation open on node a cannot be opened on node b
// (RESOURCE_UNAVAILABLE naming a), from parallel callers too; once a's session closes, b opens
// it and goes on from a's transcript (the model is sent what a's turn said), and a is then
// refused, naming b.
func TestConversationHasOneOwner(t *testing.T) {
	a, b, _ := nodes(t, echo, nil)
	ra, rb := a.gateway(t), b.gateway(t)
	const key = "agent:main:owned"
	s := a.open(t, ra, key, "yolo")
	w := &watcher{r: ra, id: s.SessionID}
	send(t, ra, s.SessionID, "hello from a")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("a's turn: %+v", end)
	}
	opts := []byte(`{"backend":"fake","level":"yolo","workspace":"` + b.ws + `"}`)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = rb.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if abi.CodeOf(err) != abi.CodeResourceUnavailable || !strings.Contains(err.Error(), "node a") || !errors.Is(err, conversation.ErrLeaseHeld) {
			t.Fatalf("b opens a's conversation: %v", err)
		}
	}
	if _, err := ra.Close(context.Background(), s.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	sb := b.open(t, rb, key, "yolo")
	wb := &watcher{r: rb, id: sb.SessionID}
	send(t, rb, sb.SessionID, "hello from b")
	if end := wb.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("b's turn: %+v", end)
	}
	a.m.mu.Lock()
	last := a.m.requests[len(a.m.requests)-1]
	a.m.mu.Unlock()
	var said []string
	for _, m := range last.Messages {
		said = append(said, m.text())
	}
	if got := strings.Join(said, "|"); !strings.Contains(got, "hello from a") || !strings.Contains(got, "hello from b") {
		t.Fatalf("b's request to the model: %s", got)
	}
	if sh, err := b.chats.Show(context.Background(), key); err != nil || sh.Entry == nil || sh.Entry.SessionID == "" {
		t.Fatalf("b's conversation: %+v %v", sh, err)
	}
	_, err := ra.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
	if abi.CodeOf(err) != abi.CodeResourceUnavailable || !strings.Contains(err.Error(), "node b") {
		t.Fatalf("a opens b's conversation: %v", err)
	}
}

// TestConversationTakenOver: node a's turn hangs mid-reply and a's lease runs out (a stops
// renewing, as a node that was killed); node b takes the conversation over: b continues the
// turn from the user's message (the model is asked again), and a's turn can write nothing
// more (its reply is refused: the lease is lost).
func TestConversationTakenOver(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	hung := make(chan struct{})
	var once sync.Once
	a, b, _ := nodes(t, func(req chatRequest, w *sse) {
		if req.lastUser() == "long story" {
			first := false
			once.Do(func() { first = true })
			if first {
				close(hung)
				w.hang("Once")
				return
			}
		}
		echo(req, w)
	}, clock)
	ra, rb := a.gateway(t), b.gateway(t)
	const key = "agent:main:takeover"
	s := a.open(t, ra, key, "yolo")
	w := &watcher{r: ra, id: s.SessionID}
	send(t, ra, s.SessionID, "long story")
	<-hung
	w.until(t, "the first token", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.AIToken)
		return ok && p.Content == "Once"
	})
	lost, err := ra.Get(context.Background(), s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	lost.Node = "a" // the registries here are no cluster's; their kinds are its nodes
	mu.Lock()
	now = now.Add(2 * time.Minute) // a's lease ran out: a renewed nothing (its renewer's period is 20 s of real time)
	mu.Unlock()
	b.k.TakeOver(context.Background(), lost)
	// b's new session on the key continues the turn: the model is asked again, and answers.
	ss, err := rb.List(context.Background(), false)
	if err != nil || len(ss) != 1 {
		t.Fatalf("b's sessions after the takeover: %+v %v", ss, err)
	}
	if ss[0].Metadata["replaces"] != s.SessionID {
		t.Errorf("b's session replaces %v, want %s", ss[0].Metadata["replaces"], s.SessionID)
	}
	wb := &watcher{r: rb, id: ss[0].SessionID}
	if end := wb.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("the continued turn on b: %+v %s", end, describe(wb.seen))
	}
	// a's turn, interrupted now, cannot record its cut reply: the lease is b's.
	if _, err := ra.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnError || !strings.Contains(end.Reason, "lease") {
		t.Fatalf("a's turn after the takeover: %+v", end)
	}
	joined := strings.Join(b.rawHistory(t, key), "\n")
	if strings.Count(joined, `"text":"long story"`) != 1 || !strings.Contains(joined, `"text":"echo: long story"`) {
		t.Fatalf("the conversation on b:\n%s", joined)
	}
	// The run a's loss ended says so (not a gateway restart).
	sh, err := b.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(sh.File)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(file), "node a was lost: the turn was interrupted and taken over") || strings.Contains(string(file), "gateway restarted") {
		t.Fatalf("the run's end on b:\n%s", file)
	}
}

// TestLeaseRunsOutAndComesBack: a node whose lease ran out (its renewals failed) writes
// nothing; when no other node took the conversation, the node's next start on it renews the
// lease from its own record, and the sessions already there write again.
func TestLeaseRunsOutAndComesBack(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a, _, _ := nodes(t, echo, clock)
	ra := a.gateway(t)
	const key = "agent:main:comes-back"
	s := a.open(t, ra, key, "yolo")
	w := &watcher{r: ra, id: s.SessionID}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	send(t, ra, s.SessionID, "while it ran out")
	if end := w.turnEnded(t); end.End != abi.TurnError || !strings.Contains(end.Reason, "lease") {
		t.Fatalf("a turn with the lease run out: %+v", end)
	}
	// A second session renews the lease; closed again, it leaves the first one holding it
	// (the newest session on a key delivers its queue, so the first delivers only then).
	s2 := a.open(t, ra, key, "yolo")
	if _, err := ra.Close(context.Background(), s2.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	send(t, ra, s.SessionID, "after")
	for {
		end := w.turnEnded(t)
		if end.End == abi.TurnCompleted {
			break
		}
		if !strings.Contains(end.Reason, "lease") {
			t.Fatalf("a turn once the lease was renewed: %+v %s", end, describe(w.seen))
		}
		// The message refused before is delivered again first; its turn may still have
		// been refused if it ran before the renewal.
	}
}
