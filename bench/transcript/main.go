// Command transcript benchmarks opening a large pi transcript and building the
// model context at its leaf: nexus (transcript.Open + BuildContext, run in a
// child process of this program) against the real pi coding agent's
// SessionManager on Node (tools/pi/context.mjs --count: SessionManager.open,
// then buildSessionContext). Each side is a separate process measured for wall
// time and peak RSS (getrusage of the reaped child). The transcripts are
// generated from the real samples in testdata/transcripts/pi (replayed
// as one v3 chain with side branches, branch summaries, labels and two
// compactions near the end), deterministically. It prints a table and writes
// JSON to bench/results/.
//
//	go run ./bench/transcript -sizes 100MB,1GB
//	go run ./bench/transcript                    # 100MB,400MB,1GB, 5 runs each (the figures of docs/BENCHMARKS.md)
//	go run ./bench/transcript -quick             # smoke run: 20MB, 2 runs
//
// It needs node and `npm ci --prefix tools/pi` for the pi side (-only nexus
// runs without them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
)

type config struct {
	sizes     []int64
	runs      int
	dir       string
	keep      bool
	samples   string
	node      string
	nodeFlags []string
	piDir     string
	compactAt []float64
	timeout   time.Duration
	out       string
	tools     []string
}

// Results is the JSON document written to bench/results/.
type Results struct {
	Command string         `json:"command"`
	Started string         `json:"started"`
	Seconds float64        `json:"seconds"`
	Machine Machine        `json:"machine"`
	Config  map[string]any `json:"config"`
	Files   []genStats     `json:"files"`
	Rows    []*Row         `json:"rows"`
	Ratios  []Ratio        `json:"ratios"`
	Errors  []string       `json:"errors,omitempty"`
}

// Machine is the shared machine description.
type Machine = benchenv.Machine

// Row is one tool at one transcript size.
type Row struct {
	Tool      string  `json:"tool"`
	Size      string  `json:"size"`
	FileBytes int64   `json:"fileBytes"`
	Samples   int     `json:"samples"`
	Messages  int     `json:"messages"`
	MedianMs  float64 `json:"medianMs"`
	MinMs     float64 `json:"minMs"`
	MaxMs     float64 `json:"maxMs"`
	// RSS is the child's peak resident set in MiB: the median and the
	// largest over the runs.
	MedianRSSMiB float64   `json:"medianPeakRssMiB"`
	MaxRSSMiB    float64   `json:"maxPeakRssMiB"`
	WallMs       []float64 `json:"wallMs"`
	RSSMiB       []float64 `json:"peakRssMiB"`
	// Error is set when the tool could not do the work at this size: the
	// exit status and the end of its stderr, with the time and peak memory
	// it had used when it failed.
	Error      string  `json:"error,omitempty"`
	ErrorMs    float64 `json:"errorMs,omitempty"`
	ErrorRSSMB float64 `json:"errorPeakRssMiB,omitempty"`

	samples []sample
}

// Ratio compares the two tools at one size (medians).
type Ratio struct {
	Size string `json:"size"`
	// Speedup is pi's time / nexus's time (goal: at least 5).
	Speedup float64 `json:"speedup"`
	// MemoryFraction is nexus's peak RSS / pi's (goal: at most 0.25).
	MemoryFraction float64 `json:"memoryFraction"`
	SpeedMet       bool    `json:"speedMet"`
	MemoryMet      bool    `json:"memoryMet"`
	Note           string  `json:"note,omitempty"`
}

