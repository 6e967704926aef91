// Command shell benchmarks the agent-shell round trip against the alternatives, in one run: a
// command sent and its result back through (a) the shell engine in-process, (a′) the session
// manager in-process, (b) `nexus mcp` over stdio driven by the MCP SDK's client, (c) a fresh
// `bash -c` per command, and (d) tmux send-keys + capture-pane polling, as OpenHands-style
// tools do. Each path runs `true` and a command printing 1 MB; the samples of all paths are
// interleaved in rounds so a change of load affects them alike. It prints a table and writes
// JSON to bench/results/.
//
//	go run ./bench/shell            # the figures of docs/BENCHMARKS.md
//	go run ./bench/shell -quick     # a smoke run in about 15 seconds
package main

import (
	"github.com/nexus-run/nexus/bench/internal/benchenv"

	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

type config struct {
	samples        int
	bigSamples     int
	tmuxSamples    int
	tmuxBigSamples int
	warmup         int
	rounds         int
	quick          bool
	shell          string
	nexus          string
	tmuxSize       string
	poll           time.Duration
	only           map[string]bool
	outDir         string
	waitLoad       float64
}

// Results is the JSON document written to bench/results/.
type Results struct {
	Command string         `json:"command"`
	Started string         `json:"started"`
	Seconds float64        `json:"seconds"`
	Machine Machine        `json:"machine"`
	Config  map[string]any `json:"config"`
	Rows    []*Row         `json:"rows"`
	Targets Targets        `json:"targets"`
	// Leftover counts processes started by the run still alive after cleanup.
	Leftover int      `json:"leftoverProcesses"`
	Errors   []string `json:"errors,omitempty"`
}

// Targets are issue 3's goals, evaluated on this run.
type Targets struct {
	// EngineSpeedup is bash -c p50 / engine p50 for `true`; the goal is at least 20.
	EngineSpeedup float64 `json:"engineSpeedupTrueP50"`
	EngineMet     bool    `json:"engineMet"`
	// MCPP50ms is nexus mcp's p50 for `true`; the goal is under 1 ms.
	MCPP50ms float64 `json:"mcpTrueP50ms"`
	MCPMet   bool    `json:"mcpMet"`
}

var pathNames = []string{"engine", "manager", "mcp", "bashc", "tmux"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	var only, cpuprofile string
	flag.IntVar(&cfg.samples, "samples", 2000, "true: samples per path (engine, manager, mcp, bash -c)")
	flag.IntVar(&cfg.bigSamples, "big-samples", 300, "1 MB command: samples per path (engine, manager, mcp, bash -c)")
	flag.IntVar(&cfg.tmuxSamples, "tmux-samples", 200, "true: samples of the tmux path")
	flag.IntVar(&cfg.tmuxBigSamples, "tmux-big-samples", 50, "1 MB command: samples of the tmux path")
	flag.IntVar(&cfg.warmup, "warmup", 20, "untimed samples per row before the first round (tmux: at most 5 and 2)")
	flag.IntVar(&cfg.rounds, "rounds", 10, "the samples of every row are spread over this many interleaved rounds")
	flag.BoolVar(&cfg.quick, "quick", false, "smoke run: -samples 200 -big-samples 20 -tmux-samples 20 -tmux-big-samples 4 -rounds 2 unless given")
	flag.StringVar(&cfg.shell, "shell", "bash", "shell of the engine, bash -c and tmux paths (the session manager and nexus mcp run bash from PATH)")
	flag.StringVar(&cfg.nexus, "nexus", "", "nexus binary for the mcp path (default: go build ./cmd/nexus into a temporary directory)")
	flag.StringVar(&cfg.tmuxSize, "tmux-size", "80x24", "tmux pane size, columns x rows")
	flag.DurationVar(&cfg.poll, "poll", 10*time.Millisecond, "tmux: capture-pane polling interval")
	flag.StringVar(&only, "only", strings.Join(pathNames, ","), "comma-separated paths to run ("+strings.Join(pathNames, ", ")+"); ratios need bashc")
	flag.StringVar(&cfg.outDir, "out", filepath.Join("bench", "results"), "directory for the JSON results")
	flag.Float64Var(&cfg.waitLoad, "wait-load", 0, "before starting, wait up to 10 minutes for the 1-minute load average to fall below this (0: do not wait)")
	flag.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of this process (the engine, the session manager and the MCP client; not the nexus mcp server) to this file")
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
		def("samples", &cfg.samples, 200)
		def("big-samples", &cfg.bigSamples, 20)
		def("tmux-samples", &cfg.tmuxSamples, 20)
		def("tmux-big-samples", &cfg.tmuxBigSamples, 4)
		def("rounds", &cfg.rounds, 2)
	}
	if cfg.samples <= 0 || cfg.bigSamples <= 0 || cfg.tmuxSamples < 0 || cfg.tmuxBigSamples < 0 || cfg.warmup < 0 || cfg.rounds <= 0 {
		return errors.New("-samples, -big-samples and -rounds must be positive; -tmux-samples, -tmux-big-samples and -warmup not negative")
	}
	if w, h, ok := strings.Cut(cfg.tmuxSize, "x"); !ok || atoi(w) < 10 || atoi(h) < 2 {
		return fmt.Errorf("-tmux-size %q: want COLUMNSxROWS, e.g. 80x24", cfg.tmuxSize)
	}
	if cfg.poll <= 0 {
		return errors.New("-poll must be positive")
	}
	cfg.only = map[string]bool{}
	for _, o := range strings.Split(only, ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "":
		case slices.Contains(pathNames, o):
			cfg.only[o] = true
		default:
			return fmt.Errorf("-only: unknown path %q (want %s)", o, strings.Join(pathNames, ", "))
		}
	}
	sh, err := exec.LookPath(cfg.shell)
	if err != nil {
		return fmt.Errorf("shell %q not found: %w", cfg.shell, err)
	}
	cfg.shell = sh

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "bench: %s "+format+"\n", append([]any{time.Since(t0).Round(time.Millisecond)}, a...)...)
	}
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
	if cfg.waitLoad > 0 {
		waitQuiet(ctx, cfg.waitLoad, 10*time.Minute, logf)
	}

	env, err := newBenchEnv(cfg.shell)
	if err != nil {
		return err
	}
	defer env.remove()

	res := Results{
		Command: strings.TrimSpace("go run ./bench/shell " + strings.Join(os.Args[1:], " ")),
		Started: time.Now().UTC().Format(time.RFC3339),
		Machine: machine(cfg.shell),
		Config: map[string]any{"samples": cfg.samples, "bigSamples": cfg.bigSamples, "tmuxSamples": cfg.tmuxSamples,
			"tmuxBigSamples": cfg.tmuxBigSamples, "warmup": cfg.warmup, "rounds": cfg.rounds, "quick": cfg.quick,
			"shell": cfg.shell, "tmuxSize": cfg.tmuxSize, "pollMs": float64(cfg.poll) / 1e6, "bigCommand": bigCommand,
			"gomaxprocs": goruntime.GOMAXPROCS(0)},
	}
	fail := func(what string, err error) {
		msg := fmt.Sprintf("%s: %v", what, err)
		res.Errors = append(res.Errors, msg)
		fmt.Fprintln(os.Stderr, "bench: FAILED", msg)
	}

	if cfg.only["mcp"] && cfg.nexus == "" {
		logf("building ./cmd/nexus ...")
		bin, err := buildNexus(ctx, env.dir)
		if err != nil {
			fail("mcp: build nexus", err)
			delete(cfg.only, "mcp")
		} else {
			cfg.nexus = bin
		}
	}
	if cfg.nexus != "" {
		res.Config["nexus"] = cfg.nexus
	}

	openers := map[string]func(context.Context, config, *benchEnv) (*path, error){
		"engine": openEngine, "manager": openManager, "mcp": openMCP, "bashc": openBashC, "tmux": openTmux,
	}
	var paths []*path
	defer func() {
		for _, p := range paths {
			p.close()
		}
	}()
	var skipped []*Row
	for _, name := range pathNames {
		if !cfg.only[name] || ctx.Err() != nil {
			continue
		}
		logf("opening %s ...", name)
		var p *path
		var err error
		if name == "tmux" && cfg.tmuxSamples == 0 && cfg.tmuxBigSamples == 0 {
			err = errSkip{"-tmux-samples 0 -tmux-big-samples 0"}
		} else {
			p, err = openers[name](ctx, cfg, env)
		}
		var skip errSkip
		switch {
		case errors.As(err, &skip):
			logf("  skipped: %s", skip.why)
			for _, c := range []string{trueCommand, bigCommand} {
				skipped = append(skipped, &Row{Key: name, Letter: "d", Path: "tmux send-keys + capture-pane polling", Command: c, Skipped: true, Note: skip.why})
			}
		case err != nil:
			fail("open "+name, err)
		default:
			paths = append(paths, p)
		}
	}

	var targets []*target
	for _, p := range paths {
		for _, t := range p.targets {
			if t.n == 0 {
				t.row.Skipped, t.row.Note = true, "0 samples asked for"
				skipped = append(skipped, t.row)
				continue
			}
			targets = append(targets, t)
		}
	}
	failed := map[*target]bool{}
	sample := func(t *target, timed bool) bool {
		d, err := t.run(ctx, t.row)
		if err != nil {
			if ctx.Err() != nil {
				return false // interrupted: the run stops, the row keeps what it has
			}
			fail(t.row.Key, err)
			failed[t] = true
			return false
		}
		if timed {
			t.row.durations = append(t.row.durations, d)
			t.row.calls += t.row.lastCalls
			t.done++
		}
		return true
	}
	logf("warm-up ...")
	for _, t := range targets {
		for range t.warm {
			if ctx.Err() != nil || failed[t] || !sample(t, false) {
				break
			}
		}
		t.row.Warmup = t.warm
	}
	for r := range cfg.rounds {
		if ctx.Err() != nil {
			break
		}
		rt := time.Now()
		// Rotate the order each round so no path always runs right after another.
		for i := range targets {
			t := targets[(i+r)%len(targets)]
			goal := t.n * (r + 1) / cfg.rounds
			for t.done < goal && ctx.Err() == nil && !failed[t] {
				if !sample(t, true) {
					break
				}
			}
		}
		logf("round %d/%d in %.1fs, load %s", r+1, cfg.rounds, time.Since(rt).Seconds(), loadavg())
	}
	for _, p := range paths {
		p.close()
	}
	paths = nil
	res.Leftover = env.leftovers(5 * time.Second)
	if res.Leftover > 0 {
		fail("cleanup", fmt.Errorf("%d processes started by the benchmark still alive", res.Leftover))
	}

	for _, t := range targets {
		t.row.summarize()
		if failed[t] && t.row.Note == "" {
			t.row.Note = fmt.Sprintf("FAILED after %d samples", t.done)
		}
		res.Rows = append(res.Rows, t.row)
	}
	res.Rows = append(res.Rows, skipped...)
	ref := map[string]*Row{}
	for _, r := range res.Rows {
		if strings.HasPrefix(r.Key, "bashc/") && r.Samples > 0 {
			ref[r.Command] = r
		}
	}
	for _, r := range res.Rows {
		if c := ref[r.Command]; c != nil && r.Samples > 0 {
			r.SpeedupP50 = c.P50ms / r.P50ms
			r.SpeedupMean = c.MeanMs / r.MeanMs
		}
		switch r.Key {
		case "engine/true":
			res.Targets.EngineSpeedup = r.SpeedupP50
			res.Targets.EngineMet = r.SpeedupP50 >= 20
		case "mcp/true":
			res.Targets.MCPP50ms = r.P50ms
			res.Targets.MCPMet = r.Samples > 0 && r.P50ms < 1
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
		return fmt.Errorf("%d error(s)", len(res.Errors))
	}
	return nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// buildNexus builds ./cmd/nexus into dir, as `make build` would (without the version stamp).
func buildNexus(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "nexus")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/nexus")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// waitQuiet waits until the 1-minute load average is below limit, or at most max.
func waitQuiet(ctx context.Context, limit float64, maxWait time.Duration, logf func(string, ...any)) {
	deadline := time.Now().Add(maxWait)
	for ctx.Err() == nil {
		l := load1()
		if l < limit {
			return
		}
		if time.Now().After(deadline) {
			logf("load average %.2f is still above %.2f; starting anyway", l, limit)
			return
		}
		logf("load average %.2f is above %.2f; waiting ...", l, limit)
		select {
		case <-ctx.Done():
		case <-time.After(15 * time.Second):
		}
	}
}

// benchEnv is the temporary root of the run and the environment of every shell it starts (the
// caller's, with a private HOME, no history file, PS1 '$ ', and a marker variable by which the
// run's processes are found in /proc when checking for leftovers).
type benchEnv struct {
	dir      string
	shellEnv []string
	marker   string
}

func newBenchEnv(shell string) (*benchEnv, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-shell-")
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	e := &benchEnv{dir: dir, marker: "NEXUS_BENCH_SHELL_RUN=" + hex.EncodeToString(b)}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "HISTFILE", "PS1", "PROMPT_COMMAND", "TMUX", "TMUX_PANE", "SHELL", "ENV", "BASH_ENV", "NEXUS_HOME":
			continue
		}
		e.shellEnv = append(e.shellEnv, kv)
	}
	e.shellEnv = append(e.shellEnv, "HOME="+home, "HISTFILE=/dev/null", "PS1=$ ", "SHELL="+shell, e.marker)
	return e, nil
}

