package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/metachat"
	"github.com/nexus-run/nexus/internal/kinds/netstream"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/roadmap"
)

// memoryOthers measures idle network-stream sessions (on the gateway, this process, between
// two polls) and idle meta-chat sessions (on an empty roadmap), k of each, as memory does
// debug streams: each followed and read until its first report.
func memoryOthers(ctx context.Context, cfg config) ([]MemoryRow, error) {
	g, err := openGateway(ctx, cfg.store, 2*cfg.sessions+16)
	if err != nil {
		return nil, err
	}
	defer g.close()
	rms, err := roadmap.Open(filepath.Join(g.dir, "roadmaps.json"), nil)
	if err != nil {
		return nil, err
	}
	rm, err := rms.Create("bench")
	if err != nil {
		return nil, err
	}
	if err := g.reg.Register(&netstream.Kind{Processes: g.procs}); err != nil {
		return nil, err
	}
	if err := g.reg.Register(&metachat.Kind{Roadmaps: rms}); err != nil {
		return nil, err
	}
	var rows []MemoryRow
	for _, c := range []struct {
		name string
		req  abi.CreateRequest
		key  string // the metadata key of the session's first report
	}{
		// Polled every minute, so no poll is in flight while the heap is measured (a poll's
		// listing is transient; 200 sessions polling each second would be measured mid-poll).
		{"network-stream on the gateway, between polls", abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: "gateway"},
			Options: []byte(`{"intervalMs":60000}`)}, "caughtUp"},
		{"meta-chat on an empty roadmap", abi.CreateRequest{Type: abi.TypeMetaChat, Context: abi.Context{RoadmapID: rm.ID}}, "roadmapId"},
	} {
		before := memNow()
		var followers []live.Follower
		var ids []string
		for range cfg.sessions {
			s, err := g.reg.Create(ctx, c.req)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
			fl, err := g.reg.Follow(ctx, s.SessionID, 0)
			if err != nil {
				return nil, err
			}
			followers, ids = append(followers, fl), append(ids, s.SessionID)
			if err := firstReport(ctx, g.reg, s.SessionID, fl, c.key); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
		after := memNow()
		n := float64(cfg.sessions)
		rows = append(rows, MemoryRow{Case: c.name, Sessions: cfg.sessions,
			HeapKB: (after.heap - before.heap) / n / 1024, StackKB: (after.stack - before.stack) / n / 1024,
			RSSKB: (after.rss - before.rss) / n / 1024, Goroutines: (after.goroutines - before.goroutines) / n,
			BaselineHeap: before.heap / 1e6, BaselineRSSMB: before.rss / 1e6})
		// The next kind is measured alone.
		for i, f := range followers {
			f.Close()
			_, _ = g.reg.Close(ctx, ids[i], abi.CloseRequested)
		}
	}
	return rows, nil
}

// firstReport reads a session until a metadata event carries key.
func firstReport(ctx context.Context, reg *live.Registry, id string, fl live.Follower, key string) error {
	var after uint64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, err := reg.Read(ctx, id, after, 512, time.Second)
		if err != nil {
			return err
		}
		for _, e := range b.Events {
			if md, ok := e.Payload.(abi.MetadataPayload); ok && md.Metadata[key] != nil {
				fl.Ack(e.Seq)
				return nil
			}
		}
		after = b.Next
		fl.Ack(after)
	}
	return fmt.Errorf("session %s: no %s after 30 s", id, key)
}
