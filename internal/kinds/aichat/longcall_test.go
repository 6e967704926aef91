package aichat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// TestRealLongCommand: a turn whose bash call really runs for two minutes (sleep 120, asking
// for timeout_secs 180) completes, and reports progress while it runs: an ai-tool-progress
// event every 10 s, with the time since it started and the tail of its output. It takes its
// two minutes of wall time, beside the package's other tests (t.Parallel).
func TestRealLongCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real two-minute command")
	}
	t.Parallel()
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.last().Role == "tool" {
			w.text("finished: " + req.last().text())
			return
		}
		w.call("call_long", "bash", map[string]any{"command": "echo building; sleep 120; echo built", "timeout_secs": 180})
	})
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:long", "yolo")
	w := &watcher{r: r, id: s.SessionID}
	start := time.Now()
	send(t, r, s.SessionID, "build it")
	var progress []abi.AIToolProgress
	var result abi.AITool
	for {
		// One event at a time: each comes within the progress interval, so a hang is still
		// found within the watcher's patience.
		ev := w.until(t, "progress or the turn's end", func(e *live.Event) bool {
			switch e.Payload.(type) {
			case abi.AIToolProgress, abi.AITurn:
				return true
			case abi.AITool:
				return e.Payload.(abi.AITool).Phase == abi.PhaseCompleted
			}
			return false
		})
		switch p := ev.Payload.(type) {
		case abi.AIToolProgress:
			progress = append(progress, p)
			continue
		case abi.AITool:
			result = p
			continue
		case abi.AITurn:
			if p.Phase != abi.PhaseEnded {
				continue
			}
			if p.End != abi.TurnCompleted {
				t.Fatalf("turn %+v: %s", p, describe(w.seen))
			}
		}
		break
	}
	took := time.Since(start)
	if result.IsError || !strings.Contains(result.Output, "building\nbuilt\n[exit code 0]") {
		t.Fatalf("after %s the call's result %+v", took, result)
	}
	// A progress event every 10 s of the 120: 11 or 12 of them (the last may race the end).
	if len(progress) < 11 {
		t.Fatalf("%d progress events in %s: %+v", len(progress), took, progress)
	}
	for i, p := range progress {
		if p.ToolCallID != "call_long" || p.Name != "bash" || !strings.HasPrefix(p.Output, "building\n") ||
			(i > 0 && p.ElapsedMs <= progress[i-1].ElapsedMs) {
			t.Fatalf("progress %d: %+v", i, p)
		}
	}
	t.Logf("a real 120 s command: the turn took %s, %d progress events, the last at %d ms", took.Round(time.Millisecond), len(progress), progress[len(progress)-1].ElapsedMs)
}
