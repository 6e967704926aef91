package shell

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"

	"github.com/nexus-run/nexus/internal/shell/policy"
	"github.com/nexus-run/nexus/internal/testkit"
)

// framingShells are the shells the framing must drive: bash, the system's POSIX sh (dash on
// Debian) and busybox's ash.
func framingShells(t *testing.T) map[string]func(t *testing.T) *Shell {
	t.Helper()
	return map[string]func(t *testing.T) *Shell{
		"bash": func(t *testing.T) *Shell { return startLocal(t, "bash") },
		"sh":   func(t *testing.T) *Shell { return startLocal(t, "sh") },
		"busybox": func(t *testing.T) *Shell {
			bb, err := exec.LookPath("busybox")
			if err != nil {
				testkit.SkipUnlessCI(t, "busybox is not installed (Debian: apt-get install busybox-static; make test-deps installs everything the tests need)")
			}
			// busybox runs the applet its name says: a link named ash is its shell.
			ash := filepath.Join(t.TempDir(), "ash")
			if err := os.Symlink(bb, ash); err != nil {
				t.Fatal(err)
			}
			return startLocal(t, ash)
		},
	}
}

// tokenSpy collects a command's stdout and notes the token the engine gave the command. The
// engine calls Write with its lock held, so reading the command in flight needs no other.
type tokenSpy struct {
	s     *Shell
	token string
	out   bytes.Buffer
}

func (w *tokenSpy) Write(p []byte) (int, error) {
	if w.token == "" && w.s.cur != nil {
		start := string(w.s.cur.out.start) // rs NX token rs
		w.token = strings.TrimSuffix(strings.TrimPrefix(start, rs+"NX"), rs)
	}
	return w.out.Write(p)
}

