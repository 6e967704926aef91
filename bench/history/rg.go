package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The ripgrep baseline: how long a user waits to search the same transcripts without an index.
//
// A query is one word, several words, or a "quoted phrase" (Corpus.Queries). One word or a
// phrase is one ripgrep run, case-insensitive and literal:
//
//	rg -i -F -c --no-messages -- WORD ROOTS...
//
// Several words are what a user types to find records holding all of them: the lines matching
// the first word, filtered by each further word:
//
//	rg -i -F --no-messages --no-filename --no-line-number -- W1 ROOTS... | rg -i -F -- W2 - | rg -i -F -c -- W3 -
//
// Every transcript format stores one record per line, so a hit is a line (a message, a tool
// result, or one streamed block of a reply) holding every word, which is what the index's
// per-message AND finds too. The differences that remain are ripgrep's: it matches substrings
// (a word inside a longer word, an id or a path) and it also finds the copies some formats keep
// (Codex's event_msg lines, Claude Code's toolUseResult) and text the index does not read
// (thinking). The first stage drops file names so a later word cannot match a path. A PCRE2
// lookahead pattern (^(?=.*w1)(?=.*w2)) would be one process, but it is not what users type and
// it disables ripgrep's literal search, so it would make the baseline look slower than it is.

// RgResult is one ripgrep search.
type RgResult struct {
	Hits int
	Wall time.Duration
	// MaxRSS is the largest peak resident set of the pipeline's processes, in bytes, as GNU
	// time reports it; -1 when time(1) is not installed. The rusage of a child of this program
	// cannot serve: Go starts children with vfork, and the kernel carries the parent's peak
	// over into the child's at exec, so rg would be charged the harness's memory.
	MaxRSS int64
	// Command is the search as a shell command line.
	Command string
}

// FindRipgrep returns the rg on PATH, or an error that says how to get it.
func FindRipgrep() (string, error) {
	p, err := exec.LookPath("rg")
	if err != nil {
		return "", fmt.Errorf("ripgrep (rg) is not on PATH: install it (apt-get install ripgrep) or pass its path: %w", err)
	}
	return p, nil
}

// RipgrepSearch runs query over roots with ripgrep as a user would (see above) and returns the
// matching lines and the wall time.
func RipgrepSearch(ctx context.Context, rgPath string, roots []string, query string) (hits int, dur time.Duration, err error) {
	res, err := RipgrepRun(ctx, rgPath, roots, query)
	return res.Hits, res.Wall, err
}

// parseQuery splits a query into the literal strings a line must hold.
func parseQuery(query string) ([]string, error) {
	q := strings.TrimSpace(query)
	if len(q) >= 2 && q[0] == '"' && q[len(q)-1] == '"' {
		if inner := strings.TrimSpace(q[1 : len(q)-1]); inner != "" {
			return []string{inner}, nil
		}
		return nil, fmt.Errorf("query %q: empty phrase", query)
	}
	terms := strings.Fields(q)
	if len(terms) == 0 {
		return nil, fmt.Errorf("query %q: no words", query)
	}
	return terms, nil
}

// rgArgs are the pipeline's stages.
func rgArgs(terms, roots []string) [][]string {
	if len(terms) == 1 {
		return [][]string{append([]string{"-i", "-F", "-c", "--no-messages", "--", terms[0]}, roots...)}
	}
	stages := [][]string{append([]string{"-i", "-F", "--no-messages", "--no-filename", "--no-line-number", "--", terms[0]}, roots...)}
	for i, t := range terms[1:] {
		if i == len(terms)-2 {
			stages = append(stages, []string{"-i", "-F", "-c", "--", t, "-"})
		} else {
			stages = append(stages, []string{"-i", "-F", "--", t, "-"})
		}
	}
	return stages
}

