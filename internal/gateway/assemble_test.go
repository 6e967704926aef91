package gateway_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// assembled is a daemon built by gateway.Assemble and running until the test ends.
type assembled struct {
	d    *gateway.Daemon
	info gateway.Info
	cl   *client.Client
	stop func() error
}

func runAssembled(t *testing.T, cfg gateway.Config) *assembled {
	t.Helper()
	ready := make(chan gateway.Info, 1)
	cfg.Ready = func(in gateway.Info, _ *console.Auth) { ready <- in }
	d, err := gateway.Assemble(context.Background(), cfg)
	if err != nil {
		t.Fatalf("assemble: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	a := &assembled{d: d}
	select {
	case a.info = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run: %v", err)
	}
	var once bool
	var runErr error
	a.stop = func() error {
		if !once {
			once = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := a.stop(); err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	a.cl = client.New(client.Target{Socket: a.info.Socket})
	return a
}

// TestAssemble runs the daemon nexus serve runs, built from a Config alone: every session type
// served, a terminal session driven over the socket, and everything it opened released when it
// stops (the next daemon on the directory starts and restores the session).
func TestAssemble(t *testing.T) {
	state := testkit.ShortTempDir(t)
	work := t.TempDir()
	cfg := gateway.Config{
		StateDir: state, Version: "v-test", Shell: "sh", IdleTimeout: -1,
		Projects: func(id string) (string, error) {
			if id != "p" {
				return "", abi.Errorf(abi.CodeInvalidArgument, "", "unknown project %q", id)
			}
			return work, nil
		},
	}
	a := runAssembled(t, cfg)
	ctx := testCtx(t)

	// Every type is served: asking for one that is not names them all.
	_, err := a.cl.Create(ctx, abi.CreateRequest{Type: "no-such-type"})
	if err == nil || !strings.Contains(err.Error(), "ai-chat, debug-stream, meta-chat, network-stream, terminal") {
		t.Fatalf("create of an unknown type: %v", err)
	}
	s, err := a.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.cl.Send(ctx, s.SessionID, []byte("echo assembled-$((6*7))\n")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the terminal's output", func() bool {
		b, err := a.d.Registry.Read(ctx, s.SessionID, 0, 0, 0)
		if err != nil {
			return false
		}
		var out strings.Builder
		for _, e := range b.Events {
			if o, ok := e.Payload.(live.Output); ok {
				out.Write(o)
			}
		}
		return strings.Contains(out.String(), "assembled-42")
	})
	for _, f := range []string{"broker/queues.db", "triggers/triggers.db", "processes", "gateway.json", "gateway.sock"} {
		if _, err := os.Stat(filepath.Join(state, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"gateway.json", "gateway.sock"} {
		if _, err := os.Stat(filepath.Join(state, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after stop: %v", f, err)
		}
	}

	// The sessions were kept in state/live: the next daemon answers for the closed one.
	b := runAssembled(t, cfg)
	got, err := b.cl.Get(ctx, s.SessionID)
	if err != nil || got.Status != abi.StatusClosed {
		t.Fatalf("restored session: %+v, %v", got, err)
	}
}

// TestAssembleTypes: a daemon serving some types opens only what they need, and refuses the
// others; a console without a TCP listener is refused before anything is opened.
func TestAssembleTypes(t *testing.T) {
	state := testkit.ShortTempDir(t)
	a := runAssembled(t, gateway.Config{StateDir: state, Types: []abi.SessionType{abi.TypeTerminal}, Store: live.NewMemoryStore(), IdleTimeout: -1})
	_, err := a.cl.Create(testCtx(t), abi.CreateRequest{Type: abi.TypeAIChat})
	livetest.WantCode(t, err, abi.CodeCapabilityUnsupported)
	for _, f := range []string{"broker", "triggers", "processes", "roadmaps.json", "live"} {
		if _, err := os.Stat(filepath.Join(state, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists for a daemon serving terminals from memory: %v", f, err)
		}
	}

	other := t.TempDir()
	if _, err := gateway.Assemble(context.Background(), gateway.Config{StateDir: other, Console: true}); err == nil {
		t.Error("a console without a TCP listener was assembled")
	}
	if _, err := os.Stat(filepath.Join(other, "broker")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused config left its stores open: %v", err)
	}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}
