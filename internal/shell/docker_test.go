package shell

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The docker transport is tested against testdata/fakedocker/docker, which runs the commands
// on this machine (no Docker engine here): the argv it received is checked, and the
// "container" is the host, so cleanup is checked in this machine's /proc.

type fakeDocker struct {
	bin string // a wrapper around the fake with its settings
	log string // directory of the calls
}

// newFakeDocker writes a docker wrapper into a temp dir; running and stopped are the
// container names the fake knows.
func newFakeDocker(t *testing.T, running, stopped string) *fakeDocker {
	t.Helper()
	fake, err := filepath.Abs("testdata/fakedocker/docker")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "docker")
	script := "#!/bin/sh\nFAKEDOCKER_LOG=" + shQuote(logDir) + " FAKEDOCKER_RUNNING=" + shQuote(running) +
		" FAKEDOCKER_STOPPED=" + shQuote(stopped) + " exec /bin/sh " + shQuote(fake) + " \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil { //nolint:gosec // an executable
		t.Fatal(err)
	}
	return &fakeDocker{bin: bin, log: logDir}
}

// calls returns the argv of every call so far, in order.
func (f *fakeDocker) calls(t *testing.T) [][]string {
	t.Helper()
	entries, err := os.ReadDir(f.log)
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
		b, err := os.ReadFile(filepath.Join(f.log, n))
		if err != nil {
			t.Fatal(err)
		}
		argv := strings.Split(string(b), "\x00")
		out = append(out, argv[:len(argv)-1])
	}
	return out
}

