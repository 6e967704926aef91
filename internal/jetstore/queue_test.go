package jetstore_test

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/broker/brokertest"
	"github.com/nexus-run/nexus/internal/jetstore"
)

func (c *natsCluster) queues(t *testing.T, nc *nats.Conn, cluster string, replicas int) *jetstore.Queues {
	t.Helper()
	q, err := jetstore.OpenQueues(testCtx(t), nc, jetstore.QueueOptions{Cluster: cluster, Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// TestQueueContract: the cluster's queues keep the queues' contract at R1 and R3 on three
// servers; every instance is a node of its own (its own connection).
func TestQueueContract(t *testing.T) {
	c := startCluster(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			brokertest.Run(t, func(t *testing.T) func(t *testing.T) broker.Queues {
				name := clusterName()
				return func(t *testing.T) broker.Queues { return c.queues(t, c.connect(t), name, replicas) }
			})
		})
	}
}

// TestQueueNodeDies: a message node A acknowledged is queued on node B; once A is gone
// without a clean close (its connection dropped), B still has it, and of B and C delivering it
// at once exactly one does; neither has it queued after.
func TestQueueNodeDies(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ncA := c.connect(t)
	a := c.queues(t, ncA, name, 3)
	b := c.queues(t, c.connect(t), name, 3)
	cc := c.queues(t, c.connect(t), name, 3)
	ctx := testCtx(t)
	var ids []string
	for i := range 3 {
		m, err := a.Enqueue(ctx, "agent:main:main", broker.Followup, fmt.Sprint("m", i), "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if fresh, err := a.Announce(ctx, "announce_r1", "agent:main:main", "done", "subagent:r1", "r1"); err != nil || !fresh {
		t.Fatalf("announce: %v %v", fresh, err)
	}
	ids = append(ids, "announce_r1")
	if q, err := b.Queued(ctx, "agent:main:main"); err != nil || len(q) != 4 {
		t.Fatalf("B before: %d %v", len(q), err)
	}
	ncA.Close()
	if _, err := a.Queued(ctx, "agent:main:main"); err == nil {
		t.Fatal("A answers with its connection closed")
	}
	if keys, err := b.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "agent:main:main" {
		t.Fatalf("B keys: %v %v", keys, err)
	}
	q, err := b.Queued(ctx, "agent:main:main")
	if err != nil || len(q) != 4 {
		t.Fatalf("B after A died: %d %v", len(q), err)
	}
	if fresh, err := cc.Announce(ctx, "announce_r1", "agent:main:main", "again", "", "r1"); err != nil || fresh {
		t.Fatalf("announce again on C: %v %v", fresh, err)
	}
	won := make([][]string, 2)
	var wg sync.WaitGroup
	for i, n := range []*jetstore.Queues{b, cc} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := n.Deliver(ctx, ids, fmt.Sprint("entry-", i))
			if err != nil {
				t.Error(err)
			}
			won[i] = w
		}()
	}
	wg.Wait()
	if len(won[0])+len(won[1]) != len(ids) {
		t.Fatalf("delivered %v and %v of %v", won[0], won[1], ids)
	}
	for _, n := range []*jetstore.Queues{b, cc} {
		if q, err := n.Queued(ctx, "agent:main:main"); err != nil || len(q) != 0 {
			t.Fatalf("queued after delivery: %d %v", len(q), err)
		}
		if keys, err := n.Keys(ctx); err != nil || len(keys) != 0 {
			t.Fatalf("keys after delivery: %v %v", keys, err)
		}
	}
}

