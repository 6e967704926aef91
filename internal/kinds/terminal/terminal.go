// Package terminal is the terminal session kind: a PTY running the user's shell in a project's
// directory, streaming its output as terminal-output events.
package terminal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// ProjectDir resolves a project id to its directory.
type ProjectDir func(projectID string) (string, error)

// Kind starts terminal sessions.
type Kind struct {
	Projects ProjectDir
	// Shell is the default shell; empty means $SHELL, then bash, then sh.
	Shell string
	// Grace is how long a closing shell gets after SIGHUP before its session is killed.
	Grace time.Duration
	// Env is the environment given to shells (nil means the gateway's own).
	Env []string
	// Shells runs `run` commands in an agent shell beside each terminal; nil disables run.
	Shells *agentshell.Manager
	// Owner answers for every process a terminal starts (its cgroup or process session,
	// records for crash recovery). Nil means a private owner that tracks process sessions.
	Owner *reaper.Owner

	ownerOnce sync.Once
	ownerErr  error
}

func (k *Kind) owner() (*reaper.Owner, error) {
	k.ownerOnce.Do(func() {
		if k.Owner == nil {
			k.Owner, k.ownerErr = reaper.Open(context.Background(), reaper.Options{NoCgroup: true})
		}
	})
	return k.Owner, k.ownerErr
}

// Type implements live.Kind.
func (k *Kind) Type() abi.SessionType { return abi.TypeTerminal }

// Capabilities implements live.Kind: the core ABI's terminal set plus restart (a fresh shell
// under the same id), which nexus terminals do, so they say so (docs/ABI.md).
func (k *Kind) Capabilities() abi.Capabilities {
	return abi.Capabilities{Send: true, Receive: true, Interrupt: true, Resize: true, Close: true, Restart: true, Stream: true}
}

func (k *Kind) shell(opt string) (string, error) {
	for _, c := range []string{opt, k.Shell, os.Getenv("SHELL"), "bash", "sh"} {
		if c == "" {
			continue
		}
		p, err := exec.LookPath(c)
		if err == nil {
			return p, nil
		}
		if c == opt {
			return "", abi.Errorf(abi.CodeInvalidArgument, "", "shell %q not found", opt)
		}
	}
	return "", abi.Errorf(abi.CodeResourceUnavailable, "", "no shell found (tried $SHELL, bash, sh)")
}

// Start implements live.Kind.
func (k *Kind) Start(_ context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	if req.Context.ProjectID == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "terminal sessions need context.projectId (add one with: nexus project add NAME --path DIR)")
	}
	dir, err := k.Projects(req.Context.ProjectID)
	if err != nil {
		return nil, err
	}
	var opts abi.TerminalOptions
	if len(req.Options) > 0 {
		if err := abi.DecodeStrict(req.Options, &opts); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "terminal options: %v", err)
		}
	}
	if opts.Cols == 0 {
		opts.Cols = 80
	}
	if opts.Rows == 0 {
		opts.Rows = 24
	}
	if opts.Cols < 1 || opts.Rows < 1 || opts.Cols > 10000 || opts.Rows > 10000 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "terminal size must be between 1 and 10000 (got %dx%d)", opts.Cols, opts.Rows)
	}
	sh, err := k.shell(opts.Shell)
	if err != nil {
		return nil, err
	}
	env := k.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(append(append([]string{}, env...), opts.Env...), "TERM=xterm-256color", "NEXUS_SESSION_ID="+sink.SessionID())
	grace := k.Grace
	if grace <= 0 {
		grace = 2 * time.Second
	}
	owner, err := k.owner()
	if err != nil {
		return nil, err
	}
	t := &term{sink: sink, dir: dir, shell: sh, env: env, cols: uint16(opts.Cols), rows: uint16(opts.Rows), grace: grace, shells: k.Shells, owner: owner}
	t.unpaused = make(chan struct{})
	close(t.unpaused)
	p, err := t.spawn()
	if err != nil {
		return nil, err
	}
	t.cur = p
	sink.SetMetadata(map[string]any{
		"cwd":           dir,
		"workspacePath": dir,
		"shell":         filepath.Base(sh),
		"shellPath":     sh,
		"pid":           p.cmd.Process.Pid,
		"cols":          opts.Cols,
		"rows":          opts.Rows,
	})
	return t, nil
}

