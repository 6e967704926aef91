// Command history is the benchmark of the history index (internal/index): it generates a
// corpus of agent transcripts in the five formats internal/index/source reads and measures
// searching it. This far it has the corpus and the ripgrep baseline:
//
//	go run ./bench/history -gen /tmp/histcorpus -size 1073741824 -seed 1   # write a corpus
//	go run ./bench/history -corpus /tmp/histcorpus -rg -runs 3            # rg over its queries
//
//	go run ./bench/history -corpus /tmp/histcorpus -index                 # the index against rg
//
// -gen and -rg combine. ripgrep comes from PATH (apt-get install ripgrep) or -rg-path.
// -index measures, each in a child process: a full sync into a new index (throughput, peak RSS),
// every suggested query (p50/p95 over -search-runs, peak RSS) against ripgrep's median over the
// raw files, sessions --limit 20, the time from appending a line to finding it while a watcher
// runs (-watch-n appends), and the CPU of a watcher over -idle-files small sessions while
// nothing changes (-idle-seconds). It prints a table and writes JSON to bench/results/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"text/tabwriter"
	"time"
)

type config struct {
	gen    string
	size   int64
	seed   int64
	corpus string
	rg     bool
	rgPath string
	runs   int

	index       bool
	work        string
	phase       string
	db          string
	searchRuns  int
	watchN      int
	idleFiles   int
	idleDirs    int
	idleSeconds float64
	out         string
	cpuProfile  string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.gen, "gen", "", "generate a corpus into this directory (empty or new)")
	flag.Int64Var(&cfg.size, "size", 1<<30, "corpus size in bytes, for -gen")
	flag.Int64Var(&cfg.seed, "seed", 1, "corpus seed, for -gen")
	flag.StringVar(&cfg.corpus, "corpus", "", "use the corpus generated earlier in this directory")
	flag.BoolVar(&cfg.rg, "rg", false, "search the corpus's suggested queries with ripgrep")
	flag.StringVar(&cfg.rgPath, "rg-path", "", "ripgrep binary (default: rg on PATH)")
	flag.IntVar(&cfg.runs, "runs", 3, "ripgrep runs per query (the median is shown)")
	flag.BoolVar(&cfg.index, "index", false, "measure the history index against ripgrep on the corpus")
	flag.StringVar(&cfg.work, "work", "", "directory for the index files (default: a new temporary one)")
	flag.StringVar(&cfg.phase, "phase", "", "internal: run one measurement (ingest, search, watch) in this process")
	flag.StringVar(&cfg.db, "db", "", "internal: the index file of -phase")
	flag.IntVar(&cfg.searchRuns, "search-runs", 20, "timed runs of each query")
	flag.IntVar(&cfg.watchN, "watch-n", 20, "appends timed while a watcher runs")
	flag.IntVar(&cfg.idleFiles, "idle-files", 15000, "session files the idle watcher follows")
	flag.IntVar(&cfg.idleDirs, "idle-dirs", 300, "directories they are spread over")
	flag.Float64Var(&cfg.idleSeconds, "idle-seconds", 30, "how long the idle watcher's CPU is measured")
	flag.StringVar(&cfg.out, "out", "bench/results", "where the JSON results go")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "with -phase: write the phase's CPU profile here (go tool pprof)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if cfg.phase != "" {
		if err := profiled(cfg.cpuProfile, func() error { return phase(ctx, cfg.phase, cfg.corpus, cfg.db, cfg.searchRuns) }); err != nil {
			fmt.Fprintln(os.Stderr, "history:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "history:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	var c *Corpus
	switch {
	case cfg.gen != "" && cfg.corpus != "":
		return errors.New("-gen and -corpus exclude each other")
	case cfg.gen != "":
		t0 := time.Now()
		var err error
		if c, err = Generate(ctx, cfg.gen, cfg.size, cfg.seed); err != nil {
			return err
		}
		el := time.Since(t0)
		printCorpus(w, c)
		fmt.Fprintf(w, "generated in %.1fs (%.0f MB/s)\n", el.Seconds(), float64(c.Total().Bytes)/1e6/el.Seconds())
	case cfg.corpus != "":
		var err error
		if c, err = LoadCorpus(cfg.corpus); err != nil {
			return err
		}
		printCorpus(w, c)
	default:
		return errors.New("nothing to do: pass -gen DIR or -corpus DIR")
	}
	if cfg.rg {
		if err := runRipgrep(ctx, cfg, c, w); err != nil {
			return err
		}
	}
	if cfg.index {
		return runIndex(ctx, cfg, c, w)
	}
	return nil
}

func printCorpus(w io.Writer, c *Corpus) {
	fmt.Fprintf(w, "corpus %s (seed %d)\n", c.Dir, c.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "source\tfiles\tsubagents\tmessages\ttool calls\tMB\ttext MB\tsecrets\t")
	row := func(name string, st SourceStats) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%d\t\n", name, st.Files, st.Subagents, st.Messages,
			st.ToolCalls, float64(st.Bytes)/1e6, float64(st.TextBytes)/1e6, st.Secrets)
	}
	for _, name := range SourceNames() {
		if st := c.Sources[name]; st != nil {
			row(name, *st)
		}
	}
	row("total", c.Total())
	_ = tw.Flush()
}

// ripgrep is -rg-path, else rg on PATH.
func ripgrep(cfg config) (string, error) {
	if cfg.rgPath != "" {
		return cfg.rgPath, nil
	}
	return FindRipgrep()
}

func runRipgrep(ctx context.Context, cfg config, c *Corpus, w io.Writer) error {
	rg, err := ripgrep(cfg)
	if err != nil {
		return err
	}
	runs := max(cfg.runs, 1)
	fmt.Fprintf(w, "\nripgrep over %d roots, median of %d runs (page cache warm after the first)\n", len(c.Roots()), runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kind\tquery\thits\tplanted\tms\tmax RSS MB\t")
	for _, q := range c.Suggested {
		var walls []time.Duration
		var last RgResult
		for range runs {
			res, err := RipgrepRun(ctx, rg, c.Roots(), q.Text)
			if err != nil {
				return err
			}
			walls = append(walls, res.Wall)
			last = res
		}
		slices.Sort(walls)
		planted := "-"
		if q.Planted >= 0 {
			planted = fmt.Sprint(q.Planted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.0f\t%.1f\t\n", q.Kind, q.Text, last.Hits, planted,
			float64(walls[len(walls)/2])/1e6, float64(last.MaxRSS)/(1<<20))
	}
	return tw.Flush()
}

// profiled runs fn, writing its CPU profile to path when path is not empty.
func profiled(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	f, err := os.Create(path) //nolint:gosec // the operator's own flag
	if err != nil {
		return fmt.Errorf("cpuprofile: %w", err)
	}
	defer func() { _ = f.Close() }()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("cpuprofile: %w", err)
	}
	defer pprof.StopCPUProfile()
	return fn()
}
