package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/index/source"
)

// Each measurement of the index runs in a child process of this program (-phase), so its peak
// RSS (VmHWM of /proc/self/status, read by the child itself) is its own and not the harness's.

// IngestResult is a full sync of the corpus into a new index.
type IngestResult struct {
	Seconds   float64 `json:"seconds"`
	Bytes     int64   `json:"bytes"`
	MBps      float64 `json:"mb_per_s"`
	Files     int     `json:"files"`
	Messages  int     `json:"messages"`
	ToolCalls int     `json:"tool_calls"`
	DBBytes   int64   `json:"db_bytes"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
}

// QueryResult is one query's latency over the runs.
type QueryResult struct {
	Kind  string  `json:"kind"`
	Query string  `json:"query"`
	Hits  int     `json:"hits"`
	P50MS float64 `json:"p50_ms"`
	P95MS float64 `json:"p95_ms"`
	// RgMS is ripgrep's median over the same raw files, RgHits its matching lines.
	RgMS   float64 `json:"rg_ms,omitempty"`
	RgHits int     `json:"rg_hits,omitempty"`
	Ratio  float64 `json:"rg_over_index,omitempty"`
}

// SearchResult is every query's latency, and sessions --limit 20's.
type SearchResult struct {
	Queries     []QueryResult `json:"queries"`
	AllP50MS    float64       `json:"all_p50_ms"`
	AllP95MS    float64       `json:"all_p95_ms"`
	SessionsP50 float64       `json:"sessions_limit20_p50_ms"`
	SessionsP95 float64       `json:"sessions_limit20_p95_ms"`
	PeakRSSMB   float64       `json:"peak_rss_mb"`
}

// WatchResult is how long an appended line takes to be found by a search while a watcher runs.
type WatchResult struct {
	Appends int     `json:"appends"`
	P50MS   float64 `json:"p50_ms"`
	P95MS   float64 `json:"p95_ms"`
	MaxMS   float64 `json:"max_ms"`
}

// IdleResult is the CPU a watcher uses while nothing changes.
type IdleResult struct {
	Files      int     `json:"files"`
	Dirs       int     `json:"dirs"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent"`
}

// peakRSSMB is this process's peak resident set, from the kernel.
func peakRSSMB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

func syncOptions(c *Corpus) index.SyncOptions {
	roots := map[string][]string{}
	var names []string
	for name, st := range c.Sources {
		roots[name] = st.Roots
		names = append(names, name)
	}
	slices.Sort(names)
	// A home with nothing in it: only the corpus's roots are read.
	return index.SyncOptions{Sources: names, Roots: roots, Env: &source.Env{Home: "/nonexistent"}}
}

// phaseIngest builds a new index of the corpus at db.
func phaseIngest(ctx context.Context, c *Corpus, db string) (any, error) {
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	ix, err := index.Open(ctx, db, index.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ix.Close() }()
	t0 := time.Now()
	sum, err := ix.Sync(ctx, syncOptions(c))
	if err != nil {
		return nil, err
	}
	el := time.Since(t0).Seconds()
	if len(sum.Errors) > 0 {
		return nil, fmt.Errorf("sync: %d files failed, first %s: %s", len(sum.Errors), sum.Errors[0].Path, sum.Errors[0].Error)
	}
	var size int64
	for _, p := range []string{db, db + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			size += fi.Size()
		}
	}
	return IngestResult{Seconds: el, Bytes: sum.Bytes, MBps: float64(sum.Bytes) / 1e6 / el, Files: sum.Files,
		Messages: sum.Messages, ToolCalls: sum.ToolCalls, DBBytes: size, PeakRSSMB: peakRSSMB()}, nil
}

func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return float64(s[i]) / 1e6
}