type term struct {
	shells *agentshell.Manager
	owner  *reaper.Owner
	sink   live.Sink
	dir    string
	shell  string
	env    []string
	grace  time.Duration

	mu         sync.Mutex
	cur        *proc
	cols, rows uint16
	closed     bool
	unpaused   chan struct{} // closed while output flows
	runID      string        // the companion agent shell of run, once started
}

// proc is one shell run: restart replaces it under the same session.
type proc struct {
	cmd        *exec.Cmd
	group      *reaper.Group // the shell's session: the shell and everything it starts
	ptm        *os.File
	exited     chan struct{} // closed after Wait reaped the shell
	readerDone chan struct{}
	closing    chan struct{} // closed when stop begins, so a paused reader gives up
	readOnce   sync.Once
	bufSize    int // the reader's buffer size (see readSize)
	exitCode   int

	stopMu   sync.Mutex
	stopping bool
}

func (t *term) spawn() (*proc, error) {
	ptm, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("open pty: %w", err)
	}
	if ptm, err = pollable(ptm); err != nil {
		_ = tty.Close()
		return nil, err
	}
	if err := setWinsize(ptm, t.cols, t.rows); err != nil {
		_ = ptm.Close()
		_ = tty.Close()
		return nil, err
	}
	g, err := t.owner.NewGroup()
	if err != nil {
		_ = ptm.Close()
		_ = tty.Close()
		return nil, fmt.Errorf("start shell %s: %w", t.shell, err)
	}
	cmd := exec.Command(t.shell) //nolint:noctx // the shell outlives any request; stop() ends it
	cmd.Dir = t.dir
	cmd.Env = t.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = g.Prepare(&syscall.SysProcAttr{Setctty: true})
	if err := cmd.Start(); err != nil {
		g.Release()
		_ = ptm.Close()
		_ = tty.Close()
		return nil, fmt.Errorf("start shell %s: %w", t.shell, err)
	}
	_ = tty.Close() // the shell holds the only slave fds now, so its exit ends our reads
	if err := g.Started(cmd.Process.Pid); err != nil {
		// Unrecorded, the shell could outlive a crash of the gateway unnoticed: refuse it.
		g.Kill()
		_ = cmd.Wait()
		_ = ptm.Close()
		return nil, fmt.Errorf("start shell %s: %w", t.shell, err)
	}
	p := &proc{cmd: cmd, group: g, ptm: ptm, exited: make(chan struct{}), readerDone: make(chan struct{}), closing: make(chan struct{})}
	go t.wait(p) // the reader starts later (startReader), so the log opens with the session's own events
	return p, nil
}

// setWinsize sets the window size without (*os.File).Fd, which would switch the master to
// blocking mode and make Close unable to interrupt a pending read.
func setWinsize(f *os.File, cols, rows uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("pty size: %w", err)
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		return fmt.Errorf("set pty size %dx%d: %w", cols, rows, err)
	}
	return nil
}

func foregroundGroup(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("pty: %w", err)
	}
	var pgrp int
	var ioErr error
	err = rc.Control(func(fd uintptr) { pgrp, ioErr = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP) })
	if err == nil {
		err = ioErr
	}
	if err != nil {
		return 0, fmt.Errorf("foreground process group: %w", err)
	}
	return pgrp, nil
}

