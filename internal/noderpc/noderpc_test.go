package noderpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/noderpc"
	"github.com/nexus-run/nexus/internal/testkit"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

// startNATS runs a real nats-server with JetStream in the test process.
func startNATS(t *testing.T) string {
	t.Helper()
	s, err := jetstore.StartEmbedded(testCtx(t), jetstore.EmbeddedOptions{Name: "n0", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := jetstore.Dial(testCtx(t), jetstore.DialOptions{URLs: []string{url}, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

var clusterSeq atomic.Int64

// node is one node of a cluster: its registry on the shared store, forwarding through a
// Client, and the Server answering for its sessions, all on one NATS connection.
type node struct {
	name, cluster string
	reg           *live.Registry
	nc            *nats.Conn
	srv           *noderpc.Server
	kind          *livetest.FakeKind
}

func newCluster(t *testing.T, url string, timeout time.Duration, names ...string) map[string]*node {
	t.Helper()
	return newClusterWith(t, url, timeout, nil, names...)
}

// newClusterWith is newCluster with each registry's configuration tuned by tune.
func newClusterWith(t *testing.T, url string, timeout time.Duration, tune func(*live.Config), names ...string) map[string]*node {
	t.Helper()
	ctx := testCtx(t)
	cluster := fmt.Sprint("c", clusterSeq.Add(1))
	out := map[string]*node{}
	for _, name := range names {
		nc := connect(t, url)
		st, err := jetstore.Open(ctx, nc, jetstore.Options{Cluster: cluster, Node: name})
		if err != nil {
			t.Fatal(err)
		}
		kind := livetest.NewFakeKind(abi.TypeTerminal, false)
		cfg := live.Config{Node: name, Store: st, Sweep: time.Hour, IdleTimeout: -1,
			Router: noderpc.NewClient(nc, noderpc.ClientOptions{Cluster: cluster, Timeout: timeout})}
		if tune != nil {
			tune(&cfg)
		}
		r, err := live.New(ctx, cfg, kind, livetest.NewFakeKind(abi.TypeAIChat, false))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := noderpc.Serve(nc, noderpc.ServerOptions{Cluster: cluster, Node: name, Local: r.Local()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close(); _ = r.Shutdown(context.Background()) })
		out[name] = &node{name: name, cluster: cluster, reg: r, nc: nc, srv: srv, kind: kind}
	}
	return out
}

// TestForward: node b sends to, controls, runs in and closes node a's session through a's
// node; a's answers come back with their ABI codes; a closed session of a's is answered from
// its record.
func TestForward(t *testing.T) {
	n := newCluster(t, startNATS(t), 0, "a", "b")
	ctx := testCtx(t)
	a, b := n["a"], n["b"]
	s, err := a.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	id := s.SessionID
	inst := a.kind.Instance(id)
	inst.Emit([]byte("before"))
	last, err := a.reg.LastSeq(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	origin := abi.Origin{Kind: "cli", ID: "u1"}
	res, err := b.reg.Send(ctx, id, live.SendRequest{Data: []byte("echo hi\n"), Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	if res.AfterSeq != last {
		t.Errorf("afterSeq through b %d, want a's last %d", res.AfterSeq, last)
	}
	if got := inst.Requests(); len(got) != 1 || string(got[0].Data) != "echo hi\n" || got[0].Origin != origin {
		t.Errorf("a's session received %+v", got)
	}

	for _, tc := range []struct {
		name string
		req  abi.ControlRequest
		want string
	}{
		{"resize", abi.ControlRequest{Command: abi.CommandResize, Width: 100, Height: 40}, "resize"},
		{"interrupt", abi.ControlRequest{Command: abi.CommandInterrupt}, "interrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := b.reg.Control(ctx, id, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if m, _ := d.Result.(map[string]any); m["done"] != tc.want || d.Command != tc.req.Command || d.SessionID != id {
				t.Errorf("control data %+v", d)
			}
			got := inst.Controls()
			if c := got[len(got)-1]; c != tc.req {
				t.Errorf("a's session got %+v, want %+v", c, tc.req)
			}
		})
	}
	// The owner's checks and the kind's errors keep their codes across the hop.
	_, err = b.reg.Control(ctx, id, abi.ControlRequest{Command: abi.CommandResize})
	livetest.WantCode(t, err, abi.CodeInvalidArgument)
	inst.FailSend(abi.Errorf(abi.CodeBusy, id, "busy now"))
	_, err = b.reg.Send(ctx, id, live.SendRequest{Data: []byte("x")})
	livetest.WantCode(t, err, abi.CodeBusy)
	if err == nil || !strings.Contains(err.Error(), "busy now") {
		t.Errorf("the owner's message is lost: %v", err)
	}
	inst.FailSend(nil)
	_, err = b.reg.Run(ctx, id, abi.RunRequest{Command: "true"})
	livetest.WantCode(t, err, abi.CodeCapabilityUnsupported) // the fake terminal runs nothing
	_, err = b.reg.Send(ctx, "no-such-session", live.SendRequest{Data: []byte("x")})
	livetest.WantCode(t, err, abi.CodeSessionNotFound)

	// An ai-chat's message id comes back.
	chat, err := a.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := b.reg.Send(ctx, chat.SessionID, live.SendRequest{Data: []byte("hello"), Mode: "steer"}); err != nil || res.MessageID != "fake-1" {
		t.Errorf("ai-chat send through b: %+v, %v", res, err)
	}

	// The owner itself refuses what is not its own: b's Local does not pass a's session on.
	_, err = b.reg.Local().Send(ctx, id, live.SendRequest{Data: []byte("x")})
	livetest.WantCode(t, err, abi.CodeSessionNotFound)

	closed, err := b.reg.Close(ctx, id, abi.CloseRequested)
	if err != nil {
		t.Fatal(err)
	}
	if closed.Status != abi.StatusClosed || closed.Node != "a" {
		t.Errorf("closed through b: %+v", closed)
	}
	if got, _ := a.reg.Get(ctx, id); got.Status != abi.StatusClosed {
		t.Errorf("a's session after b closed it: %s", got.Status)
	}
	_, err = b.reg.Send(ctx, id, live.SendRequest{Data: []byte("x")})
	livetest.WantCode(t, err, abi.CodeSessionClosed)
	_, err = b.reg.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose})
	livetest.WantCode(t, err, abi.CodeSessionClosed)
}

// TestOwnerGone: once the owner's connection is gone (no responder on its subject), a
// command for its session fails at once with RESOURCE_UNAVAILABLE naming the node.
func TestOwnerGone(t *testing.T) {
	n := newCluster(t, startNATS(t), time.Hour, "a", "b")
	ctx := testCtx(t)
	s, err := n["a"].reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	n["a"].reg.Sweep(ctx, t0) // a's heartbeat
	n["a"].nc.Close()
	// The server drops a's subscription once it has seen a's connection go; a request before
	// that is delivered to the closed connection and waits for the timeout. The probe's short
	// wait is its poll interval: it is asked again until the server says no one listens. Then
	// the timeout is an hour, so an answer is the missing responder's, not a timeout's.
	subject := noderpc.Subject(n["a"].cluster, "a")
	testkit.Eventually(t, "no responder on a's subject", func() bool {
		_, err := n["b"].nc.Request(subject, []byte("{}"), 100*time.Millisecond)
		return errors.Is(err, nats.ErrNoResponders)
	})
	for _, op := range []func() error{
		func() error {
			_, err := n["b"].reg.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("x")})
			return err
		},
		func() error {
			_, err := n["b"].reg.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt})
			return err
		},
		func() error { _, err := n["b"].reg.Close(ctx, s.SessionID, abi.CloseRequested); return err },
	} {
		err := op()
		livetest.WantCode(t, err, abi.CodeResourceUnavailable)
		if err == nil || !strings.Contains(err.Error(), "node a") {
			t.Errorf("the error does not name the node: %v", err)
		}
	}
	// Once b finds a lost (past the bound), a's session's record says so, and answers.
	n["b"].reg.Sweep(ctx, t0.Add(live.DefaultNodeLost+time.Second))
	_, err = n["b"].reg.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("x")})
	livetest.WantCode(t, err, abi.CodeSessionClosed)
	if err == nil || !strings.Contains(err.Error(), "lost with its node a") {
		t.Errorf("error: %v", err)
	}
}

