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
	for _, kind := range []struct {
		name string
		emit func(*livetest.FakeInstance, *rand.Rand)
	}{
		{"terminal", emitTerminal},
		{"chat", emitChat},
	} {
		for _, n := range []int{0, 300} {
			b.Run(fmt.Sprintf("%s/closed=%d", kind.name, n), func(b *testing.B) {
				for range b.N {
					closedSessionsHeap(b, n, kind.emit)
				}
			})
		}
	}
}

// emitTerminal prints 600 KiB of output in 4 KiB events.
func emitTerminal(inst *livetest.FakeInstance, rng *rand.Rand) {
	for range 150 {
		chunk := make([]byte, 4096) // the event keeps it, as a terminal's output events do
		for i := range chunk {
			chunk[i] = byte(' ' + rng.IntN(95))
		}
		inst.Emit(chunk)
	}
}

// emitChat publishes what an AI chat of 200 tool calls does: a call, its result (1 KiB) and a
// reply per call, as JSON data events.
func emitChat(inst *livetest.FakeInstance, rng *rand.Rand) {
	text := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	for i := range 200 {
		inst.EmitData(map[string]any{"type": "tool_call", "id": fmt.Sprint("call-", i), "name": "bash", "arguments": map[string]any{"command": text(80)}})
		inst.EmitData(map[string]any{"type": "tool_result", "id": fmt.Sprint("call-", i), "output": text(1024)})
		inst.EmitData(map[string]any{"type": "message", "role": "assistant", "text": text(200)})
	}
}

func closedSessionsHeap(b *testing.B, n int, emit func(*livetest.FakeInstance, *rand.Rand)) {
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
	reg, kind, st := open()
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		s, err := reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
		if err != nil {
			b.Fatal(err)
		}
		emit(kind.Instance(s.SessionID), rng)
		// A client watched it: every event's wire encoding was made (and cached) once.
		batch, err := reg.Read(ctx, s.SessionID, 0, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range batch.Events {
			e.JSON(abi.ContentANSI)
		}
		if _, err := reg.Close(ctx, s.SessionID, abi.CloseRequested); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Sync(); err != nil { // the flusher's pass, which lets go of closed logs
		b.Fatal(err)
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
