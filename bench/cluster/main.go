// Command cluster measures terminal-like event throughput of the live store a gateway keeps its
// event logs in (docs/BENCHMARKS.md, "Cluster: event log throughput"): one session's log takes
// appends of one output event each (what a terminal flood appends per PTY read), on the disk
// store, then on JetStream with one and three replicas on three nats-servers clustered over
// loopback in this process. It prints events and MiB per second and the append latency. Then
// it measures keystroke to echo on a terminal of one node, typed on that node and through
// another (echo.go).
//
//	go run ./bench/cluster [-n 5000] [-size 4096] [-keys 200] [-flood=false]
//	go run ./bench/cluster -nodes [-failover-runs 5] [-create 100]   # nodes.go
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 5000, "appends per store")
	size := flag.Int("size", 4096, "bytes of output per event")
	keys := flag.Int("keys", 200, "keystrokes per node for keystroke to echo (0: none)")
	flood := flag.Bool("flood", true, "measure the event log's throughput")
	flag.Parse()
	ctx := context.Background()
	if *nodesMode {
		return runNodes(ctx) // nodes.go
	}
	dir, err := os.MkdirTemp("", "nexus-bench-cluster")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	if *flood {
		disk, err := live.OpenDiskStore(filepath.Join(dir, "live"), live.DiskOptions{})
		if err != nil {
			return err
		}
		defer func() { _ = disk.Close() }()
		if err := measure(ctx, "disk store", disk, *n, *size); err != nil {
			return err
		}
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
		if !*flood {
			break
		}
		nc, err := jetstore.Dial(ctx, jetstore.DialOptions{URLs: urls, Name: "bench"})
		if err != nil {
			return err
		}
		st, err := jetstore.Open(ctx, nc, jetstore.Options{Cluster: fmt.Sprint("bench", replicas), Node: "a", Replicas: replicas})
		if err != nil {
			return err
		}
		err = measure(ctx, fmt.Sprintf("JetStream R%d", replicas), st, *n, *size)
		_ = st.Close()
		nc.Close()
		if err != nil {
			return err
		}
	}
	for _, replicas := range []int{1, 3} {
		if *keys <= 0 {
			break
		}
		if err := echo(ctx, urls, *keys, replicas); err != nil {
			return err
		}
	}
	return nil
}

func measure(ctx context.Context, name string, st live.Store, n, size int) error {
	id := live.NewSessionID()
	rec := abi.Session{SessionID: id, Type: abi.TypeTerminal, CreatedAt: abi.FormatTime(time.Now()), Status: abi.StatusActive, Metadata: map[string]any{}}
	if _, err := st.Put(ctx, rec, 0); err != nil {
		return err
	}
	l, err := st.CreateLog(ctx, id, live.LogLimits{Events: 4096, Bytes: 8 << 20, Pinned: 64})
	if err != nil {
		return err
	}
	defer func() { _ = l.Close(ctx) }()
	chunk := make([]byte, size)
	for i := range chunk {
		chunk[i] = 'a' + byte(i%26)
	}
	lat := make([]time.Duration, 0, n)
	start := time.Now()
	for range n {
		t0 := time.Now()
		if _, err := l.Append(ctx, &live.Event{Type: abi.EventData, Time: t0, SessionID: id, Payload: live.Output(chunk)}); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		lat = append(lat, time.Since(t0))
	}
	// A log that acknowledges appends asynchronously (jetstore) counts until the stream has
	// acknowledged the last one.
	if f, ok := l.(interface{ Flush(context.Context) error }); ok {
		if err := f.Flush(ctx); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	el := time.Since(start)
	slices.Sort(lat)
	fmt.Printf("%-14s %6d appends of %d B: %8.0f events/s %7.1f MiB/s  append p50 %v p99 %v\n", name, n, size,
		float64(n)/el.Seconds(), float64(n*size)/el.Seconds()/(1<<20),
		lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))
	return nil
}

// startCluster starts three nats-servers with JetStream, clustered over loopback routes, and
// returns once they have a meta leader.
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
