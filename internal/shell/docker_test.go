package shell

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// The docker transport is tested against a real Docker engine: Debian's docker.io with a
// private dockerd and locally built images (bookworm with bash and git; busybox), started by the
// repository's tools/docker/setup.sh (.ci/docker-setup.sh runs it before the suite). The first
// run installs docker.io and builds the image (one to three minutes); later runs find the daemon
// still running in dockerTestDir and reuse it in under a second, which is why the tests leave it
// running (tools/docker/teardown.sh /tmp/nexus-dockertest stops it). The tests skip, visibly,
// without root, and fail instead under CI.

// dockerTestDir is the setup script's work directory: fixed, so that runs reuse one daemon
// (NEXUS_TEST_DOCKER_DIR names another, for a daemon of one's own).
func dockerTestDir() string {
	if dir := os.Getenv("NEXUS_TEST_DOCKER_DIR"); dir != "" {
		return dir
	}
	return "/tmp/nexus-dockertest"
}

// containerPIDLabel marks the tests' containers with the pid of the test binary that made them,
// so that a later run removes those a crashed run left.
const containerPIDLabel = "nexus.test.pid"

// dockerEngine is the private engine, once set up.
type dockerEngine struct {
	host   string // DOCKER_HOST of the daemon
	client string // the docker client (absolute path)
	images map[string]string
}

var (
	dockerOnce   sync.Once
	dockerShared *dockerEngine
	dockerSkip   string
	dockerErr    error
)

// repoRoot is the directory of go.mod above the test's directory.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// setupScript runs the setup script for one image variant and returns what it printed.
func setupScript(tb testing.TB, script, variant string) (map[string]string, error) {
	tb.Helper()
	start := time.Now()
	var errb testkit.Buffer
	cmd := exec.Command("bash", script, dockerTestDir(), variant) //nolint:noctx // bounded by the test binary's -timeout
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s %s: %w\n%s", script, dockerTestDir(), variant, err, errb.String())
	}
	tb.Logf("docker setup (%s) in %s", variant, time.Since(start).Round(10*time.Millisecond))
	vars := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			vars[k] = v
		}
	}
	if vars["DOCKER_HOST"] == "" || vars["NEXUS_TEST_IMAGE"] == "" {
		return nil, fmt.Errorf("%s printed %q, want the lines DOCKER_HOST=<socket> and NEXUS_TEST_IMAGE=<image>", script, out)
	}
	return vars, nil
}

// requireDocker returns the private Docker engine, setting it up on first use, or skips the test
// (a failure under CI) when it cannot run here.
func requireDocker(tb testing.TB) *dockerEngine {
	tb.Helper()
	dockerOnce.Do(func() {
		script := filepath.Join(repoRoot(tb), "tools", "docker", "setup.sh")
		if os.Geteuid() != 0 {
			dockerSkip = "no Docker engine for the tests: they start a private dockerd (tools/docker/setup.sh), which needs root: run them as root"
			return
		}
		e := &dockerEngine{images: map[string]string{}}
		for _, variant := range []string{"bookworm", "busybox"} {
			vars, err := setupScript(tb, script, variant)
			if err != nil {
				dockerErr = err
				return
			}
			e.host, e.images[variant] = vars["DOCKER_HOST"], vars["NEXUS_TEST_IMAGE"]
		}
		client, err := exec.LookPath("docker")
		if err != nil {
			dockerErr = fmt.Errorf("the setup script left no docker client on PATH: %w", err)
			return
		}
		e.client = client
		e.removeStale(tb)
		dockerShared = e
	})
	switch {
	case dockerSkip != "":
		testkit.SkipUnlessCI(tb, dockerSkip)
	case dockerErr != nil:
		tb.Fatal(dockerErr)
	}
	return dockerShared
}

// docker runs the client against the private daemon and returns its stdout.
func (e *dockerEngine) docker(tb testing.TB, args ...string) string {
	tb.Helper()
	cmd := exec.Command(e.client, args...) //nolint:noctx // bounded by the test binary's -timeout
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.host)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return string(out)
}

// removeStale removes the containers of test binaries that are gone.
func (e *dockerEngine) removeStale(tb testing.TB) {
	tb.Helper()
	out := e.docker(tb, "ps", "-a", "--filter", "label="+containerPIDLabel, "--format", `{{.ID}} {{.Label "`+containerPIDLabel+`"}}`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		id, pid, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(pid); err == nil && (n == os.Getpid() || syscall.Kill(n, 0) == nil) {
			continue
		}
		e.docker(tb, "rm", "-f", id)
	}
}