// TestEngineStateUnreachable: the command loop's state lives in the same shell as the user's
// commands. Whatever a command does to the loop's variables, the loop evaluates nothing from
// them, the session goes on, and no token is to be found in the shell while a command runs.
func TestEngineStateUnreachable(t *testing.T) {
	for name, start := range framingShells(t) {
		t.Run(name, func(t *testing.T) {
			s := start(t)
			victim := filepath.Join(s.Cwd(), "victim")
			if err := os.WriteFile(victim, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{
				// The counter the loop once computed a token from, holding a subscript
				// that bash would evaluate in $((__nx_n+1)).
				"__nx_n='a[$(rm victim)]0'; true",
				"__nx_n='a[$(rm victim)]0'",
				// Every variable the loop uses, set to code or to a subscript.
				"__nx_c='rm victim'; __nx_t='a[$(rm victim)]'; __nx_r='a[$(rm victim)]'; __nx_f=x; __nx_d=; __nx_l='rm victim'; __nx_i='a[$(rm victim)]'",
				"__nx_k='a[$(rm victim)]'; __nx_s='$(rm victim)'; __nx_o='%s$(rm victim)'; __nx_e='$(rm victim)'; __nx_nl='$(rm victim)'",
				"unset __nx_c __nx_t __nx_r __nx_f",
				// The command stream, by descriptor and through /proc, from the shell and
				// from a child: closed while a command runs, a socket /proc will not open.
				// (Descriptors from 200 up are left alone: the test binary hands its own
				// down to the shells it starts.)
				`for f in /proc/$$/fd/*; do case ${f##*/} in [0-2]|[2-9]??) ;; *) echo 'rm victim' 2>/dev/null >"$f";; esac; done; true`,
				`sh -c 'for f in /proc/$PPID/fd/* /proc/self/fd/*; do case ${f##*/} in [0-2]|[2-9]??) ;; *) echo "rm victim" 2>/dev/null >"$f";; esac; done; true'`,
				"echo 'rm victim' >&62; echo 'rm victim' >&9; true",
			} {
				r := runCmd(t, s, cmd, 0)
				if r.ShellExited {
					t.Fatalf("%q ended the session: %+v %q", cmd, r.RunResult, r.err)
				}
				if _, err := os.Stat(victim); err != nil {
					t.Fatalf("%q ran code through the loop's state: victim is gone", cmd)
				}
				if r := runCmd(t, s, "echo alive", 0); r.out != "alive\n" || r.ExitCode != 0 {
					t.Fatalf("session after %q: %+v out %q err %q", cmd, r.RunResult, r.out, r.err)
				}
				if _, err := os.Stat(victim); err != nil {
					t.Fatalf("%q injected a command run after it: victim is gone", cmd)
				}
			}

			// No token anywhere a command can look: the variables, the environment, the
			// command stream (closed while it runs, not inherited by its programs).
			show := "set; env; echo \"[$__nx_t]\""
			if name == "bash" {
				show += "; declare -p; read -r -N 24 -u 62 x; echo \"[$x]\""
			} else {
				show += "; IFS= read -r x <&9; echo \"[$x]\""
			}
			spy := &tokenSpy{s: s}
			var stderr bytes.Buffer
			if _, err := s.Run(context.Background(), show, time.Minute, spy, &stderr); err != nil {
				t.Fatal(err)
			}
			r := run{out: spy.out.String()}
			if spy.token == "" || len(spy.token) != tokenLen {
				t.Fatalf("token not seen: %q", spy.token)
			}
			if strings.Contains(r.out, spy.token) || strings.Contains(stderr.String(), spy.token) {
				t.Errorf("the command's token %s is visible to the command:\n%s\n%s", spy.token, r.out, stderr.String())
			}
			if !strings.Contains(r.out, "\n[]\n") {
				t.Errorf("the loop's token variable is not empty while a command runs:\n%s", r.out)
			}
			r = runCmd(t, s, "ls -l /proc/self/fd/", 0)
			if strings.Contains(r.out, " 62 ->") || strings.Contains(r.out, " 9 ->") || strings.Contains(r.out, "socket:") {
				t.Errorf("a command's program inherited the command stream:\n%s", r.out)
			}
		})
	}
}

// TestFramingUsesOnlyReservedNames: every variable and function of the loop starts with
// policy.ReservedPrefix, every builtin it calls once commands run is one the policy keeps a
// session from replacing, and it evaluates nothing arithmetically, so that a policy's rules on
// the session's own state cover all of it.
func TestFramingUsesOnlyReservedNames(t *testing.T) {
	if !strings.Contains(bashLoop, "read -r -N "+strconv.Itoa(tokenLen)+" -u @ ") {
		t.Fatalf("bash reads a token of another length than tokenLen (%d)", tokenLen)
	}
	// bash's loop is single-quoted in startLine, with @ for its descriptor.
	if strings.ContainsRune(bashLoop, '\'') || strings.Count(bashLoop, "@") != 2 {
		t.Fatalf("bashLoop holds a single quote, or @ elsewhere than its two reads: %s", bashLoop)
	}
	if len(newToken()) != tokenLen {
		t.Fatalf("newToken makes %d characters, want %d", len(newToken()), tokenLen)
	}
	p := syntax.NewParser(syntax.Variant(syntax.LangBash))
	// The lines before the loop run once, before any user command: what they call cannot
	// have been replaced yet. The functions' bodies and the loop run after user commands.
	first := strings.Index(bootstrap, "\n")
	loop := bootstrap[first+1:] + startLine + strings.ReplaceAll(bashLoop, "@", "10") + "\n"
	f, err := p.Parse(strings.NewReader(loop), "")
	if err != nil {
		t.Fatal(err)
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Args) == 0 {
				break
			}
			name, ok := policy.Literal(n.Args[0])
			if !ok {
				t.Errorf("the loop runs a command whose name is not a literal: %v", n.Args[0])
				break
			}
			if name == "exec" && len(n.Args) == 1 {
				break // exec 62<&0 </dev/null: redirections before the loop starts
			}
			if !strings.HasPrefix(name, policy.ReservedPrefix) && !policy.ReservedBuiltin(name) {
				t.Errorf("the loop calls %q, which a session's policy does not keep the user from replacing", name)
			}
			for _, a := range n.Assigns {
				if a.Name.Value != "IFS" {
					t.Errorf("the loop assigns %q", a.Name.Value)
				}
			}
		case *syntax.Assign:
			if !strings.HasPrefix(n.Name.Value, policy.ReservedPrefix) && n.Name.Value != "IFS" {
				t.Errorf("the loop assigns %q, outside its reserved names", n.Name.Value)
			}
		case *syntax.FuncDecl:
			if !strings.HasPrefix(n.Name.Value, policy.ReservedPrefix) {
				t.Errorf("the loop defines %q, outside its reserved names", n.Name.Value)
			}
		case *syntax.ArithmExp, *syntax.ArithmCmd, *syntax.LetClause:
			t.Errorf("the loop evaluates arithmetic: %v", n)
		case *syntax.ParamExp:
			if n.Param != nil && !strings.HasPrefix(n.Param.Value, policy.ReservedPrefix) {
				switch n.Param.Value {
				case "-", "?", "$", "1", "PWD", "BASH_VERSION":
				default:
					t.Errorf("the loop expands $%s", n.Param.Value)
				}
			}
		}
		return true
	})
	// printf's formats are literals: a variable format would be the user's.
	for _, line := range strings.Split(loop, ";") {
		if i := strings.Index(line, "printf "); i >= 0 && !strings.HasPrefix(line[i+len("printf "):], "'") {
			t.Errorf("printf with a format that is not a literal: %q", line)
		}
	}
}

func TestMessage(t *testing.T) {
	tok := newToken()
	if got := message(true, "echo hi", tok); got != "echo hi\n\x00"+tok {
		t.Errorf("bash message %q", got)
	}
	got := message(false, "echo hi\n", tok)
	lines := strings.Split(got, "\n")
	if len(lines) != 5 || lines[0] != lines[2] || lines[1] != "echo hi" || lines[3] != tok || lines[4] != "" || len(lines[0]) != tokenLen || lines[0] == tok {
		t.Errorf("sh message %q", got)
	}
}
