package live

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// The registry's contract is in livetest (run by live_test.go); these tests pin the insides.

var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestValidTransition pins the status machine table.
func TestValidTransition(t *testing.T) {
	all := []abi.Status{abi.StatusActive, abi.StatusPaused, abi.StatusClosed, abi.StatusError}
	allowed := map[[2]abi.Status]bool{
		{abi.StatusActive, abi.StatusPaused}: true,
		{abi.StatusActive, abi.StatusClosed}: true,
		{abi.StatusActive, abi.StatusError}:  true,
		{abi.StatusPaused, abi.StatusActive}: true,
		{abi.StatusPaused, abi.StatusClosed}: true,
		{abi.StatusPaused, abi.StatusError}:  true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := validTransition(from, to); got != allowed[[2]abi.Status{from, to}] {
				t.Errorf("validTransition(%s, %s) = %v", from, to, got)
			}
		}
	}
}

// ---- the log itself ----

// appendN appends one event per letter of spec (d: data, s: status) through a session log.
func appendN(l *sessionLog, spec string) {
	for i, c := range spec {
		typ := abi.EventData
		var payload any = Output(fmt.Sprint(i))
		if c == 's' {
			typ = abi.EventStatus
			payload = abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected}
		}
		l.append(&Event{Type: typ, Time: t0, SessionID: "x", Payload: payload})
	}
}

