package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/roadmap"
	"github.com/nexus-run/nexus/internal/trigger"
)

// State file names inside the state directory.
const (
	SocketFile = "gateway.sock"
	TokenFile  = "gateway.token"
	LockFile   = "gateway.lock"
	InfoFile   = "gateway.json"
)

// Info describes a running gateway; it is written next to the lock so a second gateway, and
// clients, can name it.
type Info struct {
	PID     int    `json:"pid"`
	Socket  string `json:"socket"`
	Listen  string `json:"listen,omitempty"`
	Started string `json:"started"`
	Version string `json:"version"`
}

// DaemonOptions configure Serve.
type DaemonOptions struct {
	StateDir string
	// Listen adds a TCP listener (host:port) that requires the bearer token.
	Listen   string
	Registry live.Backend
	// Open, when set, builds the backend once Serve holds the state directory's lock (so a
	// second gateway, refused, never opens the sessions the first one keeps on disk); it
	// replaces Registry.
	Open    func(ctx context.Context) (live.Backend, error)
	Version string
	Logger  *slog.Logger
	// Ready, if set, is called once the listeners accept connections.
	Ready func(Info)
	// ShutdownTimeout bounds the graceful shutdown; default 15s.
	ShutdownTimeout time.Duration
	// AllowedHosts are extra host names the TCP listener answers to (see Options.AllowedHosts).
	AllowedHosts []string
	// BodyTimeout and WriteTimeout: see Options.
	BodyTimeout, WriteTimeout time.Duration
	// MaxUnauthenticated bounds the connections one peer may hold on the TCP listener before
	// authenticating; default DefaultMaxUnauthenticated.
	MaxUnauthenticated int

	// Console, when set, serves the web console on the TCP listener (and mints its sign-in
	// codes on both listeners); its base URL is set once the TCP listener is up.
	Console *console.Auth

	// Chats, when set, is served under /v1/chats on every listener.
	Chats conversation.API
	// Shells, when set, serves agent shells on every listener (Options.Shells); Serve closes
	// it (its shells, then its MCP sessions) after the live sessions, before the listeners.
	Shells *mcp.Server
	// Index, when set, makes Serve keep the history index (state/index.db) fresh for its
	// lifetime with index.Watch and serve it under /v1/index on every listener; the watch
	// stops and the database closes before Serve returns.
	Index *IndexOptions
	// Triggers, when set, serves the cron jobs and webhooks on every listener; its scheduler
	// is run by whoever built it.
	Triggers *trigger.Service
	// Processes, when set, serves the managed processes and servers on every listener.
	Processes *process.Manager
	// Roadmaps, when set, serves the roadmaps on every listener.
	Roadmaps *roadmap.Store
}

// ErrAlreadyRunning is returned when another gateway holds the state directory.
var ErrAlreadyRunning = errors.New("a gateway is already running")

