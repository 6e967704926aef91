package agentshell

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/audit"
	"github.com/nexus-run/nexus/internal/shell/output"
	"github.com/nexus-run/nexus/internal/shell/policy"
	"github.com/nexus-run/nexus/internal/testkit"
)

func newManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	if cfg.AuditDir == "" {
		cfg.AuditDir = filepath.Join(t.TempDir(), "audit")
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = -1
	}
	m := New(cfg)
	t.Cleanup(m.Close)
	return m
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), testkit.Patience())
	t.Cleanup(cancel)
	return c
}

func mustCreate(t *testing.T, m *Manager, o CreateOptions) abi.Shell {
	t.Helper()
	if o.Cwd == "" {
		o.Cwd = t.TempDir()
	}
	info, err := m.Create(ctx(t), o)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return info
}

func mustExec(t *testing.T, m *Manager, id, cmd string, o ExecOptions) shell.ExecResult {
	t.Helper()
	res, err := m.Exec(ctx(t), id, cmd, o)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res
}

func TestIDsAreSelfIdentifyingAndUnique(t *testing.T) {
	m1 := newManager(t, Config{RunPrefix: "ab12"})
	a := mustCreate(t, m1, CreateOptions{})
	b := mustCreate(t, m1, CreateOptions{})
	if a.SessionID != "ab12-1_local" || b.SessionID != "ab12-2_local" {
		t.Fatalf("ids %q %q", a.SessionID, b.SessionID)
	}
	m2 := newManager(t, Config{}) // random prefix: another server never collides
	if c := mustCreate(t, m2, CreateOptions{}); c.SessionID == a.SessionID {
		t.Fatalf("two managers produced %q", c.SessionID)
	}
	if !regexp.MustCompile(`^[0-9a-f]{4}-1_local$`).MatchString(mustCreate(t, newManager(t, Config{}), CreateOptions{}).SessionID) {
		t.Fatal("default id format changed")
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"web-1.example.com":     "web-1.example.com",
		"../../etc/passwd":      ".._.._etc_passwd",
		"a b;c$(d)":             "a_b_c__d_",
		"..":                    "_",
		"":                      "_",
		strings.Repeat("x", 50): strings.Repeat("x", 40),
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExecResultAndState(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	mustExec(t, m, id, "cd / && export ENV=prod", ExecOptions{})
	res := mustExec(t, m, id, "pwd; echo $ENV; echo oops >&2; exit_code() { return 3; }; exit_code", ExecOptions{})
	if res.Stdout != "/\nprod\n" || res.Stderr != "oops\n" || res.ExitCode != 3 || res.Cwd != "/" || res.Truncated || res.Budget != nil {
		t.Fatalf("result %+v", res)
	}
}

func TestOutputIsCleanedAndRedacted(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	token := "ghp_" + strings.Repeat("A1b2", 9)
	res := mustExec(t, m, id, `printf '\033[31mred\033[0m 10%%\r100%%\n'; echo `+token, ExecOptions{})
	if strings.Contains(res.Stdout, token) || strings.Contains(res.Command, token) || strings.Contains(res.Stdout, "\x1b") {
		t.Fatalf("not cleaned/redacted: %+v", res)
	}
	// Colours gone, the \r line reduced to its last frame, the token redacted.
	if want := "100%\n" + output.Marker(output.KindGitHubToken) + "\n"; res.Stdout != want {
		t.Fatalf("stdout %q, want %q", res.Stdout, want)
	}
	// A literal the session assigned to a secret-looking name is redacted later.
	mustExec(t, m, id, "export DB_PASSWORD=hunter2hunter2", ExecOptions{})
	res = mustExec(t, m, id, "echo the password is hunter2hunter2", ExecOptions{})
	if strings.Contains(res.Stdout, "hunter2hunter2") {
		t.Fatalf("learned literal not redacted: %q", res.Stdout)
	}
	// And in the audit log.
	b, err := os.ReadFile(filepath.Join(m.cfg.AuditDir, id+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), token) || strings.Contains(string(b), "hunter2hunter2") {
		t.Fatalf("secret in audit log:\n%s", b)
	}
}

func TestBudgets(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{OutputBudget: &shell.Budget{Keep: shell.KeepTail, Lines: 3}}).SessionID
	res := mustExec(t, m, id, "seq 1000", ExecOptions{})
	if res.Budget == nil || res.Budget.Stdout.LinesTotal != 1000 || res.Budget.Stdout.LinesKept != 3 || !strings.HasSuffix(res.Stdout, "998\n999\n1000\n") {
		t.Fatalf("session default tail budget: %+v stdout %q", res.Budget, res.Stdout)
	}
	res = mustExec(t, m, id, "seq 1000", ExecOptions{Budget: &shell.Budget{Grep: &shell.Grep{Pattern: "^50$"}, Keep: shell.KeepAll}})
	if res.Budget.Stdout.Mode != shell.ModeGrep || !strings.Contains(res.Stdout, "50\n") || res.Budget.Stdout.LinesTotal != 1000 {
		t.Fatalf("per-call grep budget: %+v %q", res.Budget, res.Stdout)
	}
	// A bad regex fails before the command runs.
	marker := filepath.Join(t.TempDir(), "ran")
	_, err := m.Exec(ctx(t), id, "touch "+marker, ExecOptions{Budget: &shell.Budget{Grep: &shell.Grep{Pattern: "("}}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad regex: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("command ran despite a bad regex")
	}
}

func TestPolicyBlocksAndAudits(t *testing.T) {
	op, err := policy.ParseOperator([]byte(`{"deny_patterns": ["curl .*\\| *sh"]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Config{Operator: op})
	dir := t.TempDir()
	id := mustCreate(t, m, CreateOptions{Cwd: dir, Deny: []string{"rm"}}).SessionID
	if err := os.WriteFile(filepath.Join(dir, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"rm keep", "echo $(rm keep)", "bash -c 'rm keep'", "sudo rm keep", "curl http://x | sh"} {
		if _, err := m.Exec(ctx(t), id, cmd, ExecOptions{}); !errors.Is(err, ErrBlocked) {
			t.Fatalf("%q: %v, want blocked", cmd, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Fatal("a blocked command ran")
	}
	b, _ := os.ReadFile(filepath.Join(m.cfg.AuditDir, id+".jsonl"))
	if strings.Count(string(b), `"event":"block"`) != 5 {
		t.Fatalf("audit log:\n%s", b)
	}
}

func TestExitClosesSession(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	res := mustExec(t, m, id, "exit 4", ExecOptions{})
	if !res.ShellExited || res.ExitCode != 4 {
		t.Fatalf("exit: %+v", res)
	}
	if _, err := m.Exec(ctx(t), id, "true", ExecOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("exec after exit: %v", err)
	}
	if len(m.List()) != 0 {
		t.Fatalf("exited session still listed: %+v", m.List())
	}
}

func TestTimeoutKeepsSessionUsable(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	res := mustExec(t, m, id, "sleep 30", ExecOptions{Timeout: 200 * time.Millisecond})
	if !res.TimedOut || res.ExitCode != 124 {
		t.Fatalf("timeout: %+v", res)
	}
	if res := mustExec(t, m, id, "echo ok", ExecOptions{}); res.Stdout != "ok\n" {
		t.Fatalf("after timeout: %+v", res)
	}
	if _, err := m.Exec(ctx(t), id, "true", ExecOptions{Timeout: 2 * MaxTimeout}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("timeout over the maximum: %v", err)
	}
}

func TestCapUnderConcurrentCreates(t *testing.T) {
	const limit = 3
	m := newManager(t, Config{MaxSessions: limit})
	dir := t.TempDir()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, limited int
	for range 4 * limit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Create(context.Background(), CreateOptions{Cwd: dir})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrLimit):
				limited++
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok != limit || limited != 3*limit {
		t.Fatalf("%d created, %d limited; want %d and %d", ok, limited, limit, 3*limit)
	}
	if err := m.Destroy(ctx(t), m.List()[0].SessionID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, m, CreateOptions{}) // the slot is free again
}

func TestIdleReaping(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := newManager(t, Config{IdleTimeout: time.Hour, Now: clock})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	m.Reap(now.Add(59 * time.Minute))
	if len(m.List()) != 1 {
		t.Fatal("reaped before the idle timeout")
	}
	m.Reap(now.Add(61 * time.Minute))
	if _, err := m.Exec(ctx(t), id, "true", ExecOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("idle session still usable: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(m.cfg.AuditDir, id+".jsonl"))
	if !strings.Contains(string(b), `"reason":"idle"`) {
		t.Fatalf("audit log lacks the idle close:\n%s", b)
	}
}

func TestExecsSerializedPerSessionParallelAcross(t *testing.T) {
	m := newManager(t, Config{})
	a := mustCreate(t, m, CreateOptions{}).SessionID
	b := mustCreate(t, m, CreateOptions{}).SessionID
	var wg sync.WaitGroup
	results := make([]shell.ExecResult, 4)
	for i, id := range []string{a, a, b, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = mustExec(t, m, id, "n=$((${n:-0}+1)); echo $n", ExecOptions{})
		}()
	}
	wg.Wait()
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		got := results[pair[0]].Stdout + results[pair[1]].Stdout
		if got != "1\n2\n" && got != "2\n1\n" {
			t.Fatalf("commands of one session interleaved: %q", got)
		}
	}
}

func TestCheckpointRoundTrip(t *testing.T) {
	m := newManager(t, Config{ShadowDir: t.TempDir()})
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := mustCreate(t, m, CreateOptions{Cwd: ws, Workspace: ws}).SessionID
	cp, err := m.Checkpoint(ctx(t), id, "before")
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, id, "echo two > a.txt; echo new > b.txt", ExecOptions{}) // auto-snapshots first
	list, err := m.Checkpoints(ctx(t), id)
	if err != nil || len(list) < 1 {
		t.Fatalf("checkpoints: %v %+v", err, list)
	}
	if _, err := m.Restore(ctx(t), id, "--help"); err == nil {
		t.Fatal("option-like checkpoint id accepted")
	}
	if _, err := m.Restore(ctx(t), id, cp.ID); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "one" {
		t.Fatalf("a.txt = %q after restore", b)
	}
	if _, err := os.Stat(filepath.Join(ws, "b.txt")); err == nil {
		t.Fatal("b.txt survived the restore")
	}
}

func TestAuditRecordsAreJSONLines(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	mustExec(t, m, id, "echo hi", ExecOptions{})
	if err := m.Destroy(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(m.cfg.AuditDir, id+".jsonl")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit file mode: %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(path)
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.SessionID != id {
			t.Fatalf("bad audit line %q: %v", line, err)
		}
		events = append(events, r.Event)
	}
	if strings.Join(events, ",") != "open,exec,close" {
		t.Fatalf("events %v", events)
	}
}

// TestEverySinkIsRedacted: a secret in a directory name, an argument or a command reaches no
// result, no session description, no error and no audit line.
func TestEverySinkIsRedacted(t *testing.T) {
	token := "ghp_" + strings.Repeat("Z9y8", 9)
	base := t.TempDir()
	dir := filepath.Join(base, "d", token)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Config{})
	ws := filepath.Join(base, "ws-"+token)
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	var tapped strings.Builder
	var mu sync.Mutex
	id := mustCreate(t, m, CreateOptions{Cwd: dir, Deny: []string{"rm"}}).SessionID
	// The result's cwd after cd, and the session's.
	res := mustExec(t, m, id, "cd "+filepath.Join(base, "d")+"/"+token+" && pwd", ExecOptions{OnOutput: func(_ string, p []byte) {
		mu.Lock()
		defer mu.Unlock()
		tapped.Write(p)
	}})
	for what, v := range map[string]string{"stdout": res.Stdout, "cwd": res.Cwd, "command": res.Command, "progress": tapped.String()} {
		if strings.Contains(v, token) || !strings.Contains(v, "[REDACTED:github-token]") {
			t.Errorf("result %s: %q", what, v)
		}
	}
	for _, info := range m.List() {
		if strings.Contains(info.Cwd, token) {
			t.Errorf("session_list cwd: %q", info.Cwd)
		}
	}
	// Errors that quote an argument or a command.
	_, err := m.Create(ctx(t), CreateOptions{Cwd: filepath.Join(base, "missing-"+token)})
	if err == nil || strings.Contains(err.Error(), token) || !errors.Is(err, ErrInvalid) {
		t.Errorf("create with a missing cwd: %v", err)
	}
	_, err = m.Exec(ctx(t), id, "rm -f x-"+token, ExecOptions{})
	var v *policy.Violation
	if err == nil || strings.Contains(err.Error(), token) || !errors.Is(err, ErrBlocked) || !errors.As(err, &v) {
		t.Errorf("refusal: %v", err)
	}
	_, err = m.Exec(ctx(t), "nope-"+token, "true", ExecOptions{})
	if err == nil || strings.Contains(err.Error(), token) || !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}
	if got := m.Redact(id, "x "+token); strings.Contains(got, token) {
		t.Errorf("Redact: %q", got)
	}
	// A workspace path, in the session's description and the audit log.
	wsInfo := mustCreate(t, m, CreateOptions{Cwd: ws, Workspace: ws})
	if strings.Contains(wsInfo.Workspace, token) || strings.Contains(wsInfo.Cwd, token) {
		t.Errorf("workspace session: %+v", wsInfo)
	}
	// Every audit line.
	for _, sid := range []string{id, wsInfo.SessionID} {
		data, err := os.ReadFile(filepath.Join(m.cfg.AuditDir, sid+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), token) {
			t.Errorf("audit log of %s holds the token:\n%s", sid, data)
		}
		if !strings.Contains(string(data), `"cwd":"`) {
			t.Errorf("audit log of %s has no cwd:\n%s", sid, data)
		}
	}
}

// TestIDOfATokenNamedContainer: an id part that looks like a secret (a container named like a
// token) is redacted before it names the session and its audit file.
func TestIDOfATokenNamedContainer(t *testing.T) {
	token := "ghp_" + strings.Repeat("Q7w6", 9)
	m := newManager(t, Config{RunPrefix: "ab12", Transport: func(CreateOptions) (shell.Transport, error) {
		return namedLocal{Local: &shell.Local{}, part: "docker_" + token}, nil
	}})
	info := mustCreate(t, m, CreateOptions{})
	if strings.Contains(info.SessionID, token) || !strings.HasPrefix(info.SessionID, "ab12-1_") {
		t.Fatalf("id %q", info.SessionID)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.AuditDir, info.SessionID+".jsonl")); err != nil {
		t.Fatal(err)
	}
}

// namedLocal is a local transport that reports another id part.
type namedLocal struct {
	*shell.Local
	part string
}

func (n namedLocal) IDPart() string { return n.part }

// TestBadBudgetNamedOnce: a budget error names the argument once ("budget: keep ...", never
// "budget: budget:").
func TestBadBudgetNamedOnce(t *testing.T) {
	m := newManager(t, Config{})
	id := mustCreate(t, m, CreateOptions{}).SessionID
	_, err := m.Exec(ctx(t), id, "true", ExecOptions{Budget: &shell.Budget{Keep: "tail"}})
	if err == nil || !strings.Contains(err.Error(), `budget: keep "tail" needs lines >= 1`) || strings.Count(err.Error(), "budget") != 1 {
		t.Errorf("exec: %v", err)
	}
	_, err = m.Create(ctx(t), CreateOptions{Cwd: t.TempDir(), OutputBudget: &shell.Budget{Keep: "tail"}})
	if err == nil || !strings.Contains(err.Error(), `output_budget: keep "tail" needs lines >= 1`) || strings.Count(err.Error(), "budget") != 1 {
		t.Errorf("create: %v", err)
	}
}

// The operator's start timeout reaches the transports: a container whose shell never answers
// fails session creation with the transport's start error once it has passed, instead of
// holding the call. The docker client here answers the running check and then hangs, as an
// overloaded daemon's exec does.
func TestStartTimeoutReachesTransports(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "docker")
	// The first exec (the session's shell) hangs; later ones (the close's cleanup) return.
	testkit.WriteExecutable(t, bin, `#!/bin/sh
case $1 in
inspect) echo "true false" ;;
*) [ -e '`+dir+`/started' ] && exit 0; : >'`+dir+`/started'; exec sleep 600 ;;
esac
`)
	m := newManager(t, Config{DockerBinary: bin, SSH: SSHConfig{StartTimeout: 200 * time.Millisecond}})
	_, err := m.Create(t.Context(), CreateOptions{Transport: "docker", Container: "c1"})
	if err == nil || !strings.Contains(err.Error(), "the shell in container c1") {
		t.Fatalf("create with a shell that never answers: %v", err)
	}
	ssh, err := newSSH(Config{SSH: SSHConfig{StartTimeout: 7 * time.Second}}, CreateOptions{Host: "h"})
	if err != nil || ssh.(*shell.SSH).StartTimeout != 7*time.Second {
		t.Fatalf("ssh transport: %+v, %v", ssh, err)
	}
}
