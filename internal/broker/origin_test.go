package broker_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
)

// TestOriginStored: a message keeps where it came from through the store (every way of
// storing one), and reads back with it; a message stored without one has the zero origin.
func TestOriginStored(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "q.db"))
	ctx := context.Background()
	hook := abi.Origin{Kind: abi.OriginWebhook, ID: "relay", Channel: "telegram", Peer: "alice", ChatType: "direct"}
	for _, tc := range []struct {
		name  string
		store func() (string, error)
		want  abi.Origin
	}{
		{"enqueue with an origin", func() (string, error) {
			m, err := s.EnqueueWith(ctx, "k", broker.Followup, "hi", "hook:relay", broker.EnqueueOptions{Origin: hook})
			return m.ID, err
		}, hook},
		{"enqueue without", func() (string, error) {
			m, err := s.Enqueue(ctx, "k", broker.Followup, "hi", "")
			return m.ID, err
		}, abi.Origin{}},
		{"an announcement", func() (string, error) {
			_, err := s.Announce(ctx, "announce_r1", "k", "done", "subagent:r1", "r1")
			return "announce_r1", err
		}, abi.Origin{Kind: abi.OriginSubagent, ID: "r1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := tc.store()
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, []string{id})
			if err != nil || len(got) != 1 {
				t.Fatalf("get %+v %v", got, err)
			}
			if got[0].Origin != tc.want {
				t.Fatalf("origin %+v, want %+v", got[0].Origin, tc.want)
			}
		})
	}
}
