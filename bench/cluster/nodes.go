package main

// The cluster's node-level figures (docs/BENCHMARKS.md, "Cluster: nodes"), on real processes:
// three nats-server binaries (make nats-server) clustered on loopback and `nexus serve --nats`
// nodes built from this repository. Failover: a node owning a terminal is killed -9, and the
// time until another node lists the terminal as node-lost, over a few runs, with --node-lost 3s
// and the default 10s. Sessions created per second on three nodes at once, and the nexus
// process's resident memory per idle terminal on each node.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
)

var (
	nodesMode     = flag.Bool("nodes", false, "measure failover, sessions created per second and memory per idle session on three nats-server processes and nexus nodes (needs make nats-server)")
	failoverRuns  = flag.Int("failover-runs", 5, "with -nodes: kills per --node-lost setting")
	createPerNode = flag.Int("create", 100, "with -nodes: terminals each of three nodes creates at once")
	createClients = flag.Int("clients", 1, "with -nodes: clients creating terminals on each node at once")
)

// bench is the processes of a -nodes run.
type bench struct {
	dir, nexus, natsServer string
	model                  string   // the slow model's URL, named in every node's config.toml
	servers                []string // client URLs
	procs                  []*exec.Cmd
}

func runNodes(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "nexus-bench-nodes")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	b := &bench{dir: dir}
	defer b.stop()
	if b.natsServer, err = findNATSServer(); err != nil {
		return err
	}
	b.nexus = filepath.Join(dir, "nexus")
	fmt.Println("building nexus ...")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.nexus, "./cmd/nexus").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	if err := b.startServers(ctx); err != nil {
		return err
	}
	for _, lost := range []time.Duration{3 * time.Second, 10 * time.Second} {
		if *failoverRuns == 0 {
			break
		}
		if err := b.failover(ctx, lost, *failoverRuns); err != nil {
			return err
		}
	}
	if *takeoverRuns > 0 {
		url, stop, err := slowModel()
		if err != nil {
			return err
		}
		defer stop()
		b.model = url
		for _, lost := range []time.Duration{3 * time.Second, 10 * time.Second} {
			if err := b.takeover(ctx, lost, *takeoverRuns); err != nil {
				return err
			}
		}
	}
	if *createPerNode == 0 {
		return nil
	}
	return b.createAndMemory(ctx, *createPerNode)
}

func findNATSServer() (string, error) {
	if p, err := filepath.Abs(filepath.Join("tools", "bin", "nats-server")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	return "", errors.New("nats-server not found: run make nats-server (from the repository's root)")
}

func freeAddr() (string, error) {
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(15000+rand.IntN(10000))) //nolint:gosec // a port
		ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
		if err != nil {
			continue
		}
		_ = ln.Close()
		return addr, nil
	}
	return "", errors.New("no free port")
}

func (b *bench) start(ctx context.Context, env []string, prog string, args ...string) (*exec.Cmd, error) {
	cmd := exec.CommandContext(ctx, prog, args...) //nolint:gosec // the benchmark's own programs
	cmd.Env = append(os.Environ(), env...)
	if dir := os.Getenv("NEXUS_BENCH_LOGS"); dir != "" {
		// Each process's output in a file of its own there, for a run that went wrong.
		f, err := os.CreateTemp(dir, filepath.Base(prog)+"-*.log")
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.procs = append(b.procs, cmd)
	return cmd, nil
}

func (b *bench) stop() {
	for _, p := range b.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

func (b *bench) startServers(ctx context.Context) error {
	var clients, routes []string
	for range 3 {
		c, err := freeAddr()
		if err != nil {
			return err
		}
		r, err := freeAddr()
		if err != nil {
			return err
		}
		clients, routes = append(clients, c), append(routes, "nats://"+r)
	}
	for i := range 3 {
		host, port, _ := net.SplitHostPort(clients[i])
		if _, err := b.start(ctx, nil, b.natsServer, "--name", fmt.Sprint("n", i+1), "--jetstream", "--store_dir", filepath.Join(b.dir, fmt.Sprint("n", i+1)),
			"--addr", host, "--port", port, "--cluster", routes[i], "--cluster_name", "bench", "--routes", strings.Join(routes, ",")); err != nil {
			return err
		}
		b.servers = append(b.servers, "nats://"+clients[i])
	}
	// JetStream answers once the servers have their meta leader.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nc, err := nats.Connect(strings.Join(b.servers, ","), nats.Timeout(2*time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = js.AccountInfo(actx)
			cancel()
			nc.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JetStream not ready: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // a benchmark's setup: polling is fine here
	}
}

// node is a nexus serve of the benchmark.
type node struct {
	name, home string
	cmd        *exec.Cmd
	c          *client.Client
}

func (b *bench) startNode(ctx context.Context, name string, args ...string) (*node, error) {
	home, err := os.MkdirTemp(b.dir, "home")
	if err != nil {
		return nil, err
	}
	n := &node{name: name, home: home}
	proj := filepath.Join(home, "proj")
	if err := os.MkdirAll(proj, 0o750); err != nil {
		return nil, err
	}
	env := []string{"NEXUS_HOME=" + home}
	if b.model != "" {
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(modelConfig(b.model)), 0o600); err != nil {
			return nil, err
		}
	}
	all := append([]string{"serve", "--nats", strings.Join(b.servers, ","), "--node", name, "--nats-replicas", "3", "--max-sessions", "10000"}, args...)
	if n.cmd, err = b.start(ctx, env, b.nexus, all...); err != nil {
		return nil, err
	}
	sock := filepath.Join(home, "state", "gateway.sock")
	n.c = client.New(client.Target{Socket: sock})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := n.c.Version(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s did not come up", name)
		}
		time.Sleep(50 * time.Millisecond) // setup
	}
	add := exec.CommandContext(ctx, b.nexus, "project", "add", "bench", "--path", proj) //nolint:gosec // ours
	add.Env = append(os.Environ(), env...)
	if out, err := add.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("project add: %w\n%s", err, out)
	}
	return n, nil
}

