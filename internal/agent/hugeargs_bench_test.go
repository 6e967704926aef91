package agent_test

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/transcript"
)

// BenchmarkHugeArguments measures a turn whose model streams 45 MB of write_file arguments,
// through the real provider client, tools and transcript writer, then a second turn from the
// transcript. The figures are for the record (docs/ai-chat.md), not limits:
//
//	go test -run '^$' -bench HugeArguments -benchtime 1x ./internal/agent/
//
// peak-RSS-MB is the process's high-water mark over the turns (reset before them, Linux only);
// alloc-MB what they allocated; live-MB the heap still reachable after them with the
// conversation open; rss-after-MB the resident size after returning free memory to the OS.
func BenchmarkHugeArguments(b *testing.B) {
	const size = 45 << 20
	for b.Loop() {
		ws := b.TempDir()
		srv := newChatServer(b, false, func(n int, _ []byte, w *chatSSE) {
			if n == 0 {
				w.bigCall("call_big", "write_file", `{"path":"big.txt","content":"`, size, `"}`)
				return
			}
			w.text("ok")
		})
		p := srv.open(b)
		ts := toolset(b, permission.YOLO, ws)
		tw, err := transcript.Create(filepath.Join(b.TempDir(), "t.jsonl"), ws, transcript.WriterOptions{})
		if err != nil {
			b.Fatal(err)
		}
		opts := agent.Options{Append: func(m provider.Message) error { _, err := tw.AppendMessage(m); return err }}
		turn := func(text string) {
			cx, err := tw.Context()
			if err != nil {
				b.Fatal(err)
			}
			msgs, err := provider.FromContext(cx.Messages)
			if err != nil {
				b.Fatal(err)
			}
			u := provider.UserText(text, 1)
			if _, err := tw.AppendMessage(u); err != nil {
				b.Fatal(err)
			}
			res, err := agent.Run(b.Context(), p, ts, provider.Request{Messages: append(msgs, u)}, opts)
			if err != nil || res.End != agent.EndCompleted {
				b.Fatalf("%+v %v", res, err)
			}
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		resetPeakRSS()
		turn("write it")
		turn("again")
		runtime.ReadMemStats(&after)
		peak := procStatus("VmHWM")
		runtime.GC()
		var live runtime.MemStats
		runtime.ReadMemStats(&live)
		debug.FreeOSMemory()
		rss := procStatus("VmRSS")
		fi, err := os.Stat(tw.Path())
		if err != nil {
			b.Fatal(err)
		}
		_, sizes := srv.requests()
		b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MB")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "alloc-MB")
		b.ReportMetric(float64(live.HeapAlloc)/(1<<20), "live-MB")
		b.ReportMetric(float64(rss)/(1<<20), "rss-after-MB")
		b.ReportMetric(float64(fi.Size())/(1<<20), "transcript-MB")
		b.ReportMetric(float64(sizes[len(sizes)-1])/(1<<20), "last-request-MB")
		if err := tw.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// resetPeakRSS resets the process's VmHWM (Linux; elsewhere the figure is the whole run's).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// procStatus reads a size field of /proc/self/status in bytes (0 where there is none).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