var toolNames = []string{"nexus", "pi"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	var sizes, compactAt, only, mode, file, nodeFlags string
	var quick bool
	flag.StringVar(&sizes, "sizes", "100MB,400MB,1GB", "transcript sizes to generate (KB, MB, GB: powers of 10)")
	flag.IntVar(&cfg.runs, "runs", 5, "timed runs per tool and size, interleaved, after one untimed warm-up run")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the generated transcripts (default: a temporary directory)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the generated transcripts")
	flag.StringVar(&cfg.samples, "samples", filepath.Join("testdata", "transcripts", "pi"), "directory of the real pi samples the transcripts are generated from")
	flag.StringVar(&cfg.node, "node", "node", "node binary for the pi side")
	flag.StringVar(&nodeFlags, "node-flags", "", "extra node flags for the pi side, space-separated (e.g. --max-old-space-size=16384)")
	flag.StringVar(&cfg.piDir, "pi", filepath.Join("tools", "pi"), "directory of context.mjs with the pi coding agent installed (npm ci --prefix tools/pi)")
	flag.StringVar(&compactAt, "compact-at", "0.9,0.97", "fractions of the size at which a compaction is appended (empty: none, the context is the whole chain)")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "limit for one run of one tool")
	flag.StringVar(&cfg.out, "out", filepath.Join("bench", "results"), "directory for the JSON results")
	flag.StringVar(&only, "only", strings.Join(toolNames, ","), "tools to run: nexus, pi")
	flag.BoolVar(&quick, "quick", false, "smoke run: -sizes 20MB -runs 2 unless given")
	flag.StringVar(&mode, "mode", "", "internal: nexus-child runs the measured nexus side on -file")
	flag.StringVar(&file, "file", "", "internal: the transcript of -mode nexus-child")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if mode == "nexus-child" {
		return nexusChild(file)
	} else if mode != "" {
		return fmt.Errorf("-mode %q: unknown", mode)
	}
	if quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["sizes"] {
			sizes = "20MB"
		}
		if !set["runs"] {
			cfg.runs = 2
		}
	}
	var err error
	if cfg.sizes, err = parseSizes(sizes); err != nil {
		return err
	}
	if cfg.compactAt, err = parseFractions(compactAt); err != nil {
		return err
	}
	if cfg.runs <= 0 {
		return errors.New("-runs must be positive")
	}
	cfg.nodeFlags = strings.Fields(nodeFlags)
	for _, o := range strings.Split(only, ",") {
		o = strings.TrimSpace(o)
		switch {
		case o == "":
		case slices.Contains(toolNames, o):
			cfg.tools = append(cfg.tools, o)
		default:
			return fmt.Errorf("-only: unknown tool %q (want nexus, pi)", o)
		}
	}
	if len(cfg.tools) == 0 {
		return errors.New("-only: no tool")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "bench: %s "+format+"\n", append([]any{time.Since(t0).Round(time.Millisecond)}, a...)...)
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program for its child mode: %w", err)
	}
	script, nodeVersion := "", ""
	if slices.Contains(cfg.tools, "pi") {
		if script, nodeVersion, err = checkPi(ctx, cfg); err != nil {
			return err
		}
	}

	dir := cfg.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "nexus-bench-transcript-"); err != nil {
			return err
		}
		if !cfg.keep {
			defer func() { _ = os.RemoveAll(dir) }()
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	agentDir, err := os.MkdirTemp(dir, "pi-agent-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(agentDir) }()
	// pi's config module reads PI_CODING_AGENT_DIR; context.mjs passes explicit
	// directories, so ~/.pi is never touched.
	env := append(os.Environ(), "PI_CODING_AGENT_DIR="+agentDir)

	res := Results{
		Command: strings.TrimSpace("go run ./bench/transcript " + strings.Join(os.Args[1:], " ")),
		Started: time.Now().UTC().Format(time.RFC3339),
		Machine: benchenv.Probe("bash"),
		Config: map[string]any{"sizes": sizes, "runs": cfg.runs, "compactAt": cfg.compactAt, "node": nodeVersion,
			"nodeFlags": cfg.nodeFlags, "piPackage": piPackageVersion(cfg.piDir), "tools": cfg.tools, "samples": cfg.samples},
	}
	fail := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		res.Errors = append(res.Errors, msg)
		logf("FAILED %s", msg)
	}

	tmpl, err := loadTemplates(cfg.samples)
	if err != nil {
		return err
	}
	var files []genStats
	for _, size := range cfg.sizes {
		p := filepath.Join(dir, "pi-"+sizeLabel(size)+".jsonl")
		_ = os.Remove(p)
		logf("generating %s ...", p)
		st, err := generate(p, size, tmpl, cfg.compactAt)
		if err != nil {
			return err
		}
		logf("  %d bytes, %d entries (%d messages, %d side branches, %d compactions) in %.1fs",
			st.Bytes, st.Entries, st.Messages, st.Branches, st.Compactions, st.Seconds)
		files = append(files, st)
		if !cfg.keep && cfg.dir != "" {
			defer func() { _ = os.Remove(p) }()
		}
	}
	res.Files = files

	command := func(tool, path string) (string, []string) {
		if tool == "nexus" {
			return self, []string{"-mode", "nexus-child", "-file", path}
		}
		return cfg.node, append(append(slices.Clone(cfg.nodeFlags), script, "--count"), path)
	}
	rows := map[string]*Row{}
	var order []*Row
	for i, st := range files {
		for _, tool := range cfg.tools {
			r := &Row{Tool: tool, Size: sizeLabel(cfg.sizes[i]), FileBytes: st.Bytes}
			rows[tool+"/"+r.Size] = r
			order = append(order, r)
		}
	}
	// One untimed run per row first: it fills the page cache with the file
	// (so every timed run reads from memory) and finds what cannot run at all.
	for i, st := range files {
		for _, tool := range cfg.tools {
			if ctx.Err() != nil {
				break
			}
			r := rows[tool+"/"+sizeLabel(cfg.sizes[i])]
			logf("warm-up %s %s ...", tool, r.Size)
			name, args := command(tool, st.Path)
			s := measure(ctx, cfg.timeout, env, name, args...)
			if s.errText != "" {
				r.Error, r.ErrorMs, r.ErrorRSSMB = s.errText, ms(s.wall), mib(s.maxRSS)
				logf("  %s cannot do %s: %s", tool, r.Size, firstLine(s.errText))
				continue
			}
			logf("  %.0f ms, peak RSS %.0f MiB, %d messages", ms(s.wall), mib(s.maxRSS), s.count)
		}
	}
	for round := range cfg.runs {
		if ctx.Err() != nil {
			break
		}
		for i, st := range files {
			// Alternate which tool goes first so neither always runs right after the other.
			tools := slices.Clone(cfg.tools)
			if round%2 == 1 {
				slices.Reverse(tools)
			}
			for _, tool := range tools {
				r := rows[tool+"/"+sizeLabel(cfg.sizes[i])]
				if r.Error != "" || ctx.Err() != nil {
					continue
				}
				name, args := command(tool, st.Path)
				s := measure(ctx, cfg.timeout, env, name, args...)
				if s.errText != "" {
					if ctx.Err() == nil {
						r.Error, r.ErrorMs, r.ErrorRSSMB = s.errText, ms(s.wall), mib(s.maxRSS)
						fail("%s %s run %d: %s", tool, r.Size, round+1, firstLine(s.errText))
					}
					continue
				}
				r.samples = append(r.samples, s)
			}
		}
		logf("round %d/%d done, load %s", round+1, cfg.runs, benchenv.LoadAvg())
	}
	for _, r := range order {
		r.summarize()
		if r.Samples > 0 && r.Error != "" {
			r.Error = "" // failed in a later run only; that failure is in Errors
		}
		res.Rows = append(res.Rows, r)
	}
	for _, size := range cfg.sizes {
		nx, pi := rows["nexus/"+sizeLabel(size)], rows["pi/"+sizeLabel(size)]
		if nx == nil || pi == nil {
			continue
		}
		ra := Ratio{Size: sizeLabel(size)}
		switch {
		case nx.Samples == 0:
			ra.Note = "nexus did not run"
		case pi.Samples == 0:
			ra.Note = "pi cannot open this size: " + firstLine(pi.Error)
		default:
			ra.Speedup = pi.MedianMs / nx.MedianMs
			ra.MemoryFraction = nx.MedianRSSMiB / pi.MedianRSSMiB
			ra.SpeedMet, ra.MemoryMet = ra.Speedup >= 5, ra.MemoryFraction <= 0.25
			if nx.Messages != pi.Messages {
				fail("%s: nexus's context has %d messages, pi's %d", ra.Size, nx.Messages, pi.Messages)
			}
		}
		res.Ratios = append(res.Ratios, ra)
	}
	if ctx.Err() != nil {
		fail("interrupted: %v", ctx.Err())
	}
	res.Seconds = time.Since(t0).Seconds()
	res.Machine.LoadEnd = benchenv.LoadAvg()
	printTable(os.Stdout, &res)
	path, err := benchenv.WriteResults(cfg.out, "transcript", &res)
	if err != nil {
		return err
	}
	fmt.Printf("\nresults: %s\n", path)
	if len(res.Errors) > 0 {
		return fmt.Errorf("%d error(s)", len(res.Errors))
	}
	return nil
}

