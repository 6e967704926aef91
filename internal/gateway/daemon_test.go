package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// Serve changes the process umask for a moment, so these tests do not run in parallel.

type daemon struct {
	dir    string
	info   gateway.Info
	cancel context.CancelFunc
	done   chan error
	kind   *livetest.FakeKind
	reg    *live.Registry
}

// startDaemon runs Serve on dir until the test ends (or stop is called).
func startDaemon(t *testing.T, dir, listen string, tune ...func(*gateway.DaemonOptions)) *daemon {
	t.Helper()
	d := &daemon{dir: dir, done: make(chan error, 1), kind: newFakeKind(abi.TypeTerminal)}
	d.reg = newRegistry(t, live.Config{IdleTimeout: -1}, d.kind)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	ready := make(chan gateway.Info, 1)
	o := gateway.DaemonOptions{
		StateDir: dir, Listen: listen, Registry: d.reg, Version: "v-test", ShutdownTimeout: 5 * time.Second,
		Ready: func(in gateway.Info) { ready <- in },
	}
	for _, f := range tune {
		f(&o)
	}
	go func() { d.done <- gateway.Serve(ctx, o) }()
	select {
	case d.info = <-ready:
	case err := <-d.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("serve never became ready")
	}
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("serve did not return after cancel")
	}
}

// shortDir returns a fresh state directory whose socket path fits in sun_path.
func shortDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(testkit.ShortTempDir(t), "state") // Serve creates it
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

func TestServeUnixSocket(t *testing.T) {
	dir := shortDir(t)
	d := startDaemon(t, dir, "")
	sock := filepath.Join(dir, gateway.SocketFile)
	if d.info.Socket != sock || d.info.PID != os.Getpid() || d.info.Listen != "" {
		t.Fatalf("info %+v", d.info)
	}
	if m := mode(t, sock); m&fs.ModeSocket == 0 || m.Perm() != 0o600 {
		t.Fatalf("socket mode %v, want a 0600 socket", m)
	}
	if m := mode(t, dir); !m.IsDir() || m.Perm() != 0o700 {
		t.Fatalf("state dir mode %v, want 0700", m)
	}
	if _, err := os.Lstat(filepath.Join(dir, gateway.TokenFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a token file exists without --listen: %v", err)
	}
	var in gateway.Info
	data, err := os.ReadFile(filepath.Join(dir, gateway.InfoFile))
	if err != nil || json.Unmarshal(data, &in) != nil || in.PID != os.Getpid() {
		t.Fatalf("gateway.json: %s %v", data, err)
	}
	if m := mode(t, filepath.Join(dir, gateway.InfoFile)); m.Perm() != 0o600 {
		t.Fatalf("gateway.json mode %v", m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := client.New(client.Target{Socket: sock})
	if v, err := c.Version(ctx); err != nil || v.Version != "v-test" {
		t.Fatalf("version over the socket: %+v %v", v, err)
	}

	// A second gateway on the same state directory refuses to start and names the first.
	other := newRegistry(t, live.Config{})
	t.Cleanup(func() { _ = other.Shutdown(context.Background()) })
	err = gateway.Serve(ctx, gateway.DaemonOptions{StateDir: dir, Registry: other})
	if !errors.Is(err, gateway.ErrAlreadyRunning) {
		t.Fatalf("second serve: %v, want ErrAlreadyRunning", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), sock) {
		t.Fatalf("second serve's error does not name the running gateway: %v", err)
	}
	// A refused gateway never opens its backend: the sessions the first one keeps on disk
	// would otherwise be taken for those of a dead gateway.
	opened := false
	err = gateway.Serve(ctx, gateway.DaemonOptions{StateDir: dir, Open: func(context.Context) (live.Backend, error) {
		opened = true
		return other, nil
	}})
	if !errors.Is(err, gateway.ErrAlreadyRunning) || opened {
		t.Fatalf("second serve with Open: %v, opened %v", err, opened)
	}
	// ...and it left the first one's socket alone.
	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("first gateway after the second was refused: %v", err)
	}

	// Cancel closes every session (close event, reason shutdown) and removes the socket.
	// Several sessions, each watched by WebSocket streams and a long-polling stream: every
	// watcher must get its session's close event before the gateway goes away.
	var ids []string
	for range 4 {
		s, err := c.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.SessionID)
	}
	var watchers, connected sync.WaitGroup
	failures := make(chan string, 64)
	for _, id := range ids {
		for _, tr := range []abi.Transport{abi.TransportWebSocket, abi.TransportWebSocket, abi.TransportPolling} {
			watchers.Add(1)
			connected.Add(1)
			go func() {
				defer watchers.Done()
				var once sync.Once
				var last abi.Event
				err := c.Stream(ctx, id, client.StreamOptions{Follow: true, Transport: tr, PollWait: 5 * time.Second,
					MaxBackoff: 10 * time.Millisecond, GiveUpAfter: time.Second}, func(e abi.Event) error {
					once.Do(connected.Done)
					last = e
					return nil
				})
				var cp abi.ClosePayload
				if err != nil || last.Event != abi.EventClose || json.Unmarshal(last.Payload, &cp) != nil ||
					cp.Reason != abi.CloseShutdown || cp.Status != abi.StatusClosed {
					failures <- fmt.Sprintf("%s watcher of %s: err %v, last event %s %s", tr, id, err, last.Event, last.Payload)
				}
			}()
		}
	}
	connected.Wait()
	d.stop(t)
	watchers.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, id := range ids {
		got, err := d.reg.Get(ctx, id)
		if err != nil || got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseShutdown {
			t.Fatalf("session %s after shutdown: %s %v %v", id, got.Status, got.Metadata["closeReason"], err)
		}
	}
	if d.reg.LiveCount() != 0 {
		t.Fatalf("%d live sessions after shutdown", d.reg.LiveCount())
	}
	for _, f := range []string{gateway.SocketFile, gateway.InfoFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s still exists after shutdown: %v", f, err)
		}
	}
	if _, err := c.Version(ctx); !client.IsCode(err, abi.CodeConnectionLost) {
		t.Fatalf("version after shutdown: %v", err)
	}

	// The lock is released: a new gateway starts on the same directory.
	d2 := startDaemon(t, dir, "")
	if _, err := client.New(client.Target{Socket: d2.info.Socket}).Version(ctx); err != nil {
		t.Fatalf("restarted gateway: %v", err)
	}
}

