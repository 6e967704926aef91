package aichat_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// compactions are the ai-compaction events seen, as "phase/reason".
func compactions(evs []*live.Event) []string {
	var out []string
	for _, ev := range evs {
		if p, ok := ev.Payload.(abi.AICompaction); ok {
			out = append(out, p.Phase+"/"+p.Reason)
		}
	}
	return out
}

// summaries counts the model's summary requests.
func (m *model) summaries() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, r := range m.requests {
		if r.isSummary() {
			n++
		}
	}
	return n
}

// TestCompactionNothingToCut: a context past the threshold that is all the recent part
// compaction keeps (one message of most of the window) asks nothing of the model and says so
// once, not at every turn; asked for, it is an INVALID_ARGUMENT error whose message does not
// repeat its code.
func TestCompactionNothingToCut(t *testing.T) {
	e := newEnv(t, func(req chatRequest, w *sse) {
		if req.isSummary() {
			w.text("SUMMARY")
			return
		}
		w.text("ok")
	})
	e.m.countTokens = true
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:nothing-to-cut", "yolo")
	w := &watcher{r: r, id: s.SessionID}
	for _, m := range []string{strings.Repeat("huge ", 760), "more", "again"} {
		send(t, r, s.SessionID, m)
		if end := w.turnEnded(t); end.End != abi.TurnCompleted {
			t.Fatalf("turn %+v: %s", end, describe(w.seen))
		}
	}
	if n := e.m.summaries(); n != 0 {
		t.Fatalf("%d summary requests with nothing to cut", n)
	}
	var skipped []abi.AICompaction
	for _, ev := range w.seen {
		if p, ok := ev.Payload.(abi.AICompaction); ok && p.Phase == abi.PhaseSkipped {
			skipped = append(skipped, p)
		}
		if p, ok := ev.Payload.(abi.ErrorPayload); ok {
			t.Errorf("an error at a turn: %+v", p.Error)
		}
	}
	if len(skipped) != 1 || skipped[0].Reason != "threshold" || !strings.Contains(skipped[0].Message, "nothing to compact") || skipped[0].TokensBefore <= 900 {
		t.Fatalf("the skipped compactions %+v: %s", skipped, describe(w.seen))
	}
	if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandCompact}); err != nil {
		t.Fatal(err)
	}
	ev := w.until(t, "the asked-for compaction's error", func(e *live.Event) bool { _, ok := e.Payload.(abi.ErrorPayload); return ok })
	if p := ev.Payload.(abi.ErrorPayload); p.Error.Code != abi.CodeInvalidArgument || p.Error.Message != "nothing to compact when keeping the last 250 tokens" {
		t.Fatalf("asked for: %+v", p.Error)
	}
	if n := e.m.summaries(); n != 0 {
		t.Fatalf("%d summary requests with nothing to cut", n)
	}
}

// readsThenDone(n) calls read_file on big1.txt, then after each result the next file, and
// answers once the nth is read; summary requests get a summary.
func readsThenDone(n int) func(req chatRequest, w *sse) {
	return func(req chatRequest, w *sse) {
		switch {
		case req.isSummary():
			w.text("SUMMARY: read the first files")
			return
		case req.last().Role == "user":
			w.call("r1", "read_file", map[string]any{"path": "big1.txt"})
			return
		}
		for k := 1; k < n; k++ {
			if strings.Contains(req.last().text(), fmt.Sprintf("file%d ", k)) {
				w.call(fmt.Sprintf("r%d", k+1), "read_file", map[string]any{"path": fmt.Sprintf("big%d.txt", k+1)})
				return
			}
		}
		w.text("done")
	}
}

