package shell

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/testkit"
)

// watchdogEnv, when set, makes the test binary a watchdog instead of running tests: see
// startWatchdog.
const watchdogEnv = "NEXUS_SHELL_TEST_WATCHDOG"

func TestMain(m *testing.M) {
	if entry := os.Getenv(watchdogEnv); entry != "" {
		runWatchdog(entry)
		return
	}
	os.Exit(m.Run())
}

// watchdog is a copy of the test binary that, once the test ends or the test binary dies in any
// way (a panic, a -timeout, SIGKILL), kills every process whose environment holds its entry
// ("NAME=value"), every process it was told to watch, and everything below them. The test gives
// entry to what it starts (every session of an sshd), so nothing it started can outlive it,
// even when t.Cleanup never runs. The watchdog notices through its stdin: a pipe whose only
// writer is the test, on which the test also names the processes to watch.
type watchdog struct {
	mu sync.Mutex
	w  io.WriteCloser
}

// watch adds pid (a process the environment entry does not find, like sshd, which overwrites
// its environment with its process title) to what the watchdog kills.
func (wd *watchdog) watch(t *testing.T, pid int) {
	t.Helper()
	p, err := procfs.Stat(pid)
	if err != nil {
		t.Fatal(err)
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if _, err := fmt.Fprintf(wd.w, "%d %d\n", pid, p.Start); err != nil {
		t.Fatal(err)
	}
}

func startWatchdog(t *testing.T, entry string) *watchdog {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self) //nolint:noctx // it must outlive every context of the test
	cmd.Env = append(os.Environ(), watchdogEnv+"="+entry)
	// Its own process group: ^C to `go test` must not stop it before it has cleaned up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testkit.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wd := &watchdog{w: w}
	t.Cleanup(func() {
		wd.mu.Lock()
		_ = w.Close()
		wd.mu.Unlock()
		if err := cmd.Wait(); err != nil {
			t.Errorf("watchdog: %v\n%s", err, out.String())
		}
	})
	return wd
}

func runWatchdog(entry string) {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var roots []procfs.Proc
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var p procfs.Proc
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &p.PID, &p.Start); err == nil {
			roots = append(roots, p)
		}
	}
	killMarked(entry, roots)
}

// killMarked kills the processes whose environment holds entry, the roots (unless their pid
// now names another process) and everything below them. They are stopped first, so none can
// fork while the tree is walked again, then killed.
func killMarked(entry string, roots []procfs.Proc) {
	var all []int
	for range 3 {
		var found []int
		pids := envPIDs(entry)
		for _, r := range roots {
			if p, err := procfs.Stat(r.PID); err == nil && p.Start == r.Start && !p.Dead() {
				pids = append(pids, r.PID)
			}
		}
		for _, pid := range pids {
			for _, p := range append([]int{pid}, descendants(pid)...) {
				if !slices.Contains(all, p) && !slices.Contains(found, p) {
					found = append(found, p)
				}
			}
		}
		if len(found) == 0 {
			break
		}
		for _, p := range found {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		all = append(all, found...)
	}
	for _, p := range all {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// envPIDs lists the live processes other than this one whose environment holds entry.
func envPIDs(entry string) []int {
	want := []byte(entry)
	self := os.Getpid()
	var out []int
	for _, pr := range procfs.All() {
		if pr.Dead() || pr.PID == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pr.PID) + "/environ")
		if err != nil {
			continue
		}
		if slices.ContainsFunc(bytes.Split(b, []byte{0}), func(kv []byte) bool { return bytes.Equal(kv, want) }) {
			out = append(out, pr.PID)
		}
	}
	return out
}

// taggedPIDs lists the live processes of this machine whose environment holds TagVar=tag.
func taggedPIDs(tag string) []int { return envPIDs(TagVar + "=" + tag) }

// cmdline is the command line of pid, its arguments joined by spaces ("" once it is gone).
func cmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return string(bytes.TrimRight(bytes.ReplaceAll(b, []byte{0}, []byte{' '}), " "))
}

// withCmdline keeps the pids whose command line is exactly line.
func withCmdline(pids []int, line string) []int {
	var out []int
	for _, p := range pids {
		if cmdline(p) == line {
			out = append(out, p)
		}
	}
	return out
}

// waitTaggedSleeps waits until n tagged processes run sleep. Counting all tagged processes
// would race: a subshell on its way to fork a job is tagged too, and exits.
func waitTaggedSleeps(t *testing.T, tag string, n int) {
	t.Helper()
	testkit.Eventually(t, strconv.Itoa(n)+" tagged sleep processes", func() bool {
		sleeps := 0
		for _, pid := range taggedPIDs(tag) {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && string(bytes.TrimSpace(b)) == "sleep" {
				sleeps++
			}
		}
		return sleeps >= n
	})
}

