package live

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// ---- event log through the registry (part of runRegistrySuite) ----

func testEventSeq(t *testing.T, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, clk := newReg(t, Config{}, k)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	stamps := map[string]string{}
	for i := range 50 {
		now := clk.Advance(1500 * time.Microsecond)
		out := fmt.Sprintf("line %d\n", i)
		stamps["data:"+out] = abi.FormatTime(now)
		p.Emit([]byte(out))
	}
	mustOK(t, control(r, s.SessionID, abi.CommandPause))
	mustOK(t, control(r, s.SessionID, abi.CommandResume))
	_, err := r.Close(context.Background(), s.SessionID, abi.CloseRequested)
	mustOK(t, err)

	b := readAll(t, r, s.SessionID)
	last, err := r.LastSeq(s.SessionID)
	mustOK(t, err)
	if uint64(len(b.Events)) != last || b.Next != last || !b.Done {
		t.Fatalf("%d events, Next %d, LastSeq %d, Done %v", len(b.Events), b.Next, last, b.Done)
	}
	for i, e := range b.Events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: sequence numbers must start at 1 and increase by one", i, e.Seq)
		}
		if e.SessionID != s.SessionID {
			t.Errorf("event %d names session %q", i, e.SessionID)
		}
		if want, ok := stamps[describe(e)]; ok && abi.FormatTime(e.Time) != want {
			t.Errorf("event %s stamped %s, want %s (the injected clock)", describe(e), abi.FormatTime(e.Time), want)
		}
		w := e.Wire(abi.ContentANSI)
		if w.Seq != e.Seq || w.SessionID != s.SessionID || w.Event != e.Type || !wireTimeOK(w.Timestamp) {
			t.Errorf("wire envelope %+v", w)
		}
	}
	if got := describe(b.Events[len(b.Events)-1]); got != "close:user-requested/closed" {
		t.Errorf("last event %s: close must be the last event of a session", got)
	}
}

func wireTimeOK(s string) bool {
	ts, err := time.Parse(abi.TimeFormat, s)
	return err == nil && abi.FormatTime(ts) == s
}

func testReadAfter(t *testing.T, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	for i := range 10 {
		p.Emit([]byte{byte('a' + i)})
	}
	last, err := r.LastSeq(s.SessionID)
	mustOK(t, err)

	for after := uint64(0); after <= last+2; after++ {
		b, err := r.Read(ctx, s.SessionID, after, 0, 0)
		mustOK(t, err)
		want := uint64(0)
		if after < last {
			want = last - after
		}
		if uint64(len(b.Events)) != want || b.Next != last || b.Done {
			t.Fatalf("Read(after %d): %d events, Next %d, Done %v; want %d, %d, false", after, len(b.Events), b.Next, b.Done, want, last)
		}
		for i, e := range b.Events {
			if e.Seq != after+1+uint64(i) {
				t.Fatalf("Read(after %d)[%d] has seq %d", after, i, e.Seq)
			}
		}
	}
	for _, tc := range []struct {
		after    uint64
		limit    int
		wantSeqs string
		wantNext uint64
	}{
		{0, 3, "[1 2 3]", 3},
		{5, 1, "[6]", 6},
		{last - 2, 5, fmt.Sprint([]uint64{last - 1, last}), last},
		{last, 4, "[]", last},
		{last + 10, 4, "[]", last},
	} {
		b, err := r.Read(ctx, s.SessionID, tc.after, tc.limit, 0)
		mustOK(t, err)
		seqs := []uint64{}
		for _, e := range b.Events {
			seqs = append(seqs, e.Seq)
		}
		if fmt.Sprint(seqs) != tc.wantSeqs || b.Next != tc.wantNext {
			t.Errorf("Read(after %d, limit %d) = %v next %d; want %s next %d", tc.after, tc.limit, seqs, b.Next, tc.wantSeqs, tc.wantNext)
		}
	}
	// Paging with a limit visits every event once.
	var got []uint64
	for after := uint64(0); ; {
		b, err := r.Read(ctx, s.SessionID, after, 4, 0)
		mustOK(t, err)
		if len(b.Events) == 0 {
			break
		}
		for _, e := range b.Events {
			got = append(got, e.Seq)
		}
		after = b.Next
	}
	if uint64(len(got)) != last || got[0] != 1 || got[len(got)-1] != last {
		t.Errorf("paged reads = %v", got)
	}

	_, err = r.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	end, _ := r.LastSeq(s.SessionID)
	b, err := r.Read(ctx, s.SessionID, end, 0, time.Minute) // Done: returns at once despite the wait
	mustOK(t, err)
	if !b.Done || len(b.Events) != 0 || b.Next != end {
		t.Errorf("read at end of closed log: %+v", b)
	}
	b, err = r.Read(ctx, s.SessionID, last, 1, 0)
	mustOK(t, err)
	if b.Done {
		t.Error("Done before every event was read")
	}
}

