package tools_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// withBash adds the bash tool over a real agent-shell manager (a real bash process).
func withBash(t *testing.T, r *tools.Registry, f fixture, opts agentshell.CreateOptions) *tools.Bash {
	t.Helper()
	mgr := agentshell.New(agentshell.Config{AuditDir: filepath.Join(t.TempDir(), "audit"), IdleTimeout: -1})
	t.Cleanup(mgr.Close)
	b := tools.NewBash(mgr, f.ws, opts)
	t.Cleanup(func() { _ = b.Close(t.Context()) })
	mustOK(t, r.Add(b))
	return b
}

func TestBashPersistentShell(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, nil)
	b := withBash(t, r, f, agentshell.CreateOptions{})
	steps := []struct {
		cmd  string
		want []string
	}{
		{cmd: "pwd", want: []string{f.ws + "\n", "[exit code 0]"}},
		{cmd: "cd src && export GREETING=hello", want: []string{"[exit code 0]"}},
		{cmd: "pwd; echo $GREETING; ls", want: []string{filepath.Join(f.ws, "src") + "\n", "hello\n", "a.go\n"}},
		{cmd: "echo oops >&2; exit 3", want: []string{"[stderr]\noops\n", "[exit code 3]", "the shell exited"}},
		{cmd: "pwd; echo \"[$GREETING]\"", want: []string{f.ws + "\n", "[]\n"}},
		{cmd: "sleep 60", want: []string{"[timed out]"}},
	}
	var id string
	for i, st := range steps {
		args := map[string]any{"command": st.cmd}
		if st.cmd == "sleep 60" {
			args["timeout_secs"] = 1
		}
		res, err := call(t, r, nil, "bash", jsonArgs(t, args), "")
		mustOK(t, err)
		for _, w := range st.want {
			if !strings.Contains(res.Output, w) {
				t.Fatalf("step %d %q: output lacks %q:\n%s", i, st.cmd, w, res.Output)
			}
		}
		if i == 0 {
			id = b.SessionID()
		}
		if i == 2 && (b.SessionID() != id || b.Cwd() != filepath.Join(f.ws, "src")) {
			t.Fatalf("after cd: session %s (was %s), cwd %s", b.SessionID(), id, b.Cwd())
		}
	}
	if b.SessionID() == id {
		t.Fatal("the shell that exited was not replaced")
	}
}

// programs reports whether a request lists exactly the programs of these names, each by its
// path as PATH finds it.
func programs(req *permission.Request, names ...string) bool {
	if len(req.Programs) != len(names) {
		return false
	}
	for i, p := range req.Programs {
		if !filepath.IsAbs(p) || filepath.Base(p) != names[i] {
			return false
		}
	}
	return true
}

func TestBashPermissions(t *testing.T) {
	f := newFixture(t)

	// SANDBOXED: the shell is not offered and refused.
	rs := registry(t, f, permission.Sandboxed, nil)
	withBash(t, rs, f, agentshell.CreateOptions{})
	if _, err := rs.Prepare("bash", json.RawMessage(`{"command":"ls"}`), nil); err == nil || !strings.Contains(err.Error(), "sandboxed") {
		t.Fatalf("sandboxed bash: %v", err)
	}
	for _, s := range rs.Specs() {
		if s.Name == "bash" {
			t.Fatal("bash offered in sandboxed mode")
		}
	}

	// TRUSTED: allowing `git status` grants git, not the rm a compound line adds.
	r := registry(t, f, permission.Trusted, nil)
	b := withBash(t, r, f, agentshell.CreateOptions{})
	al := &permission.Allowances{}
	p, err := r.Prepare("bash", json.RawMessage(`{"command":"git --version"}`), al)
	mustOK(t, err)
	if p.Decision.Verdict != permission.Ask || !programs(p.Decision.Request, "git") || p.Decision.Request.Cwd != f.ws {
		t.Fatalf("first git: %+v %+v", p.Decision, p.Decision.Request)
	}
	if ok, err := p.Confirm(permission.AllowExecCwd, al); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	res, err := p.Run(t.Context())
	mustOK(t, err)
	if !strings.Contains(res.Output, "[exit code") {
		t.Fatalf("git ran: %q", res.Output)
	}
	p, err = r.Prepare("bash", json.RawMessage(`{"command":"git --version && rm -rf src"}`), al)
	mustOK(t, err)
	if p.Decision.Verdict != permission.Ask || !programs(p.Decision.Request, "rm") {
		t.Fatalf("compound: %+v %+v", p.Decision, p.Decision.Request)
	}
	if ok, _ := p.Confirm(permission.Deny, al); ok {
		t.Fatal("deny allowed")
	}
	if _, err := p.Run(t.Context()); err == nil {
		t.Fatal("a denied command ran")
	}
	expectFile(t, filepath.Join(f.ws, "src/a.go"), "package a\n\nfunc A() int { return 1 }\n")

	// The exec allowance is per directory: after cd, git asks again.
	if _, err := call(t, r, al, "bash", `{"command":"cd docs"}`, permission.AllowOnce); err != nil {
		t.Fatal(err)
	}
	if b.Cwd() != filepath.Join(f.ws, "docs") {
		t.Fatalf("cwd %s", b.Cwd())
	}
	p, err = r.Prepare("bash", json.RawMessage(`{"command":"git --version"}`), al)
	mustOK(t, err)
	if p.Decision.Verdict != permission.Ask || p.Decision.Request.Cwd != filepath.Join(f.ws, "docs") {
		t.Fatalf("git in another cwd: %+v", p.Decision)
	}
}

