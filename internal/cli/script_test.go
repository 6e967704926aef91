package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/acpengine/acptest"
	"github.com/nexus-run/nexus/internal/cli"
	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestMain lets the test binary act as the nexus command inside scripts: testscript installs a
// copy of it named "nexus" in $PATH, and running that copy runs cli.Main as cmd/nexus does.
func TestMain(m *testing.M) {
	// acptest-agent is an ACP agent (acp backends' scripts).
	testscript.Main(m, map[string]func(){"nexus": nexusMain, "acptest-agent": acptest.Serve})
}

func nexusMain() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Version: "v0.0.0-script"})
	stop()
	os.Exit(code)
}

// TestScript runs the end-to-end scripts of testdata/script: each starts `nexus serve` in its
// own state directory ($NEXUS_HOME=$WORK/home) and drives real bash shells in real PTYs through
// the CLI. Besides testscript's own commands, scripts have (see each cmd function):
//
//	waitgw                       wait for the gateway socket (fails early if serve died)
//	stopgw                       SIGTERM the background `nexus serve`, wait for its exit
//	waitbg                       wait for the other background commands to exit
//	waitevent ID REGEX           poll `session events --format json-compact`
//	waitoutput ID REGEX          poll the session's terminal output as plain text
//	waitstdout REGEX PROG ARGS... rerun a command until its stdout matches
//	waitfile FILE REGEX          poll a file
//	waitproc SID COMM            wait for a process named COMM in session SID
//	noprocs SID [COMM]           no process left in session SID (/proc/PID/stat field 6)
//	waitnoprocs SID              wait until no process is left in session SID
//	killwatchdog                 SIGKILL the watchdogs of this script's state directory
//	jsonget FILE PATH VAR        JSON value at a dotted path into an env var
//	jsoneq FILE PATH WANT        JSON value at a dotted path equals WANT
//	jsonsame A B                 two files hold the same JSON value
//	exitcode N PROG ARGS...      run PROG, require exit status N
//	envfile VAR FILE             file content into an env var
//	tour README                  run the README's tour as printed (tour_test.go)
//	missing PROG                 fail: PROG is needed under CI (with [ci]; elsewhere, skip)
//
// and the condition [ci] (the CI variable is set: a missing prerequisite fails, never skips).
//
// $REPO is the repository's root.
//
// Every wait polls for its condition; none has a time limit of its own. Only a hang guard
// (testkit.Patience: minutes, raised with NEXUS_TEST_PATIENCE) ends a wait that never succeeds,
// so a loaded machine makes a script slower, never failing.
func TestScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash not found; the end-to-end scripts drive real bash shells")
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testkit.SkipUnlessCI(t, "no /proc; the end-to-end scripts check processes through it")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, scriptParams(filepath.Join("testdata", "script"), repo, bash, nil))
}

// scriptParams are the scripts' parameters: dir's scripts, the commands above, and setup
// (after the common one) when not nil.
func scriptParams(dir, repo, bash string, setup func(env *testscript.Env) error) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("NEXUS_HOME", filepath.Join(env.WorkDir, "home"))
			env.Setenv("REPO", repo)
			env.Setenv("SHELL", bash)
			// Race-enabled binaries sleep 1s at exit by default so late reports can be printed; every
			// nexus command of the scripts would pay it. A race still fails its command (exit 66).
			if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
				env.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
			}
			if setup != nil {
				return setup(env)
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitgw":       cmdWaitGateway,
			"stopgw":       cmdStopGateway,
			"waitbg":       cmdWaitBackground,
			"waitevent":    cmdWaitEvent,
			"waitoutput":   cmdWaitOutput,
			"waitfile":     cmdWaitFile,
			"waitstdout":   cmdWaitStdout,
			"waitproc":     cmdWaitProc,
			"noprocs":      cmdNoProcs,
			"waitnoprocs":  cmdWaitNoProcs,
			"killwatchdog": cmdKillWatchdog,
			"jsonget":      cmdJSONGet,
			"jsoneq":       cmdJSONEq,
			"jsonsame":     cmdJSONSame,
			"exitcode":     cmdExitCode,
			"envfile":      cmdEnvFile,
			"tour":         cmdTour,
			"missing":      cmdMissing,
		},
		Condition: func(cond string) (bool, error) {
			if cond == "ci" {
				return testkit.InCI(), nil
			}
			if cond == "acp-client" {
				// The official ACP TypeScript SDK (make acp-client-deps) that drives nexus acp.
				_, err := os.Stat(filepath.Join(repo, "tools", "acp-client", "node_modules", "@agentclientprotocol", "sdk", "package.json"))
				return err == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	}
}

const pollEvery = 50 * time.Millisecond