// history publishes a mix of data and status events into a session whose log keeps only a few,
// reading after every step so the test knows the full history a keeping-up reader saw.
func history(t *testing.T, r *Registry, p probe, id string) []*Event {
	t.Helper()
	var hist []*Event
	var after uint64
	catchUp := func() {
		b, err := r.Read(context.Background(), id, after, 0, 0)
		mustOK(t, err)
		for _, e := range b.Events {
			if e.Seq == 0 {
				t.Fatalf("the keeping-up reader fell behind: %s", describe(e))
			}
		}
		hist = append(hist, b.Events...)
		after = b.Next
	}
	catchUp()
	for round := range 3 {
		for i := range 9 {
			p.Emit(fmt.Appendf(nil, "r%d-%d", round, i))
			if i%3 == 2 {
				catchUp()
			}
		}
		cmd := abi.CommandPause
		if round%2 == 1 {
			cmd = abi.CommandResume
		}
		mustOK(t, control(r, id, cmd))
		catchUp()
	}
	_, err := r.Close(context.Background(), id, abi.CloseRequested)
	mustOK(t, err)
	catchUp()
	for i, e := range hist {
		if e.Seq != uint64(i+1) {
			t.Fatalf("history[%d] has seq %d", i, e.Seq)
		}
	}
	return hist
}

// expectRetained splits a full history into what a late reader gets (non-data events that are
// still pinned, plus everything in the ring) and how many it missed.
func expectRetained(hist []*Event, ring, pinned int) (kept []uint64, missed uint64) {
	first := len(hist) - ring
	var nonData []uint64
	for _, e := range hist[:first] {
		if e.Type != abi.EventData {
			nonData = append(nonData, e.Seq)
		}
	}
	if len(nonData) > pinned {
		nonData = nonData[len(nonData)-pinned:]
	}
	kept = append(kept, nonData...)
	for _, e := range hist[first:] {
		kept = append(kept, e.Seq)
	}
	return kept, uint64(len(hist)) - uint64(len(kept))
}

