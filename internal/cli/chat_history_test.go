package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHistoryLargeStreamed runs history on a transcript several read-back
// batches long: the streamed output, --limit (which keeps messages across
// batches) and --count must agree with each other message for message.
func TestHistoryLargeStreamed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.jsonl")
	var b strings.Builder
	b.WriteString(`{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n")
	pad := strings.Repeat("p", 4000)
	const n = 5000 // about 20 MB: several 8 MiB batches
	parent := "null"
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%08x", i)
		fmt.Fprintf(&b, `{"type":"message","id":"%s","parentId":%s,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"m%d %s","timestamp":%d}}`+"\n", id, parent, i, pad, i)
		parent = `"` + id + `"`
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		env := Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
		if code := Main(context.Background(), append([]string{"--state-dir", filepath.Join(dir, "state")}, args...), env); code != 0 {
			t.Fatalf("nexus %v: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	lines := func(s string) []string {
		ls := strings.Split(strings.TrimSpace(s), "\n")
		return ls[1 : len(ls)-1] // between the header and the closing line
	}
	all := lines(run("chat", "history", "--file", path))
	if len(all) != n {
		t.Fatalf("%d messages, want %d", len(all), n)
	}
	for i, l := range all {
		if !strings.Contains(l, fmt.Sprintf(`"m%d `, i+1)) {
			t.Fatalf("message %d is %.40s", i+1, l)
		}
	}
	last := lines(run("chat", "history", "--file", path, "--limit", "3000"))
	if len(last) != 3000 {
		t.Fatalf("--limit 3000 gave %d", len(last))
	}
	for i, l := range last {
		if strings.TrimSuffix(l, ",") != strings.TrimSuffix(all[n-3000+i], ",") {
			t.Fatalf("--limit message %d differs", i)
		}
	}
	if got := strings.TrimSpace(run("chat", "history", "--file", path, "--count")); got != fmt.Sprint(n) {
		t.Fatalf("--count = %s", got)
	}
}
