package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/policy"
	"github.com/nexus-run/nexus/internal/testkit"
)

// connect runs a server over in-memory transports and returns a connected client session.
func connect(t *testing.T, cfg Config) (*sdk.ClientSession, *Server) {
	t.Helper()
	s := New(cfg)
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, st) }()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, ct, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(testkit.Patience()):
			t.Error("Run did not return")
		}
	})
	return cs, s
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (*sdk.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

func mustFail(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, re string) {
	t.Helper()
	res, txt := call(t, cs, name, args)
	if !res.IsError {
		t.Fatalf("%s %v: want a tool error, got %s", name, args, txt)
	}
	if !regexp.MustCompile(re).MatchString(txt) {
		t.Fatalf("%s %v: error %q does not match %q", name, args, txt, re)
	}
}

func createLocal(t *testing.T, cs *sdk.ClientSession, extra map[string]any) string {
	t.Helper()
	args := map[string]any{"transport": "local"}
	for k, v := range extra {
		args[k] = v
	}
	res, txt := call(t, cs, "session_create", args)
	if res.IsError {
		t.Fatalf("session_create: %s", txt)
	}
	var info abi.Shell
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &info); err != nil || info.SessionID == "" {
		t.Fatalf("session_create result %s: %v", b, err)
	}
	return info.SessionID
}

func TestSchemas(t *testing.T) {
	for name, s := range map[string]*jsonschema.Schema{
		"create": createSchema(), "exec": execSchema(), "checkpoint": checkpointSchema(), "restore": restoreSchema(),
		"id": sessionIDSchema(), "empty": emptySchema(),
	} {
		if s.Type != "object" {
			t.Errorf("%s: type %q", name, s.Type)
		}
		if _, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	c := createSchema()
	if fmt.Sprint(c.Properties["transport"].Enum) != "[local ssh docker]" {
		t.Errorf("transport enum %v", c.Properties["transport"].Enum)
	}
	if fmt.Sprint(c.Required) != "[transport]" {
		t.Errorf("create required %v", c.Required)
	}
	e := execSchema()
	if fmt.Sprint(e.Properties["budget"].Properties["keep"].Enum) != "[all head tail head_tail]" {
		t.Errorf("keep enum %v", e.Properties["budget"].Properties["keep"].Enum)
	}
	if string(e.Properties["timeout_secs"].Default) != "120" || *e.Properties["timeout_secs"].Maximum != 3600 {
		t.Errorf("timeout_secs %+v", e.Properties["timeout_secs"])
	}
	// Each call builds its own schema: adjusting one never touches another server's.
	e.Properties["command"].Description = "changed"
	if execSchema().Properties["command"].Description == "changed" {
		t.Error("schemas are shared")
	}
}

func TestToolError(t *testing.T) {
	v := &policy.Violation{Rule: "deny: rm", Program: "rm", Command: "rm -rf /"}
	for _, tc := range []struct {
		tool, id string
		err      error
		want     string
	}{
		{"session_exec", "x", fmt.Errorf("%w: %w", agentshell.ErrBlocked, v), `^blocked by policy rule "deny: rm": the command would run rm; .*; the command did not run$`},
		{"session_exec", "x", fmt.Errorf("%w %q", agentshell.ErrNotFound, "x"), `^no session "x": .*call session_list .* session_create`},
		{"session_create", "", fmt.Errorf("%w: 64 sessions open; destroy one with session_destroy", agentshell.ErrLimit), `session_list and session_destroy a session you no longer need`},
		{"session_exec", "x", fmt.Errorf("%w: budget: bad", agentshell.ErrInvalid), `budget: bad; fix the argument and call session_exec again`},
		{"session_exec", "x", agentshell.ErrClosed, `session "x" is closed.*session_create`},
		{"session_create", "", agentshell.ErrClosed, `shutting down`},
		{"session_restore", "x", fmt.Errorf("%w: abc1234", shell.ErrNoCheckpoint), `call session_checkpoints with session_id "x"`},
		{"session_create", "", fmt.Errorf("open ssh session: %w: x", shell.ErrHostKeyUnknown), `operator's configuration.*ask the user`},
		{"session_exec", "x", errors.New("run: broken pipe"), `could not be run: run: broken pipe; check the session with session_list`},
	} {
		got := toolError(tc.tool, tc.id, tc.err).Error()
		if !regexp.MustCompile(tc.want).MatchString(got) {
			t.Errorf("toolError(%s, %v) = %q, want match %q", tc.tool, tc.err, got, tc.want)
		}
	}
	// A refusal quoting a secret is redacted.
	secret := "ghp_" + strings.Repeat("x1Y", 12)
	got := toolError("session_exec", "x", &policy.Violation{Rule: policy.RuleDynamic, Program: "$(" + secret + ")", Detail: "d"}).Error()
	if strings.Contains(got, secret) {
		t.Errorf("secret in %q", got)
	}
}

// TestProgress runs the progress sender on a fake clock: a notification every interval,
// increasing, with the output counts, and none once stop returns.
func TestProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &progress{start: time.Now()}
		var mu sync.Mutex
		var got []*sdk.ProgressNotificationParams
		stop := p.run(t.Context(), 5*time.Millisecond, func(_ context.Context, n *sdk.ProgressNotificationParams) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, n)
			return nil
		})
		p.onOutput("stdout", []byte("hello"))
		p.onOutput("stderr", []byte("oops\n"))
		p.onOutput("stdout", []byte(" world"))
		time.Sleep(16 * time.Millisecond) // fake time: ticks at 5, 10 and 15 ms
		synctest.Wait()
		stop()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 3 {
			t.Fatalf("%d notifications in 16 ms at one per 5 ms, want 3", len(got))
		}
		for i, n := range got {
			if want := float64(5*(i+1)) / 1000; n.Progress != want {
				t.Errorf("notification %d: progress %v, want %v (elapsed seconds)", i, n.Progress, want)
			}
		}
		if last := got[2]; !strings.Contains(last.Message, "stdout 11 bytes, stderr 5 bytes") {
			t.Errorf("message %q", last.Message)
		}
		time.Sleep(time.Second) // fake time
		synctest.Wait()
		if len(got) != 3 {
			t.Errorf("notifications after stop: %d", len(got))
		}
	})
}