func (e *benchEnv) mkdir(name string) (string, error) {
	d := filepath.Join(e.dir, name)
	return d, os.Mkdir(d, 0o700)
}

func (e *benchEnv) remove() { _ = os.RemoveAll(e.dir) }

// leftovers counts the processes other than this one whose environment carries the run's
// marker, waiting up to limit for them to go.
func (e *benchEnv) leftovers(limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		n := len(e.members())
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *benchEnv) members() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	want := []byte(e.marker)
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + ent.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.Equal(kv, want) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// syncBuffer collects a subprocess's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 64<<10 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func writeResults(dir string, res *Results) (string, error) {
	return benchenv.WriteResults(dir, "shell", res)
}

func printTables(w io.Writer, cfg config, res *Results) {
	m := res.Machine
	fmt.Fprintf(w, "\nnexus agent-shell round trips — %s\n", res.Started)
	fmt.Fprintf(w, "machine: %d CPUs (%s), GOMAXPROCS %d, %s, %s, %s, %s\n", m.NumCPU, m.CPUModel, goruntime.GOMAXPROCS(0), m.GoVersion, m.Kernel, m.Shell, m.Tmux)
	fmt.Fprintf(w, "load average: %s at start, %s at end (anything near or above %d means other work shared the CPUs)\n", m.LoadStart, m.LoadEnd, m.NumCPU)
	fmt.Fprintf(w, "samples interleaved in %d rounds after untimed warm-up; speedup = bash -c's time / the row's (above 1: faster than bash -c)\n", cfg.rounds)
	for _, c := range []struct{ cmd, title string }{
		{trueCommand, "`true`"},
		{bigCommand, "1 MB: `" + bigCommand + "` (1,000,000 bytes of x, no newline)"},
	} {
		fmt.Fprintf(w, "\n%s\n", c.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "\tp50 ms\tp90 ms\tp99 ms\tmax ms\tmean ms\tspeedup p50 / mean\tsamples\treceived\t path")
		for _, r := range res.Rows {
			if r.Command != c.cmd {
				continue
			}
			if r.Skipped {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t0\t-\t %s (skipped: %s)\n", r.Letter, r.Path, r.Note)
				continue
			}
			if r.Samples == 0 {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t0\t-\t %s (%s)\n", r.Letter, r.Path, r.Note)
				continue
			}
			recv := strconv.Itoa(r.Received)
			if r.Truncated {
				recv += " (truncated)"
			}
			path := r.Path
			if r.TmuxCalls > 0 {
				path += fmt.Sprintf(" [%.1f tmux calls per round trip]", r.TmuxCalls)
			}
			if r.ReplyBytes > 0 && c.cmd == bigCommand {
				path += fmt.Sprintf(" [reply %d bytes]", r.ReplyBytes)
			}
			if r.Note != "" {
				path += " — " + r.Note
			}
			fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%s / %s\t%d\t%s\t %s\n", r.Letter, r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.MeanMs,
				ratio(r.SpeedupP50), ratio(r.SpeedupMean), r.Samples, recv, path)
		}
		_ = tw.Flush()
	}
	t := res.Targets
	fmt.Fprintln(w, "\ntargets (issue 3):")
	fmt.Fprintf(w, "  (a) engine at least 20x faster than bash -c for `true` (p50): %s — %s\n", ratio(t.EngineSpeedup), metString(t.EngineMet, t.EngineSpeedup > 0))
	mcp := "-"
	if t.MCPP50ms > 0 {
		mcp = fmt.Sprintf("%.3f ms", t.MCPP50ms)
	}
	fmt.Fprintf(w, "  (b) nexus mcp under 1 ms p50 for `true`: %s — %s\n", mcp, metString(t.MCPMet, t.MCPP50ms > 0))
	fmt.Fprintf(w, "leftover processes after cleanup: %d\n", res.Leftover)
	benchenv.PrintFooter(w, res.Errors, res.Seconds)
}

func ratio(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 10:
		return fmt.Sprintf("%.0fx", v)
	default:
		return fmt.Sprintf("%.2fx", v)
	}
}

func metString(met, measured bool) string {
	switch {
	case !measured:
		return "not measured"
	case met:
		return "met"
	default:
		return "NOT met"
	}
}

// Machine is the shared machine description.
type Machine = benchenv.Machine

func loadavg() string { return benchenv.LoadAvg() }

func machine(shell string) Machine { return benchenv.Probe(shell) }

func load1() float64 {
	f := strings.Fields(loadavg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
