package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/process"
)

// Measure is one flood: N lines to S readers.
type Measure struct {
	// Seconds runs from the writer's release to the slowest reader's last line; FastestSeconds
	// to the fastest reader's.
	Seconds        float64 `json:"seconds"`
	FastestSeconds float64 `json:"fastestSeconds"`
	LinesPerSec    float64 `json:"linesPerSec"`
	// DeliveredPerSec counts only the lines the readers got (their mean) over Seconds: below
	// LinesPerSec when lines were lost.
	DeliveredPerSec float64 `json:"deliveredPerSec"`
	// CaptureSeconds (nexus) runs from the writer's release to its exit status in the process's
	// ring: by then the gateway had read every line into the ring and the log file.
	CaptureSeconds float64 `json:"captureSeconds,omitempty"`
	// CPUSeconds is the user+system time of this process and its children (the writer, the
	// tails) during the flood.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Complete is how many readers got every line exactly once, in order; the rest are
	// counted over all readers.
	Complete int `json:"complete"`
	MinLines int `json:"minLines"`
	Lost     int `json:"lost,omitempty"`
	Disorder int `json:"disorder,omitempty"`
	// RingMissed are the sessions' EVENTS_MISSED events (lines overwritten in the process's
	// ring before the session read them); LogMissed the registry's (a reader lapped by the
	// session's event log).
	RingMissed int   `json:"ringMissed,omitempty"`
	LogMissed  int   `json:"logMissed,omitempty"`
	FrameBytes int64 `json:"frameBytes,omitempty"`
	// EventsPerRead is the mean number of events a subscriber's read returned.
	EventsPerRead float64 `json:"eventsPerRead,omitempty"`
	// LinesPerEvent is the mean number of lines in a data event (1 without option batch).
	LinesPerEvent float64 `json:"linesPerEvent,omitempty"`
	// Runs are the lines/s of every run of the row, in order (this one is their median).
	Runs []float64 `json:"runs,omitempty"`
}

// FloodRow compares nexus with tail -F for S subscribers: sessions with a log-line event per
// line (Nexus), and sessions with option batch (NexusBatch).
type FloodRow struct {
	Subscribers int     `json:"subscribers"`
	Lines       int     `json:"lines"`
	Nexus       Measure `json:"nexus"`
	NexusBatch  Measure `json:"nexusBatch"`
	Tail        Measure `json:"tailF"`
	Ratio       float64 `json:"ratio"`
	BatchRatio  float64 `json:"batchRatio"`
}

// cpuNow is the user+system time of this process and its waited-for children.
func cpuNow() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// release opens the writer's fifo (which waits until the writer has it open) and lets it go:
// the returned time is when writing starts.
func release(ctx context.Context, fifo string) (time.Time, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0) //nolint:gosec // G304: our own fifo
		ch <- opened{f, err}
	}()
	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return time.Time{}, errors.New("the writer did not open its gate")
	}
	if o.err != nil {
		return time.Time{}, o.err
	}
	defer func() { _ = o.f.Close() }()
	t0 := time.Now()
	if _, err := o.f.Write([]byte{'\n'}); err != nil {
		return time.Time{}, err
	}
	return t0, nil
}