func (n *node) kill() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	_ = n.cmd.Wait()
}

func terminalReq() abi.CreateRequest {
	return abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "bench"}}
}

// failover: per run, a fresh node makes a terminal and is killed -9; the time until an
// observer lists it node-lost.
func (b *bench) failover(ctx context.Context, lost time.Duration, runs int) error {
	flagArg := "--node-lost=" + lost.String()
	obs, err := b.startNode(ctx, fmt.Sprint("obs", lost.Seconds()), flagArg)
	if err != nil {
		return err
	}
	defer obs.kill()
	other, err := b.startNode(ctx, fmt.Sprint("obs2-", lost.Seconds()), flagArg)
	if err != nil {
		return err
	}
	defer other.kill()
	var took []time.Duration
	for i := range runs {
		victim, err := b.startNode(ctx, fmt.Sprintf("v%d-%d", int(lost.Seconds()), i), flagArg)
		if err != nil {
			return err
		}
		s, err := victim.c.Create(ctx, terminalReq())
		if err != nil {
			return err
		}
		time.Sleep(1500 * time.Millisecond) // a heartbeat or so of the victim: it is known alive
		killed := time.Now()
		victim.kill()
		for {
			got, err := obs.c.Get(ctx, s.SessionID)
			if err == nil && got.Status == abi.StatusError {
				break
			}
			if time.Since(killed) > 5*lost+time.Minute {
				return fmt.Errorf("session %s of a killed node not node-lost after %v", s.SessionID, time.Since(killed))
			}
			time.Sleep(20 * time.Millisecond) // the measurement's resolution
		}
		took = append(took, time.Since(killed))
	}
	slices.Sort(took)
	fmt.Printf("failover --node-lost %-4v %d kills: node-lost on another node after p50 %v, p95 %v (min %v, max %v)\n", lost, runs,
		took[len(took)/2].Round(10*time.Millisecond), took[(len(took)*95+99)/100-1].Round(10*time.Millisecond),
		took[0].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond))
	return nil
}

// createAndMemory: three nodes create perNode terminals each, at once; then each node's
// resident memory per idle terminal.
func (b *bench) createAndMemory(ctx context.Context, perNode int) error {
	var nodes []*node
	for _, name := range []string{"a", "b", "c"} {
		n, err := b.startNode(ctx, name)
		if err != nil {
			return err
		}
		defer n.kill()
		nodes = append(nodes, n)
	}
	time.Sleep(2 * time.Second) // settled: first heartbeats, index sync
	before := make([]int64, len(nodes))
	for i, n := range nodes {
		before[i] = rss(n.cmd.Process.Pid)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	start := time.Now()
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inner sync.WaitGroup
			var mu sync.Mutex
			workers := *createClients
			for w := range workers {
				inner.Add(1)
				go func() {
					defer inner.Done()
					for k := w; k < perNode; k += workers {
						if _, err := n.c.Create(ctx, terminalReq()); err != nil {
							mu.Lock()
							errs[i] = err
							mu.Unlock()
							return
						}
					}
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	total := perNode * len(nodes)
	fmt.Printf("created %d terminals on 3 nodes at once (%d clients a node) in %v: %.0f sessions/s\n", total, *createClients, el.Round(time.Millisecond), float64(total)/el.Seconds())
	time.Sleep(3 * time.Second) // idle: the shells started, their prompts logged
	for i, n := range nodes {
		after := rss(n.cmd.Process.Pid)
		fmt.Printf("node %s: nexus RSS %.1f -> %.1f MiB with %d idle terminals: %.1f KiB a session\n", n.name,
			float64(before[i])/(1<<20), float64(after)/(1<<20), perNode, float64(after-before[i])/1024/float64(perNode))
	}
	return nil
}

// rss is a process's resident set size in bytes (0 when unknown).
func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
