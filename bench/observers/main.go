// Command observers benchmarks debug-stream sessions (docs/observers.md) as `nexus serve` runs
// them: a reaper owner, a process manager and a live registry with the debug-stream kind, its
// event logs on disk (state/live).
//
// Flood: a managed process (this program, run again as the writer) writes -lines lines of 100
// bytes to stdout as fast as it can; S debug-stream sessions follow it, each read by its own
// subscriber as the gateway's WebSocket stream does (Registry.Follow, Read of up to 512
// events, each encoded as its frame's JSON, Ack). Lines/s is N over the time from the writer's
// first line to the slowest subscriber's last one; every subscriber should get every line
// exactly once, in order (what it missed is counted). The baseline is what a user would
// otherwise run: the same writer with its stdout redirected to a file, followed by S
// `tail -n +1 -F` (GNU coreutils), each piped into a reader counting lines until it has N.
// Each S runs with -lines (200,000) and with -fit-lines (60,000), which fit in the process's
// ring of 65,536 lines: a session that falls behind a flood longer than the ring loses lines
// (EVENTS_MISSED), by design, so only the second size gives the rate of a complete delivery.
//
// Stalled (-only stalled): one session read by -stalled-readers subscribers beside one more
// follower that never reads: does every reader get every line, and is the stalled one let go?
//
// Memory: K idle debug-stream sessions (default options: the newest 100 lines, then live) on
// an idle managed process, each followed and read until it has caught up: Go heap, goroutine
// stacks and RSS per session.
//
//	go run ./bench/observers           # the figures of docs/BENCHMARKS.md
//	go run ./bench/observers -quick    # a smoke run
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
)

type config struct {
	lines    int
	fit      int
	subs     []int
	sessions int
	store    string
	encode   bool
	tail     string
	only     string
	modes    map[string]bool
	runs     int
	timeout  time.Duration

	stalledReaders int
	outDir         string
}

// Results is the JSON document written to bench/results/.
type Results struct {
	Command string           `json:"command"`
	Started string           `json:"started"`
	Seconds float64          `json:"seconds"`
	Machine benchenv.Machine `json:"machine"`
	Tail    string           `json:"tail"`
	Config  map[string]any   `json:"config"`
	Flood   []FloodRow       `json:"flood,omitempty"`
	Stalled []StalledRow     `json:"stalled,omitempty"`
	Memory  []MemoryRow      `json:"memory,omitempty"`
	Errors  []string         `json:"errors,omitempty"`
}