// floodNexus: a managed process writes n lines to stdout as fast as it can; s debug-stream
// sessions follow it, each read by its own subscriber as a WebSocket stream would.
func floodNexus(ctx context.Context, cfg config, s, n int, batch bool) (Measure, error) {
	g, err := openGateway(ctx, cfg.store, s+16)
	if err != nil {
		return Measure{}, err
	}
	defer g.close()
	fifo := filepath.Join(g.dir, "gate")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return Measure{}, fmt.Errorf("mkfifo: %w", err)
	}
	in, err := g.start(ctx, writerEnv+"="+strconv.Itoa(n), gateEnv+"="+fifo)
	if err != nil {
		return Measure{}, err
	}
	subs := make([]*subscriber, s)
	for i := range subs {
		id, err := g.open(ctx, in.ID, -1, batch)
		if err != nil {
			return Measure{}, err
		}
		fl, err := g.reg.Follow(ctx, id, 0)
		if err != nil {
			return Measure{}, err
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
	cpu0 := cpuNow()
	t0, err := release(rctx, fifo)
	if err != nil {
		cancel()
		wg.Wait()
		return Measure{}, err
	}
	wg.Wait()
	m := Measure{CPUSeconds: (cpuNow() - cpu0).Seconds(), MinLines: n}
	var slowest, fastest time.Time
	batches, events, delivered, dataEvents := 0, 0, 0, 0
	for i, sub := range subs {
		if errs[i] != nil {
			return m, fmt.Errorf("subscriber %d: %w", i, errs[i])
		}
		if len(sub.errs) > 0 {
			return m, fmt.Errorf("subscriber %d: %s", i, strings.Join(sub.errs, "; "))
		}
		if sub.last.After(slowest) {
			slowest = sub.last
		}
		if fastest.IsZero() || sub.last.Before(fastest) {
			fastest = sub.last
		}
		m.MinLines = min(m.MinLines, sub.lines)
		m.Lost += sub.lost
		m.Disorder += sub.disorder
		m.RingMissed += sub.ringMissed
		m.LogMissed += sub.logMissed
		m.FrameBytes += sub.bytes
		batches += sub.batches
		events += sub.events
		delivered += sub.lines
		dataEvents += sub.dataEvents
		if sub.lines == n && sub.lost == 0 && sub.disorder == 0 && sub.ringMissed+sub.logMissed == 0 {
			m.Complete++
		}
	}
	m.Seconds, m.FastestSeconds = slowest.Sub(t0).Seconds(), fastest.Sub(t0).Seconds()
	m.LinesPerSec = float64(n) / m.Seconds
	m.DeliveredPerSec = float64(delivered) / float64(s) / m.Seconds
	if ls, err := g.procs.Tail(in.ID, 1); err == nil && len(ls) == 1 && ls[0].Stream == process.StreamStatus {
		m.CaptureSeconds = time.UnixMilli(ls[0].Time).Sub(t0).Seconds()
	}
	if dataEvents > 0 {
		m.LinesPerEvent = float64(delivered) / float64(dataEvents)
	}
	if batches > 0 {
		m.EventsPerRead = float64(events) / float64(batches)
	}
	return m, nil
}

// floodTail: the same writer writes the same n lines into a file (its stdout redirected), and
// s `tail -n +1 -F` follow the file, each piped into a reader that counts lines until it has
// n.
func floodTail(ctx context.Context, cfg config, s, n int) (Measure, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-observers-tail-")
	if err != nil {
		return Measure{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file, fifo := filepath.Join(dir, "app.log"), filepath.Join(dir, "gate")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return Measure{}, fmt.Errorf("mkfifo: %w", err)
	}
	out, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600) //nolint:gosec // G304: our own file
	if err != nil {
		return Measure{}, err
	}
	defer func() { _ = out.Close() }()
	rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	type reader struct {
		cmd   *exec.Cmd
		lines int
		last  time.Time
		err   error
	}
	readers := make([]*reader, s)
	var wg sync.WaitGroup
	defer func() {
		for _, r := range readers {
			if r != nil && r.cmd.Process != nil {
				_ = r.cmd.Process.Kill()
			}
		}
		wg.Wait()
	}()
	for i := range readers {
		cmd := exec.CommandContext(rctx, cfg.tail, "-n", "+1", "-F", file)
		cmd.Stderr = os.Stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return Measure{}, err
		}
		if err := cmd.Start(); err != nil {
			return Measure{}, fmt.Errorf("start %s: %w", cfg.tail, err)
		}
		r := &reader{cmd: cmd}
		readers[i] = r
		wg.Go(func() {
			defer func() { _ = cmd.Wait() }()
			buf := make([]byte, 64<<10)
			for r.lines < n {
				k, err := pipe.Read(buf)
				if k > 0 {
					r.lines += bytes.Count(buf[:k], []byte{'\n'})
					r.last = time.Now()
				}
				if err != nil {
					if !errors.Is(err, io.EOF) || r.lines < n {
						r.err = err
					}
					return
				}
			}
			_ = cmd.Process.Kill() // it has every line: stop it (Wait closes the pipe)
		})
	}
	// Every tail has the file open (and then its inotify watch) before the writer goes.
	if err := waitOpen(rctx, readers[0].cmd.Process.Pid, file); err != nil {
		return Measure{}, err
	}
	for _, r := range readers[1:] {
		if err := waitOpen(rctx, r.cmd.Process.Pid, file); err != nil {
			return Measure{}, err
		}
	}
	time.Sleep(200 * time.Millisecond)

	exe, err := os.Executable()
	if err != nil {
		return Measure{}, err
	}
	w := exec.CommandContext(rctx, exe)
	w.Env = append(os.Environ(), writerEnv+"="+strconv.Itoa(n), gateEnv+"="+fifo)
	w.Stdout, w.Stderr = out, os.Stderr
	cpu0 := cpuNow()
	if err := w.Start(); err != nil {
		return Measure{}, err
	}
	t0, err := release(rctx, fifo)
	if err != nil {
		_ = w.Process.Kill()
		_ = w.Wait()
		return Measure{}, err
	}
	werr := w.Wait()
	wg.Wait()
	m := Measure{CPUSeconds: (cpuNow() - cpu0).Seconds(), MinLines: n}
	if werr != nil {
		return m, fmt.Errorf("writer: %w", werr)
	}
	var slowest, fastest time.Time
	delivered := 0
	for i, r := range readers {
		if r.err != nil {
			return m, fmt.Errorf("tail %d after %d lines: %w", i, r.lines, r.err)
		}
		if r.last.After(slowest) {
			slowest = r.last
		}
		if fastest.IsZero() || r.last.Before(fastest) {
			fastest = r.last
		}
		m.MinLines = min(m.MinLines, r.lines)
		delivered += r.lines
		if r.lines == n {
			m.Complete++
		}
	}
	m.Seconds, m.FastestSeconds = slowest.Sub(t0).Seconds(), fastest.Sub(t0).Seconds()
	m.LinesPerSec = float64(n) / m.Seconds
	m.DeliveredPerSec = float64(delivered) / float64(s) / m.Seconds
	return m, nil
}

// waitOpen waits until process pid has file open.
func waitOpen(ctx context.Context, pid int, file string) error {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	for {
		des, err := os.ReadDir(fds)
		if err != nil {
			return fmt.Errorf("tail %d: %w", pid, err)
		}
		for _, de := range des {
			if t, err := os.Readlink(filepath.Join(fds, de.Name())); err == nil && t == file {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tail %d never opened %s: %w", pid, file, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
