package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// The two commands every path runs. bigCommand prints bigBytes bytes of 'x' and no newline.
const (
	trueCommand = "true"
	bigBytes    = 1_000_000
	bigCommand  = `head -c 1000000 /dev/zero | tr '\0' x`
	// sampleTimeout bounds one sample on every path; a sample that hits it fails the row.
	sampleTimeout = 60 * time.Second
	// fullMaxChars is the budget of the MCP and session-manager rows that return the whole
	// megabyte: output.MaxMaxChars, the largest max_chars a budget may ask for.
	fullMaxChars = 1_000_000
)

// sampler runs one command once and returns its round trip. It checks what came back (exit
// code, the megabyte) and records it on row; a failed check is an error.
type sampler func(ctx context.Context, row *Row) (time.Duration, error)

// target is one row of the benchmark and how to take its samples.
type target struct {
	row  *Row
	n    int
	warm int
	run  sampler
	done int // samples taken so far (warm-up excluded)
}

// path is one way of running commands: it is opened once, gives its targets, and is closed
// (every process it started ended) whatever happens; its files go with the run's temporary
// directory.
type path struct {
	name    string
	targets []*target
	close   func()
}

func checkBig(b []byte) error {
	if len(b) != bigBytes {
		return fmt.Errorf("stdout is %d bytes, want %d", len(b), bigBytes)
	}
	if n := bytes.Count(b, []byte{'x'}); n != bigBytes {
		return fmt.Errorf("stdout has %d x, want %d", n, bigBytes)
	}
	return nil
}

// --- (a) the engine in-process ---

func openEngine(ctx context.Context, cfg config, env *benchEnv) (*path, error) {
	dir, err := env.mkdir("engine")
	if err != nil {
		return nil, err
	}
	sh, err := shell.Start(ctx, &shell.Local{Shell: cfg.shell, Dir: dir, Env: env.shellEnv}, nil)
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	mk := func(command string, big bool) sampler {
		return func(ctx context.Context, row *Row) (time.Duration, error) {
			out.Reset()
			errb.Reset()
			t0 := time.Now()
			res, err := sh.Run(ctx, command, sampleTimeout, &out, &errb)
			el := time.Since(t0)
			if err != nil {
				return el, err
			}
			if res.ExitCode != 0 || res.TimedOut {
				return el, fmt.Errorf("exit code %d (timed out %v), stderr %q", res.ExitCode, res.TimedOut, clipText(errb.String()))
			}
			row.Received = out.Len()
			if big {
				return el, checkBig(out.Bytes())
			}
			if out.Len() != 0 {
				return el, fmt.Errorf("unexpected stdout %q", clipText(out.String()))
			}
			return el, nil
		}
	}
	const label = "engine in-process: shell.Shell.Run over pipes"
	p := &path{name: "engine", close: func() { _ = sh.Close() }}
	p.targets = []*target{
		{row: &Row{Key: "engine/true", Letter: "a", Path: label, Command: trueCommand}, n: cfg.samples, warm: cfg.warmup, run: mk(trueCommand, false)},
		{row: &Row{Key: "engine/1mb", Letter: "a", Path: label, Command: bigCommand}, n: cfg.bigSamples, warm: cfg.warmup, run: mk(bigCommand, true)},
	}
	return p, nil
}

// --- (a') the session manager in-process: what nexus mcp runs, without the protocol ---

func openManager(ctx context.Context, cfg config, env *benchEnv) (*path, error) {
	dir, err := env.mkdir("manager")
	if err != nil {
		return nil, err
	}
	m := agentshell.New(agentshell.Config{
		AuditDir:    filepath.Join(dir, "audit"),
		ShadowDir:   filepath.Join(dir, "shadow"),
		IdleTimeout: -1,
		Env:         env.shellEnv,
		RunPrefix:   "bench",
	})
	info, err := m.Create(ctx, agentshell.CreateOptions{Transport: "local", Cwd: dir})
	if err != nil {
		m.Close()
		return nil, err
	}
	mk := func(command string, budget *shell.Budget, wantChars int) sampler {
		return func(ctx context.Context, row *Row) (time.Duration, error) {
			t0 := time.Now()
			res, err := m.Exec(ctx, info.SessionID, command, agentshell.ExecOptions{Budget: budget, Timeout: sampleTimeout})
			el := time.Since(t0)
			if err != nil {
				return el, err
			}
			return el, checkResult(row, res, wantChars)
		}
	}
	const label = "session manager in-process: engine + policy + redaction + budget + audit line"
	full := &shell.Budget{MaxChars: fullMaxChars}
	p := &path{name: "manager", close: m.Close}
	p.targets = []*target{
		{row: &Row{Key: "manager/true", Letter: "a′", Path: label, Command: trueCommand}, n: cfg.samples, warm: cfg.warmup, run: mk(trueCommand, nil, 0)},
		{row: &Row{Key: "manager/1mb", Letter: "a′", Path: label + ", default budget (max_chars 100,000)", Command: bigCommand}, n: cfg.bigSamples, warm: cfg.warmup, run: mk(bigCommand, nil, -1)},
		{row: &Row{Key: "manager-full/1mb", Letter: "a′", Path: label + ", budget max_chars 1,000,000", Command: bigCommand}, n: cfg.bigSamples, warm: cfg.warmup, run: mk(bigCommand, full, bigBytes)},
	}
	return p, nil
}

