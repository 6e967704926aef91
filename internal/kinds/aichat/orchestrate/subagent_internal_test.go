package orchestrate

import (
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
)

// TestDepth: a subagent's depth follows the run records up to a top-level conversation, since
// a child's key does not nest its parent's; a nested key counts as written; a cycle stops.
func TestDepth(t *testing.T) {
	runs := []chatstore.SubagentRunRecord{
		{ChildSessionKey: "agent:main:subagent:1", RequesterSessionKey: "agent:main:main"},
		{ChildSessionKey: "agent:main:subagent:2", RequesterSessionKey: "agent:main:subagent:1"},
		{ChildSessionKey: "agent:main:subagent:3", RequesterSessionKey: "agent:main:subagent:2"},
		{ChildSessionKey: "agent:main:subagent:x", RequesterSessionKey: "agent:main:subagent:y"},
		{ChildSessionKey: "agent:main:subagent:y", RequesterSessionKey: "agent:main:subagent:x"},
	}
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"agent:main:main", 0},
		{"agent:main:subagent:1", 1},
		{"agent:main:subagent:3", 3},
		{"agent:main:subagent:a:subagent:b", 2},
		{"agent:main:subagent:x", 4}, // a cycle: counted past the limit of 3, then stopped
	} {
		if got := depth(runs, tc.key, 3); got != tc.want {
			t.Errorf("depth(%s) = %d, want %d", tc.key, got, tc.want)
		}
	}
}