// container starts a container of image variant ("bookworm" or "busybox") that runs until the
// test ends, and returns its name.
func (e *dockerEngine) container(t *testing.T, variant string) string {
	t.Helper()
	name := "nexus-test-" + newToken()[:12]
	e.docker(t, "run", "-d", "--network", "none", "--label", containerPIDLabel+"="+strconv.Itoa(os.Getpid()),
		"--name", name, e.images[variant], "sleep", "infinity")
	t.Cleanup(func() { e.docker(t, "rm", "-f", name) })
	return name
}

// client writes a docker client for the transport: the real one, talking to host, that logs
// each call's argv (NUL-separated) to a file of logDir (when not empty).
func writeDockerClient(t *testing.T, client, host, logDir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "docker")
	script := "#!/bin/sh\n"
	if logDir != "" {
		script += "printf '%s\\0' \"$@\" >" + shQuote(logDir) + "/\"$(date +%s%N)-$$\"\n"
	}
	script += "DOCKER_HOST=" + shQuote(host) + " exec " + shQuote(client) + " \"$@\"\n"
	testkit.WriteExecutable(t, bin, script)
	return bin
}

// calls returns the argv of every docker call logged to logDir, in order.
func calls(t *testing.T, logDir string) [][]string {
	t.Helper()
	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out [][]string
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(logDir, n))
		if err != nil {
			t.Fatal(err)
		}
		argv := strings.Split(string(b), "\x00")
		out = append(out, argv[:len(argv)-1])
	}
	return out
}

// transport is a Docker transport for container through the private daemon; its calls are
// logged to the returned directory.
func (e *dockerEngine) transport(t *testing.T, container string) (*Docker, string) {
	t.Helper()
	logDir := t.TempDir()
	return &Docker{Container: container, Binary: writeDockerClient(t, e.client, e.host, logDir)}, logDir
}

// inContainer lists the processes of the container as /proc inside it shows them: pid, command
// line, and whether the environment holds TagVar=tag.
type containerProc struct {
	pid    int
	line   string
	tagged bool
}

func (e *dockerEngine) procs(t *testing.T, container, tag string) []containerProc {
	t.Helper()
	// Run by sh inside the container; its own processes are left out by the marker argument.
	script := `for d in /proc/[0-9]*; do
	l=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
	case $l in *nx-procs-probe*) continue;; esac
	t=0; tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -q -x -F -e "$1" && t=1
	printf '%s %s %s\n' "${d#/proc/}" "$t" "$l"
done`
	out := e.docker(t, "exec", container, "sh", "-c", script, "nx-procs-probe", TagVar+"="+tag)
	var ps []containerProc
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) < 3 {
			continue
		}
		pid, _ := strconv.Atoi(f[0])
		ps = append(ps, containerProc{pid: pid, tagged: f[1] == "1", line: strings.TrimSpace(f[2])})
	}
	return ps
}

// containerProcs is a sessionProcs: the processes of the session's container with that command line.
func (e *dockerEngine) containerProcs(container string) sessionProcs {
	return func(t *testing.T, sh *Shell, line string) int {
		t.Helper()
		n := 0
		for _, p := range e.procs(t, container, sh.Proc().(*dockerProc).tag) {
			if p.line == line {
				n++
			}
		}
		return n
	}
}

func TestDockerInvalidNames(t *testing.T) {
	logDir := t.TempDir()
	bin := writeDockerClient(t, "/bin/false", "unix:///nonexistent", logDir)
	for _, name := range []string{"", "-rm", "--privileged", "a b", "../x", "a/b", "a;b", ".x", "_x", "x$(id)", "box\n", strings.Repeat("a", 129)} {
		d := &Docker{Container: name, Binary: bin}
		if err := d.Validate(); err == nil {
			t.Errorf("Validate accepted %q", name)
		}
		if _, err := d.Start(context.Background(), nil); err == nil {
			t.Errorf("Start accepted %q", name)
		}
	}
	if c := calls(t, logDir); len(c) != 0 {
		t.Fatalf("docker was run for invalid names: %q", c)
	}
	for _, name := range []string{"box", "a", "my-app_1.web", "0123456789ab"} {
		if err := (&Docker{Container: name}).Validate(); err != nil {
			t.Errorf("Validate(%q): %v", name, err)
		}
	}
	if _, err := (&Docker{Container: "box", Binary: bin}).Start(context.Background(), []string{"BAD NAME=1"}); err == nil {
		t.Error("Start accepted an invalid environment entry")
	}
	if c := calls(t, logDir); len(c) != 0 {
		t.Fatalf("docker was run for an invalid environment: %q", c)
	}
}

