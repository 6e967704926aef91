package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Shell is one persistent shell. Run calls are serialized; state persists between them.
type Shell struct {
	// Grace is the timeout procedure's wait after each signal; zero means DefaultGrace.
	Grace time.Duration

	proc Proc
	pid  int  // the shell's pid as it reported it (remote for ssh and docker)
	bash bool // the shell is bash: commands end with a NUL instead of a token line

	runMu sync.Mutex // one command at a time

	mu      sync.Mutex
	cur     *running
	readers sync.WaitGroup
	eof     chan struct{} // closed when both output streams have ended
	cwd     string
}

// running is the state of the command in flight.
type running struct {
	out, errs *scanner
	stdout    io.Writer
	stderr    io.Writer
	outDone   bool
	errDone   bool
	done      chan struct{}
	doneOnce  sync.Once
}

func (r *running) check() {
	if r.outDone && r.errDone {
		r.doneOnce.Do(func() { close(r.done) })
	}
}

// ErrShellExited is returned when the shell is gone (it exited or was closed).
var ErrShellExited = errors.New("the shell has exited")

// Start launches a shell over tr, sends the bootstrap and waits until it answers.
func Start(ctx context.Context, tr Transport, env []string) (*Shell, error) {
	p, err := tr.Start(ctx, env)
	if err != nil {
		return nil, err
	}
	s := &Shell{proc: p, eof: make(chan struct{})}
	s.readers.Add(2)
	go s.read(p.Stdout(), true)
	go s.read(p.Stderr(), false)
	go func() { s.readers.Wait(); close(s.eof) }()

	token := newToken()
	r := s.begin(token, io.Discard, io.Discard)
	if _, err := io.WriteString(p.Stdin(), bootstrap+readyLine(token)+startLine); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("start shell: %w", err)
	}
	// What runs before the handshake (an SSH login shell's ~/.bashrc) can take forever: bound it.
	limit, what, cause := startLimit(tr)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-p.Done():
		_ = p.Close()
		return nil, fmt.Errorf("start shell: it exited at once (status %d)", p.ExitCode())
	case <-ctx.Done():
		_ = p.Close()
		return nil, fmt.Errorf("start shell: %w", ctx.Err())
	case <-timer.C:
		_ = p.Close()
		return nil, fmt.Errorf("start shell: %s %w within %s: %s", what, ErrStartTimeout, limit, cause)
	}
	s.end()
	if r.out.bad || !r.out.done {
		_ = p.Close()
		return nil, errors.New("start shell: garbled handshake")
	}
	s.pid = r.out.result.status
	s.bash = r.out.result.flags == "B"
	s.cwd = r.out.result.cwd
	return s, nil
}

// PID is the shell's process id where it runs.
func (s *Shell) PID() int { return s.pid }

// Cwd is the shell's directory after the last command.
func (s *Shell) Cwd() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cwd
}

// Proc is the underlying process (for side commands).
func (s *Shell) Proc() Proc { return s.proc }

func (s *Shell) begin(token string, stdout, stderr io.Writer) *running {
	r := &running{out: newScanner(token, true), errs: newScanner(token, false), stdout: stdout, stderr: stderr, done: make(chan struct{})}
	s.mu.Lock()
	s.cur = r
	s.mu.Unlock()
	return r
}

func (s *Shell) end() {
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
}

// read pumps one stream into the running command's writer. Output that arrives while no command
// runs (a background job's) has nowhere to go and is dropped.
func (s *Shell) read(rd io.Reader, isOut bool) {
	defer s.readers.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			s.mu.Lock()
			if r := s.cur; r != nil {
				sc, w, done := r.errs, r.stderr, &r.errDone
				if isOut {
					sc, w, done = r.out, r.stdout, &r.outDone
				}
				write := func(p []byte) { _, _ = w.Write(p) }
				sc.feed(buf[:n], write)
				if sc.done && !*done {
					*done = true
					r.check()
				}
			}
			s.mu.Unlock()
		}
		if err != nil {
			s.mu.Lock()
			if r := s.cur; r != nil {
				sc, w := r.errs, r.stderr
				if isOut {
					sc, w = r.out, r.stdout
				}
				sc.flush(func(p []byte) { _, _ = w.Write(p) })
			}
			s.mu.Unlock()
			return
		}
	}
}

