package aichat_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/provider"
)

// TestGatewayStateBlocked: even at level yolo the agent's tools refuse the gateway's own state
// directory: read_file of its token, and a bash command naming it in its text.
func TestGatewayStateBlocked(t *testing.T) {
	var e *env
	e = newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("done")
			return
		}
		token := filepath.Join(e.state, "gateway.token")
		switch req.lastUser() {
		case "read":
			w.call("call_r", "read_file", map[string]any{"path": token})
		case "bash":
			w.call("call_b", "bash", map[string]any{"command": "cat " + token})
		}
	})
	if err := os.WriteFile(filepath.Join(e.state, "gateway.token"), []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.gateway(t)
	key := "agent:main:test:blocked"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	for _, msg := range []string{"read", "bash"} {
		send(t, r, s.SessionID, msg)
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
		msgs := e.history(t, key)
		res := msgs[len(msgs)-2]
		if res.Role != provider.RoleToolResult || !res.IsError || !strings.Contains(res.Content[0].Text, "blocked") || strings.Contains(res.Content[0].Text, "s3cret") {
			t.Fatalf("%s: the tool's result %+v", msg, res)
		}
	}
}

// TestHardLinksSetting: at level sandboxed a hard link planted in the workspace does not read
// its target outside it, unless the agent's allow_hard_links says so.
func TestHardLinksSetting(t *testing.T) {
	for _, tc := range []struct {
		name  string
		toml  string
		reads bool
	}{
		{"default", "", false},
		{"allow_hard_links", "allow_hard_links = true\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(req chatRequest, w *sse) {
				if req.last().Role == "tool" {
					w.text("done")
					return
				}
				w.call("call_r", "read_file", map[string]any{"path": "linked.txt"})
			})
			outside := filepath.Join(t.TempDir(), "secret.txt")
			if err := os.WriteFile(outside, []byte("outside-secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(outside, filepath.Join(e.ws, "linked.txt")); err != nil {
				t.Skipf("hard links across these temp directories: %v", err)
			}
			if tc.toml != "" {
				writeAgent(t, e, "main", tc.toml)
			}
			r := e.gateway(t)
			key := "agent:main:test:links"
			s := e.open(t, r, key, "sandboxed")
			w := &watcher{r: r, id: s.SessionID}
			send(t, r, s.SessionID, "read")
			if end := w.turnEnded(t); end.End != abi.TurnCompleted {
				t.Fatalf("turn %+v: %s", end, describe(w.seen))
			}
			msgs := e.history(t, key)
			res := msgs[len(msgs)-2]
			if res.Role != provider.RoleToolResult {
				t.Fatalf("the tool's result %+v", res)
			}
			if got := strings.Contains(res.Content[0].Text, "outside-secret"); got != tc.reads || res.IsError == tc.reads {
				t.Fatalf("reads %v (want %v): %+v", got, tc.reads, res)
			}
		})
	}
}