// checkResult checks an ExecResult: exit code 0 and, for wantChars >= 0, exactly that many x
// in stdout and nothing dropped. wantChars -1 is the default budget: the result must say it was
// truncated and hold at most the default cap of x; how many it holds is recorded (and noted
// when none), not checked.
func checkResult(row *Row, res shell.ExecResult, wantChars int) error {
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("exit code %d (timed out %v), stderr %q", res.ExitCode, res.TimedOut, clipText(res.Stderr))
	}
	xs := strings.Count(res.Stdout, "x")
	row.Received = xs
	row.Truncated = res.Truncated
	switch {
	case wantChars == 0 && res.Stdout != "":
		return fmt.Errorf("unexpected stdout %q", clipText(res.Stdout))
	case wantChars > 0 && (xs != wantChars || res.Truncated):
		return fmt.Errorf("stdout has %d x of %d characters (truncated %v), want %d x", xs, len(res.Stdout), res.Truncated, wantChars)
	case wantChars < 0 && (!res.Truncated || xs > shell.DefaultMaxChars):
		return fmt.Errorf("default budget: stdout has %d x (truncated %v), want at most %d and truncated", xs, res.Truncated, shell.DefaultMaxChars)
	case wantChars < 0 && xs == 0:
		row.Note = fmt.Sprintf("the reply's stdout is only the elision marker %q", clipText(strings.TrimSpace(res.Stdout)))
	}
	return nil
}

// --- (b) nexus mcp over stdio, driven by the SDK's client ---

func openMCP(ctx context.Context, cfg config, env *benchEnv) (*path, error) {
	dir, err := env.mkdir("mcp")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.nexus, "mcp", "--audit-dir", filepath.Join(dir, "audit"), //nolint:noctx // ended by closing the session, see close
		"--shadow-dir", filepath.Join(dir, "shadow"), "--idle-timeout", "0", "--log-level", "warn")
	cmd.Env = append(append([]string{}, env.shellEnv...), "NEXUS_HOME="+filepath.Join(dir, "home"))
	cmd.Dir = dir
	var stderr syncBuffer
	cmd.Stderr = &stderr
	client := sdk.NewClient(&sdk.Implementation{Name: "nexus-bench", Version: "bench"}, nil)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := client.Connect(cctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		return nil, fmt.Errorf("connect to %s mcp: %w (stderr: %s)", cfg.nexus, err, clipText(stderr.String()))
	}
	closeAll := func() {
		// Closing the client closes the server's stdin; the server then destroys every session
		// (killing their shells) and exits; the transport sends SIGTERM after 5 s if it has not.
		_ = cs.Close()
	}
	res, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "session_create", Arguments: map[string]any{"transport": "local", "cwd": dir}})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("session_create: %w", err)
	}
	if res.IsError {
		closeAll()
		return nil, fmt.Errorf("session_create: tool error: %s", toolText(res))
	}
	var info abi.Shell
	if err := decodeStructured(res, &info); err != nil {
		closeAll()
		return nil, fmt.Errorf("session_create: %w", err)
	}
	if info.SessionID == "" {
		closeAll()
		return nil, fmt.Errorf("session_create: no session_id in %s", toolText(res))
	}
	mk := func(command string, budget map[string]any, wantChars int) sampler {
		args := map[string]any{"session_id": info.SessionID, "command": command, "timeout_secs": int(sampleTimeout / time.Second)}
		if budget != nil {
			args["budget"] = budget
		}
		return func(ctx context.Context, row *Row) (time.Duration, error) {
			t0 := time.Now()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "session_exec", Arguments: args})
			el := time.Since(t0)
			if err != nil {
				return el, err
			}
			if res.IsError {
				return el, fmt.Errorf("tool error: %s", clipText(toolText(res)))
			}
			var r shell.ExecResult
			if err := decodeStructured(res, &r); err != nil {
				return el, err
			}
			row.ReplyBytes = len(toolText(res)) + len(r.Stdout) + len(r.Stderr)
			return el, checkResult(row, r, wantChars)
		}
	}
	const label = "nexus mcp over stdio: SDK client CallTool(session_exec) round trip"
	full := map[string]any{"max_chars": fullMaxChars}
	p := &path{name: "mcp", close: closeAll}
	p.targets = []*target{
		{row: &Row{Key: "mcp/true", Letter: "b", Path: label, Command: trueCommand}, n: cfg.samples, warm: cfg.warmup, run: mk(trueCommand, nil, 0)},
		{row: &Row{Key: "mcp/1mb", Letter: "b", Path: label + ", default budget (max_chars 100,000)", Command: bigCommand}, n: cfg.bigSamples, warm: cfg.warmup, run: mk(bigCommand, nil, -1)},
		{row: &Row{Key: "mcp-full/1mb", Letter: "b", Path: label + ", budget max_chars 1,000,000", Command: bigCommand}, n: cfg.bigSamples, warm: cfg.warmup, run: mk(bigCommand, full, bigBytes)},
	}
	return p, nil
}

