package process_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/testkit"
)

func newManager(t *testing.T, dir string, opt process.Options) *process.Manager {
	t.Helper()
	owner, err := reaper.Open(t.Context(), reaper.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = owner.Close(context.Background()) })
	opt.Owner = owner
	if opt.Backoff == nil {
		opt.Backoff = func(int) time.Duration { return 0 }
	}
	m, err := process.Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

func sh(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sh")
	if err != nil {
		testkit.SkipUnlessCI(t, "sh is not installed")
	}
	return p
}

// follow reads lines from after until pred says stop.
func follow(t *testing.T, m *process.Manager, id string, after uint64, stop func(process.Line) bool) []process.Line {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	var out []process.Line
	for {
		lines, lost, err := m.Follow(ctx, id, after, 0)
		if err != nil {
			t.Fatalf("follow after %d (got %d lines): %v", after, len(out), err)
		}
		if lost {
			t.Fatalf("lines lost after %d", after)
		}
		for _, l := range lines {
			out = append(out, l)
			after = l.Seq
			if stop(l) {
				return out
			}
		}
	}
}

func waitStatus(t *testing.T, m *process.Manager, id, status string) process.Info {
	t.Helper()
	var in process.Info
	testkit.Eventually(t, "process "+id+" "+status, func() bool {
		var err error
		in, err = m.Get(id)
		return err == nil && in.Status == status
	})
	return in
}

