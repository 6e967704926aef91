package cli_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/cli"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestAgentRunsFollow: nexus agent runs --follow prints the runs there are, then each run
// again as it starts and as it ends (one JSON object per line), until interrupted.
func TestAgentRunsFollow(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	g, err := chatstore.OpenSubagents(filepath.Join(state, "subagents"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(id string) {
		t.Helper()
		if err := g.Put(ctx, chatstore.SubagentRunRecord{RunID: id, ChildSessionKey: "agent:main:subagent:" + id, RequesterSessionKey: "agent:main:main",
			Task: "task " + id, Cleanup: "keep", CreatedAt: 1, StartedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	put("run-old")
	var out testkit.Buffer
	fctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(fctx, []string{"--state-dir", state, "agent", "runs", "--follow", "--format", "json"}, cli.Env{Stdout: &out, Stderr: io.Discard, Getenv: func(string) string { return "" }})
	}()
	out.WaitFor(t, `"runId":"run-old"`)
	put("run-new")
	out.WaitFor(t, `"runId":"run-new","childSessionKey"`)
	if _, err := g.Patch(ctx, "run-new", map[string]any{"endedAt": 2, "outcome": chatstore.SubagentOutcome{Status: chatstore.OutcomeOK}}); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, `"outcome":{"status":"ok"}`)
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
}
