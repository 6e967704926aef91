package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
	"unsafe"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// ptyShell is the alternative the gateway is compared with: the same shell, in the same kind of
// PTY, read directly by this process.
type ptyShell struct {
	cmd    *exec.Cmd
	f      *os.File
	exited chan struct{}
}

func startPTYShell(shell, dir string, env []string) (*ptyShell, error) {
	cmd := exec.Command(shell) //nolint:noctx // lives until close(), which reaps it
	cmd.Dir = dir
	cmd.Env = env
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		return nil, fmt.Errorf("start %s in a pty: %w", shell, err)
	}
	p := &ptyShell{cmd: cmd, f: f, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// readQuiet reads until output has been seen and then nothing arrives for quiet. The master is
// a blocking file (creack/pty's Open calls Fd), so this polls instead of using deadlines.
func (p *ptyShell) readQuiet(quiet, limit time.Duration) error {
	buf := make([]byte, 32<<10)
	deadline := time.Now().Add(limit)
	fd := int(p.f.Fd())
	saw := false
	for time.Now().Before(deadline) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(quiet/time.Millisecond))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pty: %w", err)
		}
		if n == 0 {
			if saw {
				return nil
			}
			continue
		}
		if _, err := p.f.Read(buf); err != nil {
			return fmt.Errorf("read pty: %w", err)
		}
		saw = true
	}
	return fmt.Errorf("shell printed no prompt within %s", limit)
}

// watchdog kills the shell's whole session when ctx ends or limit passes, which makes a blocked
// read of the master return; call the returned stop function when done.
func (p *ptyShell) watchdog(ctx context.Context, limit time.Duration) (stop func() bool) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			killSession(p.cmd.Process.Pid)
		case <-done:
		}
	}()
	return func() bool {
		expired := ctx.Err() != nil
		close(done)
		cancel()
		return expired
	}
}

// close hangs the shell up and reaps it (its whole session is killed if it lingers).
func (p *ptyShell) close() {
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGHUP)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
	}
	killSession(p.cmd.Process.Pid)
	<-p.exited
	_ = p.f.Close()
}

// killSession SIGKILLs every process whose session id is sid (the shell and its jobs).
func killSession(sid int) {
	for _, pid := range sessionMembers([]int{sid}) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// scanner counts payload bytes ('Z') and spots an end marker that may straddle chunks.
type scanner struct {
	marker []byte
	tail   []byte
	z      int64
	found  bool
}

func newScanner(marker string) *scanner { return &scanner{marker: []byte(marker)} }

func (s *scanner) feed(b []byte) {
	s.z += int64(bytes.Count(b, payloadByte))
	if s.found {
		return
	}
	if bytes.Contains(b, s.marker) {
		s.found = true
		return
	}
	// The marker may start in the previous chunk.
	k := min(len(b), len(s.marker)-1)
	joined := append(append([]byte{}, s.tail...), b[:k]...)
	if bytes.Contains(joined, s.marker) {
		s.found = true
		return
	}
	keep := len(s.marker) - 1
	if len(b) >= keep {
		s.tail = append(s.tail[:0], b[len(b)-keep:]...)
		return
	}
	s.tail = append(s.tail, b...)
	if over := len(s.tail) - keep; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
}

// feedString feeds a string without copying it.
func (s *scanner) feedString(str string) {
	if str == "" {
		return
	}
	s.feed(unsafe.Slice(unsafe.StringData(str), len(str))) //nolint:gosec // a read-only view: feed never writes
}

var payloadByte = []byte{'Z'}