// readSize is the PTY read buffer. The kernel hands out at most a few KiB per read(2), and the
// reader takes whatever is ready in a loop of them (readReady), up to the buffer's size. The
// buffer is borrowed from a pool once output is ready and given back after it, so an idle
// session, which is most of them, holds none (a buffer of its own, on the heap or on the
// reader's stack, was 16 KiB of every idle terminal). A session whose output fills it (a flood)
// moves to floodReadSize, for good: a few large events instead of a stream of 4 KiB ones, which
// every reader and browser pays for per event.
const (
	readSize      = 16 << 10
	floodReadSize = 64 << 10
)

var (
	readBufs  = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}
	floodBufs = sync.Pool{New: func() any { b := make([]byte, floodReadSize); return &b }}
)

func bufPool(size int) *sync.Pool {
	if size == floodReadSize {
		return &floodBufs
	}
	return &readBufs
}

// startReader starts streaming p's output (once).
func (t *term) startReader(p *proc) {
	p.readOnce.Do(func() { go t.read(p) })
}

// Begin implements live.Beginner: output flows only once the session is announced.
func (t *term) Begin() {
	t.mu.Lock()
	p := t.cur
	t.mu.Unlock()
	t.startReader(p)
}

func (t *term) read(p *proc) {
	defer close(p.readerDone)
	p.bufSize = readSize
	rc, err := p.ptm.SyscallConn()
	if err != nil {
		return
	}
	// carry is the start of a UTF-8 character a read cut: it goes out with the next read.
	var carry [4]byte
	nc := 0
	for {
		t.mu.Lock()
		gate := t.unpaused
		t.mu.Unlock()
		select { // paused: stop reading, so the PTY pushes back on the program
		case <-gate:
		case <-p.closing:
			return
		}
		pool := bufPool(p.bufSize)
		var held *[]byte
		take := func() []byte {
			held = pool.Get().(*[]byte)
			copy(*held, carry[:nc])
			return (*held)[nc:]
		}
		give := func() { pool.Put(held); held = nil }
		n, err := readReady(rc, take, give)
		if held != nil {
			buf := *held
			n += nc
			nc = 0
			cut := abi.ValidUTF8Prefix(buf[:n])
			if err != nil {
				cut = n
			}
			if cut > 0 {
				out := make([]byte, cut)
				copy(out, buf[:cut])
				t.sink.Output(out)
			}
			nc = copy(carry[:], buf[cut:n])
			if n == len(buf) && p.bufSize < floodReadSize {
				p.bufSize = floodReadSize
			}
			give()
		}
		if err != nil {
			return
		}
	}
}

// readReady reads what the PTY master has ready: it waits (in the netpoller) until some output
// is there, then reads on without waiting until the buffer is full or nothing more is ready,
// and returns how many bytes it read. The kernel's line discipline hands out 4 KiB per read(2)
// and refills as it is read, so a flood comes out in buffer-sized pieces, while a keystroke's
// echo goes at once. It holds no buffer while it waits: take lends one when a read is tried,
// and one that found nothing goes back through give before the wait; the one that got output
// is still taken when it returns.
func readReady(rc syscall.RawConn, take func() []byte, give func()) (int, error) {
	n := 0
	var (
		buf  []byte
		rerr error
	)
	err := rc.Read(func(fd uintptr) bool {
		if buf == nil {
			buf = take()
		}
		for n < len(buf) {
			m, err := unix.Read(int(fd), buf[n:])
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.EAGAIN):
				if n > 0 {
					return true
				}
				give() // nothing yet: wait for the poller holding no buffer
				buf = nil
				return false
			case err != nil:
				rerr = err
				return true
			case m == 0:
				rerr = io.EOF
				return true
			}
			n += m
		}
		return true
	})
	if n > 0 {
		return n, nil // an error after output comes back at the next call
	}
	if err != nil {
		return 0, err
	}
	return 0, rerr
}

