package live

import (
	"context"
	"errors"
	"sync"
	"time"
)

// EventLog stores one session's ordered events. It is the seam where a backend keeps events
// somewhere else — on disk, in a replicated stream — in the spirit of the MCP go-sdk's
// EventStore: it appends, reads after a sequence number, and reports the ranges it no longer
// holds, which readers receive as EVENTS_MISSED. A log that leaves the process stores each
// event in its canonical serialized form (Event.AppendBinary, UnmarshalEvent) and needs to know
// nothing of payload types; a log that stays in memory keeps the *Event itself, with the wire
// encodings it has cached.
//
// The log is the authority on sequence numbers: Append numbers the events it stores and says
// which numbers they got, so a log on a replicated stream answers with what the stream
// confirmed. Every method may be called from several goroutines at once and takes a context:
// the registry holds none of its locks across them, and readers wait on the log's own
// notification (Wait), never on an appender.
type EventLog interface {
	// Append stores events in order, sets each one's Seq (contiguous, after the newest the log
	// holds) and returns the numbers they got. Once it returns, readers may be shown them, so an
	// implementation that persists must have handed them to the operating system by then, or
	// write them before its next Read or LastSeq answers (a process kill loses nothing a reader
	// saw). An error means the events were not stored, except one that wraps ErrNotDurable:
	// then they are stored (and numbered) in memory but will not survive a restart. A log on a
	// replicated stream may acknowledge asynchronously (jetstore): readers are shown only what
	// the stream confirmed, and numbers it handed out that the stream then refused come back
	// from the next Append as an error naming them (jetstore.NotStoredError).
	Append(ctx context.Context, events ...*Event) (Appended, error)
	// Read returns up to limit events (0: every one it holds) after sequence number after,
	// and the range between after and the first of them that it no longer holds.
	Read(ctx context.Context, after uint64, limit int) (Page, error)
	// Wait returns once the log holds an event after sequence number after, or has been
	// closed, or ctx ends (then with ctx's error).
	Wait(ctx context.Context, after uint64) error
	// LastSeq is the newest event's sequence number, 0 for an empty log.
	LastSeq(ctx context.Context) (uint64, error)
	// Close ends the log: nothing more is appended, waiting readers return, and reads go on.
	// A persisting log makes what it holds durable first.
	Close(ctx context.Context) error
}

// Appended is the range of sequence numbers one Append stored.
type Appended struct{ First, Last uint64 }

// ErrNotDurable marks an Append whose events a persisting log kept in memory only (a full disk).
var ErrNotDurable = errors.New("events not persisted")

// Page is one read from an EventLog.
type Page struct {
	Events []*Event
	// Missed counts events after the requested sequence that the log no longer holds;
	// MissedFrom and MissedTo bound them when Missed > 0.
	Missed, MissedFrom, MissedTo uint64
	// Next is the sequence to read after next time.
	Next uint64
}

// LogLimits bound a session's event log.
type LogLimits struct {
	Events int // events kept in the ring
	Bytes  int // payload bytes kept in the ring
	Pinned int // non-data events kept after they leave the ring
	// MaxStall bounds how long output waits for a slow follower before leaving it behind.
	MaxStall time.Duration
	// VolatileData keeps data events in memory only: a store that persists writes the other
	// events (status, errors, the close). The registry sets it for a kind that says its data is
	// kept elsewhere (a DataKeeper), such as a debug stream's lines, which the followed
	// process's own log files hold: writing them again per session would cost a disk write of
	// every line for every subscriber.
	VolatileData bool
}

// MemoryLog is the in-memory EventLog: a bounded ring plus the non-data events that fell out of
// it ("pinned"), so a late reader still learns every status change, error and the close.
type MemoryLog struct {
	// mu guards the rest. Every method holds it for memory operations only, so a reader is
	// never held up longer than an append's copy of pointers.
	mu     sync.Mutex
	wake   chan struct{} // closed at the next append or at Close
	closed bool
	limits LogLimits
	ring   []*Event // ring[head:] are live, ordered and contiguous by Seq
	head   int
	bytes  int
	pinned []*Event
	last   uint64
}

// NewMemoryLog returns an empty in-memory log bounded by l.
func NewMemoryLog(l LogLimits) *MemoryLog { return &MemoryLog{limits: l, wake: make(chan struct{})} }

// Append implements EventLog. A closed log takes nothing.
func (l *MemoryLog) Append(_ context.Context, events ...*Event) (Appended, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appendLocked(events)
}

func (l *MemoryLog) appendLocked(events []*Event) (Appended, error) {
	if l.closed {
		return Appended{}, ErrLogClosed
	}
	res := Appended{First: l.last + 1, Last: l.last}
	if len(events) == 0 {
		return res, nil
	}
	for _, e := range events {
		e.Seq = l.last + 1
		l.add(e)
	}
	res.Last = l.last
	close(l.wake)
	l.wake = make(chan struct{})
	return res, nil
}

