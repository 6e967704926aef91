package livetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// NewLog opens an empty EventLog bounded by limits.
type NewLog func(t *testing.T, limits live.LogLimits) live.EventLog

// RunEventLog checks the EventLog contract: the log numbers what it stores and says so,
// appends keep their order (concurrent appenders included: no gap, no duplicate), a read after
// any sequence number returns what the log holds after it, and what the log no longer holds is
// reported as a missed range — never a silent gap — while the non-data events outlive their
// data neighbours, within the limits. Readers wait on the log itself (Wait): woken by an
// append, by Close, or by the end of their context.
func RunEventLog(t *testing.T, newLog NewLog) {
	t.Helper()
	t.Run("Read", func(t *testing.T) { testLogRead(t, newLog) })
	t.Run("Bounds", func(t *testing.T) { testLogBounds(t, newLog) })
	t.Run("Paging", func(t *testing.T) { testLogPaging(t, newLog) })
	t.Run("Batch", func(t *testing.T) { testLogBatch(t, newLog) })
	t.Run("Numbering", func(t *testing.T) { testLogNumbering(t, newLog) })
	t.Run("ConcurrentAppenders", func(t *testing.T) { testLogConcurrent(t, newLog) })
	t.Run("WaitDuringSlowAppends", func(t *testing.T) { testLogWaitSlow(t, newLog) })
	t.Run("Cancellation", func(t *testing.T) { testLogCancel(t, newLog) })
}

// appendSpec appends one event per letter of spec (d: data, s: status); the log numbers them.
func appendSpec(t *testing.T, l live.EventLog, spec string) {
	t.Helper()
	for _, c := range spec {
		seq := logLast(t, l) + 1
		e := &live.Event{Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output(fmt.Sprint(seq))}
		if c == 's' {
			e.Type = abi.EventStatus
			e.Payload = abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected}
		}
		res, err := l.Append(context.Background(), e)
		mustOK(t, err)
		if res.First != seq || res.Last != seq || e.Seq != seq {
			t.Fatalf("Append stored %+v (event seq %d), want %d", res, e.Seq, seq)
		}
	}
}

func read(t *testing.T, l live.EventLog, after uint64, limit int) live.Page {
	t.Helper()
	p, err := l.Read(context.Background(), after, limit)
	mustOK(t, err)
	return p
}

func logLast(t *testing.T, l live.EventLog) uint64 {
	t.Helper()
	last, err := l.LastSeq(context.Background())
	mustOK(t, err)
	return last
}

// testLogRead pins read results on a log with data (d) and status (s) events, a two-event
// ring and ample pins: d1 s2 d3 d4 s5 d6 d7 keeps s2 s5 pinned and d6 d7 in the ring.
func testLogRead(t *testing.T, newLog NewLog) {
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
		// With a limit, a page covers only the gap up to its last event; the rest of the gap
		// is reported by the read that reaches it, so nothing is counted twice.
		{0, 1, "[2]", 1, 1, 2, 2},
		{2, 1, "[5]", 2, 3, 5, 5},
		{5, 1, "[6]", 0, 0, 0, 6},
		{0, 2, "[2 5]", 3, 1, 5, 5},
		{0, 3, "[2 5 6]", 3, 1, 5, 6},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("after=%d,limit=%d", tc.after, tc.limit), func(t *testing.T) {
			l := newLog(t, live.LogLimits{Events: 2, Bytes: 1 << 20, Pinned: 10})
			appendSpec(t, l, "dsddsdd")
			res := read(t, l, tc.after, tc.limit)
			if got := seqs(res.Events); got != tc.wantSeqs {
				t.Errorf("seqs = %s, want %s", got, tc.wantSeqs)
			}
			if res.Missed != tc.wantMissed || res.MissedFrom != tc.wantFrom || res.MissedTo != tc.wantTo {
				t.Errorf("missed %d [%d..%d], want %d [%d..%d]", res.Missed, res.MissedFrom, res.MissedTo, tc.wantMissed, tc.wantFrom, tc.wantTo)
			}
			if res.Next != tc.wantNext {
				t.Errorf("next = %d, want %d", res.Next, tc.wantNext)
			}
			if last := logLast(t, l); last != 7 {
				t.Errorf("LastSeq = %d", last)
			}
		})
	}
}

