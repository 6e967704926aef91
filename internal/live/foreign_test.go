package live_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
)

// unreachableStore is a cluster's shared store whose records cannot be read for now (its
// servers electing a leader, the node cut off): Get fails with something other than
// live.ErrNoRecord.
type unreachableStore struct {
	*live.MemoryStore
	err error
}

func (s unreachableStore) Get(ctx context.Context, id string) (live.Record, error) {
	if s.err != nil {
		return live.Record{}, s.err
	}
	return s.MemoryStore.Get(ctx, id)
}

func (s unreachableStore) OpenEventLog(ctx context.Context, id string, limits live.LogLimits) (live.EventLog, error) {
	return s.CreateLog(ctx, id, limits)
}

// TestForeignUnreachable: a node that cannot read a session's record from the cluster's store
// says the store is unavailable, not that the session does not exist (seen through the binary:
// `session events` of another node's session answered SESSION_NOT_FOUND while the stream's
// leader was re-elected after a nats-server was killed, TestClusterE2E).
func TestForeignUnreachable(t *testing.T) {
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		err  error
		want abi.Code
	}{
		{"no record", nil, abi.CodeSessionNotFound},
		{"store unreachable", errors.New("nats: timeout"), abi.CodeResourceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := unreachableStore{MemoryStore: live.NewMemoryStore(), err: tc.err}
			r := newRegistry(t, live.Config{Node: "a", Store: st}, livetest.NewFakeKind(abi.TypeTerminal, false))
			if _, err := r.Get(ctx, "elsewhere"); abi.CodeOf(err) != tc.want {
				t.Errorf("Get: %v (code %s), want code %s", err, abi.CodeOf(err), tc.want)
			}
			if _, err := r.Read(ctx, "elsewhere", 0, 0, 0); abi.CodeOf(err) != tc.want {
				t.Errorf("Read: %v (code %s), want code %s", err, abi.CodeOf(err), tc.want)
			}
			if _, err := r.LastSeq(ctx, "elsewhere"); abi.CodeOf(err) != tc.want {
				t.Errorf("LastSeq: %v (code %s), want code %s", err, abi.CodeOf(err), tc.want)
			}
		})
	}
}
