package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/testkit"
)

// The cluster's end-to-end harness (docs/cluster.md, issue 27's faults): three real nats-server
// processes clustered on loopback with JetStream, and three `nexus serve --nats` processes (the
// test binary as nexus, as testscript installs it in $PATH), each node with its own state
// directory. Faults are made from outside, as an operator meets them: kill -9 of a process, a
// restart, a TCP proxy between a node and its NATS server that the test cuts.

// natsServerBin is the nats-server binary: tools/bin's (make nats-server) or one on PATH.
func natsServerBin(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if p := filepath.Join(repo, "tools", "bin", "nats-server"); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	testkit.SkipUnlessCI(t, "nats-server not found: run `make nats-server` (go install github.com/nats-io/nats-server/v2@v2.15.2 into tools/bin) for the cluster's end-to-end tests")
	return ""
}

// proc is a background process of the harness: its combined output and its end.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  testkit.Buffer
	done chan struct{}
	err  error // set before done closes
}

func startProc(t *testing.T, name string, env []string, prog string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(prog, args...) //nolint:gosec // the test's own programs
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends sig and waits for the process to exit.
func (p *proc) kill(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if p.exited() {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal %s: %v", p.name, err)
	}
	testkit.Eventually(t, p.name+" exits after "+sig.String(), p.exited)
}

// natsServer is one nats-server of the cluster: its client and route addresses and store stay
// the same across restarts.
type natsServer struct {
	name, client, route, dir string
	args                     []string
	p                        *proc
}

func (s *natsServer) url() string { return "nats://" + s.client }

// node is one `nexus serve`: its home (state directory, socket) stays across restarts.
type node struct {
	name, home string
	args       []string // nexus serve's arguments
	p          *proc
}

// cluster is the harness: three servers, three nodes.
type cluster struct {
	t       *testing.T
	bin     string // nats-server
	nexus   string
	servers []*natsServer
	nodes   map[string]*node
}

// newCluster makes (but does not start) three servers n1..n3 and three nodes a, b, c. Each
// server runs with --no_advertise: a node keeps to the URLs it was given, so a proxy in front
// of one (TestClusterE2E's partition) stays in its path.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: natsServerBin(t), nodes: map[string]*node{}}
	var err error
	if c.nexus, err = exec.LookPath("nexus"); err != nil {
		t.Fatalf("nexus (the test binary, installed by testscript.Main): %v", err)
	}
	var routes []string
	for i := range 3 {
		s := &natsServer{name: fmt.Sprint("n", i+1), client: testkit.FreeAddr(t), route: testkit.FreeAddr(t), dir: filepath.Join(t.TempDir(), "js")}
		routes = append(routes, "nats://"+s.route)
		c.servers = append(c.servers, s)
	}
	for _, s := range c.servers {
		host, port, _ := net.SplitHostPort(s.client)
		s.args = []string{"--name", s.name, "--jetstream", "--store_dir", s.dir, "--addr", host, "--port", port,
			"--cluster", "nats://" + s.route, "--cluster_name", "nexus-e2e", "--routes", strings.Join(routes, ","), "--no_advertise"}
	}
	return c
}

// urls are the servers' client URLs, comma separated.
func (c *cluster) urls() string {
	var u []string
	for _, s := range c.servers {
		u = append(u, s.url())
	}
	return strings.Join(u, ",")
}

func (c *cluster) server(name string) *natsServer {
	for _, s := range c.servers {
		if s.name == name {
			return s
		}
	}
	c.t.Fatalf("no server %s", name)
	return nil
}

