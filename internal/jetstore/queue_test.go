package jetstore_test

import (
	"fmt"
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
