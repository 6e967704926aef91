package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// benchChunk is a typical PTY read of bulk output (Linux hands out about 4 KiB per read).
var benchChunk = bytes.Repeat([]byte("Z"), 4095)

func benchDefaultLimits() LogLimits {
	c := Config{}
	c.fill()
	return c.Log
}

func benchOutputEvent(b []byte) *Event {
	return &Event{Type: abi.EventData, Time: time.Unix(1700000000, 0), SessionID: "bench", Payload: Output(b)}
}

// BenchmarkEventLogAppend is the producer side: one terminal read becoming a logged event, with
// the default ring limits so eviction runs in steady state, in memory and on disk.
func BenchmarkEventLogAppend(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		l := benchLog(benchDefaultLimits())
		b.SetBytes(int64(len(benchChunk)))
		b.ReportAllocs()
		for b.Loop() {
			l.append(benchOutputEvent(benchChunk))
		}
	})
	b.Run("disk", func(b *testing.B) {
		st, err := OpenDiskStore(b.TempDir(), DiskOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = st.Close() }()
		_, err = st.Put(context.Background(), abi.Session{SessionID: "bench"}, 0)
		if err != nil {
			b.Fatal(err)
		}
		el, err := st.CreateLog(context.Background(), "bench", benchDefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		l := newSessionLog(context.Background(), el, benchDefaultLimits(), func(err error) { b.Fatal(err) })
		b.SetBytes(int64(len(benchChunk)))
		b.ReportAllocs()
		for b.Loop() {
			l.append(benchOutputEvent(benchChunk))
		}
	})
}

func benchLog(l LogLimits) *sessionLog {
	return newSessionLog(context.Background(), NewMemoryLog(l), l, nil)
}

// BenchmarkEventLogRead is one subscriber's pull of a batch (the gateway reads up to 512).
func BenchmarkEventLogRead(b *testing.B) {
	l := benchLog(benchDefaultLimits())
	for range 1024 {
		l.append(benchOutputEvent(benchChunk))
	}
	last, _ := l.lastSeq(context.Background())
	from := last - 512
	b.ReportAllocs()
	for b.Loop() {
		if res, _ := l.read(context.Background(), from, 512); len(res.Events) != 512 {
			b.Fatalf("read %d events", len(res.Events))
		}
	}
}

// BenchmarkEventJSON encodes a fresh data event per content type: what the first subscriber of
// each content type pays per event.
func BenchmarkEventJSON(b *testing.B) {
	for _, ct := range []abi.ContentType{abi.ContentANSI, abi.ContentText, abi.ContentRaw} {
		b.Run(string(ct), func(b *testing.B) {
			b.SetBytes(int64(len(benchChunk)))
			b.ReportAllocs()
			for b.Loop() {
				_ = benchOutputEvent(benchChunk).JSON(ct)
			}
		})
	}
}

// BenchmarkEventJSONFanout is 50 subscribers asking for the same event: the encoding is done
// once and shared, so the cost per subscriber should be close to nothing.
func BenchmarkEventJSONFanout(b *testing.B) {
	const subs = 50
	b.SetBytes(int64(len(benchChunk)) * subs)
	b.ReportAllocs()
	for b.Loop() {
		e := benchOutputEvent(benchChunk)
		for range subs {
			_ = e.JSON(abi.ContentANSI)
		}
	}
}

// BenchmarkEventLogFanout is one producer appending 4 KiB events while N readers each pull
// every event (batches of up to 512, waking on the log's wake channel, encoding as ansi) —
// the gateway's stream loop without the sockets. The log is large enough that nobody misses.
func BenchmarkEventLogFanout(b *testing.B) {
	for _, readers := range []int{1, 50} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) {
			l := benchLog(LogLimits{Events: 1 << 30, Bytes: 1 << 62, Pinned: 1024})
			b.SetBytes(int64(len(benchChunk)) * int64(readers))
			b.ReportAllocs()
			n := b.N
			var wg sync.WaitGroup
			for range readers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var after uint64
					for after < uint64(n) {
						res, _ := l.read(context.Background(), after, 512)
						if len(res.Events) == 0 {
							_ = l.wait(context.Background(), after)
							continue
						}
						for _, e := range res.Events {
							_ = e.JSON(abi.ContentANSI)
						}
						after = res.Next
					}
				}()
			}
			b.ResetTimer()
			for range n {
				l.append(benchOutputEvent(benchChunk))
			}
			wg.Wait()
		})
	}
}

// TestEventJSONMatchesWire guards the one-pass encoding of Event.JSON: its bytes must be those
// of json.Marshal(e.Wire(ct)), the ABI envelope, for every payload kind and content type.
func TestEventJSONMatchesWire(t *testing.T) {
	exit := 3
	tm := time.Date(2024, 5, 6, 7, 8, 9, 10_000_000, time.UTC)
	events := []*Event{
		{Seq: 1, Type: abi.EventData, Time: tm, SessionID: "s<1>&", Payload: Output("\x1b[31mred\x1b[0m <b>&\"\\ \xff\xfe \u2028 é")},
		{Seq: 2, Type: abi.EventData, Time: tm, SessionID: "s1", Payload: Output(nil)},
		{Seq: 3, Type: abi.EventStatus, Time: tm, SessionID: "s1", Payload: abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateIdle, Message: "<x>", SessionStatus: abi.StatusPaused}},
		{Seq: 4, Type: abi.EventError, Time: tm, SessionID: "s1", Payload: abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeEventsMissed, Message: "m", Details: map[string]any{"missed": uint64(7), "b": "<"}}}},
		{Seq: 5, Type: abi.EventClose, Time: tm, SessionID: "s1", Payload: abi.ClosePayload{Type: abi.PayloadClose, Reason: abi.CloseExited, Status: abi.StatusClosed, ExitCode: &exit}},
		{Seq: 6, Type: abi.EventMetadata, Time: tm, SessionID: "s1", Payload: abi.MetadataPayload{Type: abi.PayloadMetadata, Metadata: map[string]any{"cols": 80, "cwd": "/tmp/<p>"}}},
		{Seq: 7, Type: abi.EventStatus, Time: tm, SessionID: "s1", Payload: nil},
	}
	for _, e := range events {
		for _, ct := range []abi.ContentType{abi.ContentANSI, abi.ContentText, abi.ContentRaw} {
			want, err := json.Marshal(e.Wire(ct))
			if err != nil {
				t.Fatal(err)
			}
			if got := e.JSON(ct); string(got) != string(want) {
				t.Errorf("seq %d %s:\n got  %s\n want %s", e.Seq, ct, got, want)
			}
		}
	}
}