func seqsOf(es []*Event) []uint64 {
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func testLog(l LogLimits) *sessionLog {
	return newSessionLog(context.Background(), NewMemoryLog(l), l, nil)
}

func mustRead(t *testing.T, l *sessionLog, after uint64, limit int) readResult {
	t.Helper()
	res, err := l.read(context.Background(), after, limit)
	mustOK(t, err)
	return res
}

func TestSessionLog(t *testing.T) {
	t.Run("ring storage is compacted", func(t *testing.T) {
		m := NewMemoryLog(LogLimits{Events: 10, Bytes: 1 << 30, Pinned: 10})
		l := newSessionLog(context.Background(), m, m.limits, nil)
		for range 100 {
			appendN(l, "dddddddddd")
		}
		live, total := len(m.ring)-m.head, len(m.ring)
		if live != 10 || total > 200 {
			t.Errorf("ring holds %d live of %d slots after 1000 appends", live, total)
		}
		if res := mustRead(t, l, 990, 0); fmt.Sprint(seqsOf(res.Events)) != "[991 992 993 994 995 996 997 998 999 1000]" {
			t.Errorf("read = %v", seqsOf(res.Events))
		}
		fl := &l.fc
		if n := len(fl.before) - fl.beforeHead; n != 10 || len(fl.before) > 200 {
			t.Errorf("flow record holds %d of %d slots", n, len(fl.before))
		}
	})
	t.Run("finish", func(t *testing.T) {
		l := testLog(LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		appendN(l, "dd")
		woken := make(chan error)
		go func() { woken <- l.wait(context.Background(), 2) }()
		l.finish()
		mustOK(t, <-woken) // finishing wakes waiting readers
		if l.append(&Event{Type: abi.EventData, Payload: Output("late")}) {
			t.Error("append after finish succeeded")
		}
		if last := lastSeqOf(t, l); last != 2 {
			t.Errorf("lastSeq = %d", last)
		}
		if res := mustRead(t, l, 0, 1); res.Done || len(res.Events) != 1 {
			t.Errorf("read(0, limit 1) = %+v: Done before the last event was read", res)
		}
		if res := mustRead(t, l, 1, 0); !res.Done || len(res.Events) != 1 {
			t.Errorf("read(1) = %+v: the batch holding the last event is Done", res)
		}
		if res := mustRead(t, l, 2, 0); !res.Done || len(res.Events) != 0 {
			t.Error("not done at the end")
		}
		l.finish() // idempotent
	})
	t.Run("append wakes readers", func(t *testing.T) {
		l := testLog(LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		woken := make(chan error)
		go func() { woken <- l.wait(context.Background(), 0) }()
		appendN(l, "d")
		mustOK(t, <-woken)
	})
	t.Run("a failing log", func(t *testing.T) {
		var reported []error
		l := newSessionLog(context.Background(), failingLog{MemoryLog: NewMemoryLog(LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10}), err: errDisk}, LogLimits{Events: 10}, func(err error) { reported = append(reported, err) })
		if l.append(&Event{Type: abi.EventData, Payload: Output("x")}) || lastSeqOf(t, l) != 0 {
			t.Error("an event the log refused was numbered")
		}
		l.log = failingLog{MemoryLog: l.log.(failingLog).MemoryLog, err: fmt.Errorf("%w: disk full", ErrNotDurable)}
		if !l.append(&Event{Type: abi.EventData, Payload: Output("x")}) || lastSeqOf(t, l) != 1 {
			t.Error("an event kept in memory only was not published")
		}
		if len(reported) != 1 {
			t.Errorf("reported %v: each log reports its first failure, once", reported)
		}
	})
}

var errDisk = fmt.Errorf("write: input/output error")

// failingLog stores nothing and fails with err (ErrNotDurable: stores in memory and says so).
type failingLog struct {
	*MemoryLog
	err error
}

func (f failingLog) Append(ctx context.Context, events ...*Event) (Appended, error) {
	if errors.Is(f.err, ErrNotDurable) {
		res, _ := f.MemoryLog.Append(ctx, events...)
		return res, f.err
	}
	return Appended{}, f.err
}

func lastSeqOf(t *testing.T, l *sessionLog) uint64 {
	t.Helper()
	last, err := l.lastSeq(context.Background())
	mustOK(t, err)
	return last
}

func TestEventJSON(t *testing.T) {
	raw := []byte("\x1b[31mred\x1b[0m \xff")
	e := &Event{Seq: 9, Type: abi.EventData, Time: time.Date(2024, 5, 6, 7, 8, 9, 10_000_000, time.UTC), SessionID: "s1", Payload: Output(raw)}
	tests := []struct {
		ct          abi.ContentType
		wantContent string
	}{
		{abi.ContentANSI, "\x1b[31mred\x1b[0m \ufffd"},
		{abi.ContentText, "red "}, // escapes stripped (the stripper drops the invalid byte)
		{abi.ContentRaw, base64.StdEncoding.EncodeToString(raw)},
	}
	for _, tc := range tests {
		t.Run(string(tc.ct), func(t *testing.T) {
			b := e.JSON(tc.ct)
			var w abi.Event
			mustOK(t, abi.DecodeStrict(b, &w))
			if w.Event != abi.EventData || w.Seq != 9 || w.SessionID != "s1" || w.Timestamp != "2024-05-06T07:08:09.010Z" {
				t.Errorf("envelope %+v", w)
			}
			var out abi.TerminalOutput
			mustOK(t, abi.DecodeStrict(w.Payload, &out))
			if out.Type != abi.PayloadTerminalOutput || out.ContentType != tc.ct || out.Content != tc.wantContent {
				t.Errorf("payload %+v, want content %q", out, tc.wantContent)
			}
			if again := e.JSON(tc.ct); &again[0] != &b[0] {
				t.Error("encoding not cached per content type")
			}
		})
	}
	if got, err := decodeRaw(e.JSON(abi.ContentRaw)); err != nil || string(got) != string(raw) {
		t.Errorf("raw bytes = %q, %v", got, err)
	}

	st := &Event{Seq: 1, Type: abi.EventStatus, Time: t0, SessionID: "s1", Payload: abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateIdle, SessionStatus: abi.StatusPaused}}
	a, b := st.JSON(abi.ContentANSI), st.JSON(abi.ContentRaw)
	if string(a) != string(b) {
		t.Errorf("non-data events must not depend on the content type: %s vs %s", a, b)
	}
	want := `{"event":"status","timestamp":"2024-01-02T03:04:05.000Z","sessionId":"s1","seq":1,"payload":{"type":"status","status":"idle","sessionStatus":"paused"}}`
	if string(a) != want {
		t.Errorf("status JSON\n got  %s\n want %s", a, want)
	}
}

func decodeRaw(b []byte) ([]byte, error) {
	var w abi.Event
	if err := abi.DecodeStrict(b, &w); err != nil {
		return nil, err
	}
	var out abi.TerminalOutput
	if err := abi.DecodeStrict(w.Payload, &out); err != nil {
		return nil, err
	}
	return out.Bytes()
}

func TestNewSessionID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewSessionID()
		if len(id) != 36 || seen[id] {
			t.Fatalf("NewSessionID() = %q (duplicate %v)", id, seen[id])
		}
		seen[id] = true
	}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	c.fill()
	if c.MaxSessions != DefaultMaxSessions || c.IdleTimeout != DefaultIdleTimeout || c.Retention != DefaultRetention ||
		c.Sweep != time.Second || c.EphemeralGrace != 30*time.Second || c.Log.Events <= 0 || c.Log.Bytes <= 0 || c.Log.Pinned <= 0 ||
		c.Now == nil || c.NewID == nil || c.Logger == nil {
		t.Errorf("defaults = %+v", c)
	}
	c = Config{IdleTimeout: -1, MaxSessions: 3}
	c.fill()
	if c.IdleTimeout != -1 || c.MaxSessions != 3 {
		t.Errorf("explicit values overridden: %+v", c)
	}
}

