package placement_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/placement"
	"github.com/nexus-run/nexus/internal/testkit"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

// loads are the cluster's heartbeats as the test sets them.
type loads struct {
	mu sync.Mutex
	m  map[string]jetstore.Load
}

func (l *loads) Loads(context.Context) (map[string]jetstore.Load, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]jetstore.Load{}
	for k, v := range l.m {
		out[k] = v
	}
	return out, nil
}

// node is one node of the test's cluster: its registry and its placing backend.
type node struct {
	reg *live.Registry
	b   *placement.Backend
}

// cluster starts a real nats-server and a node per name (each its own connection, registry
// and create responder), all reading hb; a name in silent has no responder.
func cluster(t *testing.T, policy string, hb *loads, now func() time.Time, names []string, silent map[string]bool) map[string]*node {
	t.Helper()
	return clusterWith(t, policy, hb, now, names, silent, nil)
}

// clusterWith is cluster with the conversations' owners read from owners.
func clusterWith(t *testing.T, policy string, hb *loads, now func() time.Time, names []string, silent map[string]bool, owners placement.Owners) map[string]*node {
	t.Helper()
	ctx := testCtx(t)
	srv, err := jetstore.StartEmbedded(ctx, jetstore.EmbeddedOptions{Name: "s", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	out := map[string]*node{}
	for _, name := range names {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		reg, err := live.New(ctx, live.Config{Store: live.NewMemoryStore(), IdleTimeout: -1, Node: name}, livetest.NewFakeKind(abi.TypeTerminal, false), livetest.NewFakeKind(abi.TypeAIChat, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Shutdown(context.Background()) })
		b, err := placement.New(reg, placement.Config{Conn: nc, Cluster: "pl", Node: name, Loads: hb, Policy: policy, Now: now, Owners: owners})
		if err != nil {
			t.Fatal(err)
		}
		if !silent[name] {
			stop, err := placement.ServeCreates(ctx, nc, "pl", name, reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
		}
		out[name] = &node{reg: reg, b: b}
	}
	return out
}

func count(t *testing.T, r *live.Registry) int {
	t.Helper()
	ss, err := r.List(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ss {
		if !s.Status.Final() {
			n++
		}
	}
	return n
}

// TestLeastSessionsSpreads: 30 creates at once on node a, policy least-sessions, the three
// nodes' heartbeats saying 0, 1 and 2 live sessions: the creates are spread so that each
// node ends with as many as the others (a's own included), forwarded to b and c.
func TestLeastSessionsSpreads(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	hb := &loads{m: map[string]jetstore.Load{"a": {At: now, Sessions: 2}, "b": {At: now, Sessions: 1}, "c": {At: now}}}
	nodes := cluster(t, placement.LeastSessions, hb, clock, []string{"a", "b", "c"}, nil)
	ctx := testCtx(t)
	const creates = 30
	var wg sync.WaitGroup
	errs := make(chan error, creates)
	for range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := nodes["a"].b.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// 30 more on top of 2, 1 and 0: 11 each.
	for name, want := range map[string]int{"a": 11 - 2, "b": 11 - 1, "c": 11} {
		if got := count(t, nodes[name].reg); got != want {
			t.Errorf("node %s holds %d new sessions, want %d", name, got, want)
		}
	}
}

// TestNamedNode: a create naming a node is created there (the session says so); an unknown
// node is INVALID_ARGUMENT naming the nodes, a lost one (heartbeat past the bound) and one
// that does not answer are RESOURCE_UNAVAILABLE; without a policy a create stays local.
func TestNamedNode(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	hb := &loads{m: map[string]jetstore.Load{
		"a": {At: now}, "b": {At: now.Add(-time.Second)}, "gone": {At: now.Add(-time.Minute)}, "mute": {At: now},
	}}
	nodes := cluster(t, "", hb, clock, []string{"a", "b", "mute"}, map[string]bool{"mute": true})
	ctx := testCtx(t)
	s, err := nodes["a"].b.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Node: "b"})
	if err != nil || s.Node != "b" {
		t.Fatalf("created on b from a: %+v %v", s, err)
	}
	if _, err := nodes["b"].reg.Get(ctx, s.SessionID); err != nil {
		t.Fatalf("b does not hold it: %v", err)
	}
	if s, err := nodes["a"].b.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal}); err != nil || s.Node != "a" {
		t.Fatalf("a create naming no node: %+v %v", s, err)
	}
	for _, tc := range []struct {
		req  abi.CreateRequest
		code abi.Code
	}{
		{abi.CreateRequest{Type: abi.TypeTerminal, Node: "nowhere"}, abi.CodeInvalidArgument},
		{abi.CreateRequest{Type: abi.TypeTerminal, Node: "gone"}, abi.CodeResourceUnavailable},
		{abi.CreateRequest{Type: abi.TypeTerminal, Node: "mute"}, abi.CodeResourceUnavailable},
		{abi.CreateRequest{Type: abi.TypeTerminal, Node: "b", Ephemeral: true}, abi.CodeInvalidArgument},
		{abi.CreateRequest{Type: "no-such-type", Node: "b"}, abi.CodeInvalidArgument}, // b's own refusal, its code kept
	} {
		t.Run(tc.req.Node+string(tc.req.Type), func(t *testing.T) {
			_, err := nodes["a"].b.Create(ctx, tc.req)
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != tc.code {
				t.Fatalf("create %+v: %v, want %s", tc.req, err, tc.code)
			}
		})
	}
	if got := count(t, nodes["b"].reg); got != 1 {
		t.Fatalf("b holds %d sessions, want 1", got)
	}
}

