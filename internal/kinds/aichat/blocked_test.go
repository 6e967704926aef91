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
