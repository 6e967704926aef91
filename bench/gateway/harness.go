package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
)

// benchProject is the only project id the in-process gateway knows.
const benchProject = "bench"

// harness is a gateway served in-process as `nexus serve` assembles it (gateway.Assemble and
// Run on a unix socket in a private state directory), serving terminals only, minus the CLI
// and the projects file.
type harness struct {
	dir    string // temp root: state/, work/ (the project directory), home/
	sock   string
	reg    *live.Registry
	cl     *client.Client
	cancel context.CancelFunc
	done   chan error
}

// shellEnv is the environment of every shell the benchmark starts (gateway sessions, direct PTYs
// and tmux alike): the caller's, with a private HOME so no user rc file or history is involved.
func shellEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "HISTFILE", "PS1", "PROMPT_COMMAND", "TMUX", "TMUX_PANE":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "HISTFILE=/dev/null", "PS1=$ ")
}

// startHarness starts the gateway with the registry config lc. With bc.store "disk" (what
// nexus serve runs) sessions and events are kept in state/live as well.
func startHarness(ctx context.Context, lc live.Config, bc config) (*harness, error) {
	dir, err := harnessDir()
	if err != nil {
		return nil, err
	}
	return startHarnessAt(ctx, dir, lc, bc)
}

// harnessDir makes a temp root with the directories a harness needs.
func harnessDir() (string, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-")
	if err != nil {
		return "", err
	}
	for _, d := range []string{"state", "work", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// startHarnessAt starts the gateway on the temp root dir (from harnessDir), whose state
// directory may hold what an earlier gateway left; stop removes dir.
func startHarnessAt(ctx context.Context, dir string, lc live.Config, bc config) (*harness, error) {
	work := filepath.Join(dir, "work")
	cfg := gateway.Config{
		StateDir: filepath.Join(dir, "state"),
		Version:  "bench",
		Types:    []abi.SessionType{abi.TypeTerminal},
		// The registry's settings of the run; with bc.store "disk" (nil Store) the sessions
		// live in state/live, as nexus serve keeps them.
		MaxSessions: lc.MaxSessions, IdleTimeout: lc.IdleTimeout, Retention: lc.Retention, Log: lc.Log,
		Shell:           bc.shell,
		Grace:           2 * time.Second,
		ShellEnv:        shellEnv(filepath.Join(dir, "home")),
		ShutdownTimeout: 60 * time.Second,
		Projects: func(id string) (string, error) {
			if id != benchProject {
				return "", abi.Errorf(abi.CodeInvalidArgument, "", "unknown project %q", id)
			}
			return work, nil
		},
	}
	if bc.store != "disk" {
		cfg.Store = live.NewMemoryStore()
	}
	ready := make(chan gateway.Info, 1)
	cfg.Ready = func(in gateway.Info, _ *console.Auth) { ready <- in }
	d, err := gateway.Assemble(ctx, cfg)
	if err != nil {
		_ = os.RemoveAll(dir) //nolint:gosec // G703: the bench's own temp root (harnessDir), never input
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &harness{dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- d.Run(sctx) }()
	select {
	case in := <-ready:
		h.sock = in.Socket
		h.reg = d.Registry
	case err := <-h.done:
		cancel()
		_ = os.RemoveAll(dir) //nolint:gosec // G703: the bench's own temp root (harnessDir), never input
		return nil, fmt.Errorf("gateway did not start: %w", err)
	case <-time.After(10 * time.Second):
		h.stop()
		return nil, errors.New("gateway did not start within 10s")
	}
	h.cl = client.New(client.Target{Socket: h.sock})
	return h, nil
}

// stop shuts the gateway down (every session closed, every shell reaped) and removes its files.
func (h *harness) stop() {
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: gateway:", err)
		}
	case <-time.After(90 * time.Second):
		fmt.Fprintln(os.Stderr, "bench: gateway shutdown timed out")
	}
	_ = os.RemoveAll(h.dir) //nolint:gosec // G703: the bench's own temp root (harnessDir), never input
}

// openTerminal creates a terminal session over the API and waits for its first prompt.
func (h *harness) openTerminal(ctx context.Context) (abi.Session, error) {
	opts := []byte(`{"cols":80,"rows":24}`)
	s, err := h.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: benchProject}, Options: opts})
	if err != nil {
		return s, err
	}
	return s, h.waitPrompt(ctx, s.SessionID, 10*time.Second)
}

// waitPrompt waits until the session has printed something (its prompt) and then stayed quiet
// for a moment, read from the registry in-process.
func (h *harness) waitPrompt(ctx context.Context, id string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var after uint64
	sawData := false
	for time.Now().Before(deadline) {
		b, err := h.reg.Read(ctx, id, after, 0, 150*time.Millisecond)
		if err != nil {
			return err
		}
		if b.Done {
			return fmt.Errorf("session %s ended before its prompt", id)
		}
		if len(b.Events) == 0 && sawData {
			return nil // quiet for 150ms after output
		}
		for _, e := range b.Events {
			if e.Type == abi.EventData {
				sawData = true
			}
		}
		after = b.Next
	}
	return fmt.Errorf("session %s printed no prompt within %s", id, limit)
}

func (h *harness) closeSession(ctx context.Context, id string) error {
	_, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose})
	return err
}

// shellPath resolves the shell the benchmark uses everywhere.
func shellPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("shell %q not found: %w", name, err)
	}
	return p, nil
}