func main() {
	if ok, err := helper(); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "observers helper:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	var quick bool
	var subs string
	flag.IntVar(&cfg.lines, "lines", 200000, "flood: lines the process writes (100 bytes each)")
	flag.IntVar(&cfg.fit, "fit-lines", 60000, "flood: also rows of this many lines, which fit in the process's ring of 65,536 (no line can be lost); 0: none")
	flag.StringVar(&subs, "subs", "1,10,100", "flood: subscriber counts, one row each")
	flag.IntVar(&cfg.stalledReaders, "stalled-readers", 99, "stalled: readers of the one session beside the follower that never reads")
	flag.IntVar(&cfg.sessions, "sessions", 200, "memory: idle debug-stream sessions")
	flag.StringVar(&cfg.store, "store", "disk", "where the registry keeps events: disk (state/live, as nexus serve does) or memory")
	flag.BoolVar(&cfg.encode, "encode", true, "subscribers encode each event as its WebSocket frame's JSON, as the gateway does")
	flag.StringVar(&cfg.tail, "tail", "tail", "the tail program of the baseline (GNU coreutils)")
	flag.StringVar(&cfg.only, "only", "", "run only flood, stalled or memory")
	flag.IntVar(&cfg.runs, "runs", 3, "flood: runs of each row (nexus and tail -F in turn); the median run by lines/s is reported")
	modes := flag.String("modes", "log-line,batch", "flood: debug-stream sessions measured: log-line (an event per line), batch (option batch)")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "flood: give up on a row after this long")
	flag.BoolVar(&quick, "quick", false, "smoke run: -lines 20000 -fit-lines 0 -subs 1,10 -sessions 30 -runs 1")
	flag.StringVar(&cfg.outDir, "out", "bench/results", "directory for the JSON results")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run here")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if quick {
		if !set["lines"] {
			cfg.lines = 20000
		}
		if !set["fit-lines"] {
			cfg.fit = 0
		}
		if !set["subs"] {
			subs = "1,10"
		}
		if !set["sessions"] {
			cfg.sessions = 30
		}
		if !set["runs"] {
			cfg.runs = 1
		}
	}
	for _, f := range strings.Split(subs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-subs: %q is not a count", f)
		}
		cfg.subs = append(cfg.subs, n)
	}
	cfg.modes = map[string]bool{}
	for _, m := range strings.Split(*modes, ",") {
		if m != "log-line" && m != "batch" {
			return fmt.Errorf("-modes: %q is neither log-line nor batch", m)
		}
		cfg.modes[m] = true
	}
	if cfg.store != "disk" && cfg.store != "memory" {
		return fmt.Errorf("-store must be disk or memory, got %q", cfg.store)
	}
	if cfg.lines < 1 || cfg.lines > 99_999_999 || cfg.fit < 0 || cfg.fit > 99_999_999 {
		return fmt.Errorf("-lines and -fit-lines must be between 1 and 99,999,999")
	}
	sizes := []int{cfg.lines}
	if cfg.fit > 0 && cfg.fit != cfg.lines {
		sizes = append(sizes, cfg.fit)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	start := time.Now()
	res := &Results{Command: strings.Join(os.Args, " "), Started: start.UTC().Format(time.RFC3339), Machine: benchenv.Probe("bash"),
		Config: map[string]any{"lines": cfg.lines, "fitLines": cfg.fit, "lineBytes": lineLen, "subs": cfg.subs, "sessions": cfg.sessions, "store": cfg.store,
			"encode": cfg.encode, "runs": cfg.runs, "gomaxprocs": goruntime.GOMAXPROCS(0)}}
	if out, err := exec.CommandContext(ctx, cfg.tail, "--version").Output(); err == nil {
		res.Tail = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	// Memory first, in a process with nothing else in it yet.
	if cfg.only == "" || cfg.only == "memory" {
		for _, c := range []struct {
			name    string
			backlog int
		}{{"debug-stream on an idle process, nothing printed", 0}, {"debug-stream on an idle process, 100 lines printed", 100}} {
			row, err := memory(ctx, cfg, c.name, c.backlog)
			if err != nil {
				res.Errors = append(res.Errors, "memory "+c.name+": "+err.Error())
				continue
			}
			res.Memory = append(res.Memory, *row)
		}
		rows, err := memoryOthers(ctx, cfg)
		if err != nil {
			res.Errors = append(res.Errors, "memory of the other observers: "+err.Error())
		}
		res.Memory = append(res.Memory, rows...)
	}
	if cfg.only == "" || cfg.only == "flood" {
		// A small untimed round first: the binary, the tail and the page cache are warm.
		warm := max(cfg.lines/20, 1000)
		if _, err := floodNexus(ctx, cfg, 1, warm, true); err != nil {
			res.Errors = append(res.Errors, "warm-up nexus: "+err.Error())
		}
		if _, err := floodTail(ctx, cfg, 1, warm); err != nil {
			res.Errors = append(res.Errors, "warm-up tail: "+err.Error())
		}
		for _, n := range sizes {
			for _, s := range cfg.subs {
				res.Flood = append(res.Flood, floodRow(ctx, cfg, res, s, n))
			}
		}
	}
	if cfg.only == "" || cfg.only == "stalled" {
		for _, mode := range []struct {
			name  string
			batch bool
		}{{"log-line", false}, {"batch", true}} {
			if !cfg.modes[mode.name] {
				continue
			}
			row, err := floodStalled(ctx, cfg, cfg.stalledReaders, cfg.lines, mode.batch)
			if err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("stalled %s: %v", mode.name, err))
				continue
			}
			res.Stalled = append(res.Stalled, row)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.Machine.LoadEnd = benchenv.LoadAvg()
	report(res, cfg)
	path, err := benchenv.WriteResults(cfg.outDir, "observers", res)
	if err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}

// floodRow measures nexus (each mode), then tail -F, with s readers of n lines, cfg.runs times
// in turn; each is reported by its median run (by lines/s), so a burst of load on the machine
// during one run does not decide a ratio.
func floodRow(ctx context.Context, cfg config, res *Results, s, n int) FloodRow {
	row := FloodRow{Subscribers: s, Lines: n}
	modes := []struct {
		name  string
		batch bool
		m     *Measure
		runs  []Measure
	}{{"log-line", false, &row.Nexus, nil}, {"batch", true, &row.NexusBatch, nil}}
	var tails []Measure
	for range max(cfg.runs, 1) {
		for i := range modes {
			mode := &modes[i]
			if !cfg.modes[mode.name] {
				continue
			}
			x, err := floodNexus(ctx, cfg, s, n, mode.batch)
			if err != nil {
				res.Errors = append(res.Errors, fmt.Sprintf("nexus %s, %d lines, %d subscribers: %v", mode.name, n, s, err))
				continue
			}
			if x.Complete != s {
				res.Errors = append(res.Errors, fmt.Sprintf("nexus %s, %d lines, %d subscribers: %v: %d complete, fewest lines %d, %d lost, %d out of order, EVENTS_MISSED: %d from the process's ring, %d from the event log",
					mode.name, n, s, errIncomplete, x.Complete, x.MinLines, x.Lost, x.Disorder, x.RingMissed, x.LogMissed))
			}
			mode.runs = append(mode.runs, x)
		}
		t, err := floodTail(ctx, cfg, s, n)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("tail -F, %d lines, %d subscribers: %v", n, s, err))
			continue
		}
		tails = append(tails, t)
	}
	for _, mode := range modes {
		*mode.m = median(mode.runs)
	}
	row.Tail = median(tails)
	if row.Tail.LinesPerSec > 0 {
		row.Ratio = row.Nexus.LinesPerSec / row.Tail.LinesPerSec
		row.BatchRatio = row.NexusBatch.LinesPerSec / row.Tail.LinesPerSec
	}
	return row
}

