package mcp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/testkit"
)

// A nexus mcp killed with SIGKILL leaves no process of its shells behind: not a plain
// background job (a pipe shell gets no SIGHUP when its owner dies), not one that ignores SIGHUP.
// Its watchdog reaps them; were the watchdog killed too, the next nexus mcp would.
func TestKilledMCPLeavesNoProcess(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found: local sessions run it")
	}
	bin := nexusBinary(t)
	home := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := exec.Command(bin, "mcp", "--idle-timeout", "0") //nolint:gosec // G204: the binary built by nexusBinary
	cmd.Env = append(os.Environ(), "NEXUS_HOME="+home)
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "kill9", Version: "v0"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr.String())
	}
	e := &e2e{t: t, ctx: ctx, cs: cs}
	var created struct {
		SessionID string `json:"session_id"`
	}
	e.ok("session_create", map[string]any{"transport": "local", "cwd": home}, &created)
	jobs := startJobs(e, created.SessionID, 310)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cs.Close()
	jobs.waitReaped(t, "nexus mcp was killed")
	testkit.Eventually(t, "the owner records to be removed", func() bool {
		entries, _ := os.ReadDir(filepath.Join(home, "state", "owners"))
		return len(entries) == 0
	})
}

// jobs are background jobs of an agent shell, each a process id and its start time (so a
// reused pid is not taken for the job).
type job struct {
	pid   int
	start uint64
}

type jobs []job

// startJobs starts three jobs in shell id that a plain close would not end: one in the
// background, one under nohup, one ignoring SIGHUP; sleeps of base, base+1 and base+2 seconds.
func startJobs(e *e2e, id string, base int) jobs {
	e.t.Helper()
	r := e.exec(id, fmt.Sprintf(`sleep %d & echo $!; nohup sleep %d >/dev/null 2>&1 & echo $!; (trap '' HUP; exec sleep %d) & echo $!`, base, base+1, base+2), nil)
	var js jobs
	for _, f := range strings.Fields(r.Stdout) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			e.t.Fatalf("stdout %q", r.Stdout)
		}
		p, err := procfs.Stat(pid)
		if err != nil {
			e.t.Fatalf("job %d: %v", pid, err)
		}
		js = append(js, job{pid, p.Start})
	}
	if len(js) != 3 {
		e.t.Fatalf("jobs %v from %q", js, r.Stdout)
	}
	return js
}

// waitReaped waits until every job is gone (after what).
func (js jobs) waitReaped(t *testing.T, after string) {
	t.Helper()
	for _, j := range js {
		testkit.Eventually(t, fmt.Sprintf("job %d to be reaped after %s", j.pid, after), func() bool {
			p, err := procfs.Stat(j.pid)
			return err != nil || p.Start != j.start || p.Dead()
		})
	}
}