// taggedPIDs lists the live processes of this machine whose environment holds TagVar=tag.
func taggedPIDs(tag string) []int {
	want := []byte(TagVar + "=" + tag + "\x00")
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(b, want) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// waitTaggedSleeps waits until n tagged processes run sleep. Counting all tagged processes
// would race: a subshell on its way to fork a job is tagged too, and exits.
func waitTaggedSleeps(t *testing.T, tag string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		sleeps := 0
		for _, pid := range taggedPIDs(tag) {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); err == nil && string(bytes.TrimSpace(b)) == "sleep" {
				sleeps++
			}
		}
		if sleeps >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tagged sleep processes, want %d", sleeps, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitTagGone waits until no live process has the tag.
func waitTagGone(t *testing.T, tag string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := taggedPIDs(tag)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the session still alive: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func remoteRun(t *testing.T, sh *Shell, cmd string, timeout time.Duration) (RunResult, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sh.Run(context.Background(), cmd, timeout, &out, &errb)
	if err != nil && !errors.Is(err, ErrShellExited) {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return res, out.String(), errb.String()
}

func TestDockerInvalidNames(t *testing.T) {
	fd := newFakeDocker(t, "box", "")
	for _, name := range []string{"", "-rm", "--privileged", "a b", "../x", "a/b", "a;b", ".x", "_x", "x$(id)", "box\n", strings.Repeat("a", 129)} {
		d := &Docker{Container: name, Binary: fd.bin}
		if err := d.Validate(); err == nil {
			t.Errorf("Validate accepted %q", name)
		}
		if _, err := d.Start(context.Background(), nil); err == nil {
			t.Errorf("Start accepted %q", name)
		}
	}
	if c := fd.calls(t); len(c) != 0 {
		t.Fatalf("docker was run for invalid names: %q", c)
	}
	for _, name := range []string{"box", "a", "my-app_1.web", "0123456789ab"} {
		if err := (&Docker{Container: name}).Validate(); err != nil {
			t.Errorf("Validate(%q): %v", name, err)
		}
	}
	if _, err := (&Docker{Container: "box"}).Start(context.Background(), []string{"BAD NAME=1"}); err == nil {
		t.Error("Start accepted an invalid environment entry")
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

func TestDockerNotRunning(t *testing.T) {
	fd := newFakeDocker(t, "box", "off")
	_, err := (&Docker{Container: "off", Binary: fd.bin}).Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("stopped container: %v", err)
	}
	_, err = (&Docker{Container: "ghost", Binary: fd.bin}).Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "no container") || !strings.Contains(err.Error(), "No such container") {
		t.Fatalf("unknown container: %v", err)
	}
	_, err = (&Docker{Container: "box", Binary: filepath.Join(t.TempDir(), "nodocker")}).Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "cannot run") {
		t.Fatalf("missing docker binary: %v", err)
	}
	want := []string{"inspect", "--type", "container", "-f", "{{.State.Running}}", "off"}
	if c := fd.calls(t); len(c) != 2 || !slices.Equal(c[0], want) {
		t.Fatalf("calls = %q, want first %q", c, want)
	}
}

func TestDockerCommandConstruction(t *testing.T) {
	fd := newFakeDocker(t, "box", "")
	sh, err := Start(context.Background(), &Docker{Container: "box", Binary: fd.bin}, []string{"FOO=bar baz"})
	if err != nil {
		t.Fatal(err)
	}
	tag := sh.Proc().(*dockerProc).tag
	if _, out, _ := remoteRun(t, sh, `echo "$FOO"`, 10*time.Second); out != "bar baz\n" {
		t.Fatalf("env: %q", out)
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
	calls := fd.calls(t)
	if len(calls) != 5 {
		t.Fatalf("%d calls, want 5 (inspect, exec shell, signal, run, close): %q", len(calls), calls)
	}
	want := [][]string{
		{"inspect", "--type", "container", "-f", "{{.State.Running}}", "box"},
		{"exec", "-i", "-e", TagVar + "=" + tag, "-e", "FOO=bar baz", "box", "sh", "-c", startShellScript},
	}
	sig, _ := signalChildrenScript(sh.PID(), syscall.SIGINT)
	want = append(want,
		[]string{"exec", "box", "sh", "-c", sig},
		[]string{"exec", "-i", "-e", "FOO=bar baz", "box", "sh", "-c", "true"},
		[]string{"exec", "box", "sh", "-c", killSessionScript(tag)},
	)
	for i := range want {
		if !slices.Equal(calls[i], want[i]) {
			t.Errorf("call %d:\n got %q\nwant %q", i, calls[i], want[i])
		}
	}
	if len(tag) != 24 || strings.Trim(tag, "0123456789abcdef") != "" {
		t.Errorf("tag %q is not 24 hex digits", tag)
	}
}

func TestDockerDefaultBinaryOnPATH(t *testing.T) {
	fd := newFakeDocker(t, "box", "")
	t.Setenv("PATH", filepath.Dir(fd.bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh, err := Start(context.Background(), &Docker{Container: "box"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Close() }()
	if _, out, _ := remoteRun(t, sh, "echo ok", 10*time.Second); out != "ok\n" {
		t.Fatalf("out %q", out)
	}
	if len(fd.calls(t)) != 2 {
		t.Fatalf("calls: %q", fd.calls(t))
	}
}

func TestDockerEngine(t *testing.T) {
	fd := newFakeDocker(t, "box", "")
	sh, err := Start(context.Background(), &Docker{Container: "box", Binary: fd.bin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Close() }()
	dir := t.TempDir()
	if res, _, _ := remoteRun(t, sh, "cd "+shQuote(dir)+" && export NX_X=42", 10*time.Second); res.ExitCode != 0 || res.Cwd != dir {
		t.Fatalf("cd: %+v", res)
	}
	res, out, errs := remoteRun(t, sh, `echo "out $NX_X"; echo err >&2; pwd; exit_with() { return $1; }; exit_with 3`, 10*time.Second)
	if out != "out 42\n"+dir+"\n" || errs != "err\n" || res.ExitCode != 3 {
		t.Fatalf("got %+v out %q err %q", res, out, errs)
	}
	start := time.Now()
	res, _, _ = remoteRun(t, sh, "sleep 30", time.Second)
	if !res.TimedOut || res.ExitCode != TimeoutExitCode || res.ShellExited || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: %+v after %s", res, time.Since(start))
	}
	if res, out, _ := remoteRun(t, sh, "echo $NX_X", 10*time.Second); out != "42\n" || res.ExitCode != 0 {
		t.Fatalf("after timeout: %+v %q", res, out)
	}
	got, err := sh.Proc().Run(context.Background(), "cat; echo done", []byte("in\n"))
	if err != nil || string(got) != "in\ndone\n" {
		t.Fatalf("Run: %q %v", got, err)
	}
	if _, err := sh.Proc().Run(context.Background(), "echo oops >&2; exit 4", nil); err == nil || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("Run failure: %v", err)
	}
	res, _, _ = remoteRun(t, sh, "exit 7", 10*time.Second)
	if !res.ShellExited || res.ExitCode != 7 {
		t.Fatalf("exit: %+v", res)
	}
}

func TestDockerCloseKillsTagged(t *testing.T) {
	fd := newFakeDocker(t, "box", "")
	sh, err := Start(context.Background(), &Docker{Container: "box", Binary: fd.bin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tag := sh.Proc().(*dockerProc).tag
	// A job, a job of a job, and one that left the process tree (only the tag finds it).
	remoteRun(t, sh, "sleep 300 & (sleep 301 &) ; setsid sleep 302 </dev/null >/dev/null 2>&1 &", 10*time.Second)
	waitTaggedSleeps(t, tag, 3)
	shellPID := sh.PID()
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	waitTagGone(t, tag)
	if err := syscall.Kill(shellPID, 0); err == nil {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(shellPID) + "/stat"); !bytes.Contains(b, []byte(") Z ")) {
			t.Fatalf("shell %d still alive", shellPID)
		}
	}
	select {
	case <-sh.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after Close")
	}
}

// The side scripts run under whatever sh the container has: check them with each shell here.
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
			parent := exec.Command(argv[0], append(argv[1:], "-c", "sleep 303 & (sleep 304; :) & sleep 305 & wait")...) //nolint:gosec // test
			parent.Env = append(os.Environ(), TagVar+"="+tag)
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()
			deadline := time.Now().Add(5 * time.Second)
			for len(descendants(parent.Process.Pid)) < 4 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			kids := descendants(parent.Process.Pid)
			if len(kids) < 4 {
				t.Fatalf("tree not up: %v", kids)
			}
			script, err := signalChildrenScript(parent.Process.Pid, syscall.SIGTERM)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(argv[0], append(argv[1:], "-c", script)...).CombinedOutput(); err != nil { //nolint:gosec // test
				t.Fatalf("signal script: %v %s", err, out)
			}
			// The parent survives its children's death; its wait then returns.
			done := make(chan error, 1)
			go func() { done <- parent.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("parent: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("children not signalled: %v", descendants(parent.Process.Pid))
			}
			// The kill script, on a fresh tree found only by tag.
			parent = exec.Command(argv[0], append(argv[1:], "-c", "sleep 306 & setsid sleep 307 & wait")...) //nolint:gosec // test
			parent.Env = append(os.Environ(), TagVar+"="+tag)
			if err := parent.Start(); err != nil {
				t.Fatal(err)
			}
			for len(taggedPIDs(tag)) < 3 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if out, err := exec.Command(argv[0], append(argv[1:], "-c", killSessionScript(tag))...).CombinedOutput(); err != nil { //nolint:gosec // test
				t.Fatalf("kill script: %v %s", err, out)
			}
			_ = parent.Wait()
			waitTagGone(t, tag)
		})
	}
}