// TestProgressStopsOnSendError: after a failed send (the client is gone), no more are tried.
func TestProgressStopsOnSendError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &progress{start: time.Now()}
		var calls atomic.Int32
		stop := p.run(t.Context(), time.Millisecond, func(context.Context, *sdk.ProgressNotificationParams) error {
			calls.Add(1)
			return errors.New("client gone")
		})
		time.Sleep(30 * time.Millisecond) // fake time: 30 intervals
		synctest.Wait()
		stop()
		if n := calls.Load(); n != 1 {
			t.Errorf("%d sends after an error, want 1", n)
		}
	})
}

func TestToolsInMemory(t *testing.T) {
	audit := t.TempDir()
	cs, _ := connect(t, Config{Session: agentshell.Config{MaxSessions: 1, AuditDir: audit, IdleTimeout: -1}, ProgressInterval: 10 * time.Millisecond})

	mustFail(t, cs, "session_create", map[string]any{"transport": "telnet"}, `transport`)
	mustFail(t, cs, "session_create", map[string]any{"transport": "local", "host": "example.com"}, `for ssh and docker sessions`)
	mustFail(t, cs, "session_create", map[string]any{"transport": "ssh", "host": "h", "key": "../id_rsa"}, `is a path`)
	mustFail(t, cs, "session_create", map[string]any{"transport": "local", "output_budget": map[string]any{"keep": "head"}}, `needs lines >= 1`)
	mustFail(t, cs, "session_create", map[string]any{"transport": "local", "deny": []string{"/bin/rm"}}, `base name`)
	mustFail(t, cs, "session_create", map[string]any{"transport": "local", "cwd": "/nonexistent/dir"}, `not a directory.*fix the argument`)

	id := createLocal(t, cs, map[string]any{"output_budget": map[string]any{"keep": "head", "lines": 1}})
	mustFail(t, cs, "session_create", map[string]any{"transport": "local"}, `session limit reached.*session_destroy`)

	// The session's default budget applies; a call's budget overrides it.
	res, txt := call(t, cs, "session_exec", map[string]any{"session_id": id, "command": "printf 'a\\nb\\nc\\n'"})
	if res.IsError || !strings.Contains(txt, "--- stdout ---\na\n") || strings.Contains(txt, "\nc\n") || !strings.Contains(txt, "stdout 1 of 3 lines kept (head)") {
		t.Fatalf("default budget: %s", txt)
	}
	res, txt = call(t, cs, "session_exec", map[string]any{"session_id": id, "command": "printf 'a\\nb\\nc\\n'", "budget": map[string]any{"keep": "all"}})
	if res.IsError || !strings.Contains(txt, "a\nb\nc\n") {
		t.Fatalf("override: %s", txt)
	}
	// A grep budget.
	res, _ = call(t, cs, "session_exec", map[string]any{"session_id": id, "command": "seq 20", "budget": map[string]any{"keep": "all", "grep": map[string]any{"pattern": "^1[57]$"}}})
	var r shell.ExecResult
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &r); err != nil || res.IsError || r.Stdout != "15\n17\n" || r.Budget.Stdout.LinesTotal != 20 {
		t.Fatalf("grep: %s", b)
	}

	mustFail(t, cs, "session_exec", map[string]any{"session_id": id, "command": "  "}, `command is empty`)
	mustFail(t, cs, "session_exec", map[string]any{"session_id": id, "command": "true", "timeout_secs": 0}, `timeout_secs`)
	mustFail(t, cs, "session_exec", map[string]any{"session_id": id, "command": "true", "timeout_secs": 4000}, `timeout_secs`)
	mustFail(t, cs, "session_exec", map[string]any{"session_id": "nope", "command": "true"}, `no session "nope"`)
	mustFail(t, cs, "session_exec", map[string]any{"session_id": id, "command": "true", "extra": 1}, `extra`)
	mustFail(t, cs, "session_checkpoint", map[string]any{"session_id": id}, `no workspace.*workspace`)
	mustFail(t, cs, "session_restore", map[string]any{"session_id": id, "checkpoint_id": "HEAD~1"}, `checkpoint_id`)

	// No progress token, no notifications; the call still works.
	res, txt = call(t, cs, "session_exec", map[string]any{"session_id": id, "command": "sleep 0.05; echo hi"})
	if res.IsError || !strings.Contains(txt, "hi") {
		t.Fatalf("sleep: %s", txt)
	}

	res, txt = call(t, cs, "session_destroy", map[string]any{"session_id": id})
	if res.IsError || !strings.Contains(txt, `"destroyed":true`) {
		t.Fatalf("destroy: %s", txt)
	}
	res, txt = call(t, cs, "session_list", map[string]any{})
	if res.IsError || !strings.Contains(txt, `"sessions":[]`) {
		t.Fatalf("list: %s", txt)
	}
	data, err := os.ReadFile(filepath.Join(audit, id+".jsonl"))
	if err != nil || !strings.Contains(string(data), `"event":"close","reason":"destroyed"`) {
		t.Fatalf("audit: %s %v", data, err)
	}
}

