package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// llm is the package's one real model server, stopped by TestMain.
var llm llmserver.Once

func TestMain(m *testing.M) {
	code := m.Run()
	llm.Stop()
	os.Exit(code)
}

func llamaServer(t *testing.T) string {
	t.Helper()
	return llm.URL(t)
}

// TestRealModelTurn is a whole turn against the real llama-server, over both of its routes:
// offered the bash tool, the model calls it; the command runs in a real agent shell; the
// result goes back; the model answers in text, streamed as tokens.
func TestRealModelTurn(t *testing.T) {
	base := llamaServer(t)
	zero := 0.0
	for _, b := range []provider.Backend{
		{Name: "local", Kind: provider.KindOpenAICompatible, BaseURL: base + "/v1", Model: "probe", MaxTokens: 256},
		{Name: "local-anthropic", Kind: provider.KindAnthropic, BaseURL: base, Model: "probe", MaxTokens: 256},
	} {
		t.Run(b.Kind, func(t *testing.T) {
			p, err := provider.Open(b, provider.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ws := t.TempDir()
			perm, err := permission.New(permission.Config{Level: permission.YOLO, Workspace: ws})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = perm.Close() })
			reg := tools.NewRegistry(perm)
			mgr := agentshell.New(agentshell.Config{AuditDir: filepath.Join(t.TempDir(), "audit"), IdleTimeout: -1})
			t.Cleanup(mgr.Close)
			bash := tools.NewBash(mgr, ws, agentshell.CreateOptions{})
			t.Cleanup(func() { _ = bash.Close(t.Context()) })
			if err := reg.Add(bash); err != nil {
				t.Fatal(err)
			}
			var r recorder
			res, err := agent.Run(t.Context(), p, &agent.Toolset{Registry: reg, Allowances: &permission.Allowances{}},
				// At temperature 0 the tiny model is deterministic (its README); the server's
				// default samples, and then it may answer without calling the tool.
				provider.Request{Messages: []provider.Message{provider.UserText("run something", 1)}, Temperature: &zero}, r.opts())
			if err != nil || res.End != agent.EndCompleted || res.Iterations != 2 {
				t.Fatalf("%+v %v", res, err)
			}
			if got := roles(r.messages); !strings.HasPrefix(got, "assistant toolResult:") || !strings.HasSuffix(got, " assistant") {
				t.Fatalf("messages %s", got)
			}
			if r.messages[1].ToolName != "bash" || len(r.messages[2].Content) == 0 || res.Usage.Output == 0 {
				t.Fatalf("result %+v, answer %+v, usage %+v", r.messages[1], r.messages[2], res.Usage)
			}
			var tokens strings.Builder
			for _, e := range r.events {
				if e.Type == agent.EventToken {
					tokens.WriteString(e.Content)
				}
			}
			if tokens.Len() == 0 || tokens.String() != r.messages[2].Content[0].Text {
				t.Fatalf("streamed %q, answer %+v", tokens.String(), r.messages[2].Content)
			}
		})
	}
}
