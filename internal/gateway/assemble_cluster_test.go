package gateway_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/triggerkv"
)

// TestAssembleClusterUnreachable: a node whose NATS cannot be reached fails to start, naming
// the URL, and never falls back to a store of its own.
func TestAssembleClusterUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	state := testkit.ShortTempDir(t)
	d, err := gateway.Assemble(context.Background(), gateway.Config{
		StateDir: state, Types: []abi.SessionType{abi.TypeTerminal}, IdleTimeout: -1,
		Cluster: &gateway.ClusterConfig{URLs: []string{url}, Node: "n1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Run(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("run with NATS unreachable at %s: %v", url, err)
	}
	if _, err := os.Stat(filepath.Join(state, "live")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a node without its NATS opened a store of its own: %v", err)
	}
}

// TestAssembleClusterEmbedded: a node with an embedded nats-server keeps its sessions in
// JetStream (state/nats, not state/live): the next daemon on the directory restores them
// from there. The server's client port takes only clients with the token in state/nats.
func TestAssembleClusterEmbedded(t *testing.T) {
	state := testkit.ShortTempDir(t)
	work := t.TempDir()
	addr := testkit.FreeAddr(t)
	cfg := gateway.Config{
		StateDir: state, Shell: "sh", IdleTimeout: -1, Types: []abi.SessionType{abi.TypeTerminal},
		Projects: func(string) (string, error) { return work, nil },
		Cluster:  &gateway.ClusterConfig{Embedded: true, Node: "n1", Name: "test", Listen: addr},
	}
	a := runAssembled(t, cfg)
	ctx := testCtx(t)
	if nc, err := nats.Connect("nats://" + addr); err == nil {
		nc.Close()
		t.Error("the embedded server took a client without its token")
	}
	tok, err := os.ReadFile(filepath.Join(state, "nats", gateway.NATSTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+addr, nats.Token(string(tok)))
	if err != nil {
		t.Fatalf("a client with the token: %v", err)
	}
	nc.Close()
	s, err := a.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "live")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a cluster node wrote state/live: %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "nats", "jetstream")); err != nil {
		t.Errorf("the embedded server's store: %v", err)
	}
	b := runAssembled(t, cfg)
	got, err := b.cl.Get(ctx, s.SessionID)
	if err != nil || got.Status != abi.StatusClosed {
		t.Fatalf("restored session: %+v, %v", got, err)
	}
	ev, err := b.d.Registry.Read(ctx, s.SessionID, 0, 0, 0)
	if err != nil || len(ev.Events) == 0 {
		t.Fatalf("restored events: %d, %v", len(ev.Events), err)
	}
}

