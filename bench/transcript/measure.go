package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/transcript"
)

// sample is one measured child process.
type sample struct {
	wall    time.Duration
	maxRSS  int64 // bytes, the child's peak resident set (getrusage ru_maxrss)
	count   int   // messages in the context, as the child printed it
	errText string
}

// measure runs name with args as a child process and returns its wall time
// (start to reaped) and peak RSS. A failed child gives a sample with errText
// set to the exit status and the end of its stderr (pi's own error message).
func measure(ctx context.Context, timeout time.Duration, env []string, name string, args ...string) sample {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &limitedBuffer{b: &stderr, max: 64 << 10}
	t0 := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(t0)}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			s.maxRSS = ru.Maxrss * 1024 // Linux reports KiB
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (timed out after %s)", err, timeout)
		}
		s.errText = fmt.Sprintf("%v: %s", err, tail(stderr.String(), 1500))
		return s
	}
	n, perr := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if perr != nil {
		s.errText = fmt.Sprintf("unexpected output %q: %v", tail(stdout.String(), 200), perr)
		return s
	}
	s.count = n
	return s
}

// tail returns the last max bytes of s, trimmed.
func tail(s string, maxLen int) string {
	s = strings.TrimSpace(s)
	if len(s) > maxLen {
		s = "..." + s[len(s)-maxLen:]
	}
	return s
}

// limitedBuffer keeps the last max bytes written to it (a crashing node
// prints its stack after the message we want).
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b.Write(p)
	if over := l.b.Len() - l.max; over > 0 {
		l.b.Next(over)
	}
	return len(p), nil
}

// nexusChild is the measured nexus side, run in a child process of this
// program: open the transcript and build the context at its default leaf,
// as `nexus chat history --file` does, and print the message count.
func nexusChild(path string) error {
	f, err := transcript.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	ctx, err := f.BuildContext("")
	if err != nil {
		return fmt.Errorf("build context of %s: %w", path, err)
	}
	if len(ctx.Messages) == 0 && len(f.Entries) > 0 {
		return errors.New("empty context")
	}
	_, err = fmt.Fprintln(os.Stdout, len(ctx.Messages))
	return err
}
