package terminal_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/terminal"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/testkit"
)

type job struct {
	pid   int
	start uint64
}

func (j job) alive() bool {
	p, err := procfs.Stat(j.pid)
	return err == nil && p.Start == j.start && !p.Dead()
}

// jobRE matches what the shell prints, not the echo of the command line that prints it.
var jobRE = regexp.MustCompile(`JOB (\d+)`)

// jobsOf waits for the PIDs a terminal printed as "JOB <pid>" lines.
func jobsOf(t *testing.T, s *sess, n int) []job {
	t.Helper()
	var jobs []job
	defer func() {
		if t.Failed() {
			t.Logf("terminal output:\n%q", s.output())
		}
	}()
	testkit.Eventually(t, fmt.Sprintf("%d jobs reported by the shell", n), func() bool {
		s.pull(50 * time.Millisecond)
		jobs = jobs[:0]
		for _, m := range jobRE.FindAllStringSubmatch(s.output(), -1) {
			pid, _ := strconv.Atoi(m[1])
			if p, err := procfs.Stat(pid); err == nil {
				jobs = append(jobs, job{pid, p.Start})
			}
		}
		return len(jobs) == n
	})
	return jobs
}

// Closing many terminals at once (a gateway's shutdown) reaps every job of every session,
// those that ignore SIGHUP included, in both kinds of group.
func TestShutdownOfManyTerminalsReapsEveryJob(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash is not installed")
	}
	for _, mode := range []string{"process sessions", "cgroups"} {
		t.Run(mode, func(t *testing.T) {
			owner, err := reaper.Open(t.Context(), reaper.Options{Dir: t.TempDir(), NoCgroup: mode != "cgroups"})
			if err != nil {
				t.Fatal(err)
			}
			if mode == "cgroups" && !owner.Contained() {
				_, _ = owner.Close(t.Context())
				t.Skip("cgroups are not usable here (cgroup v2 needs root or a delegated subtree)")
			}
			dir := t.TempDir()
			kind := &terminal.Kind{
				Shell: bash, Grace: 200 * time.Millisecond, Owner: owner,
				Env:      []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PS1=$ ", "HISTFILE=/dev/null"},
				Projects: func(string) (string, error) { return dir, nil },
			}
			const n = 40
			reg := newRegistry(t, live.Config{IdleTimeout: -1, MaxSessions: n}, kind)
			e := &env{reg: reg, dir: dir}
			var all []job
			for range n {
				s := e.open(t, "")
				if _, err := reg.Send(context.Background(), s.id, live.SendRequest{Data: []byte(`nohup sleep 301 >/dev/null 2>&1 & echo "JOB $!"; (trap '' HUP; exec sleep 302) & echo "JOB $!"` + "\n")}); err != nil {
					t.Fatal(err)
				}
				all = append(all, jobsOf(t, s, 2)...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
			defer cancel()
			if err := reg.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			if left, err := owner.Close(ctx); err != nil {
				t.Fatalf("owner close: %v %v", left, err)
			}
			for _, j := range all {
				if j.alive() {
					t.Errorf("job %d survived the shutdown", j.pid)
					_ = syscall.Kill(j.pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// Where sessions are cgroups, a job that starts a session of its own (a daemon) is still the
// terminal's, and closing the terminal ends it.
func TestCgroupCatchesADaemonizedJob(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash is not installed")
	}
	owner, err := reaper.Open(t.Context(), reaper.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = owner.Close(context.Background()) }()
	if !owner.Contained() {
		t.Skip("cgroups are not usable here (cgroup v2 needs root or a delegated subtree)")
	}
	dir := t.TempDir()
	reg := newRegistry(t, live.Config{IdleTimeout: -1}, &terminal.Kind{
		Shell: bash, Grace: 200 * time.Millisecond, Owner: owner,
		Env:      []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PS1=$ "},
		Projects: func(string) (string, error) { return dir, nil },
	})
	defer func() { _ = reg.Shutdown(context.Background()) }()
	e := &env{reg: reg, dir: dir}
	s := e.open(t, "")
	if _, err := reg.Send(context.Background(), s.id, live.SendRequest{Data: []byte("setsid sh -c 'echo JOB $$; exec sleep 303' & disown\n")}); err != nil {
		t.Fatal(err)
	}
	j := jobsOf(t, s, 1)[0]
	if p, _ := procfs.Stat(j.pid); p.SID == s.obj.Metadata["pid"] {
		t.Fatalf("the job did not start a session of its own: %+v", p)
	}
	if _, err := reg.Close(context.Background(), s.id, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if j.alive() {
		_ = syscall.Kill(j.pid, syscall.SIGKILL)
		t.Fatal("a daemonized job outlived its terminal")
	}
}