// checkPi finds context.mjs and node and returns node's version.
func checkPi(ctx context.Context, cfg config) (script, version string, err error) {
	script, err = filepath.Abs(filepath.Join(cfg.piDir, "context.mjs"))
	if err != nil {
		return "", "", err
	}
	if _, err := os.Stat(filepath.Join(cfg.piDir, "node_modules", "@mariozechner", "pi-coding-agent", "package.json")); err != nil {
		return "", "", fmt.Errorf("pi side: the pi coding agent is not installed (npm ci --prefix %s; or -only nexus): %w", cfg.piDir, err)
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, cfg.node, "--version").Output()
	if err != nil {
		return "", "", fmt.Errorf("pi side: %s --version: %w (or -only nexus)", cfg.node, err)
	}
	return script, strings.TrimSpace(string(out)), nil
}

// piPackageVersion is the installed pi coding agent's version ("" if unknown).
func piPackageVersion(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "@mariozechner", "pi-coding-agent", "package.json")) // #nosec G304 -- the -pi directory the user named
	if err != nil {
		return ""
	}
	const key = `"version": "`
	if i := strings.Index(string(b), key); i >= 0 {
		v := string(b[i+len(key):])
		if j := strings.IndexByte(v, '"'); j >= 0 {
			return v[:j]
		}
	}
	return ""
}