// Serve runs the gateway until ctx ends, then closes every session (reaping its processes) and
// returns. Only one gateway may serve a state directory.
func Serve(ctx context.Context, o DaemonOptions) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 15 * time.Second
	}
	if err := fsutil.MkdirPrivate(o.StateDir); err != nil {
		return err
	}
	lk, locked, err := fsutil.TryLock(filepath.Join(o.StateDir, LockFile))
	if err != nil {
		return fmt.Errorf("lock state directory %s: %w", o.StateDir, err)
	}
	if !locked {
		return fmt.Errorf("%w for %s: %s", ErrAlreadyRunning, o.StateDir, describeRunning(o.StateDir))
	}
	defer func() { _ = lk.Unlock() }()
	if o.Open != nil {
		reg, err := o.Open(ctx)
		if err != nil {
			return err
		}
		o.Registry = reg
		// A failure below must still close what was opened (and restored).
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ShutdownTimeout)
			defer cancel()
			_ = reg.Shutdown(sctx) // a second Shutdown after the one below is a no-op
		}()
	}

	var ix *index.Index
	if o.Index != nil {
		var stopIndex func()
		ix, stopIndex, err = startIndex(ctx, o.StateDir, o.Index, o.Logger)
		if err != nil {
			return err
		}
		defer stopIndex()
	}

	sock := filepath.Join(o.StateDir, SocketFile)
	// We hold the lock, so a socket file left here belongs to a gateway that died.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", sock, err)
	}
	old := umask(0o177)
	ul, err := (&net.ListenConfig{}).Listen(ctx, "unix", sock)
	umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, fsutil.FileMode); err != nil {
		_ = ul.Close()
		return fmt.Errorf("chmod %s: %w", sock, err)
	}
	defer func() { _ = os.Remove(sock) }()

	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	// Headers must arrive within ReadHeaderTimeout and an idle keep-alive connection goes after
	// IdleTimeout; bodies and responses get their own deadlines per request (see bodyDeadline
	// and writeDeadline), because server-wide Read/WriteTimeouts would cut long-polls and runs.
	mk := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			BaseContext: func(net.Listener) context.Context { return baseCtx },
			ConnContext: connContext,
		}
	}
	var streams atomic.Int64
	var indexSync index.SyncOptions
	if o.Index != nil {
		indexSync = o.Index.Sync
	}
	local := mk(Handler(Options{Registry: o.Registry, Chats: o.Chats, Shells: o.Shells, Index: ix, IndexSync: indexSync, Triggers: o.Triggers, Processes: o.Processes, Roadmaps: o.Roadmaps, Version: o.Version, Logger: o.Logger, Streams: &streams, BodyTimeout: o.BodyTimeout, WriteTimeout: o.WriteTimeout, Console: o.Console}))
	servers := []*http.Server{local}
	errc := make(chan error, 2)
	go func() { errc <- local.Serve(ul) }()

	info := Info{PID: os.Getpid(), Socket: sock, Started: time.Now().UTC().Format(time.RFC3339), Version: o.Version}
	if o.Listen != "" {
		token, err := LoadOrCreateToken(o.StateDir)
		if err != nil {
			_ = local.Close() // stop the unix-socket server started above
			return err
		}
		tl, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.Listen)
		if err != nil {
			_ = local.Close()
			return fmt.Errorf("listen on %s: %w", o.Listen, err)
		}
		info.Listen = tl.Addr().String()
		if o.Console != nil {
			o.Console.SetBase("http://" + info.Listen)
		}
		remote := mk(Handler(Options{Console: o.Console, Registry: o.Registry, Chats: o.Chats, Shells: o.Shells, Index: ix, IndexSync: indexSync, Triggers: o.Triggers, Processes: o.Processes, Roadmaps: o.Roadmaps, Version: o.Version, Logger: o.Logger, Token: token, Streams: &streams, AllowedHosts: o.AllowedHosts, BodyTimeout: o.BodyTimeout, WriteTimeout: o.WriteTimeout}))
		servers = append(servers, remote)
		gl := guard(tl, o.MaxUnauthenticated)
		go func() { errc <- remote.Serve(gl) }()
	}
	if b, err := json.MarshalIndent(info, "", "  "); err == nil {
		if err := fsutil.WriteFileAtomic(filepath.Join(o.StateDir, InfoFile), append(b, '\n')); err != nil {
			o.Logger.Warn("write gateway info", "err", err)
		}
	}
	defer func() { _ = os.Remove(filepath.Join(o.StateDir, InfoFile)) }()
	o.Logger.Info("gateway listening", "socket", sock, "tcp", info.Listen, "pid", info.PID)
	if o.Ready != nil {
		o.Ready(info)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	// Sessions first, so every watcher still connected receives each session's close event.
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	if err := o.Registry.Shutdown(sctx); err != nil {
		o.Logger.Error("close sessions", "err", err)
	}
	// Then the agent shells: each gets its audit close line, and the MCP sessions' open event
	// streams end, which the HTTP servers' Shutdown would otherwise wait for.
	if o.Shells != nil {
		o.Shells.Close()
	}
	// WebSocket streams are hijacked connections that Shutdown does not wait for: let each one
	// deliver its session's close event before cancelBase cuts them off.
	for streams.Load() > 0 && sctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			_ = s.Close()
		}
	}
	cancelBase()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}

func describeRunning(stateDir string) string {
	data, err := fsutil.ReadFileNoFollow(filepath.Join(stateDir, InfoFile))
	if err != nil {
		return "another nexus serve holds " + filepath.Join(stateDir, LockFile)
	}
	var in Info
	if json.Unmarshal(data, &in) != nil {
		return "another nexus serve holds " + filepath.Join(stateDir, LockFile)
	}
	s := fmt.Sprintf("nexus serve pid %d on %s", in.PID, in.Socket)
	if in.Listen != "" {
		s += " and " + in.Listen
	}
	return s + ", started " + in.Started
}

// LoadOrCreateToken returns the bearer token of stateDir, creating it (0600) on first use. A
// token file that another user owns or can read is refused: it would not be a secret.
func LoadOrCreateToken(stateDir string) (string, error) {
	path := filepath.Join(stateDir, TokenFile)
	data, err := fsutil.ReadSecretNoFollow(path)
	if err == nil {
		tok := strings.TrimSpace(string(data))
		if len(tok) < 32 {
			return "", fmt.Errorf("token file %s is too short; delete it to make a new one", path)
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	tok := hex.EncodeToString(b)
	f, err := fsutil.CreateExclusive(path)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("write token %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("close token %s: %w", path, err)
	}
	return tok, nil
}
