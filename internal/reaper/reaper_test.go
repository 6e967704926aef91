package reaper_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/testkit"
)

// The test binary doubles as an owner and as a watchdog, so the tests can kill -9 an owner.
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("REAPER_TEST_WATCHDOG") != "":
		_ = reaper.RunWatchdog(context.Background(), os.Args[len(os.Args)-1], os.Stdin, nil)
		os.Exit(0)
	case os.Getenv("REAPER_TEST_OWNER") != "":
		ownerMain()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// jobs starts, from a shell that is the group's leader, the jobs that escape a plain close: one
// that ignores SIGHUP through nohup, one through a trap, and one that starts its own session.
const jobs = `nohup sleep 301 >/dev/null 2>&1 & echo $!
(trap '' HUP; exec sleep 302) & echo $!
setsid sleep 303 & echo $!
exec sleep 304`

func ownerMain() {
	opt := reaper.Options{Dir: os.Getenv("REAPER_TEST_OWNER"), Kind: "test", NoCgroup: os.Getenv("REAPER_TEST_NOCGROUP") != ""}
	if os.Getenv("REAPER_TEST_WITH_WATCHDOG") != "" {
		opt.Watchdog = func(dir string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], dir) //nolint:noctx // a watchdog lives as long as it must
			cmd.Env = append(os.Environ(), "REAPER_TEST_WATCHDOG=1", "REAPER_TEST_OWNER=")
			return cmd
		}
	}
	o, err := reaper.Open(context.Background(), opt)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	g, err := o.NewGroup()
	if err != nil {
		fmt.Println("error", err)
		return
	}
	cmd := exec.Command("sh", "-c", jobs) //nolint:noctx // killed with the owner
	cmd.SysProcAttr = g.Prepare(nil)
	cmd.Stdout = os.Stdout
	if err := cmd.Start(); err != nil {
		fmt.Println("error", err)
		return
	}
	_ = g.Started(cmd.Process.Pid)
	fmt.Println("leader", cmd.Process.Pid)
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed (the test holds stdin open)
}

type proc struct {
	pid   int
	start uint64
}

func (p proc) alive() bool {
	s, err := procfs.Stat(p.pid)
	return err == nil && s.Start == p.start && !s.Dead()
}

func identify(t *testing.T, pid int) proc {
	t.Helper()
	s, err := procfs.Stat(pid)
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return proc{pid, s.Start}
}

// startOwner runs the test binary as an owner and returns it with the four processes its
// group started (three jobs, then the leader).
func startOwner(t *testing.T, dir string, env ...string) (*exec.Cmd, []proc) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:noctx // killed by the test
	cmd.Env = append(append(os.Environ(), "REAPER_TEST_OWNER="+dir), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The shell's lines and the owner's "leader" line race: the leader goes last whenever
	// it arrives.
	var ps []proc
	var leader *proc
	sc := bufio.NewScanner(out)
	for (len(ps) < 3 || leader == nil) && sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error") {
			t.Fatal(line)
		}
		rest, isLeader := strings.CutPrefix(line, "leader ")
		pid, err := strconv.Atoi(rest)
		if err != nil {
			t.Fatalf("owner said %q", line)
		}
		p := identify(t, pid)
		if isLeader {
			leader = &p
		} else {
			ps = append(ps, p)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if len(ps) < 3 || leader == nil {
		t.Fatalf("owner ended early: %v", sc.Err())
	}
	return cmd, append(ps, *leader)
}

func modes(t *testing.T) []string {
	t.Helper()
	m := []string{"process sessions"}
	o, err := reaper.Open(t.Context(), reaper.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Contained() {
		m = append(m, "cgroups")
	} else {
		t.Log("cgroups are not usable here: only the process-session mode is tested")
	}
	_, _ = o.Close(t.Context())
	return m
}

func envFor(mode string) []string {
	if mode == "cgroups" {
		return nil
	}
	return []string{"REAPER_TEST_NOCGROUP=1"}
}

// escapes reports which of the jobs the mode cannot promise to catch: a process session is
// left by a job that starts its own.
func escapes(mode string, i int) bool { return mode != "cgroups" && i == 2 }

func TestWatchdogReapsAfterKill9(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			owner, ps := startOwner(t, dir, append(envFor(mode), "REAPER_TEST_WITH_WATCHDOG=1")...)
			if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = owner.Wait()
			for i, p := range ps {
				if escapes(mode, i) {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
					continue
				}
				testkit.Eventually(t, fmt.Sprintf("job %d (pid %d) to be killed by the watchdog", i, p.pid), func() bool { return !p.alive() })
			}
			testkit.Eventually(t, "the watchdog to remove the owner's records", func() bool {
				e, _ := os.ReadDir(dir)
				return len(e) == 0
			})
		})
	}
}

func TestNextOwnerReapsWhatACrashLeft(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "owners")
			owner, ps := startOwner(t, dir, envFor(mode)...) // no watchdog: as if both were killed
			if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = owner.Wait()
			for i, p := range ps[:3] {
				if !p.alive() {
					t.Fatalf("job %d died with its owner; the test shows nothing", i)
				}
			}
			next, err := reaper.Open(t.Context(), reaper.Options{Dir: dir, NoCgroup: mode != "cgroups"})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = next.Close(t.Context()) }()
			for i, p := range ps {
				if escapes(mode, i) {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
					continue
				}
				if p.alive() {
					t.Errorf("job %d (pid %d) outlived its crashed owner and the next start", i, p.pid)
				}
			}
			e, _ := os.ReadDir(dir)
			if len(e) != 1 { // the new owner's own
				t.Errorf("records left: %v", e)
			}
		})
	}
}

func TestStopReapsEveryJob(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			o, err := reaper.Open(t.Context(), reaper.Options{Dir: t.TempDir(), NoCgroup: mode != "cgroups"})
			if err != nil {
				t.Fatal(err)
			}
			g, err := o.NewGroup()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", jobs) //nolint:noctx // stopped by the test
			cmd.SysProcAttr = g.Prepare(nil)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if err := g.Started(cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			var ps []proc
			sc := bufio.NewScanner(out)
			for len(ps) < 3 && sc.Scan() {
				pid, _ := strconv.Atoi(sc.Text())
				ps = append(ps, identify(t, pid))
			}
			go func() { _ = cmd.Wait() }()
			if err := g.Stop(t.Context(), syscall.SIGHUP, 0); err != nil {
				t.Fatal(err)
			}
			for i, p := range ps {
				if escapes(mode, i) {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
					continue
				}
				if p.alive() {
					t.Errorf("job %d (pid %d) survived Stop", i, p.pid)
				}
			}
			g.Release()
			if left, err := o.Close(t.Context()); err != nil || len(left) != 0 {
				t.Fatalf("Close: %v %v", left, err)
			}
		})
	}
}