func TestDockerIDPart(t *testing.T) {
	for in, want := range map[string]string{
		"box":                   "docker_box",
		"my-app_1.web":          "docker_my-app_1.web",
		strings.Repeat("a", 50): "docker_" + strings.Repeat("a", 40),
		"a b/c":                 "docker_a_b_c",
	} {
		if got := (&Docker{Container: in}).IDPart(); got != want {
			t.Errorf("IDPart(%q) = %q, want %q", in, got, want)
		}
	}
	if k := (&Docker{}).Kind(); k != "docker" {
		t.Errorf("Kind = %q", k)
	}
}

// A daemon that does not answer is said to be unreachable, not mistaken for a missing container.
// Only the docker client is needed: it is pointed at a socket nothing listens on.
func TestDockerDaemonUnreachable(t *testing.T) {
	client, err := exec.LookPath("docker")
	if err != nil {
		testkit.SkipUnlessCI(t, "no docker client on PATH (Debian: apt-get install docker.io; make test-deps installs everything the tests need)")
	}
	sock := filepath.Join(t.TempDir(), "docker.sock")
	d := &Docker{Container: "box", Binary: writeDockerClient(t, client, "unix://"+sock, "")}
	_, err = Start(context.Background(), d, nil)
	if !errors.Is(err, ErrDockerUnreachable) || !strings.Contains(err.Error(), "Docker daemon unreachable") ||
		strings.Contains(err.Error(), "no container") || !strings.Contains(err.Error(), sock) {
		t.Fatalf("Start with the daemon down: %v", err)
	}
	_, err = (&Docker{Container: "box", Binary: filepath.Join(t.TempDir(), "nodocker")}).Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "cannot run") {
		t.Fatalf("missing docker binary: %v", err)
	}
}