func testLogBounds(t *testing.T, newLog NewLog) {
	t.Run("the newest event is always kept", func(t *testing.T) {
		l := newLog(t, live.LogLimits{Events: 10, Bytes: 1, Pinned: 10})
		appendSpec(t, l, "ddd")
		res := read(t, l, 2, 0)
		if seqs(res.Events) != "[3]" || res.Missed != 0 {
			t.Errorf("read = %s missed %d", seqs(res.Events), res.Missed)
		}
	})
	t.Run("byte budget", func(t *testing.T) {
		l := newLog(t, live.LogLimits{Events: 1000, Bytes: 3 * (128 + 1), Pinned: 10})
		appendSpec(t, l, "dddddd") // each costs len(payload)+128 = 129 bytes
		res := read(t, l, 0, 0)
		if seqs(res.Events) != "[4 5 6]" || res.Missed != 3 {
			t.Errorf("read = %s missed %d", seqs(res.Events), res.Missed)
		}
	})
	t.Run("event budget", func(t *testing.T) {
		l := newLog(t, live.LogLimits{Events: 10, Bytes: 1 << 30, Pinned: 10})
		for range 100 {
			appendSpec(t, l, "dddddddddd")
		}
		if res := read(t, l, 0, 0); seqs(res.Events) != "[991 992 993 994 995 996 997 998 999 1000]" || res.Missed != 990 {
			t.Errorf("read = %s missed %d", seqs(res.Events), res.Missed)
		}
	})
	t.Run("pins are bounded, oldest dropped", func(t *testing.T) {
		l := newLog(t, live.LogLimits{Events: 1, Bytes: 1 << 20, Pinned: 2})
		appendSpec(t, l, "sssd")
		res := read(t, l, 0, 0)
		if seqs(res.Events) != "[2 3 4]" || res.Missed != 1 {
			t.Errorf("read = %s missed %d", seqs(res.Events), res.Missed)
		}
	})
	t.Run("reads after close", func(t *testing.T) {
		l := newLog(t, live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
		appendSpec(t, l, "dsd")
		mustOK(t, l.Close(context.Background()))
		if res := read(t, l, 0, 0); seqs(res.Events) != "[1 2 3]" || res.Next != 3 {
			t.Errorf("read after Close = %s next %d", seqs(res.Events), res.Next)
		}
	})
}

// testLogPaging: a reader paging with a small limit through a long mixed log gets every event
// it holds once, in order, and missed counts that add up to exactly what it dropped.
func testLogPaging(t *testing.T, newLog NewLog) {
	for _, limit := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			l := newLog(t, live.LogLimits{Events: 5, Bytes: 1 << 20, Pinned: 4})
			appendSpec(t, l, "sdsddsdddsddddsdddddsdd")
			all := read(t, l, 0, 0)
			var got []*live.Event
			var missed uint64
			for after, i := uint64(0), 0; ; i++ {
				if i > 100 {
					t.Fatal("reader does not progress")
				}
				p := read(t, l, after, limit)
				missed += p.Missed
				got = append(got, p.Events...)
				if p.Next == after {
					break
				}
				after = p.Next
			}
			if seqs(got) != seqs(all.Events) || missed != all.Missed {
				t.Errorf("paged: %s missed %d; at once: %s missed %d", seqs(got), missed, seqs(all.Events), all.Missed)
			}
			if last := logLast(t, l); uint64(len(got))+missed != last {
				t.Errorf("%d read + %d missed != %d appended", len(got), missed, last)
			}
		})
	}
}

// testLogBatch: events appended in one call are stored as given.
func testLogBatch(t *testing.T, newLog NewLog) {
	l := newLog(t, live.LogLimits{Events: 100, Bytes: 1 << 20, Pinned: 10})
	var batch []*live.Event
	for i := range 5 {
		batch = append(batch, &live.Event{Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output(fmt.Sprint(i))})
	}
	res, err := l.Append(context.Background(), batch...)
	mustOK(t, err)
	p := read(t, l, 0, 0)
	if res != (live.Appended{First: 1, Last: 5}) || seqs(p.Events) != "[1 2 3 4 5]" || logLast(t, l) != 5 || string(p.Events[4].Payload.(live.Output)) != "4" {
		t.Errorf("after a batch stored as %+v: %s LastSeq %d", res, seqs(p.Events), logLast(t, l))
	}
}

// testLogNumbering: the log, not the caller, numbers events: a sequence number the caller put
// on an event is replaced, and an empty append stores nothing.
func testLogNumbering(t *testing.T, newLog NewLog) {
	l := newLog(t, live.LogLimits{Events: 100, Bytes: 1 << 20, Pinned: 10})
	appendSpec(t, l, "dd")
	e := &live.Event{Seq: 99, Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output("x")}
	res, err := l.Append(context.Background(), e)
	mustOK(t, err)
	if res != (live.Appended{First: 3, Last: 3}) || e.Seq != 3 {
		t.Errorf("an event numbered 99 by its caller was stored as %+v, seq %d", res, e.Seq)
	}
	res, err = l.Append(context.Background())
	mustOK(t, err)
	if res.Last != 3 || res.First != res.Last+1 || logLast(t, l) != 3 {
		t.Errorf("an empty append stored %+v", res)
	}
}

