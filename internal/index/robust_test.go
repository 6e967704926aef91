package index_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/index"
)

// bigResult is a Claude Code tool result line of about n bytes (the index keeps an excerpt of
// it, so a file of them is many bytes to read and few to write).
func bigResult(sid, uuid, id string, n int) string {
	return ccResult(sid, uuid, "2026-01-02T03:04:05Z", id, strings.Repeat("output line\n", n/12))
}

// TestSyncBatches: a sync that crosses the writer's batch bounds (files and bytes) commits each
// batch and goes on: every file is indexed, and the next sync finds them unchanged.
func TestSyncBatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files int
		bytes int // bytes of tool output per file
	}{
		{"exactly a batch of files", index.BatchFiles, 0},
		{"two batches of files and some", 2*index.BatchFiles + 3, 0},
		{"one file just over the byte bound", 1, index.BatchBytes + 1<<10},
		{"three files over the byte bound together", 3, index.BatchBytes/2 + 1<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for i := range tc.files {
				sid := fmt.Sprintf("s%04d", i)
				ls := []string{ccUser(sid, "u", "2026-01-02T03:04:05Z", fmt.Sprintf("walrus%04d question", i)),
					ccToolUse(sid, "a", "m", "2026-01-02T03:04:06Z", "toolu_1", "Bash", `{"command":"ls"}`, 3)}
				for k := 0; k*(1<<20) < tc.bytes; k++ {
					ls = append(ls, bigResult(sid, fmt.Sprintf("r%d", k), "toolu_1", min(1<<20, tc.bytes-k*(1<<20))))
				}
				ls = append(ls, ccText(sid, "b", "m2", "2026-01-02T03:04:07Z", fmt.Sprintf("narwhal%04d answer", i), 4))
				write(t, e.path("claude-code", fmt.Sprintf("p/%s.jsonl", sid)), lines(ls...))
			}
			sum := e.sync("claude-code")
			if sum.New != tc.files || sum.Sessions != tc.files || sum.Messages != 3*tc.files {
				t.Fatalf("summary %+v", sum)
			}
			if tc.bytes > 0 && sum.Bytes < int64(tc.files*tc.bytes) {
				t.Fatalf("read %d bytes, want at least %d", sum.Bytes, tc.files*tc.bytes)
			}
			for _, q := range []string{"walrus0000", fmt.Sprintf("narwhal%04d", tc.files-1)} {
				if hits := mustSearch(t, e.ix, index.SearchOptions{Query: q}); len(hits) != 1 {
					t.Fatalf("%s: %d hits", q, len(hits))
				}
			}
			st, err := e.ix.Stats(t.Context())
			if err != nil || st.Sessions != tc.files || st.Messages != 3*tc.files || st.ToolCalls != tc.files || st.Files != tc.files {
				t.Fatalf("stats %+v %v", st, err)
			}
			if again := e.sync("claude-code"); again.Unchanged != tc.files || again.Bytes != 0 {
				t.Fatalf("second sync %+v", again)
			}
		})
	}
}