// blocking is a node's Local that answers nothing until its request's context ends.
type blocking struct{ ended chan error }

func (b blocking) Send(ctx context.Context, _ string, _ live.SendRequest) (live.SendResult, error) {
	<-ctx.Done()
	b.ended <- ctx.Err()
	return live.SendResult{}, ctx.Err()
}

func (blocking) Control(context.Context, string, abi.ControlRequest) (*abi.ControlData, error) {
	return nil, errors.New("unused")
}

func (blocking) Run(context.Context, string, abi.RunRequest) (any, error) {
	return strings.Repeat("x", 2<<20), nil // an answer larger than NATS carries
}

func (blocking) Close(context.Context, string, string) (abi.Session, error) {
	return abi.Session{}, errors.New("unused")
}

func (blocking) Touch(context.Context, []string) error { return errors.New("unused") }

// TestTimeout: a node that does not answer within the timeout is RESOURCE_UNAVAILABLE after
// the timeout, not a hang, and its own work on the request is cancelled then too.
func TestTimeout(t *testing.T) {
	url := startNATS(t)
	stuck := blocking{ended: make(chan error, 1)}
	srv, err := noderpc.Serve(connect(t, url), noderpc.ServerOptions{Cluster: "t", Node: "slow", Local: stuck})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	const timeout = 200 * time.Millisecond
	c := noderpc.NewClient(connect(t, url), noderpc.ClientOptions{Cluster: "t", Timeout: timeout})
	start := time.Now()
	_, err = c.Send(testCtx(t), "slow", "s1", live.SendRequest{Data: []byte("x")})
	elapsed := time.Since(start)
	livetest.WantCode(t, err, abi.CodeResourceUnavailable)
	if err == nil || !strings.Contains(err.Error(), "node slow did not") {
		t.Errorf("error: %v", err)
	}
	if elapsed < timeout {
		t.Errorf("gave up after %s, before the timeout %s", elapsed, timeout)
	}
	if err := <-stuck.ended; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the owner's work ended with %v, want its deadline", err)
	}
	// An answer larger than NATS carries comes back as an error with the ABI's code.
	_, err = c.Run(testCtx(t), "slow", "s1", abi.RunRequest{Command: "big"})
	livetest.WantCode(t, err, abi.CodeInvalidArgument)
}

