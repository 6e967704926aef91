package archtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// directRequires returns the modules go.mod requires directly (no "// indirect" comment).
func directRequires(gomod string) []string {
	var out []string
	block := false
	for line := range strings.Lines(gomod) {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && !strings.Contains(line, "// indirect") {
			out = append(out, f[0])
		}
	}
	return out
}

// section returns the text of the "## name" section of a markdown document.
func section(doc, name string) string {
	_, rest, ok := strings.Cut(doc, "\n## "+name+"\n")
	if !ok {
		return ""
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

func TestDirectRequires(t *testing.T) {
	gomod := "module m\n\ngo 1.26\n\nrequire a.org/x v1.0.0\n\nrequire (\n\tgithub.com/b/c v1.2.3\n\tgithub.com/d/e v0.1.0 // indirect\n)\n\nrequire (\n\tf.io/g v1.0.0 // indirect\n\th.io/i/v3 v3.0.0\n)\n"
	if got, want := directRequires(gomod), []string{"a.org/x", "github.com/b/c", "h.io/i/v3"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestDependenciesDocumented: docs/ARCHITECTURE.md, "Dependencies", names every direct
// dependency of go.mod (without "github.com/"), so a new one comes with its reason.
func TestDependenciesDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	deps := section(string(doc), "Dependencies")
	if deps == "" {
		t.Fatal(`docs/ARCHITECTURE.md has no "## Dependencies" section`)
	}
	reqs := directRequires(string(gomod))
	if len(reqs) == 0 {
		t.Fatal("go.mod: no direct requirement found")
	}
	for _, m := range reqs {
		if !strings.Contains(deps, "`"+strings.TrimPrefix(m, "github.com/")) {
			t.Errorf("docs/ARCHITECTURE.md, Dependencies: %s is not named (write `%s` and what it is for)", m, strings.TrimPrefix(m, "github.com/"))
		}
	}
}
