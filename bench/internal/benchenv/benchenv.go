// Package benchenv describes the machine a benchmark ran on, for the results of every
// program under bench/.
package benchenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the figures were taken.
type Machine struct {
	NumCPU    int    `json:"numCPU"`
	CPUModel  string `json:"cpuModel"`
	MemTotal  string `json:"memTotal"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"goVersion"`
	Shell     string `json:"shell"`
	Tmux      string `json:"tmux,omitempty"`
	Commit    string `json:"commit,omitempty"`
	// LoadStart and LoadEnd are /proc/loadavg when the run began and ended: other work on the
	// machine skews every figure, so check them before trusting a run.
	LoadStart string `json:"loadStart"`
	LoadEnd   string `json:"loadEnd,omitempty"`
}

// LoadAvg is the first three fields of /proc/loadavg ("" when unknown).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Probe describes this machine; shell is the shell whose version to report.
func Probe(shell string) Machine {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := Machine{NumCPU: goruntime.NumCPU(), GoVersion: goruntime.Version(), LoadStart: LoadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				m.MemTotal = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if out, err := exec.CommandContext(ctx, shell, "--version").Output(); err == nil {
		m.Shell = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	if out, err := exec.CommandContext(ctx, "tmux", "-V").Output(); err == nil {
		m.Tmux = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += "+dirty"
		}
	}
	return m
}

// WriteResults writes res as indented JSON to dir/<prefix>-<UTC time>.json and to
// dir/<prefix>-latest.json, and returns the first path.
func WriteResults(dir, prefix string, res any) (string, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	path := filepath.Join(dir, prefix+"-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	_ = os.WriteFile(filepath.Join(dir, prefix+"-latest.json"), b, 0o600)
	return path, nil
}

// PrintFooter ends a benchmark's report: the errors met, if any, and the total run time.
func PrintFooter(w io.Writer, errs []string, seconds float64) {
	if len(errs) > 0 {
		fmt.Fprintln(w, "\nERRORS:")
		for _, e := range errs {
			fmt.Fprintln(w, "  "+e)
		}
	}
	fmt.Fprintf(w, "\ntotal %.1fs\n", seconds)
}

// RSS is this process's resident set in bytes (/proc/self/status VmRSS), 0 when unknown.
func RSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}
