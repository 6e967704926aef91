package chatstore_test

import (
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/chatstore/runstest"
)

// TestRunsContract: runs.json keeps the subagent runs' contract; two instances are two handles
// on the file (two processes).
func TestRunsContract(t *testing.T) {
	runstest.Run(t, func(t *testing.T) func(t *testing.T) chatstore.SubagentRuns {
		dir := filepath.Join(t.TempDir(), "subagents")
		return func(t *testing.T) chatstore.SubagentRuns {
			g, err := chatstore.OpenSubagents(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
	})
}
