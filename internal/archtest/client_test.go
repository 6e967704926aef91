package archtest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/testkit"
)

// clientAllowed are the only modules outside the standard library that internal/client may
// link, besides what internal/abi links: the WebSocket library. A client of the gateway is
// what other programs embed; the wire types it needs are abi's, so it links no database
// (SQLite), no scheduler (cron), no file locks and none of the gateway's domain packages.
var clientAllowed = []string{"github.com/coder/websocket"}

// TestClientDependencies: go list -deps ./internal/client shows abi, the standard library and
// the WebSocket library, nothing else.
func TestClientDependencies(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		testkit.SkipUnlessCI(t, "the go command is not on PATH: the dependencies come from go list")
	}
	deps := func(pkg string) []string {
		cmd := exec.CommandContext(t.Context(), goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
		}
		return strings.Fields(string(out))
	}
	abiDeps := deps("./internal/abi")
	for _, d := range deps("./internal/client") {
		switch {
		case strings.HasSuffix(d, "/internal/client"), slices.Contains(abiDeps, d):
		case slices.ContainsFunc(clientAllowed, func(m string) bool { return d == m || strings.HasPrefix(d, m+"/") }):
		default:
			t.Errorf("internal/client links %s: a client may link internal/abi, the standard library and %v only (move wire types to abi)", d, clientAllowed)
		}
		for _, banned := range []string{"sqlite", "cron", "flock"} {
			if strings.Contains(d, banned) {
				t.Errorf("internal/client links %s (%s)", d, banned)
			}
		}
	}
}
