// Package acpengine runs an external coding agent (Claude Code, Codex, Gemini CLI, Qwen Code,
// OpenCode) over the Agent Client Protocol as the engine of an ai-chat turn (docs/acp-backends.md).
// nexus is the ACP client: the agent process is started on the first prompt, a prompt is
// session/prompt, the agent's session/update notifications become the turn loop's events and
// pi messages (agent.Event, provider.Message, so the ai-chat kind records and publishes them as
// it does its own loop's), session/request_permission becomes a confirmation, and an interrupt
// is session/cancel. The agent's session id outlives the process: a restarted agent loads it
// (session/load) where it can.
//
// The client offers no fs or terminal capability: the agent reads, writes and runs commands
// with its own tools, as the user that runs nexus, in the workspace. Offering fs would route
// only some of its file access through nexus's permission rules (its shell tool would still
// reach everything), a confinement in name only; nexus has no unsaved editor buffers to serve.
package acpengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/reaper"
)

// Config says how to start the agent.
type Config struct {
	// Name is the backend's name, for messages.
	Name    string
	Command string
	Args    []string
	// Env is the agent's whole environment.
	Env []string
	// Dir is the workspace: the process's directory and the ACP session's cwd.
	Dir string
	// Stderr receives the agent's standard error (the session's logs); nil discards it. The
	// last lines are kept too, for the error that reports a crash.
	Stderr io.Writer
	// Owner, when set, starts the agent as a process group of the gateway's (package reaper):
	// it never outlives the gateway, even one that is killed. Without it the agent gets a
	// process group of its own, killed with this process's thread that started it.
	Owner *reaper.Owner
	// Meta is the _meta of session/new and session/load (the agent's own session options).
	Meta map[string]any
	// Version is nexus's version, sent as the client's.
	Version string
	// CancelGrace bounds the wait for the agent to answer a cancelled prompt (default 10s);
	// an agent that does not is stopped, and the next message starts it again.
	CancelGrace time.Duration
	// Logger receives the connection's diagnostics (default: none).
	Logger *slog.Logger
	// StopGrace is how long the agent has to exit on SIGTERM before SIGKILL (default 2s).
	StopGrace time.Duration
}

// Engine is one session's agent: at most one process and one ACP session at a time.
type Engine struct {
	cfg Config

	// mu guards the process and the session; a turn holds it for its start only (Run is not
	// called concurrently: the session runs one turn at a time).
	mu      sync.Mutex
	proc    *process
	session acp.SessionId
	canLoad bool
	// fresh: the session was made new (session/new) and has had no prompt yet.
	fresh bool
	info  string // the agent's name and version, from initialize

	// turn is the running turn that updates go to (nil between turns: a session/load's
	// replay of history is not a new turn).
	turnMu sync.Mutex
	turn   *turn
}

// New returns an engine; nothing starts until the first Run.
func New(cfg Config) *Engine {
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = 10 * time.Second
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 2 * time.Second
	}
	return &Engine{cfg: cfg}
}

// SessionID is the agent's session id ("" before the first turn started it).
func (e *Engine) SessionID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return string(e.session)
}

// Agent is the agent's name and version as it gave them ("" before it started).
func (e *Engine) Agent() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.info
}

// Running reports whether the agent process is up.
func (e *Engine) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc != nil && !e.proc.exited()
}

