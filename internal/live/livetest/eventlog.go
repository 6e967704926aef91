package livetest

import (
	"fmt"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// NewLog opens an empty EventLog bounded by limits.
type NewLog func(t *testing.T, limits live.LogLimits) live.EventLog

// RunEventLog checks the EventLog contract: appends keep their order, a read after any
// sequence number returns what the log holds after it, and what the log no longer holds is
// reported as a missed range — never a silent gap — while the non-data events outlive their
// data neighbours, within the limits.
func RunEventLog(t *testing.T, newLog NewLog) {
	t.Helper()
	t.Run("Read", func(t *testing.T) { testLogRead(t, newLog) })
	t.Run("Bounds", func(t *testing.T) { testLogBounds(t, newLog) })
	t.Run("Paging", func(t *testing.T) { testLogPaging(t, newLog) })
	t.Run("Batch", func(t *testing.T) { testLogBatch(t, newLog) })
}

// appendSpec appends one event per letter of spec (d: data, s: status), numbered on from the
// log's last sequence number.
func appendSpec(t *testing.T, l live.EventLog, spec string) {
	t.Helper()
	for _, c := range spec {
		seq := l.LastSeq() + 1
		e := &live.Event{Seq: seq, Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output(fmt.Sprint(seq))}
		if c == 's' {
			e.Type = abi.EventStatus
			e.Payload = abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected}
		}
		mustOK(t, l.Append(e))
	}
}

func read(t *testing.T, l live.EventLog, after uint64, limit int) live.Page {
	t.Helper()
	p, err := l.Read(after, limit)
	mustOK(t, err)
	return p
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
			if l.LastSeq() != 7 {
				t.Errorf("LastSeq = %d", l.LastSeq())
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
		mustOK(t, l.Close())
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
			if uint64(len(got))+missed != l.LastSeq() {
				t.Errorf("%d read + %d missed != %d appended", len(got), missed, l.LastSeq())
			}
		})
	}
}

// testLogBatch: events appended in one call are stored as given.
func testLogBatch(t *testing.T, newLog NewLog) {
	l := newLog(t, live.LogLimits{Events: 100, Bytes: 1 << 20, Pinned: 10})
	var batch []*live.Event
	for i := range 5 {
		batch = append(batch, &live.Event{Seq: uint64(i + 1), Type: abi.EventData, Time: T0, SessionID: "x", Payload: live.Output(fmt.Sprint(i))})
	}
	mustOK(t, l.Append(batch...))
	p := read(t, l, 0, 0)
	if seqs(p.Events) != "[1 2 3 4 5]" || l.LastSeq() != 5 || string(p.Events[4].Payload.(live.Output)) != "4" {
		t.Errorf("after a batch: %s LastSeq %d", seqs(p.Events), l.LastSeq())
	}
}