// median is the run with the median lines/s (the lower middle one of an even count), with the
// rates of all runs.
func median(runs []Measure) Measure {
	if len(runs) == 0 {
		return Measure{}
	}
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b Measure) int { return cmp.Compare(a.LinesPerSec, b.LinesPerSec) })
	m := sorted[(len(sorted)-1)/2]
	for _, r := range runs {
		m.Runs = append(m.Runs, r.LinesPerSec)
	}
	return m
}

// kRates prints rates in thousands: "412/530/611".
func kRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = strconv.FormatFloat(r/1000, 'f', 0, 64)
	}
	return strings.Join(parts, "/")
}

func report(r *Results, cfg config) {
	m := r.Machine
	fmt.Printf("machine: %d CPU %s, %s, load %s -> %s; %s; store %s\n\n", m.NumCPU, m.CPUModel, m.Kernel, m.LoadStart, m.LoadEnd, r.Tail, cfg.store)
	if len(r.Flood) > 0 {
		fmt.Printf("flood: N lines of %d bytes from a managed process to S debug-stream subscribers, against S `tail -n +1 -F` of the same lines in a file\n", lineLen)
		fmt.Println("(lines/s = N / time from the first line written to the slowest reader's last; delivered/s counts only the lines the readers got;")
		fmt.Println(" CPU s: this process and its children; captured s: until the gateway had read every line of the process)")
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "N\tS\tevents\tnexus lines/s\tdelivered/s\t(s, fastest s, CPU s)\ttail -F lines/s\t(s, fastest s, CPU s)\tratio\tnexus complete\tlost\tcaptured s\tlines/event\truns: nexus, tail k lines/s\t")
		for _, row := range r.Flood {
			t := row.Tail
			for _, mode := range []struct {
				name  string
				x     Measure
				ratio float64
			}{{"log-line", row.Nexus, row.Ratio}, {"batch", row.NexusBatch, row.BatchRatio}} {
				x := mode.x
				lost := "0"
				if x.Lost > 0 {
					lost = fmt.Sprintf("%.1f%%", 100*float64(x.Lost)/float64(row.Lines*row.Subscribers))
				}
				fmt.Fprintf(w, "%d\t%d\t%s\t%.0f\t%.0f\t(%.2f, %.2f, %.2f)\t%.0f\t(%.2f, %.2f, %.2f)\t%.3f\t%d/%d\t%s\t%.2f\t%.1f\t%s; %s\t\n", row.Lines, row.Subscribers, mode.name,
					x.LinesPerSec, x.DeliveredPerSec, x.Seconds, x.FastestSeconds, x.CPUSeconds,
					t.LinesPerSec, t.Seconds, t.FastestSeconds, t.CPUSeconds, mode.ratio, x.Complete, row.Subscribers, lost, x.CaptureSeconds, x.LinesPerEvent, kRates(x.Runs), kRates(t.Runs))
			}
		}
		_ = w.Flush()
		fmt.Println()
	}
	if len(r.Stalled) > 0 {
		reportStalled(r.Stalled)
	}
	if len(r.Memory) > 0 {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		for _, mr := range r.Memory {
			fmt.Fprintf(w, "memory per idle session, %s (%d sessions)\t%.1f KB heap + %.1f KB stacks (%.1f goroutines); %.1f KB RSS\n",
				mr.Case, mr.Sessions, mr.HeapKB, mr.StackKB, mr.Goroutines, mr.RSSKB)
		}
		_ = w.Flush()
	}
	benchenv.PrintFooter(os.Stdout, r.Errors, r.Seconds)
}