// poll calls try until it reports done, or until the hang guard (testkit.Patience) gives up; it
// returns whether try succeeded. The guard is no performance bound: it only stops a script that
// would otherwise wait forever.
func poll(try func() bool) bool {
	deadline := time.Now().Add(testkit.Patience())
	for {
		if try() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

func noNeg(ts *testscript.TestScript, neg bool, name string) {
	if neg {
		ts.Fatalf("unsupported: ! %s", name)
	}
}

func stateDir(ts *testscript.TestScript) string {
	home := ts.Getenv("NEXUS_HOME")
	if home == "" {
		ts.Fatalf("NEXUS_HOME is not set")
	}
	return filepath.Join(home, "state")
}

// serveCmds are the script's background `nexus serve` commands.
func serveCmds(ts *testscript.TestScript) []*exec.Cmd {
	var out []*exec.Cmd
	for _, c := range ts.BackgroundCmds() {
		if filepath.Base(c.Path) == "nexus" && slices.Contains(c.Args[1:], "serve") {
			out = append(out, c)
		}
	}
	return out
}

// waitgw: wait until the gateway of $NEXUS_HOME accepts connections (its socket and
// state/gateway.json exist and the socket answers), failing early if `nexus serve` died.
func cmdWaitGateway(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitgw")
	if len(args) != 0 {
		ts.Fatalf("usage: waitgw")
	}
	dir := stateDir(ts)
	sock := filepath.Join(dir, "gateway.sock")
	if len(sock) >= 108 {
		ts.Fatalf("socket path %s is too long for a unix socket", sock)
	}
	var died string
	ok := poll(func() bool {
		for _, c := range serveCmds(ts) {
			if !alive(c.Process.Pid) {
				died = fmt.Sprintf("nexus serve (pid %d) exited before its gateway came up", c.Process.Pid)
				return true
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "gateway.json")); err != nil {
			return false
		}
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	})
	if died != "" {
		ts.Fatalf("%s", died)
	}
	if !ok {
		ts.Fatalf("gateway socket %s not ready after %s", sock, testkit.Patience())
	}
}

// stopgw: send SIGTERM to the script's background `nexus serve` commands and wait
// until they have exited. Use `wait` afterwards to check their status and output.
func cmdStopGateway(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "stopgw")
	if len(args) != 0 {
		ts.Fatalf("usage: stopgw")
	}
	cmds := serveCmds(ts)
	if len(cmds) == 0 {
		ts.Fatalf("no background nexus serve to stop")
	}
	for _, c := range cmds {
		if err := c.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			ts.Fatalf("signal nexus serve (pid %d): %v", c.Process.Pid, err)
		}
	}
	for _, c := range cmds {
		pid := c.Process.Pid
		if !poll(func() bool { return !alive(pid) }) {
			ts.Fatalf("nexus serve (pid %d) still running %s after SIGTERM", pid, testkit.Patience())
		}
	}
}

// waitbg: wait until every background command other than `nexus serve` has exited,
// so a following `wait` cannot block for long.
func cmdWaitBackground(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitbg")
	if len(args) != 0 {
		ts.Fatalf("usage: waitbg")
	}
	serve := serveCmds(ts)
	for _, c := range ts.BackgroundCmds() {
		if slices.Contains(serve, c) {
			continue
		}
		pid := c.Process.Pid
		if !poll(func() bool { return !alive(pid) }) {
			ts.Fatalf("background command %q (pid %d) still running after %s", strings.Join(c.Args, " "), pid, testkit.Patience())
		}
	}
}

// runNexus runs the nexus binary with the script's environment, outside the script's own
// stdout/stderr (the polling commands decide what to report).
func runNexus(ts *testscript.TestScript, args ...string) (stdout, stderr string, err error) {
	return run(ts, "nexus", args...)
}

