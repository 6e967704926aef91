package shell

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/testkit"
)

// startLocal starts a shell of the given kind ("bash" or "sh") in a temporary directory.
func startLocal(t *testing.T, sh string) *Shell {
	t.Helper()
	if _, err := exec.LookPath(sh); err != nil {
		t.Skipf("%s not installed", sh)
	}
	s, err := Start(context.Background(), &Local{Shell: sh, Dir: t.TempDir()}, nil)
	if err != nil {
		t.Fatalf("start %s: %v", sh, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.Grace = 200 * time.Millisecond
	return s
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

type run struct {
	RunResult
	out, err string
}

func runCmd(t *testing.T, s *Shell, cmd string, timeout time.Duration) run {
	t.Helper()
	var o, e bytes.Buffer
	if timeout == 0 {
		timeout = patient
	}
	res, err := s.Run(context.Background(), cmd, timeout, &o, &e)
	if err != nil {
		t.Fatalf("run %q: %v", cmd, err)
	}
	return run{res, o.String(), e.String()}
}

// shells are the shells every framing test runs against: bash, and a POSIX sh (dash on Debian).
var shells = []string{"bash", "sh"}

func TestMustWork(t *testing.T) {
	cases := []struct {
		name     string
		cmd      string
		out, err string // exact unless contains is set
		contains bool
		code     int
	}{
		{name: "comment", cmd: "echo hi # a comment", out: "hi\n"},
		{name: "comment only", cmd: "# nothing to do", out: ""},
		{name: "trailing ampersand", cmd: "true &", out: ""},
		{name: "heredoc", cmd: "cat <<EOF\nline $((1+1))\n  indented\nEOF", out: "line 2\n  indented\n"},
		{name: "quoted heredoc", cmd: "cat <<'EOF'\n$HOME stays\nEOF", out: "$HOME stays\n"},
		{name: "bang in text", cmd: "echo 'hi!' \"wow!\"", out: "hi! wow!\n"},
		{name: "syntax error", cmd: "if then fi", err: "syntax error", contains: true, code: 2},
		{name: "unclosed quote", cmd: "echo 'unclosed", err: "unexpected eof|unterminated", contains: true, code: 2},
		{name: "exit code", cmd: "sh -c 'exit 42'", code: 42},
		{name: "split streams", cmd: "echo out; echo err >&2", out: "out\n", err: "err\n"},
		{name: "no final newline", cmd: "printf 'no newline'", out: "no newline"},
		{name: "control bytes and NUL", cmd: `printf 'a\000b\001c\033[31md\n'`, out: "a\x00b\x01c\x1b[31md\n"},
		{name: "invalid UTF-8", cmd: `printf '\377\376ok\n'`, out: "\xff\xfeok\n"},
		{name: "fake end marker", cmd: `printf '\036NXfake\036' ; printf '0\036-\036/tmp\036NXfake\n'; echo real`, out: "\x1eNXfake\x1e0\x1e-\x1e/tmp\x1eNXfake\nreal\n"},
		{name: "stdin is /dev/null", cmd: "cat; echo done", out: "done\n"},
		{name: "read gets EOF", cmd: "read x; echo \"rc=$?\"", out: "rc=1\n"},
		{name: "multi-line", cmd: "for i in 1 2 3\ndo\n  echo $i\ndone", out: "1\n2\n3\n"},
		{name: "carriage returns kept raw", cmd: `printf '10%%\r50%%\r100%%\n'`, out: "10%\r50%\r100%\n"},
	}
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					r := runCmd(t, s, tc.cmd, 0)
					if r.ShellExited {
						t.Fatalf("shell exited: %+v", r)
					}
					if r.ExitCode != tc.code {
						t.Errorf("exit code %d, want %d (stderr %q)", r.ExitCode, tc.code, r.err)
					}
					if tc.contains {
						if !containsAny(strings.ToLower(r.err), strings.Split(tc.err, "|")) {
							t.Errorf("stderr %q does not contain %q", r.err, tc.err)
						}
					} else if r.out != tc.out || r.err != tc.err {
						t.Errorf("got out %q err %q, want out %q err %q", r.out, r.err, tc.out, tc.err)
					}
					// The session survives every case.
					if r := runCmd(t, s, "echo alive", 0); r.out != "alive\n" || r.ExitCode != 0 {
						t.Fatalf("session broken after %q: %+v out %q err %q", tc.cmd, r.RunResult, r.out, r.err)
					}
				})
			}
		})
	}
}

func TestStatePersists(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			sub := filepath.Join(s.Cwd(), "sub dir")
			runCmd(t, s, "mkdir -p 'sub dir' && cd 'sub dir' && export NX_VAR=prod && f() { echo \"f:$1\"; }", 0)
			r := runCmd(t, s, "pwd; echo $NX_VAR; f x", 0)
			if want := sub + "\nprod\nf:x\n"; r.out != want || r.Cwd != sub {
				t.Fatalf("state lost: out %q cwd %q, want %q in %q", r.out, r.Cwd, want, sub)
			}
		})
	}
}

