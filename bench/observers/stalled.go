package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"text/tabwriter"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/abi"
)

// StalledRow is one flood to S readers of one debug-stream session beside a follower of the
// same session that never reads (a WebSocket whose client stopped reading): what the readers
// got, and what became of the stalled one.
type StalledRow struct {
	Readers int  `json:"readers"`
	Lines   int  `json:"lines"`
	Batch   bool `json:"batch"`
	// Complete readers got every line once, in order, and no EVENTS_MISSED; MinLines and
	// MeanLines are the lines the readers got.
	Complete  int     `json:"complete"`
	MinLines  int     `json:"minLines"`
	MeanLines float64 `json:"meanLines"`
	// RingMissed counts the readers that got the session's EVENTS_MISSED (the process's ring
	// was lapped before the session read it), LogMissed those that got the registry's.
	RingMissed int `json:"ringMissedReaders"`
	LogMissed  int `json:"logMissedReaders"`
	// StalledCutOff: the stalled follower, reading after the flood, was told it missed events
	// (it was let go rather than holding the session).
	StalledCutOff bool    `json:"stalledCutOff"`
	Seconds       float64 `json:"seconds"`
}

// floodStalled: a managed process writes n lines; one debug-stream session follows it, read
// by s subscribers as the gateway's WebSocket streams do, next to one more follower that
// never reads nor acknowledges anything.
func floodStalled(ctx context.Context, cfg config, s, n int, batch bool) (StalledRow, error) {
	row := StalledRow{Readers: s, Lines: n, Batch: batch, MinLines: n}
	g, err := openGateway(ctx, cfg.store, 16)
	if err != nil {
		return row, err
	}
	defer g.close()
	fifo := filepath.Join(g.dir, "gate")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return row, fmt.Errorf("mkfifo: %w", err)
	}
	in, err := g.start(ctx, writerEnv+"="+strconv.Itoa(n), gateEnv+"="+fifo)
	if err != nil {
		return row, err
	}
	id, err := g.open(ctx, in.ID, -1, batch)
	if err != nil {
		return row, err
	}
	stalled, err := g.reg.Follow(ctx, id, 0)
	if err != nil {
		return row, err
	}
	defer stalled.Close()
	subs := make([]*subscriber, s)
	for i := range subs {
		fl, err := g.reg.Follow(ctx, id, 0)
		if err != nil {
			return row, err
		}
		defer fl.Close()
		subs[i] = &subscriber{reg: g.reg, id: id, fl: fl, encode: cfg.encode}
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	errs := make([]error, s)
	var wg sync.WaitGroup
	for i, sub := range subs {
		wg.Go(func() { errs[i] = sub.run(rctx, n) })
	}
	t0, err := release(rctx, fifo)
	if err != nil {
		cancel()
		wg.Wait()
		return row, err
	}
	wg.Wait()
	total := 0
	for i, sub := range subs {
		if errs[i] != nil {
			return row, fmt.Errorf("reader %d: %w", i, errs[i])
		}
		if sub.last.Sub(t0).Seconds() > row.Seconds {
			row.Seconds = sub.last.Sub(t0).Seconds()
		}
		row.MinLines = min(row.MinLines, sub.lines)
		total += sub.lines
		if sub.ringMissed > 0 {
			row.RingMissed++
		}
		if sub.logMissed > 0 {
			row.LogMissed++
		}
		if sub.lines == n && sub.lost == 0 && sub.disorder == 0 && sub.ringMissed+sub.logMissed == 0 {
			row.Complete++
		}
	}
	row.MeanLines = float64(total) / float64(s)
	b, err := g.reg.Read(rctx, id, 0, 64, 0)
	if err != nil {
		return row, err
	}
	for _, e := range b.Events {
		if p, ok := e.Payload.(abi.ErrorPayload); ok && p.Error.Code == abi.CodeEventsMissed {
			row.StalledCutOff = true
		}
	}
	return row, nil
}

func reportStalled(rows []StalledRow) {
	fmt.Println("stalled: one debug-stream session, S readers and one follower that never reads, N lines of 100 bytes")
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "N\tS\tevents\treaders complete\tfewest lines\tmean lines\treaders with EVENTS_MISSED (ring, log)\tstalled one cut off\ts\t")
	for _, r := range rows {
		mode := "log-line"
		if r.Batch {
			mode = "batch"
		}
		fmt.Fprintf(w, "%d\t%d\t%s\t%d/%d\t%d\t%.0f\t%d, %d\t%v\t%.2f\t\n", r.Lines, r.Readers, mode, r.Complete, r.Readers, r.MinLines, r.MeanLines, r.RingMissed, r.LogMissed, r.StalledCutOff, r.Seconds)
	}
	_ = w.Flush()
	fmt.Println()
}
