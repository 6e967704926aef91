package triggerkv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/trigger"
	"github.com/nexus-run/nexus/internal/trigger/triggertest"
	"github.com/nexus-run/nexus/internal/triggerkv"
)

// startCluster starts three real nats-servers with JetStream, clustered over loopback routes
// in the test process (as jetstore's tests do), and answers their client URLs.
func startCluster(t *testing.T) []*server.Server {
	t.Helper()
	ctx := testCtx(t)
	dir := t.TempDir()
	var addrs, routes []string
	for range 3 {
		addr := testkit.FreeAddr(t)
		addrs = append(addrs, addr)
		routes = append(routes, "nats-route://"+addr)
	}
	var servers []*server.Server
	for i := range 3 {
		s, err := jetstore.StartEmbedded(ctx, jetstore.EmbeddedOptions{
			Name: fmt.Sprint("n", i), Dir: filepath.Join(dir, fmt.Sprint("n", i)),
			Cluster: "test", ClusterListen: addrs[i], Routes: routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	testkit.Eventually(t, "a JetStream meta leader with three peers", func() bool {
		leaders := 0
		for _, s := range servers {
			if !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				leaders++
				if len(s.JetStreamClusterPeers()) != 3 {
					return false
				}
			}
		}
		return leaders == 1
	})
	return servers
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

// connect dials the cluster through server i first (each node its own server).
func connect(t *testing.T, servers []*server.Server, i int) *nats.Conn {
	t.Helper()
	urls := []string{servers[i%len(servers)].ClientURL()}
	for j, s := range servers {
		if j != i%len(servers) {
			urls = append(urls, s.ClientURL())
		}
	}
	nc, err := jetstore.Dial(testCtx(t), jetstore.DialOptions{URLs: urls, Name: fmt.Sprint(t.Name(), i)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

var clusterSeq atomic.Int64

// clusterName is a cluster of its own for each store a test opens: no shared bucket.
func clusterName() string { return fmt.Sprint("t", clusterSeq.Add(1)) }

// openNodes opens n stores of one new cluster, each on its own connection.
func openNodes(t *testing.T, servers []*server.Server, replicas, n int, now func() time.Time) []*triggerkv.Store {
	t.Helper()
	name := clusterName()
	var out []*triggerkv.Store
	for i := range n {
		st, err := triggerkv.Open(testCtx(t), connect(t, servers, i), triggerkv.Options{Cluster: name, Replicas: replicas, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

// TestContracts: the JobStore and Claimer contracts on real nats-server, one handle per node
// each on its own server, with one and three replicas.
func TestContracts(t *testing.T) {
	servers := startCluster(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			triggertest.Run(t, func(t *testing.T, now func() time.Time, n int) []trigger.JobStore {
				var out []trigger.JobStore
				for _, st := range openNodes(t, servers, replicas, n, now) {
					out = append(out, st)
				}
				return out
			})
			t.Run("Claims", func(t *testing.T) {
				triggertest.RunClaims(t, func(t *testing.T, n int) []trigger.Claimer {
					var out []trigger.Claimer
					for _, st := range openNodes(t, servers, replicas, n, nil) {
						out = append(out, st)
					}
					return out
				})
			})
		})
	}
}

// clock is the nodes' injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// deliveries counts every delivery by its id, whichever node makes it (no deduplication: a
// firing delivered twice is counted twice).
type deliveries struct {
	mu    sync.Mutex
	count map[string]int
	by    map[string][]int
}

func (d *deliveries) deliver(node int) trigger.Deliver {
	return func(_ context.Context, del trigger.Delivery) (string, string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.count[del.ID]++
		d.by[del.ID] = append(d.by[del.ID], node)
		return "msg_" + del.ID, del.Key, nil
	}
}

// TestFiresOnce: three trigger services on one cluster, a clock set by the test. A cron job and
// a heartbeat added on node A fire exactly once per scheduled time across the three, all three
// ticking at once (several callers each), and still once per time with A stopped.
func TestFiresOnce(t *testing.T) {
	servers := startCluster(t)
	c := &clock{t: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
	stores := openNodes(t, servers, 3, 3, c.now)
	got := &deliveries{count: map[string]int{}, by: map[string][]int{}}
	var svcs []*trigger.Service
	for i, st := range stores {
		svcs = append(svcs, &trigger.Service{Store: st, Claims: st, Deliver: got.deliver(i), Now: c.now})
	}
	ctx := testCtx(t)
	if _, err := svcs[0].AddJob(ctx, trigger.Job{ID: "nightly", Schedule: "*/5 * * * *", Message: "check the build"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svcs[0].AddJob(ctx, trigger.Job{ID: "pulse", EveryMs: (10 * time.Minute).Milliseconds(), Message: "anything new?", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}); err != nil {
		t.Fatal(err)
	}
	created := c.now().UnixMilli()
	// tickAll ticks every running node at once, each from two callers, at when.
	tickAll := func(when time.Time, running []*trigger.Service) {
		t.Helper()
		c.set(when)
		var wg sync.WaitGroup
		for _, s := range running {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := s.Tick(ctx, when); err != nil {
						t.Errorf("tick at %s: %v", when, err)
					}
				}()
			}
		}
		wg.Wait()
	}
	start := time.Date(2026, 11, 24, 10, 5, 0, 0, time.UTC)
	var want []string
	afterA := map[string]bool{} // the firings due once A stopped
	for step := range 8 {
		when := start.Add(time.Duration(step) * 5 * time.Minute)
		running := svcs
		if step >= 4 {
			running = svcs[1:] // node A stopped: its jobs fire from the others
			if step == 4 {
				_ = stores[0].Close()
			}
		}
		tickAll(when, running)
		due := []string{fmt.Sprintf("cron_nightly_%d", when.UnixMilli())}
		if when.Sub(time.UnixMilli(created))%(10*time.Minute) == 0 {
			due = append(due, fmt.Sprintf("heartbeat_pulse_%d", when.UnixMilli()))
		}
		for _, id := range due {
			afterA[id] = step >= 4
		}
		want = append(want, due...)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, id := range want {
		if got.count[id] != 1 {
			t.Errorf("firing %s delivered %d times (by nodes %v), want once", id, got.count[id], got.by[id])
		}
	}
	if len(got.count) != len(want) {
		t.Errorf("delivered %v, want only %v", got.count, want)
	}
	for id, nodes := range got.by {
		if afterA[id] && nodes[0] == 0 {
			t.Errorf("firing %s delivered by the stopped node A", id)
		}
	}
	j, err := stores[1].Job(ctx, "nightly")
	if err != nil || j.Runs != 8 || j.LastRunAt != start.Add(35*time.Minute).UnixMilli() {
		t.Fatalf("the job's record after 8 firings: %+v %v", j, err)
	}
	if hb, err := stores[2].Job(ctx, "pulse"); err != nil || hb.Runs != 4 {
		t.Fatalf("the heartbeat's record after 4 firings: %+v %v", hb, err)
	}
}

// looks counts the times a scheduler read the jobs.
type looks struct {
	*triggerkv.Store
	n atomic.Int64
}

func (l *looks) Jobs(ctx context.Context) ([]trigger.Job, error) {
	defer l.n.Add(1)
	return l.Store.Jobs(ctx)
}

// TestRunSeesOtherNodesJobs: a node's scheduler, asleep with no job (it would look again in
// an hour), fires a job added through another node once it is due: the bucket's watcher wakes
// it. B's clock is a minute ahead of A's, so the job A adds is due at B's first look.
func TestRunSeesOtherNodesJobs(t *testing.T) {
	servers := startCluster(t)
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	a := &clock{t: t0}
	b := &clock{t: t0.Add(61 * time.Second)}
	name := clusterName()
	open := func(i int, now func() time.Time) *triggerkv.Store {
		st, err := triggerkv.Open(testCtx(t), connect(t, servers, i), triggerkv.Options{Cluster: name, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	sa, sb := open(0, a.now), open(1, b.now)
	got := &deliveries{count: map[string]int{}, by: map[string][]int{}}
	looked := &looks{Store: sb}
	svcB := &trigger.Service{Store: looked, Claims: sb, Deliver: got.deliver(1), Now: b.now}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	go func() { defer close(done); svcB.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testkit.Eventually(t, "B looked at its jobs (none) and went to sleep", func() bool { return looked.n.Load() > 0 })
	svcA := &trigger.Service{Store: sa, Claims: sa, Deliver: got.deliver(0), Now: a.now}
	if _, err := svcA.AddJob(testCtx(t), trigger.Job{ID: "pulse", EveryMs: time.Minute.Milliseconds(), Message: "m", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("heartbeat_pulse_%d", t0.Add(time.Minute).UnixMilli())
	testkit.Eventually(t, "B delivers the job A added", func() bool {
		got.mu.Lock()
		defer got.mu.Unlock()
		return got.count[id] == 1
	})
}
