package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// The closed benchmark measures what retained closed sessions cost a gateway that starts over
// them: a state directory is filled with closed terminal sessions (their records and event logs,
// written through the disk store as a gateway writes them), and a fresh process — this binary
// again, so nothing earlier in the run is counted — starts the gateway on it and reports its
// memory. It runs over an empty state directory and over -closed sessions.

// closedChildEnv names the state root a child process starts its gateway on.
const closedChildEnv = "NEXUS_BENCH_CLOSED_CHILD"

// ClosedRow is one start of a gateway over a state directory.
type ClosedRow struct {
	Closed   int     `json:"closed"`
	LogMiB   float64 `json:"logMiB"` // bytes of the sessions' files
	StartSec float64 `json:"startSeconds"`
	// AtReady is read as soon as the gateway serves (no forced GC: what a user sees),
	// AfterGC after a full collection.
	AtReady MemSnapshot `json:"atReady"`
	AfterGC MemSnapshot `json:"afterGC"`
	Listed  int         `json:"listed"` // sessions the restarted registry lists
}

// ClosedResult is the closed benchmark's outcome.
type ClosedResult struct {
	KiBEach int         `json:"kibEach"`
	Rows    []ClosedRow `json:"rows"`
	// Ratios of the last row to the first (over N closed sessions against none).
	RSSRatio  float64 `json:"rssRatio"`
	HeapRatio float64 `json:"heapRatio"`
}

// closedRestart runs a child gateway over 0 and n closed sessions.
func closedRestart(ctx context.Context, n, kib int) (ClosedResult, error) {
	res := ClosedResult{KiBEach: kib}
	for _, count := range []int{0, n} {
		row, err := closedRow(ctx, count, kib)
		if err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, row)
	}
	first, last := res.Rows[0], res.Rows[len(res.Rows)-1]
	if first.AtReady.RSS > 0 {
		res.RSSRatio = float64(last.AtReady.RSS) / float64(first.AtReady.RSS)
	}
	if first.AfterGC.HeapAlloc > 0 {
		res.HeapRatio = float64(last.AfterGC.HeapAlloc) / float64(first.AfterGC.HeapAlloc)
	}
	return res, nil
}

func closedRow(ctx context.Context, n, kib int) (ClosedRow, error) {
	dir, err := harnessDir()
	if err != nil {
		return ClosedRow{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	liveDir := filepath.Join(dir, "state", "live")
	if err := fillClosed(ctx, liveDir, n, kib); err != nil {
		return ClosedRow{}, err
	}
	var size int64
	_ = filepath.Walk(liveDir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	exe, err := os.Executable()
	if err != nil {
		return ClosedRow{}, err
	}
	cmd := exec.CommandContext(ctx, exe) //nolint:gosec // this very binary
	cmd.Env = append(os.Environ(), closedChildEnv+"="+dir)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return ClosedRow{}, fmt.Errorf("gateway over %d closed sessions: %w: %s", n, err, stderr.Bytes())
	}
	var row ClosedRow
	if err := json.Unmarshal(out.Bytes(), &row); err != nil {
		return ClosedRow{}, fmt.Errorf("gateway over %d closed sessions: %w", n, err)
	}
	row.Closed, row.LogMiB = n, float64(size)/(1<<20)
	if row.Listed != n {
		return row, fmt.Errorf("the gateway lists %d of %d closed sessions", row.Listed, n)
	}
	return row, nil
}

// fillClosed writes n closed terminal sessions of about kib KiB of output each into the disk
// store in dir, the way a registry writes them: records, the status events of a start, output
// in 4 KiB events, and the closing events.
func fillClosed(ctx context.Context, dir string, n, kib int) error {
	st, err := live.OpenDiskStore(dir, live.DiskOptions{})
	if err != nil {
		return err
	}
	limits := live.LogLimits{Events: 8192, Bytes: 8 << 20, Pinned: 1024}
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // filler text
	now := time.Now()
	for range n {
		rec := abi.Session{
			SessionID: live.NewSessionID(), Type: abi.TypeTerminal, CreatedAt: abi.FormatTime(now),
			Context: abi.Context{ProjectID: benchProject}, Transport: abi.TransportWebSocket, Status: abi.StatusActive,
			Metadata: map[string]any{},
		}
		rev, err := st.Put(ctx, rec, 0)
		if err != nil {
			return err
		}
		l, err := st.CreateLog(ctx, rec.SessionID, limits)
		if err != nil {
			return err
		}
		seq := uint64(0)
		ev := func(typ abi.EventType, p any) *live.Event {
			seq++
			return &live.Event{Seq: seq, Type: typ, Time: now, SessionID: rec.SessionID, Payload: p}
		}
		status := func(state, msg string, ss abi.Status) *live.Event {
			return ev(abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: state, Message: msg, SessionStatus: ss})
		}
		events := []*live.Event{status(abi.StateConnecting, "starting terminal session", abi.StatusActive), status(abi.StateConnected, "session active", abi.StatusActive)}
		for range kib / 4 {
			chunk := make([]byte, 4096)
			for i := range chunk {
				chunk[i] = byte(' ' + rng.IntN(95))
			}
			events = append(events, ev(abi.EventData, live.Output(chunk)))
		}
		events = append(events, status(abi.StateClosed, "session closed: "+abi.CloseShutdown, abi.StatusClosed),
			ev(abi.EventClose, abi.ClosePayload{Type: abi.PayloadClose, Reason: abi.CloseShutdown, Status: abi.StatusClosed}))
		if _, err := l.Append(ctx, events...); err != nil {
			return err
		}
		rec.Status = abi.StatusClosed
		rec.Metadata["closedAt"] = abi.FormatTime(now)
		rec.Metadata["closeReason"] = abi.CloseShutdown
		if _, err := st.Put(ctx, rec, rev); err != nil {
			return err
		}
		if err := l.Close(ctx); err != nil {
			return err
		}
	}
	return st.Close()
}

// closedChild is the child process: it starts the gateway on the state root dir, writes its
// ClosedRow as JSON to stdout and stops.
func closedChild(dir string) error {
	ctx := context.Background()
	sh, err := shellPath("bash")
	if err != nil {
		return err
	}
	start := time.Now()
	h, err := startHarnessAt(ctx, dir, live.Config{IdleTimeout: -1}, config{store: "disk", shell: sh})
	if err != nil {
		return err
	}
	row := ClosedRow{StartSec: time.Since(start).Seconds()}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	row.AtReady = MemSnapshot{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, GoSys: ms.Sys,
		RSS: procRSS("self"), Goroutines: goruntime.NumGoroutine()}
	row.AfterGC = snapshot()
	all, err := h.reg.List(ctx, true)
	if err != nil {
		return err
	}
	row.Listed = len(all)
	// stop removes dir; the parent removes it too, harmlessly.
	h.stop()
	return json.NewEncoder(os.Stdout).Encode(row)
}
