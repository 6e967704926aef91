package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// MemSnapshot is the gateway process's memory at one moment, after a full GC.
type MemSnapshot struct {
	HeapInuse  uint64 `json:"heapInuse"`
	HeapAlloc  uint64 `json:"heapAlloc"`
	StackInuse uint64 `json:"stackInuse"`
	GoSys      uint64 `json:"goSys"` // all memory the Go runtime obtained from the OS
	RSS        uint64 `json:"rss"`   // VmRSS of this process
	Goroutines int    `json:"goroutines"`
	Threads    int    `json:"threads"` // OS threads of this process
	FDs        int    `json:"fds"`
}

// MemoryResult is the memory benchmark's outcome.
type MemoryResult struct {
	Sessions int         `json:"sessions"`
	Before   MemSnapshot `json:"before"`
	After    MemSnapshot `json:"after"`
	// Per-session deltas in bytes.
	HeapInusePerSession  float64 `json:"heapInusePerSession"`
	HeapAllocPerSession  float64 `json:"heapAllocPerSession"`
	StackInusePerSession float64 `json:"stackInusePerSession"`
	RSSPerSession        float64 `json:"rssPerSession"`
	GoroutinesPerSession float64 `json:"goroutinesPerSession"`
	ThreadsPerSession    float64 `json:"threadsPerSession"`
	FDsPerSession        float64 `json:"fdsPerSession"`
	// ShellRSSPerSession is the mean VmRSS of the shells (not counted above), for scale.
	ShellRSSPerSession float64 `json:"shellRssPerSession"`
	// OpenSeconds is the time to create the sessions (4 concurrent API clients).
	OpenSeconds float64 `json:"openSeconds"`
	// CloseMsEach is the mean time of a close through the API, ClosedViaAPI sessions one at a time.
	ClosedViaAPI int     `json:"closedViaAPI"`
	CloseMsEach  float64 `json:"closeMsEach"`
	// ShutdownSeconds is Registry.Shutdown (what SIGTERM runs) closing all the others at once.
	ShutdownSeconds float64 `json:"shutdownSeconds"`
	// LeftoverProcesses counts shells (or their children) still alive after closing.
	LeftoverProcesses int    `json:"leftoverProcesses"`
	Note              string `json:"note,omitempty"`
}

func snapshot() MemSnapshot {
	goruntime.GC()
	goruntime.GC()
	debug.FreeOSMemory()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	s := MemSnapshot{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse, GoSys: ms.Sys,
		Goroutines: goruntime.NumGoroutine()}
	s.RSS = procStatus("self", "VmRSS:") * 1024
	s.Threads = int(procStatus("self", "Threads:"))
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.FDs = len(ents)
	}
	return s
}

// procRSS is VmRSS of /proc/<pid>/status in bytes (0 if unknown).
func procRSS(pid string) uint64 { return procStatus(pid, "VmRSS:") * 1024 }