// process is one run of the agent.
type process struct {
	cmd   *exec.Cmd
	group *reaper.Group
	conn  *acp.ClientSideConnection
	stdin io.Closer
	tail  *tailBuffer
	done  chan struct{} // closed once the process has exited and been waited for
	err   error         // its exit status, once done
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes how the process ended, with the tail of its stderr.
func (p *process) exitError() string {
	var b strings.Builder
	switch {
	case !p.exited():
		// Its status is only known once it has been waited for.
		b.WriteString("it closed its output")
	case p.err != nil:
		b.WriteString(p.err.Error())
	default:
		b.WriteString("exit status 0")
	}
	if t := strings.TrimSpace(p.tail.String()); t != "" {
		b.WriteString("; its last output: ")
		b.WriteString(t)
	}
	return b.String()
}

// ensure starts the agent and its session if they are not up: a new process is initialized,
// and resume (the session id recorded for the conversation) is loaded where the agent can,
// else a new session is made.
func (e *Engine) ensure(ctx context.Context, resume string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil && !e.proc.exited() && e.session != "" {
		return nil
	}
	if e.proc != nil {
		e.reapLocked(ctx)
	}
	p, err := e.start(ctx)
	if err != nil {
		return err
	}
	e.proc = p
	init, err := p.conn.Initialize(ctx, acp.InitializeRequest{
		ProtocolVersion: acp.ProtocolVersionNumber,
		ClientInfo:      &acp.Implementation{Name: "nexus", Version: e.cfg.Version},
		// No fs, no terminal: see the package comment.
		ClientCapabilities: acp.ClientCapabilities{},
	})
	if err != nil {
		return e.failLocked(ctx, "initialize", err)
	}
	e.canLoad = init.AgentCapabilities.LoadSession
	if init.AgentInfo != nil {
		e.info = strings.TrimSpace(init.AgentInfo.Name + " " + init.AgentInfo.Version)
	}
	if resume == "" {
		resume = string(e.session)
	}
	if resume != "" && e.canLoad {
		// The agent replays the conversation as updates; no turn runs, so they are dropped:
		// nexus's transcript has them already.
		_, err := p.conn.LoadSession(ctx, acp.LoadSessionRequest{Meta: e.cfg.Meta, SessionId: acp.SessionId(resume), Cwd: e.cfg.Dir, McpServers: []acp.McpServer{}})
		if err == nil {
			e.session = acp.SessionId(resume)
			return nil
		}
		if p.exited() {
			return e.failLocked(ctx, "session/load", err)
		}
		// A session the agent no longer has: a new one (the conversation's earlier turns are
		// in nexus's transcript, not in the agent's context).
	}
	ns, err := p.conn.NewSession(ctx, acp.NewSessionRequest{Meta: e.cfg.Meta, Cwd: e.cfg.Dir, McpServers: []acp.McpServer{}})
	if err != nil {
		return e.failLocked(ctx, "session/new", err)
	}
	e.session, e.fresh = ns.SessionId, true
	return nil
}

// failLocked stops a process that failed its set-up and says why.
func (e *Engine) failLocked(ctx context.Context, step string, err error) error {
	p := e.proc
	e.stopLocked(ctx)
	msg := err.Error()
	var re *acp.RequestError
	if errors.As(err, &re) {
		msg = re.Message
		if re.Data != nil {
			msg += fmt.Sprintf(" (%v)", re.Data)
		}
	}
	if p != nil && p.exited() {
		return fmt.Errorf("agent %s (%s): %s: the agent exited: %s", e.cfg.Name, e.cfg.Command, step, p.exitError())
	}
	return fmt.Errorf("agent %s (%s): %s: %s", e.cfg.Name, e.cfg.Command, step, msg)
}

// start runs the command with its stdio as the ACP connection.
func (e *Engine) start(ctx context.Context) (*process, error) {
	// The agent lives as long as the engine, not as long as the turn that started it.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), e.cfg.Command, e.cfg.Args...) //nolint:gosec // G204: the operator's config names the agent
	cmd.Env, cmd.Dir = e.cfg.Env, e.cfg.Dir
	tail := &tailBuffer{max: 2048}
	var stderr io.Writer = tail
	if e.cfg.Stderr != nil {
		stderr = io.MultiWriter(e.cfg.Stderr, tail)
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", e.cfg.Name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", e.cfg.Name, err)
	}
	var g *reaper.Group
	if e.cfg.Owner != nil {
		if g, err = e.cfg.Owner.NewGroup(); err != nil {
			return nil, fmt.Errorf("agent %s: %w", e.cfg.Name, err)
		}
		cmd.SysProcAttr = g.Prepare(nil)
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		if g != nil {
			g.Release()
		}
		return nil, fmt.Errorf("agent %s: start %s: %w", e.cfg.Name, e.cfg.Command, err)
	}
	if g != nil {
		if err := g.Started(cmd.Process.Pid); err != nil {
			g.Kill()
		}
	}
	p := &process{cmd: cmd, group: g, stdin: stdin, tail: tail, done: make(chan struct{})}
	// The SDK's SetLogger is not synchronized with the connection's reader, which starts at
	// once: the reader waits at the gate until the logger is set.
	gate := make(chan struct{})
	p.conn = acp.NewClientSideConnection(&client{e: e}, stdin, &gatedReader{r: stdout, open: gate})
	logger := e.cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p.conn.SetLogger(logger)
	close(gate)
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// reapLocked forgets a process that has exited (its group's leftovers killed).
func (e *Engine) reapLocked(ctx context.Context) {
	e.stopLocked(ctx)
}

// stopLocked ends the process: stdin closed (an ACP agent exits on EOF), then SIGTERM to its
// group, then SIGKILL.
func (e *Engine) stopLocked(ctx context.Context) {
	p := e.proc
	e.proc = nil
	if p == nil {
		return
	}
	_ = p.stdin.Close()
	if p.group != nil {
		_ = p.group.Stop(ctx, syscall.SIGTERM, e.cfg.StopGrace)
		<-p.done
		p.group.Release()
		return
	}
	pgid := p.cmd.Process.Pid
	if !p.exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(e.cfg.StopGrace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	// What the agent started in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// Close stops the agent. The session id stays known (SessionID) for the conversation.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked(ctx)
	return nil
}

// Kill ends the agent process at once, as a crash would (tests, a stuck agent).
func (e *Engine) Kill() {
	e.mu.Lock()
	p := e.proc
	e.mu.Unlock()
	if p == nil {
		return
	}
	if p.group != nil {
		p.group.Kill()
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
		if i := bytes.IndexByte(t.b, '\n'); i >= 0 && i < len(t.b)-1 {
			t.b = t.b[i+1:]
		}
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// gatedReader reads nothing before open is closed.
type gatedReader struct {
	r    io.Reader
	open <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
