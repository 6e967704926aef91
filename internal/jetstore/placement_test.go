package jetstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live"
)

// TestLoads: a node's heartbeat carries its count of live sessions (those whose record it
// wrote last and that are not final), which every node reads; a heartbeat in the form before
// the counts (the bare time) is still read.
func TestLoads(t *testing.T) {
	c := startCluster(t)
	ctx := testCtx(t)
	name := clusterName()
	a := c.open(t, jetstore.Options{Cluster: name, Node: "a"})
	b := c.open(t, jetstore.Options{Cluster: name, Node: "b"})
	revs := map[string]uint64{}
	for i := range 4 {
		rec := abi.Session{SessionID: fmt.Sprint("s", i), Type: abi.TypeTerminal, CreatedAt: "2024", Status: abi.StatusActive, Metadata: map[string]any{}}
		if i == 3 {
			rec.Status = abi.StatusClosed
		}
		rev, err := a.Put(ctx, rec, 0)
		if err != nil {
			t.Fatal(err)
		}
		revs[rec.SessionID] = rev
	}
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	if err := a.Beat(ctx, at); err != nil {
		t.Fatal(err)
	}
	closed := abi.Session{SessionID: "s0", Type: abi.TypeTerminal, CreatedAt: "2024", Status: abi.StatusClosed, Metadata: map[string]any{}}
	if _, err := a.Put(ctx, closed, revs["s0"]); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "s1", revs["s1"]); err != nil {
		t.Fatal(err)
	}
	if err := b.Beat(ctx, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	loads, err := b.Loads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := loads["a"]; l.Sessions != 3 || !l.At.Equal(at) {
		t.Fatalf("a's load %+v, want 3 sessions at %s", l, at)
	}
	if l := loads["b"]; l.Sessions != 0 {
		t.Fatalf("b's load %+v", l)
	}
	if err := a.Beat(ctx, at.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A node of the version before the counts writes the bare time.
	js, err := jetstream.New(c.connect(t))
	if err != nil {
		t.Fatal(err)
	}
	_, _, bucket := jetstore.Names(name)
	kv, err := js.KeyValue(ctx, bucket+"_NODES")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "old", []byte(at.Format(time.RFC3339Nano))); err != nil {
		t.Fatal(err)
	}
	loads, err = b.Loads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := loads["a"]; l.Sessions != 1 {
		t.Fatalf("a's load after a close and a delete: %+v, want 1", l)
	}
	if l, ok := loads["old"]; !ok || !l.At.Equal(at) || l.Sessions != 0 {
		t.Fatalf("an old node's heartbeat: %+v %v", l, ok)
	}
	beats, err := a.Beats(ctx)
	if err != nil || len(beats) != 3 || !beats["a"].Equal(at.Add(2*time.Second)) {
		t.Fatalf("beats %v %v", beats, err)
	}
}

// TestManyLogs: more session logs open at once than nats-server's default of 1,000
// consumers per stream (each follows its subject with an ordered consumer); the 1,001st was
// refused with "maximum consumers limit reached" before the embedded server lifted it.
func TestManyLogs(t *testing.T) {
	c := startCluster(t)
	ctx := testCtx(t)
	st := c.open(t, jetstore.Options{Cluster: clusterName(), Node: "a"})
	const n = 1100
	for i := range n {
		l, err := st.OpenLog(ctx, fmt.Sprint("s", i), live.LogLimits{})
		if err != nil {
			t.Fatalf("log %d of %d: %v", i+1, n, err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
	}
}
