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
	"slices"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/live"
)

// The shell runs `cat` with the terminal in raw mode, so every byte is echoed by a process (as a
// shell's line editor or an editor would), not by the tty line discipline. The ready marker is
// written split so the echoed command line does not contain it.
const (
	echoSetup   = "stty raw -echo; echo __NEXUS_READY\"\"__; cat\n"
	readyMarker = "__NEXUS_READY__"
	warmup      = 50
)

// LatencyRow is one line of the latency table.
type LatencyRow struct {
	Path    string  `json:"path"`
	Samples int     `json:"samples"`
	P50ms   float64 `json:"p50ms"`
	P90ms   float64 `json:"p90ms"`
	P99ms   float64 `json:"p99ms"`
	MaxMs   float64 `json:"maxMs"`
	MeanMs  float64 `json:"meanMs"`
	// RatioP50 and RatioP99 compare with the direct PTY row.
	RatioP50 float64 `json:"ratioP50,omitempty"`
	RatioP99 float64 `json:"ratioP99,omitempty"`
	Skipped  bool    `json:"skipped,omitempty"`
	Note     string  `json:"note,omitempty"`
}

func latencyRow(path string, d []time.Duration) LatencyRow {
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	pct := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	return LatencyRow{Path: path, Samples: len(s), P50ms: pct(0.50), P90ms: pct(0.90), P99ms: pct(0.99),
		MaxMs: ms(s[len(s)-1]), MeanMs: ms(sum) / float64(len(s))}
}

func probe(i int) byte { return 'a' + byte(i%26) }

