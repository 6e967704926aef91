package gateway_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/testkit"
)

// signalHandler is a slog handler that closes ch at the first record whose message has sub.
type signalHandler struct {
	sub  string
	once *sync.Once
	ch   chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.sub) {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestNodeWaitsForJetStream: a node started while its NATS cluster has no JetStream leader
// (one server of three up) waits, saying so, and starts once the others are up and have
// elected one; before, it failed and had to be started again.
func TestNodeWaitsForJetStream(t *testing.T) {
	ctx := testCtx(t)
	var routes, listens []string
	for range 3 {
		a := testkit.FreeAddr(t)
		listens = append(listens, a)
		routes = append(routes, "nats-route://"+a)
	}
	start := func(i int) string {
		srv, err := jetstore.StartEmbedded(ctx, jetstore.EmbeddedOptions{Name: "s" + string(rune('1'+i)), Dir: t.TempDir(),
			Cluster: "wait", ClusterListen: listens[i], Routes: routes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		return srv.ClientURL()
	}
	url := start(0)
	waiting := make(chan struct{})
	ready := make(chan gateway.Info, 1)
	d, err := gateway.Assemble(context.Background(), gateway.Config{
		StateDir: testkit.ShortTempDir(t), Shell: "sh", IdleTimeout: -1, Types: []abi.SessionType{abi.TypeTerminal},
		Cluster: &gateway.ClusterConfig{URLs: []string{url}, Node: "n1", Name: "wait"},
		Logger:  slog.New(signalHandler{sub: "waiting for JetStream", once: &sync.Once{}, ch: waiting}),
		Ready:   func(in gateway.Info, _ *console.Auth) { ready <- in },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() { done <- d.Run(runCtx); close(finished) }()
	t.Cleanup(func() { cancel(); <-finished })
	select {
	case <-waiting:
	case <-ready:
		t.Fatal("the node started with no JetStream leader")
	case err := <-done:
		t.Fatalf("the node stopped instead of waiting: %v", err)
	case <-ctx.Done():
		t.Fatal("the node neither waited nor started")
	}
	// The other two (a new JetStream cluster elects its first leader once its servers are
	// up: two of three did not within a minute here).
	start(1)
	start(2)
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the node did not start once the servers had a leader: %v", err)
	case <-ctx.Done():
		t.Fatal("the node did not start once the servers had a leader")
	}
}