func TestServeReplacesStaleSocket(t *testing.T) {
	dir := shortDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A gateway that died left its socket (here a plain file) and its info behind.
	if err := os.WriteFile(filepath.Join(dir, gateway.SocketFile), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "")
	if m := mode(t, d.info.Socket); m&fs.ModeSocket == 0 || m.Perm() != 0o600 {
		t.Fatalf("socket mode %v", m)
	}
}

func TestServeListenToken(t *testing.T) {
	dir := shortDir(t)
	d := startDaemon(t, dir, "127.0.0.1:0")
	if d.info.Listen == "" || strings.HasSuffix(d.info.Listen, ":0") {
		t.Fatalf("info.Listen = %q, want the bound address", d.info.Listen)
	}
	tokPath := filepath.Join(dir, gateway.TokenFile)
	if m := mode(t, tokPath); !m.IsRegular() || m.Perm() != 0o600 {
		t.Fatalf("token file mode %v, want 0600", m)
	}
	data, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(data))
	if len(token) < 32 {
		t.Fatalf("token %q is too short", token)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "http://" + d.info.Listen
	// TCP needs the token.
	for _, tok := range []string{"", "wrong", token + "x"} {
		if _, err := client.New(client.Target{URL: url, Token: tok}).Version(ctx); !client.IsCode(err, abi.CodeAuthenticationInvalid) {
			t.Fatalf("tcp with token %q: %v", tok, err)
		}
	}
	resp, err := http.Get(url + "/v1/version")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("raw GET without token: %d", resp.StatusCode)
	}
	good := client.New(client.Target{URL: url, Token: token})
	s, err := good.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	if err != nil {
		t.Fatalf("tcp with the token: %v", err)
	}
	conn, err := good.Dial(ctx, s.SessionID, client.DialOptions{})
	if err != nil {
		t.Fatalf("websocket over tcp with the token: %v", err)
	}
	if ev, err := conn.Next(ctx); err != nil || ev.Seq != 1 {
		t.Fatalf("first event: %+v %v", ev, err)
	}
	_ = conn.Close()
	// The unix socket needs none.
	if _, err := client.New(client.Target{Socket: d.info.Socket}).Get(ctx, s.SessionID); err != nil {
		t.Fatalf("socket without token: %v", err)
	}

	// A restart reuses the token.
	d.stop(t)
	d2 := startDaemon(t, dir, "127.0.0.1:0")
	again, err := os.ReadFile(tokPath)
	if err != nil || string(again) != string(data) {
		t.Fatalf("token after restart %q (was %q): %v", again, data, err)
	}
	if _, err := client.New(client.Target{URL: "http://" + d2.info.Listen, Token: token}).Version(ctx); err != nil {
		t.Fatalf("old token after restart: %v", err)
	}
}

func TestLoadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := gateway.LoadOrCreateToken(dir)
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token %q: %v", tok, err)
	}
	again, err := gateway.LoadOrCreateToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second load %q: %v", again, err)
	}
	// A short token is refused rather than trusted.
	short := t.TempDir()
	if err := os.WriteFile(filepath.Join(short, gateway.TokenFile), []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.LoadOrCreateToken(short); err == nil {
		t.Fatal("a 3-character token was accepted")
	}
	// A symlink is not followed.
	link := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte(strings.Repeat("x", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(link, gateway.TokenFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.LoadOrCreateToken(link); err == nil {
		t.Fatal("a symlinked token file was followed")
	}
}

func TestServeBadListenAddress(t *testing.T) {
	dir := shortDir(t)
	reg := newRegistry(t, live.Config{})
	t.Cleanup(func() { _ = reg.Shutdown(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := gateway.Serve(ctx, gateway.DaemonOptions{StateDir: dir, Listen: "256.0.0.1:99999", Registry: reg})
	if err == nil {
		t.Fatal("serve with an impossible --listen address succeeded")
	}
	// It cleaned up: no server left running, the socket is gone, the directory can be served again.
	testkit.Eventually(t, "a failed Serve's goroutines end", func() bool { return serveGoroutines() == 0 })
	if _, err := os.Lstat(filepath.Join(dir, gateway.SocketFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left behind after a failed start: %v", err)
	}
	startDaemon(t, dir, "")
}

// serveGoroutines counts the goroutines gateway.Serve started that are still running.
func serveGoroutines() int {
	return goroutinesCreatedBy("github.com/nexus-run/nexus/internal/gateway.Serve")
}

// goroutinesCreatedBy counts the running goroutines that the functions named created.
func goroutinesCreatedBy(funcs ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			count := 0
			for _, f := range funcs {
				count += strings.Count(string(buf[:n]), "created by "+f)
			}
			return count
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestServeRefusesUntrustedState(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "planted")
	cases := []struct {
		name   string
		listen string
		setup  func(t *testing.T, dir string)
	}{
		{"world-writable state directory", "", func(t *testing.T, dir string) {
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"token readable by others", "127.0.0.1:0", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, gateway.TokenFile), []byte(strings.Repeat("a", 64)), 0o644); err != nil { //nolint:gosec // the point of the test
				t.Fatal(err)
			}
		}},
		{"token of another user", "127.0.0.1:0", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("giving a file to another user needs root")
			}
			p := filepath.Join(dir, gateway.TokenFile)
			if err := os.WriteFile(p, []byte(strings.Repeat("a", 64)), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"state directory of another user", "", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("giving a file to another user needs root")
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"lock file planted as a symlink", "", func(t *testing.T, dir string) {
			if err := os.Symlink(outside, filepath.Join(dir, gateway.LockFile)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := shortDir(t)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			c.setup(t, dir)
			reg := newRegistry(t, live.Config{IdleTimeout: -1}, newFakeKind(abi.TypeTerminal))
			err := gateway.Serve(t.Context(), gateway.DaemonOptions{StateDir: dir, Listen: c.listen, Registry: reg})
			if !errors.Is(err, fsutil.ErrUntrusted) {
				t.Fatalf("Serve: %v, want ErrUntrusted", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, gateway.SocketFile)); err == nil {
				t.Error("the gateway listened on an untrusted state directory")
			}
		})
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a planted symlink made the gateway create %s: %v", outside, err)
	}
}
