package jetstore_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/chatstore/runstest"
	"github.com/nexus-run/nexus/internal/jetstore"
)

// TestRunsContract: the cluster's subagent runs keep the runs' contract at R1 and R3; every
// instance is a node of its own.
func TestRunsContract(t *testing.T) {
	c := startCluster(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			runstest.Run(t, func(t *testing.T) func(t *testing.T) chatstore.SubagentRuns {
				name := clusterName()
				return func(t *testing.T) chatstore.SubagentRuns {
					r, err := jetstore.OpenRuns(testCtx(t), c.connect(t), jetstore.RunsOptions{Cluster: name, Replicas: replicas, Node: "a"})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = r.Close() })
					return r
				}
			})
		})
	}
}

// TestRunsNodesApart: two nodes' runs in one cluster are apart: each lists and counts its own
// (a node's start ends its own running runs, not another's); a node opening another's name
// reads that one's (a takeover).
func TestRunsNodesApart(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ctx := testCtx(t)
	open := func(node string) *jetstore.Runs {
		r, err := jetstore.OpenRuns(ctx, c.connect(t), jetstore.RunsOptions{Cluster: name, Replicas: 3, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	a, b := open("a"), open("b")
	rec := chatstore.SubagentRunRecord{RunID: "r1", ChildSessionKey: "agent:main:subagent:r1", RequesterSessionKey: "agent:main:main", Task: "t", Cleanup: "keep"}
	if err := a.PutChecked(ctx, rec, nil); err != nil {
		t.Fatal(err)
	}
	rec.RunID, rec.ChildSessionKey = "r2", "agent:main:subagent:r2"
	if err := b.PutChecked(ctx, rec, func(runs []chatstore.SubagentRunRecord) error {
		if len(runs) != 0 {
			return fmt.Errorf("b's check counts %d runs", len(runs))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]string{"a": "r1", "b": "r2"} {
		runs, err := open(node).List(chatstore.SubagentFilter{RequesterSessionKey: "agent:main:main"})
		if err != nil || len(runs) != 1 || runs[0].RunID != want {
			t.Fatalf("node %s lists %+v, %v; want %s", node, runs, err, want)
		}
	}
	if _, err := b.Patch(ctx, "r1", map[string]any{"endedAt": 5}); !errors.Is(err, chatstore.ErrNotFound) {
		t.Fatalf("b patches a's run: %v", err)
	}
}