func testReadMissed(t *testing.T, newKind newKindFunc) {
	for _, lim := range []LogLimits{
		{Events: 4, Bytes: 1 << 20, Pinned: 1000},
		{Events: 4, Bytes: 1 << 20, Pinned: 2}, // pinned overflow: old status events are lost too
		{Events: 1000, Bytes: 5 * 256, Pinned: 1000},
	} {
		t.Run(fmt.Sprintf("%+v", lim), func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			r, _ := newReg(t, Config{Log: lim}, k)
			s := mustCreate(t, r, termReq)
			hist := history(t, r, k.Probe(t, s.SessionID), s.SessionID)

			b := readAll(t, r, s.SessionID)
			ringLen := lim.Events
			if lim.Bytes < 1<<20 {
				ringLen = countRing(hist, lim.Bytes)
			}
			wantKept, wantMissed := expectRetained(hist, ringLen, lim.Pinned)
			if wantMissed == 0 {
				t.Fatal("test setup: nothing was evicted")
			}
			if len(b.Events) == 0 {
				t.Fatal("no events")
			}
			if got := missedOf(t, b.Events[0]); got != wantMissed {
				t.Errorf("missed = %d, want %d", got, wantMissed)
			}
			gap := b.Events[0].Payload.(abi.ErrorPayload).Error.Details
			if gap["fromSeq"] != uint64(1) {
				t.Errorf("gap details %v", gap)
			}
			var got []uint64
			for _, e := range b.Events[1:] {
				got = append(got, e.Seq)
			}
			if fmt.Sprint(got) != fmt.Sprint(wantKept) {
				t.Errorf("late reader got seqs %v, want %v", got, wantKept)
			}
			if !b.Done {
				t.Error("not Done")
			}
			// Every status change and the close reached the late reader when pins suffice.
			if lim.Pinned >= len(hist) {
				var statuses int
				for _, e := range b.Events[1:] {
					if e.Type != abi.EventData {
						statuses++
					}
				}
				var want int
				for _, e := range hist {
					if e.Type != abi.EventData {
						want++
					}
				}
				if statuses != want {
					t.Errorf("late reader got %d non-data events, want all %d", statuses, want)
				}
			}
			// The synthetic gap event renders on the wire as an EVENTS_MISSED error with seq 0.
			w := b.Events[0].Wire(abi.ContentANSI)
			var payload abi.ErrorPayload
			mustOK(t, abi.DecodeStrict(w.Payload, &payload))
			if w.Event != abi.EventError || w.Seq != 0 || payload.Error.Code != abi.CodeEventsMissed {
				t.Errorf("gap on the wire: %+v %+v", w, payload)
			}
		})
	}
}

// countRing is how many newest events fit in the byte budget (at least one), as the log keeps them.
func countRing(hist []*Event, budget int) int {
	n, used := 0, 0
	for i := len(hist) - 1; i >= 0; i-- {
		used += hist[i].size()
		if used > budget && n > 0 {
			break
		}
		n++
	}
	return n
}

// testReadMissedWithLimit: a late reader paging with a small limit gets every retained event once,
// and the EVENTS_MISSED counts it is told add up to exactly what was lost.
func testReadMissedWithLimit(t *testing.T, newKind newKindFunc) {
	for _, limit := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			lim := LogLimits{Events: 4, Bytes: 1 << 20, Pinned: 1000}
			r, _ := newReg(t, Config{Log: lim}, k)
			s := mustCreate(t, r, termReq)
			hist := history(t, r, k.Probe(t, s.SessionID), s.SessionID)
			wantKept, wantMissed := expectRetained(hist, lim.Events, lim.Pinned)

			var got []uint64
			var missed uint64
			after := uint64(0)
			for i := 0; ; i++ {
				if i > 1000 {
					t.Fatal("reader does not progress")
				}
				b, err := r.Read(context.Background(), s.SessionID, after, limit, 0)
				mustOK(t, err)
				for j, e := range b.Events {
					if e.Seq == 0 {
						if j != 0 {
							t.Errorf("gap event at position %d", j)
						}
						missed += missedOf(t, e)
						continue
					}
					got = append(got, e.Seq)
				}
				after = b.Next
				if b.Done {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(wantKept) {
				t.Errorf("paged late reader got seqs %v, want %v", got, wantKept)
			}
			if missed != wantMissed {
				t.Errorf("reported %d missed events in total, %d were lost", missed, wantMissed)
			}
		})
	}
}

func testReadWait(t *testing.T, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	last, _ := r.LastSeq(s.SessionID)

	type result struct {
		b   Batch
		err error
	}
	got := make(chan result, 1)
	go func() {
		b, err := r.Read(ctx, s.SessionID, last, 0, time.Hour)
		got <- result{b, err}
	}()
	select {
	case res := <-got:
		t.Fatalf("Read with wait returned before any event: %+v", res)
	default:
	}
	p.Emit([]byte("hello"))
	res := <-got
	mustOK(t, res.err)
	wantEvents(t, res.b.Events, "data:hello")
	if res.b.Next != last+1 || res.b.Done {
		t.Errorf("batch next %d done %v", res.b.Next, res.b.Done)
	}

	// A waiting reader is woken by the close and, reading on, reaches Done.
	after := res.b.Next
	go func() {
		b, err := r.Read(ctx, s.SessionID, after, 0, time.Hour)
		got <- result{b, err}
	}()
	_, err := r.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	res = <-got
	mustOK(t, res.err)
	evs := append(res.b.Events, readUntilDone(t, r, s.SessionID, res.b.Next)...)
	wantEvents(t, evs, "status:closed/closed", "close:user-requested/closed")

	// A wait that elapses with nothing new returns an empty batch, not an error.
	r2, _ := newReg(t, Config{}, newKind(t, abi.TypeTerminal))
	s2 := mustCreate(t, r2, termReq)
	last2, _ := r2.LastSeq(s2.SessionID)
	b, err := r2.Read(ctx, s2.SessionID, last2, 0, time.Millisecond)
	mustOK(t, err)
	if len(b.Events) != 0 || b.Done || b.Next != last2 {
		t.Errorf("elapsed wait: %+v", b)
	}
}