// latencyPTY is the floor: write one byte to the PTY master, read until its echo comes back.
func latencyPTY(ctx context.Context, cfg config) (LatencyRow, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-pty-")
	if err != nil {
		return LatencyRow{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := startPTYShell(cfg.shell, dir, shellEnv(dir))
	if err != nil {
		return LatencyRow{}, err
	}
	defer p.close()
	if err := p.readQuiet(150*time.Millisecond, 10*time.Second); err != nil {
		return LatencyRow{}, err
	}
	if _, err := p.f.Write([]byte(echoSetup)); err != nil {
		return LatencyRow{}, err
	}
	buf := make([]byte, 32<<10)
	sc := newScanner(readyMarker)
	stop := p.watchdog(ctx, 10*time.Second+time.Duration(warmup+cfg.samples)*100*time.Millisecond)
	defer stop()
	for !sc.found {
		n, err := p.f.Read(buf)
		sc.feed(buf[:n])
		if err != nil && !sc.found {
			return LatencyRow{}, fmt.Errorf("wait for cat: %w", err)
		}
	}
	var d []time.Duration
	for i := range warmup + cfg.samples {
		c := probe(i)
		t0 := time.Now()
		if _, err := p.f.Write([]byte{c}); err != nil {
			return LatencyRow{}, err
		}
		for {
			n, err := p.f.Read(buf)
			if bytes.IndexByte(buf[:n], c) >= 0 {
				break
			}
			if err != nil {
				return LatencyRow{}, fmt.Errorf("sample %d: %w", i, err)
			}
		}
		if i >= warmup {
			d = append(d, time.Since(t0))
		}
	}
	return latencyRow("PTY directly in-process (floor)", d), nil
}

// latencyWS attaches over a WebSocket with internal/client, sends one byte with conn.Send and
// waits for the data event that echoes it.
func latencyWS(ctx context.Context, cfg config) (LatencyRow, error) {
	h, err := startHarness(ctx, live.Config{IdleTimeout: -1}, cfg)
	if err != nil {
		return LatencyRow{}, err
	}
	defer h.stop()
	s, err := h.openTerminal(ctx)
	if err != nil {
		return LatencyRow{}, err
	}
	id := s.SessionID
	defer func() { _ = h.closeSession(context.WithoutCancel(ctx), id) }()
	after, _ := h.reg.LastSeq(ctx, id)
	conn, err := h.cl.Dial(ctx, id, client.DialOptions{After: after, ContentType: abi.ContentANSI})
	if err != nil {
		return LatencyRow{}, err
	}
	defer func() { _ = conn.Abort() }()
	if err := conn.Send(ctx, []byte(echoSetup)); err != nil {
		return LatencyRow{}, err
	}
	sc := newScanner(readyMarker)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for !sc.found {
		content, err := nextOutput(wctx, conn)
		if err != nil {
			return LatencyRow{}, fmt.Errorf("wait for cat: %w", err)
		}
		sc.feedString(content)
	}
	var d []time.Duration
	for i := range warmup + cfg.samples {
		c := probe(i)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := time.Now()
		err := conn.Send(sctx, []byte{c})
		for err == nil {
			var content string
			content, err = nextOutput(sctx, conn)
			if strings.IndexByte(content, c) >= 0 {
				break
			}
		}
		el := time.Since(t0)
		cancel()
		if err != nil {
			return LatencyRow{}, fmt.Errorf("sample %d: %w", i, err)
		}
		if i >= warmup {
			d = append(d, el)
		}
	}
	return latencyRow("nexus gateway: WebSocket send -> data event (internal/client)", d), nil
}

// nextOutput returns the content of the next data event ("" for other events).
func nextOutput(ctx context.Context, conn *client.Conn) (string, error) {
	e, err := conn.Next(ctx)
	if err != nil {
		return "", err
	}
	switch e.Event {
	case abi.EventData:
		var out abi.TerminalOutput
		if err := json.Unmarshal(e.Payload, &out); err != nil {
			return "", err
		}
		return out.Content, nil
	case abi.EventClose:
		return "", errors.New("session closed")
	}
	return "", nil
}

// latencyTmux drives the same shell in tmux the way agents commonly do: `tmux send-keys`, then
// `tmux capture-pane` until the pane changes, polling every 10ms.
func latencyTmux(ctx context.Context, cfg config) (LatencyRow, error) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		return LatencyRow{Path: "tmux send-keys + capture-pane polling (10ms)", Skipped: true, Note: "tmux not installed (apt-get install -y tmux)"}, nil
	}
	dir, err := os.MkdirTemp("", "nexus-bench-tmux-")
	if err != nil {
		return LatencyRow{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sock := filepath.Join(dir, "tmux.sock")
	env := append(shellEnv(dir), "SHELL="+cfg.shell)
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, tmux, append([]string{"-S", sock, "-f", "/dev/null"}, args...)...)
		cmd.Env = env
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("tmux %s: %w: %s", args[0], err, bytes.TrimSpace(out))
		}
		return string(out), nil
	}
	if _, err := run("new-session", "-d", "-s", "bench", "-x", "80", "-y", "24", "-c", dir, cfg.shell); err != nil {
		return LatencyRow{}, err
	}
	defer func() { _, _ = run("kill-server") }()
	capture := func() (string, error) { return run("capture-pane", "-p", "-t", "bench") }
	waitFor := func(pred func(string) bool, limit time.Duration) (string, error) {
		deadline := time.Now().Add(limit)
		for {
			out, err := capture()
			if err != nil {
				return "", err
			}
			if pred(out) {
				return out, nil
			}
			if time.Now().After(deadline) {
				return out, errors.New("tmux pane did not change in time")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if _, err := waitFor(func(s string) bool { return strings.TrimSpace(s) != "" }, 10*time.Second); err != nil {
		return LatencyRow{}, fmt.Errorf("tmux prompt: %w", err)
	}
	if _, err := run("send-keys", "-t", "bench", "-l", strings.TrimSuffix(echoSetup, "\n")); err != nil {
		return LatencyRow{}, err
	}
	if _, err := run("send-keys", "-t", "bench", "Enter"); err != nil {
		return LatencyRow{}, err
	}
	prev, err := waitFor(func(s string) bool { return strings.Contains(s, readyMarker) }, 10*time.Second)
	if err != nil {
		return LatencyRow{}, fmt.Errorf("tmux cat: %w", err)
	}
	var d []time.Duration
	n := min(cfg.tmuxSamples, cfg.samples)
	for i := range 5 + n {
		c := probe(i)
		t0 := time.Now()
		if _, err := run("send-keys", "-t", "bench", "-l", string(c)); err != nil {
			return LatencyRow{}, err
		}
		out, err := waitFor(func(s string) bool { return s != prev }, 5*time.Second)
		if err != nil {
			return LatencyRow{}, fmt.Errorf("sample %d: %w", i, err)
		}
		el := time.Since(t0)
		prev = out
		if i >= 5 {
			d = append(d, el)
		}
	}
	row := latencyRow("tmux send-keys + capture-pane polling (10ms)", d)
	if v, err := exec.CommandContext(ctx, tmux, "-V").Output(); err == nil {
		row.Note = strings.TrimSpace(string(v))
	}
	return row, nil
}
