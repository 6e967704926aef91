package livetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// ---- the event log, through the registry ----

func testEventSeq(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, clk := newReg(t, se, live.Config{}, k)
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
	last, err := r.LastSeq(context.Background(), s.SessionID)
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
		if want, ok := stamps[Describe(e)]; ok && abi.FormatTime(e.Time) != want {
			t.Errorf("event %s stamped %s, want %s (the injected clock)", Describe(e), abi.FormatTime(e.Time), want)
		}
		w := e.Wire(abi.ContentANSI)
		if w.Seq != e.Seq || w.SessionID != s.SessionID || w.Event != e.Type || !wireTimeOK(w.Timestamp) {
			t.Errorf("wire envelope %+v", w)
		}
	}
	if got := Describe(b.Events[len(b.Events)-1]); got != "close:user-requested/closed" {
		t.Errorf("last event %s: close must be the last event of a session", got)
	}
}

func wireTimeOK(s string) bool {
	ts, err := time.Parse(abi.TimeFormat, s)
	return err == nil && abi.FormatTime(ts) == s
}

func testReadAfter(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	for i := range 10 {
		p.Emit([]byte{byte('a' + i)})
	}
	last, err := r.LastSeq(context.Background(), s.SessionID)
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
	end, _ := r.LastSeq(context.Background(), s.SessionID)
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
func history(t *testing.T, r Backend, p Probe, id string) []*live.Event {
	t.Helper()
	var hist []*live.Event
	var after uint64
	catchUp := func() {
		b, err := r.Read(context.Background(), id, after, 0, 0)
		mustOK(t, err)
		for _, e := range b.Events {
			if e.Seq == 0 {
				t.Fatalf("the keeping-up reader fell behind: %s", Describe(e))
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
func expectRetained(hist []*live.Event, ring, pinned int) (kept []uint64, missed uint64) {
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

func testReadMissed(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	for _, lim := range []live.LogLimits{
		{Events: 4, Bytes: 1 << 20, Pinned: 1000},
		{Events: 4, Bytes: 1 << 20, Pinned: 2}, // pinned overflow: old status events are lost too
		{Events: 1000, Bytes: 5 * 256, Pinned: 1000},
	} {
		t.Run(fmt.Sprintf("%+v", lim), func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			r, _ := newReg(t, se, live.Config{Log: lim}, k)
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
			if got := MissedOf(t, b.Events[0]); got != wantMissed {
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
func countRing(hist []*live.Event, budget int) int {
	n, used := 0, 0
	for i := len(hist) - 1; i >= 0; i-- {
		used += eventSize(hist[i])
		if used > budget && n > 0 {
			break
		}
		n++
	}
	return n
}

// testReadMissedWithLimit: a late reader paging with a small limit gets every retained event once,
// and the EVENTS_MISSED counts it is told add up to exactly what was lost.
func testReadMissedWithLimit(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	for _, limit := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			lim := live.LogLimits{Events: 4, Bytes: 1 << 20, Pinned: 1000}
			r, _ := newReg(t, se, live.Config{Log: lim}, k)
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
						missed += MissedOf(t, e)
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

func testReadWait(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	last, _ := r.LastSeq(context.Background(), s.SessionID)

	type result struct {
		b   live.Batch
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
	evs := append(res.b.Events, ReadUntilDone(t, r, s.SessionID, res.b.Next)...)
	wantEvents(t, evs, "status:closed/closed", "close:user-requested/closed")

	// A wait that elapses with nothing new returns an empty batch, not an error.
	r2, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
	s2 := mustCreate(t, r2, termReq)
	last2, _ := r2.LastSeq(context.Background(), s2.SessionID)
	b, err := r2.Read(ctx, s2.SessionID, last2, 0, time.Millisecond)
	mustOK(t, err)
	if len(b.Events) != 0 || b.Done || b.Next != last2 {
		t.Errorf("elapsed wait: %+v", b)
	}
}

func testReadWaitCancel(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
	s := mustCreate(t, r, termReq)
	last, _ := r.LastSeq(context.Background(), s.SessionID)
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

// eventSize is what an event costs a log's byte budget (docs/ABI.md's window is counted so):
// its output plus 128 bytes, or 256 bytes for any other event.
func eventSize(e *live.Event) int {
	if out, ok := e.Payload.(live.Output); ok {
		return len(out) + 128
	}
	return 256
}