// TestAppendAllWakesOnce checks that a reader woken by appendAll sees every
// event of the batch in one read: a poller that gets a session's closed
// status must get its close event in the same answer.
func TestAppendAllWakesOnce(t *testing.T) {
	l := testLog(LogLimits{Events: 64, Bytes: 1 << 20, Pinned: 8})
	l.append(&Event{Type: abi.EventData})
	first := mustRead(t, l, 1, 0)
	if len(first.Events) != 0 {
		t.Fatalf("read after 1: %d events", len(first.Events))
	}
	done := make(chan readResult)
	go func() {
		_ = l.wait(context.Background(), 1)
		res, _ := l.read(context.Background(), 1, 0)
		done <- res
	}()
	l.appendAll(&Event{Type: abi.EventStatus}, &Event{Type: abi.EventClose})
	got := <-done
	if len(got.Events) != 2 || got.Events[0].Type != abi.EventStatus || got.Events[1].Type != abi.EventClose || got.Next != 3 {
		t.Fatalf("woken reader got %+v", got)
	}
	l.finish()
	l.appendAll(&Event{Type: abi.EventData})
	if r := mustRead(t, l, 3, 0); len(r.Events) != 0 {
		t.Fatalf("appendAll after finish added %d events", len(r.Events))
	}
}

// TestCanonicalRoundTrip: an event read back from its canonical form encodes to the same wire
// bytes, in every content type, and carries the same payload type.
func TestCanonicalRoundTrip(t *testing.T) {
	exit := 3
	tm := time.Date(2024, 5, 6, 7, 8, 9, 10_123_456, time.UTC)
	events := []*Event{
		{Seq: 1, Type: abi.EventData, Time: tm, SessionID: "s1", Payload: Output("\x1b[31mred\x1b[0m <b>&\"\\ \xff\xfe \u2028 é")},
		{Seq: 2, Type: abi.EventData, Time: tm, SessionID: "s1", Payload: Output(nil)},
		{Seq: 3, Type: abi.EventStatus, Time: tm, SessionID: "s1", Payload: abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateIdle, Message: "<x>", SessionStatus: abi.StatusPaused}},
		{Seq: 4, Type: abi.EventError, Time: tm, SessionID: "s1", Payload: abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeResourceUnavailable, Message: "m", Details: map[string]any{"n": 7, "b": "<"}}}},
		{Seq: 5, Type: abi.EventClose, Time: tm, SessionID: "s1", Payload: abi.ClosePayload{Type: abi.PayloadClose, Reason: abi.CloseExited, Status: abi.StatusClosed, ExitCode: &exit}},
		{Seq: 6, Type: abi.EventMetadata, Time: tm, SessionID: "s1", Payload: abi.MetadataPayload{Type: abi.PayloadMetadata, Metadata: map[string]any{"cols": 80, "cwd": "/tmp/<p>"}}},
		{Seq: 7, Type: abi.EventInterrupt, Time: tm.Add(-time.Hour * 24 * 365 * 60), SessionID: "s1", Payload: abi.InterruptPayload{Type: abi.PayloadInterrupt, Reason: abi.ReasonTimeout}},
		{Seq: 1 << 40, Type: "ai-token", Time: tm, SessionID: "s1", Payload: abi.AIToken{Type: abi.PayloadAIToken, Content: "hi", IsFinal: true}},
	}
	for _, e := range events {
		b, err := e.MarshalBinary()
		mustOK(t, err)
		got, err := UnmarshalEvent("s1", b)
		mustOK(t, err)
		if got.Seq != e.Seq || got.Type != e.Type || !got.Time.Equal(e.Time) || got.SessionID != "s1" {
			t.Errorf("seq %d: header %+v", e.Seq, got)
		}
		if fmt.Sprintf("%T", got.Payload) != fmt.Sprintf("%T", e.Payload) && e.Type != "ai-token" {
			t.Errorf("seq %d: payload %T, want %T", e.Seq, got.Payload, e.Payload)
		}
		for _, ct := range []abi.ContentType{abi.ContentANSI, abi.ContentText, abi.ContentRaw} {
			if a, b := string(e.JSON(ct)), string(got.JSON(ct)); a != b {
				t.Errorf("seq %d %s:\n before %s\n after  %s", e.Seq, ct, a, b)
			}
		}
	}
	for _, bad := range [][]byte{nil, {1}, {2, 0, 1, 0, 0}, {1, 9, 1, 0, 0}, {1, 0, 1, 0, 200, 'x'}, {1, 0, 1, 0, 6, 's', 't', 'a', 't', 'u', 's', '{'}} {
		if _, err := UnmarshalEvent("s1", bad); err == nil {
			t.Errorf("UnmarshalEvent(%v) accepted it", bad)
		}
	}
}