// TestOversized: input too large for one NATS message is refused before it is sent, with
// INVALID_ARGUMENT, and never reaches the owner.
func TestOversized(t *testing.T) {
	n := newCluster(t, startNATS(t), 0, "a", "b")
	ctx := testCtx(t)
	s, err := n["a"].reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, n["b"].nc.MaxPayload())
	_, err = n["b"].reg.Send(ctx, s.SessionID, live.SendRequest{Data: big})
	livetest.WantCode(t, err, abi.CodeInvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "max payload") {
		t.Errorf("error: %v", err)
	}
	if got := n["a"].kind.Instance(s.SessionID).Sends(); len(got) != 0 {
		t.Errorf("the owner received %d sends", len(got))
	}
	// Input that fits goes through.
	if _, err := n["b"].reg.Send(ctx, s.SessionID, live.SendRequest{Data: big[:512<<10]}); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentSends: nodes b and c send to a's session at once; every send is delivered
// exactly once.
func TestConcurrentSends(t *testing.T) {
	n := newCluster(t, startNATS(t), 0, "a", "b", "c")
	ctx := testCtx(t)
	s, err := n["a"].reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers*each)
	for _, from := range []string{"b", "c"} {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					msg := fmt.Sprintf("%s-%d-%d", from, w, i)
					if _, err := n[from].reg.Send(ctx, s.SessionID, live.SendRequest{Data: []byte(msg)}); err != nil {
						errs <- fmt.Errorf("%s: %w", msg, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	count := map[string]int{}
	for _, m := range n["a"].kind.Instance(s.SessionID).Sends() {
		count[m]++
	}
	if len(count) != 2*workers*each {
		t.Errorf("%d distinct sends delivered, want %d", len(count), 2*workers*each)
	}
	for m, c := range count {
		if c != 1 {
			t.Errorf("%s delivered %d times", m, c)
		}
	}
}

// TestForeignFollow: a reader on node b follows a's session from the shared stream (the log
// held open while followed), sees what a's session writes after it attached, and ends with it.
func TestForeignFollow(t *testing.T) {
	n := newCluster(t, startNATS(t), 0, "a", "b")
	ctx := testCtx(t)
	s, err := n["a"].reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
	if err != nil {
		t.Fatal(err)
	}
	// a's start events are appended as the create returns and stored a moment later: a's own
	// LastSeq waits for them (another node reads what the stream acknowledged).
	want, err := n["a"].reg.LastSeq(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	last, err := n["b"].reg.LastSeq(ctx, s.SessionID)
	if err != nil || last != want {
		t.Fatalf("b's last sequence of a's session: %d, %v; a's %d", last, err, want)
	}
	fl, err := n["b"].reg.Follow(ctx, s.SessionID, last)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	release, err := n["b"].reg.Hold(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	release()
	// An ephemeral session is held on its own node only: its holders are counted there.
	eph, err := n["a"].reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = n["b"].reg.Hold(ctx, eph.SessionID)
	livetest.WantCode(t, err, abi.CodeCapabilityUnsupported)
	n["a"].kind.Instance(s.SessionID).Emit([]byte("after attach"))
	b, err := n["b"].reg.Read(ctx, s.SessionID, last, 0, testkit.Patience())
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || string(b.Events[0].Payload.(live.Output)) != "after attach" {
		t.Fatalf("b reads %v", seqTypes(b.Events))
	}
	if _, err := n["b"].reg.Close(ctx, s.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	after := b.Next
	for {
		b, err = n["b"].reg.Read(ctx, s.SessionID, after, 0, testkit.Patience())
		if err != nil {
			t.Fatal(err)
		}
		after = b.Next
		if b.Done {
			break
		}
	}
}

// TestRemoteFollowerKeepsAlive: a session followed from another node (a WebSocket attached
// there) is not idle on its owner: the follower's node tells the owner on its sweeps; a
// session no one follows is closed as idle. Times are the test's.
func TestRemoteFollowerKeepsAlive(t *testing.T) {
	clock := livetest.NewFakeClock()
	const idle = 10 * time.Minute
	n := newClusterWith(t, startNATS(t), 0, func(c *live.Config) { c.Now, c.IdleTimeout = clock.Now, idle }, "a", "b")
	ctx := testCtx(t)
	var ids []string
	for range 2 {
		s, err := n["a"].reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.SessionID)
	}
	fl, err := n["b"].reg.Follow(ctx, ids[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	n["b"].reg.Sweep(ctx, clock.Advance(4*time.Minute))
	n["a"].reg.Sweep(ctx, clock.Advance(6*time.Minute+time.Second))
	for i, want := range []abi.Status{abi.StatusActive, abi.StatusClosed} {
		if got, err := n["a"].reg.Get(ctx, ids[i]); err != nil || got.Status != want {
			t.Errorf("session %d (followed from b: %v): %s, %v; want %s", i, i == 0, got.Status, err, want)
		}
	}
}

// TestSubject: a node's subject is namespaced by its cluster and holds any node name (a host
// name's dots) as one token.
func TestSubject(t *testing.T) {
	for _, tc := range []struct{ cluster, node, want string }{
		{"nexus", "a", "nexus.nexus.node.a.rpc"},
		{"prod", "host-1_x", "nexus.prod.node.host-1_x.rpc"},
		{"prod", "h1.example.com", "nexus.prod.node.h1%2Eexample%2Ecom.rpc"},
		{"prod", "a b*>", "nexus.prod.node.a%20b%2A%3E.rpc"},
	} {
		if got := noderpc.Subject(tc.cluster, tc.node); got != tc.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", tc.cluster, tc.node, got, tc.want)
		}
	}
}

// TestWire: a request and its answer as the owner sees them.
func TestWire(t *testing.T) {
	b, err := json.Marshal(noderpc.Request{Op: noderpc.OpSend, SessionID: "s", TimeoutMs: 5000, Send: &noderpc.SendBody{Data: []byte("hi"), Origin: abi.Origin{Kind: "cli"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"op":"send","sessionId":"s","timeoutMs":5000,"send":{"data":"aGk=","origin":{"kind":"cli"}}}`; string(b) != want {
		t.Errorf("request %s, want %s", b, want)
	}
}

func seqTypes(events []*live.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprint(e.Seq, e.Type))
	}
	return out
}