func (t *term) wait(p *proc) {
	awaitExit(p.cmd.Process.Pid)
	err := p.cmd.Wait()
	p.exitCode = exitCode(p.cmd.ProcessState, err)
	close(p.exited)
	p.stopMu.Lock()
	stopping := p.stopping
	p.stopMu.Unlock()
	if stopping {
		return
	}
	// The shell ended by itself (exit, or killed from outside). Let the reader drain what it
	// printed; a background job still holding the terminal must not keep the session open.
	select {
	case <-p.readerDone:
	case <-time.After(250 * time.Millisecond):
	}
	code := p.exitCode
	t.sink.Ended(abi.CloseExited, &code)
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if err != nil && ps.ExitCode() < 0 {
		return -1
	}
	return ps.ExitCode()
}

// stop hangs up p's shell and everything it started (its process group: a cgroup where there
// are cgroups, else its process session), kills what is left after the grace period or once ctx
// ends, reaps the shell and closes the PTY.
func (t *term) stop(ctx context.Context, p *proc) error {
	p.stopMu.Lock()
	if p.stopping {
		p.stopMu.Unlock()
		<-p.readerDone
		return nil
	}
	p.stopping = true
	close(p.closing)
	p.stopMu.Unlock()
	err := p.group.Stop(ctx, syscall.SIGHUP, t.grace)
	<-p.exited
	if err == nil {
		p.group.Release()
	}
	_ = p.ptm.Close()
	t.startReader(p) // a reader that never started must still finish
	<-p.readerDone
	return err
}

// Send implements live.Instance.
func (t *term) Send(ctx context.Context, req live.SendRequest) (live.SendResult, error) {
	t.mu.Lock()
	p := t.cur
	t.mu.Unlock()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = p.ptm.SetWriteDeadline(deadline)
	if _, err := p.ptm.Write(req.Data); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return live.SendResult{}, abi.Errorf(abi.CodeResourceUnavailable, t.sink.SessionID(), "terminal input buffer is full: the program is not reading its input")
		}
		return live.SendResult{}, fmt.Errorf("write to terminal: %w", err)
	}
	return live.SendResult{}, nil
}

// Control implements live.Instance.
func (t *term) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	switch req.Command {
	case abi.CommandInterrupt:
		return t.interrupt()
	case abi.CommandResize:
		return t.resize(uint16(req.Width), uint16(req.Height))
	case abi.CommandRestart:
		return t.restart()
	}
	return nil, abi.Errorf(abi.CodeCapabilityUnsupported, t.sink.SessionID(), "terminal sessions do not support %s", req.Command)
}

func (t *term) interrupt() (any, error) {
	t.mu.Lock()
	p := t.cur
	t.mu.Unlock()
	pgrp, err := foregroundGroup(p.ptm)
	if err != nil || pgrp <= 0 {
		// No foreground group known: let the line discipline turn ^C into SIGINT.
		if _, werr := p.ptm.Write([]byte{0x03}); werr != nil {
			return nil, fmt.Errorf("interrupt: %w", werr)
		}
		return map[string]any{"signal": "SIGINT", "via": "tty"}, nil
	}
	if err := syscall.Kill(-pgrp, syscall.SIGINT); err != nil {
		return nil, fmt.Errorf("interrupt process group %d: %w", pgrp, err)
	}
	return map[string]any{"signal": "SIGINT", "processGroup": pgrp}, nil
}

func (t *term) resize(cols, rows uint16) (any, error) {
	t.mu.Lock()
	p := t.cur
	t.cols, t.rows = cols, rows
	t.mu.Unlock()
	if err := setWinsize(p.ptm, cols, rows); err != nil {
		return nil, err
	}
	// TIOCSWINSZ signals the foreground group; the shell itself learns at its next prompt.
	t.sink.SetMetadata(map[string]any{"cols": int(cols), "rows": int(rows)})
	return map[string]any{"width": int(cols), "height": int(rows)}, nil
}