func TestDockerContainerStates(t *testing.T) {
	t.Parallel()
	e := requireDocker(t)
	stopped := e.container(t, "busybox")
	e.docker(t, "stop", "-t", "0", stopped)
	paused := e.container(t, "busybox")
	e.docker(t, "pause", paused)
	t.Cleanup(func() { e.docker(t, "unpause", paused) })
	for _, c := range []struct{ name, want string }{
		{stopped, "is not running"},
		{paused, "is paused"},
		{"nexus-test-ghost", `no container "nexus-test-ghost": `},
	} {
		d, _ := e.transport(t, c.name)
		_, err := Start(context.Background(), d, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrDockerUnreachable) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// The session talks to one long-lived `docker exec -i`: no docker call per command, one per side
// command, with the argv a real docker client takes.
func TestDockerCallsPerCommand(t *testing.T) {
	t.Parallel()
	e := requireDocker(t)
	name := e.container(t, "bookworm")
	d, logDir := e.transport(t, name)
	sh, err := Start(context.Background(), d, []string{"FOO=bar baz"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Close() }()
	tag := sh.Proc().(*dockerProc).tag
	for i := range 20 {
		if res, out, _ := remoteRun(t, sh, `echo "$FOO `+strconv.Itoa(i)+`"`, patient); out != "bar baz "+strconv.Itoa(i)+"\n" || res.ExitCode != 0 {
			t.Fatalf("command %d: %+v %q", i, res, out)
		}
	}
	if c := calls(t, logDir); len(c) != 2 {
		t.Fatalf("%d docker calls after 20 commands, want 2 (inspect, exec): %q", len(c), c)
	}
	if err := sh.Proc().SignalChildren(context.Background(), sh.PID(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Proc().Run(context.Background(), "true", nil); err != nil {
		t.Fatal(err)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	sig, _ := signalChildrenScript(sh.PID(), syscall.SIGINT)
	want := [][]string{
		{"inspect", "--type", "container", "-f", "{{.State.Running}} {{.State.Paused}}", name},
		{"exec", "-i", "-e", TagVar + "=" + tag, "-e", "FOO=bar baz", name, "sh", "-c", startShellScript},
		{"exec", name, "sh", "-c", sig},
		{"exec", "-i", "-e", "FOO=bar baz", name, "sh", "-c", "true"},
		{"exec", name, "sh", "-c", killSessionScript(tag)},
	}
	got := calls(t, logDir)
	if len(got) != len(want) {
		t.Fatalf("%d calls, want %d (inspect, exec shell, signal, run, close): %q", len(got), len(want), got)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("call %d:\n got %q\nwant %q", i, got[i], want[i])
		}
	}
	if len(tag) != 24 || strings.Trim(tag, "0123456789abcdef") != "" {
		t.Errorf("tag %q is not 24 hex digits", tag)
	}
}

func TestDockerEngine(t *testing.T) {
	t.Parallel()
	e := requireDocker(t)
	for _, variant := range []string{"bookworm", "busybox"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			name := e.container(t, variant)
			d, _ := e.transport(t, name)
			testRemoteEngine(t, d, e.containerProcs(name))
		})
	}
}

// The shell is bash where the image has it, else the image's sh (busybox's here).
func TestDockerShellKind(t *testing.T) {
	t.Parallel()
	e := requireDocker(t)
	for variant, want := range map[string]bool{"bookworm": true, "busybox": false} {
		d, _ := e.transport(t, e.container(t, variant))
		sh, err := Start(context.Background(), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		if sh.bash != want {
			t.Errorf("%s: bash %v, want %v", variant, sh.bash, want)
		}
		_ = sh.Close()
	}
}

// Close kills every process of the session inside the container: the shell, its jobs, a job of
// a job, one that left the process tree (setsid) and one that ignores SIGHUP.
func TestDockerCloseKillsEverything(t *testing.T) {
	t.Parallel()
	e := requireDocker(t)
	for _, variant := range []string{"bookworm", "busybox"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			name := e.container(t, variant)
			d, _ := e.transport(t, name)
			sh, err := Start(context.Background(), d, nil)
			if err != nil {
				t.Fatal(err)
			}
			tag := sh.Proc().(*dockerProc).tag
			remoteRun(t, sh, "sleep 300 & (sleep 301 &) ; setsid sleep 302 </dev/null >/dev/null 2>&1 & (trap '' HUP; exec sleep 303) &", patient)
			jobs := []string{"sleep 300", "sleep 301", "sleep 302", "sleep 303"}
			count := func() (tagged int, jobsLeft []string) {
				for _, p := range e.procs(t, name, tag) {
					if p.tagged {
						tagged++
					}
					if slices.Contains(jobs, p.line) {
						jobsLeft = append(jobsLeft, p.line)
					}
				}
				return tagged, jobsLeft
			}
			testkit.Eventually(t, "the four jobs to run in the container", func() bool {
				_, left := count()
				return len(left) == len(jobs)
			})
			if !slices.ContainsFunc(e.procs(t, name, tag), func(p containerProc) bool { return p.pid == sh.PID() && p.tagged }) {
				t.Fatalf("the shell's pid %d (as it reported it) is not a tagged process of the container", sh.PID())
			}
			if err := sh.Close(); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "every process of the session to be gone from the container", func() bool {
				tagged, left := count()
				return tagged == 0 && len(left) == 0
			})
			waitExited(t, sh)
			if _, err := sh.Run(context.Background(), "true", time.Second, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, ErrShellExited) {
				t.Fatalf("run after close: %v", err)
			}
			_ = sh.Close() // idempotent
			// The container itself is untouched.
			if out := e.docker(t, "inspect", "-f", "{{.State.Running}}", name); strings.TrimSpace(out) != "true" {
				t.Fatalf("container state after Close: %q", out)
			}
		})
	}
}

// BenchmarkDockerRoundTrip measures a command's round trip through the docker transport (one
// long-lived `docker exec -i` per session) against what one would do without it: a `docker exec`
// per command. The two are interleaved, one sample each per iteration, so a change of load hits
// both alike. It reports the medians and means of both, and docker exec's over the transport's.
//
//	go test -run '^$' -bench DockerRoundTrip -benchtime 200x ./internal/shell/
func BenchmarkDockerRoundTrip(b *testing.B) {
	e := requireDocker(b)
	name := "nexus-bench-" + newToken()[:12]
	e.docker(b, "run", "-d", "--network", "none", "--label", containerPIDLabel+"="+strconv.Itoa(os.Getpid()),
		"--name", name, e.images["bookworm"], "sleep", "infinity")
	defer e.docker(b, "rm", "-f", name)
	d := &Docker{Container: name, Binary: e.client}
	b.Setenv("DOCKER_HOST", e.host)
	for _, c := range []struct{ name, cmd string }{
		{"true", "true"},
		{"1MB", `head -c 1000000 /dev/zero | tr '\0' x`},
	} {
		b.Run(c.name, func(b *testing.B) {
			sh, err := Start(context.Background(), d, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = sh.Close() }()
			var out, errb bytes.Buffer
			var viaShell, viaExec []time.Duration
			for b.Loop() {
				out.Reset()
				t0 := time.Now()
				res, err := sh.Run(context.Background(), c.cmd, time.Minute, &out, &errb)
				viaShell = append(viaShell, time.Since(t0))
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("transport: %+v %v", res, err)
				}
				n := out.Len()
				out.Reset()
				t0 = time.Now()
				cmd := exec.Command(e.client, "exec", name, "sh", "-c", c.cmd) //nolint:noctx // a benchmark sample
				cmd.Stdout, cmd.Stderr = &out, &errb
				err = cmd.Run()
				viaExec = append(viaExec, time.Since(t0))
				if err != nil || out.Len() != n {
					b.Fatalf("docker exec: %v, %d bytes (transport: %d)", err, out.Len(), n)
				}
			}
			shP50, shMean := medianMean(viaShell)
			exP50, exMean := medianMean(viaExec)
			b.ReportMetric(shP50, "transport-p50-ms")
			b.ReportMetric(shMean, "transport-mean-ms")
			b.ReportMetric(exP50, "docker-exec-p50-ms")
			b.ReportMetric(exMean, "docker-exec-mean-ms")
			b.ReportMetric(exP50/shP50, "ratio-p50")
			b.ReportMetric(exMean/shMean, "ratio-mean")
		})
	}
}