// procStatus is the number of a /proc/<pid>/status field (kB for sizes; 0 if unknown).
func procStatus(pid, field string) uint64 {
	f, err := os.Open("/proc/" + pid + "/status") //nolint:gosec // a /proc path built from a pid
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// memoryIdle opens n idle terminal sessions through the API and measures what the gateway
// process pays for them; the shells are separate processes and not counted.
func memoryIdle(ctx context.Context, cfg config) (MemoryResult, error) {
	res := MemoryResult{Sessions: cfg.sessions}
	h, err := startHarness(ctx, live.Config{MaxSessions: cfg.sessions + 100, IdleTimeout: -1}, cfg)
	if err != nil {
		return res, err
	}
	defer h.stop()
	if _, err := h.cl.Version(ctx); err != nil { // warm the client connection
		return res, err
	}
	// One session opened and closed first, so lazily initialised state is not charged to the 500.
	if s, err := h.openTerminal(ctx); err == nil {
		_ = h.closeSession(ctx, s.SessionID)
	} else {
		return res, err
	}
	time.Sleep(200 * time.Millisecond)
	res.Before = snapshot()

	ids := make([]string, cfg.sessions)
	pids := make([]int, cfg.sessions)
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		openErr error
	)
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= cfg.sessions || ctx.Err() != nil {
					return
				}
				s, err := h.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: benchProject}})
				if err != nil {
					errOnce.Do(func() { openErr = fmt.Errorf("create session %d: %w", i, err) })
					return
				}
				ids[i] = s.SessionID
				if p, ok := s.Metadata["pid"].(float64); ok {
					pids[i] = int(p)
				}
			}
		}()
	}
	wg.Wait()
	res.OpenSeconds = time.Since(start).Seconds()
	if openErr == nil {
		openErr = waitAllIdle(ctx, h.reg, ids)
	}
	if openErr != nil {
		return res, openErr // h.stop closes what was opened
	}
	res.After = snapshot()
	var shellRSS uint64
	for _, pid := range pids {
		if pid > 0 {
			shellRSS += procRSS(strconv.Itoa(pid))
		}
	}

	// Close a few one at a time through the API, then the rest the way SIGTERM does.
	res.ClosedViaAPI = min(20, len(ids))
	t0 := time.Now()
	for _, id := range ids[:res.ClosedViaAPI] {
		if err := h.closeSession(ctx, id); err != nil {
			return res, fmt.Errorf("close %s: %w", id, err)
		}
	}
	res.CloseMsEach = float64(time.Since(t0)) / 1e6 / float64(max(res.ClosedViaAPI, 1))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	t0 = time.Now()
	err = h.reg.Shutdown(sctx)
	res.ShutdownSeconds = time.Since(t0).Seconds()
	if err != nil {
		return res, fmt.Errorf("shutdown with %d sessions: %w", len(ids)-res.ClosedViaAPI, err)
	}
	res.LeftoverProcesses = leftovers(pids)

	n := float64(cfg.sessions)
	d := func(a, b uint64) float64 { return (float64(a) - float64(b)) / n }
	res.HeapInusePerSession = d(res.After.HeapInuse, res.Before.HeapInuse)
	res.HeapAllocPerSession = d(res.After.HeapAlloc, res.Before.HeapAlloc)
	res.StackInusePerSession = d(res.After.StackInuse, res.Before.StackInuse)
	res.RSSPerSession = d(res.After.RSS, res.Before.RSS)
	res.GoroutinesPerSession = float64(res.After.Goroutines-res.Before.Goroutines) / n
	res.ThreadsPerSession = float64(res.After.Threads-res.Before.Threads) / n
	res.FDsPerSession = float64(res.After.FDs-res.Before.FDs) / n
	res.ShellRSSPerSession = float64(shellRSS) / n
	return res, nil
}

// waitAllIdle waits until every session has printed its prompt and no session has logged
// anything for a second.
func waitAllIdle(ctx context.Context, reg *live.Registry, ids []string) error {
	deadline := time.Now().Add(2 * time.Minute)
	var prev uint64
	quietSince := time.Time{}
	for time.Now().Before(deadline) {
		var sum uint64
		prompted := 0
		for _, id := range ids {
			b, err := reg.Read(ctx, id, 0, 0, 0)
			if err != nil {
				return err
			}
			for _, e := range b.Events {
				if e.Type == abi.EventData {
					prompted++
					break
				}
			}
			sum += b.Next
		}
		switch {
		case prompted < len(ids) || sum != prev:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) >= time.Second:
			return nil
		}
		prev = sum
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%d sessions did not settle at their prompts within 2 minutes", len(ids))
}

// leftovers counts live processes among pids and among the processes whose session is one of
// theirs (each shell leads its own session). Zombies count: nobody reaped them.
func leftovers(pids []int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := countSessionMembers(pids)
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countSessionMembers(pids []int) int { return len(sessionMembers(pids)) }

// sessionMembers lists the live (or unreaped) processes among pids and those whose session id
// is one of pids.
func sessionMembers(pids []int) []int {
	sids := map[int]bool{}
	for _, p := range pids {
		if p > 0 {
			sids[p] = true
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 4 {
			continue
		}
		sid, _ := strconv.Atoi(string(f[3]))
		if sids[pid] || sids[sid] {
			out = append(out, pid)
		}
	}
	return out
}
