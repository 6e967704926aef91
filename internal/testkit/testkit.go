// Package testkit holds what many of nexus's tests need: waiting for a condition instead of
// sleeping, a buffer one goroutine writes while another reads, and skips that are visible and
// turn into failures in CI.
package testkit

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Patience is how long Eventually waits before it declares a hang. It is not a performance bound:
// a loaded machine may take far longer than an idle one to reach a condition, so it is generous,
// and NEXUS_TEST_PATIENCE (a Go duration) raises it further.
func Patience() time.Duration {
	if v := os.Getenv("NEXUS_TEST_PATIENCE"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 2 * time.Minute
}

// Eventually polls cond until it holds, failing the test (with what, a description of the
// condition) only if it never holds within Patience: a guard against hangs, not a timing check.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Patience())
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting (%s) for: %s", Patience(), what)
		}
		time.Sleep(wait)
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

// Buffer is a bytes.Buffer safe for one writer and any number of concurrent readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns a copy of everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Len is the number of bytes written so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// WaitFor waits until the buffer contains want and returns its contents then.
func (b *Buffer) WaitFor(tb testing.TB, want string) string {
	tb.Helper()
	var s string
	Eventually(tb, "output containing "+strconvQuote(want), func() bool {
		s = b.String()
		return strings.Contains(s, want)
	})
	return s
}

func strconvQuote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return "\"" + strings.ReplaceAll(s, "\n", "\\n") + "\""
}

// InCI reports whether the suite runs under CI (the CI environment variable is set and not
// "false" or "0").
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// SkipUnlessCI skips the test with reason, visibly; under CI, where everything the suite needs is
// installed by .ci/run, a missing prerequisite is a failure instead.
func SkipUnlessCI(tb testing.TB, reason string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("prerequisite missing under CI: %s", reason)
	}
	tb.Skip(reason)
}

// ShortTempDir returns a fresh directory directly under the system's temporary directory,
// removed when the test ends. t.TempDir's paths carry the test's name, and a unix socket
// path must fit in sun_path (108 bytes): state directories that hold a socket live here.
func ShortTempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "nx") //nolint:usetesting // t.TempDir's path is too long for a socket
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// WriteExecutable writes an executable script (mode 0700) that the test then runs. A process
// forked by another goroutine while the file is open for writing keeps a writable descriptor
// until it execs, and running the script meanwhile fails with "text file busy" (ETXTBSY):
// holding syscall.ForkLock for reading keeps forks out of that window.
func WriteExecutable(tb testing.TB, path, content string) {
	tb.Helper()
	syscall.ForkLock.RLock()
	err := os.WriteFile(path, []byte(content), 0o700) //nolint:gosec // an executable for the test
	syscall.ForkLock.RUnlock()
	if err != nil {
		tb.Fatal(err)
	}
}