func testReadWaitCancel(t *testing.T, newKind newKindFunc) {
	r, _ := newReg(t, Config{}, newKind(t, abi.TypeTerminal))
	s := mustCreate(t, r, termReq)
	last, _ := r.LastSeq(s.SessionID)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := r.Read(ctx, s.SessionID, last, 0, time.Hour)
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Errorf("Read after cancel = %v, want context.Canceled", err)
	}
}

// ---- the log itself ----

func appendN(l *eventLog, spec string) {
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

// TestEventLogRead pins read results on a log with data (d) and status (s) events, a two-event
// ring and ample pins: d1 s2 d3 d4 s5 d6 d7 keeps s2 s5 pinned and d6 d7 in the ring.
func TestEventLogRead(t *testing.T) {
	tests := []struct {
		after      uint64
		limit      int
		wantSeqs   string
		wantMissed uint64
		wantFrom   uint64
		wantTo     uint64
		wantNext   uint64
	}{
		{0, 0, "[2 5 6 7]", 3, 1, 5, 7},
		{1, 0, "[2 5 6 7]", 2, 2, 5, 7},
		{2, 0, "[5 6 7]", 2, 3, 5, 7},
		{4, 0, "[5 6 7]", 0, 0, 0, 7},
		{5, 0, "[6 7]", 0, 0, 0, 7},
		{6, 0, "[7]", 0, 0, 0, 7},
		{7, 0, "[]", 0, 0, 0, 7},
		{99, 0, "[]", 0, 0, 0, 7},
		// With a limit, a batch covers only the gap up to its last event; the rest of the gap
		// is reported by the read that reaches it, so nothing is counted twice.
		{0, 1, "[2]", 1, 1, 2, 2},
		{2, 1, "[5]", 2, 3, 5, 5},
		{5, 1, "[6]", 0, 0, 0, 6},
		{0, 2, "[2 5]", 3, 1, 5, 5},
		{0, 3, "[2 5 6]", 3, 1, 5, 6},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("after=%d,limit=%d", tc.after, tc.limit), func(t *testing.T) {
			l := newEventLog(LogLimits{Events: 2, Bytes: 1 << 20, Pinned: 10})
			appendN(l, "dsddsdd")
			res := l.read(tc.after, tc.limit)
			if got := fmt.Sprint(seqsOf(res.Events)); got != tc.wantSeqs {
				t.Errorf("seqs = %s, want %s", got, tc.wantSeqs)
			}
			if res.Missed != tc.wantMissed || res.MissedFrom != tc.wantFrom || res.MissedTo != tc.wantTo {
				t.Errorf("missed %d [%d..%d], want %d [%d..%d]", res.Missed, res.MissedFrom, res.MissedTo, tc.wantMissed, tc.wantFrom, tc.wantTo)
			}
			if res.Next != tc.wantNext {
				t.Errorf("next = %d, want %d", res.Next, tc.wantNext)
			}
			if res.Done {
				t.Error("Done on an open log")
			}
		})
	}
}

