package llmserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The server's setup is the repository's own: a plain clone finds every file it needs in
// tools/llm, with nothing beside the clone.
func TestDirIsTheRepositorys(t *testing.T) {
	t.Setenv("NEXUS_TEST_LLM_DIR", "")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(wd))) // internal/testkit/llmserver
	if got, want := Dir(), filepath.Join(root, "tools", "llm"); got != want {
		t.Fatalf("Dir() = %s, want %s", got, want)
	}
	for _, f := range []string{"setup.sh", "serve.sh", "lib.sh", "make-model.mjs", "gemini-shim.mjs", "package.json", "package-lock.json"} {
		if _, err := os.Stat(filepath.Join(Dir(), f)); err != nil {
			t.Errorf("the repository lacks tools/llm/%s: %v", f, err)
		}
	}
}

// Without a tool the setup needs, the skip says which Debian package to install.
func TestMissingNamesThePackage(t *testing.T) {
	for _, c := range []struct {
		name string
		have []string // the tools on PATH
		want string   // in the skip message; "" for none
	}{
		{"everything", []string{"bash", "node", "npm", "curl", "apt-get", "dpkg"}, ""},
		{"no node", []string{"bash", "npm", "curl", "apt-get", "dpkg"}, "node is not installed (Debian: apt-get install nodejs;"},
		{"no curl", []string{"bash", "node", "npm", "apt-get", "dpkg"}, "apt-get install curl;"},
		{"no dpkg", []string{"bash", "node", "npm", "curl", "apt-get"}, "llama-server is not on PATH and, without dpkg,"},
		// A llama-server on PATH (Debian testing's llama.cpp-tools) needs no unpacking.
		{"llama-server installed", []string{"bash", "node", "npm", "curl", "llama-server"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := t.TempDir()
			for _, tool := range c.have {
				target, err := exec.LookPath(tool)
				if err != nil {
					target = "/bin/true" // a stand-in: only its presence is looked at
				}
				if err := os.Symlink(target, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("NEXUS_TEST_LLM_DIR", "")
			t.Setenv("PATH", bin)
			got := Missing()
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("Missing() = %q, want %q", got, c.want)
			}
			if got != "" && !strings.Contains(got, "make test-deps") {
				t.Errorf("Missing() = %q names no make target", got)
			}
		})
	}
	t.Run("no scripts", func(t *testing.T) {
		t.Setenv("NEXUS_TEST_LLM_DIR", t.TempDir())
		if got := Missing(); !strings.Contains(got, "setup.sh is missing") {
			t.Fatalf("Missing() = %q", got)
		}
	})
}