// bigFiles writes big1.txt ... bigN.txt, each about 480 tokens of "fileK" (as read_file
// numbers their lines).
func bigFiles(t *testing.T, dir string, n int) {
	t.Helper()
	for k := 1; k <= n; k++ {
		word := fmt.Sprintf("file%d ", k)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("big%d.txt", k)), []byte(strings.Repeat(strings.Repeat(word, 10)+"\n", 27)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompactionBetweenIterations: a turn whose tool results cross the threshold is compacted
// between its iterations (before the model call after the crossing), and goes on from the
// summary and the recent part.
func TestCompactionBetweenIterations(t *testing.T) {
	e := newEnv(t, readsThenDone(4))
	e.m.countTokens = true
	e.window = 2000
	bigFiles(t, e.ws, 4)
	r := e.gateway(t)
	s := e.open(t, r, "agent:main:test:compact-between", "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "work")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted || end.Iterations != 5 {
		t.Fatalf("turn %+v: %s", end, describe(w.seen))
	}
	if got := fmt.Sprint(compactions(w.seen)); got != "[started/threshold ended/threshold]" {
		t.Fatalf("compactions in the turn %s: %s", got, describe(w.seen))
	}
	last := e.m.requests[len(e.m.requests)-1]
	if last.isSummary() || !last.has("SUMMARY: read the first files") || last.has("file1 file1") || !last.has("file4 file4") {
		t.Fatalf("the call after the compaction sent %+v", last.Messages)
	}
}

// TestMemoryFlush: with [compaction] memory_flush, a threshold compaction is preceded by one
// silent turn whose only tool appends to the workspace's MEMORY.md; nothing of it enters the
// transcript. Without room for it (min_reserve_tokens) it is skipped; without the setting
// there is none.
func TestMemoryFlush(t *testing.T) {
	for _, tc := range []struct {
		name, extra, want string
		flushed           bool
	}{
		{"on", "[compaction]\nmemory_flush = true\nmin_reserve_tokens = 10\n", "memory flush: ", true},
		{"no room", "[compaction]\nmemory_flush = true\nmin_reserve_tokens = 1000\n", "memory flush skipped", false},
		{"off", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var flushTools []string
			reads := readsThenDone(8)
			e := newEnv(t, func(req chatRequest, w *sse) {
				if strings.HasPrefix(req.lastUser(), "[memory flush]") {
					for _, tl := range req.Tools {
						flushTools = append(flushTools, tl.Function.Name)
					}
					if req.last().Role == "user" {
						w.call("m1", "memory_append", map[string]any{"text": "the user reads big files"})
						return
					}
					w.text("NO_REPLY")
					return
				}
				reads(req, w)
			})
			e.m.countTokens = true
			e.window = 4000
			e.extra = tc.extra
			bigFiles(t, e.ws, 8)
			r := e.gateway(t)
			key := "agent:main:test:flush-" + strings.ReplaceAll(tc.name, " ", "-")
			s := e.open(t, r, key, "trusted") // the flush's one tool asks no one
			w := &watcher{r: r, id: s.SessionID}
			send(t, r, s.SessionID, "work")
			if end := w.turnEnded(t); end.End != abi.TurnCompleted {
				t.Fatalf("turn %+v: %s", end, describe(w.seen))
			}
			var flush []abi.AICompaction
			for _, ev := range w.seen {
				if p, ok := ev.Payload.(abi.AICompaction); ok && p.Phase == abi.PhaseMemoryFlush {
					flush = append(flush, p)
				}
			}
			want := "[started/threshold ended/threshold]"
			if tc.want != "" {
				want = "[memory-flush/threshold started/threshold ended/threshold]"
				if len(flush) != 1 || !strings.HasPrefix(flush[0].Message, tc.want) {
					t.Fatalf("flush events %+v", flush)
				}
			}
			if got := fmt.Sprint(compactions(w.seen)); got != want {
				t.Fatalf("compactions %s: %s", got, describe(w.seen))
			}
			mem, err := os.ReadFile(filepath.Join(e.ws, "MEMORY.md"))
			if tc.flushed != (err == nil) || (tc.flushed && string(mem) != "the user reads big files\n") {
				t.Fatalf("MEMORY.md: %q %v", mem, err)
			}
			if tc.flushed && fmt.Sprint(flushTools) != "[memory_append memory_append]" {
				t.Fatalf("the flush's tools %v", flushTools)
			}
			for _, m := range e.history(t, key) {
				for _, c := range m.Content {
					if strings.Contains(c.Text, "memory flush") || strings.Contains(c.Text, "NO_REPLY") || c.Name == "memory_append" {
						t.Fatalf("the flush entered the transcript: %+v", m)
					}
				}
			}
		})
	}
}