func (t *term) restart() (any, error) {
	t.mu.Lock()
	old := t.cur
	t.mu.Unlock()
	if err := t.stop(context.Background(), old); err != nil {
		return nil, abi.Errorf(abi.CodeResourceUnavailable, t.sink.SessionID(), "restart: %v", err)
	}
	p, err := t.spawn()
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.cur = p
	t.mu.Unlock()
	pid := p.cmd.Process.Pid
	t.sink.SetMetadata(map[string]any{"pid": pid, "restartedAt": abi.FormatTime(t.sink.Now())})
	t.startReader(p)
	return map[string]any{"pid": pid, "previousPid": old.cmd.Process.Pid, "previousExitCode": old.exitCode}, nil
}

// SetPaused implements live.Pauser.
func (t *term) SetPaused(paused bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.unpaused:
		if paused {
			t.unpaused = make(chan struct{})
		}
	default:
		if !paused {
			close(t.unpaused)
		}
	}
}

// Close implements live.Instance.
func (t *term) Close(ctx context.Context) error {
	t.SetPaused(false)
	t.mu.Lock()
	p := t.cur
	t.closed = true
	runID := t.runID
	t.mu.Unlock()
	err := t.stop(ctx, p)
	if runID != "" {
		_ = t.shells.Destroy(ctx, runID)
	}
	return err
}

// Run implements live.Runner: the command runs in an agent shell beside the PTY, started in
// the project's directory on first use and kept (its own cd and exports persist between runs),
// so the result is exact (split streams, exit code, cwd) where typing into the PTY could only
// guess. Watchers see the command and its output as terminal-output events.
func (t *term) Run(ctx context.Context, req abi.RunRequest) (any, error) {
	if t.shells == nil {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, t.sink.SessionID(), "this gateway runs no agent shells")
	}
	var budget *shell.Budget
	if len(req.Budget) > 0 && string(req.Budget) != "null" {
		budget = new(shell.Budget)
		if err := abi.DecodeStrict(req.Budget, budget); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, t.sink.SessionID(), "budget: %v", err)
		}
	}
	if req.TimeoutSecs < 0 || req.TimeoutSecs > int(agentshell.MaxTimeout/time.Second) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, t.sink.SessionID(), "timeoutSecs must be between 1 and %d", int(agentshell.MaxTimeout/time.Second))
	}
	t.mu.Lock()
	id := t.runID
	t.mu.Unlock()
	if id == "" {
		info, err := t.shells.Create(ctx, agentshell.CreateOptions{Transport: "local", Cwd: t.dir})
		if err != nil {
			return nil, runErr(t.sink.SessionID(), err)
		}
		id = info.SessionID
		t.mu.Lock()
		t.runID = id
		t.mu.Unlock()
	}
	t.sink.Output([]byte("\r\n[run] $ " + strings.ReplaceAll(req.Command, "\n", "\r\n") + "\r\n"))
	res, err := t.shells.Exec(ctx, id, req.Command, agentshell.ExecOptions{
		Budget:  budget,
		Timeout: time.Duration(req.TimeoutSecs) * time.Second,
		OnOutput: func(_ string, p []byte) {
			t.sink.Output(bytes.ReplaceAll(p, []byte("\n"), []byte("\r\n")))
		},
	})
	if err != nil {
		return nil, runErr(t.sink.SessionID(), err)
	}
	if res.ShellExited {
		t.mu.Lock()
		t.runID = ""
		t.mu.Unlock()
	}
	t.sink.Output([]byte(fmt.Sprintf("[run] exit %d (%d ms)\r\n", res.ExitCode, res.DurationMS)))
	return res, nil
}

func runErr(id string, err error) error {
	switch {
	case errors.Is(err, agentshell.ErrInvalid), errors.Is(err, agentshell.ErrBlocked):
		return abi.Errorf(abi.CodeInvalidArgument, id, "%v", err)
	case errors.Is(err, agentshell.ErrLimit):
		return abi.Errorf(abi.CodeLimitExceeded, id, "%v", err)
	}
	return abi.Errorf(abi.CodeResourceUnavailable, id, "%v", err)
}