// medianMean returns the median and the mean of ds, in milliseconds.
func medianMean(ds []time.Duration) (p50, mean float64) {
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(s[len(s)/2]), ms(sum) / float64(len(s))
}

// The side scripts run under whatever sh the container or host has: check them with each shell
// here (the Docker tests above run them in busybox and Debian containers too).
func TestDockerRemoteScriptsShells(t *testing.T) {
	for _, shell := range []string{"dash", "bash", "busybox"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			continue
		}
		t.Run(shell, func(t *testing.T) {
			argv := []string{path}
			if shell == "busybox" {
				argv = append(argv, "sh")
			}
			tag := newToken()
			parent := exec.Command(argv[0], append(argv[1:], "-c", "sleep 303 & (sleep 304; :) & sleep 305 & wait")...) //nolint:gosec,noctx // test
			parent.Env = append(os.Environ(), TagVar+"="+tag)
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()
			sleeps := func() int {
				below := descendants(parent.Process.Pid)
				return len(withCmdline(below, "sleep 303")) + len(withCmdline(below, "sleep 304")) + len(withCmdline(below, "sleep 305"))
			}
			testkit.Eventually(t, "the three sleeps to run", func() bool { return sleeps() == 3 })
			script, err := signalChildrenScript(parent.Process.Pid, syscall.SIGTERM)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(argv[0], append(argv[1:], "-c", script)...).CombinedOutput(); err != nil { //nolint:gosec,noctx // test
				t.Fatalf("signal script: %v %s", err, out)
			}
			testkit.Eventually(t, "the three sleeps to be signalled", func() bool { return sleeps() == 0 })
			// The parent survives its children's death; its wait then returns.
			if err := parent.Wait(); err != nil {
				t.Fatalf("parent: %v", err)
			}
			// The kill script, on a fresh tree found only by tag.
			parent = exec.Command(argv[0], append(argv[1:], "-c", "sleep 306 & setsid sleep 307 & wait")...) //nolint:gosec,noctx // test
			parent.Env = append(os.Environ(), TagVar+"="+tag)
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			waitTaggedSleeps(t, tag, 2)
			if out, err := exec.Command(argv[0], append(argv[1:], "-c", killSessionScript(tag))...).CombinedOutput(); err != nil { //nolint:gosec,noctx // test
				t.Fatalf("kill script: %v %s", err, out)
			}
			_ = parent.Wait()
			waitTagGone(t, tag)
		})
	}
}
