package chatstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

const (
	benchEntries = 200
	benchWriters = 8
	benchEach    = 25 // patches per writer per iteration
)

// seedBench writes a sessions.json of benchEntries realistic entries (~600 bytes each).
func seedBench(b *testing.B, dir string) {
	b.Helper()
	m := map[string]map[string]any{}
	for i := range benchEntries {
		id := fmt.Sprintf("019e%04x-0000-7000-8000-%012x", i, i)
		m[fmt.Sprintf("agent:main:dm:b%d", i)] = map[string]any{
			"sessionId": id, "updatedAt": 1777626000000 + i, "sessionFile": filepath.Join(dir, id+".jsonl"),
			"chatType": "direct", "model": "claude-sonnet-4-5", "modelProvider": "anthropic",
			"inputTokens": 12000 + i, "outputTokens": 800, "totalTokens": 13000, "contextTokens": 200000,
			"compactionCount": 1, "lastChannel": "telegram", "queueMode": "collect", "thinkingLevel": "low",
			"origin":           map[string]any{"provider": "telegram", "surface": "dm", "chatType": "direct", "from": fmt.Sprintf("telegram:%d", 1000+i), "accountId": "default"},
			"deliveryContext":  map[string]any{"channel": "telegram", "to": fmt.Sprintf("telegram:%d", 1000+i), "accountId": "default"},
			"sessionStartedAt": 1777600000000, "lastInteractionAt": 1777626000000 + i,
		}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
		b.Fatal(err)
	}
}

// upstreamWriter does what OpenClaw's store does: an O_EXCL lock file, read and parse the
// whole store, replace the entry with {...old, ...patch}, JSON.stringify(store, null, 2) to a
// temp file, rename, no fsync. Writers in one process queue behind one another.
type upstreamWriter struct {
	path string
	mu   sync.Mutex
	n    int
}

func (u *upstreamWriter) patch(key string, p map[string]any) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	lock := u.path + ".lock"
	for {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			_ = f.Close()
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		time.Sleep(25 * time.Millisecond)
	}
	defer func() { _ = os.Remove(lock) }()
	data, err := os.ReadFile(u.path)
	if err != nil {
		return err
	}
	var store map[string]map[string]any
	if err := json.Unmarshal(data, &store); err != nil {
		return err
	}
	next := map[string]any{}
	for k, v := range store[key] {
		next[k] = v
	}
	for k, v := range p {
		next[k] = v
	}
	next["updatedAt"] = time.Now().UnixMilli()
	store[key] = next
	out, err := json.MarshalIndent(store, "", "  ")
	if err != nil {
		return err
	}
	u.n++
	tmp := fmt.Sprintf("%s.%d.%d.tmp", u.path, os.Getpid(), u.n)
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, u.path)
}

func runWriters(b *testing.B, patch func(w, i int) error) time.Duration {
	b.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, benchWriters)
	for w := range benchWriters {
		wg.Go(func() {
			for i := range benchEach {
				if err := patch(w, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkPatchParallel measures sessions.json patches per second with 8 concurrent writers on
// a store of 200 entries: nexus (merge patch, flock, fsync of file and directory, group
// commit) against the upstream way (whole-entry replacement, temp file and rename without
// fsync) in the same run, and nexus with 8 writer processes.
func BenchmarkPatchParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("goroutines", func(b *testing.B) {
		dir := b.TempDir()
		seedBench(b, dir)
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		udir := b.TempDir()
		seedBench(b, udir)
		u := &upstreamWriter{path: filepath.Join(udir, FileName)}
		var nexusT, upT time.Duration
		b.ResetTimer()
		for b.Loop() {
			nexusT += runWriters(b, func(w, i int) error {
				_, err := s.Patch(ctx, fmt.Sprintf("agent:main:dm:b%d", (w*31+i)%benchEntries), map[string]any{"inputTokens": i, "outputTokens": w})
				return err
			})
			upT += runWriters(b, func(w, i int) error {
				return u.patch(fmt.Sprintf("agent:main:dm:b%d", (w*31+i)%benchEntries), map[string]any{"inputTokens": i, "outputTokens": w})
			})
		}
		n := float64(b.N * benchWriters * benchEach)
		b.ReportMetric(n/nexusT.Seconds(), "nexus-patches/s")
		b.ReportMetric(n/upT.Seconds(), "upstream-patches/s")
		b.ReportMetric(upT.Seconds()/nexusT.Seconds(), "nexus/upstream")
	})
	b.Run("processes", func(b *testing.B) {
		dir := b.TempDir()
		seedBench(b, dir)
		var total time.Duration
		b.ResetTimer()
		for b.Loop() {
			var cmds []*exec.Cmd
			var starts []io.WriteCloser
			for w := range benchWriters {
				cmd := childCmd(b, "writer", "STORE_DIR="+dir, fmt.Sprintf("NAME=w%d", w), fmt.Sprintf("N=%d", benchEach), fmt.Sprintf("KEYS=%d", benchEntries))
				in, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				cmds, starts = append(cmds, cmd), append(starts, in)
			}
			// the clock runs from the start signal: process start-up is not counted
			start := time.Now()
			for _, in := range starts {
				if _, err := in.Write([]byte{1}); err != nil {
					b.Fatal(err)
				}
			}
			for _, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(b.N*benchWriters*benchEach)/total.Seconds(), "nexus-patches/s")
	})
}
