package jetstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/jetstore"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestLease: at R1 and R3, three nodes acquiring one conversation's lease at once (three
// callers each): exactly one wins, the others are told who holds it. The holder renews;
// once the lease expires (the clock set by the test) the holder stops writing, another node
// takes it over, and the old holder's renewal fails for good. A released lease is free.
func TestLease(t *testing.T) {
	c := startCluster(t)
	const ttl = 10 * time.Second
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			ctx := testCtx(t)
			clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
			cluster := clusterName()
			nodes := map[string]*jetstore.Leases{}
			for _, n := range []string{"a", "b", "c"} {
				l, err := jetstore.OpenLeases(ctx, c.connect(t), jetstore.LeaseOptions{Cluster: cluster, Replicas: replicas, Node: n, TTL: ttl, Now: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				nodes[n] = l
			}
			key := "agent:main:main"

			type won struct {
				node  string
				lease *jetstore.Lease
			}
			var (
				mu   sync.Mutex
				wins []won
				wg   sync.WaitGroup
			)
			for n, l := range nodes {
				for range 3 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						le, err := l.Acquire(ctx, key)
						mu.Lock()
						defer mu.Unlock()
						switch {
						case err == nil:
							wins = append(wins, won{n, le})
						case errors.Is(err, jetstore.ErrLeaseHeld) && abi.CodeOf(err) == abi.CodeResourceUnavailable:
						default:
							t.Errorf("node %s: %v", n, err)
						}
					}()
				}
			}
			wg.Wait()
			// A node's own lease may be taken again by that node (a restart): the winners
			// are all of one node, and only the last of them still holds it.
			if len(wins) == 0 {
				t.Fatal("nobody acquired the lease")
			}
			owner := wins[0].node
			var holders []*jetstore.Lease
			for _, w := range wins {
				if w.node != owner {
					t.Fatalf("nodes %s and %s both acquired the lease", owner, w.node)
				}
				if w.lease.Renew(ctx) == nil {
					holders = append(holders, w.lease)
				}
			}
			if len(holders) != 1 {
				t.Fatalf("%d leases of node %s renew, want 1", len(holders), owner)
			}
			holder := holders[0]
			other := "a"
			if owner == "a" {
				other = "b"
			}

			// Renewed within the TTL, the lease stays the owner's.
			for range 3 {
				clock.Add(ttl / 2)
				if err := holder.Renew(ctx); err != nil {
					t.Fatal(err)
				}
				if err := holder.Valid(); err != nil {
					t.Fatal(err)
				}
				if _, err := nodes[other].Acquire(ctx, key); !errors.Is(err, jetstore.ErrLeaseHeld) {
					t.Fatalf("acquire of a renewed lease: %v", err)
				}
			}

			// Not renewed: the holder stops, another takes it, the holder's renewal fails.
			clock.Add(ttl)
			if err := holder.Valid(); !errors.Is(err, conversation.ErrLeaseLost) {
				t.Fatalf("expired lease valid: %v", err)
			}
			taken, err := nodes[other].Acquire(ctx, key)
			if err != nil {
				t.Fatalf("acquire of an expired lease: %v", err)
			}
			if err := holder.Renew(ctx); !errors.Is(err, conversation.ErrLeaseLost) {
				t.Fatalf("renew of a lease taken over: %v", err)
			}
			if err := holder.Valid(); !errors.Is(err, conversation.ErrLeaseLost) {
				t.Fatalf("a lease taken over is valid: %v", err)
			}
			if err := taken.Valid(); err != nil {
				t.Fatal(err)
			}

			// Released, it is free at once.
			if err := taken.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := taken.Valid(); !errors.Is(err, conversation.ErrLeaseLost) {
				t.Fatalf("a released lease is valid: %v", err)
			}
			if _, err := nodes[owner].Acquire(ctx, key); err != nil {
				t.Fatalf("acquire of a released lease: %v", err)
			}
		})
	}
}

// TestLeaseStopsHeld: a node's Held of a conversation whose lease another node took over
// writes nothing more: its appends fail with ErrLeaseLost and the replica holds only what
// it wrote before.
func TestLeaseStopsHeld(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	cluster := clusterName()
	clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	la, err := jetstore.OpenLeases(ctx, c.connect(t), jetstore.LeaseOptions{Cluster: cluster, Replicas: 3, Node: "a", TTL: time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := jetstore.OpenLeases(ctx, c.connect(t), jetstore.LeaseOptions{Cluster: cluster, Replicas: 3, Node: "b", TTL: time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	rep := c.transcripts(t, c.connect(t), cluster, 3)
	key := "agent:main:main"
	lease, err := la.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h, err := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep}).Hold(ctx, key, conversation.HoldOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if _, err := h.AppendMessage(map[string]any{"role": "user", "content": "one", "timestamp": 1}, nil); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Second)
	if _, err := lb.Acquire(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(map[string]any{"role": "user", "content": "two", "timestamp": 2}, nil); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Fatalf("append after the lease was taken: %v", err)
	}
	if n, _, err := rep.Tail(ctx, h.SessionID); err != nil || n != 2 {
		t.Fatalf("replica: %d lines, %v; want the header and one message", n, err)
	}
}
