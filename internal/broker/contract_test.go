package broker_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/broker/brokertest"
)

// TestContract: the SQLite store keeps the queues' contract; two instances are two stores on
// one database file (two processes).
func TestContract(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) func(t *testing.T) broker.Queues {
		path := filepath.Join(t.TempDir(), "broker", "queues.db")
		return func(t *testing.T) broker.Queues {
			s, err := broker.Open(context.Background(), path, broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	})
}

// TestScopedContract: a scoped store keeps the contract.
func TestScopedContract(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) func(t *testing.T) broker.Queues {
		path := filepath.Join(t.TempDir(), "broker", "queues.db")
		return func(t *testing.T) broker.Queues {
			s, err := broker.Open(context.Background(), path, broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return broker.Scoped(s, "n1")
		}
	})
}

// TestScopesApart: two scopes on one store (two nodes) neither see nor list each other's
// conversations of the same name; ids stay once for both; the unscoped store reads a scope's
// messages under ScopedKey (a node taking a conversation over).
func TestScopesApart(t *testing.T) {
	s, err := broker.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	a, b := broker.Scoped(s, "a"), broker.Scoped(s, "b")
	m, err := a.Enqueue(ctx, "agent:main:main", broker.Followup, "to a", "")
	if err != nil || m.Key != "agent:main:main" {
		t.Fatalf("enqueue on a: %+v %v", m, err)
	}
	if fresh, err := a.EnqueueOnce(ctx, "fire-1", "agent:main:main", broker.Followup, "once", ""); err != nil || !fresh {
		t.Fatalf("once on a: %v %v", fresh, err)
	}
	if fresh, err := b.EnqueueOnce(ctx, "fire-1", "agent:main:main", broker.Followup, "once", ""); err != nil || fresh {
		t.Fatalf("once on b after a: %v %v", fresh, err)
	}
	if q, err := b.Queued(ctx, "agent:main:main"); err != nil || len(q) != 0 {
		t.Fatalf("b sees a's messages: %+v %v", q, err)
	}
	if keys, err := b.Keys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("b lists a's keys: %v %v", keys, err)
	}
	if keys, err := a.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "agent:main:main" {
		t.Fatalf("a's keys: %v %v", keys, err)
	}
	q, err := s.Queued(ctx, broker.ScopedKey("a", "agent:main:main"))
	if err != nil || len(q) != 2 || q[0].ID != m.ID {
		t.Fatalf("a's scope read unscoped: %+v %v", q, err)
	}
	if got, err := a.Get(ctx, []string{m.ID}); err != nil || len(got) != 1 || got[0].Key != "agent:main:main" {
		t.Fatalf("get on a: %+v %v", got, err)
	}
}