// TestQueueServerLost: at R3, the server leading the queue bucket goes while a node enqueues;
// every message acknowledged before, during and after is queued for another node, once.
func TestQueueServerLost(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	a := c.queues(t, c.connect(t), name, 3)
	ctx := testCtx(t)
	acked := map[string]string{}
	failed := 0
	enqueue := func(i int) {
		// A store that fails (a leader moving) may or may not be kept: it is not counted.
		m, err := a.Enqueue(ctx, "k", broker.Followup, fmt.Sprint("m", i), "")
		if err != nil {
			if failed++; failed <= 5 {
				t.Logf("enqueue %d: %v", i, err)
			}
			return
		}
		acked[m.ID] = m.Content
	}
	for i := range 50 {
		enqueue(i)
	}
	leader, done := c.shutDownLeader(t, ctx, "KV_"+jetstore.QueueBucket(name))
	for i := 50; i < 100; i++ {
		enqueue(i)
	}
	<-done
	before := len(acked)
	for i := 100; len(acked) < before+20 && i < 1000; i++ {
		enqueue(i)
	}
	if len(acked) < before+20 {
		t.Fatalf("only %d enqueued after the loss (%d failed)", len(acked)-before, failed)
	}
	t.Logf("%d acknowledged, %d failed across the loss of %s", len(acked), failed, leader)
	b := c.queues(t, c.connect(t), name, 3)
	q, err := b.Queued(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range q {
		if _, dup := got[m.ID]; dup {
			t.Fatalf("%s queued twice", m.ID)
		}
		got[m.ID] = m.Content
	}
	for id, text := range acked {
		if got[id] != text {
			t.Errorf("acknowledged %s %q reads as %q", id, text, got[id])
		}
	}
	won, err := b.Deliver(ctx, slices.Collect(maps.Keys(acked)), "e")
	if err != nil || len(won) != len(acked) {
		t.Fatalf("delivered %d of %d: %v", len(won), len(acked), err)
	}
}

// TestQueueInterruptNodeDies: an interrupt stored by a node that died before it cleared the
// queue clears it all the same: another node reads the messages before it as cleared (and
// writes them so), and they are never delivered.
func TestQueueInterruptNodeDies(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	a := c.queues(t, c.connect(t), name, 3)
	b := c.queues(t, c.connect(t), name, 3)
	ctx := testCtx(t)
	var before []string
	for i := range 3 {
		m, err := a.Enqueue(ctx, "k", broker.Followup, fmt.Sprint("m", i), "")
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, m.ID)
	}
	a.StopAfterStore()
	in, err := a.Enqueue(ctx, "k", broker.Interrupt, "stop", "")
	if err != nil || len(in.Cleared) != 0 {
		t.Fatalf("interrupt: %+v %v", in, err)
	}
	after, err := b.Enqueue(ctx, "k", broker.Followup, "after", "")
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.Queued(ctx, "k")
	if err != nil || len(q) != 2 || q[0].ID != in.ID || q[1].ID != after.ID {
		t.Fatalf("queued on B: %+v %v", q, err)
	}
	got, err := a.Get(ctx, before) // written cleared, read from either node
	if err != nil || len(got) != 3 {
		t.Fatalf("get: %+v %v", got, err)
	}
	for _, m := range got {
		if m.State != broker.StateCleared || m.Reason != broker.ClearedBy(in.ID) {
			t.Errorf("%s: %s %q", m.Content, m.State, m.Reason)
		}
	}
	if won, err := b.Deliver(ctx, before, "e"); err != nil || len(won) != 0 {
		t.Fatalf("delivered cleared messages: %v %v", won, err)
	}
	if keys, err := b.Keys(ctx); err != nil || len(keys) != 1 {
		t.Fatalf("keys: %v %v", keys, err)
	}
}

// TestQueueReadYourWritesAcrossNodes: a message node A's enqueue acknowledged is in node B's
// Queued (and Keys) read right after, while other enqueuers write to A and C at once; once
// delivered, neither node's local copy keeps it.
func TestQueueReadYourWritesAcrossNodes(t *testing.T) {
	c := startCluster(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			name := clusterName()
			a := c.queues(t, c.connect(t), name, replicas)
			b := c.queues(t, c.connect(t), name, replicas)
			cc := c.queues(t, c.connect(t), name, replicas)
			ctx := testCtx(t)
			const writers, each = 4, 15
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					node := []*jetstore.Queues{a, cc}[w%2]
					key := fmt.Sprint("agent:w", w)
					for i := range each {
						m, err := node.Enqueue(ctx, key, broker.Followup, fmt.Sprint("m", i), "")
						if err != nil {
							t.Error(err)
							return
						}
						q, err := b.Queued(ctx, key)
						if err != nil {
							t.Error(err)
							return
						}
						if len(q) != i+1 || q[i].ID != m.ID {
							t.Errorf("writer %d: B read %d queued after enqueue %d returned, last %v", w, len(q), i, q)
							return
						}
						keys, err := b.Keys(ctx)
						if err != nil || !slices.Contains(keys, key) {
							t.Errorf("writer %d: B's keys %v lack %s: %v", w, keys, key, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if n, k := b.Indexed(); n != writers*each || k != writers {
				t.Fatalf("B's copy: %d messages of %d conversations, want %d of %d", n, k, writers*each, writers)
			}
			for w := range writers {
				key := fmt.Sprint("agent:w", w)
				q, err := a.Queued(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, m := range q {
					ids = append(ids, m.ID)
				}
				if won, err := b.Deliver(ctx, ids, "e"); err != nil || len(won) != len(ids) {
					t.Fatalf("deliver %s: %d of %d: %v", key, len(won), len(ids), err)
				}
			}
			for _, n := range []*jetstore.Queues{a, b, cc} {
				if keys, err := n.Keys(ctx); err != nil || len(keys) != 0 {
					t.Fatalf("keys after delivery: %v %v", keys, err)
				}
				if m, k := n.Indexed(); m != 0 || k != 0 {
					t.Fatalf("a copy holds %d messages of %d conversations after every one was delivered", m, k)
				}
			}
			if h, err := a.History(ctx, "agent:w0", 100); err != nil || len(h) != each || h[0].State != broker.StateDelivered {
				t.Fatalf("history: %d %v", len(h), err)
			}
		})
	}
}
