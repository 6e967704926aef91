// Command console benchmarks the web console in a real headless Chromium (docs/console.md):
// a `nexus serve` built from this tree, a terminal opened from the page, and
// web/e2e/bench.mjs measuring PTY to rendered text (MB/s), keystroke to rendered echo
// (p50 / p95), and the page's memory after a flood of `yes`. The figures are xterm.js's and
// the browser's as much as nexus's: the same page without nexus in the path (xterm.js fed
// from memory) is measured too, as the ceiling.
//
//	go run ./bench/console              # the figures of docs/BENCHMARKS.md
//	go run ./bench/console -mb 8 -yes 5 # a smoke run
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
)

// Results is the JSON document written to bench/results/.
type Results struct {
	Command string           `json:"command"`
	Started string           `json:"started"`
	Seconds float64          `json:"seconds"`
	Machine benchenv.Machine `json:"machine"`
	Page    json.RawMessage  `json:"page"`
	Errors  []string         `json:"errors,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	mb := flag.Int("mb", 32, "size of the file cat prints, in MB")
	yes := flag.Int("yes", 60, "seconds of yes before Ctrl-C (the page's memory after it)")
	chromium := flag.String("chromium", "/usr/bin/chromium", "the Chromium to drive")
	outDir := flag.String("out", "bench/results", "directory for the JSON results")
	flag.Parse()
	ctx := context.Background()
	start := time.Now()
	res := &Results{Command: strings.Join(os.Args, " "), Started: start.UTC().Format(time.RFC3339), Machine: benchenv.Probe("bash")}

	dir, err := os.MkdirTemp("", "nexus-bench-console-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	bin := filepath.Join(dir, "nexus")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/nexus").CombinedOutput(); err != nil {
		return fmt.Errorf("build nexus: %w: %s", err, out)
	}
	if _, err := os.Stat("internal/console/dist/app.js"); err != nil {
		return errors.New("the console's page is not built: run make web first")
	}
	data := filepath.Join(dir, "data.txt")
	if err := writeData(data, *mb); err != nil {
		return err
	}
	home := filepath.Join(dir, "home")
	env := append(os.Environ(), "NEXUS_HOME="+home, "HOME="+home, "PS1=$ ")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	serve := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0")
	serve.Env = env
	stderr, err := serve.StderrPipe()
	if err != nil {
		return err
	}
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() { _ = serve.Process.Signal(os.Interrupt); _ = serve.Wait() }()
	// The sign-in link is the line serve prints once it listens.
	linkRe := regexp.MustCompile(`console: (http://\S+)`)
	var link string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := linkRe.FindStringSubmatch(sc.Text()); m != nil {
			link = m[1]
			break
		}
	}
	if link == "" {
		return errors.New("nexus serve printed no console link")
	}
	go func() {
		for sc.Scan() { // keep draining the gateway's log
		}
	}()
	add := exec.CommandContext(ctx, bin, "project", "add", "bench", "--path", dir)
	add.Env = env
	if out, err := add.CombinedOutput(); err != nil {
		return fmt.Errorf("project add: %w: %s", err, out)
	}
	node := exec.CommandContext(ctx, "node", "web/e2e/bench.mjs", link, "bench", data, fmt.Sprint(*yes))
	node.Env = append(os.Environ(), "CHROMIUM="+*chromium)
	node.Stderr = os.Stderr
	out, err := node.Output()
	if err != nil {
		return fmt.Errorf("web/e2e/bench.mjs: %w", err)
	}
	res.Page = json.RawMessage(strings.TrimSpace(string(out)))
	res.Seconds = time.Since(start).Seconds()
	res.Machine.LoadEnd = benchenv.LoadAvg()
	fmt.Printf("machine: %d CPU %s, load %s -> %s\n", res.Machine.NumCPU, res.Machine.CPUModel, res.Machine.LoadStart, res.Machine.LoadEnd)
	fmt.Println(string(res.Page))
	path, err := benchenv.WriteResults(*outDir, "console", res)
	if err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}

// writeData writes mb MB of 80-column numbered lines.
func writeData(path string, mb int) error {
	f, err := os.Create(path) //nolint:gosec // G304: the benchmark's own temporary file
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := 0; i < mb*1_000_000/80; i++ {
		fmt.Fprintf(w, "%07d %s\n", i, strings.Repeat("abcdefghij", 7)+"abcdefghi"[:1])
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
