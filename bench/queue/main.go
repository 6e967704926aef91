// Command queue measures the ai-chat message queues (docs/BENCHMARKS.md, "Cluster: the ai-chat
// queue"): messages enqueued one after the other into many conversations, then delivered as a
// conversation's turn takes them (its queued messages read, the first marked delivered), on the
// SQLite store (what `nexus serve` runs) and on JetStream with one and three replicas on three
// nats-servers clustered over loopback in this process. It prints throughput and latency of
// each, and how a conversation's queue read grows with its history.
//
//	go run ./bench/queue [-n 2000] [-keys 100] [-size 256] [-history 500]
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/jetstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "queue:", err)
		os.Exit(1)
	}
}

type params struct{ n, keys, size, history int }

func run() error {
	var p params
	flag.IntVar(&p.n, "n", 2000, "messages per store")
	flag.IntVar(&p.keys, "keys", 100, "conversations the messages go to, round robin")
	flag.IntVar(&p.size, "size", 256, "bytes a message")
	flag.IntVar(&p.history, "history", 500, "delivered messages before the queue read of the history figure")
	flag.Parse()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nexus-bench-queue")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	sq, err := broker.Open(ctx, filepath.Join(dir, "broker", "queues.db"), broker.Options{})
	if err != nil {
		return err
	}
	err = measure(ctx, "SQLite", sq, p)
	_ = sq.Close()
	if err != nil {
		return err
	}

	servers, err := startCluster(ctx, filepath.Join(dir, "nats"))
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}()
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	for _, replicas := range []int{1, 3} {
		nc, err := jetstore.Dial(ctx, jetstore.DialOptions{URLs: urls, Name: "bench"})
		if err != nil {
			return err
		}
		q, err := jetstore.OpenQueues(ctx, nc, jetstore.QueueOptions{Cluster: fmt.Sprint("bench", replicas), Replicas: replicas})
		if err != nil {
			return err
		}
		err = measure(ctx, fmt.Sprintf("JetStream R%d", replicas), q, p)
		nc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func measure(ctx context.Context, name string, q broker.Queues, p params) error {
	text := strings.Repeat("x", p.size)
	keys := make([]string, p.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("agent:bench:%d", i)
	}
	enq := make([]time.Duration, 0, p.n)
	start := time.Now()
	for i := range p.n {
		t0 := time.Now()
		if _, err := q.Enqueue(ctx, keys[i%len(keys)], broker.Followup, text, ""); err != nil {
			return fmt.Errorf("%s: enqueue: %w", name, err)
		}
		enq = append(enq, time.Since(t0))
	}
	enqEl := time.Since(start)
	// A turn takes its conversation's first queued message: the queue read, then the mark.
	del := make([]time.Duration, 0, p.n)
	start = time.Now()
	for i := range p.n {
		t0 := time.Now()
		ms, err := q.Queued(ctx, keys[i%len(keys)])
		if err != nil || len(ms) == 0 {
			return fmt.Errorf("%s: queued: %d, %w", name, len(ms), err)
		}
		won, err := q.Deliver(ctx, []string{ms[0].ID}, "entry")
		if err != nil || len(won) != 1 {
			return fmt.Errorf("%s: deliver: %v, %w", name, won, err)
		}
		del = append(del, time.Since(t0))
	}
	delEl := time.Since(start)
	// One conversation with a long history: what one queue read costs there.
	hk := "agent:bench:history"
	var ids []string
	for range p.history {
		m, err := q.Enqueue(ctx, hk, broker.Followup, text, "")
		if err != nil {
			return fmt.Errorf("%s: enqueue: %w", name, err)
		}
		ids = append(ids, m.ID)
	}
	if err := q.Delivered(ctx, ids, "entry"); err != nil {
		return fmt.Errorf("%s: deliver: %w", name, err)
	}
	if _, err := q.Enqueue(ctx, hk, broker.Followup, text, ""); err != nil {
		return fmt.Errorf("%s: enqueue: %w", name, err)
	}
	var reads []time.Duration
	for range 20 {
		t0 := time.Now()
		if ms, err := q.Queued(ctx, hk); err != nil || len(ms) != 1 {
			return fmt.Errorf("%s: queued with history: %d, %w", name, len(ms), err)
		}
		reads = append(reads, time.Since(t0))
	}
	slices.Sort(reads)
	fmt.Printf("%-13s enqueue %6.0f/s p50 %-8v p99 %-8v | read+deliver %6.0f/s p50 %-8v p99 %-8v | read with %d delivered: p50 %v\n",
		name, float64(p.n)/enqEl.Seconds(), pct(enq, 50), pct(enq, 99),
		float64(p.n)/delEl.Seconds(), pct(del, 50), pct(del, 99), p.history, reads[len(reads)/2].Round(time.Microsecond))
	return nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*p/100].Round(time.Microsecond)
}

// startCluster starts three nats-servers with JetStream, clustered over loopback routes, and
// returns once they have a meta leader (as bench/cluster does).
func startCluster(ctx context.Context, dir string) ([]*server.Server, error) {
	var addrs, routes []string
	for range 3 {
		ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, ln.Addr().String())
		routes = append(routes, "nats-route://"+ln.Addr().String())
		_ = ln.Close()
	}
	var servers []*server.Server
	for i := range 3 {
		s, err := jetstore.StartEmbedded(ctx, jetstore.EmbeddedOptions{
			Name: fmt.Sprint("n", i), Dir: filepath.Join(dir, fmt.Sprint("n", i)),
			Cluster: "bench", ClusterListen: addrs[i], Routes: routes,
		})
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		leaders, current := 0, 0
		for _, s := range servers {
			if s.JetStreamIsCurrent() {
				current++
			}
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == 3 {
				leaders++
			}
		}
		if leaders == 1 && current == 3 {
			return servers, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no JetStream meta leader after a minute")
		}
		time.Sleep(10 * time.Millisecond) // a benchmark's setup, not a test: polling is fine here
	}
}