// decodeStructured decodes a tool result's structured content (which the SDK client hands
// over already parsed) into out.
func decodeStructured(res *sdk.CallToolResult, out any) error {
	if res == nil || res.StructuredContent == nil {
		return errors.New("no structured content in the result")
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func toolText(res *sdk.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// --- (c) a fresh bash -c per command ---

func openBashC(_ context.Context, cfg config, env *benchEnv) (*path, error) {
	dir, err := env.mkdir("bashc")
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	mk := func(command string, big bool) sampler {
		return func(ctx context.Context, row *Row) (time.Duration, error) {
			out.Reset()
			errb.Reset()
			cctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			defer cancel()
			t0 := time.Now()
			cmd := exec.CommandContext(cctx, cfg.shell, "-c", command)
			cmd.Env = env.shellEnv
			cmd.Dir = dir
			cmd.Stdout = &out
			cmd.Stderr = &errb
			err := cmd.Run()
			el := time.Since(t0)
			if err != nil {
				return el, fmt.Errorf("%w, stderr %q", err, clipText(errb.String()))
			}
			row.Received = out.Len()
			if big {
				return el, checkBig(out.Bytes())
			}
			if out.Len() != 0 {
				return el, fmt.Errorf("unexpected stdout %q", clipText(out.String()))
			}
			return el, nil
		}
	}
	label := "fresh `" + filepath.Base(cfg.shell) + " -c` per command (exec.Command, stdout to a buffer)"
	p := &path{name: "bashc", close: func() {}}
	p.targets = []*target{
		{row: &Row{Key: "bashc/true", Letter: "c", Path: label, Command: trueCommand}, n: cfg.samples, warm: cfg.warmup, run: mk(trueCommand, false)},
		{row: &Row{Key: "bashc/1mb", Letter: "c", Path: label, Command: bigCommand}, n: cfg.bigSamples, warm: cfg.warmup, run: mk(bigCommand, true)},
	}
	return p, nil
}

// --- (d) tmux send-keys + capture-pane polling ---

// openTmux drives a shell in tmux the way OpenHands-style tools do: type the command and an
// echo of a completion marker with send-keys, poll the visible pane with capture-pane every
// cfg.poll until the marker appears, then read the output from the whole history with
// `capture-pane -p -J -S -`. After the round trip (untimed) the history is cleared, as those
// tools do between commands, so captures do not grow.
func openTmux(ctx context.Context, cfg config, env *benchEnv) (*path, error) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		return nil, errSkip{"tmux not installed (apt-get install -y tmux)"}
	}
	dir, err := env.mkdir("tmux")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "tmux.sock")
	conf := filepath.Join(dir, "tmux.conf")
	// 1 MB of x wraps to 12,500 rows of an 80-column pane; tmux keeps 2000 by default.
	if err := os.WriteFile(conf, []byte("set -g history-limit 100000\n"), 0o600); err != nil {
		return nil, err
	}
	tenv := append(append([]string{}, env.shellEnv...), "SHELL="+cfg.shell)
	run := func(ctx context.Context, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, tmux, append([]string{"-S", sock, "-f", conf}, args...)...)
		cmd.Env = tenv
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = &errb
		if err := cmd.Run(); err != nil {
			return out.Bytes(), fmt.Errorf("tmux %s: %w: %s", args[0], err, bytes.TrimSpace(errb.Bytes()))
		}
		return out.Bytes(), nil
	}
	w, h, _ := strings.Cut(cfg.tmuxSize, "x")
	if _, err := run(ctx, "new-session", "-d", "-s", "bench", "-x", w, "-y", h, "-c", dir, cfg.shell); err != nil {
		return nil, err
	}
	closeAll := func() {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = run(kctx, "kill-server")
	}
	out, err := run(ctx, "display-message", "-p", "-t", "bench", "#{history_limit}")
	if err != nil {
		closeAll()
		return nil, err
	}
	if h := strings.TrimSpace(string(out)); h != "100000" {
		closeAll()
		return nil, fmt.Errorf("tmux pane history-limit is %q, want 100000", h)
	}
	capture := func(ctx context.Context, all bool) ([]byte, error) {
		if all {
			return run(ctx, "capture-pane", "-p", "-J", "-S", "-", "-t", "bench")
		}
		return run(ctx, "capture-pane", "-p", "-J", "-t", "bench")
	}
	// Wait for the first prompt.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := capture(ctx, false)
		if err != nil {
			closeAll()
			return nil, err
		}
		if len(bytes.TrimSpace(out)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			closeAll()
			return nil, errors.New("tmux: no prompt within 10s")
		}
		time.Sleep(cfg.poll)
	}
	seq := 0
	mk := func(command string, big bool) sampler {
		return func(ctx context.Context, row *Row) (time.Duration, error) {
			seq++
			marker := fmt.Sprintf("__NX_DONE_%d__", seq)
			// The marker is typed split so the echoed command line does not contain it.
			typed := fmt.Sprintf(`%s; echo __NX_DONE""_%d__`, command, seq)
			cctx, cancel := context.WithTimeout(ctx, sampleTimeout)
			defer cancel()
			t0 := time.Now()
			if _, err := run(cctx, "send-keys", "-t", "bench", "-l", typed, ";", "send-keys", "-t", "bench", "Enter"); err != nil {
				return time.Since(t0), err
			}
			row.lastCalls = 2 // send-keys and the final capture
			for {
				row.lastCalls++
				out, err := capture(cctx, false)
				if err != nil {
					return time.Since(t0), err
				}
				if bytes.Contains(out, []byte(marker)) {
					break
				}
				select {
				case <-cctx.Done():
					return time.Since(t0), fmt.Errorf("marker %s not seen: %w", marker, cctx.Err())
				case <-time.After(cfg.poll):
				}
			}
			all, err := capture(cctx, true)
			el := time.Since(t0)
			if err != nil {
				return el, err
			}
			_, _ = run(cctx, "clear-history", "-t", "bench")
			row.ReplyBytes = len(all)
			// The output is on the line the marker ends: with -J the wrapped rows of the x's
			// come back as one line, followed by the marker (the command prints no newline).
			i := bytes.LastIndex(all, []byte(marker))
			if i < 0 {
				return el, fmt.Errorf("marker %s missing from the history capture", marker)
			}
			line := all[bytes.LastIndexByte(all[:i], '\n')+1 : i]
			row.Received = bytes.Count(line, []byte{'x'})
			want := 0
			if big {
				want = bigBytes
			}
			if row.Received != want || len(line) != want {
				return el, fmt.Errorf("captured %d x in a %d-byte line before the marker, want %d", row.Received, len(line), want)
			}
			return el, nil
		}
	}
	label := fmt.Sprintf("tmux send-keys + capture-pane polling every %s, then capture-pane -J -S - (%s pane)", cfg.poll, cfg.tmuxSize)
	p := &path{name: "tmux", close: closeAll}
	p.targets = []*target{
		{row: &Row{Key: "tmux/true", Letter: "d", Path: label, Command: trueCommand}, n: cfg.tmuxSamples, warm: min(cfg.warmup, 5), run: mk(trueCommand, false)},
		{row: &Row{Key: "tmux/1mb", Letter: "d", Path: label, Command: bigCommand}, n: cfg.tmuxBigSamples, warm: min(cfg.warmup, 2), run: mk(bigCommand, true)},
	}
	return p, nil
}

// errSkip is returned by a path that cannot run here; its rows are reported as skipped.
type errSkip struct{ why string }

func (e errSkip) Error() string { return e.why }

func clipText(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
