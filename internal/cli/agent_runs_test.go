package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
	"time"

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

// TestAgentRunsTree: nexus agent runs shows the runs as a tree: each conversation that
// spawned, its runs indented under it in the order they started, a run's own subagents under
// the run, with status, label, duration (up to now while running) and task; --requester shows
// one conversation's subtree at every depth.
func TestAgentRunsTree(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	g, err := chatstore.OpenSubagents(filepath.Join(state, "subagents"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const t0 = 1_800_000_000_000
	for _, r := range []struct {
		id, requester, label, outcome string
		start, end                    int64
	}{
		{"r1", "agent:main:ai:boss", "kid", "ok", 0, 12_000},
		{"r2", "agent:main:subagent:r1", "grand", "", 1_000, 0},
		{"r3", "agent:main:ai:boss", "", "timeout", 2_000, 3_602_000},
		{"r4", "agent:other:main", "solo", "error", 3_000, 3_500},
	} {
		rec := chatstore.SubagentRunRecord{RunID: r.id, ChildSessionKey: "agent:main:subagent:" + r.id, RequesterSessionKey: r.requester,
			Task: "task of " + r.id, Label: r.label, Cleanup: "keep", CreatedAt: t0 + r.start, StartedAt: t0 + r.start}
		if r.end != 0 {
			rec.EndedAt = t0 + r.end
			rec.Outcome = &chatstore.SubagentOutcome{Status: chatstore.RunOutcome(r.outcome)}
		}
		if err := g.Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		var out, errOut testkit.Buffer
		env := cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" },
			Now: func() time.Time { return time.UnixMilli(t0 + 5_000) }}
		if code := cli.Main(ctx, append([]string{"--state-dir", state, "agent", "runs"}, args...), env); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		return out.String()
	}
	want := `RUN     LABEL  STATUS   DURATION  TASK
agent:main:ai:boss
  r1    kid    ok       12s       task of r1
    r2  grand  running  4s        task of r2
  r3    -      timeout  1h0m0s    task of r3
agent:other:main
  r4    solo   error    500ms     task of r4
`
	if got := run(); got != want {
		t.Fatalf("tree:\n%s\nwant:\n%s", got, want)
	}
	want = `RUN   LABEL  STATUS   DURATION  TASK
agent:main:subagent:r1
  r2  grand  running  4s        task of r2
`
	if got := run("--requester", "agent:main:subagent:r1"); got != want {
		t.Fatalf("--requester:\n%s\nwant:\n%s", got, want)
	}
	var doc struct {
		Runs []chatstore.SubagentRunRecord `json:"runs"`
		Tree []struct {
			Key      string `json:"requesterSessionKey"`
			Children []struct {
				RunID      string `json:"runId"`
				DurationMs int64  `json:"durationMs"`
				Children   []struct {
					RunID  string `json:"runId"`
					Status string `json:"status"`
				} `json:"children"`
			} `json:"children"`
		} `json:"tree"`
	}
	if err := json.Unmarshal([]byte(run("--format", "json", "--requester", "agent:main:ai:boss")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Runs) != 3 || len(doc.Tree) != 1 || len(doc.Tree[0].Children) != 2 || doc.Tree[0].Children[0].DurationMs != 12_000 ||
		len(doc.Tree[0].Children[0].Children) != 1 || doc.Tree[0].Children[0].Children[0].Status != "running" {
		t.Fatalf("json %+v", doc)
	}
}