func TestEventLogBounds(t *testing.T) {
	t.Run("ring keeps at least the newest event", func(t *testing.T) {
		l := newEventLog(LogLimits{Events: 10, Bytes: 1, Pinned: 10})
		appendN(l, "ddd")
		res := l.read(2, 0)
		if fmt.Sprint(seqsOf(res.Events)) != "[3]" || res.Missed != 0 {
			t.Errorf("read = %v missed %d", seqsOf(res.Events), res.Missed)
		}
	})
	t.Run("byte budget", func(t *testing.T) {
		l := newEventLog(LogLimits{Events: 1000, Bytes: 3 * (128 + 1), Pinned: 10})
		appendN(l, "dddddd") // each costs len(payload)+128 = 129 bytes
		res := l.read(0, 0)
		if fmt.Sprint(seqsOf(res.Events)) != "[4 5 6]" || res.Missed != 3 {
			t.Errorf("read = %v missed %d", seqsOf(res.Events), res.Missed)
		}
	})
	t.Run("ring storage is compacted", func(t *testing.T) {
		l := newEventLog(LogLimits{Events: 10, Bytes: 1 << 30, Pinned: 10})
		for range 100 {
			appendN(l, "dddddddddd")
		}
		l.mu.Lock()
		live, total := len(l.ring)-l.head, len(l.ring)
		l.mu.Unlock()
		if live != 10 || total > 200 {
			t.Errorf("ring holds %d live of %d slots after 1000 appends", live, total)
		}
		if res := l.read(990, 0); fmt.Sprint(seqsOf(res.Events)) != "[991 992 993 994 995 996 997 998 999 1000]" {
			t.Errorf("read = %v", seqsOf(res.Events))
		}
	})
	t.Run("pins are bounded, oldest dropped", func(t *testing.T) {
		l := newEventLog(LogLimits{Events: 1, Bytes: 1 << 20, Pinned: 2})
		appendN(l, "sssd")
		res := l.read(0, 0)
		if fmt.Sprint(seqsOf(res.Events)) != "[2 3 4]" || res.Missed != 1 {
			t.Errorf("read = %v missed %d", seqsOf(res.Events), res.Missed)
		}
	})
	t.Run("finish", func(t *testing.T) {
		l := newEventLog(LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		appendN(l, "dd")
		wake := l.read(2, 0).Wake
		l.finish()
		<-wake // finishing wakes waiting readers
		if e := l.append(&Event{Type: abi.EventData, Payload: Output("late")}); e != nil {
			t.Errorf("append after finish = %+v", e)
		}
		if l.lastSeq() != 2 {
			t.Errorf("lastSeq = %d", l.lastSeq())
		}
		if res := l.read(0, 1); res.Done || len(res.Events) != 1 {
			t.Errorf("read(0, limit 1) = %+v: Done before the last event was read", res)
		}
		if res := l.read(1, 0); !res.Done || len(res.Events) != 1 {
			t.Errorf("read(1) = %+v: the batch holding the last event is Done", res)
		}
		if res := l.read(2, 0); !res.Done || len(res.Events) != 0 {
			t.Error("not done at the end")
		}
		l.finish() // idempotent
	})
	t.Run("append wakes readers", func(t *testing.T) {
		l := newEventLog(LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		wake := l.read(0, 0).Wake
		appendN(l, "d")
		<-wake
	})
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
	l := newEventLog(LogLimits{Events: 64, Bytes: 1 << 20, Pinned: 8})
	l.append(&Event{Type: abi.EventData})
	first := l.read(1, 0)
	if len(first.Events) != 0 {
		t.Fatalf("read after 1: %d events", len(first.Events))
	}
	done := make(chan readResult)
	go func() {
		<-first.Wake
		done <- l.read(1, 0)
	}()
	l.appendAll(&Event{Type: abi.EventStatus}, &Event{Type: abi.EventClose})
	got := <-done
	if len(got.Events) != 2 || got.Events[0].Type != abi.EventStatus || got.Events[1].Type != abi.EventClose || got.Next != 3 {
		t.Fatalf("woken reader got %+v", got)
	}
	l.finish()
	l.appendAll(&Event{Type: abi.EventData})
	if r := l.read(3, 0); len(r.Events) != 0 {
		t.Fatalf("appendAll after finish added %d events", len(r.Events))
	}
}
