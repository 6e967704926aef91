package jetstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// natsCluster is three real nats-servers with JetStream, clustered over loopback routes in the
// test process, each with its own store.
type natsCluster struct {
	servers []*server.Server
	opts    []jetstore.EmbeddedOptions // each server's, to start it again
}

func startCluster(t testing.TB) *natsCluster {
	t.Helper()
	ctx := testCtx(t)
	c := &natsCluster{}
	dir := t.TempDir()
	// A clustered JetStream server needs its routes at start, so the route ports are chosen
	// first; each server lists all three (its own route is recognised and skipped).
	var addrs, routes []string
	for range 3 {
		addr := testkit.FreeAddr(t)
		addrs = append(addrs, addr)
		routes = append(routes, "nats-route://"+addr)
	}
	for i := range 3 {
		o := jetstore.EmbeddedOptions{
			Name: fmt.Sprint("n", i), Dir: filepath.Join(dir, fmt.Sprint("n", i)),
			Cluster: "test", ClusterListen: addrs[i], Routes: routes,
		}
		s, err := jetstore.StartEmbedded(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		c.servers = append(c.servers, s)
		c.opts = append(c.opts, o)
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	testkit.Eventually(t, "a JetStream meta leader with three peers", func() bool {
		leaders := 0
		for _, s := range c.servers {
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
	return c
}

// restart starts server i again on its store and routes (its client port is a new one).
// shutDownLeader shuts down, in the background, the server leading stream; done is closed once
// it is down. It returns the server's name.
func (c *natsCluster) shutDownLeader(t *testing.T, ctx context.Context, stream string) (name string, done <-chan struct{}) {
	t.Helper()
	js, err := jetstream.New(c.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	var lost *server.Server
	for _, s := range c.servers {
		if s.Name() == leader {
			lost = s
		}
	}
	if lost == nil {
		t.Fatalf("no server named %q leads stream %s", leader, stream)
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		lost.Shutdown()
		lost.WaitForShutdown()
	}()
	return leader, ch
}

func (c *natsCluster) restart(t *testing.T, i int) {
	t.Helper()
	s, err := jetstore.StartEmbedded(testCtx(t), c.opts[i])
	if err != nil {
		t.Fatal(err)
	}
	c.servers[i] = s
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
}

// urls are the client URLs of the servers still running.
func (c *natsCluster) urls() []string {
	var out []string
	for _, s := range c.servers {
		if s.Running() {
			out = append(out, s.ClientURL())
		}
	}
	return out
}

func (c *natsCluster) connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := jetstore.Dial(testCtx(t), jetstore.DialOptions{URLs: c.urls(), Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (c *natsCluster) open(t *testing.T, opt jetstore.Options) *jetstore.Store {
	t.Helper()
	st, err := jetstore.Open(testCtx(t), c.connect(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

var clusterSeq atomic.Int64

// clusterName is a name of its own for each store a test opens, so tests never share a
// stream or a bucket.
func clusterName() string { return fmt.Sprint("c", clusterSeq.Add(1)) }

func TestContracts(t *testing.T) {
	c := startCluster(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			t.Run("EventLog", func(t *testing.T) {
				st := c.open(t, jetstore.Options{Cluster: clusterName(), Node: "a", Replicas: replicas})
				var n atomic.Int64
				livetest.RunEventLog(t, func(t *testing.T, limits live.LogLimits) live.EventLog {
					l, err := st.CreateLog(testCtx(t), fmt.Sprint("s", n.Add(1)), limits)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = l.Close(context.Background()) })
					return l
				})
			})
			t.Run("StateStore", func(t *testing.T) {
				livetest.RunStateStore(t, func(t *testing.T) live.StateStore {
					return c.open(t, jetstore.Options{Cluster: clusterName(), Node: "a", Replicas: replicas})
				})
			})
		})
	}
}

func event(text string) *live.Event {
	return &live.Event{Type: abi.EventData, Time: livetest.T0, SessionID: "s", Payload: live.Output(text)}
}

// twoLogs opens session s1's log at R3 on nodes a and b of cluster name (each its own
// connection and store), closed when the test ends.
func (c *natsCluster) twoLogs(t *testing.T, name string, limits live.LogLimits) []*jetstore.Log {
	t.Helper()
	var logs []*jetstore.Log
	for _, node := range []string{"a", "b"} {
		st := c.open(t, jetstore.Options{Cluster: name, Node: node, Replicas: 3})
		l, err := st.OpenLog(testCtx(t), "s1", limits)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		logs = append(logs, l)
	}
	return logs
}

// TestTwoAppenders: two nodes (each its own connection, store and log) append to one session's
// log at once; the numbers they are given cover 1..N with no gap and no duplicate, and both
// read the same log.
func TestTwoAppenders(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	const per = 100
	limits := live.LogLimits{Events: 4 * per, Bytes: 1 << 30, Pinned: 10}
	logs := c.twoLogs(t, name, limits)
	ctx := testCtx(t)
	seen := make([]map[uint64]string, 2)
	var wg sync.WaitGroup
	for i, l := range logs {
		seen[i] = map[uint64]string{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An append refused because the other node wrote first comes back as a
			// NotStoredError (to this Append or a later one): those numbers are not this
			// node's, and the appender appends again until per of its events are stored.
			j := 0
			for len(seen[i]) < per || j == 0 {
				text := fmt.Sprintf("%d/%d", i, j)
				j++
				res, err := l.Append(ctx, event(text))
				if err == nil {
					seen[i][res.First] = text
					if len(seen[i]) < per {
						continue
					}
					err = l.Flush(ctx)
					if err == nil {
						break
					}
				}
				var ns *jetstore.NotStoredError
				if !errors.As(err, &ns) {
					t.Error(err)
					return
				}
				for seq := ns.First; seq <= ns.Last; seq++ {
					delete(seen[i], seq)
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range logs {
		if err := catchUp(ctx, l, 2*per); err != nil {
			t.Fatal(err)
		}
		p, err := l.Read(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Events) != 2*per || p.Missed != 0 {
			t.Fatalf("read %d events (missed %d), want %d", len(p.Events), p.Missed, 2*per)
		}
		for k, e := range p.Events {
			want, ok := seen[0][e.Seq]
			if other, dup := seen[1][e.Seq]; dup {
				if ok {
					t.Fatalf("seq %d given to both appenders", e.Seq)
				}
				want, ok = other, true
			}
			if e.Seq != uint64(k+1) || !ok || string(e.Payload.(live.Output)) != want {
				t.Fatalf("event %d: seq %d %q, appended as %q", k, e.Seq, e.Payload, want)
			}
		}
	}
}

// forgetNotStored drops from acked the numbers an append's failure says were not acknowledged
// (an Append that returned before they were published gave them out); any other failure
// fails the test.
func forgetNotStored(t *testing.T, err error, acked map[uint64]string) {
	t.Helper()
	var ns *jetstore.NotStoredError
	if !errors.As(err, &ns) {
		t.Fatalf("append: %v", err)
	}
	for seq := ns.First; seq <= ns.Last; seq++ {
		delete(acked, seq)
	}
}

func catchUp(ctx context.Context, l live.EventLog, seq uint64) error {
	for {
		last, err := l.LastSeq(ctx)
		if err != nil || last >= seq {
			return err
		}
		if err := l.Wait(ctx, last); err != nil {
			return err
		}
	}
}

// TestServerLost shuts down one of three servers (R3) while a node appends: every append it
// acknowledged is read afterwards, with no gap, by a node that opens the log then, and the log
// goes on taking appends.
func TestServerLost(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	st := c.open(t, jetstore.Options{Cluster: name, Node: "a", Replicas: 3})
	limits := live.LogLimits{Events: 100000, Bytes: 1 << 30, Pinned: 10}
	l, err := st.OpenLog(testCtx(t), "s1", limits)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	acked := map[uint64]string{}
	var failed int
	appendOne := func(i int) {
		text := fmt.Sprint("e", i)
		// An append that fails (a leader moving) may or may not have been stored: the log
		// numbers the next one after whatever the stream holds.
		res, err := l.Append(ctx, event(text))
		if err == nil {
			acked[res.First] = text
			if i%10 == 9 {
				// Wait for the stream now and then, so publishes are in flight when the server
				// goes.
				err = l.Flush(ctx)
			}
		}
		if err != nil {
			if failed++; failed <= 5 {
				t.Logf("append %d: %v", i, err)
			}
			forgetNotStored(t, err, acked)
		}
	}
	for i := range 200 {
		appendOne(i)
	}
	// The server leading the stream goes, mid-appends.
	stream, _, _ := jetstore.Names(name)
	leader, done := c.shutDownLeader(t, ctx, stream)
	for i := 200; i < 400; i++ {
		appendOne(i)
	}
	<-done
	// The log goes on: appends after the loss are acknowledged again.
	before := len(acked)
	for i := 400; len(acked) < before+100 && i < 2000; i++ {
		appendOne(i)
	}
	if len(acked) < before+100 {
		t.Fatalf("only %d appends acknowledged after the loss (%d failed): the log did not go on", len(acked)-before, failed)
	}
	if err := l.Flush(ctx); err != nil {
		forgetNotStored(t, err, acked)
	}
	t.Logf("%d appends acknowledged, %d failed across the loss of %s", len(acked), failed, leader)

	// A node that opens the log now reads every acknowledged event, contiguous.
	other := c.open(t, jetstore.Options{Cluster: name, Node: "b", Replicas: 3})
	l2, err := other.OpenLog(ctx, "s1", limits)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l2.Close(ctx) }()
	p, err := l2.Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Missed != 0 {
		t.Errorf("missed %d [%d..%d]", p.Missed, p.MissedFrom, p.MissedTo)
	}
	for k, e := range p.Events {
		if e.Seq != uint64(k+1) {
			t.Fatalf("event %d has seq %d: a gap", k, e.Seq)
		}
	}
	got := map[uint64]string{}
	for _, e := range p.Events {
		got[e.Seq] = string(e.Payload.(live.Output))
	}
	for seq, text := range acked {
		if got[seq] != text {
			t.Errorf("acknowledged event %d %q reads as %q", seq, text, got[seq])
		}
	}
}

// TestClustersApart: two clusters on one NATS keep apart: records, logs and watches of one are
// not the other's.
func TestClustersApart(t *testing.T) {
	c := startCluster(t)
	ctx := testCtx(t)
	a := c.open(t, jetstore.Options{Cluster: "alpha", Node: "n"})
	b := c.open(t, jetstore.Options{Cluster: "beta", Node: "n"})
	rec := abi.Session{SessionID: "s1", Type: abi.TypeTerminal, CreatedAt: "2024", Status: abi.StatusActive, Metadata: map[string]any{}}
	if _, err := a.Put(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "s1"); !errors.Is(err, live.ErrNoRecord) {
		t.Errorf("beta reads alpha's record: %v", err)
	}
	if _, err := b.Put(ctx, rec, 0); err != nil {
		t.Errorf("beta cannot create an id alpha has: %v", err)
	}
	la, err := a.OpenLog(ctx, "s1", live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Close(ctx) }()
	if _, err := la.Append(ctx, event("alpha")); err != nil {
		t.Fatal(err)
	}
	lb, err := b.OpenLog(ctx, "s1", live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lb.Close(ctx) }()
	if last, _ := lb.LastSeq(ctx); last != 0 {
		t.Errorf("beta's log of s1 holds %d events of alpha's", last)
	}
	rs, err := b.List(ctx)
	if err != nil || len(rs) != 1 {
		t.Errorf("beta lists %d records, %v", len(rs), err)
	}
	sa, subjA, ka := jetstore.Names("alpha")
	sb, subjB, kb := jetstore.Names("beta")
	if sa == sb || ka == kb || strings.HasPrefix(subjA, subjB) || strings.HasPrefix(subjB, subjA) {
		t.Errorf("names overlap: %s %s %s / %s %s %s", sa, subjA, ka, sb, subjB, kb)
	}
}

// TestRestoreOwnSessions: a node restores the sessions it wrote, not another node's.
func TestRestoreOwnSessions(t *testing.T) {
	c := startCluster(t)
	ctx := testCtx(t)
	name := clusterName()
	a := c.open(t, jetstore.Options{Cluster: name, Node: "a"})
	b := c.open(t, jetstore.Options{Cluster: name, Node: "b"})
	for _, w := range []struct {
		st *jetstore.Store
		id string
	}{{a, "sa"}, {b, "sb"}} {
		rec := abi.Session{SessionID: w.id, Type: abi.TypeTerminal, CreatedAt: "2024", Status: abi.StatusActive, Metadata: map[string]any{}}
		if _, err := w.st.Put(ctx, rec, 0); err != nil {
			t.Fatal(err)
		}
		l, err := w.st.CreateLog(ctx, w.id, live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, event(w.id)); err != nil {
			t.Fatal(err)
		}
		_ = l.Close(ctx)
	}
	rs, err := a.Restore(ctx, live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Session.SessionID != "sa" {
		t.Fatalf("node a restores %d sessions: %+v", len(rs), rs)
	}
	p, err := rs[0].Log.Read(ctx, 0, 0)
	if err != nil || len(p.Events) != 1 || string(p.Events[0].Payload.(live.Output)) != "sa" {
		t.Errorf("restored log reads %+v, %v", p, err)
	}
	_ = rs[0].Log.Close(ctx)
}

// TestDialUnreachable: a NATS that cannot be reached is an error naming its URL, without the
// password or token the URL carries.
func TestDialUnreachable(t *testing.T) {
	ln, err := new(net.ListenConfig).Listen(testCtx(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	for _, url := range []string{"nats://" + addr, "nats://user:s3cret@" + addr, "nats://s3cret@" + addr} {
		_, err := jetstore.Dial(testCtx(t), jetstore.DialOptions{URLs: []string{url}})
		if err == nil || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("dial %s: %v", url, err)
		}
	}
}

// TestAppendRefused: an append this node numbered on a stale view of the subject (another node
// appended since) is refused by the stream; Append had already returned, so the failure comes
// back from Flush (or the next Append) as a NotStoredError naming the numbers given out, and
// the log numbers its next append after what the stream holds: no gap, no duplicate.
func TestAppendRefused(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ctx := testCtx(t)
	limits := live.LogLimits{Events: 100, Bytes: 1 << 20, Pinned: 10}
	logs := c.twoLogs(t, name, limits)
	a, b := logs[0], logs[1]
	if _, err := a.Append(ctx, event("a1")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// b opened before a's append: it numbers its own 1 and 2.
	for _, text := range []string{"b1", "b2"} {
		if _, err := b.Append(ctx, event(text)); err != nil {
			t.Fatal(err)
		}
	}
	err := b.Flush(ctx)
	var ns *jetstore.NotStoredError
	if !errors.As(err, &ns) || ns.First != 1 || ns.Last != 2 {
		t.Fatalf("flush after a refused append: %v, want events 1..2 not stored", err)
	}
	res, err := b.Append(ctx, event("b3"))
	if err != nil || res.First != 2 {
		t.Fatalf("append after the refusal: %+v, %v; want number 2", res, err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if err := catchUp(ctx, l, 2); err != nil {
			t.Fatal(err)
		}
		p, err := l.Read(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range p.Events {
			got = append(got, fmt.Sprint(e.Seq, string(e.Payload.(live.Output))))
		}
		if fmt.Sprint(got) != "[1a1 2b3]" {
			t.Errorf("log reads %v, want [1a1 2b3]", got)
		}
	}
}

// TestListEveryNode: two registries (two nodes) on one cluster's store each list both nodes'
// sessions, each with the node that owns it; a node's closed session is listed with all only.
func TestListEveryNode(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ctx := testCtx(t)
	regs := map[string]*live.Registry{}
	ids := map[string]string{}
	for _, node := range []string{"a", "b"} {
		st := c.open(t, jetstore.Options{Cluster: name, Node: node, Replicas: 3})
		r, err := live.New(ctx, live.Config{Node: node, Store: st}, livetest.NewFakeKind(abi.TypeTerminal, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		s, err := r.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
		if err != nil {
			t.Fatal(err)
		}
		regs[node], ids[node] = r, s.SessionID
	}
	for node, r := range regs {
		got, err := r.List(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]string{}
		for _, s := range got {
			owners[s.SessionID] = s.Node
		}
		if len(got) != 2 || owners[ids["a"]] != "a" || owners[ids["b"]] != "b" {
			t.Errorf("node %s lists %v, want %s on a and %s on b", node, owners, ids["a"], ids["b"])
		}
		for _, owner := range []string{"a", "b"} {
			if s, err := r.Get(ctx, ids[owner]); err != nil || s.Node != owner {
				t.Errorf("node %s gets %s's session: %+v, %v", node, owner, s, err)
			}
		}
	}
	if _, err := regs["a"].Get(ctx, "no-such-session"); err == nil {
		t.Error("a session no node has is found")
	}
	if _, err := regs["b"].Close(ctx, ids["b"], abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	// Node a reads b's session's events from the shared stream, after any sequence, as b
	// does, and learns the session is done.
	own, err := regs["b"].Read(ctx, ids["b"], 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Events) < 2 || !own.Done {
		t.Fatalf("node b reads its closed session: %d events, done %v", len(own.Events), own.Done)
	}
	last, err := regs["a"].LastSeq(ctx, ids["b"])
	if err != nil || last != own.Next {
		t.Errorf("node a: b's session's last sequence %d, %v; want %d", last, err, own.Next)
	}
	for after := uint64(0); after <= own.Next; after++ {
		b, err := regs["a"].Read(ctx, ids["b"], after, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := own.Events[after:]; fmt.Sprint(seqTypes(b.Events)) != fmt.Sprint(seqTypes(want)) || b.Next != own.Next || !b.Done {
			t.Errorf("node a reads b's session after %d: %v next %d done %v; want %v next %d done", after, seqTypes(b.Events), b.Next, b.Done, seqTypes(want), own.Next)
		}
	}
	for _, all := range []bool{false, true} {
		got, err := regs["a"].List(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 1, true: 2}[all]; len(got) != want {
			t.Errorf("node a lists %d sessions (all=%v), want %d: %+v", len(got), all, want, got)
		}
	}
}

func seqTypes(events []*live.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprint(e.Seq, e.Type))
	}
	return out
}

// takeOverKind is a fake kind whose sessions outlive their node: it keeps the lost sessions
// it is told to take over.
type takeOverKind struct {
	*livetest.FakeKind
	lost chan abi.Session
}

func (k *takeOverKind) TakeOver(_ context.Context, s abi.Session) { k.lost <- s }

// TestNodeLost: three nodes heartbeat on their sweeps (a clock the test sets); node a's
// connection goes without a clean close. Within the bound nothing happens; past it the two
// survivors, sweeping at once, mark a's live session error with reason node-lost: one of them
// wins, so its log gets one close event, which both read. The record then holds the metadata
// a's session had (its log's; a record is written only at a session's start and end), and the
// winner's kind, a live.TakeOverer, is told the session with it.
func TestNodeLost(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ctx := testCtx(t)
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	regs := map[string]*live.Registry{}
	kinds := map[string]*takeOverKind{}
	var conns []*nats.Conn
	for _, node := range []string{"a", "b", "c"} {
		nc := c.connect(t)
		conns = append(conns, nc)
		st, err := jetstore.Open(ctx, nc, jetstore.Options{Cluster: name, Node: node, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		// The sweeper's own ticks are an hour apart: the test sweeps with its own times.
		kinds[node] = &takeOverKind{FakeKind: livetest.NewFakeKind(abi.TypeTerminal, false), lost: make(chan abi.Session, 2)}
		r, err := live.New(ctx, live.Config{Node: node, Store: st, Sweep: time.Hour, Now: func() time.Time { return t0 }}, kinds[node])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		regs[node] = r
	}
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	// Metadata set after the start (an ai-chat's state, as a turn runs): on the log only.
	kinds["a"].Instance(s.SessionID).SetMetadata(map[string]any{"chatKey": "agent:main:main"})
	for _, node := range []string{"a", "b", "c"} {
		regs[node].Sweep(ctx, t0)
	}
	conns[0].Close() // node a is gone: no more heartbeats, no clean close

	sweep := func(at time.Time) {
		var wg sync.WaitGroup
		for _, node := range []string{"b", "c"} {
			wg.Add(1)
			go func() { defer wg.Done(); regs[node].Sweep(ctx, at) }()
		}
		wg.Wait()
	}
	sweep(t0.Add(live.DefaultNodeLost))
	if got, err := regs["b"].Get(ctx, s.SessionID); err != nil || got.Status != abi.StatusActive {
		t.Fatalf("within the bound: %+v, %v; want active", got, err)
	}
	sweep(t0.Add(live.DefaultNodeLost + time.Second))
	for _, node := range []string{"b", "c"} {
		got, err := regs[node].Get(ctx, s.SessionID)
		if err != nil || got.Status != abi.StatusError || got.Metadata["closeReason"] != live.CloseNodeLost || got.Node != "a" {
			t.Fatalf("node %s: past the bound: %+v, %v; want error, node-lost, on a", node, got, err)
		}
		if got.Metadata["backend"] != "fake" || got.Metadata["chatKey"] != "agent:main:main" {
			t.Errorf("node %s: the node-lost session's metadata %v, want a's (backend fake, chatKey agent:main:main)", node, got.Metadata)
		}
		b, err := regs[node].Read(ctx, s.SessionID, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		closes := 0
		for _, e := range b.Events {
			if p, ok := e.Payload.(abi.ClosePayload); ok {
				closes++
				if p.Reason != live.CloseNodeLost || p.Status != abi.StatusError {
					t.Errorf("node %s reads close %+v", node, p)
				}
			}
		}
		if closes != 1 || !b.Done {
			t.Errorf("node %s reads %d close events (done %v), want 1: %v", node, closes, b.Done, seqTypes(b.Events))
		}
	}
	// The node that marked it is told to take it over, with its metadata; the other is not.
	select {
	case lost := <-kinds["b"].lost:
		checkLost(t, "b", lost, s.SessionID)
		if len(kinds["c"].lost) != 0 {
			t.Errorf("b and c were both told to take %s over", s.SessionID)
		}
	case lost := <-kinds["c"].lost:
		checkLost(t, "c", lost, s.SessionID)
		if len(kinds["b"].lost) != 0 {
			t.Errorf("b and c were both told to take %s over", s.SessionID)
		}
	case <-ctx.Done():
		t.Fatal("no node was told to take the lost session over")
	}
	// Later sweeps leave it be; a session b makes is not c's to mark while b heartbeats.
	sb, err := regs["b"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	// b beats before c looks (one sweep after the other): swept at once after the clock jumped
	// a minute, c could read b's beat from before the jump and mark b's session (seen once
	// under -race).
	for _, at := range []time.Time{t0.Add(time.Minute), t0.Add(2 * time.Minute)} {
		regs["b"].Sweep(ctx, at)
		regs["c"].Sweep(ctx, at)
	}
	if got, err := regs["c"].Get(ctx, sb.SessionID); err != nil || got.Status != abi.StatusActive {
		t.Errorf("b's session seen from c: %+v, %v; want active", got, err)
	}

	// Node a comes back: the session it owned, whose record another node wrote last, is listed,
	// got and read on a as on the others (it was on none of a's lists: seen through the binary,
	// TestClusterE2E/RestartEverything).
	st, err := jetstore.Open(ctx, c.connect(t), jetstore.Options{Cluster: name, Node: "a", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := live.New(ctx, live.Config{Node: "a", Store: st, Sweep: time.Hour, Now: func() time.Time { return t0.Add(3 * time.Minute) }},
		livetest.NewFakeKind(abi.TypeTerminal, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ra.Shutdown(context.Background()) })
	list, err := ra.List(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(o abi.Session) bool { return o.SessionID == s.SessionID && o.Status == abi.StatusError }) {
		t.Errorf("a, back, lists %d sessions, not its node-lost %s", len(list), s.SessionID)
	}
	if got, err := ra.Get(ctx, s.SessionID); err != nil || got.Status != abi.StatusError {
		t.Errorf("a, back, gets its node-lost session: %+v, %v", got, err)
	}
	if b, err := ra.Read(ctx, s.SessionID, 0, 0, 0); err != nil || !b.Done || len(b.Events) == 0 {
		t.Errorf("a, back, reads its node-lost session: %d events, done %v, %v", len(b.Events), b.Done, err)
	}

	// a, back, makes a session before its first heartbeat; a node that has not marked a yet
	// (d, just started) sees a's beat from before and finds a lost, but a session made after
	// that beat is not lost: a was alive since (seen through the binary: every node restarted,
	// a new session marked node-lost by another node within a second of its creation).
	fresh, err := ra.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	std, err := jetstore.Open(ctx, c.connect(t), jetstore.Options{Cluster: name, Node: "d", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := live.New(ctx, live.Config{Node: "d", Store: std, Sweep: time.Hour, Now: func() time.Time { return t0.Add(3*time.Minute + time.Second) }},
		livetest.NewFakeKind(abi.TypeTerminal, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rd.Shutdown(context.Background()) })
	rd.Sweep(ctx, t0.Add(3*time.Minute+time.Second))
	if got, err := rd.Get(ctx, fresh.SessionID); err != nil || got.Status != abi.StatusActive {
		t.Errorf("a's session made after its last heartbeat, seen from d: %+v, %v; want active", got, err)
	}
}

// twoNodes are registries a and b on one embedded server, of one cluster, whose sweepers
// tick an hour apart (the test sweeps), with clock now (nil: time.Now).
func twoNodes(t *testing.T, now func() time.Time) map[string]*live.Registry {
	t.Helper()
	srv, err := jetstore.StartEmbedded(testCtx(t), jetstore.EmbeddedOptions{Name: "n", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx := testCtx(t)
	name := clusterName()
	regs := map[string]*live.Registry{}
	for _, node := range []string{"a", "b"} {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		st, err := jetstore.Open(ctx, nc, jetstore.Options{Cluster: name, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		r, err := live.New(ctx, live.Config{Node: node, Store: st, Sweep: time.Hour, Now: now}, livetest.NewFakeKind(abi.TypeTerminal, false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		regs[node] = r
	}
	return regs
}

// TestNodeLostBeforeItsFirstSweep: a node that goes silent before its sweeper first ran (it
// heartbeats on its sweeps; here it never sweeps) still has its sessions marked node-lost by
// the others: it heartbeat as it started, before it could make a session. (Seen in
// TestClusterConversationPartition: a node cut off within its first second left its ai-chat
// session active on the others for good, and its conversation was never taken over.)
func TestNodeLostBeforeItsFirstSweep(t *testing.T) {
	ctx := testCtx(t)
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	// The sweepers' own ticks are an hour apart: the test sweeps (a never does, as a node
	// cut off within its first second).
	regs := twoNodes(t, func() time.Time { return t0 })
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	regs["b"].Sweep(ctx, t0.Add(live.DefaultNodeLost+time.Second))
	if got, err := regs["b"].Get(ctx, s.SessionID); err != nil || got.Status != abi.StatusError || got.Metadata["closeReason"] != live.CloseNodeLost {
		t.Fatalf("a's session, a gone before its first sweep: %+v, %v; want error, node-lost", got, err)
	}
}

// TestRecordCarriesStartMetadata: the record of a session another node reads carries the
// metadata its kind set as it started (what a node taking a lost node's ai-chat over reopens it
// with: seen in TestClusterConversationPartition, where the record had none and the takeover
// failed, "no backend named").
func TestRecordCarriesStartMetadata(t *testing.T) {
	ctx := testCtx(t)
	regs := twoNodes(t, nil)
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := regs["b"].Get(ctx, s.SessionID); err != nil || got.Node != "a" || got.Metadata["backend"] != "fake" {
		t.Fatalf("a's live session read on b: %+v, %v; want the metadata its kind set at start (backend fake)", got, err)
	}
}

// TestMovedSeenByItsOldNode: a's session, marked node-lost by b and taken over there (b
// records where it moved), then closed on a (a, back, found its conversation's lease taken):
// a answers for it as b does, naming where it moved, not only that it closed. (Seen in
// TestClusterConversationPartition: a message sent through a to the old session got
// "closed (lease-lost)", and nexus ai send on a could not follow it to b's session.)
func TestMovedSeenByItsOldNode(t *testing.T) {
	ctx := testCtx(t)
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	// The sweepers' own ticks are an hour apart: the test sweeps (a never does, as a node
	// cut off within its first second).
	regs := twoNodes(t, func() time.Time { return t0 })
	s, err := regs["a"].Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	regs["b"].Sweep(ctx, t0.Add(live.DefaultNodeLost+time.Second))
	if err := regs["b"].Moved(ctx, s.SessionID, "the-new-one"); err != nil {
		t.Fatal(err)
	}
	if _, err := regs["a"].Close(ctx, s.SessionID, "lease-lost"); err != nil {
		t.Fatal(err)
	}
	if got, err := regs["a"].Get(ctx, s.SessionID); err != nil || got.Metadata[live.MovedToField] != "the-new-one" {
		t.Errorf("a's closed session, got on a: %+v, %v; want movedTo the-new-one", got, err)
	}
	err = regs["a"].Check(ctx, s.SessionID)
	if abi.CodeOf(err) != abi.CodeSessionClosed || !strings.Contains(err.Error(), "moved to session the-new-one") {
		t.Errorf("a's closed session, used on a: %v; want SESSION_CLOSED naming the-new-one", err)
	}
}

// logRecorder is a slog handler that keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) has(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.msgs, msg)
}

// TestQuorumLost: while an R3 stream has no leader (two servers of three gone), a log's
// publishes go unanswered; the log keeps them and publishes them once a leader is back, rather
// than dropping them after the first unanswered publish. Seen through the binary: a terminal
// flood with the stream's leader killed -9 lost everything queued during the election
// (TestClusterE2E/NATSServerKilledMidFlood: the count stopped at 47,226 of 300,000, no error).
func TestQuorumLost(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	rec := &logRecorder{}
	// The store's client is connected to server 0, which stays.
	nc, err := jetstore.Dial(testCtx(t), jetstore.DialOptions{URLs: []string{c.servers[0].ClientURL()}, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := jetstore.Open(testCtx(t), nc, jetstore.Options{Cluster: name, Node: "a", Replicas: 3, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := testCtx(t)
	limits := live.LogLimits{Events: 1000, Bytes: 1 << 20, Pinned: 10}
	l, err := st.OpenLog(ctx, "s1", limits)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := l.Append(ctx, event(fmt.Sprint("e", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		c.servers[i].Shutdown()
		c.servers[i].WaitForShutdown()
	}
	for i := 10; i < 20; i++ {
		if _, err := l.Append(ctx, event(fmt.Sprint("e", i))); err != nil {
			t.Fatal(err)
		}
	}
	flushed := make(chan error, 1)
	go func() { flushed <- l.Flush(ctx) }()
	// Quorum comes back once a publish has gone unanswered (or the log gave up already).
	var early error
	gaveUp := false
	testkit.Eventually(t, "a publish unanswered", func() bool {
		select {
		case early = <-flushed:
			gaveUp = true
			return true
		default:
			// The first failure, whatever follows: with two servers of three gone the stream
			// may not answer the log's read of its subject either, and then nothing is
			// published again until quorum is back (a wait for msgPublishRetry alone saw the
			// log give up after 30 s under load).
			return rec.has(msgPublishFailed)
		}
	})
	if gaveUp {
		t.Fatalf("the log gave up while the stream had no leader: Flush = %v", early)
	}
	c.restart(t, 1)
	if err := <-flushed; err != nil {
		t.Fatalf("Flush after quorum came back: %v", err)
	}
	p, err := l.Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Events) != 20 || p.Events[19].Seq != 20 || string(p.Events[19].Payload.(live.Output)) != "e19" {
		t.Fatalf("read %d events after quorum came back, want e0..e19", len(p.Events))
	}
}

// msgPublishFailed is what the log logs at a chunk's first failed publish.
const msgPublishFailed = "event stream did not take a publish"

// TestLogCloseDeletesConsumer: a closed log leaves no consumer on the stream. A node reads
// another node's session through a log opened for the read; nats.go's ordered consumers stay
// 5 minutes after they stop, and the stream takes 1,000 (nats-server's default): polling a
// session on another node filled it, and every new session failed with "maximum consumers
// limit reached" (TestClusterE2E, three runs in a row).
func TestLogCloseDeletesConsumer(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	st := c.open(t, jetstore.Options{Cluster: name, Replicas: 3})
	ctx := testCtx(t)
	for range 5 {
		l, err := st.OpenLog(ctx, "s1", live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stream, _, _ := jetstore.Names(name)
	js, err := jetstream.New(c.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "no consumer left on the event stream", func() bool {
		s, err := js.Stream(ctx, stream)
		return err == nil && s.CachedInfo().State.Consumers == 0
	})
}

// TestFollowerStalls: a log whose consumer stops delivering (seen once, an appender waiting
// for ever after a stream leader's kill) follows the subject again once a wait for it saw
// nothing for its bound: an append of its own after another node's goes through, and the log
// reads every event once, in order.
func TestFollowerStalls(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ctx := testCtx(t)
	limits := live.LogLimits{Events: 100, Bytes: 1 << 20, Pinned: 10}
	logs := c.twoLogs(t, name, limits)
	a, b := logs[0], logs[1]
	if _, err := a.Append(ctx, event("a1")); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := catchUp(ctx, b, 1); err != nil {
		t.Fatal(err)
	}
	a.StallFollower(50 * time.Millisecond)
	// b appends while a's consumer gives nothing; a's next append follows b's, so a must
	// see b's before its own is in its projection. An append numbered before the other
	// node's is refused (NotStoredError) and made again.
	stored := func(l *jetstore.Log, text string) {
		t.Helper()
		for {
			_, err := l.Append(ctx, event(text))
			if err == nil {
				err = l.Flush(ctx)
			}
			if err == nil {
				return
			}
			var ns *jetstore.NotStoredError
			if !errors.As(err, &ns) {
				t.Fatal(err)
			}
		}
	}
	stored(b, "b2")
	stored(b, "b3")
	stored(a, "a4")
	p, err := a.Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range p.Events {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Payload))
	}
	want := []string{"1:a1", "2:b2", "3:b3", "4:a4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("a reads %v, want %v", got, want)
	}
}

func checkLost(t *testing.T, node string, lost abi.Session, id string) {
	t.Helper()
	if lost.SessionID != id || lost.Metadata["chatKey"] != "agent:main:main" || lost.Metadata["closeReason"] != live.CloseNodeLost {
		t.Errorf("node %s was told to take over %s with metadata %v; want %s with a's chatKey, node-lost", node, lost.SessionID, lost.Metadata, id)
	}
}