// The shell's own policy (the operator's allow/deny lists) still applies under the tool.
func TestBashShellPolicy(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, nil)
	withBash(t, r, f, agentshell.CreateOptions{Deny: []string{"rm"}})
	res, err := call(t, r, nil, "bash", `{"command":"ls && rm -rf src"}`, "")
	mustOK(t, err)
	if !res.IsError || !strings.Contains(res.Output, "blocked by policy") {
		t.Fatalf("rm ran: %+v", res)
	}
	expectFile(t, filepath.Join(f.ws, "src/a.go"), "package a\n\nfunc A() int { return 1 }\n")
}

// The configured timeout ends a command (the shell interrupts it and says so); a call's
// timeout_secs replaces it up to the configured maximum, and a call asking for more runs with
// the maximum and is told so.
func TestBashCallTimeout(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, func(c *permission.Config) {
		c.Tools = map[string]permission.ToolSettings{"bash": {Timeout: time.Second}}
		c.MaxTimeout = time.Minute
	})
	withBash(t, r, f, agentshell.CreateOptions{})
	res, err := call(t, r, nil, "bash", `{"command":"sleep 30"}`, "")
	mustOK(t, err)
	if !strings.Contains(res.Output, "[timed out]") {
		t.Fatalf("a call under the 1 s setting was not interrupted: %q", res.Output)
	}
	for _, c := range []struct {
		secs int
		want time.Duration
		note bool
	}{{30, 30 * time.Second, false}, {60, time.Minute, false}, {9000, time.Minute, true}} {
		p, err := r.Prepare("bash", json.RawMessage(fmt.Sprintf(`{"command":"echo ok","timeout_secs":%d}`, c.secs)), nil)
		mustOK(t, err)
		if p.Timeout != c.want {
			t.Fatalf("timeout_secs %d: timeout %v, want %v", c.secs, p.Timeout, c.want)
		}
		res, err := p.Run(t.Context())
		mustOK(t, err)
		if !strings.Contains(res.Output, "ok\n[exit code 0]") {
			t.Fatalf("output %q", res.Output)
		}
		if got := strings.Contains(res.Output, "the maximum is 1m0s, so it ran with 1m0s"); got != c.note {
			t.Fatalf("timeout_secs %d: the result says it was clamped: %v (%q)", c.secs, got, res.Output)
		}
	}
}

// Bash's default timeout is minutes (a build, an install), not a file tool's seconds.
func TestBashDefaultTimeout(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, nil)
	withBash(t, r, f, agentshell.CreateOptions{})
	p, err := r.Prepare("bash", json.RawMessage(`{"command":"true"}`), nil)
	mustOK(t, err)
	if p.Timeout != tools.BashTimeout || tools.BashTimeout < 5*time.Minute {
		t.Fatalf("bash timeout %v", p.Timeout)
	}
	p, err = r.Prepare("read_file", json.RawMessage(`{"path":"src/a.go"}`), nil)
	mustOK(t, err)
	if p.Timeout != permission.DefaultTimeout {
		t.Fatalf("read_file timeout %v", p.Timeout)
	}
}

// At level trusted the bash tool's redirections are decided from the shell's current
// directory: after cd docs, ../src/x is in the workspace and ../../x is not; a denied one does
// not run.
func TestBashRedirections(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.Trusted, nil)
	b := withBash(t, r, f, agentshell.CreateOptions{})
	al := &permission.Allowances{}
	if _, err := call(t, r, al, "bash", `{"command":"cd docs && echo hi"}`, permission.AllowExecGlobal); err != nil {
		t.Fatal(err)
	}
	if b.Cwd() != filepath.Join(f.ws, "docs") {
		t.Fatalf("cwd %s", b.Cwd())
	}
	res, err := call(t, r, al, "bash", `{"command":"echo inside > ../src/x.txt"}`, "")
	mustOK(t, err)
	if !strings.Contains(res.Output, "[exit code 0]") {
		t.Fatalf("inside write: %q", res.Output)
	}
	expectFile(t, filepath.Join(f.ws, "src", "x.txt"), "inside\n")
	for _, cmd := range []string{"echo out > ../../outside-private/x.txt", "cat < ../../outside-private/s.txt", `x="$(<../../outside-private/s.txt)"`, "echo out > $HOME/x.txt"} {
		p, err := r.Prepare("bash", json.RawMessage(jsonArgs(t, map[string]any{"command": cmd})), al)
		mustOK(t, err)
		if p.Decision.Verdict != permission.Ask {
			t.Fatalf("%q: %+v", cmd, p.Decision)
		}
		if ok, _ := p.Confirm(permission.Deny, al); ok {
			t.Fatal("deny allowed")
		}
	}
	if _, err := os.Stat(filepath.Join(f.outside, "x.txt")); err == nil {
		t.Fatal("a denied redirection wrote outside")
	}
}