// TestProcessLifecycle: a process's output lines reach a follower in order with their
// streams, its exit status is kept, a stopped process is killed with its whole group, and
// the records survive a new manager (a restarted gateway) with a run it left marked as such.
func TestProcessLifecycle(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir, process.Options{})
	ctx := context.Background()
	in, err := m.Start(ctx, process.Spec{Name: "hello", Command: []string{sh(t), "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	lines := follow(t, m, in.ID, 0, func(l process.Line) bool { return strings.HasPrefix(l.Text, "exited") })
	var streams []string
	for _, l := range lines {
		streams = append(streams, l.Stream+":"+l.Text)
	}
	got := strings.Join(streams, "|")
	if !strings.HasPrefix(got, "status:started pid ") || !strings.Contains(got, "stdout:out") || !strings.Contains(got, "stderr:err") || !strings.HasSuffix(got, "status:exited with status 3 (failed)") {
		t.Fatalf("lines %s", got)
	}
	done := waitStatus(t, m, "hello", process.StatusFailed)
	if done.ExitCode == nil || *done.ExitCode != 3 || done.PID != 0 {
		t.Fatalf("info %+v", done)
	}
	if b, err := os.ReadFile(filepath.Join(done.LogDir, "stdout.log")); err != nil || string(b) != "out\n" {
		t.Fatalf("stdout.log %q %v", b, err)
	}

	// A long-running process and a child it started: stop ends both.
	long, err := m.Start(ctx, process.Spec{Command: []string{sh(t), "-c", "sleep 300 & echo child $!; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	follow(t, m, long.ID, 0, func(l process.Line) bool {
		_, err := fmt.Sscanf(l.Text, "child %d", &child)
		return err == nil
	})
	stopped, err := m.Stop(ctx, long.ID)
	if err != nil || stopped.Status != process.StatusStopped {
		t.Fatalf("stop %+v %v", stopped, err)
	}
	testkit.Eventually(t, "the child gone", func() bool { return syscall.Kill(child, 0) != nil })

	// Bad input.
	for name, s := range map[string]process.Spec{
		"no command":   {},
		"bad name":     {Name: "../x", Command: []string{"true"}},
		"relative dir": {Dir: "x", Command: []string{"true"}},
		"bad policy":   {Restart: "always", Command: []string{"true"}},
		"no program":   {Command: []string{"/nonexistent/program"}},
	} {
		if _, err := m.Start(ctx, s); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := m.Get("nope"); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("unknown: %v", err)
	}

	// A third one still running when the gateway stops (the manager is dropped unclosed, as
	// by a crash): the next one records it as ended with the gateway.
	still, err := m.Start(ctx, process.Spec{Command: []string{sh(t), "-c", "sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := process.Open(dir, process.Options{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := m2.Get(still.ID)
	if err != nil || again.Status != process.StatusFailed || again.Reason != "the gateway stopped while it ran" {
		t.Fatalf("after a restart %+v %v", again, err)
	}
	if old, err := m2.Get("hello"); err != nil || old.ExitCode == nil || *old.ExitCode != 3 {
		t.Fatalf("the record of hello %+v %v", old, err)
	}
}

// TestRestartOnFailure: a crashing process with on-failure is restarted, each restart a
// status line its followers see and a count in its record; stop ends the cycle.
func TestRestartOnFailure(t *testing.T) {
	m := newManager(t, t.TempDir(), process.Options{})
	in, err := m.Start(context.Background(), process.Spec{Restart: process.RestartOnFailure, Command: []string{sh(t), "-c", "echo up; exit 1"}})
	if err != nil {
		t.Fatal(err)
	}
	starts := 0
	follow(t, m, in.ID, 0, func(l process.Line) bool {
		if strings.HasPrefix(l.Text, "started pid") {
			starts++
		}
		return starts == 3
	})
	if got, _ := m.Get(in.ID); got.Restarts < 2 {
		t.Fatalf("restarts %+v", got)
	}
	if _, err := m.Stop(context.Background(), in.ID); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, in.ID, process.StatusStopped)
}

// TestFloodThroughRotation: a process writing lines as fast as it can through many size
// rotations: every line reaches two followers exactly once, in order (count and checksum),
// the rotated files hold the newest lines, and a follower resuming after line N gets no gap
// and no repeat.
func TestFloodThroughRotation(t *testing.T) {
	const n = 20000
	m := newManager(t, t.TempDir(), process.Options{MaxLogBytes: 64 << 10, Keep: 2, Ring: n + 10})
	in, err := m.Start(context.Background(), process.Spec{Command: []string{sh(t), "-c", fmt.Sprintf("i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); done", n)}})
	if err != nil {
		t.Fatal(err)
	}
	want := crc32.NewIEEE()
	for i := 1; i <= n; i++ {
		fmt.Fprintf(want, "line-%d\n", i)
	}
	check := func(from uint64, firstLine int) {
		got := crc32.NewIEEE()
		count := 0
		lines := follow(t, m, in.ID, from, func(l process.Line) bool {
			return l.Stream == process.StreamStatus && strings.HasPrefix(l.Text, "exited")
		})
		for _, l := range lines {
			if l.Stream == process.StreamStdout {
				fmt.Fprintf(got, "%s\n", l.Text)
				count++
			}
		}
		if firstLine == 1 && (count != n || got.Sum32() != want.Sum32()) {
			t.Fatalf("%d lines, checksum %x, want %d and %x", count, got.Sum32(), n, want.Sum32())
		}
		if firstLine > 1 && (count != n-firstLine+1 || lines[0].Text != fmt.Sprintf("line-%d", firstLine)) {
			t.Fatalf("resumed: %d lines from %q", count, lines[0].Text)
		}
	}
	check(0, 1)
	check(0, 1)       // a second follower
	check(5001, 5001) // seq 1 is the start's status line: after seq 5001 comes line-5001
	rotated, err := filepath.Glob(filepath.Join(in.LogDir, "stdout.log*"))
	if err != nil || len(rotated) != 3 {
		t.Fatalf("log files %v %v", rotated, err)
	}
}

// TestLongLinesAndEncoding: a line longer than MaxLine comes in pieces of MaxLine, \r\n ends
// a line as \n does, and each line's shared encoding is its log-line payload, its offset
// included; consecutive lines of a chunk are one slice of the run, a comma apart.
func TestLongLinesAndEncoding(t *testing.T) {
	m := newManager(t, t.TempDir(), process.Options{})
	long := strings.Repeat("x", 2*process.MaxLine+100)
	file := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(file, []byte("first <&>\r\n"+long+"\nshort\nno newline"), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := m.Start(context.Background(), process.Spec{Command: []string{"cat", file}})
	if err != nil {
		t.Fatal(err)
	}
	lines := follow(t, m, in.ID, 0, func(l process.Line) bool { return strings.HasPrefix(l.Text, "exited") })
	var got []string
	var offsets []int64
	for i := range lines {
		l := &lines[i]
		if l.Stream != process.StreamStdout {
			continue
		}
		got = append(got, fmt.Sprintf("%.12s/%d", l.Text, len(l.Text)))
		offsets = append(offsets, l.Offset)
		run, at, end, ok := l.Encoded()
		if !ok {
			t.Fatalf("line %d has no encoding", l.Seq)
		}
		want := abi.LogLine{Type: abi.PayloadLogLine, Stream: abi.StreamStdout, Line: l.Text, Offset: l.Offset}.AppendJSON(nil)
		if string(run[at:end]) != string(want) {
			t.Fatalf("line %d encodes as %.100s, want %.100s", l.Seq, run[at:end], want)
		}
		if i > 0 && l.SameChunk(&lines[i-1]) {
			if _, _, prevEnd, _ := lines[i-1].Encoded(); prevEnd+1 != at || run[prevEnd] != ',' {
				t.Fatalf("lines %d and %d of one chunk are not adjacent in its run", lines[i-1].Seq, l.Seq)
			}
		}
	}
	m1 := process.MaxLine
	want := []string{"first <&>/9", fmt.Sprintf("xxxxxxxxxxxx/%d", m1), fmt.Sprintf("xxxxxxxxxxxx/%d", m1), "xxxxxxxxxxxx/100", "short/5", "no newline/10"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("lines %v, want %v", got, want)
	}
	wantOff := []int64{0, 11, 11 + int64(m1), 11 + 2*int64(m1), 11 + 2*int64(m1) + 101, 11 + 2*int64(m1) + 107}
	if fmt.Sprint(offsets) != fmt.Sprint(wantOff) {
		t.Fatalf("offsets %v, want %v", offsets, wantOff)
	}
	if _, _, _, ok := lines[0].Encoded(); ok {
		t.Fatalf("the status line %q has an encoding", lines[0].Text)
	}
}