// run runs prog (found in $PATH) with the script's environment in its current directory.
func run(ts *testscript.TestScript, prog string, args ...string) (stdout, stderr string, err error) {
	path, err := exec.LookPath(prog)
	if err != nil {
		ts.Fatalf("find %s: %v", prog, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = ts.MkAbs(".")
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "SHELL", "NEXUS_HOME", "NEXUS_GATEWAY", "NEXUS_TOKEN", "GOCOVERDIR", "GORACE"} {
		if v := ts.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		werr := <-done
		err = fmt.Errorf("%s %s: %w (killed: %w)", prog, strings.Join(args, " "), ctx.Err(), werr)
	}
	return o.String(), e.String(), err
}

func compileRE(ts *testscript.TestScript, expr string) *regexp.Regexp {
	re, err := regexp.Compile(expr)
	if err != nil {
		ts.Fatalf("bad regexp %q: %v", expr, err)
	}
	return re
}

// waitevent ID REGEX: poll `nexus session events --session-id ID --format
// json-compact` until its output matches REGEX. The last output becomes stdout.
func cmdWaitEvent(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitevent")
	if len(args) != 2 {
		ts.Fatalf("usage: waitevent ID REGEX")
	}
	re := compileRE(ts, args[1])
	var out, errOut string
	var err error
	ok := poll(func() bool {
		out, errOut, err = runNexus(ts, "session", "events", "--session-id", args[0], "--format", "json-compact")
		return err == nil && re.MatchString(out)
	})
	_, _ = ts.Stdout().Write([]byte(out))
	if !ok {
		ts.Fatalf("no event of session %s matched %q after %s (last error: %v; stderr: %s)", args[0], args[1], testkit.Patience(), err, errOut)
	}
}

// waitstdout REGEX PROG [ARGS...]: run PROG until it succeeds with a standard output that
// matches REGEX. The last output becomes stdout.
func cmdWaitStdout(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitstdout")
	if len(args) < 2 {
		ts.Fatalf("usage: waitstdout REGEX PROG [ARGS...]")
	}
	re := compileRE(ts, args[0])
	var out, errOut string
	var err error
	ok := poll(func() bool {
		out, errOut, err = run(ts, args[1], args[2:]...)
		return err == nil && re.MatchString(out)
	})
	_, _ = ts.Stdout().Write([]byte(out))
	if !ok {
		ts.Fatalf("%s did not print a match for %q in %s (last error: %v; stderr: %s)", strings.Join(args[1:], " "), args[0], testkit.Patience(), err, errOut)
	}
}

// waitoutput ID REGEX: poll the session's events until the terminal output so far,
// decoded from raw bytes, stripped of escape sequences and with every \r\n or lone \r turned
// into \n, matches REGEX. That text becomes stdout.
func cmdWaitOutput(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitoutput")
	if len(args) != 2 {
		ts.Fatalf("usage: waitoutput ID REGEX")
	}
	re := compileRE(ts, args[1])
	var text, errOut string
	var err error
	ok := poll(func() bool {
		var out string
		out, errOut, err = runNexus(ts, "session", "events", "--session-id", args[0], "--content-type", "raw")
		if err != nil {
			return false
		}
		text, err = terminalText(out)
		return err == nil && re.MatchString(text)
	})
	_, _ = ts.Stdout().Write([]byte(text))
	if !ok {
		ts.Fatalf("terminal output of session %s did not match %q after %s (last error: %v; stderr: %s)", args[0], args[1], testkit.Patience(), err, errOut)
	}
}

// terminalText concatenates the raw terminal-output data events of a json-raw event stream.
func terminalText(events string) (string, error) {
	var raw []byte
	for line := range strings.Lines(events) {
		var e struct {
			Event   string `json:"event"`
			Payload struct {
				Type        string `json:"type"`
				Content     string `json:"content"`
				ContentType string `json:"contentType"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return "", fmt.Errorf("decode event %q: %w", line, err)
		}
		if e.Event != "data" || e.Payload.Type != "terminal-output" {
			continue
		}
		if e.Payload.ContentType != "raw" {
			return "", fmt.Errorf("want contentType raw, got %q", e.Payload.ContentType)
		}
		b, err := base64.StdEncoding.DecodeString(e.Payload.Content)
		if err != nil {
			return "", fmt.Errorf("raw content is not base64: %w", err)
		}
		raw = append(raw, b...)
	}
	// The ABI's own stripping: charmbracelet/x/ansi would link go-runewidth, whose tables cost
	// every nexus the scripts run a quarter of a second at start under the race detector.
	s := abi.StripANSI(raw)
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n"), nil
}

// waitfile FILE REGEX: wait until FILE exists and its content matches REGEX.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitfile")
	if len(args) != 2 {
		ts.Fatalf("usage: waitfile FILE REGEX")
	}
	re := compileRE(ts, args[1])
	path := ts.MkAbs(args[0])
	var data []byte
	ok := poll(func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil && re.Match(data)
	})
	if !ok {
		ts.Fatalf("%s did not match %q after %s; content:\n%s", args[0], args[1], testkit.Patience(), data)
	}
}

// alive reports whether pid is a process that has not exited.
func alive(pid int) bool {
	p, err := procfs.Stat(pid)
	return err == nil && !p.Dead()
}

func pidArg(ts *testscript.TestScript, s string) int {
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 1 {
		ts.Fatalf("bad pid %q", s)
	}
	return pid
}

// waitproc SID COMM: wait until a live process named COMM runs in session SID (a
// terminal session's shell pid, metadata.pid).
func cmdWaitProc(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitproc")
	if len(args) != 2 {
		ts.Fatalf("usage: waitproc SID COMM")
	}
	sid := pidArg(ts, args[0])
	ok := poll(func() bool {
		for _, p := range procfs.Members(sid) {
			if p.Comm == args[1] && !p.Dead() {
				return true
			}
		}
		return false
	})
	if !ok {
		ts.Fatalf("no %s process in session %d after %s (session has %v)", args[1], sid, testkit.Patience(), procfs.Members(sid))
	}
}

// noprocs SID [COMM]: no process (named COMM, if given) is left in session SID. A zombie that
// was handed to pid 1 is dead and waits on the machine's init to reap it, so it is tolerated;
// any other zombie means nexus (or its shell) failed to reap a child. With !, at least one
// live such process must exist.
func cmdNoProcs(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: noprocs SID [COMM]")
	}
	sid := pidArg(ts, args[0])
	var live, orphans []procfs.Proc
	for _, p := range procfs.Members(sid) {
		if len(args) == 2 && p.Comm != args[1] {
			continue
		}
		if p.State == 'Z' && p.PPID == 1 {
			orphans = append(orphans, p)
			continue
		}
		live = append(live, p)
	}
	if len(orphans) > 0 {
		ts.Logf("session %d: zombies left to pid 1 to reap: %+v", sid, orphans)
	}
	if neg {
		if len(live) == 0 {
			ts.Fatalf("no process left in session %d", sid)
		}
		return
	}
	if len(live) > 0 {
		ts.Fatalf("processes left in session %d: %+v", sid, live)
	}
}

// jsonValue returns the value at a dotted path (object keys, array indexes) of a JSON document.
func jsonValue(ts *testscript.TestScript, file, path string) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(ts.ReadFile(file)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		ts.Fatalf("%s is not JSON: %v", file, err)
	}
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func jsonString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return "null"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// jsonget FILE PATH VAR: set VAR to the value at PATH (dotted, e.g. metadata.pid or
// errors.0.type) of the JSON document in FILE (stdout and stderr name the last command's).
// Strings are unquoted; other values are JSON. With !, PATH must be absent.
func cmdJSONGet(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		if len(args) != 2 {
			ts.Fatalf("usage: ! jsonget FILE PATH")
		}
		if v, ok := jsonValue(ts, args[0], args[1]); ok {
			ts.Fatalf("%s has %s = %s; want it absent", args[0], args[1], jsonString(v))
		}
		return
	}
	if len(args) != 3 {
		ts.Fatalf("usage: jsonget FILE PATH VAR")
	}
	v, ok := jsonValue(ts, args[0], args[1])
	if !ok {
		ts.Fatalf("%s has no %s", args[0], args[1])
	}
	ts.Setenv(args[2], jsonString(v))
}

// jsoneq FILE PATH WANT: the value at PATH, rendered as jsonget does, equals WANT. With !, it
// differs (or is absent).
func cmdJSONEq(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: jsoneq FILE PATH WANT")
	}
	v, ok := jsonValue(ts, args[0], args[1])
	got := jsonString(v)
	switch {
	case !neg && !ok:
		ts.Fatalf("%s has no %s (want %s)", args[0], args[1], args[2])
	case !neg && got != args[2]:
		ts.Fatalf("%s: %s = %s, want %s", args[0], args[1], got, args[2])
	case neg && ok && got == args[2]:
		ts.Fatalf("%s: %s = %s, want anything else", args[0], args[1], got)
	}
}

// jsonsame A B: files A and B hold the same JSON value (white space and key order aside).
func cmdJSONSame(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: jsonsame A B")
	}
	var a, b any
	if err := json.Unmarshal([]byte(ts.ReadFile(args[0])), &a); err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	if err := json.Unmarshal([]byte(ts.ReadFile(args[1])), &b); err != nil {
		ts.Fatalf("%s: %v", args[1], err)
	}
	if same := reflect.DeepEqual(a, b); same == neg {
		ts.Fatalf("%s and %s: same JSON = %v", args[0], args[1], same)
	}
}

// exitcode N PROG [ARGS...]: run PROG as exec does and require exit status N.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "exitcode")
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("bad exit status %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("run %s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

// missing PROG: a prerequisite of the script is not installed. Under CI that is a failure, so
// scripts write "[!exec:PROG] [ci] missing PROG" before "[!exec:PROG] skip ...".
func cmdMissing(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "missing")
	if len(args) != 1 {
		ts.Fatalf("usage: missing PROG")
	}
	ts.Fatalf("%s is not installed, and under CI every prerequisite must be (.ci/run installs it)", args[0])
}

// envfile VAR FILE: set VAR to the content of FILE without surrounding white space.
func cmdEnvFile(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "envfile")
	if len(args) != 2 {
		ts.Fatalf("usage: envfile VAR FILE")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile(args[1])))
}