// phaseSearch runs every suggested query runs times (after one warm-up) on the index at db.
func phaseSearch(ctx context.Context, c *Corpus, db string, runs int) (any, error) {
	ix, err := index.Open(ctx, db, index.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ix.Close() }()
	var res SearchResult
	var all []time.Duration
	for _, q := range c.Suggested {
		hits, err := ix.Search(ctx, index.SearchOptions{Query: q.Text})
		if err != nil {
			return nil, fmt.Errorf("search %q: %w", q.Text, err)
		}
		var ds []time.Duration
		for range runs {
			t0 := time.Now()
			if _, err := ix.Search(ctx, index.SearchOptions{Query: q.Text}); err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(t0))
		}
		all = append(all, ds...)
		res.Queries = append(res.Queries, QueryResult{Kind: q.Kind, Query: q.Text, Hits: len(hits), P50MS: percentile(ds, 0.5), P95MS: percentile(ds, 0.95)})
	}
	res.AllP50MS, res.AllP95MS = percentile(all, 0.5), percentile(all, 0.95)
	var ds []time.Duration
	for range runs {
		t0 := time.Now()
		list, err := ix.Sessions(ctx, index.SessionsOptions{Limit: 20})
		if err != nil {
			return nil, err
		}
		if len(list) != 20 {
			return nil, fmt.Errorf("sessions: %d, want 20", len(list))
		}
		ds = append(ds, time.Since(t0))
	}
	res.SessionsP50, res.SessionsP95 = percentile(ds, 0.5), percentile(ds, 0.95)
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// phaseWatch runs a watcher on the corpus's index until its stdin closes; it says "ready" on
// stdout once its first sync is done.
func phaseWatch(ctx context.Context, c *Corpus, db string) error {
	ix, err := index.Open(ctx, db, index.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = ix.Close() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	first := true
	return ix.Watch(ctx, index.WatchOptions{SyncOptions: syncOptions(c), OnSync: func(_ *index.Summary, err error) {
		if err != nil {
			fmt.Fprintln(os.Stderr, "watch:", err)
		}
		if first {
			first = false
			fmt.Println("ready")
		}
	}})
}

// child is a phase running in a child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startPhase(ctx context.Context, phase string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, append([]string{"-phase", phase}, args...)...) //nolint:gosec // this program
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &child{cmd: cmd, stdin: in, out: bufio.NewReader(out)}, nil
}

