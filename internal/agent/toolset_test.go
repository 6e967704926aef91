package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/provider"
)

func toolset(t testing.TB, level permission.Level, ws string) *agent.Toolset {
	t.Helper()
	perm, err := permission.New(permission.Config{Level: level, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = perm.Close() })
	r := tools.NewRegistry(perm)
	for _, tl := range tools.Builtins(perm) {
		if err := r.Add(tl); err != nil {
			t.Fatal(err)
		}
	}
	return &agent.Toolset{Registry: r, Allowances: &permission.Allowances{}}
}

// A turn through the real tools: the model writes a file outside the workspace, which TRUSTED
// asks about; the answer decides, and the model reads the result either way.
func TestToolsetConfirmation(t *testing.T) {
	for _, tc := range []struct {
		answer  permission.Answer
		written bool
	}{{permission.AllowOnce, true}, {permission.Deny, false}} {
		t.Run(string(tc.answer), func(t *testing.T) {
			ws, outside := t.TempDir(), t.TempDir()
			target := filepath.Join(outside, "note.txt")
			args, _ := json.Marshal(map[string]string{"path": target, "content": "hello"})
			p := &scripted{t: t, replies: []provider.Message{
				reply(call("c1", "write_file", string(args))),
				reply(provider.Text("done")),
			}}
			ts := toolset(t, permission.Trusted, ws)
			var asked []*permission.Request
			ts.Confirm = func(_ context.Context, c provider.ToolCall, req *permission.Request) (permission.Answer, error) {
				if c.ID != "c1" {
					t.Errorf("asked about %s", c.ID)
				}
				asked = append(asked, req)
				return tc.answer, nil
			}
			var r recorder
			res, err := agent.Run(t.Context(), p, ts, request("write it"), r.opts())
			if err != nil || res.End != agent.EndCompleted || len(asked) != 1 || asked[0].Tool != "write_file" {
				t.Fatalf("%+v %v asked %v", res, err, asked)
			}
			_, statErr := os.Stat(target)
			if written := statErr == nil; written != tc.written {
				t.Fatalf("written %v, want %v", written, tc.written)
			}
			if got := r.messages[1]; got.IsError == tc.written {
				t.Fatalf("result %+v", got)
			}
			if len(p.requests[0].Tools) == 0 || !strings.Contains(string(p.requests[0].Tools[0].Parameters), "properties") {
				t.Fatalf("tools offered: %+v", p.requests[0].Tools)
			}
		})
	}
}

// SANDBOXED refuses a path outside the workspace without asking, and the model is told so
// without the resolved target being revealed (its own argument may be quoted back).
func TestToolsetSandbox(t *testing.T) {
	ws := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(ws, "link.txt")); err != nil {
		t.Fatal(err)
	}
	p := &scripted{t: t, replies: []provider.Message{
		reply(call("c1", "read_file", `{"path":"../../../../../../etc/passwd"}`), call("c2", "read_file", `{"path":"link.txt"}`)),
		reply(provider.Text("I cannot")),
	}}
	ts := toolset(t, permission.Sandboxed, ws)
	ts.Confirm = func(context.Context, provider.ToolCall, *permission.Request) (permission.Answer, error) {
		t.Error("a sandbox never asks")
		return permission.Deny, nil
	}
	var r recorder
	res, err := agent.Run(t.Context(), p, ts, request("read"), r.opts())
	if err != nil || res.End != agent.EndCompleted {
		t.Fatalf("%+v %v", res, err)
	}
	for _, m := range r.messages[1:3] {
		text := m.Content[0].Text
		if !m.IsError || strings.Contains(text, "s3cret") || strings.Contains(text, secret) {
			t.Fatalf("result %q (error %v)", text, m.IsError)
		}
	}
}