// RunResult is what the engine knows of a finished command; the session layer turns it into
// an ExecResult.
type RunResult struct {
	ExitCode    int
	Cwd         string
	TimedOut    bool
	ShellExited bool
	Duration    time.Duration
}

// TimeoutExitCode is the exit code of a command stopped by its timeout, as timeout(1) uses.
const TimeoutExitCode = 124

// DefaultGrace is how long a timed-out command gets after each signal (SIGINT, SIGTERM,
// SIGKILL) before the next.
const DefaultGrace = 2 * time.Second

// Run runs command and streams its output to stdout and stderr as it arrives. When timeout
// passes (or ctx ends), the command's processes get SIGINT, then SIGKILL; the shell itself
// survives unless it does not come back, in which case it is closed and ShellExited is set.
func (s *Shell) Run(ctx context.Context, command string, timeout time.Duration, stdout, stderr io.Writer) (RunResult, error) {
	if strings.IndexByte(command, 0) >= 0 {
		return RunResult{}, errors.New("command contains a NUL byte")
	}
	s.runMu.Lock()
	defer s.runMu.Unlock()
	select {
	case <-s.proc.Done():
		return RunResult{ShellExited: true, ExitCode: s.proc.ExitCode()}, ErrShellExited
	default:
	}
	start := time.Now()
	// A fresh token per command: the shell reads it only after the command ran (see framing.go).
	token := newToken()
	r := s.begin(token, stdout, stderr)
	defer s.end()

	if _, err := io.WriteString(s.proc.Stdin(), message(s.bash, command, token)); err != nil {
		return s.exited(r, start), nil
	}

	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-r.done:
		return s.finished(r, start, false), nil
	case <-s.proc.Done():
		return s.exited(r, start), nil
	case <-timer:
	case <-ctx.Done():
	}
	// Timeout: interrupt the command's processes, then kill them; the shell stays.
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	for _, step := range []struct {
		sig   syscall.Signal
		grace time.Duration
	}{{syscall.SIGINT, grace}, {syscall.SIGTERM, grace / 2}, {syscall.SIGKILL, grace}} {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.proc.SignalChildren(sctx, s.pid, step.sig)
		cancel()
		select {
		case <-r.done:
			return s.finished(r, start, true), nil
		case <-s.proc.Done():
			res := s.exited(r, start)
			res.TimedOut, res.ExitCode = true, TimeoutExitCode
			return res, nil
		case <-time.After(step.grace):
		}
	}
	// The shell itself is stuck (a builtin loop, say): it cannot be saved.
	_ = s.proc.Close()
	res := s.exited(r, start)
	res.TimedOut, res.ExitCode = true, TimeoutExitCode
	return res, nil
}

func (s *Shell) finished(r *running, start time.Time, timedOut bool) RunResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := RunResult{ExitCode: r.out.result.status, Cwd: r.out.result.cwd, Duration: time.Since(start), TimedOut: timedOut}
	if r.out.bad {
		res.ExitCode = -1
	}
	if res.Cwd != "" {
		s.cwd = res.Cwd
	}
	res.Cwd = s.cwd
	if timedOut {
		res.ExitCode = TimeoutExitCode
	}
	return res
}

// exited builds the result of a command during which the shell ended (exit, or killed).
func (s *Shell) exited(r *running, start time.Time) RunResult {
	<-s.proc.Done()
	// Let the readers deliver what it printed last; a background job that still holds the
	// pipes must not hold the call.
	select {
	case <-s.eof:
	case <-time.After(250 * time.Millisecond):
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return RunResult{ExitCode: s.proc.ExitCode(), Cwd: s.cwd, ShellExited: true, Duration: time.Since(start)}
}

// Exited is closed once the shell has ended.
func (s *Shell) Exited() <-chan struct{} { return s.proc.Done() }

// Close ends the shell and everything it started.
func (s *Shell) Close() error {
	return s.proc.Close()
}
