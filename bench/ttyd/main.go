// Command ttyd measures what an idle terminal with one WebSocket viewer costs a nexus gateway
// against ttyd (github.com/tsl0922/ttyd, the usual way to put a shell in a browser), both read
// from outside as the server process's VmRSS: N viewers each open a terminal running the same
// shell, every terminal prints its prompt, and the difference over an idle server is divided
// by N. The shells are separate processes in both cases and are not counted.
//
//	go run ./bench/ttyd -ttyd /path/to/ttyd -n 200
//
// ttyd builds from its source with Debian's libwebsockets-dev, libjson-c-dev and libuv1-dev
// (cmake, make); docs/BENCHMARKS.md says how it was built for the published figures.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
)

type config struct {
	ttyd, shell string
	n           int
	settle      time.Duration
}

type row struct {
	Server     string  `json:"server"`
	Terminals  int     `json:"terminals"`
	IdleKiB    int64   `json:"idleKiB"`
	LoadedKiB  int64   `json:"loadedKiB"`
	PerTermKiB float64 `json:"perTerminalKiB"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.ttyd, "ttyd", "ttyd", "the ttyd binary")
	flag.StringVar(&cfg.shell, "shell", "bash", "the shell every terminal runs")
	flag.IntVar(&cfg.n, "n", 200, "terminals, each with one WebSocket viewer")
	flag.DurationVar(&cfg.settle, "settle", 2*time.Second, "quiet time after the last prompt before memory is read")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var rows []row
	for _, m := range []func(context.Context, config) (row, error){measureNexus, measureTTYD} {
		r, err := m(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		rows = append(rows, r)
	}
	fmt.Printf("%-6s %9s %10s %11s %14s\n", "server", "terminals", "idle KiB", "loaded KiB", "per terminal")
	for _, r := range rows {
		fmt.Printf("%-6s %9d %10d %11d %10.1f KiB\n", r.Server, r.Terminals, r.IdleKiB, r.LoadedKiB, r.PerTermKiB)
	}
	fmt.Printf("nexus / ttyd per terminal: %.2f×\n", rows[0].PerTermKiB/rows[1].PerTermKiB)
	b, _ := json.MarshalIndent(rows, "", "  ")
	_ = os.MkdirAll(filepath.Join("bench", "results"), 0o750)
	_ = os.WriteFile(filepath.Join("bench", "results", "ttyd.json"), b, 0o644) //nolint:gosec // a results file
}

func measureNexus(ctx context.Context, cfg config) (row, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-ttyd-")
	if err != nil {
		return row{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin, home := filepath.Join(dir, "nexus"), filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return row{}, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/nexus")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return row{}, fmt.Errorf("build nexus: %w", err)
	}
	serve := exec.CommandContext(ctx, bin, "serve", "--no-index", "--max-sessions", strconv.Itoa(cfg.n+16)) //nolint:gosec // the binary this bench built
	serve.Env = append(os.Environ(), "NEXUS_HOME="+home)
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := serve.Start(); err != nil {
		return row{}, err
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	cl := client.New(client.Target{Socket: filepath.Join(home, "state", "gateway.sock")})
	if err := waitFor(ctx, func() error { _, err := cl.Version(ctx); return err }); err != nil {
		return row{}, fmt.Errorf("the gateway did not start: %w", err)
	}
	add := exec.CommandContext(ctx, bin, "project", "add", "bench", "--path", dir) //nolint:gosec // the binary this bench built
	add.Env = serve.Env
	if out, err := add.CombinedOutput(); err != nil {
		return row{}, fmt.Errorf("project add: %w: %s", err, out)
	}
	idle, err := settledRSS(ctx, serve.Process.Pid, cfg.settle)
	if err != nil {
		return row{}, err
	}
	opts, _ := json.Marshal(abi.TerminalOptions{Shell: cfg.shell, Cols: 80, Rows: 24})
	conns := make([]*client.Conn, 0, cfg.n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := 0; i < cfg.n; i++ {
		s, err := cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "bench"}, Options: opts})
		if err != nil {
			return row{}, fmt.Errorf("create terminal %d: %w", i, err)
		}
		c, err := cl.Dial(ctx, s.SessionID, client.DialOptions{ContentType: abi.ContentRaw})
		if err != nil {
			return row{}, fmt.Errorf("viewer %d: %w", i, err)
		}
		conns = append(conns, c)
		for {
			e, err := c.Next(ctx)
			if err != nil {
				return row{}, fmt.Errorf("viewer %d: %w", i, err)
			}
			if e.Event == abi.EventData {
				break
			}
		}
	}
	loaded, err := settledRSS(ctx, serve.Process.Pid, cfg.settle)
	if err != nil {
		return row{}, err
	}
	return result("nexus", cfg.n, idle, loaded), nil
}

func measureTTYD(ctx context.Context, cfg config) (row, error) {
	path, err := exec.LookPath(cfg.ttyd)
	if err != nil {
		return row{}, fmt.Errorf("ttyd: %w (build it from github.com/tsl0922/ttyd, see docs/BENCHMARKS.md)", err)
	}
	port, err := freePort(ctx)
	if err != nil {
		return row{}, err
	}
	srv := exec.CommandContext(ctx, path, "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-W", cfg.shell) //nolint:gosec // the ttyd binary asked for
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		return row{}, err
	}
	defer func() {
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	}()
	base := "127.0.0.1:" + strconv.Itoa(port)
	if err := waitFor(ctx, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+base+"/token", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}); err != nil {
		return row{}, fmt.Errorf("ttyd did not start: %w", err)
	}
	idle, err := settledRSS(ctx, srv.Process.Pid, cfg.settle)
	if err != nil {
		return row{}, err
	}
	conns := make([]*websocket.Conn, 0, cfg.n)
	defer func() {
		for _, c := range conns {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
	}()
	for i := 0; i < cfg.n; i++ {
		ws, resp, err := websocket.Dial(ctx, "ws://"+base+"/ws", &websocket.DialOptions{Subprotocols: []string{"tty"}})
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		if err != nil {
			return row{}, fmt.Errorf("ttyd viewer %d: %w", i, err)
		}
		conns = append(conns, ws)
		// ttyd spawns the command when the first message (auth token and window size) arrives.
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"AuthToken":"","columns":80,"rows":24}`)); err != nil {
			return row{}, fmt.Errorf("ttyd viewer %d: %w", i, err)
		}
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return row{}, fmt.Errorf("ttyd viewer %d: %w", i, err)
			}
			if len(data) > 1 && data[0] == '0' { // '0': output
				break
			}
		}
	}
	// The viewers' reads stop here; ttyd keeps writing nothing to an idle shell.
	loaded, err := settledRSS(ctx, srv.Process.Pid, cfg.settle)
	if err != nil {
		return row{}, err
	}
	return result("ttyd", cfg.n, idle, loaded), nil
}

func result(name string, n int, idle, loaded int64) row {
	return row{Server: name, Terminals: n, IdleKiB: idle, LoadedKiB: loaded, PerTermKiB: float64(loaded-idle) / float64(n)}
}

// settledRSS reads the process's VmRSS once it has not changed over quiet.
func settledRSS(ctx context.Context, pid int, quiet time.Duration) (int64, error) {
	last, err := rss(pid)
	if err != nil {
		return 0, err
	}
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(quiet):
		}
		now, err := rss(pid)
		if err != nil {
			return 0, err
		}
		if now == last {
			return now, nil
		}
		last = now
	}
}

func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read memory of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}

func waitFor(ctx context.Context, f func() error) error {
	var err error
	for range 400 {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return err
}

func freePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
