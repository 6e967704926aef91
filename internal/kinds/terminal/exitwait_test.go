package terminal

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// TestAwaitExit: awaitExit returns once the child has exited, not before, and leaves it to
// cmd.Wait, which still gets its exit status.
func TestAwaitExit(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read x; exit 3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { awaitExit(cmd.Process.Pid); close(done) }()
	select {
	case <-done:
		t.Fatal("awaitExit returned while the child runs")
	default:
	}
	_ = stdin.Close() // the child reads EOF and exits
	select {
	case <-done:
	case <-time.After(testkit.Patience()):
		t.Fatal("awaitExit did not return after the child exited")
	}
	if err := cmd.Wait(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("cmd.Wait after awaitExit: %v, state %v", err, cmd.ProcessState)
	}
	// Called for a child that has already exited (and is not reaped yet), it returns at once.
	cmd2 := exec.Command("true")
	if err := cmd2.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the child exits", func() bool { return procState(cmd2.Process.Pid) == "Z" })
	awaitExit(cmd2.Process.Pid)
	if err := cmd2.Wait(); err != nil {
		t.Fatal(err)
	}
}

// procState is the state letter of /proc/<pid>/stat ("" when unreadable).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok || rest == "" {
		return ""
	}
	return rest[:1]
}