// TestRendererCache: any payload that renders per content type gets an encoding per content
// type, cached; any other payload one encoding for all.
func TestRendererCache(t *testing.T) {
	e := &Event{Seq: 1, Type: abi.EventData, Time: t0, SessionID: "s", Payload: upper("abc")}
	a, r := e.JSON(abi.ContentANSI), e.JSON(abi.ContentRaw)
	if string(a) == string(r) || &a[0] != &e.JSON(abi.ContentANSI)[0] {
		t.Errorf("ansi %s raw %s: a Renderer is rendered and cached per content type", a, r)
	}
	var w struct{ Payload string }
	mustOK(t, json.Unmarshal(r, &w))
	if w.Payload != "raw:abc" {
		t.Errorf("raw payload %q", w.Payload)
	}
}

type upper string

func (u upper) Render(ct abi.ContentType) any { return string(ct) + ":" + string(u) }

var _ = base64.StdEncoding

// gatedLog is a MemoryLog whose appends wait for a gate: an append that is slow (a network
// round trip, a disk that stalls).
type gatedLog struct {
	*MemoryLog
	entered chan struct{}
	gate    chan struct{}
}

func (g gatedLog) Append(ctx context.Context, events ...*Event) (Appended, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.MemoryLog.Append(ctx, events...)
}

// TestSlowAppendHoldsNoReader: while an append is in the log (slow), the session's readers,
// its last sequence number and its followers' acknowledgements do not wait for it: the
// registry holds no lock of its own across the log's work.
func TestSlowAppendHoldsNoReader(t *testing.T) {
	ctx := context.Background()
	limits := LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10, MaxStall: time.Second}
	mem := NewMemoryLog(limits)
	_, err := mem.Append(ctx, &Event{Type: abi.EventData, Payload: Output("before")})
	mustOK(t, err)
	g := gatedLog{MemoryLog: mem, entered: make(chan struct{}), gate: make(chan struct{})}
	l := newSessionLog(ctx, g, limits, nil)
	f := l.flow().Follow(0, nil)
	appended := make(chan bool)
	go func() { appended <- l.append(&Event{Type: abi.EventData, Payload: Output("slow")}) }()
	<-g.entered // the append is in the log now, and stays there until the gate opens

	if res := mustRead(t, l, 0, 0); fmt.Sprint(seqsOf(res.Events)) != "[1]" || res.Done {
		t.Errorf("read during a slow append = %v (done %v)", seqsOf(res.Events), res.Done)
	}
	if last := lastSeqOf(t, l); last != 1 {
		t.Errorf("lastSeq during a slow append = %d", last)
	}
	f.Ack(1)
	f.Close()
	waited := make(chan error)
	go func() { waited <- l.wait(ctx, 1) }()

	close(g.gate)
	if !<-appended {
		t.Fatal("the slow append failed")
	}
	mustOK(t, <-waited) // woken by the append it waited for
	if res := mustRead(t, l, 1, 0); fmt.Sprint(seqsOf(res.Events)) != "[2]" {
		t.Errorf("read after the slow append = %v", seqsOf(res.Events))
	}
}

// TestMemoryLogSkip: a projection that skips numbers its stream no longer holds reads them as
// missed, wakes its waiters, numbers the next append after them, and never moves back.
func TestMemoryLogSkip(t *testing.T) {
	ctx := context.Background()
	l := NewMemoryLog(LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
	for range 2 {
		if _, err := l.Append(ctx, &Event{Type: abi.EventData, Payload: Output("x")}); err != nil {
			t.Fatal(err)
		}
	}
	woken := make(chan error, 1)
	go func() { woken <- l.Wait(ctx, 2) }()
	l.Skip(5)
	if err := <-woken; err != nil {
		t.Fatalf("Wait across a Skip: %v", err)
	}
	l.Skip(3) // behind: nothing moves
	res, err := l.Append(ctx, &Event{Type: abi.EventData, Payload: Output("y")})
	if err != nil || res.First != 6 {
		t.Fatalf("append after Skip(5): %+v, %v", res, err)
	}
	p, err := l.Read(ctx, 2, 0)
	if err != nil || p.Missed != 3 || p.MissedFrom != 3 || p.MissedTo != 5 || len(p.Events) != 1 || p.Events[0].Seq != 6 {
		t.Fatalf("read after 2: %d events, missed %d [%d..%d], %v", len(p.Events), p.Missed, p.MissedFrom, p.MissedTo, err)
	}
}
