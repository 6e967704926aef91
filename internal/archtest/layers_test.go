package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/testkit"
)

// programsDir holds programs outside the layering (benchmarks): they may import any package, and
// no listed package may import them.
const programsDir = "bench/"

// documentedOrder returns the packages of the code block under "## Packages" in the
// architecture document, top first: the first word of every line that does not start with a
// space (the others continue a description).
func documentedOrder(doc []byte) ([]string, error) {
	sc := bufio.NewScanner(bytes.NewReader(doc))
	var (
		inSection, inBlock bool
		order              []string
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			if inSection && len(order) > 0 {
				return order, nil
			}
			inSection = line == "## Packages"
		case !inSection:
		case strings.HasPrefix(line, "```"):
			if inBlock {
				return order, nil
			}
			inBlock = true
		case inBlock && line != "" && line[0] != ' ':
			order = append(order, strings.Fields(line)[0])
		}
	}
	if len(order) == 0 {
		return nil, fmt.Errorf(`no package list: expected a code block under "## Packages"`)
	}
	return order, nil
}

// violations checks graph (package -> its imports within the module, paths relative to the
// module) against order (top first): every package of the module is listed (programs under
// programsDir excepted), every listed package exists, and each imports only packages listed
// below it.
func violations(order []string, graph map[string][]string) []string {
	var out []string
	rank := map[string]int{}
	for i, p := range order {
		if _, dup := rank[p]; dup {
			out = append(out, fmt.Sprintf("%s is listed twice", p))
		}
		rank[p] = i
	}
	for _, p := range order {
		if _, ok := graph[p]; !ok {
			out = append(out, fmt.Sprintf("%s is listed but is not a package of the module", p))
		}
	}
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		i, listed := rank[p]
		if !listed {
			if !strings.HasPrefix(p, programsDir) {
				out = append(out, fmt.Sprintf("%s is not listed: add it below every package that imports it and above every package it imports", p))
			}
			continue
		}
		for _, q := range graph[p] {
			j, ok := rank[q]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s imports %s, which is not listed", p, q))
			case j <= i:
				out = append(out, fmt.Sprintf("%s imports %s, which is listed above it", p, q))
			}
		}
	}
	return out
}

func TestViolations(t *testing.T) {
	order := []string{"cmd/x", "internal/a", "internal/b", "internal/c"}
	for _, tc := range []struct {
		name  string
		graph map[string][]string
		want  []string
	}{
		{"imports point down", map[string][]string{
			"cmd/x": {"internal/a", "internal/c"}, "internal/a": {"internal/b"}, "internal/b": nil, "internal/c": nil,
			"bench/p": {"internal/a"},
		}, nil},
		{"an import up the list", map[string][]string{
			"cmd/x": {"internal/a"}, "internal/a": nil, "internal/b": nil, "internal/c": {"internal/a"},
		}, []string{"internal/c imports internal/a, which is listed above it"}},
		{"a package not listed", map[string][]string{
			"cmd/x": nil, "internal/a": nil, "internal/b": {"internal/new"}, "internal/c": nil, "internal/new": nil,
		}, []string{
			"internal/b imports internal/new, which is not listed",
			"internal/new is not listed: add it below every package that imports it and above every package it imports",
		}},
		{"a listed package gone", map[string][]string{
			"cmd/x": nil, "internal/a": nil, "internal/c": nil,
		}, []string{"internal/b is listed but is not a package of the module"}},
		{"a program imported", map[string][]string{
			"cmd/x": {"bench/p"}, "internal/a": nil, "internal/b": nil, "internal/c": nil, "bench/p": nil,
		}, []string{"cmd/x imports bench/p, which is not listed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := violations(order, tc.graph); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDocumentedOrder(t *testing.T) {
	doc := "# x\n\n## Packages\nImports point down.\n\n```\ncmd/x    main\ninternal/a   does a,\n             and more\n\ninternal/b   b\n```\n\nA note.\n\n## Next\n```\nnot/this\n```\n"
	got, err := documentedOrder([]byte(doc))
	if err != nil || !slices.Equal(got, []string{"cmd/x", "internal/a", "internal/b"}) {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := documentedOrder([]byte("# x\n## Other\n```\na\n```\n")); err == nil {
		t.Fatal("a document without the section was accepted")
	}
}

// moduleGraph lists the module's packages with `go list` and returns each one's imports within
// the module, paths relative to the module root. Only the packages' own imports count: a test
// may import packages above its own (an external test package drives the real upper layers).
func moduleGraph(t *testing.T, root string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testkit.SkipUnlessCI(t, "the go command is not on PATH: the import graph comes from go list")
	}
	run := func(args ...string) []byte {
		cmd := exec.CommandContext(t.Context(), goBin, args...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	module := strings.TrimSpace(string(run("list", "-m")))
	out := run("list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		rel := func(p string) (string, bool) {
			r, ok := strings.CutPrefix(p, module+"/")
			return r, ok
		}
		p, ok := rel(f[0])
		if !ok {
			t.Fatalf("go list named %s, outside module %s", f[0], module)
		}
		graph[p] = []string{}
		for _, imp := range f[1:] {
			if q, ok := rel(imp); ok {
				graph[p] = append(graph[p], q)
			}
		}
	}
	return graph
}

// TestImportsPointDownTheList is the rule of docs/ARCHITECTURE.md, "Packages": each package
// imports only packages listed below it.
func TestImportsPointDownTheList(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	order, err := documentedOrder(doc)
	if err != nil {
		t.Fatalf("docs/ARCHITECTURE.md: %v", err)
	}
	graph := moduleGraph(t, root)
	for _, v := range violations(order, graph) {
		t.Errorf("docs/ARCHITECTURE.md, Packages: %s", v)
	}
}
