package live_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
)

// BenchmarkClosedSessionsHeap measures what retained closed sessions cost a gateway: N
// terminal sessions write about 0.6 MiB of output each to the disk store and close, and the
// live heap (after GC) is read in the registry that closed them and in a new registry opened
// on the same directory, as a restarted gateway is. Run it with -benchtime=1x; the figures are
// per run, not per iteration:
//
//	go test -run '^$' -bench ClosedSessionsHeap -benchtime=1x ./internal/live/
func BenchmarkClosedSessionsHeap(b *testing.B) {
	for _, n := range []int{0, 300} {
		b.Run(fmt.Sprintf("closed=%d", n), func(b *testing.B) {
			for range b.N {
				closedSessionsHeap(b, n)
			}
		})
	}
}

func closedSessionsHeap(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "live")
	open := func() (*live.Registry, *livetest.FakeKind, *live.DiskStore) {
		st, err := live.OpenDiskStore(dir, live.DiskOptions{SyncInterval: time.Hour, BootID: func() string { return "boot-1" }})
		if err != nil {
			b.Fatal(err)
		}
		kind := livetest.NewFakeKind(abi.TypeTerminal, false)
		reg, err := live.New(ctx, live.Config{Store: st, IdleTimeout: -1, MaxSessions: n + 1, Retention: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler)}, kind)
		if err != nil {
			b.Fatal(err)
		}
		return reg, kind, st
	}
	shutdown := func(reg *live.Registry) {
		if err := reg.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	}

	base := liveHeap()
	reg, kind, _ := open()
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		s, err := reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
		if err != nil {
			b.Fatal(err)
		}
		for range 150 { // 600 KiB of output
			chunk := make([]byte, 4096) // the event keeps it, as a terminal's output events do
			for i := range chunk {
				chunk[i] = byte(' ' + rng.IntN(95))
			}
			kind.Instance(s.SessionID).Emit(chunk)
		}
		if _, err := reg.Close(ctx, s.SessionID, abi.CloseRequested); err != nil {
			b.Fatal(err)
		}
	}
	closed := liveHeap()
	b.ReportMetric(float64(closed-base)/(1<<20), "MiB-heap-closed-in-process")
	shutdown(reg)

	base = liveHeap()
	start := time.Now()
	reg, _, _ = open()
	b.ReportMetric(time.Since(start).Seconds(), "s-restart")
	restored := liveHeap()
	b.ReportMetric(float64(restored-base)/(1<<20), "MiB-heap-after-restart")
	if all, _ := reg.List(ctx, true); len(all) != n {
		b.Fatalf("restored %d sessions, want %d", len(all), n)
	}
	shutdown(reg)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
