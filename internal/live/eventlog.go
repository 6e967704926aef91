package live

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Output is the payload of a terminal data event: the exact bytes, rendered per subscriber in the
// content type it asked for.
type Output []byte

// Event is one entry of a session's log. It is immutable once published; its wire encodings are
// computed once per content type and shared by every subscriber.
type Event struct {
	Seq       uint64
	Type      abi.EventType
	Time      time.Time
	SessionID string
	Payload   any

	enc [3]atomic.Pointer[[]byte]
	// through counts the log's output bytes up to and including this event (flow control).
	through uint64
}

func contentSlot(ct abi.ContentType) int {
	switch ct {
	case abi.ContentText:
		return 1
	case abi.ContentRaw:
		return 2
	}
	return 0
}

// Wire returns the ABI envelope of e with terminal output rendered as ct.
func (e *Event) Wire(ct abi.ContentType) abi.Event {
	return abi.Event{Event: e.Type, Timestamp: abi.FormatTime(e.Time), SessionID: e.SessionID, Seq: e.Seq, Payload: e.payloadJSON(ct)}
}

// JSON returns the encoded ABI envelope of e with terminal output rendered as ct.
func (e *Event) JSON(ct abi.ContentType) []byte {
	slot := 0
	if _, ok := e.Payload.(Output); ok {
		slot = contentSlot(ct)
	}
	if p := e.enc[slot].Load(); p != nil {
		return *p
	}
	v := e.Payload
	if out, ok := e.Payload.(Output); ok {
		v = abi.NewTerminalOutput(out, ct)
	}
	b, err := json.Marshal(wireEvent{Event: e.Type, Timestamp: abi.FormatTime(e.Time), SessionID: e.SessionID, Seq: e.Seq, Payload: v})
	if err != nil {
		b, err = json.Marshal(e.Wire(ct))
	}
	if err != nil { // payloads are our own types; this would be a programming error
		b = []byte(`{"event":"error","payload":{"type":"error","error":{"code":"INTERNAL","message":"unencodable event"}}}`)
	}
	e.enc[slot].Store(&b)
	return b
}

// wireEvent is abi.Event with the payload as a value, so it is encoded in one pass: marshalling
// abi.Event re-validates and compacts its pre-encoded json.RawMessage payload, which costs more
// than encoding the payload itself (4 KiB of terminal output: about 30µs instead of 10µs). Its
// fields and tags must stay those of abi.Event; the bytes are the same.
type wireEvent struct {
	Event     abi.EventType `json:"event"`
	Timestamp string        `json:"timestamp"`
	SessionID string        `json:"sessionId"`
	Seq       uint64        `json:"seq"`
	Payload   any           `json:"payload"`
}

func (e *Event) payloadJSON(ct abi.ContentType) json.RawMessage {
	v := e.Payload
	if out, ok := e.Payload.(Output); ok {
		v = abi.NewTerminalOutput(out, ct)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

func (e *Event) size() int {
	if out, ok := e.Payload.(Output); ok {
		return len(out) + 128
	}
	return 256
}

// retained reports whether e survives ring eviction: everything but data does, so a late reader
// still learns every status change, error and the close.
func (e *Event) retained() bool { return e.Type != abi.EventData }

// LogLimits bound a session's in-memory event log.
type LogLimits struct {
	Events int // events kept in the ring
	Bytes  int // payload bytes kept in the ring
	Pinned int // non-data events kept after they leave the ring
	// MaxStall bounds how long output waits for a slow follower before leaving it behind.
	MaxStall time.Duration
}

// eventLog is a session's ordered event log: a bounded ring plus the non-data events that fell
// out of it. Readers pull from any sequence; a reader that fell behind learns how much it missed.
type eventLog struct {
	mu     sync.Mutex
	limits LogLimits
	ring   []*Event // ring[head:] are live, ordered by Seq
	head   int
	bytes  int
	pinned []*Event
	last   uint64
	wake   chan struct{}
	closed bool

	flow flowState
}

func newEventLog(l LogLimits) *eventLog {
	return &eventLog{limits: l, wake: make(chan struct{}), flow: flowState{room: make(chan struct{}), followers: map[*Follower]struct{}{}}}
}

// append assigns the next sequence number and wakes every waiting reader.
func (l *eventLog) append(e *Event) *Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.appendLocked(e)
	close(l.wake)
	l.wake = make(chan struct{})
	return e
}

// appendAll appends events as one step: a reader woken by the first sees
// them all (a poller must get a session's final status and close event in
// one answer, or it may ask again after the gateway is gone).
func (l *eventLog) appendAll(events ...*Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	for _, e := range events {
		l.appendLocked(e)
	}
	close(l.wake)
	l.wake = make(chan struct{})
}

func (l *eventLog) appendLocked(e *Event) {
	l.last++
	e.Seq = l.last
	if out, ok := e.Payload.(Output); ok {
		l.flow.total += uint64(len(out))
	}
	e.through = l.flow.total
	l.ring = append(l.ring, e)
	l.bytes += e.size()
	for len(l.ring)-l.head > 1 && (len(l.ring)-l.head > l.limits.Events || l.bytes > l.limits.Bytes) {
		old := l.ring[l.head]
		l.ring[l.head] = nil
		l.head++
		l.bytes -= old.size()
		if old.retained() {
			l.pinned = append(l.pinned, old)
			if len(l.pinned) > l.limits.Pinned {
				l.pinned = append(l.pinned[:0], l.pinned[1:]...)
			}
		}
	}
	if l.head > len(l.ring)/2 && l.head > 64 {
		n := copy(l.ring, l.ring[l.head:])
		clear(l.ring[n:])
		l.ring = l.ring[:n]
		l.head = 0
	}
}

// finish marks the log complete: readers drain what is left and then stop.
func (l *eventLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}

// readResult is one pull from the log.
type readResult struct {
	Events []*Event
	// Missed counts events after the requested sequence that are no longer retained.
	Missed uint64
	// MissedFrom and MissedTo bound the missing range when Missed > 0.
	MissedFrom, MissedTo uint64
	// Next is the sequence to read after next time.
	Next uint64
	// Done is true when the log is finished and everything up to Next has been read.
	Done bool
	// Wake is closed when something is appended after this read.
	Wake <-chan struct{}
}

func (l *eventLog) read(after uint64, limit int) readResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	res := readResult{Next: after, Wake: l.wake}
	if after > l.last {
		after = l.last
		res.Next = after
	}
	live := l.ring[l.head:]
	first := l.last + 1
	if len(live) > 0 {
		first = live[0].Seq
	}
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
		// A batch accounts for the gap only up to where it stops: when the limit cuts it at a
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
	res.Done = l.closed && res.Next >= l.last
	return res
}

func (l *eventLog) lastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}
