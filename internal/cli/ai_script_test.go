package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// llm is the package's real model server (llama.cpp's llama-server with the tiny
// deterministic model); its watchdog stops it when the test binary exits.
var llm llmserver.Once

// TestAIScript runs testdata/ai: ai chats through the real binary against the real model
// server. $NEXUS_HOME/config.toml names it as backends local (its OpenAI route) and
// local-anthropic (its Anthropic route); $PI_CODING_AGENT_DIR is a scratch directory for the
// pi coding agent that reads the transcripts back.
func TestAIScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash not found; the ai scripts run the bash tool")
	}
	base := llm.URL(t)
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, scriptParams(filepath.Join("testdata", "ai"), repo, bash, func(env *testscript.Env) error {
		home := filepath.Join(env.WorkDir, "home")
		if err := os.MkdirAll(home, 0o700); err != nil {
			return err
		}
		cfg := fmt.Sprintf(`[backends.local]
kind = "openai-compatible"
base_url = "%[1]s/v1"
model = "probe"
context_window = 4096
max_tokens = 256

[backends.local-anthropic]
kind = "anthropic"
base_url = "%[1]s"
model = "probe"
context_window = 4096
max_tokens = 256
`, base)
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
			return err
		}
		env.Setenv("PI_CODING_AGENT_DIR", filepath.Join(env.WorkDir, "pi"))
		return nil
	}))
}