func TestRunClosesSessions(t *testing.T) {
	audit := t.TempDir()
	s := New(Config{Session: agentshell.Config{AuditDir: audit}})
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := createLocal(t, cs, nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := len(s.Manager().List()); n != 0 {
		t.Fatalf("%d sessions left", n)
	}
	data, err := os.ReadFile(filepath.Join(audit, id+".jsonl"))
	if err != nil || !strings.Contains(string(data), `"reason":"shutdown"`) {
		t.Fatalf("audit: %s %v", data, err)
	}
	_ = cs.Close()
}

func TestFormatExecResult(t *testing.T) {
	got := FormatExecResult(shell.ExecResult{Stdout: "a\nb", Stderr: "e\n", ExitCode: 124, DurationMS: 1000, Cwd: "/w", TimedOut: true, Truncated: true,
		Budget: &shell.BudgetReport{Stdout: shell.StreamReport{Mode: "tail", LinesTotal: 9, LinesKept: 2}, Stderr: shell.StreamReport{Mode: "tail", LinesTotal: 1, LinesKept: 1}}})
	want := "exit_code: 124   duration: 1000 ms   cwd: /w\n" +
		"timed out: the command was interrupted (exit_code 124); the session is still usable\n" +
		"--- stdout ---\na\nb\n[no newline at end]\n" +
		"--- stderr ---\ne\n" +
		"budget: stdout 2 of 9 lines kept (tail); stderr 1 of 1 lines kept (tail)\n" +
		"truncated: part of the output was dropped; use a budget (grep, keep head/tail, max_chars) to see other parts\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	got = FormatExecResult(shell.ExecResult{ExitCode: 0, Cwd: "/", ShellExited: true})
	if !strings.Contains(got, "(no output)") || !strings.Contains(got, "the shell exited") {
		t.Errorf("got:\n%s", got)
	}
}

// TestToolErrorsAreRedacted: a tool error never shows a secret the call carried, whether the
// server, the session manager or the SDK's argument check wrote it, nor one the session
// learned; the log messages sent to the client neither.
func TestToolErrorsAreRedacted(t *testing.T) {
	token := "ghp_" + strings.Repeat("K3j4", 9)
	cs, _ := connect(t, Config{Session: agentshell.Config{AuditDir: t.TempDir(), IdleTimeout: -1}})
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"session_exec", map[string]any{"session_id": "nope-" + token, "command": "true"}},
		{"session_create", map[string]any{"transport": "ssh", "host": "h", "key": "../" + token}},
		{"session_create", map[string]any{"transport": "local", "cwd": "/nonexistent/" + token}},
		{"session_create", map[string]any{"transport": token}},
		{"session_exec", map[string]any{"session_id": "x", "command": "true", "budget": map[string]any{"keep": token}}},
		{"session_restore", map[string]any{"session_id": "x", "checkpoint_id": token}},
	} {
		res, txt := call(t, cs, tc.tool, tc.args)
		if !res.IsError || strings.Contains(txt, token) || !strings.Contains(txt, "[REDACTED:github-token]") {
			t.Errorf("%s %v: %q", tc.tool, tc.args, txt)
		}
	}
	// A secret the session learned, quoted by a refusal.
	id := createLocal(t, cs, map[string]any{"deny": []string{"rm"}})
	res, _ := call(t, cs, "session_exec", map[string]any{"session_id": id, "command": "export DB_PASSWORD=s3cr3t-pw-77"})
	if res.IsError {
		t.Fatal("export failed")
	}
	res, txt := call(t, cs, "session_exec", map[string]any{"session_id": id, "command": "rm s3cr3t-pw-77"})
	if !res.IsError || strings.Contains(txt, "s3cr3t-pw-77") {
		t.Errorf("refusal quoting a learned secret: %q", txt)
	}
}