// TestAssembleClusterTriggers: a cluster node keeps its cron jobs in the cluster's trigger
// bucket (every node sees them; state/triggers/triggers.db is not read), and its firings are
// claimed in the cluster's firings bucket.
func TestAssembleClusterTriggers(t *testing.T) {
	state := testkit.ShortTempDir(t)
	addr := testkit.FreeAddr(t)
	a := runAssembled(t, gateway.Config{
		StateDir: state, IdleTimeout: -1, Types: []abi.SessionType{abi.TypeAIChat},
		Cluster: &gateway.ClusterConfig{Embedded: true, Node: "n1", Name: "trig", Listen: addr},
	})
	ctx := testCtx(t)
	if _, err := a.cl.CronAdd(ctx, abi.CronJob{ID: "nightly", Schedule: "0 3 * * *", Message: "check the build"}); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(state, "nats", gateway.NATSTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+addr, nats.Token(string(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	other, err := triggerkv.Open(ctx, nc, triggerkv.Options{Cluster: "trig"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := other.Jobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "nightly" {
		t.Fatalf("the cluster's jobs, read by another node: %+v %v", jobs, err)
	}
	if won, err := other.Claim(ctx, "cron_nightly_1"); err != nil || !won {
		t.Fatalf("the firings bucket: %v %v", won, err)
	}
}

// TestAssembleClusterPlacement: two nodes on one NATS (b on a's embedded server): a create on
// a that names b is created on b, answered by b through a; one that names no node stays on a;
// one naming a node the cluster does not have is INVALID_ARGUMENT.
func TestAssembleClusterPlacement(t *testing.T) {
	work := t.TempDir()
	projects := func(string) (string, error) { return work, nil }
	addr := testkit.FreeAddr(t)
	stateA := testkit.ShortTempDir(t)
	a := runAssembled(t, gateway.Config{
		StateDir: stateA, Shell: "sh", IdleTimeout: -1, Types: []abi.SessionType{abi.TypeTerminal}, Projects: projects,
		Cluster: &gateway.ClusterConfig{Embedded: true, Node: "a", Name: "pl", Listen: addr},
	})
	tok, err := os.ReadFile(filepath.Join(stateA, "nats", gateway.NATSTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	b := runAssembled(t, gateway.Config{
		StateDir: testkit.ShortTempDir(t), Shell: "sh", IdleTimeout: -1, Types: []abi.SessionType{abi.TypeTerminal}, Projects: projects,
		Cluster: &gateway.ClusterConfig{URLs: []string{"nats://" + string(tok) + "@" + addr}, Node: "b", Name: "pl"},
	})
	ctx := testCtx(t)
	req := abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}}
	onB := req
	onB.Node = "b"
	// b's heartbeat (its first sweep) is what makes it known to a.
	var s abi.Session
	testkit.Eventually(t, "a create on a naming b", func() bool {
		s, err = a.cl.Create(ctx, onB)
		return err == nil
	})
	if s.Node != "b" {
		t.Fatalf("created on %q, want b: %+v", s.Node, s)
	}
	if got, err := b.d.Registry.Get(ctx, s.SessionID); err != nil || got.Node != "b" || got.Status != abi.StatusActive {
		t.Fatalf("b's own session: %+v %v", got, err)
	}
	if s, err := a.cl.Create(ctx, req); err != nil || s.Node != "a" {
		t.Fatalf("a create naming no node: %+v %v", s, err)
	}
	nowhere := req
	nowhere.Node = "nowhere"
	_, err = a.cl.Create(ctx, nowhere)
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
		t.Fatalf("a create naming no node of the cluster: %v", err)
	}
}

// TestAssembleClusterQueues: a cluster node's ai-chat queue and subagent runs are the
// cluster's (JetStream), not state/broker/queues.db and state/subagents, and what it
// acknowledged is there for the next daemon.
func TestAssembleClusterQueues(t *testing.T) {
	state := testkit.ShortTempDir(t)
	cfg := gateway.Config{
		StateDir: state, IdleTimeout: -1, Types: []abi.SessionType{abi.TypeAIChat},
		Cluster: &gateway.ClusterConfig{Embedded: true, Node: "n1", Name: "test", Listen: testkit.FreeAddr(t)},
	}
	a := runAssembled(t, cfg)
	ctx := testCtx(t)
	if a.d.AIChat.Broker != a.d.Broker {
		t.Fatal("the ai-chat kind queues elsewhere")
	}
	if _, ok := a.d.AIChat.Runs.(*jetstore.Runs); !ok {
		t.Fatalf("the subagent runs of a cluster node: %T", a.d.AIChat.Runs)
	}
	run := chatstore.SubagentRunRecord{RunID: "r1", ChildSessionKey: "agent:main:subagent:r1", RequesterSessionKey: "agent:main:main", Task: "t", Cleanup: "keep"}
	if err := a.d.AIChat.Runs.PutChecked(ctx, run, nil); err != nil {
		t.Fatal(err)
	}
	m, err := a.d.Broker.Enqueue(ctx, "cluster-queue-test", broker.Followup, "kept", "")
	if err != nil {
		t.Fatal(err)
	}
	// In the cluster's bucket, under the conversation's key alone.
	tok, err := os.ReadFile(filepath.Join(state, "nats", gateway.NATSTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := jetstore.Dial(ctx, jetstore.DialOptions{URLs: []string{"nats://" + cfg.Cluster.Listen}, Token: string(tok), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cq, err := jetstore.OpenQueues(ctx, nc, jetstore.QueueOptions{Cluster: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if q, err := cq.Queued(ctx, "cluster-queue-test"); err != nil || len(q) != 1 || q[0].ID != m.ID {
		t.Fatalf("the cluster's bucket: %+v %v", q, err)
	}
	// A conversation's transcript entries are on the cluster's stream as they are written.
	h, err := a.d.AIChat.Chats.Hold(ctx, "agent:main:replicated", conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(map[string]any{"role": "user", "content": "hi", "timestamp": 1}, nil); err != nil {
		t.Fatal(err)
	}
	sid := h.SessionID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err := jetstore.OpenTranscripts(ctx, nc, jetstore.TranscriptOptions{Cluster: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := tr.Tail(ctx, sid); err != nil || n != 2 {
		t.Fatalf("the transcript's stream: %d lines, %v; want the header and the message", n, err)
	}
	nc.Close()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{broker.Path(state), filepath.Join(state, "subagents")} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a cluster node wrote %s: %v", p, err)
		}
	}
	b := runAssembled(t, cfg)
	got, err := b.d.Broker.Get(ctx, []string{m.ID})
	if err != nil || len(got) != 1 || got[0].Content != "kept" {
		t.Fatalf("after a restart: %+v %v", got, err)
	}
	if runs, err := b.d.AIChat.Runs.List(chatstore.SubagentFilter{}); err != nil || len(runs) != 1 || runs[0].RunID != "r1" {
		t.Fatalf("runs after a restart: %+v %v", runs, err)
	}
}