// owners are the conversations' lease holders as the test sets them.
type owners map[string]string

func (o owners) Owner(_ context.Context, key string) (string, error) { return o[key], nil }

// TestConversationOwner: an ai-chat create on a conversation another node owns (holds its
// lease) is created on that node, whatever the policy; one on a conversation this node or no
// node owns, or naming no conversation, is placed as usual; a create naming a node goes there.
func TestConversationOwner(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	hb := &loads{m: map[string]jetstore.Load{"a": {At: now}, "b": {At: now}, "c": {At: now}}}
	own := owners{"agent:main:main": "b", "agent:main:mine": "a"}
	for _, policy := range []string{placement.Local, placement.LeastSessions} {
		t.Run(policy, func(t *testing.T) {
			nodes := clusterWith(t, policy, hb, clock, []string{"a", "b", "c"}, nil, own)
			ctx := testCtx(t)
			for _, tc := range []struct {
				name string
				req  abi.CreateRequest
				want string
			}{
				{"owned by b", abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:main:main"}}, "b"},
				{"owned here", abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:main:mine"}}, ""},
				{"named node", abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:main:main"}, Node: "c"}, "c"},
				{"a terminal with that chat", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ChatID: "agent:main:main"}}, ""},
			} {
				s, err := nodes["a"].b.Create(ctx, tc.req)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if tc.want != "" && s.Node != tc.want {
					t.Errorf("%s: created on %s, want %s", tc.name, s.Node, tc.want)
				}
				if tc.want == "" && policy == placement.Local && s.Node != "a" {
					t.Errorf("%s: created on %s, want a (local)", tc.name, s.Node)
				}
			}
		})
	}
}

// TestNotACluster: a gateway that is no cluster's node refuses a create naming another node,
// and the least-sessions policy.
func TestNotACluster(t *testing.T) {
	reg, err := live.New(testCtx(t), live.Config{Store: live.NewMemoryStore(), IdleTimeout: -1}, livetest.NewFakeKind(abi.TypeTerminal, false), livetest.NewFakeKind(abi.TypeAIChat, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Shutdown(context.Background()) })
	b, err := placement.New(reg, placement.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Create(testCtx(t), abi.CreateRequest{Type: abi.TypeTerminal, Node: "b"})
	livetest.WantCode(t, err, abi.CodeInvalidArgument)
	if _, err := placement.New(reg, placement.Config{Policy: placement.LeastSessions}); err == nil {
		t.Fatal("least-sessions outside a cluster accepted")
	}
	if _, err := placement.New(reg, placement.Config{Policy: "random"}); err == nil {
		t.Fatal("an unknown policy accepted")
	}
}
