package policy_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// These tests run each bypass end to end: a real bash session under a
// policy, a file named victim in its directory, the commands of the
// bypass; the last one must be refused and victim must still be there.
// Where the bypass's program is installed, the same commands also run in
// a session without a policy, to show that they do delete victim there:
// the refusal, not a broken exploit, is what keeps the file.

type bypassCase struct {
	name  string
	allow []string // the session's allow list; deny: [rm] when empty
	steps []string // run in order; the last is the bypass
	needs string   // a program the bypass needs (the control runs only if it is installed)
}

func runBypasses(t *testing.T, cases []bypassCase) {
	t.Helper()
	m := agentshell.New(agentshell.Config{AuditDir: filepath.Join(t.TempDir(), "audit"), IdleTimeout: -1})
	t.Cleanup(m.Close)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			deny := []string{"rm"}
			if tc.allow != nil {
				deny = nil
			}
			dir, victim := victimDir(t)
			id := create(t, m, agentshell.CreateOptions{Cwd: dir, Allow: tc.allow, Deny: deny})
			for _, step := range tc.steps[:len(tc.steps)-1] {
				if _, err := m.Exec(ctx(t), id, step, agentshell.ExecOptions{}); err != nil {
					t.Fatalf("setup %q: %v", step, err)
				}
			}
			last := tc.steps[len(tc.steps)-1]
			res, err := m.Exec(ctx(t), id, last, agentshell.ExecOptions{})
			if !errors.Is(err, agentshell.ErrBlocked) {
				t.Errorf("%q: err %v (result %+v), want blocked", last, err, res)
			}
			if _, err := os.Stat(victim); err != nil {
				t.Errorf("%q deleted victim under the policy", last)
			}
			if r, err := m.Exec(ctx(t), id, "echo alive", agentshell.ExecOptions{}); err != nil || r.Stdout != "alive\n" {
				t.Errorf("session after %q: %+v %v", last, r, err)
			}
			_ = m.Destroy(ctx(t), id)

			// The control: without a policy, the same steps delete victim.
			if tc.needs != "" {
				if _, err := exec.LookPath(tc.needs); err != nil {
					t.Logf("control not run: %s is not installed (the refusal above does not depend on it)", tc.needs)
					return
				}
			}
			dir, victim = victimDir(t)
			id = create(t, m, agentshell.CreateOptions{Cwd: dir})
			defer func() { _ = m.Destroy(ctx(t), id) }()
			for _, step := range tc.steps {
				if _, err := m.Exec(ctx(t), id, step, agentshell.ExecOptions{Timeout: 30 * time.Second}); err != nil {
					t.Fatalf("control %q: %v", step, err)
				}
			}
			if _, err := os.Stat(victim); err == nil {
				t.Errorf("control: without a policy %q did not delete victim; the case does not exercise a bypass", last)
			}
		})
	}
}

func victimDir(t *testing.T) (dir, victim string) {
	t.Helper()
	dir = t.TempDir()
	victim = filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, victim
}