// waitTagGone waits until no live process has the tag.
func waitTagGone(t *testing.T, tag string) {
	t.Helper()
	testkit.Eventually(t, "every process of the session to be gone", func() bool { return len(taggedPIDs(tag)) == 0 })
}

// patient is the timeout of commands that are expected to finish: long enough never to fire on
// a loaded machine, so only the timeout tests see timeouts.
var patient = testkit.Patience()

func remoteRun(t *testing.T, sh *Shell, cmd string, timeout time.Duration) (RunResult, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sh.Run(context.Background(), cmd, timeout, &out, &errb)
	if err != nil && !errors.Is(err, ErrShellExited) {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return res, out.String(), errb.String()
}

// waitExited waits until the shell has ended.
func waitExited(t *testing.T, sh *Shell) {
	t.Helper()
	testkit.Eventually(t, "the shell to end", func() bool {
		select {
		case <-sh.Exited():
			return true
		default:
			return false
		}
	})
}

// sessionProcs counts the processes of sh's session, where they run, whose command line is
// exactly line.
type sessionProcs func(t *testing.T, sh *Shell, line string) int

// testRemoteEngine drives the engine over a remote transport: state, streams, exit codes,
// timeouts that kill the command and keep the session, side commands, exit.
func testRemoteEngine(t *testing.T, tr Transport, procs sessionProcs) {
	sh, err := Start(context.Background(), tr, []string{"NX_GIVEN=it's given"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Close() }()
	sh.Grace = 500 * time.Millisecond
	if sh.PID() <= 1 {
		t.Fatalf("pid %d", sh.PID())
	}
	dir := "/tmp/nx engine 'q' " + newToken()
	if res, _, errs := remoteRun(t, sh, "mkdir -p "+shQuote(dir)+" && cd "+shQuote(dir)+" && export NX_X=42", patient); res.ExitCode != 0 || res.Cwd != dir {
		t.Fatalf("cd: %+v %q", res, errs)
	}
	res, out, errs := remoteRun(t, sh, `echo "out $NX_X $NX_GIVEN"; echo err >&2; pwd; f() { return $1; }; f 3`, patient)
	if out != "out 42 it's given\n"+dir+"\n" || errs != "err\n" || res.ExitCode != 3 || res.Cwd != dir {
		t.Fatalf("got %+v out %q err %q", res, out, errs)
	}
	if res, _, _ := remoteRun(t, sh, "false", patient); res.ExitCode != 1 {
		t.Fatalf("false: %+v", res)
	}
	// Timeouts: SIGINT ends the first command; the second ignores it and is killed by the
	// escalation. Either way the command is gone and the shell keeps its state.
	for _, cmd := range []struct{ run, line string }{
		{"sleep 3031", "sleep 3031"},
		{"(trap '' INT TERM; sleep 3032; echo not reached)", "sleep 3032"},
	} {
		res, out, _ := remoteRun(t, sh, cmd.run, time.Second)
		if !res.TimedOut || res.ExitCode != TimeoutExitCode || res.ShellExited || out != "" {
			t.Fatalf("timeout of %q: %+v %q", cmd.run, res, out)
		}
		testkit.Eventually(t, cmd.line+" to be gone", func() bool { return procs(t, sh, cmd.line) == 0 })
		if res, out, _ := remoteRun(t, sh, "echo $NX_X; pwd", patient); out != "42\n"+dir+"\n" || res.ExitCode != 0 {
			t.Fatalf("after the timeout of %q: %+v %q", cmd.run, res, out)
		}
	}
	got, err := sh.Proc().Run(context.Background(), `cat; echo "$NX_GIVEN"`, []byte("in\n"))
	if err != nil || string(got) != "in\nit's given\n" {
		t.Fatalf("Run: %q %v", got, err)
	}
	if _, err := sh.Proc().Run(context.Background(), "echo oops >&2; exit 4", nil); err == nil || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("Run failure: %v", err)
	}
	if err := sh.Proc().SignalChildren(context.Background(), sh.PID(), syscall.SIGTERM); err != nil {
		t.Fatalf("SignalChildren with nothing to signal: %v", err)
	}
	_, _, _ = remoteRun(t, sh, "cd / && rm -rf "+shQuote(dir), patient)
	res, _, _ = remoteRun(t, sh, "exit 7", patient)
	if !res.ShellExited || res.ExitCode != 7 {
		t.Fatalf("exit: %+v", res)
	}
}