// runPhase runs a phase to its end and decodes its JSON result into v.
func runPhase(ctx context.Context, v any, phase string, args ...string) error {
	ch, err := startPhase(ctx, phase, args...)
	if err != nil {
		return err
	}
	_ = ch.stdin.Close()
	b, err := io.ReadAll(ch.out)
	if err != nil {
		return err
	}
	if err := ch.cmd.Wait(); err != nil {
		return fmt.Errorf("phase %s: %w", phase, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("phase %s: %w (%q)", phase, err, b)
	}
	return nil
}

// measureWatch appends a line with a new word to a transcript n times while a watcher runs,
// and times each until a search finds it.
func measureWatch(ctx context.Context, c *Corpus, db string, n int) (WatchResult, error) {
	ch, err := startPhase(ctx, "watch", "-corpus", c.Dir, "-db", db)
	if err != nil {
		return WatchResult{}, err
	}
	defer func() { _ = ch.stdin.Close(); _ = ch.cmd.Wait() }()
	if line, err := ch.out.ReadString('\n'); err != nil || line != "ready\n" {
		return WatchResult{}, fmt.Errorf("watcher: %q: %w", line, err)
	}
	ix, err := index.Open(ctx, db, index.Options{})
	if err != nil {
		return WatchResult{}, err
	}
	defer func() { _ = ix.Close() }()
	// A new Claude Code transcript beside the corpus's, grown by one user line each time and
	// removed at the end, so the corpus stays as generated.
	roots := c.Sources["claude-code"].Roots
	if len(roots) == 0 {
		return WatchResult{}, errors.New("the corpus has no claude-code root")
	}
	path := filepath.Join(roots[0], "-watch-probe", "watch-probe.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return WatchResult{}, err
	}
	defer func() { _ = os.RemoveAll(filepath.Dir(path)) }()
	var ds []time.Duration
	for i := range n {
		word := fmt.Sprintf("watchprobe%dx%d", time.Now().UnixNano(), i)
		line := fmt.Sprintf(`{"type":"user","sessionId":"watch-probe","uuid":"probe-%s","timestamp":%q,"message":{"role":"user","content":"%s"}}`+"\n",
			word, time.Now().UTC().Format(time.RFC3339Nano), word)
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600) //nolint:gosec // the probe's own file
		if err != nil {
			return WatchResult{}, err
		}
		t0 := time.Now()
		_, err = f.WriteString(line)
		_ = f.Close()
		if err != nil {
			return WatchResult{}, err
		}
		for {
			hits, err := ix.Search(ctx, index.SearchOptions{Query: word})
			if err != nil {
				return WatchResult{}, err
			}
			if len(hits) > 0 {
				break
			}
			if time.Since(t0) > time.Minute {
				return WatchResult{}, fmt.Errorf("append %d not found after a minute", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
		ds = append(ds, time.Since(t0))
	}
	return WatchResult{Appends: n, P50MS: percentile(ds, 0.5), P95MS: percentile(ds, 0.95), MaxMS: percentile(ds, 1)}, nil
}

// idleCorpus writes files small Claude Code sessions over dirs project directories.
func idleCorpus(dir string, files, dirs int) error {
	for i := range files {
		d := filepath.Join(dir, fmt.Sprintf("-proj-%03d", i%dirs))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		id := fmt.Sprintf("idle-%05d", i)
		body := fmt.Sprintf(`{"type":"user","sessionId":%q,"uuid":"u1","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"question %d"}}`+"\n"+
			`{"type":"assistant","sessionId":%q,"uuid":"a1","timestamp":"2026-01-01T00:00:01Z","message":{"id":"m-%s","role":"assistant","content":[{"type":"text","text":"answer %d"}]}}`+"\n",
			id, i, id, id, i)
		if err := os.WriteFile(filepath.Join(d, id+".jsonl"), []byte(body), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// cpuSeconds is a process's user + system CPU time so far.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	const hz = 100 // USER_HZ on Linux
	return (ut + st) / hz, nil
}

// measureIdle runs a watcher over files small sessions and measures its CPU over seconds of
// nothing changing.
func measureIdle(ctx context.Context, work string, files, dirs int, seconds float64) (IdleResult, error) {
	dir := filepath.Join(work, "idle")
	if err := os.RemoveAll(dir); err != nil {
		return IdleResult{}, err
	}
	root := filepath.Join(dir, "projects")
	if err := idleCorpus(root, files, dirs); err != nil {
		return IdleResult{}, err
	}
	c := &Corpus{Dir: dir, Sources: map[string]*SourceStats{"claude-code": {Roots: []string{root}}}}
	b, err := json.Marshal(c)
	if err != nil {
		return IdleResult{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, CorpusFile), b, 0o600); err != nil {
		return IdleResult{}, err
	}
	ch, err := startPhase(ctx, "watch", "-corpus", dir, "-db", filepath.Join(dir, "idle.db"))
	if err != nil {
		return IdleResult{}, err
	}
	defer func() { _ = ch.stdin.Close(); _ = ch.cmd.Wait() }()
	if line, err := ch.out.ReadString('\n'); err != nil || line != "ready\n" {
		return IdleResult{}, fmt.Errorf("watcher: %q: %w", line, err)
	}
	pid := ch.cmd.Process.Pid
	c0, err := cpuSeconds(pid)
	if err != nil {
		return IdleResult{}, err
	}
	t0 := time.Now()
	select {
	case <-time.After(time.Duration(seconds * float64(time.Second))):
	case <-ctx.Done():
		return IdleResult{}, ctx.Err()
	}
	c1, err := cpuSeconds(pid)
	if err != nil {
		return IdleResult{}, err
	}
	el := time.Since(t0).Seconds()
	return IdleResult{Files: files, Dirs: dirs, Seconds: el, CPUSeconds: c1 - c0, CPUPercent: 100 * (c1 - c0) / el}, nil
}

// phase runs one measurement in this (child) process and prints its result as JSON.
func phase(ctx context.Context, name, corpusDir, db string, runs int) error {
	c, err := LoadCorpus(corpusDir)
	if err != nil {
		return err
	}
	var res any
	switch name {
	case "ingest":
		res, err = phaseIngest(ctx, c, db)
	case "search":
		res, err = phaseSearch(ctx, c, db, runs)
	case "watch":
		return phaseWatch(ctx, c, db)
	default:
		return fmt.Errorf("unknown phase %q", name)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// Results is the JSON document written to bench/results/.
type Results struct {
	Command string            `json:"command"`
	Started string            `json:"started"`
	Machine benchenv.Machine  `json:"machine"`
	Corpus  map[string]any    `json:"corpus"`
	Ingest  IngestResult      `json:"ingest"`
	Search  SearchResult      `json:"search"`
	Watch   WatchResult       `json:"watch"`
	Idle    IdleResult        `json:"idle"`
	Notes   map[string]string `json:"notes,omitempty"`
}

func runIndex(ctx context.Context, cfg config, c *Corpus, w io.Writer) error {
	started := time.Now()
	work := cfg.work
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "nexus-history-bench-"); err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(work) }()
	}
	db := filepath.Join(work, "state", index.FileName)
	res := Results{Command: strings.Join(os.Args, " "), Started: started.UTC().Format(time.RFC3339), Machine: benchenv.Probe("")}
	tot := c.Total()
	res.Corpus = map[string]any{"dir": c.Dir, "bytes": tot.Bytes, "files": tot.Files, "messages": tot.Messages, "tool_calls": tot.ToolCalls}
	fmt.Fprintf(w, "\nindex: full sync of %.0f MB (%d files) into %s\n", float64(tot.Bytes)/1e6, tot.Files, db)
	if err := runPhase(ctx, &res.Ingest, "ingest", "-corpus", c.Dir, "-db", db); err != nil {
		return err
	}
	in := res.Ingest
	fmt.Fprintf(w, "  %.1f s, %.1f MB/s, %d messages, %d tool calls, index %.0f MB, peak RSS %.0f MB\n",
		in.Seconds, in.MBps, in.Messages, in.ToolCalls, float64(in.DBBytes)/1e6, in.PeakRSSMB)
	if err := runPhase(ctx, &res.Search, "search", "-corpus", c.Dir, "-db", db, "-search-runs", strconv.Itoa(cfg.searchRuns)); err != nil {
		return err
	}
	rg, err := ripgrep(cfg)
	if err != nil {
		return err
	}
	runs := max(cfg.runs, 1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nkind\tquery\tindex hits\tp50 ms\tp95 ms\trg lines\trg ms (median of %d)\trg / index p50\t\n", runs)
	for i := range res.Search.Queries {
		q := &res.Search.Queries[i]
		var walls []time.Duration
		for range runs {
			r, err := RipgrepRun(ctx, rg, c.Roots(), q.Query)
			if err != nil {
				return err
			}
			walls = append(walls, r.Wall)
			q.RgHits = r.Hits
		}
		q.RgMS = percentile(walls, 0.5)
		if q.P50MS > 0 {
			q.Ratio = q.RgMS / q.P50MS
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%d\t%.0f\t%.0f×\t\n", q.Kind, q.Query, q.Hits, q.P50MS, q.P95MS, q.RgHits, q.RgMS, q.Ratio)
	}
	_ = tw.Flush()
	s := res.Search
	fmt.Fprintf(w, "all queries: p50 %.2f ms, p95 %.2f ms; sessions --limit 20: p50 %.2f ms, p95 %.2f ms; peak RSS %.0f MB\n",
		s.AllP50MS, s.AllP95MS, s.SessionsP50, s.SessionsP95, s.PeakRSSMB)
	if res.Watch, err = measureWatch(ctx, c, db, cfg.watchN); err != nil {
		return err
	}
	fmt.Fprintf(w, "watch: an appended line found by search after p50 %.0f ms, p95 %.0f ms, max %.0f ms (%d appends)\n",
		res.Watch.P50MS, res.Watch.P95MS, res.Watch.MaxMS, res.Watch.Appends)
	if res.Idle, err = measureIdle(ctx, work, cfg.idleFiles, cfg.idleDirs, cfg.idleSeconds); err != nil {
		return err
	}
	fmt.Fprintf(w, "idle watcher over %d files in %d directories: %.3f CPU s in %.0f s = %.3f %% CPU\n",
		res.Idle.Files, res.Idle.Dirs, res.Idle.CPUSeconds, res.Idle.Seconds, res.Idle.CPUPercent)
	path, err := benchenv.WriteResults(cfg.out, "history", res)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "results: %s (%.0f s)\n", path, time.Since(started).Seconds())
	return nil
}