// RipgrepRun is RipgrepSearch with the peak memory and the command line.
func RipgrepRun(ctx context.Context, rgPath string, roots []string, query string) (RgResult, error) {
	var res RgResult
	if rgPath == "" {
		return res, errors.New("ripgrep: no rg path (FindRipgrep)")
	}
	if len(roots) == 0 {
		return res, errors.New("ripgrep: no roots to search")
	}
	terms, err := parseQuery(query)
	if err != nil {
		return res, fmt.Errorf("ripgrep: %w", err)
	}
	stages := rgArgs(terms, roots)
	timePath, _ := exec.LookPath("time")
	var line []string
	cmds := make([]*exec.Cmd, len(stages))
	stderrs := make([]*bytes.Buffer, len(stages))
	rssFiles := make([]string, len(stages))
	defer func() {
		for _, f := range rssFiles {
			if f != "" {
				_ = os.Remove(f)
			}
		}
	}()
	for i, args := range stages {
		name, argv := rgPath, args
		if timePath != "" {
			f, err := os.CreateTemp("", "rg-rss-*")
			if err != nil {
				return res, fmt.Errorf("ripgrep: %w", err)
			}
			rssFiles[i] = f.Name()
			_ = f.Close()
			name, argv = timePath, append([]string{"-f", "%M", "-o", rssFiles[i], rgPath}, args...)
		}
		cmds[i] = exec.CommandContext(ctx, name, argv...)
		stderrs[i] = &bytes.Buffer{}
		cmds[i].Stderr = stderrs[i]
		line = append(line, "rg "+strings.Join(quoteArgs(args), " "))
	}
	res.Command = strings.Join(line, " | ")
	var out bytes.Buffer
	cmds[len(cmds)-1].Stdout = &out
	// The pipes between stages: each one's write end belongs to its writer once started.
	var closeAfterStart []io.Closer
	for i := 0; i < len(cmds)-1; i++ {
		pr, pw, err := os.Pipe()
		if err != nil {
			return res, fmt.Errorf("ripgrep: pipe: %w", err)
		}
		cmds[i].Stdout, cmds[i+1].Stdin = pw, pr
		closeAfterStart = append(closeAfterStart, pw, pr)
	}
	start := time.Now()
	started := 0
	for _, c := range cmds {
		if err = c.Start(); err != nil {
			break
		}
		started++
	}
	for _, c := range closeAfterStart {
		_ = c.Close()
	}
	if err != nil {
		for _, c := range cmds[:started] {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		return res, fmt.Errorf("ripgrep: start %s: %w", rgPath, err)
	}
	var errs []error
	for i, c := range cmds {
		werr := c.Wait()
		// Exit status 1 is "no line matched"; 2 is an error.
		var ee *exec.ExitError
		if werr == nil || errors.As(werr, &ee) && ee.ExitCode() == 1 {
			continue
		}
		errs = append(errs, fmt.Errorf("stage %d: %w: %s", i+1, werr, strings.TrimSpace(stderrs[i].String())))
	}
	res.Wall = time.Since(start)
	res.MaxRSS = -1
	if timePath != "" {
		for _, f := range rssFiles {
			kib, err := readRSS(f)
			if err != nil {
				errs = append(errs, err)
			}
			res.MaxRSS = max(res.MaxRSS, kib*1024)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("ripgrep %s: %w", res.Command, err)
	}
	res.Hits, err = sumCounts(out.String())
	if err != nil {
		return res, fmt.Errorf("ripgrep %s: %w", res.Command, err)
	}
	return res, nil
}

// readRSS reads the peak resident set (KiB) GNU time wrote: its last line.
func readRSS(path string) (int64, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the temporary file made above
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("peak RSS: %s is empty", path)
	}
	n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	return n, nil
}

// sumCounts adds up rg -c's output: "path:count" per file, or a bare count from stdin.
func sumCounts(out string) (int, error) {
	total := 0
	for l := range strings.Lines(out) {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		n, err := strconv.Atoi(l[strings.LastIndexByte(l, ':')+1:])
		if err != nil {
			return 0, fmt.Errorf("unexpected count line %q", l)
		}
		total += n
	}
	return total, nil
}

// quoteArgs quotes what a shell would split, for the command line shown in reports.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'$\\|&;<>*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}
