package main

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strconv"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// MemoryRow is what K idle debug-stream sessions cost the gateway, per session.
type MemoryRow struct {
	Case     string `json:"case"`
	Sessions int    `json:"sessions"`
	// Backlog is how many lines the process had written when the sessions opened (each
	// session starts with up to 100 of them, the default).
	Backlog int `json:"backlog"`
	// HeapKB is the live Go heap after two collections; StackKB the goroutine stacks (each
	// session's delivery goroutine waits on the process's ring); RSSKB the resident set.
	HeapKB        float64 `json:"heapPerSessionKB"`
	StackKB       float64 `json:"stackPerSessionKB"`
	RSSKB         float64 `json:"rssPerSessionKB"`
	Goroutines    float64 `json:"goroutinesPerSession"`
	BaselineHeap  float64 `json:"baselineHeapMB"`
	BaselineRSSMB float64 `json:"baselineRSSMB"`
}

type memStat struct{ heap, stack, rss, goroutines float64 }

func memNow() memStat {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return memStat{heap: float64(ms.HeapAlloc), stack: float64(ms.StackInuse), rss: benchenv.RSS(), goroutines: float64(goruntime.NumGoroutine())}
}

// memory opens k debug-stream sessions with the default options on an idle managed process
// that wrote backlog lines, each followed (as by a WebSocket stream) and read until it says it
// has caught up, and measures what they hold once idle.
func memory(ctx context.Context, cfg config, name string, backlog int) (*MemoryRow, error) {
	k := cfg.sessions
	g, err := openGateway(ctx, cfg.store, k+16)
	if err != nil {
		return nil, err
	}
	defer g.close()
	in, err := g.start(ctx, idleEnv+"="+strconv.Itoa(backlog))
	if err != nil {
		return nil, err
	}
	// The process has written its lines (and its start status) before the sessions open.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ls, err := g.procs.Tail(in.ID, backlog+1)
		if err != nil {
			return nil, err
		}
		if len(ls) == backlog+1 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the idle process wrote %d of %d lines", len(ls)-1, backlog)
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := memNow()
	followers := make([]live.Follower, 0, k)
	defer func() {
		for _, f := range followers {
			f.Close()
		}
	}()
	for range k {
		id, err := g.open(ctx, in.ID, 0, false)
		if err != nil {
			return nil, err
		}
		fl, err := g.reg.Follow(ctx, id, 0)
		if err != nil {
			return nil, err
		}
		followers = append(followers, fl)
		if err := catchUp(ctx, g.reg, id, fl, cfg.encode); err != nil {
			return nil, err
		}
	}
	after := memNow()
	n := float64(k)
	return &MemoryRow{Case: name, Sessions: k, Backlog: backlog,
		HeapKB: (after.heap - before.heap) / n / 1024, StackKB: (after.stack - before.stack) / n / 1024,
		RSSKB: (after.rss - before.rss) / n / 1024, Goroutines: (after.goroutines - before.goroutines) / n,
		BaselineHeap: before.heap / 1e6, BaselineRSSMB: before.rss / 1e6}, nil
}

// catchUp reads a session's events, encoding them as a WebSocket stream does, until its
// metadata says caughtUp.
func catchUp(ctx context.Context, reg *live.Registry, id string, fl live.Follower, encode bool) error {
	after := uint64(0)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := reg.Read(ctx, id, after, 512, time.Second)
		if err != nil {
			return err
		}
		caught := false
		for _, e := range b.Events {
			if encode {
				_ = e.JSON(abi.ContentANSI)
			}
			if md, ok := e.Payload.(abi.MetadataPayload); ok && md.Metadata["caughtUp"] == true {
				caught = true
			}
		}
		after = b.Next
		fl.Ack(after)
		if caught {
			return nil
		}
	}
	return errors.New("a session never caught up")
}
