// Command shutdown measures how a gateway with many terminal sessions shuts down: N terminals
// each run a job that ignores SIGHUP (`nohup sleep &`), then the gateway gets SIGTERM. It
// reports how long the gateway took to exit against its --grace, its exit status, and how many
// of the jobs were left running (the promise is none). With -kill it sends SIGKILL instead and
// reports how long the owner's watchdog took to reap the jobs.
//
//	go run ./bench/shutdown                 # 1000 sessions, the figure of docs/BENCHMARKS.md
//	go run ./bench/shutdown -sessions 300 -kill
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/procfs"
)

// Result is the JSON document written to bench/results/.
type Result struct {
	Machine      benchenv.Machine `json:"machine"`
	Sessions     int              `json:"sessions"`
	Signal       string           `json:"signal"`
	GraceSeconds float64          `json:"graceSeconds"`
	OpenSeconds  float64          `json:"openSeconds"`
	ExitSeconds  float64          `json:"exitSeconds"`
	ReapSeconds  float64          `json:"reapSeconds"`
	ExitStatus   int              `json:"exitStatus"`
	JobsStarted  int              `json:"jobsStarted"`
	JobsLeft     int              `json:"jobsLeft"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("sessions", 1000, "terminal sessions")
	grace := flag.Duration("grace", 2*time.Second, "the gateway's --grace")
	kill := flag.Bool("kill", false, "SIGKILL the gateway instead of SIGTERM")
	bin := flag.String("bin", "bin/nexus", "the nexus binary (make build)")
	flag.Parse()
	exe, err := filepath.Abs(*bin)
	if err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "nexus-shutdown-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(home) }()
	proj := filepath.Join(home, "proj")
	if err := os.Mkdir(proj, 0o700); err != nil {
		return err
	}
	// A tag in the job's argument names this run's jobs in /proc, whatever the gateway did.
	tag := fmt.Sprintf("301.%d", os.Getpid())
	// HOME is empty, so every shell starts as a fresh user's would, not running this machine's
	// ~/.bashrc a thousand times.
	env := append(os.Environ(), "NEXUS_HOME="+home, "HOME="+home)
	add := exec.Command(exe, "project", "add", "p", "--path", proj) //nolint:noctx,gosec // the binary under test
	add.Env = env
	out, err := add.CombinedOutput()
	if err != nil {
		return fmt.Errorf("project add: %w: %s", err, out)
	}
	// --no-index: the history index's sync of the machine's transcripts is not what is measured.
	gw := exec.Command(exe, "serve", "--no-index", "--max-sessions", strconv.Itoa(*n+10), "--grace", grace.String(), "--idle-timeout", "0", "--log-level", "warn") //nolint:noctx,gosec // stopped by a signal
	gw.Env = env
	gw.Stderr = os.Stderr
	if err := gw.Start(); err != nil {
		return err
	}
	defer func() { _ = gw.Process.Kill() }()
	c := client.New(client.Target{Socket: filepath.Join(home, "state", "gateway.sock")})
	ctx := context.Background()
	for {
		if _, err := c.Version(ctx); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, *n)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				s, err := c.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
				if err == nil {
					err = c.Send(ctx, s.SessionID, []byte("nohup sleep "+tag+" >/dev/null 2>&1 &\n"))
				}
				if err != nil {
					errc <- err
				}
			}
		}()
	}
	for i := range *n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errc)
	for err := range errc {
		return fmt.Errorf("open sessions: %w", err)
	}
	for jobs(tag) < *n {
		time.Sleep(50 * time.Millisecond)
	}
	res := Result{Machine: benchenv.Probe("bash"), Sessions: *n, GraceSeconds: grace.Seconds(), OpenSeconds: time.Since(t0).Seconds(), JobsStarted: jobs(tag), Signal: "SIGTERM"}
	sig := syscall.SIGTERM
	if *kill {
		sig, res.Signal = syscall.SIGKILL, "SIGKILL"
	}
	t1 := time.Now()
	_ = gw.Process.Signal(sig)
	err = gw.Wait()
	res.ExitSeconds = time.Since(t1).Seconds()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitStatus = ee.ExitCode()
	}
	deadline := time.Now().Add(30 * time.Second)
	for jobs(tag) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	res.ReapSeconds = time.Since(t1).Seconds()
	res.JobsLeft = jobs(tag)
	fmt.Printf("%d terminal sessions, each with a job that ignores SIGHUP; gateway --grace %s, %s\n", *n, *grace, res.Signal)
	fmt.Printf("  opened in            %.1f s\n", res.OpenSeconds)
	fmt.Printf("  gateway exited after %.2f s (status %d)\n", res.ExitSeconds, res.ExitStatus)
	fmt.Printf("  jobs gone after      %.2f s\n", res.ReapSeconds)
	fmt.Printf("  jobs left running    %d of %d\n", res.JobsLeft, res.JobsStarted)
	if path, err := benchenv.WriteResults("bench/results", "shutdown", res); err == nil {
		fmt.Println("  results:", path)
	}
	// Do not leave jobs behind, whatever happened.
	for _, p := range procfs.All() {
		if p.Comm == "sleep" && hasArg(p.PID, tag) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	}
	return nil
}

// jobs counts the live processes of this run.
func jobs(tag string) int {
	n := 0
	for _, p := range procfs.All() {
		if p.Comm == "sleep" && !p.Dead() && hasArg(p.PID, tag) {
			n++
		}
	}
	return n
}

func hasArg(pid int, tag string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(b), tag)
}
