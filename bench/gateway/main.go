// Command gateway benchmarks the nexus gateway against the alternatives it replaces, in one run:
// output throughput to 1 and N WebSocket subscribers against reading the PTY directly (and what
// a subscriber that stops reading costs the others), keystroke-to-echo latency over a WebSocket against a direct PTY and tmux, and the gateway's
// memory per idle terminal session. It prints a table and writes JSON to bench/results/.
//
//	go run ./bench/gateway            # the figures of docs/BENCHMARKS.md
//	go run ./bench/gateway -quick     # a smoke run in well under a minute
package main

import (
	"github.com/nexus-run/nexus/bench/internal/benchenv"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

type config struct {
	mb          int
	bytes       int64
	subs        int
	samples     int
	tmuxSamples int
	sessions    int
	closed      int
	closedKiB   int
	quick       bool
	shell       string
	contentType abi.ContentType
	only        map[string]bool
	store       string
	biglog      bool
	outDir      string
	timeout     time.Duration
}

// Results is the JSON document written to bench/results/.
type Results struct {
	Command    string          `json:"command"`
	Started    string          `json:"started"`
	Seconds    float64         `json:"seconds"`
	Machine    Machine         `json:"machine"`
	Config     map[string]any  `json:"config"`
	Throughput []ThroughputRow `json:"throughput,omitempty"`
	Latency    []LatencyRow    `json:"latency,omitempty"`
	Memory     *MemoryResult   `json:"memory,omitempty"`
	Closed     *ClosedResult   `json:"closed,omitempty"`
	Errors     []string        `json:"errors,omitempty"`
}

func main() {
	if dir := os.Getenv(closedChildEnv); dir != "" {
		if err := closedChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "bench: closed child:", err)
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
	var only, ct, cpuprofile, steps string
	flag.IntVar(&cfg.mb, "mb", 100, "output throughput: megabytes (10^6 bytes) the shell prints")
	flag.IntVar(&cfg.subs, "subs", 50, "output throughput: WebSocket subscribers of the fan-out case (a 1-subscriber case always runs)")
	flag.IntVar(&cfg.samples, "samples", 2000, "latency: keystroke samples per path")
	flag.IntVar(&cfg.tmuxSamples, "tmux-samples", 300, "latency: samples of the tmux path (each costs two process spawns and ~10ms polling)")
	flag.IntVar(&cfg.sessions, "sessions", 500, "memory: idle terminal sessions to open")
	flag.IntVar(&cfg.closed, "closed", 300, "closed: retained closed terminal sessions a gateway starts over (against none)")
	flag.IntVar(&cfg.closedKiB, "closed-kib", 600, "closed: KiB of output each closed session's log holds")
	flag.BoolVar(&cfg.quick, "quick", false, "smoke run: -mb 10 -subs 5 -samples 200 -tmux-samples 30 -sessions 50 unless given")
	flag.StringVar(&cfg.shell, "shell", "bash", "shell of every terminal (gateway, direct PTY, tmux)")
	flag.StringVar(&ct, "content-type", "ansi", "content type the WebSocket subscribers ask for: ansi or raw")
	flag.StringVar(&only, "only", "throughput,latency,memory,closed", "comma-separated benchmarks to run")
	flag.StringVar(&cfg.store, "store", "disk", "where the registry keeps sessions and events: disk (state/live, as nexus serve does) or memory")
	flag.BoolVar(&cfg.biglog, "biglog", true, "also run the comparison rows whose event log holds the whole output, so flow control never engages")
	flag.StringVar(&cfg.outDir, "out", filepath.Join("bench", "results"), "directory for the JSON results")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "limit of each throughput run")
	flag.StringVar(&steps, "steps", "", "throughput: run only these comma-separated rows (ceiling, runtime, ws-1, ws-N, frames-1, frames-N, stalled, ws-1-biglog, frames-N-biglog; ws-N-biglog runs only when named here)")
	flag.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if cfg.quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, p *int, v int) {
			if !set[name] {
				*p = v
			}
		}
		def("mb", &cfg.mb, 10)
		def("subs", &cfg.subs, 5)
		def("samples", &cfg.samples, 200)
		def("tmux-samples", &cfg.tmuxSamples, 30)
		def("sessions", &cfg.sessions, 50)
		def("closed", &cfg.closed, 30)
	}
	if cfg.mb <= 0 || cfg.subs <= 0 || cfg.samples <= 0 || cfg.sessions <= 0 || cfg.tmuxSamples < 0 || cfg.closed <= 0 || cfg.closedKiB <= 0 {
		return errors.New("-mb, -subs, -samples, -sessions, -closed and -closed-kib must be positive")
	}
	cfg.bytes = int64(cfg.mb) * 1_000_000
	cfg.contentType = abi.ContentType(ct)
	if cfg.contentType != abi.ContentANSI && cfg.contentType != abi.ContentRaw {
		return fmt.Errorf("-content-type must be ansi or raw, got %q", ct)
	}
	if cfg.store != "disk" && cfg.store != "memory" {
		return fmt.Errorf("-store must be disk or memory, got %q", cfg.store)
	}
	cfg.only = map[string]bool{}
	for _, o := range strings.Split(only, ",") {
		switch o = strings.TrimSpace(o); o {
		case "throughput", "latency", "memory", "closed":
			cfg.only[o] = true
		case "":
		default:
			return fmt.Errorf("-only: unknown benchmark %q (want throughput, latency, memory, closed)", o)
		}
	}
	sh, err := shellPath(cfg.shell)
	if err != nil {
		return err
	}
	cfg.shell = sh

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile) //nolint:gosec // the path the user asked for
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	res := Results{
		Command: "go run ./bench/gateway " + strings.Join(os.Args[1:], " "),
		Started: time.Now().UTC().Format(time.RFC3339),
		Machine: machine(cfg.shell),
		Config: map[string]any{"mb": cfg.mb, "subs": cfg.subs, "samples": cfg.samples, "tmuxSamples": cfg.tmuxSamples,
			"sessions": cfg.sessions, "closed": cfg.closed, "closedKiB": cfg.closedKiB, "quick": cfg.quick, "shell": cfg.shell, "contentType": cfg.contentType,
			"gomaxprocs": goruntime.GOMAXPROCS(0), "store": cfg.store},
	}
	res.Command = strings.TrimSpace(res.Command)
	t0 := time.Now()
	fail := func(what string, err error) {
		msg := fmt.Sprintf("%s: %v", what, err)
		res.Errors = append(res.Errors, msg)
		fmt.Fprintln(os.Stderr, "bench: FAILED", msg)
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "bench: %s "+format+"\n", append([]any{time.Since(t0).Round(time.Millisecond)}, a...)...)
	}

	if cfg.only["throughput"] && ctx.Err() == nil {
		var ceiling float64
		type step struct {
			name string
			fn   func() (ThroughputRow, error)
			// optIn steps run only when -steps names them.
			optIn bool
		}
		ws := func(subs int, limits live.LogLimits, mode consumer, label string) func() (ThroughputRow, error) {
			return func() (ThroughputRow, error) { return throughputWS(ctx, cfg, subs, limits, mode, label) }
		}
		const (
			viaClientLabel = "nexus gateway, WebSocket, internal/client decoding every event"
			framesLabel    = "nexus gateway, WebSocket, frames read without JSON decoding"
			stalledLabel   = "nexus gateway, WebSocket, internal/client, next to a subscriber that stops reading"
			// The default log (8192 events / 8 MiB) with flow control is what `nexus serve` runs.
			// The biglog rows hold the whole output, so no subscriber is ever half a ring behind
			// and output never waits: the difference is what flow control costs.
			bigLabel = ", log raised to hold the whole output (flow control never engages)"
		)
		dflt := live.LogLimits{}
		big := live.LogLimits{Events: 1 << 22, Bytes: int(min(cfg.bytes*2+64<<20, 1<<31-1))}
		n := cfg.subs
		tsteps := []step{
			{name: "ceiling", fn: func() (ThroughputRow, error) { return ceilingMedian(ctx, cfg, 3) }},
			{name: "runtime", fn: func() (ThroughputRow, error) { return throughputRuntime(ctx, cfg) }},
			{name: "ws-1", fn: ws(1, dflt, viaClient, viaClientLabel)},
			{name: fmt.Sprintf("ws-%d", n), fn: ws(n, dflt, viaClient, viaClientLabel)},
			{name: "frames-1", fn: ws(1, dflt, framesOnly, framesLabel)},
			{name: fmt.Sprintf("frames-%d", n), fn: ws(n, dflt, framesOnly, framesLabel)},
			{name: "stalled", fn: func() (ThroughputRow, error) { return throughputStalled(ctx, cfg, stalledLabel) }},
		}
		if cfg.biglog {
			tsteps = append(tsteps,
				step{name: "ws-1-biglog", fn: ws(1, big, viaClient, viaClientLabel+bigLabel)},
				step{name: fmt.Sprintf("frames-%d-biglog", n), fn: ws(n, big, framesOnly, framesLabel+bigLabel)},
				// N decoding clients take ~40 s at the defaults and all read at the same pace, so
				// this comparison is left out unless asked for.
				step{name: fmt.Sprintf("ws-%d-biglog", n), fn: ws(n, big, viaClient, viaClientLabel+bigLabel), optIn: true})
		}
		want := map[string]bool{}
		for _, s := range strings.Split(steps, ",") {
			if s = strings.TrimSpace(s); s != "" {
				want[strings.ReplaceAll(s, "-N", fmt.Sprintf("-%d", cfg.subs))] = true
			}
		}
		for _, st := range tsteps {
			if ctx.Err() != nil {
				break
			}
			if (len(want) > 0 || st.optIn) && !want[st.name] {
				continue
			}
			logf("throughput %s: %d MB ...", st.name, cfg.mb)
			row, err := st.fn()
			if err != nil {
				fail("throughput "+st.name, err)
				if row.Path == "" {
					continue
				}
			}
			if st.name == "ceiling" {
				ceiling = row.PerSubMBps.Mean
			} else if ceiling > 0 {
				row.RatioPerSub = row.PerSubMBps.Mean / ceiling
				row.RatioAggregate = row.AggregateMBps / ceiling
			}
			logf("  %.1f MB/s per subscriber, %.1f MB/s aggregate, %d/%d complete, %d missed events, longest pause %.2fs",
				row.PerSubMBps.Mean, row.AggregateMBps, row.Complete, row.Subscribers, row.MissedEvents, row.MaxGapSeconds)
			if st := row.Stalled; st != nil {
				logf("  %s", st.describe(cfg.bytes))
			}
			res.Throughput = append(res.Throughput, row)
		}
	}
	if cfg.only["latency"] && ctx.Err() == nil {
		var floor LatencyRow
		for _, st := range []struct {
			name string
			fn   func() (LatencyRow, error)
		}{
			{"pty", func() (LatencyRow, error) { return latencyPTY(ctx, cfg) }},
			{"websocket", func() (LatencyRow, error) { return latencyWS(ctx, cfg) }},
			{"tmux", func() (LatencyRow, error) {
				if cfg.tmuxSamples == 0 {
					return LatencyRow{Path: "tmux send-keys + capture-pane polling (10ms)", Skipped: true, Note: "-tmux-samples 0"}, nil
				}
				return latencyTmux(ctx, cfg)
			}},
		} {
			if ctx.Err() != nil {
				break
			}
			logf("latency %s ...", st.name)
			row, err := st.fn()
			if err != nil {
				fail("latency "+st.name, err)
				continue
			}
			if st.name == "pty" {
				floor = row
			} else if floor.P50ms > 0 && !row.Skipped {
				row.RatioP50 = row.P50ms / floor.P50ms
				row.RatioP99 = row.P99ms / floor.P99ms
			}
			if !row.Skipped {
				logf("  p50 %.3fms p99 %.3fms", row.P50ms, row.P99ms)
			}
			res.Latency = append(res.Latency, row)
		}
	}
	if cfg.only["memory"] && ctx.Err() == nil {
		logf("memory: opening %d idle terminal sessions ...", cfg.sessions)
		m, err := memoryIdle(ctx, cfg)
		if err != nil {
			fail("memory", err)
		} else {
			res.Memory = &m
			logf("  %.1f KiB heap, %.1f KiB RSS per session; shutdown in %.1fs, %d leftover processes",
				m.HeapInusePerSession/1024, m.RSSPerSession/1024, m.ShutdownSeconds, m.LeftoverProcesses)
		}
	}
	if cfg.only["closed"] && ctx.Err() == nil {
		logf("closed: a gateway starting over 0 and %d closed sessions of %d KiB each ...", cfg.closed, cfg.closedKiB)
		c, err := closedRestart(ctx, cfg.closed, cfg.closedKiB)
		if err != nil {
			fail("closed", err)
		} else {
			res.Closed = &c
			logf("  RSS %.2fx, live heap %.2fx of an empty state directory", c.RSSRatio, c.HeapRatio)
		}
	}
	if ctx.Err() != nil {
		fail("run", ctx.Err())
	}
	res.Seconds = time.Since(t0).Seconds()
	res.Machine.LoadEnd = loadavg()

	printTables(os.Stdout, cfg, &res)
	path, err := writeResults(cfg.outDir, &res)
	if err != nil {
		return err
	}
	fmt.Printf("\nresults: %s\n", path)
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d benchmark(s) failed", len(res.Errors))
	}
	return nil
}

