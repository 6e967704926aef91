package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/testkit"
)

// TestConsoleBrowser runs the web console's end-to-end scripts (testdata/console): a real
// `nexus serve` with its console, driven in a real headless Chromium by playwright-core
// (web/e2e/console.mjs): sign-in, a terminal typed into, resized, cut and resumed, a flood
// stopped with Ctrl-C, the sessions view, used and wrong codes, a page of another origin.
// Screenshots go to $NEXUS_ARTIFACTS when set (docs/console.md shows them), else to the
// script's work directory.
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the browser tests start Chromium")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash not found")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.SkipUnlessCI(t, "node not found: the console's browser tests run playwright-core on it")
	}
	chromium := os.Getenv("NEXUS_CHROMIUM")
	if chromium == "" {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			testkit.SkipUnlessCI(t, "chromium not found (Debian's chromium package; or set NEXUS_CHROMIUM)")
		}
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	web := filepath.Join(repo, "web")
	if _, err := os.Stat(filepath.Join(web, "node_modules", "playwright-core")); err != nil {
		testkit.SkipUnlessCI(t, "web/node_modules is not installed: run make web (npm ci in web/)")
	}
	if _, err := os.Stat(filepath.Join(repo, "internal", "console", "dist", "app.js")); err != nil {
		testkit.SkipUnlessCI(t, "the console's page is not built: run make web")
	}
	artifacts := os.Getenv("NEXUS_ARTIFACTS")
	// The chat view talks to an ai-chat session on a scripted OpenAI-compatible model (it
	// echoes each message; ai_script_test.go).
	scripted := scriptedModel(t)
	testscript.Run(t, scriptParams(filepath.Join("testdata", "console"), repo, bash, func(env *testscript.Env) error {
		env.Setenv("NODE", node)
		env.Setenv("CHROMIUM", chromium)
		env.Setenv("WEB", web)
		dir := artifacts
		if dir == "" {
			dir = filepath.Join(env.WorkDir, "artifacts")
		}
		env.Setenv("ARTIFACTS", dir)
		env.Setenv("FLOOD_SECONDS", "30") // yes for 30 s, then Ctrl-C: the page stays bounded
		// The shells the console opens read no rc file of the machine's user.
		home := filepath.Join(env.WorkDir, "home")
		env.Setenv("HOME", home)
		if err := os.MkdirAll(home, 0o700); err != nil {
			return err
		}
		cfg := "[backends.scripted]\nkind = \"openai-compatible\"\nbase_url = \"" + scripted + "/v1\"\nmodel = \"scripted\"\ncontext_window = 100000\n"
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
			return err
		}
		env.Setenv("PS1", "$ ")
		return os.MkdirAll(dir, 0o700)
	}))
}
