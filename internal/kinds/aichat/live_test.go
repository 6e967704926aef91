package aichat_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// TestLiveProviders is a smoke test against the real APIs, for each preset backend whose key
// is in the environment (none is in CI: each then skips, saying which variable it wants).
// The model is asked to run a command and report its output: a tool call, a result, an answer.
func TestLiveProviders(t *testing.T) {
	presets := provider.Presets()
	for _, name := range []string{"claude", "codex", "gemini", "qwen"} {
		t.Run(name, func(t *testing.T) {
			b := presets[name]
			if os.Getenv(b.APIKeyEnv) == "" {
				t.Skipf("%s is not set: no live %s test", b.APIKeyEnv, name)
			}
			state, ws := t.TempDir(), t.TempDir()
			shells := agentshell.New(agentshell.Config{AuditDir: filepath.Join(state, "audit"), IdleTimeout: -1})
			t.Cleanup(shells.Close)
			k := &aichat.Kind{
				Chats:    conversation.New(conversation.Options{Dir: conversation.SessionsDir(state)}),
				StateDir: state,
				Config:   func() (*provider.Config, error) { return provider.ParseConfig(nil) },
				Shells:   shells,
			}
			r, err := live.New(context.Background(), live.Config{IdleTimeout: -1}, k)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
			opts, _ := json.Marshal(abi.AIChatOptions{Backend: name, Level: "yolo", Workspace: ws})
			s, err := r.Create(t.Context(), abi.CreateRequest{Type: abi.TypeAIChat, Options: opts})
			if err != nil {
				t.Fatal(err)
			}
			w := &watcher{r: r, id: s.SessionID}
			send(t, r, s.SessionID, "Run the shell command `echo nexus-live-$((6*7))` with your bash tool and tell me exactly what it printed.")
			end := w.turnEnded(t)
			var text strings.Builder
			ran := false
			for _, ev := range w.seen {
				switch p := ev.Payload.(type) {
				case abi.AIToken:
					text.WriteString(p.Content)
				case abi.AITool:
					ran = ran || (p.Phase == abi.PhaseCompleted && strings.Contains(p.Output, "nexus-live-42"))
				}
			}
			if end.End != abi.TurnCompleted || !ran || !strings.Contains(text.String(), "nexus-live-42") {
				t.Fatalf("turn %+v, tool ran %v, answer %q: %s", end, ran, text.String(), describe(w.seen))
			}
		})
	}
}
