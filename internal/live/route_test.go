package live_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
)

// inProcess is a Router that calls the owner's Local directly, counting the calls.
type inProcess struct {
	nodes map[string]live.Local
	calls atomic.Int64
}

func (p *inProcess) Send(ctx context.Context, node, id string, req live.SendRequest) (live.SendResult, error) {
	p.calls.Add(1)
	return p.nodes[node].Send(ctx, id, req)
}

func (p *inProcess) Control(ctx context.Context, node, id string, req abi.ControlRequest) (*abi.ControlData, error) {
	p.calls.Add(1)
	return p.nodes[node].Control(ctx, id, req)
}

func (p *inProcess) Run(ctx context.Context, node, id string, req abi.RunRequest) (any, error) {
	p.calls.Add(1)
	return p.nodes[node].Run(ctx, id, req)
}

func (p *inProcess) Close(ctx context.Context, node, id, reason string) (abi.Session, error) {
	p.calls.Add(1)
	return p.nodes[node].Close(ctx, id, reason)
}

func (p *inProcess) Touch(ctx context.Context, node string, ids []string) error {
	p.calls.Add(1)
	return p.nodes[node].Touch(ctx, ids)
}

// countingStore counts the records read.
type countingStore struct {
	*live.MemoryStore
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, id string) (live.Record, error) {
	s.gets.Add(1)
	return s.MemoryStore.Get(ctx, id)
}

// TestRoute: two registries on one store; b's commands for a's session go through the
// Router to a's Local, and only the first reads the record to find a; a closed session is
// answered from its record without asking a; a registry without a Router does not find it.
func TestRoute(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{MemoryStore: live.NewMemoryStore()}
	rt := &inProcess{nodes: map[string]live.Local{}}
	kind := livetest.NewFakeKind(abi.TypeTerminal, false)
	regs := map[string]*live.Registry{}
	for _, node := range []string{"a", "b"} {
		k := live.Kind(livetest.NewFakeKind(abi.TypeTerminal, false))
		if node == "a" {
			k = kind
		}
		r, err := live.New(ctx, live.Config{Node: node, Store: st, Router: rt, IdleTimeout: -1}, k)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		regs[node], rt.nodes[node] = r, r.Local()
	}
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	id := s.SessionID
	b := regs["b"]
	gets := st.gets.Load()
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"send", func() error { _, err := b.Send(ctx, id, live.SendRequest{Data: []byte("x")}); return err }},
		{"control", func() error {
			_, err := b.Control(ctx, id, abi.ControlRequest{Command: abi.CommandResize, Width: 10, Height: 5})
			return err
		}},
		{"send again", func() error { _, err := b.Send(ctx, id, live.SendRequest{Data: []byte("y")}); return err }},
	} {
		calls := rt.calls.Load()
		if err := tc.do(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rt.calls.Load() != calls+1 {
			t.Errorf("%s: not routed", tc.name)
		}
	}
	if n := st.gets.Load() - gets; n != 1 {
		t.Errorf("b read a's session's record %d times for three commands, want once", n)
	}
	if got := kind.Instance(id).Sends(); len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Errorf("a's session received %q", got)
	}
	_, err = b.Run(ctx, id, abi.RunRequest{Command: "true"})
	livetest.WantCode(t, err, abi.CodeCapabilityUnsupported) // a's answer: the fake runs nothing

	// A registry that forwards nowhere does not find another node's session.
	alone, err := live.New(ctx, live.Config{Node: "c", Store: st, IdleTimeout: -1}, livetest.NewFakeKind(abi.TypeTerminal, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alone.Shutdown(context.Background()) })
	_, err = alone.Send(ctx, id, live.SendRequest{Data: []byte("z")})
	livetest.WantCode(t, err, abi.CodeSessionNotFound)

	if _, err := b.Close(ctx, id, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if got, _ := regs["a"].Get(ctx, id); got.Status != abi.StatusClosed {
		t.Errorf("a's session after b's close: %s", got.Status)
	}
	// A fresh node learns from the record that the session ended, and asks no one.
	fresh, err := live.New(ctx, live.Config{Node: "d", Store: st, Router: rt, IdleTimeout: -1}, livetest.NewFakeKind(abi.TypeTerminal, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fresh.Shutdown(context.Background()) })
	calls := rt.calls.Load()
	_, err = fresh.Send(ctx, id, live.SendRequest{Data: []byte("z")})
	livetest.WantCode(t, err, abi.CodeSessionClosed)
	if rt.calls.Load() != calls {
		t.Error("a closed session's command was routed")
	}
	// b, which remembers a, asks a, whose answer is the same.
	_, err = b.Send(ctx, id, live.SendRequest{Data: []byte("z")})
	livetest.WantCode(t, err, abi.CodeSessionClosed)
}
