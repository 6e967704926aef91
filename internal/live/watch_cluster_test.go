package live_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestWatchSessionsCluster: two nodes on one store; b's watch of the sessions (the console's
// sessions view, /v1/sessions/watch) lists a's session with its node, as b's List does, and
// wakes when a makes or closes one, not only when b's own sessions change.
func TestWatchSessionsCluster(t *testing.T) {
	ctx := context.Background()
	st := live.NewMemoryStore()
	regs := map[string]*live.Registry{}
	for _, node := range []string{"a", "b"} {
		r, err := live.New(ctx, live.Config{Node: node, Store: st, IdleTimeout: -1}, livetest.NewFakeKind(abi.TypeTerminal, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		regs[node] = r
	}
	a, b := regs["a"], regs["b"]
	first, err := a.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := b.WatchSessions(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := findSession(snap.Sessions, first.SessionID); !ok || s.Node != "a" {
		t.Fatalf("b's watch lists a's session as %+v (found %v) in %d sessions, want it on node a", s, ok, len(snap.Sessions))
	}

	// A wait on b ends when a makes a session, and lists it.
	type answer struct {
		snap live.Snapshot
		err  error
	}
	watch := func(after uint64) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			s, err := b.WatchSessions(ctx, after, testkit.Patience())
			ch <- answer{s, err}
		}()
		return ch
	}
	woken := watch(snap.Version)
	second, err := a.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	var got answer
	testkit.Eventually(t, "b's watch lists a's second session", func() bool {
		select {
		case got = <-woken:
		default:
			return false
		}
		if got.err != nil {
			t.Fatal(got.err)
		}
		if _, ok := findSession(got.snap.Sessions, second.SessionID); ok {
			return true
		}
		woken = watch(got.snap.Version) // woken by a write before it: wait on
		return false
	})
	if got.snap.Version == snap.Version {
		t.Fatalf("b's watch answered a change with the version it was given, %d", snap.Version)
	}

	// Closed on a: b's watch sees it closed.
	woken = watch(got.snap.Version)
	if _, err := a.Close(ctx, second.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "b's watch lists a's second session closed", func() bool {
		select {
		case got = <-woken:
		default:
			return false
		}
		if got.err != nil {
			t.Fatal(got.err)
		}
		if s, _ := findSession(got.snap.Sessions, second.SessionID); s.Status == abi.StatusClosed {
			return true
		}
		woken = watch(got.snap.Version)
		return false
	})
}

func findSession(ss []abi.Session, id string) (abi.Session, bool) {
	for _, s := range ss {
		if s.SessionID == id {
			return s, true
		}
	}
	return abi.Session{}, false
}

// failingStore's Watch fails while down is set, as a cluster's store without a leader does.
type failingStore struct {
	*live.MemoryStore
	down atomic.Bool
}

func (s *failingStore) Watch(ctx context.Context, after uint64) (live.Records, error) {
	if s.down.Load() {
		return live.Records{}, errors.New("no leader for now")
	}
	return s.MemoryStore.Watch(ctx, after)
}

// TestWatchSessionsClusterStoreDown: a watch that waits outlives the cluster's store not
// answering (a meta-chat's watcher ends at its first error, for good): its wait's end is
// answered as no change, and once the store is back a change of another node wakes it.
func TestWatchSessionsClusterStoreDown(t *testing.T) {
	ctx := context.Background()
	st := &failingStore{MemoryStore: live.NewMemoryStore()}
	regs := map[string]*live.Registry{}
	for _, node := range []string{"a", "b"} {
		r, err := live.New(ctx, live.Config{Node: node, Store: st, IdleTimeout: -1}, livetest.NewFakeKind(abi.TypeTerminal, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		regs[node] = r
	}
	snap, err := regs["b"].WatchSessions(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	if _, err := regs["b"].WatchSessions(ctx, 0, 0); err == nil {
		t.Fatal("a first look with the store down answered no error")
	}
	// The wait's length is what is tested here: the store stays down through it.
	got, err := regs["b"].WatchSessions(ctx, snap.Version, 50*time.Millisecond)
	if err != nil || got.Version != snap.Version {
		t.Fatalf("a wait with the store down: version %d, %v; want %d (no change), no error", got.Version, err, snap.Version)
	}
	done := make(chan live.Snapshot, 1)
	go func() {
		s, err := regs["b"].WatchSessions(ctx, snap.Version, testkit.Patience())
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	st.down.Store(false)
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	var woken live.Snapshot
	testkit.Eventually(t, "b's watch wakes once the store is back", func() bool {
		select {
		case woken = <-done:
			return true
		default:
			return false
		}
	})
	if _, ok := findSession(woken.Sessions, s.SessionID); !ok {
		t.Fatalf("b's watch woke with version %d and without a's session", woken.Version)
	}
}
