// Package llmserver starts the real model server tests talk to: llama.cpp's llama-server from
// Debian with the tiny deterministic model the repository builds itself (tools/llm, its
// README): without tools it answers "Hello from a tiny model.", with tools it makes exactly one
// call to one of them, and after a tool result it answers in text.
package llmserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// Server is a running llama-server.
type Server struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL  string
	stop func()
}

// Stop stops the server and waits until it is gone.
func (s *Server) Stop() {
	if s != nil && s.stop != nil {
		s.stop()
	}
}

// Dir is the directory of the server's scripts: NEXUS_TEST_LLM_DIR, else tools/llm of the
// repository holding the working directory.
func Dir() string {
	if dir := os.Getenv("NEXUS_TEST_LLM_DIR"); dir != "" {
		return dir
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "tools", "llm")
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

// Cache is where setup.sh keeps llama-server and the model, shared by every clone:
// NEXUS_TEST_LLM_CACHE, else nexus/test-llm in the user's cache directory (setup.sh's default).
func Cache() string {
	if dir := os.Getenv("NEXUS_TEST_LLM_CACHE"); dir != "" {
		return dir
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "nexus", "test-llm")
}

// Missing says what this machine lacks for the server, naming what to install, or "".
// llama-server itself needs nothing installed: setup.sh unpacks Debian's package into the
// cache, with apt-get and dpkg, unless one is on PATH already.
func Missing() string {
	dir := Dir()
	if _, err := os.Stat(filepath.Join(dir, "setup.sh")); err != nil {
		return fmt.Sprintf("no real model server: %s/setup.sh is missing (NEXUS_TEST_LLM_DIR names another directory?)", dir)
	}
	const deps = "; make test-deps installs everything the tests need)"
	for _, n := range []struct{ tool, pkg string }{{"bash", "bash"}, {"node", "nodejs"}, {"npm", "npm"}, {"curl", "curl"}} {
		if _, err := exec.LookPath(n.tool); err != nil {
			return "no real model server: " + n.tool + " is not installed (Debian: apt-get install " + n.pkg + deps
		}
	}
	if _, err := exec.LookPath("llama-server"); err == nil {
		return ""
	}
	for _, tool := range []string{"apt-get", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "no real model server: llama-server is not on PATH and, without " + tool +
				", tools/llm/setup.sh cannot unpack Debian's (install llama.cpp's llama-server: Debian testing's llama.cpp-tools" + deps
		}
	}
	return ""
}

// Start sets the server up (tools/llm/setup.sh, cached in Cache) and starts it (serve.sh) on a
// free port. skip says why there can be none (a missing prerequisite: the test skips, and
// fails under CI); err is a failure of a setup that should have worked. A watchdog stops the
// server when this process ends in any way, so it never outlives the tests even without Stop.
func Start(ctx context.Context) (s *Server, skip string, err error) {
	return StartWith(ctx)
}

