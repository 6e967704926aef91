package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/kinds/terminal"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/noderpc"
)

// echo measures keystroke to echo on a terminal of node a: a key sent on a and its echo read
// from a's log, then a key sent on node b (forwarded to a by request/reply) and its echo read
// on b from the shared stream, as a WebSocket attached to b does. It prints p50 and p95 of
// each and their ratio, and one NATS round trip for scale.
func echo(ctx context.Context, urls []string, keys, replicas int) error {
	if keys > 1500 {
		return fmt.Errorf("-keys %d: at most 1500 (both nodes' keys make one shell line)", keys)
	}
	cluster := fmt.Sprint("echo", replicas)
	work, err := os.MkdirTemp("", "nexus-bench-echo")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	regs := map[string]*live.Registry{}
	var rtt time.Duration
	for _, node := range []string{"a", "b"} {
		nc, err := jetstore.Dial(ctx, jetstore.DialOptions{URLs: urls, Name: "bench-" + node})
		if err != nil {
			return err
		}
		defer nc.Close()
		if rtt, err = nc.RTT(); err != nil {
			return err
		}
		st, err := jetstore.Open(ctx, nc, jetstore.Options{Cluster: cluster, Node: node, Replicas: replicas})
		if err != nil {
			return err
		}
		kind := &terminal.Kind{Shell: "sh", Projects: func(string) (string, error) { return work, nil }}
		r, err := live.New(ctx, live.Config{Node: node, Store: st, IdleTimeout: -1,
			Router: noderpc.NewClient(nc, noderpc.ClientOptions{Cluster: cluster})}, kind)
		if err != nil {
			return err
		}
		defer func() { _ = r.Shutdown(context.WithoutCancel(ctx)) }()
		srv, err := noderpc.Serve(nc, noderpc.ServerOptions{Cluster: cluster, Node: node, Local: r.Local()})
		if err != nil {
			return err
		}
		defer srv.Close()
		regs[node] = r
	}
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "bench"}})
	if err != nil {
		return err
	}
	id := s.SessionID
	// Node b follows the session, as a WebSocket attached there does: its log stays open.
	fl, err := regs["b"].Follow(ctx, id, 0)
	if err != nil {
		return err
	}
	defer fl.Close()
	// The shell's prompt first: what is measured is the echo of a key, nothing before it.
	if err := settle(ctx, regs["a"], id); err != nil {
		return err
	}
	var results [2][]time.Duration
	for i := range keys {
		for j, node := range []string{"a", "b"} {
			// The shell's line grows by a key each time (a canonical line holds 4096).
			d, err := keystroke(ctx, regs[node], id, []byte{'a' + byte(i%26)})
			if err != nil {
				return fmt.Errorf("keystroke on %s: %w", node, err)
			}
			results[j] = append(results[j], d)
		}
	}
	p := func(l []time.Duration, q int) time.Duration {
		slices.Sort(l)
		return l[len(l)*q/100].Round(time.Microsecond)
	}
	local, remote := results[0], results[1]
	p50l, p95l, p50r, p95r := p(local, 50), p(local, 95), p(remote, 50), p(remote, 95)
	fmt.Printf("keystroke to echo, R%d, %d keys each (NATS round trip %v):\n", replicas, len(local), rtt.Round(time.Microsecond))
	fmt.Printf("  on the owning node a:      p50 %v  p95 %v\n", p50l, p95l)
	fmt.Printf("  through node b:            p50 %v  p95 %v\n", p50r, p95r)
	fmt.Printf("  ratio b/a: p50 %.2f  p95 %.2f; goal p50(b) <= 2*p50(a) + RTT = %v: %v\n",
		float64(p50r)/float64(p50l), float64(p95r)/float64(p95l), 2*p50l+rtt, p50r <= 2*p50l+rtt)
	return nil
}

// settle waits until the shell has printed its prompt and nothing more comes for a while.
func settle(ctx context.Context, r *live.Registry, id string) error {
	var after uint64
	for {
		b, err := r.Read(ctx, id, after, 0, 300*time.Millisecond)
		if err != nil {
			return err
		}
		if len(b.Events) == 0 && after > 0 {
			return nil
		}
		after = b.Next
	}
}

// keystroke sends key to the session through r and returns how long until r reads its echo.
func keystroke(ctx context.Context, r *live.Registry, id string, key []byte) (time.Duration, error) {
	after, err := r.LastSeq(ctx, id)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := r.Send(ctx, id, live.SendRequest{Data: key}); err != nil {
		return 0, err
	}
	for {
		b, err := r.Read(ctx, id, after, 0, 5*time.Second)
		if err != nil {
			return 0, err
		}
		if len(b.Events) == 0 {
			return 0, fmt.Errorf("no echo of %q within 5s", key)
		}
		for _, e := range b.Events {
			if out, ok := e.Payload.(live.Output); ok && bytes.Contains(out, key) {
				return time.Since(start), nil
			}
		}
		after = b.Next
	}
}