func writeResults(dir string, res *Results) (string, error) {
	return benchenv.WriteResults(dir, "gateway", res)
}

func printTables(w io.Writer, cfg config, res *Results) {
	m := res.Machine
	fmt.Fprintf(w, "\nnexus gateway benchmarks — %s\n", res.Started)
	fmt.Fprintf(w, "machine: %d CPUs (%s), GOMAXPROCS %d, %s, %s, %s\n", m.NumCPU, m.CPUModel, goruntime.GOMAXPROCS(0), m.GoVersion, m.Kernel, m.Shell)
	fmt.Fprintf(w, "load average: %s at start, %s at end (anything near or above %d means other work shared the CPUs)\n", m.LoadStart, m.LoadEnd, m.NumCPU)
	if len(res.Throughput) > 0 {
		fmt.Fprintf(w, "\n1. Output throughput: the shell prints %d MB (%s); MB = 10^6 bytes; contentType %s\n",
			cfg.mb, strings.TrimSpace(strings.Split(outputCommand(cfg.bytes), ";")[0]), cfg.contentType)
		fmt.Fprintln(w, "WebSocket subscribers are flow-control followers. \"shell done\": when the runtime held the whole output;")
		fmt.Fprintln(w, "\"longest pause\": the longest wait between two data events at any subscriber.")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "subs\tper-sub MB/s (min/mean/max)\taggregate MB/s\tvs ceiling (per-sub / aggr.)\tseconds\tshell done s\treceived\tcomplete\tsubs w/ EVENTS_MISSED\tmissed events\tlongest pause s\t path")
		for _, r := range res.Throughput {
			per := fmt.Sprintf("%.1f", r.PerSubMBps.Mean)
			if r.Subscribers > 1 {
				per = fmt.Sprintf("%.1f / %.1f / %.1f", r.PerSubMBps.Min, r.PerSubMBps.Mean, r.PerSubMBps.Max)
			}
			ratio := fmt.Sprintf("%.2f / %.2f", r.RatioPerSub, r.RatioAggregate)
			recv := 100 * float64(r.ReceivedBytes) / float64(r.ExpectedBytes*int64(r.Subscribers))
			path := r.Path
			if r.LogLimits != nil {
				path += fmt.Sprintf(" [log %d events / %d MiB]", r.LogLimits.Events, r.LogLimits.Bytes>>20)
			}
			if r.Note != "" {
				path += " — " + r.Note
			}
			gap, shell := "-", "-"
			if r.MaxGapSeconds > 0 {
				gap = fmt.Sprintf("%.2f", r.MaxGapSeconds)
			}
			if r.ProducerSeconds > 0 {
				shell = fmt.Sprintf("%.2f", r.ProducerSeconds)
			}
			fmt.Fprintf(tw, "%d\t%s\t%.1f\t%s\t%.2f\t%s\t%.1f%%\t%d/%d\t%d\t%d\t%s\t %s\n", r.Subscribers, per, r.AggregateMBps, ratio,
				r.Seconds, shell, recv, r.Complete, r.Subscribers, r.SubsWithMisses, r.MissedEvents, gap, path)
		}
		_ = tw.Flush()
		for _, r := range res.Throughput {
			if r.Stalled != nil {
				fmt.Fprintf(w, "stalled-follower row: the figures are the reading subscriber's; %s\n", r.Stalled.describe(r.ExpectedBytes))
			}
		}
	}
	if len(res.Latency) > 0 {
		fmt.Fprintf(w, "\n2. Keystroke-to-echo latency: one byte in, its echo out (`stty raw -echo; cat`), %d samples (tmux %d) after %d warm-up\n",
			cfg.samples, min(cfg.samples, cfg.tmuxSamples), warmup)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "p50 ms\tp90 ms\tp99 ms\tmax ms\tmean ms\tp50 / p99 vs PTY\tsamples\t path")
		for _, r := range res.Latency {
			if r.Skipped {
				fmt.Fprintf(tw, "-\t-\t-\t-\t-\t-\t0\t %s (skipped: %s)\n", r.Path, r.Note)
				continue
			}
			ratio := "1 / 1"
			if r.RatioP50 > 0 {
				ratio = fmt.Sprintf("%.1fx / %.1fx", r.RatioP50, r.RatioP99)
			}
			fmt.Fprintf(tw, "%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s\t%d\t %s\n", r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.MeanMs, ratio, r.Samples, r.Path)
		}
		_ = tw.Flush()
	}
	if mr := res.Memory; mr != nil {
		kib := func(v float64) string { return fmt.Sprintf("%.1f KiB", v/1024) }
		mib := func(v uint64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }
		fmt.Fprintf(w, "\n3. Gateway memory per idle terminal session: %d sessions open (shells excluded), after GC\n", mr.Sessions)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "measure\tbefore\tafter\tper session\t")
		fmt.Fprintf(tw, "Go HeapInuse\t%s\t%s\t%s\t\n", mib(mr.Before.HeapInuse), mib(mr.After.HeapInuse), kib(mr.HeapInusePerSession))
		fmt.Fprintf(tw, "Go HeapAlloc (live objects)\t%s\t%s\t%s\t\n", mib(mr.Before.HeapAlloc), mib(mr.After.HeapAlloc), kib(mr.HeapAllocPerSession))
		fmt.Fprintf(tw, "Go StackInuse\t%s\t%s\t%s\t\n", mib(mr.Before.StackInuse), mib(mr.After.StackInuse), kib(mr.StackInusePerSession))
		fmt.Fprintf(tw, "process VmRSS\t%s\t%s\t%s\t\n", mib(mr.Before.RSS), mib(mr.After.RSS), kib(mr.RSSPerSession))
		fmt.Fprintf(tw, "goroutines\t%d\t%d\t%.1f\t\n", mr.Before.Goroutines, mr.After.Goroutines, mr.GoroutinesPerSession)
		fmt.Fprintf(tw, "OS threads\t%d\t%d\t%.1f\t\n", mr.Before.Threads, mr.After.Threads, mr.ThreadsPerSession)
		fmt.Fprintf(tw, "open file descriptors\t%d\t%d\t%.1f\t\n", mr.Before.FDs, mr.After.FDs, mr.FDsPerSession)
		fmt.Fprintf(tw, "(excluded) shell VmRSS\t\t\t%s\t\n", kib(mr.ShellRSSPerSession))
		_ = tw.Flush()
		fmt.Fprintf(w, "created %d sessions in %.1fs (4 concurrent API clients); closed %d one at a time through the API, %.0f ms each;\n",
			mr.Sessions, mr.OpenSeconds, mr.ClosedViaAPI, mr.CloseMsEach)
		fmt.Fprintf(w, "Registry.Shutdown (the SIGTERM path) closed the other %d in %.1fs; leftover processes: %d\n",
			mr.Sessions-mr.ClosedViaAPI, mr.ShutdownSeconds, mr.LeftoverProcesses)
	}
	if cr := res.Closed; cr != nil {
		mib := func(v uint64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }
		fmt.Fprintf(w, "\n4. Gateway memory at start over retained closed terminal sessions (%d KiB of output each), a fresh process each\n", cr.KiBEach)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "closed sessions	files	start	VmRSS at ready	HeapAlloc at ready	VmRSS after GC	HeapAlloc after GC	")
		for _, r := range cr.Rows {
			fmt.Fprintf(tw, "%d	%.1f MiB	%.2fs	%s	%s	%s	%s	\n", r.Closed, r.LogMiB, r.StartSec, mib(r.AtReady.RSS), mib(r.AtReady.HeapAlloc), mib(r.AfterGC.RSS), mib(r.AfterGC.HeapAlloc))
		}
		_ = tw.Flush()
		fmt.Fprintf(w, "over %d closed sessions against none: VmRSS at ready %.2fx, live heap after GC %.2fx\n", cr.Rows[len(cr.Rows)-1].Closed, cr.RSSRatio, cr.HeapRatio)
	}
	benchenv.PrintFooter(w, res.Errors, res.Seconds)
}

// Machine is the shared machine description.
type Machine = benchenv.Machine

func loadavg() string { return benchenv.LoadAvg() }

func machine(shell string) Machine { return benchenv.Probe(shell) }