func (r *Row) summarize() {
	r.Samples = len(r.samples)
	if r.Samples == 0 {
		return
	}
	var walls, rss []float64
	for _, s := range r.samples {
		walls = append(walls, ms(s.wall))
		rss = append(rss, mib(s.maxRSS))
		r.Messages = s.count
	}
	r.WallMs, r.RSSMiB = walls, rss
	r.MedianMs, r.MedianRSSMiB = median(walls), median(rss)
	r.MinMs, r.MaxMs, r.MaxRSSMiB = slices.Min(walls), slices.Max(walls), slices.Max(rss)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func mib(b int64) float64        { return float64(b) / (1 << 20) }

// firstLine picks the line of a failure that says what went wrong: node
// prints the failing source line and a caret before "Error: ..." or
// "FATAL ERROR: ...".
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "Error") || strings.Contains(l, "ERROR") {
			return strings.TrimSpace(l)
		}
	}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "..." {
			return l
		}
	}
	return s
}

func parseSizes(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		mult := int64(1)
		for suffix, m := range map[string]int64{"KB": 1e3, "MB": 1e6, "GB": 1e9} {
			if strings.HasSuffix(f, suffix) {
				mult, f = m, strings.TrimSuffix(f, suffix)
				break
			}
		}
		n, err := strconv.ParseFloat(f, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-sizes: bad size %q (want e.g. 100MB, 1GB)", f)
		}
		out = append(out, int64(n*float64(mult)))
	}
	if len(out) == 0 {
		return nil, errors.New("-sizes: no size")
	}
	return out, nil
}

func parseFractions(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || v >= 1 {
			return nil, fmt.Errorf("-compact-at: bad fraction %q (want values between 0 and 1)", f)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1e9 && n%1e8 == 0:
		return strconv.FormatFloat(float64(n)/1e9, 'f', -1, 64) + "GB"
	case n >= 1e6 && n%1e5 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "MB"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "KB"
	}
	return strconv.FormatInt(n, 10) + "B"
}

func printTable(w io.Writer, res *Results) {
	m := res.Machine
	fmt.Fprintf(w, "\nopen a pi transcript and build its leaf's context — %s\n", res.Started)
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, %s, node %v, pi coding agent %v\n", m.NumCPU, m.CPUModel, m.GoVersion, m.Kernel, res.Config["node"], res.Config["piPackage"])
	fmt.Fprintf(w, "load average: %s at start, %s at end\n\n", m.LoadStart, m.LoadEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tfile MB\tentries\ttool\tmedian ms\tmin ms\tmax ms\tpeak RSS MiB (median)\t(max)\tcontext msgs\truns\t")
	entries := map[int64]int{}
	for _, f := range res.Files {
		entries[f.Bytes] = f.Entries
	}
	for _, r := range res.Rows {
		if r.Samples == 0 {
			fmt.Fprintf(tw, "%s\t%.0f\t%d\t%s\t-\t-\t-\t-\t-\t-\t0\t  FAILED: %s\n", r.Size, float64(r.FileBytes)/1e6, entries[r.FileBytes], r.Tool, firstLine(r.Error))
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%d\t\n", r.Size, float64(r.FileBytes)/1e6, entries[r.FileBytes], r.Tool,
			r.MedianMs, r.MinMs, r.MaxMs, r.MedianRSSMiB, r.MaxRSSMiB, r.Messages, r.Samples)
	}
	_ = tw.Flush()
	if len(res.Ratios) > 0 {
		fmt.Fprintln(w, "\nnexus vs pi (medians; goal: 5x faster, 1/4 of the memory):")
		for _, ra := range res.Ratios {
			if ra.Note != "" {
				fmt.Fprintf(w, "  %s: %s\n", ra.Size, ra.Note)
				continue
			}
			fmt.Fprintf(w, "  %s: %.1fx faster (%s), %.3f of pi's peak RSS = 1/%.0f (%s)\n", ra.Size, ra.Speedup, met(ra.SpeedMet), ra.MemoryFraction, 1/ra.MemoryFraction, met(ra.MemoryMet))
		}
	}
	benchenv.PrintFooter(w, res.Errors, res.Seconds)
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
