package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/reaper"
)

// Local runs shells on this machine over pipes: no terminal, no temp files, no polling.
type Local struct {
	// Shell is the shell to run; empty means bash, else sh.
	Shell string
	// Dir is the starting directory; empty means the current one.
	Dir string
	// Env is the base environment; nil means this process's.
	Env []string
	// Owner answers for the shell and everything it starts (see package reaper); nil means a
	// private owner that tracks the shell's process session.
	Owner *reaper.Owner
}

// Kind implements Transport.
func (l *Local) Kind() string { return "local" }

// IDPart implements Transport.
func (l *Local) IDPart() string { return "local" }

// FindShell returns bash if present, else sh.
func FindShell(preferred string) (string, error) {
	for _, c := range []string{preferred, "bash", "sh"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no shell found: neither bash nor sh is on PATH")
}

// Start implements Transport.
func (l *Local) Start(ctx context.Context, env []string) (Proc, error) {
	sh, err := FindShell(l.Shell)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(sh) //nolint:noctx // the shell outlives the request; Close ends it
	cmd.Dir = l.Dir
	base := l.Env
	if base == nil {
		base = os.Environ()
	}
	cmd.Env = append(append([]string{}, base...), env...)
	owner, private := l.Owner, false
	if owner == nil {
		if owner, err = reaper.Open(ctx, reaper.Options{NoCgroup: true}); err != nil {
			return nil, fmt.Errorf("start %s: %w", sh, err)
		}
		private = true
	}
	g, err := owner.NewGroup()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", sh, err)
	}
	// A process group of its own (cgroup or process session), so closing takes everything
	// it started, and the shell dies with this process should it be killed.
	cmd.SysProcAttr = g.Prepare(nil)
	stdin, stdout, stderr, err := startPiped(cmd)
	if err != nil {
		g.Release()
		return nil, fmt.Errorf("start %s: %w", sh, err)
	}
	if err := g.Started(cmd.Process.Pid); err != nil {
		g.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("start %s: %w", sh, err)
	}
	p := &localProc{cmd: cmd, group: g, stdin: stdin, stdout: stdout, stderr: stderr, done: make(chan struct{}), dir: l.Dir, env: cmd.Env}
	if private {
		p.owner = owner
	}
	go func() {
		err := cmd.Wait()
		p.code = exitStatus(cmd.ProcessState, err)
		close(p.done)
	}()
	return p, nil
}

// startPiped starts cmd with its command stream on stdin (see commandStream) and a pipe on
// stdout and stderr. stdout and stderr are our own pipes rather than StdoutPipe's: Wait closes
// those as soon as the process exits, which would drop what it printed last (`echo bye; exit`)
// before the readers got to it.
func startPiped(cmd *exec.Cmd) (stdin io.WriteCloser, stdout, stderr *os.File, err error) {
	in, commands, err := commandStream()
	if err != nil {
		return nil, nil, nil, err
	}
	stdout, outW, err := os.Pipe()
	if err != nil {
		_, _ = in.Close(), commands.Close()
		return nil, nil, nil, fmt.Errorf("stdout pipe: %w", err)
	}
	stderr, errW, err := os.Pipe()
	if err != nil {
		_, _, _, _ = in.Close(), commands.Close(), stdout.Close(), outW.Close()
		return nil, nil, nil, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, outW, errW
	err = cmd.Start()
	_, _, _ = in.Close(), outW.Close(), errW.Close() // the process and its children hold these ends now
	if err != nil {
		_, _, _ = commands.Close(), stdout.Close(), stderr.Close()
		return nil, nil, nil, err // callers add context
	}
	return commands, stdout, stderr, nil
}

// commandStream makes the shell's stdin, which carries its commands: a socket pair rather than
// a pipe, because any process of the shell's user can open a pipe again through /proc/PID/fd/N
// and write commands into it, where /proc refuses to open a socket (see framing.go). The shell
// only reads: its end cannot send, ours cannot receive.
func commandStream() (shellEnd, ours *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("command stream: %w", err)
	}
	_ = syscall.Shutdown(fds[0], syscall.SHUT_WR)
	_ = syscall.Shutdown(fds[1], syscall.SHUT_RD)
	// Both ends stay blocking: a command is one write, which going through the runtime's poller
	// only made dearer (measured per command), and a write the shell never reads ends when Close
	// kills the shell, its only reader.
	return os.NewFile(uintptr(fds[0]), "shell stdin"), os.NewFile(uintptr(fds[1]), "shell commands"), nil
}

// closeReaders unblocks a process's output readers even if an escaped child still holds the
// write ends.
func closeReaders(rs ...io.Reader) {
	for _, r := range rs {
		if c, ok := r.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

func exitStatus(ps *os.ProcessState, err error) int {
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

type localProc struct {
	cmd    *exec.Cmd
	group  *reaper.Group
	owner  *reaper.Owner // a private owner, closed with the shell
	stdin  io.WriteCloser
	stdout io.Reader
	stderr io.Reader
	done   chan struct{}
	code   int
	dir    string
	env    []string
	once   sync.Once
}

func (p *localProc) Stdin() io.WriteCloser { return p.stdin }
func (p *localProc) Stdout() io.Reader     { return p.stdout }
func (p *localProc) Stderr() io.Reader     { return p.stderr }
func (p *localProc) Done() <-chan struct{} { return p.done }

func (p *localProc) ExitCode() int {
	<-p.done
	return p.code
}

// descendants lists every process below pid, deepest last.
func descendants(pid int) []int {
	children := map[int][]int{}
	for _, pr := range procfs.All() {
		if !pr.Dead() {
			children[pr.PPID] = append(children[pr.PPID], pr.PID)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func (p *localProc) SignalChildren(_ context.Context, shellPID int, sig syscall.Signal) error {
	if shellPID <= 0 {
		shellPID = p.cmd.Process.Pid
	}
	for _, pid := range descendants(shellPID) {
		_ = syscall.Kill(pid, sig)
	}
	return nil
}

func (p *localProc) Run(ctx context.Context, script string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%w: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}

// Close hangs up the shell's process group and its descendants, kills what remains after a
// short grace, and reaps the shell.
func (p *localProc) Close() error {
	var err error
	p.once.Do(func() {
		_ = p.stdin.Close()
		pid := p.cmd.Process.Pid
		// The process tree catches children that left the session while their parents live,
		// where the group is a process session rather than a cgroup.
		hangUp := func(sig syscall.Signal) {
			for _, d := range descendants(pid) {
				_ = syscall.Kill(d, sig)
			}
			p.group.Signal(sig)
		}
		hangUp(syscall.SIGHUP)
		select {
		case <-p.done:
		case <-time.After(500 * time.Millisecond):
		}
		hangUp(syscall.SIGKILL)
		p.group.Kill()
		<-p.done
		closeReaders(p.stdout, p.stderr)
		ctx, cancel := context.WithTimeout(context.Background(), reaper.KillWait)
		defer cancel()
		if err = p.group.Wait(ctx); err == nil {
			p.group.Release()
		} else {
			err = fmt.Errorf("close shell: %d processes survived SIGKILL: %w", len(p.group.Members()), err)
		}
		if p.owner != nil {
			_, _ = p.owner.Close(ctx)
		}
	})
	return err
}