// StartWith is Start with llama-server arguments after serve.sh's defaults (which they
// override).
func StartWith(ctx context.Context, args ...string) (s *Server, skip string, err error) {
	if skip := Missing(); skip != "" {
		return nil, skip, nil
	}
	dir, cache := Dir(), Cache()
	if err := os.MkdirAll(cache, 0o700); err != nil { //nolint:gosec // the tests' own cache directory
		return nil, "", fmt.Errorf("llm cache: %w", err)
	}
	// Test binaries of several packages run at once (go test ./...) and share the cache:
	// setup.sh takes a lock in it, so one sets it up while the others wait.
	setup := exec.CommandContext(ctx, "bash", filepath.Join(dir, "setup.sh"), cache) //nolint:gosec // the repository's own script
	out, err := setup.CombinedOutput()
	if err != nil {
		return nil, "", fmt.Errorf("setup.sh %s: %w\n%s", cache, err, tail(out))
	}
	port, err := freePort(ctx)
	if err != nil {
		return nil, "", err
	}
	serve := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(dir, "serve.sh"), strconv.Itoa(port), cache}, args...)...) //nolint:gosec // the repository's own script
	var stderr bytes.Buffer
	serve.Stderr = &stderr
	out, err = serve.Output()
	if err != nil {
		return nil, "", fmt.Errorf("serve.sh %d: %w\n%s", port, err, tail(stderr.Bytes()))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, "", fmt.Errorf("serve.sh printed %q, not a pid", out)
	}
	// serve.sh leaves llama-server running on its own. A watchdog holding the read end of a
	// pipe kills it when the write end closes: at Stop, or when this process dies in any way.
	r, w, err := os.Pipe()
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, "", fmt.Errorf("watchdog pipe: %w", err)
	}
	// The watchdog outlives ctx on purpose: it is what stops the server.
	dog := exec.CommandContext(context.WithoutCancel(ctx), "bash", "-c", `read -r _; kill "$1" 2>/dev/null`, "watchdog", strconv.Itoa(pid)) //nolint:gosec // a pid serve.sh printed
	dog.Stdin = r
	dog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // out of reach of a terminal's Ctrl-C
	if err := dog.Start(); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, "", fmt.Errorf("watchdog: %w", err)
	}
	_ = r.Close()
	return &Server{URL: "http://127.0.0.1:" + strconv.Itoa(port), stop: func() {
		_ = w.Close()
		_ = dog.Wait()
		// Not our child (serve.sh's nohup): wait until it is gone, then make sure.
		for i := 0; i < 200 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}}, "", nil
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func freePort(ctx context.Context) (int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("free port: not a TCP address")
	}
	return addr.Port, nil
}

// Once is a test package's one server: started on first use, stopped by Stop (from TestMain).
type Once struct {
	// Args are llama-server arguments of the server (StartWith).
	Args []string
	once sync.Once
	srv  *Server
	skip string
	err  error
}

// URL returns the server's base URL, starting it on first use. Without a tool setup.sh needs,
// the test is skipped, and fails under CI.
func (o *Once) URL(t testing.TB) string {
	t.Helper()
	o.once.Do(func() { o.srv, o.skip, o.err = StartWith(context.Background(), o.Args...) })
	if o.skip != "" {
		testkit.SkipUnlessCI(t, o.skip)
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.srv.URL
}

// Stop stops the server if it was started.
func (o *Once) Stop() { o.srv.Stop() }

// GeminiShim starts tools/llm/gemini-shim.mjs on a free port in front of the server at url (a
// Server's URL): the Gemini API (generateContent, streamGenerateContent, countTokens)
// translated to the server's chat completions, for Gemini CLI, which speaks nothing else
// (GOOGLE_GEMINI_BASE_URL). It returns the shim's base URL; the test's cleanup stops it (its
// PID) and waits for it, and the shim exits by itself when this process ends (its stdin closes).
func GeminiShim(t testing.TB, url string) string {
	t.Helper()
	shim := filepath.Join(Dir(), "gemini-shim.mjs")
	if _, err := os.Stat(shim); err != nil {
		t.Fatalf("gemini shim: %v", err)
	}
	cmd := exec.CommandContext(context.Background(), "node", shim, "0", url+"/v1", "--watch-stdin") //nolint:gosec // the repository's own script
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("gemini shim: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("gemini shim: %v", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("gemini shim: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	// Its first line names the port it listens on: "gemini-shim on PORT -> UPSTREAM".
	line, err := bufio.NewReader(stdout).ReadString('\n')
	var port int
	if _, serr := fmt.Sscanf(line, "gemini-shim on %d ->", &port); err != nil || serr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("gemini shim printed %q (%v): %s", line, err, tail(stderr.Bytes()))
	}
	// Nothing else is read from stdout: the shim prints no more, and a closed reader is fine.
	return "http://127.0.0.1:" + strconv.Itoa(port)
}