// startServer starts (or restarts) s and waits until it takes clients.
func (c *cluster) startServer(s *natsServer) {
	c.t.Helper()
	s.p = startProc(c.t, "nats-server "+s.name, nil, c.bin, s.args...)
	c.logOnFailure(s.p)
	c.t.Cleanup(func() { s.p.kill(c.t, syscall.SIGKILL) })
	testkit.Eventually(c.t, "nats-server "+s.name+" takes clients on "+s.client, func() bool {
		if s.p.exited() {
			c.t.Fatalf("nats-server %s exited: %v\n%s", s.name, s.p.err, s.p.out.String())
		}
		conn, err := net.DialTimeout("tcp", s.client, time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	})
}

// ownStacks keeps the goroutines of a Go traceback that run nexus's own code, up to limit bytes.
func ownStacks(dump string, limit int) string {
	var b strings.Builder
	for g := range strings.SplitSeq(dump, "\n\n") {
		if strings.Contains(g, "nexus-run/nexus/internal/") && b.Len()+len(g) < limit {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// logOnFailure logs the end of p's output when the test fails.
func (c *cluster) logOnFailure(p *proc) {
	c.t.Cleanup(func() {
		if c.t.Failed() {
			out := p.out.String()
			f, err := os.CreateTemp("", "nexus-e2e-*.log") //nolint:usetesting // kept after the test, to read
			if err == nil {
				_, _ = f.WriteString(out)
				_ = f.Close()
			}
			if len(out) > 3000 {
				out = "..." + out[len(out)-3000:]
			}
			c.t.Logf("output of %s (all of it in %s):\n%s", p.name, f.Name(), out)
		}
	})
}

// waitJetStream waits until every server answers JetStream's account info, which needs the
// cluster's meta leader: a node started before then fails to make its streams (as an operator
// starts nexus once `nats server check jetstream` passes).
func (c *cluster) waitJetStream(except ...string) {
	c.t.Helper()
	for _, s := range c.servers {
		if slices.Contains(except, s.name) {
			continue
		}
		testkit.Eventually(c.t, "JetStream answers on "+s.name, func() bool {
			nc, err := nats.Connect(s.url(), nats.Timeout(5*time.Second))
			if err != nil {
				return false
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = js.AccountInfo(ctx)
			return err == nil
		})
	}
}

// addNode names a node with its serve arguments (after "serve"); its home is new.
func (c *cluster) addNode(name string, args ...string) *node {
	n := &node{name: name, home: testkit.ShortTempDir(c.t), args: args}
	c.nodes[name] = n
	return n
}

// startNode starts (or restarts) n's nexus serve and waits for its gateway socket to answer.
func (c *cluster) startNode(n *node) {
	c.t.Helper()
	args := append([]string{"serve", "--grace", "200ms"}, n.args...)
	n.p = startProc(c.t, "nexus serve "+n.name, n.env(), c.nexus, args...)
	c.logOnFailure(n.p)
	c.t.Cleanup(func() { n.p.kill(c.t, syscall.SIGKILL) })
	sock := filepath.Join(n.home, "state", "gateway.sock")
	testkit.Eventually(c.t, "node "+n.name+"'s gateway answers", func() bool {
		if n.p.exited() {
			c.t.Fatalf("node %s exited: %v\n%s", n.name, n.p.err, n.p.out.String())
		}
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	})
}

func (n *node) env() []string {
	env := []string{"NEXUS_HOME=" + n.home, "NEXUS_GATEWAY=", "NEXUS_TOKEN="}
	// Race-enabled binaries sleep 1s at exit by default; every CLI command would pay it.
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		env = append(env, "GORACE="+strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
	return env
}

// run runs the nexus CLI against n's gateway (its state directory's socket), bounded by ctx.
// It is the one way the tests drive a node, so a test of another node's sessions (sent to,
// resized, closed from here) is a call of it with a session id of another node.
func (n *node) run(ctx context.Context, t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	nexus, lerr := exec.LookPath("nexus")
	if lerr != nil {
		t.Fatal(lerr)
	}
	cmd := exec.CommandContext(ctx, nexus, args...) //nolint:gosec // the test binary as nexus
	cmd.Env = append(os.Environ(), n.env()...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("node %s: nexus %s: %w\n%s", n.name, strings.Join(args, " "), err, e.String())
	}
	return o.String(), e.String(), err
}

// ok runs a CLI command on n that must succeed (within the hang guard) and returns its stdout.
func (n *node) ok(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	out, _, err := n.run(ctx, t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// session is what the tests read of a session object.
type session struct {
	SessionID string `json:"sessionId"`
	Status    string `json:"status"`
	Node      string `json:"node"`
	Metadata  struct {
		CloseReason string `json:"closeReason"`
	} `json:"metadata"`
}

// list is `nexus session list --all` on n.
func (n *node) list(t *testing.T) []session {
	t.Helper()
	var out struct {
		Sessions []session `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(n.ok(t, "session", "list", "--all")), &out); err != nil {
		t.Fatalf("node %s: session list: %v", n.name, err)
	}
	return out.Sessions
}

func find(ss []session, id string) (session, bool) {
	for _, s := range ss {
		if s.SessionID == id {
			return s, true
		}
	}
	return session{}, false
}

// openTerminal opens a terminal on n (in a project of n's) and returns its id.
func (n *node) openTerminal(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(n.home, "proj")
	if !fileExists(dir) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		n.ok(t, "project", "add", "e2e", "--path", dir)
	}
	var s session
	if err := json.Unmarshal([]byte(n.ok(t, "agent", "terminal", "open", "--project", "e2e")), &s); err != nil {
		t.Fatalf("node %s: terminal open: %v", n.name, err)
	}
	return s.SessionID
}

// event is one event as read through the CLI: the envelope, and the terminal output's bytes.
type event struct {
	Seq     uint64
	Type    abi.EventType
	Payload map[string]any
	Output  []byte
}

// events reads session id's events after seq from n (polling: the events of another node's
// session are read from its log on the stream).
func (n *node) events(t *testing.T, id string, after uint64) []event {
	t.Helper()
	evs, err := n.tryEvents(t, id, after)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// tryEvents is events that returns the CLI's failure (a store that cannot answer for now).
func (n *node) tryEvents(t *testing.T, id string, after uint64) ([]event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	out, _, err := n.run(ctx, t, "session", "events", "--session-id", id, "--transport", "polling", "--content-type", "raw", "--after", strconv.FormatUint(after, 10))
	if err != nil {
		return nil, err
	}
	var evs []event
	for line := range strings.Lines(out) {
		var e abi.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("node %s: event %q: %v", n.name, line, err)
		}
		ev := event{Seq: e.Seq, Type: e.Event}
		if err := json.Unmarshal(e.Payload, &ev.Payload); err != nil {
			t.Fatalf("node %s: payload %s: %v", n.name, e.Payload, err)
		}
		if e.Event == abi.EventData && ev.Payload["type"] == abi.PayloadTerminalOutput {
			b, err := base64.StdEncoding.DecodeString(fmt.Sprint(ev.Payload["content"]))
			if err != nil {
				t.Fatalf("node %s: raw content: %v", n.name, err)
			}
			ev.Output = b
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// checkSeqs fails unless evs number first, first+1, ... with no gap and no duplicate.
func checkSeqs(t *testing.T, what string, evs []event, first uint64) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != first+uint64(i) {
			t.Fatalf("%s: event %d has seq %d, want %d (a gap or a duplicate)", what, i, e.Seq, first+uint64(i))
		}
	}
}

// outputOf is the terminal output of evs, as written.
func outputOf(evs []event) []byte {
	var raw []byte
	for _, e := range evs {
		raw = append(raw, e.Output...)
	}
	return raw
}

// numbers returns the lines of the terminal output that are whole numbers, in order.
func numbers(evs []event) []int {
	var raw []byte
	for _, e := range evs {
		raw = append(raw, e.Output...)
	}
	text := strings.ReplaceAll(abi.StripANSI(raw), "\r", "")
	var out []int
	for l := range strings.SplitSeq(text, "\n") {
		if n, err := strconv.Atoi(l); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// checkCounting fails unless ns is 1, 2, ..., len(ns).
func checkCounting(t *testing.T, what string, ns []int) {
	t.Helper()
	for i, n := range ns {
		if n != i+1 {
			t.Fatalf("%s: line %d of the count is %d, want %d (output lost or repeated); around it: %v", what, i+1, n, i+1, ns[max(0, i-3):min(len(ns), i+3)])
		}
	}
}

// reader reads a session's events from a node as they come, each read after the last seq.
type reader struct {
	n        *node
	id       string
	evs      []event
	failures int // reads answered RESOURCE_UNAVAILABLE
	lastErr  error
}

func (r *reader) last() uint64 {
	if len(r.evs) == 0 {
		return 0
	}
	return r.evs[len(r.evs)-1].Seq
}

// more reads what came since the last read and reports whether anything did.
func (r *reader) more(t *testing.T) bool {
	t.Helper()
	evs, err := r.n.tryEvents(t, r.id, r.last())
	if err != nil {
		// Only RESOURCE_UNAVAILABLE is a reason to try again: the cluster's store not answering
		// for now (a leader being elected).
		if !strings.Contains(err.Error(), string(abi.CodeResourceUnavailable)) {
			t.Fatal(err)
		}
		r.failures++
		r.lastErr = err
		return false
	}
	r.evs = append(r.evs, evs...)
	return len(evs) > 0
}

// until reads until the count printed so far reaches at least n (or the session ends).
func (r *reader) until(t *testing.T, n int) {
	t.Helper()
	var ns []int
	ok := poll(func() bool {
		r.more(t)
		ns = numbers(r.evs)
		return len(ns) > 0 && ns[len(ns)-1] >= n
	})
	if !ok {
		t.Fatalf("node %s did not read a count to %d in session %s within %s: %d events up to seq %d, the count to %d; %d reads failed, the last with %v",
			r.n.name, n, r.id, testkit.Patience(), len(r.evs), r.last(), len(ns), r.failures, r.lastErr)
	}
}

// streamLeader is the server that leads stream name, as the cluster answers (empty: none).
func (c *cluster) streamLeader(ctx context.Context, name string, except ...string) (string, error) {
	var urls []string
	for _, s := range c.servers {
		if !slices.Contains(except, s.name) {
			urls = append(urls, s.url())
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(5*time.Second))
	if err != nil {
		return "", err
	}
	defer nc.Close()
	// One question, one answer: a stream with no leader does not answer at all.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return "", err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil {
		return "", errors.New("no cluster info")
	}
	return info.Cluster.Leader, nil
}

// The cluster's streams: the events, the session records and the node heartbeats.
const (
	eventStream = "NEXUS_nexus_EVENTS"
	recordsKV   = "KV_NEXUS_nexus_SESSIONS"
	nodesKV     = "KV_NEXUS_nexus_SESSIONS_NODES"
)

// TestClusterE2E runs issue 27's faults on three nats-servers and three nexus nodes, one
// subtest after the other on the same cluster: each leaves it whole for the next.
func TestClusterE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the cluster's end-to-end test runs six processes for about a minute")
	}
	c := newCluster(t)
	for _, s := range c.servers {
		c.startServer(s)
	}
	c.waitJetStream()
	for _, name := range []string{"a", "b", "c"} {
		c.startNode(c.addNode(name, "--nats", c.urls(), "--node", name, "--nats-replicas", "3", "--node-lost", "3s"))
	}
	a, b, cn := c.nodes["a"], c.nodes["b"], c.nodes["c"]

	t.Run("ListAndReadAcrossNodes", func(t *testing.T) {
		id := a.openTerminal(t)
		a.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 1 50")
		s, ok := find(b.list(t), id)
		if !ok || s.Node != "a" || s.Status != "active" {
			t.Fatalf("node b lists a's terminal as %+v (found %v), want active on node a", s, ok)
		}
		r := &reader{n: cn, id: id}
		r.until(t, 50)
		checkSeqs(t, "read from c", r.evs, 1)
		checkCounting(t, "read from c", numbers(r.evs))
		// afterSeq from the middle gives the rest, numbered on.
		mid := r.evs[len(r.evs)/2].Seq
		rest := cn.events(t, id, mid)
		checkSeqs(t, "read from c after the middle", rest, mid+1)
		if len(rest) == 0 || rest[len(rest)-1].Seq < r.last() {
			t.Fatalf("c after seq %d read %d events, up to %d; want up to at least %d", mid, len(rest), rest[len(rest)-1].Seq, r.last())
		}
		t.Logf("a's terminal read from c: %d events, a count to %d", len(r.evs), len(numbers(r.evs)))
	})

	t.Run("TerminalDrivenFromOtherNodes", func(t *testing.T) {
		// A terminal on a, typed into from b and then from c (forwarded to a by request/reply),
		// resized from b, its output read on a; then closed from c.
		id := a.openTerminal(t)
		b.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 1 20")
		r := &reader{n: a, id: id}
		r.until(t, 20)
		cn.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 21 40")
		r.until(t, 40)
		checkSeqs(t, "read on a", r.evs, 1)
		checkCounting(t, "typed from b then c, read on a", numbers(r.evs))
		b.ok(t, "session", "resize", "--session-id", id, "--width", "101", "--height", "33")
		b.ok(t, "agent", "terminal", "send", "--session-id", id, "stty size")
		if !poll(func() bool {
			r.more(t)
			return strings.Contains(strings.ReplaceAll(abi.StripANSI(outputOf(r.evs)), "\r", ""), "\n33 101\n")
		}) {
			t.Fatalf("a resize from b: stty size on a never said 33 101: %q", abi.StripANSI(outputOf(r.evs)))
		}
		cn.ok(t, "session", "close", "--session-id", id)
		if !poll(func() bool {
			s, ok := find(a.list(t), id)
			return ok && s.Status == "closed"
		}) {
			t.Fatalf("closed from c: a never listed %s closed", id)
		}
	})

	t.Run("NATSServerKilledMidFlood", func(t *testing.T) {
		const count = 300000
		id := a.openTerminal(t)
		a.ok(t, "agent", "terminal", "send", "--session-id", id, fmt.Sprintf("seq 1 %d", count))
		before := &reader{n: a, id: id}
		before.until(t, 2000)
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		leader, err := c.streamLeader(ctx, eventStream)
		if err != nil || leader == "" {
			t.Fatalf("the event stream's leader: %q, %v", leader, err)
		}
		victim := c.server(leader)
		victim.p.kill(t, syscall.SIGKILL)
		ns := numbers(before.evs)
		t.Logf("killed nats-server %s (the event stream's leader) after a's log acknowledged %d events, a count to %d of %d", leader, len(before.evs), ns[len(ns)-1], count)

		// The flood goes on to its end, and b reads every line of it once, in order.
		after := &reader{n: b, id: id}
		t.Cleanup(func() {
			if t.Failed() {
				out, _, err := a.run(context.Background(), t, "session", "get", "--session-id", id)
				t.Logf("a's session after the failure: %s %v", out, err)
				evs, err := a.tryEvents(t, id, 0)
				t.Logf("a reads %d events, the count to %d (%v)", len(evs), len(numbers(evs)), err)
				// Its goroutines, for the stall seen once under make test whose cause is not
				// known (the terminal's reader stopped calling Output while the stream had no
				// leader): the test has failed, so node a may go.
				mark := a.p.out.Len()
				a.p.kill(t, syscall.SIGQUIT)
				t.Logf("node a's goroutines of nexus's own packages at the failure:\n%s", ownStacks(a.p.out.String()[mark:], 30000))
			}
		})
		after.until(t, count)
		checkSeqs(t, "read from b after the kill", after.evs, 1)
		got := numbers(after.evs)
		checkCounting(t, "read from b after the kill", got)
		if len(got) != count {
			t.Fatalf("b read a count to %d, want %d", len(got), count)
		}
		for i, e := range before.evs {
			if after.evs[i].Seq != e.Seq || !bytes.Equal(after.evs[i].Output, e.Output) {
				t.Fatalf("event %d read before the kill (seq %d) differs after it (seq %d)", i, e.Seq, after.evs[i].Seq)
			}
		}
		t.Logf("acknowledged before the kill: %d events; after: %d events, seq 1..%d, the count 1..%d whole (reads answered RESOURCE_UNAVAILABLE meanwhile: %d)", len(before.evs), len(after.evs), after.last(), len(got), after.failures)

		// The cluster goes on with two servers of three: each node opens a session.
		for _, n := range []*node{a, b, cn} {
			nid := n.openTerminal(t)
			n.ok(t, "agent", "terminal", "send", "--session-id", nid, "seq 1 3")
			(&reader{n: b, id: nid}).until(t, 3)
		}
		leader, err = c.streamLeader(ctx, eventStream, victim.name)
		t.Logf("the event stream's leader with %s down: %s (%v)", victim.name, leader, err)

		c.startServer(victim)
		c.waitJetStream()
	})

	t.Run("NodeKilled", func(t *testing.T) {
		// a's terminal, its count read from b: everything b read is acknowledged.
		id := a.openTerminal(t)
		a.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 1 500")
		before := &reader{n: b, id: id}
		before.until(t, 500)
		killed := time.Now()
		a.p.kill(t, syscall.SIGKILL)
		for _, n := range []*node{b, cn} {
			testkit.Eventually(t, "node "+n.name+" lists a's terminal as error, node-lost", func() bool {
				s, ok := find(n.list(t), id)
				return ok && s.Status == "error" && s.Metadata.CloseReason == "node-lost"
			})
		}
		t.Logf("a killed -9: its terminal node-lost on b and c %v later (--node-lost 3s)", time.Since(killed).Round(100*time.Millisecond))
		after := b.events(t, id, 0)
		checkSeqs(t, "read from b after a was killed", after, 1)
		if len(after) < len(before.evs) {
			t.Fatalf("b read %d events before a was killed, %d after", len(before.evs), len(after))
		}
		for i, e := range before.evs {
			if after[i].Seq != e.Seq || !bytes.Equal(after[i].Output, e.Output) {
				t.Fatalf("event seq %d read before the kill differs after it", e.Seq)
			}
		}
		var tail []string
		for _, e := range after[len(before.evs):] {
			tail = append(tail, fmt.Sprintf("%d %s %v", e.Seq, e.Type, e.Payload["status"]))
		}
		t.Logf("acknowledged before the kill (read on b): %d events; read on b after: %d, the last %v", len(before.evs), len(after), tail)
		checkCounting(t, "read from b after a was killed", numbers(after))
		c.startNode(a) // for the subtests after
	})

	t.Run("RestartEverything", func(t *testing.T) {
		// A live terminal on each node, then every session's events as b reads them.
		for _, n := range []*node{a, b, cn} {
			id := n.openTerminal(t)
			n.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 1 20")
			(&reader{n: b, id: id}).until(t, 20)
		}
		before := map[string][]event{}
		live := map[string]bool{}
		for _, ss := range b.list(t) {
			before[ss.SessionID] = b.events(t, ss.SessionID, 0)
			live[ss.SessionID] = ss.Status == "active"
		}
		for _, n := range []*node{a, b, cn} {
			n.p.kill(t, syscall.SIGKILL)
		}
		for _, srv := range c.servers {
			srv.p.kill(t, syscall.SIGKILL)
		}
		restarted := time.Now()
		for _, srv := range c.servers {
			c.startServer(srv)
		}
		c.waitJetStream()
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		for _, stream := range []string{eventStream, recordsKV, nodesKV} {
			var leader string
			var lerr error
			if !poll(func() bool {
				leader, lerr = c.streamLeader(ctx, stream)
				return leader != ""
			}) {
				t.Fatalf("stream %s has no leader %s after the servers were started again (the last answer: %v)", stream, testkit.Patience(), lerr)
			}
			t.Logf("stream %s: leader %s %v after the servers were started again", stream, leader, time.Since(restarted).Round(100*time.Millisecond))
		}
		for _, n := range []*node{a, b, cn} {
			c.startNode(n)
		}
		// Every session is there on every node; the live terminals died with their nodes, and
		// their close numbers on after the last event before the restart.
		for _, n := range []*node{a, b, cn} {
			var wrong []string
			ok := poll(func() bool {
				ss := n.list(t)
				wrong = wrong[:0]
				for id := range before {
					if s, ok := find(ss, id); !ok || s.Status == "active" {
						wrong = append(wrong, fmt.Sprintf("%s (found %v: %+v)", id, ok, s))
					}
				}
				return len(wrong) == 0
			})
			if !ok {
				t.Fatalf("node %s after the restart: missing or still live: %v", n.name, wrong)
			}
		}
		continued := 0
		for id, evs := range before {
			after := cn.events(t, id, 0)
			checkSeqs(t, "read from c after the restart", after, 1)
			if len(after) < len(evs) {
				t.Fatalf("session %s: %d events before the restart, %d after", id, len(evs), len(after))
			}
			for i, e := range evs {
				if after[i].Seq != e.Seq || !bytes.Equal(after[i].Output, e.Output) || after[i].Type != e.Type {
					t.Fatalf("session %s: event seq %d differs after the restart", id, e.Seq)
				}
			}
			if live[id] {
				if len(after) == len(evs) || after[len(after)-1].Type != abi.EventClose {
					t.Fatalf("session %s was live: no close after the restart (%d events before, %d after)", id, len(evs), len(after))
				}
				continued++
			}
		}
		t.Logf("after restarting 3 servers and 3 nodes: %d sessions, every event there; %d live ones closed with events numbered on", len(before), continued)
		// The cluster takes new sessions on every node again.
		for _, n := range []*node{a, b, cn} {
			id := n.openTerminal(t)
			n.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 1 3")
			(&reader{n: b, id: id}).until(t, 3)
		}
	})

	t.Run("NodeCutOff", func(t *testing.T) {
		// c's NATS connection goes through a proxy the test cuts.
		px := testkit.StartProxy(t, c.server("n3").client)
		cn.p.kill(t, syscall.SIGTERM)
		cn.args = []string{"--nats", "nats://" + px.Addr, "--node", "c", "--nats-replicas", "3", "--node-lost", "3s"}
		c.startNode(cn)
		id := cn.openTerminal(t)
		cn.ok(t, "agent", "terminal", "send", "--session-id", id, "seq 1 10")
		seen := &reader{n: b, id: id}
		seen.until(t, 10)

		px.Cut()
		// A write c can no longer replicate fails, and says so; it does not hang.
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		started := time.Now()
		out, stderr, err := cn.run(ctx, t, "agent", "terminal", "open", "--project", "e2e")
		took := time.Since(started)
		if err == nil || ctx.Err() != nil {
			t.Fatalf("c cut off: terminal open = %v after %v (ctx %v), want an error, not a hang\n%s", err, took, ctx.Err(), out)
		}
		t.Logf("c cut off: terminal open failed after %v: %s", took.Round(100*time.Millisecond), strings.TrimSpace(stderr))
		failedID := uuidRE.FindString(stderr) // the session the failed open would have made
		testkit.Eventually(t, "b lists c's terminal as error, node-lost", func() bool {
			s, ok := find(b.list(t), id)
			return ok && s.Status == "error" && s.Metadata.CloseReason == "node-lost"
		})

		px.Restore(t)
		// c is back: a session made on c now works, and c's terminal, typed into on c, is
		// not revived: its record stays error, its log ends with the close b wrote.
		testkit.Eventually(t, "c takes sessions again", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
			defer cancel()
			_, _, err := cn.run(ctx, t, "agent", "terminal", "open", "--project", "e2e")
			return err == nil
		})
		_, _, _ = cn.run(ctx, t, "agent", "terminal", "send", "--session-id", id, "seq 1 5")
		fresh := cn.openTerminal(t)
		cn.ok(t, "agent", "terminal", "send", "--session-id", fresh, "seq 1 4")
		(&reader{n: b, id: fresh}).until(t, 4) // c's writes after the typing above are read on b
		for _, n := range []*node{a, b} {
			ss := n.list(t)
			s, _ := find(ss, id)
			if s.Status != "error" || s.Metadata.CloseReason != "node-lost" || s.Node != "c" {
				t.Fatalf("node %s lists c's cut-off terminal as %+v after c came back, want error, node-lost, on c", n.name, s)
			}
			// The open that failed while c was cut off left nothing behind: no record of a
			// session nobody has.
			if o, ok := find(ss, failedID); failedID != "" && ok {
				t.Fatalf("node %s lists the session whose open failed on c while it was cut off: %+v", n.name, o)
			}
		}
		evs := b.events(t, id, 0)
		checkSeqs(t, "c's cut-off terminal read on b", evs, 1)
		if last := evs[len(evs)-1]; last.Type != abi.EventClose {
			t.Fatalf("c's cut-off terminal: the last event read on b is %d %s, want the close b wrote", last.Seq, last.Type)
		}
		t.Logf("c's cut-off terminal: %d events read on b before the cut, %d after c came back and was typed into, the last the node-lost close", len(seen.evs), len(evs))
	})
}

// TestClusterWalkthrough runs docs/cluster.md's three-machine walkthrough as printed, on
// loopback: every command of the "Three machines" section's console blocks, on the machine its
// prompt names (a$, b$, c$), with each machine's addresses mapped to loopback ports of its own
// (10.0.0.N:4222 and :6222), /var/lib/nats and /srv/demo to directories of the test, and the
// session id the page shows to the one the terminal open printed. nats-server and nexus serve
// keep running; the nodes start once JetStream has its leader, as the page says. Every other
// command must succeed, and the page's claims hold: b lists a's terminal with node a, c reads
// its output.
func TestClusterWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the walkthrough runs six processes")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := walkthrough(t, string(doc))
	c := newCluster(t)
	host := map[string]string{"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
	subst := []string{"/srv/demo", filepath.Join(t.TempDir(), "demo")}
	for i, m := range []string{"a", "b", "c"} {
		srv := c.servers[i]
		_, port, _ := net.SplitHostPort(srv.client)
		// Replaced in argument order: the server's own address and port first.
		subst = append([]string{"--addr " + host[m] + " --port 4222", "--addr 127.0.0.1 --port " + port}, subst...)
		subst = append(subst, host[m]+":4222", srv.client, host[m]+":6222", srv.route)
		c.addNode(m)
	}
	var docID, realID string // the page's session id, and the one terminal open printed
	for _, st := range steps {
		if docID == "" {
			docID = uuidRE.FindString(st.command)
		}
	}
	lastOut := map[string]string{} // each machine's last command's output
	for _, st := range steps {
		line := strings.NewReplacer(subst...).Replace(st.command)
		if docID != "" {
			line = strings.ReplaceAll(line, docID, realID)
		}
		args := strings.Fields(line)
		switch {
		case args[0] == "nats-server":
			srv := c.servers[strings.Index("abc", st.machine)]
			for k, a := range args {
				if a == "/var/lib/nats" {
					args[k] = srv.dir
				}
			}
			srv.args = args[1:]
			c.startServer(srv)
		case len(args) > 1 && args[0] == "nexus" && args[1] == "serve":
			if st.machine == "a" {
				c.waitJetStream() // the page: nodes start once JetStream has its leader
			}
			n := c.nodes[st.machine]
			n.args = args[2:]
			c.startNode(n)
		default:
			n := c.nodes[st.machine]
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
			cmd := exec.CommandContext(ctx, "bash", "-c", line) //nolint:gosec // the page's command
			cmd.Env = append(os.Environ(), n.env()...)
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("docs/cluster.md line %d: %s$ %s: %v\n%s", st.line, st.machine, line, err, out)
			}
			lastOut[st.machine] = string(out)
			if strings.Contains(line, "terminal open") {
				var s session
				if err := json.Unmarshal(out, &s); err != nil {
					t.Fatalf("terminal open printed %s: %v", out, err)
				}
				realID = s.SessionID
			}
			if strings.Contains(line, "session events") && !strings.Contains(string(out), "hello from a") {
				// The page's command prints what is there when it runs: run it again until the
				// typed line's output has come, as a person would.
				testkit.Eventually(t, "c reads a's terminal's output", func() bool {
					out, err := exec.Command("bash", "-c", line).CombinedOutput() //nolint:gosec // as above
					lastOut[st.machine] = string(out)
					return err == nil && strings.Count(string(out), "hello from a") >= 2
				})
			}
		}
	}
	if realID == "" || docID == "" {
		t.Fatal("the walkthrough opened no terminal, or names no session id")
	}
	var list struct {
		Sessions []session `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(lastOut["b"]), &list); err != nil {
		t.Fatalf("b's session list: %v\n%s", err, lastOut["b"])
	}
	if s, ok := find(list.Sessions, realID); !ok || s.Node != "a" {
		t.Fatalf("b lists a's terminal as %+v (found %v), want node a", s, ok)
	}
}

// walkStep is a command of the walkthrough and the machine it runs on.
type walkStep struct {
	line             int
	machine, command string
}

var promptRE = regexp.MustCompile(`^([abc])\$ (.*)$`)

// walkthrough returns the commands of the console blocks of docs/cluster.md's "Three
// machines" section.
func walkthrough(t *testing.T, doc string) []walkStep {
	t.Helper()
	var steps []walkStep
	in, section := false, false
	for i, l := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(l, "## "):
			section = strings.HasPrefix(l, "## Three machines")
		case section && strings.TrimSpace(l) == "```console":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in:
			m := promptRE.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("docs/cluster.md line %d: %q is no command of a, b or c", i+1, l)
			}
			steps = append(steps, walkStep{line: i + 1, machine: m[1], command: m[2]})
		}
	}
	if len(steps) < 9 {
		t.Fatalf("docs/cluster.md's walkthrough has %d commands: the section moved?", len(steps))
	}
	return steps
}

// TestClusterUnreachable: nexus serve with no NATS at the URL exits non-zero naming the URL,
// never a node carrying on alone.
func TestClusterUnreachable(t *testing.T) {
	addr := testkit.FreeAddr(t) // nothing listens there
	n := &node{name: "x", home: testkit.ShortTempDir(t)}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	_, stderr, err := n.run(ctx, t, "serve", "--nats", "nats://"+addr, "--node", "x")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("nexus serve with NATS unreachable: %v, want a non-zero exit", err)
	}
	if !strings.Contains(stderr, "nats://"+addr) {
		t.Fatalf("nexus serve's error does not name the URL nats://%s: %s", addr, stderr)
	}
	if fileExists(filepath.Join(n.home, "state", "live")) {
		t.Fatal("nexus serve with NATS unreachable made a store of its own (state/live)")
	}
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
