package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestKindsUseNoRegistry: a kind reaches the runtime through its Sink, a View or a Backend,
// never through the concrete *live.Registry, so it can run against a registry that is not in
// its process.
func TestKindsUseNoRegistry(t *testing.T) {
	root := filepath.Join("..", "..", "internal", "kinds")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		live := ""
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == "github.com/nexus-run/nexus/internal/live" {
				live = "live"
				if imp.Name != nil {
					live = imp.Name.Name
				}
			}
		}
		if live == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Registry" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == live {
					t.Errorf("%s: a kind names %s.Registry; use its Sink, live.View or live.Backend", fset.Position(sel.Pos()), live)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