func create(t *testing.T, m *agentshell.Manager, o agentshell.CreateOptions) string {
	t.Helper()
	info, err := m.Create(ctx(t), o)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info.SessionID
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// printers is the hardening issue's allow list.
var printers = []string{"echo", "printf", "test"}

func TestArithmeticBypassesEndToEnd(t *testing.T) {
	const payload = "x='a[$(rm victim)]'"
	runBypasses(t, []bypassCase{
		{name: "arithmetic expansion, allow list", allow: printers, steps: []string{payload, "echo $((x))"}},
		{name: "printf -v, allow list", allow: printers, steps: []string{"printf -v 'a[$(rm victim)]' x"}},
		{name: "test -v, allow list", allow: printers, steps: []string{"test -v 'a[$(rm victim)]'"}},
		{name: "test -v of data, allow list", allow: printers, steps: []string{payload, `test -v "$x"`}},
		{name: ": $((x))", steps: []string{payload, ": $((x))"}},
		{name: "[[ -eq ]]", steps: []string{payload, "[[ $x -eq 0 ]]"}},
		{name: "declare -i", steps: []string{"y='a[$(rm victim)]'", "declare -i n; n=y"}},
		{name: "let", steps: []string{payload, "let y=x"}},
		{name: "((...))", steps: []string{payload, "(( x ))"}},
		{name: "for ((...))", steps: []string{payload, "for ((i=x; 0; )); do :; done"}},
		{name: "$[...]", steps: []string{payload, "echo $[x]"}},
		{name: "subscript read", steps: []string{payload, "a=(1); echo ${a[x]}"}},
		{name: "subscript assigned", steps: []string{payload, "a=(1); a[x]=2"}},
		{name: "substring offset", steps: []string{payload, "v=hello; echo ${v:x}"}},
		{name: "indirect expansion", steps: []string{payload, "echo ${!x}"}},
		{name: "read into a name from data", steps: []string{payload, `read "$x" <<< 1`}},
		{name: "printf -v a name from data", steps: []string{payload, `printf -v "$x" y`}},
		{name: "unset a subscript", steps: []string{payload, "a=(1); unset 'a[x]'"}},
		{name: "nameref", steps: []string{"declare -n r='a[$(rm victim)]'; echo $r"}},
		{name: "declare of an array value", steps: []string{"x='([0]=$(rm victim))'", "a=(1); declare a=$x"}},
		{name: "integer variable OPTIND", steps: []string{payload, "OPTIND=x"}},
		{name: "{fd} redirection", steps: []string{payload, "a=(1); exec {a[x]}>/dev/null"}},
		{name: "wait -p", steps: []string{"sleep 0 & wait -n -p 'a[$(rm victim)]'"}},
		{name: "BASH_ENV", steps: []string{"BASH_ENV='$(rm victim)' bash -c true"}},
		{name: "compgen -W", steps: []string{"compgen -W '$(rm victim)' x"}},
		{name: "PS4 from printf -v", steps: []string{"printf -v PS4 '%s' '$(rm victim)'; set -x; :; set +x"}},
	})
}

// TestEngineStateEndToEnd: commands that reach for the session's command
// loop. With a policy they are refused; without one they run, and neither
// run code through the loop nor end the session.
func TestEngineStateEndToEnd(t *testing.T) {
	m := agentshell.New(agentshell.Config{AuditDir: filepath.Join(t.TempDir(), "audit"), IdleTimeout: -1})
	t.Cleanup(m.Close)
	for _, tc := range []struct {
		cmd     string
		blocked bool // refused by a policy; otherwise only harmless
	}{
		{"__nx_n='a[$(rm victim)]0'; true", true},
		{"__nx_c='rm victim'; __nx_t='a[$(rm victim)]'; __nx_r='$(rm victim)'", true},
		{"echo 'rm victim' > /proc/self/fd/62; true", true},
		{"echo 'rm victim' > /dev/fd/62; true", true},
		// A path built at run time is not seen; the command stream is a
		// socket, which /proc does not open.
		{`for f in /proc/$$/fd/*; do case ${f##*/} in [0-2]|[2-9]??) ;; *) echo 'rm victim' 2>/dev/null >"$f";; esac; done; true`, false},
		// The command stream's descriptor, closed and opened again on a
		// pipe of the command's own: without a policy that is the user
		// running what they could run anyway, so only the policy is tried.
		{`exec 10<&- 11<&- 12<&-; exec 10< <(printf 'rm victim\0%024d' 0) 11< <(printf 'rm victim\0%024d' 0) 12< <(printf 'rm victim\0%024d' 0)`, true},
	} {
		cmd := tc.cmd
		t.Run(cmd, func(t *testing.T) {
			for _, deny := range [][]string{{"rm"}, nil} {
				if deny == nil && strings.Contains(cmd, "exec 10<&-") {
					continue
				}
				dir, victim := victimDir(t)
				id := create(t, m, agentshell.CreateOptions{Cwd: dir, Deny: deny})
				_, err := m.Exec(ctx(t), id, cmd, agentshell.ExecOptions{})
				switch {
				case deny != nil && tc.blocked && !errors.Is(err, agentshell.ErrBlocked):
					t.Errorf("deny %v: %v, want blocked", deny, err)
				case (deny == nil || !tc.blocked) && err != nil:
					t.Errorf("deny %v: %v", deny, err)
				}
				r, err := m.Exec(ctx(t), id, "echo alive", agentshell.ExecOptions{})
				if err != nil || r.Stdout != "alive\n" {
					t.Errorf("deny %v: session after the command: %+v %v", deny, r, err)
				}
				if _, err := os.Stat(victim); err != nil {
					t.Errorf("deny %v: victim deleted", deny)
				}
				_ = m.Destroy(ctx(t), id)
			}
		})
	}
}

func TestWrapperBypassesEndToEnd(t *testing.T) {
	var cases []bypassCase
	for _, c := range []struct{ cmd, needs string }{
		{"chrt -o 0 rm victim", "chrt"},
		{"unshare rm victim", "unshare"},
		{"strace -o /dev/null rm victim", "strace"},
		{"prlimit --nofile=1024 rm victim", "prlimit"},
		{"setpriv --reuid=0 rm victim", "setpriv"},
		{"setarch x86_64 rm victim", "setarch"},
		{"linux64 rm victim", "linux64"},
		{"fakeroot rm victim", "fakeroot"},
		{"script -qc 'rm victim' /dev/null", "script"},
		{"sg root -c 'rm victim'", "sg"},
		{"capsh -- -c 'rm victim'", "capsh"},
		{"gdb -batch -ex 'shell rm victim'", "gdb"},
	} {
		cases = append(cases, bypassCase{name: strings.Fields(c.cmd)[0], steps: []string{c.cmd}, needs: c.needs})
	}
	runBypasses(t, cases)
}
