package aichat_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestResumeFigure measures the time from a gateway's start (its registry restoring the
// sessions a killed gateway left) to every interrupted conversation resumed: its turn closed,
// its session open again and the continuation's answer recorded, for 1, 10 and 100
// conversations cut mid-stream. It is a figure, not a check: NEXUS_RESUME_FIGURE=1 runs it
// (docs/BENCHMARKS.md).
func TestResumeFigure(t *testing.T) {
	if os.Getenv("NEXUS_RESUME_FIGURE") == "" {
		t.Skip("a figure: set NEXUS_RESUME_FIGURE=1")
	}
	for _, n := range []int{1, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var restarted atomic.Bool
			var answered atomic.Int32
			var mu sync.Mutex
			var lastReply time.Time
			e := newEnv(t, func(req chatRequest, w *sse) {
				if !restarted.Load() {
					w.hang("partial")
					return
				}
				w.text("the answer")
				w.done()
				answered.Add(1)
				mu.Lock()
				lastReply = time.Now()
				mu.Unlock()
			}).withBroker(t)
			cfg := func(state string) live.Config {
				store, err := live.OpenDiskStore(filepath.Join(state, "live"), live.DiskOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return live.Config{IdleTimeout: -1, Store: store, MaxSessions: 4 * n}
			}
			r := e.gatewayWith(t, cfg(e.state))
			keys := make([]string, n)
			for i := range n {
				keys[i] = fmt.Sprintf("agent:main:test:fig%d", i)
				s := e.open(t, r, keys[i], "yolo")
				if _, err := r.Send(context.Background(), s.SessionID, live.SendRequest{Data: []byte("the question")}); err != nil {
					t.Fatal(err)
				}
				(&watcher{r: r, id: s.SessionID}).started(t)
			}
			e2 := e.crashCopy(t)
			restarted.Store(true)
			start := time.Now()
			r2 := e2.gatewayWith(t, cfg(e2.state))
			for answered.Load() < int32(n) {
				time.Sleep(100 * time.Microsecond) // a figure's poll, not a test's wait
			}
			mu.Lock()
			replied := lastReply.Sub(start)
			mu.Unlock()
			testkit.Eventually(t, "every turn ended", func() bool {
				for _, k := range keys {
					runs := transcriptRuns(t, e2, k)
					if len(runs) != 2 || !runs[1].Ended {
						return false
					}
				}
				return true
			})
			ended := time.Since(start)
			open := 0
			for _, c := range liveChats(t, r2) {
				if c.Metadata["replaces"] != nil {
					open++
				}
			}
			if open != n {
				t.Fatalf("%d sessions reopened of %d", open, n)
			}
			t.Logf("conversations=%d last answer recorded by the model after %s; every run ended (polled) by %s", n, replied, ended)
		})
	}
}