func TestBashSpecifics(t *testing.T) {
	s := startLocal(t, "bash")
	steps := []struct{ cmd, out string }{
		{"declare -A m=([k]=v); n=1", ""},
		{"echo ${m[k]} $n", "v 1\n"},                                // declare at top level, not function-local
		{"return 2>/dev/null; echo after-return", "after-return\n"}, // no function to return from
		// A break or continue outside any loop ends the command (the framing's one-trip loop
		// takes it) instead of printing bash's "only meaningful in a loop" and going on.
		{"for i in 1 2; do break; done; echo in-loop-break-ok", "in-loop-break-ok\n"},
		{"break; echo not-reached", ""},
		{"echo after-break", "after-break\n"},
		{"set -- a b; echo $#", "2\n"},
		{"echo $# $1", "2 a\n"},
		{"alias ll='echo aliased'; shopt -s expand_aliases", ""},
		{"ll", "aliased\n"},
	}
	for _, st := range steps {
		if r := runCmd(t, s, st.cmd, 0); r.out != st.out {
			t.Fatalf("%q: out %q err %q, want %q", st.cmd, r.out, r.err, st.out)
		}
	}
}

func TestUserShellOptions(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			// set -x traces only the user's commands, and stays on.
			r := runCmd(t, s, "set -x; echo traced", 0)
			if r.out != "traced\n" || strings.Contains(r.err, "__nx") || !strings.Contains(r.err, "echo traced") {
				t.Fatalf("set -x: out %q err %q", r.out, r.err)
			}
			r = runCmd(t, s, "echo again", 0)
			if strings.Contains(r.err, "__nx") || !strings.Contains(r.err, "echo again") {
				t.Fatalf("xtrace after set -x: err %q", r.err)
			}
			runCmd(t, s, "set +x", 0)
			if r := runCmd(t, s, "echo quiet", 0); r.err != "" {
				t.Fatalf("xtrace still on: %q", r.err)
			}
			// set -e never ends the session.
			runCmd(t, s, "set -e", 0)
			if r := runCmd(t, s, "false", 0); r.ExitCode != 1 || r.ShellExited {
				t.Fatalf("set -e; false: %+v", r.RunResult)
			}
			runCmd(t, s, "set +e", 0)
			// set -C, IFS and PATH changes do not break the framing.
			runCmd(t, s, "set -C; IFS=:; PATH=/nonexistent", 0)
			if r := runCmd(t, s, "echo still here", 0); r.out != "still here\n" {
				t.Fatalf("after IFS/PATH change: %q %q", r.out, r.err)
			}
			if r := runCmd(t, s, "ls", 0); r.ExitCode != 127 {
				t.Fatalf("PATH change not honoured: %+v", r.RunResult)
			}
		})
	}
}

func TestLargeCommandAndFloods(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			// A 100 KB command: a PTY would drop it; pipes must not.
			long := strings.Repeat("x", 100_000)
			r := runCmd(t, s, "v="+long+"; echo ${#v}", 0)
			if r.out != "100000\n" {
				t.Fatalf("100 KB command: out %q err %.200q", r.out, r.err)
			}
			// Both streams flooding at once, interleaved.
			r = runCmd(t, s, "i=0; while [ $i -lt 20000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done", 0)
			if n := strings.Count(r.out, "\n"); n != 20000 || !strings.HasSuffix(r.out, "out19999\n") {
				t.Fatalf("stdout flood: %d lines", n)
			}
			if n := strings.Count(r.err, "\n"); n != 20000 || !strings.HasSuffix(r.err, "err19999\n") {
				t.Fatalf("stderr flood: %d lines", n)
			}
		})
	}
}

func TestFieldSeparatorInDirectory(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			dir := filepath.Join(s.Cwd(), "a\x1eb\nc")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			r := runCmd(t, s, "cd \"$(printf 'a\\036b\\nc')\" && echo in", 0)
			if r.out != "in\n" || r.Cwd != dir {
				t.Fatalf("cwd %q out %q err %q, want %q", r.Cwd, r.out, r.err, dir)
			}
		})
	}
}

func TestExit(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			r := runCmd(t, s, "echo bye; exit 3", 0)
			if !r.ShellExited || r.ExitCode != 3 || r.out != "bye\n" {
				t.Fatalf("exit: %+v out %q", r.RunResult, r.out)
			}
			var o, e bytes.Buffer
			if _, err := s.Run(context.Background(), "echo x", time.Second, &o, &e); err == nil {
				t.Fatal("a command after exit ran")
			}
		})
	}
}

