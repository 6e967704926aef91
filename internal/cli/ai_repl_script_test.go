package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/testkit"
)

// TestAIREPLScript runs testdata/ai-repl: `nexus ai chat` through the real binary against the
// scripted model only (no real model server needed), for what a REPL's process does with its
// session when it ends (end of input, /exit, signals, --keep, --session-id).
func TestAIREPLScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash not found; the scripts run the bash tool")
	}
	scripted := scriptedModel(t)
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, scriptParams(filepath.Join("testdata", "ai-repl"), repo, bash, func(env *testscript.Env) error {
		home := filepath.Join(env.WorkDir, "home")
		if err := os.MkdirAll(home, 0o700); err != nil {
			return err
		}
		cfg := fmt.Sprintf("[backends.scripted]\nkind = \"openai-compatible\"\nbase_url = \"%s/v1\"\nmodel = \"scripted\"\ncontext_window = 100000\n", scripted)
		return os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600)
	}))
}