// ErrLogClosed is returned by an append to a closed EventLog.
var ErrLogClosed = errors.New("append to a closed event log")

// Wait implements EventLog.
func (l *MemoryLog) Wait(ctx context.Context, after uint64) error {
	l.mu.Lock()
	if l.closed || l.last > after {
		l.mu.Unlock()
		return nil
	}
	wake := l.wake
	l.mu.Unlock()
	select {
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *MemoryLog) add(e *Event) {
	l.last = e.Seq
	l.ring = append(l.ring, e)
	l.bytes += e.size()
	l.evict()
}

// evict drops the oldest ring events beyond the limits (keeping at least the newest), pinning
// the non-data ones, and compacts the ring's storage.
func (l *MemoryLog) evict() {
	for len(l.ring)-l.head > 1 && (len(l.ring)-l.head > l.limits.Events || l.bytes > l.limits.Bytes) {
		old := l.ring[l.head]
		l.ring[l.head] = nil
		l.head++
		l.bytes -= old.size()
		if old.retained() {
			l.pin(old)
		}
	}
	if l.head > len(l.ring)/2 && l.head > 64 {
		n := copy(l.ring, l.ring[l.head:])
		clear(l.ring[n:])
		l.ring = l.ring[:n]
		l.head = 0
	}
}

func (l *MemoryLog) pin(e *Event) {
	l.pinned = append(l.pinned, e)
	if len(l.pinned) > l.limits.Pinned {
		l.pinned = append(l.pinned[:0], l.pinned[1:]...)
	}
}

// restore fills an empty log with what a persisted one held: the pinned events and the ring's
// contiguous run, oldest first. last may exceed what they hold (sequence numbers a power loss
// took, which must not be given out again).
func (l *MemoryLog) restore(pinned, ring []*Event, last uint64) {
	for _, e := range pinned {
		l.pin(e)
	}
	for _, e := range ring {
		l.add(e)
	}
	if last > l.last {
		// The ring must stay contiguous up to last, so what it holds moves to the pins (which
		// any reader gets in order), and the lost numbers read as missed.
		for _, e := range l.ring[l.head:] {
			l.pin(e)
		}
		clear(l.ring)
		l.ring, l.head, l.bytes, l.last = l.ring[:0], 0, 0, last
	}
}

// Skip moves an open log on to sequence number last without events: the numbers between
// read as missed. A log that is the projection of a replicated stream calls it when the
// stream no longer holds the events before the first one it delivers.
func (l *MemoryLog) Skip(last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || last <= l.last {
		return
	}
	l.restore(nil, nil, last)
	close(l.wake)
	l.wake = make(chan struct{})
}

// first is the sequence number of the oldest event in the ring (last+1 when it is empty).
func (l *MemoryLog) first() uint64 {
	if live := l.ring[l.head:]; len(live) > 0 {
		return live[0].Seq
	}
	return l.last + 1
}

// LastSeq implements EventLog.
func (l *MemoryLog) LastSeq(context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, nil
}

// heldBytes estimates the memory l's events take, as the ring counts its bytes.
func (l *MemoryLog) heldBytes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes + 256*len(l.pinned)
}

// Close implements EventLog.
func (l *MemoryLog) Close(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
	return nil
}

// Read implements EventLog.
func (l *MemoryLog) Read(_ context.Context, after uint64, limit int) (Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readLocked(after, limit), nil
}

func (l *MemoryLog) readLocked(after uint64, limit int) Page {
	res := Page{Next: after}
	if after > l.last {
		after = l.last
		res.Next = after
	}
	live := l.ring[l.head:]
	first := l.first()
	add := func(e *Event) bool {
		if limit > 0 && len(res.Events) >= limit {
			return false
		}
		res.Events = append(res.Events, e)
		res.Next = e.Seq
		return true
	}
	if after+1 < first {
		// Some of (after, first) fell out of the ring; pinned events there are still known.
		// A page accounts for the gap only up to where it stops: when the limit cuts it at a
		// pinned event, the rest of the gap is left to the next read, so nothing is counted
		// twice; otherwise the whole gap is accounted for and Next skips past it.
		end, kept := first, uint64(0)
		for _, e := range l.pinned {
			if e.Seq <= after || e.Seq >= first {
				continue
			}
			if !add(e) {
				end = res.Next + 1
				break
			}
			kept++
		}
		res.Missed = end - after - 1 - kept
		if res.Missed > 0 {
			res.MissedFrom, res.MissedTo = after+1, end-1
		}
		if end < first {
			return res
		}
		res.Next = first - 1
	}
	// Sequence numbers in the ring are contiguous, so the start is an index computation.
	i := 0
	if after >= first {
		i = int(after + 1 - first)
	}
	for _, e := range live[i:] {
		if !add(e) {
			return res
		}
	}
	return res
}