// testLogConcurrent: appenders on several goroutines each get ranges of their own; together
// the ranges cover 1..N without a gap or an overlap, and the log holds every event once, each
// batch contiguous.
func testLogConcurrent(t *testing.T, newLog NewLog) {
	const appenders, batches, size = 8, 50, 3
	l := newLog(t, live.LogLimits{Events: appenders * batches * size, Bytes: 1 << 30, Pinned: 10})
	got := make([][]live.Appended, appenders)
	var wg sync.WaitGroup
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var batch []*live.Event
				for i := range size {
					batch = append(batch, &live.Event{Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output(fmt.Sprintf("%d/%d/%d", a, b, i))})
				}
				res, err := l.Append(context.Background(), batch...)
				if err != nil {
					t.Error(err)
					return
				}
				got[a] = append(got[a], res)
			}
		}()
	}
	wg.Wait()
	owner := map[uint64]int{}
	for a, ranges := range got {
		for _, r := range ranges {
			if r.Last-r.First+1 != size {
				t.Fatalf("appender %d: a batch of %d stored as %+v", a, size, r)
			}
			for seq := r.First; seq <= r.Last; seq++ {
				if o, dup := owner[seq]; dup {
					t.Fatalf("seq %d given to appenders %d and %d", seq, o, a)
				}
				owner[seq] = a
			}
		}
	}
	total := uint64(appenders * batches * size)
	if uint64(len(owner)) != total || logLast(t, l) != total {
		t.Fatalf("%d numbers handed out, LastSeq %d, want %d", len(owner), logLast(t, l), total)
	}
	p := read(t, l, 0, 0)
	if uint64(len(p.Events)) != total || p.Missed != 0 {
		t.Fatalf("read %d events, missed %d, want %d", len(p.Events), p.Missed, total)
	}
	for i, e := range p.Events {
		var a, b, n int
		if _, err := fmt.Sscanf(string(e.Payload.(live.Output)), "%d/%d/%d", &a, &b, &n); err != nil || e.Seq != uint64(i+1) || owner[e.Seq] != a {
			t.Fatalf("event %d: seq %d payload %q (owner %d)", i, e.Seq, e.Payload, owner[e.Seq])
		}
		if n > 0 {
			var pa, pb, pn int
			_, _ = fmt.Sscanf(string(p.Events[i-1].Payload.(live.Output)), "%d/%d/%d", &pa, &pb, &pn)
			if pa != a || pb != b || pn != n-1 {
				t.Fatalf("batch %d/%d is not contiguous at seq %d", a, b, e.Seq)
			}
		}
	}
}

// testLogWaitSlow: readers wait on the log while an appender writes big batches; each is woken
// by the batch it waited for and sees the whole batch at once (an append is one step for its
// readers), never part of one, and never blocks on the appender's work for long enough to miss
// a batch.
func testLogWaitSlow(t *testing.T, newLog NewLog) {
	const batches, size, readers = 20, 200, 4
	l := newLog(t, live.LogLimits{Events: batches * size, Bytes: 1 << 30, Pinned: 10})
	chunk := live.Output(make([]byte, 4<<10))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, never a pass
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var after uint64
			for after < batches*size {
				if err := l.Wait(ctx, after); err != nil {
					errs <- fmt.Errorf("wait after %d: %w", after, err)
					return
				}
				p, err := l.Read(ctx, after, 0)
				if err != nil {
					errs <- err
					return
				}
				if len(p.Events) == 0 || len(p.Events)%size != 0 || p.Missed != 0 {
					errs <- fmt.Errorf("woken after %d: %d events, missed %d: not whole batches", after, len(p.Events), p.Missed)
					return
				}
				after = p.Next
			}
		}()
	}
	for range batches {
		batch := make([]*live.Event, size)
		for i := range batch {
			batch[i] = &live.Event{Type: abi.EventData, Time: T0, SessionID: "x", Payload: chunk}
		}
		if _, err := l.Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// testLogCancel: a wait ends with its context (and says so), a closed log wakes its waiters and
// answers every later wait at once, takes no more events, and still reads.
func testLogCancel(t *testing.T, newLog NewLog) {
	l := newLog(t, live.LogLimits{Events: 10, Bytes: 1 << 20, Pinned: 10})
	appendSpec(t, l, "d")
	if err := l.Wait(context.Background(), 0); err != nil {
		t.Errorf("Wait(0) with an event after 0: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error)
	go func() { waited <- l.Wait(ctx, 1) }()
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context = %v", err)
	}
	short, stop := context.WithTimeout(context.Background(), time.Millisecond)
	defer stop()
	if err := l.Wait(short, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past its deadline = %v", err)
	}

	go func() { waited <- l.Wait(context.Background(), 1) }()
	mustOK(t, l.Close(context.Background()))
	if err := <-waited; err != nil {
		t.Errorf("Wait woken by Close = %v", err)
	}
	if err := l.Wait(context.Background(), 5); err != nil {
		t.Errorf("Wait on a closed log = %v", err)
	}
	if _, err := l.Append(context.Background(), &live.Event{Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output("late")}); err == nil {
		t.Error("a closed log took an event")
	}
	if p := read(t, l, 0, 0); seqs(p.Events) != "[1]" {
		t.Errorf("read after Close = %s", seqs(p.Events))
	}
}