func TestBackgroundJobDoesNotHoldCall(t *testing.T) {
	s := startLocal(t, "bash")
	// Had the call waited for the job, it would have timed out; and the job still runs after it.
	r := runCmd(t, s, "sleep 86400 & echo $!", 0)
	pid, err := strconv.Atoi(strings.TrimSpace(r.out))
	if err != nil || r.TimedOut || r.ExitCode != 0 {
		t.Fatalf("background job: %+v %q", r.RunResult, r.out)
	}
	// The job was forked, and execs sleep in its own time.
	testkit.Eventually(t, "the job to run sleep after the call returned", func() bool { return cmdline(pid) == "sleep 86400" })
}

// slowStart is a local transport whose shell takes forever to start: BASH_ENV, which a
// non-interactive bash sources before reading anything, sleeps. It sets its own start timeout.
type slowStart struct {
	Local
	limit time.Duration
}

func (s *slowStart) StartLimit() (time.Duration, string, string) {
	return s.limit, "the local shell", "its BASH_ENV sleeps"
}

// A shell that does not answer its handshake is given up after the transport's start timeout,
// with an error that says so, and nothing of it is left.
func TestStartTimeout(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	dir := t.TempDir()
	env := filepath.Join(dir, "env.sh")
	if err := os.WriteFile(env, []byte("sleep 86398\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := &slowStart{Local: Local{Shell: "bash", Dir: dir, Env: append(os.Environ(), "BASH_ENV="+env)}, limit: 500 * time.Millisecond}
	sleepers := func() []int {
		var out []int
		for _, pr := range procfs.All() {
			if !pr.Dead() && cmdline(pr.PID) == "sleep 86398" {
				if b, err := os.Readlink("/proc/" + strconv.Itoa(pr.PID) + "/cwd"); err == nil && b == dir {
					out = append(out, pr.PID)
				}
			}
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), patient) // only against a hang
	defer cancel()
	_, err := Start(ctx, tr, nil)
	if !errors.Is(err, ErrStartTimeout) || err.Error() != "start shell: the local shell did not finish starting within 500ms: its BASH_ENV sleeps" {
		t.Fatalf("Start: %v", err)
	}
	testkit.Eventually(t, "the stuck shell to be gone", func() bool { return len(sleepers()) == 0 })
	// Without a bound of its own a transport gets the default; the message names no cause it
	// does not know.
	if limit, what, cause := startLimit(&Local{}); limit != DefaultStartTimeout || what != "the shell" || cause == "" {
		t.Fatalf("default start limit: %s %q %q", limit, what, cause)
	}
}

func TestTimeoutKeepsSession(t *testing.T) {
	for _, sh := range shells {
		t.Run(sh, func(t *testing.T) {
			s := startLocal(t, sh)
			runCmd(t, s, "cd /tmp && export KEEP=1", 0)
			r := runCmd(t, s, "echo before; sleep 30", 300*time.Millisecond)
			if !r.TimedOut || r.ExitCode != TimeoutExitCode || r.ShellExited || r.out != "before\n" {
				t.Fatalf("timeout: %+v out %q", r.RunResult, r.out)
			}
			// A command that ignores SIGINT is killed, and the shell survives.
			r = runCmd(t, s, "trap '' INT; sleep 30", 300*time.Millisecond)
			if !r.TimedOut || r.ShellExited {
				t.Fatalf("SIGINT-proof command: %+v", r.RunResult)
			}
			if r := runCmd(t, s, "echo $KEEP; pwd", 0); r.out != "1\n/tmp\n" {
				t.Fatalf("state after timeouts: %q %q", r.out, r.err)
			}
		})
	}
}

func TestTimeoutOfBuiltinLoopClosesShell(t *testing.T) {
	s := startLocal(t, "bash")
	r := runCmd(t, s, "while :; do :; done", 200*time.Millisecond)
	if !r.TimedOut || !r.ShellExited || r.ExitCode != TimeoutExitCode {
		t.Fatalf("stuck shell: %+v", r.RunResult)
	}
}

func TestCloseKillsEverything(t *testing.T) {
	s := startLocal(t, "bash")
	r := runCmd(t, s, "sleep 300 & echo $!", 0)
	pid := strings.TrimSpace(r.out)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "background job "+pid+" to be killed by Close", func() bool {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

func TestNULInCommandRefused(t *testing.T) {
	s := startLocal(t, "bash")
	var o, e bytes.Buffer
	if _, err := s.Run(context.Background(), "echo a\x00b", time.Second, &o, &e); err == nil {
		t.Fatal("command with NUL accepted")
	}
	if r := runCmd(t, s, "echo ok", 0); r.out != "ok\n" {
		t.Fatalf("after refusal: %q", r.out)
	}
}

func BenchmarkRunTrue(b *testing.B) {
	s, err := Start(context.Background(), &Local{Dir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	var o, e bytes.Buffer
	for b.Loop() {
		if _, err := s.Run(context.Background(), "true", 0, &o, &e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBashCTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
