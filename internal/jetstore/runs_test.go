package jetstore_test

import (
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
					r, err := jetstore.OpenRuns(testCtx(t), c.connect(t), jetstore.QueueOptions{Cluster: name, Replicas: replicas})
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
