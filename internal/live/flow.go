package live

import (
	"sync"
	"sync/atomic"
	"time"
)

// Flow control. A terminal can print far faster than a client can take it, and the ring only
// holds a moment of bulk output. So output waits for the followers (WebSocket streams that
// acknowledge what they have sent) while one of them is more than half a ring behind: the PTY
// reader stops reading, the kernel's buffer fills, and the program blocks, as it would behind a
// slow ssh link. A follower that makes no progress for MaxStall while output waits for it is
// released: it no longer holds output back (it will get EVENTS_MISSED if it is lapped) until
// it catches up again. Its clock is its own: others' progress does not extend it. So a fast
// client loses nothing and a stuck one cannot stall the session for more than MaxStall.

// DefaultMaxStall is how long output waits for a follower that makes no progress.
const DefaultMaxStall = time.Second

// Flow paces one session's output for the readers that follow it, by the rules above. The
// registry calls it: the session's log reports each append, Registry.Follow registers readers,
// and the sink's Output waits in WaitRoom. It is per node by design: a producer waits only for
// the streams its own node serves, so a registry shared by several nodes still gives each
// session's producer the Flow of the node that runs it. flowControl is the implementation.
type Flow interface {
	// Appended records events the log stored, their sequence numbers assigned, in order; last
	// is the log's newest sequence number.
	Appended(events []*Event, last uint64)
	// Follow registers a reader positioned after seq whose progress output waits for;
	// onClose (may be nil) runs when the follower closes.
	Follow(after uint64, onClose func()) Follower
	// WaitRoom blocks the producer while a reader it waits for is too far behind.
	WaitRoom()
	// Stop makes WaitRoom return at once from now on (the session is closing).
	Stop()
	// Finish says nothing more is appended (the log ended): WaitRoom returns at once, and the
	// record of appends is let go.
	Finish()
}

// flowControl is the Flow of this process: followers in memory, a record of the ring's
// output sizes, and a channel the producer waits on.
type flowControl struct {
	limits *LogLimits // its log's: Events, Bytes and MaxStall

	mu sync.Mutex
	// last is the newest sequence number appended (or known when the log was opened): what
	// lag is measured against. It stays 0 for a log restored closed, which nothing paces.
	last      uint64
	closed    bool
	total     uint64 // output bytes appended so far
	followers map[*follower]struct{}
	room      chan struct{} // closed when a follower advances while output waits
	waiting   atomic.Bool
	off       bool // the session is ending: never wait again

	// before[i] is the output appended before event beforeFirst+i, for the newest events (as
	// many as the ring holds): how many bytes a follower is behind.
	before      []uint64
	beforeHead  int
	beforeFirst uint64
}

var _ Flow = (*flowControl)(nil)

// init readies the flow control of a log with limits whose newest sequence number is last. A
// sessionLog holds its flowControl by value (one allocation less for every session kept).
func (fc *flowControl) init(limits *LogLimits, last uint64) {
	fc.limits, fc.last = limits, last
	fc.room = make(chan struct{})
	fc.followers = map[*follower]struct{}{}
}

// Appended implements Flow.
func (fc *flowControl) Appended(events []*Event, last uint64) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, e := range events {
		fc.appendedLocked(e, fc.limits.Events)
	}
	fc.last = last
}

// Finish implements Flow. Nothing is appended any more, so there is nothing to pace: the record
// of the ring (8 bytes an event, up to 64 KiB) would otherwise stay with every closed session.
func (fc *flowControl) Finish() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.closed = true
	fc.before, fc.beforeHead, fc.beforeFirst = nil, 0, 0
}

// appendedLocked records e, whose sequence number is assigned, for the lag computations;
// window is how many events the record covers.
func (fc *flowControl) appendedLocked(e *Event, window int) {
	if len(fc.before) == fc.beforeHead {
		fc.beforeFirst = e.Seq
	}
	fc.before = append(fc.before, fc.total)
	fc.total += e.outputBytes()
	if len(fc.before)-fc.beforeHead > window {
		fc.beforeHead++
		fc.beforeFirst++
	}
	if fc.beforeHead > len(fc.before)/2 && fc.beforeHead > 64 {
		n := copy(fc.before, fc.before[fc.beforeHead:])
		fc.before = fc.before[:n]
		fc.beforeHead = 0
	}
}

// lagBytes is the output a reader that has everything up to seq c has not had yet; false when
// c is older than the record.
func (fc *flowControl) lagBytes(c uint64) (uint64, bool) {
	next := c + 1
	n := uint64(len(fc.before) - fc.beforeHead)
	if next < fc.beforeFirst || next >= fc.beforeFirst+n {
		return 0, false
	}
	return fc.total - fc.before[fc.beforeHead+int(next-fc.beforeFirst)], true
}

// Follower is a reader whose progress a session's output waits for (see Registry.Follow).
type Follower interface {
	// Ack records that every event up to seq has been delivered.
	Ack(seq uint64)
	// Close unregisters the follower.
	Close()
}

type follower struct {
	flow     *flowControl
	seq      atomic.Uint64
	released atomic.Bool
	unwatch  func()
	window   atomic.Int64 // bytes of output it may lag before output waits; 0: half the log's
}

// Windowed is a Follower whose lag allowance can be narrowed below half the session's log: a
// browser that renders what it acknowledges wants output to wait while it holds more than a
// screenful or so unrendered, so that Ctrl-C after a flood shows its prompt at once.
type Windowed interface {
	Follower
	// SetWindow sets the bytes of output (and of encoded data) the follower may lag.
	SetWindow(bytes int)
}

// SetWindow implements Windowed.
func (f *follower) SetWindow(bytes int) { f.window.Store(int64(bytes)) }

// Follow implements Flow.
func (fc *flowControl) Follow(after uint64, onClose func()) Follower {
	f := &follower{flow: fc, unwatch: onClose}
	f.seq.Store(after)
	fc.mu.Lock()
	fc.followers[f] = struct{}{}
	fc.mu.Unlock()
	return f
}

// Ack implements Follower.
func (f *follower) Ack(seq uint64) {
	if seq <= f.seq.Load() {
		return
	}
	f.seq.Store(seq)
	l := f.flow
	if !l.waiting.Load() && !f.released.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.released.Load() && !l.behindLocked(f) {
		f.released.Store(false) // caught up: it holds output back again
	}
	if l.waiting.Load() {
		close(l.room)
		l.room = make(chan struct{})
	}
}

// Close implements Follower.
func (f *follower) Close() {
	if f.unwatch != nil {
		f.unwatch()
	}
	l := f.flow
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.followers, f)
	if l.waiting.Load() {
		close(l.room)
		l.room = make(chan struct{})
	}
}

// behindLocked reports whether f is more than half a ring behind the head. A follower already
// lapped by the ring has lost events anyway and does not count.
func (fc *flowControl) behindLocked(f *follower) bool {
	c := f.seq.Load()
	if c >= fc.last {
		return false
	}
	lagBytes, ok := fc.lagBytes(c)
	if !ok || lagBytes > uint64(fc.limits.Bytes) {
		return false
	}
	limit := uint64(fc.limits.Bytes / 2)
	if w := f.window.Load(); w > 0 && uint64(w) < limit {
		limit = uint64(w)
	}
	return fc.last-c > uint64(fc.limits.Events/2) || lagBytes > limit
}

// stall is a follower the producer waits for: where it was and since when it has not moved.
type stall struct {
	seq   uint64
	since time.Time
}

// WaitRoom implements Flow: it blocks the producer while an engaged follower is too far behind. Each follower it
// waits for has a clock of its own, started when the wait began or when that follower last
// moved: one that makes no progress for MaxStall is released, however the others progress
// (a stream that stopped reading must not hold the session while the rest catch up). It
// returns once no engaged follower is too far behind.
func (fc *flowControl) WaitRoom() {
	var (
		timer  *time.Timer
		clocks map[*follower]stall
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		fc.mu.Lock()
		if fc.off || fc.closed || len(fc.followers) == 0 {
			fc.mu.Unlock()
			return
		}
		// Said before any follower's position is read: an Ack that stores a position this
		// look misses then sees waiting and wakes the wait below. Said after the look, an Ack
		// in between returned without a wake-up and the producer slept until MaxStall (an
		// hour in livetest's Concurrent, which hung once in a few hundred runs under load).
		fc.waiting.Store(true)
		now := time.Now()
		var next time.Time // the earliest release to come
		for f := range fc.followers {
			if f.released.Load() || !fc.behindLocked(f) {
				continue
			}
			if clocks == nil {
				clocks = map[*follower]stall{}
			}
			c, ok := clocks[f]
			if seq := f.seq.Load(); !ok || seq != c.seq {
				c = stall{seq: seq, since: now} // new to this wait, or it moved
				clocks[f] = c
			}
			at := c.since.Add(fc.limits.MaxStall)
			if !now.Before(at) {
				f.released.Store(true) // it no longer holds output back
				continue
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		if next.IsZero() {
			fc.waiting.Store(false)
			fc.mu.Unlock()
			return
		}
		room := fc.room
		fc.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(next.Sub(now))
		} else {
			timer.Reset(next.Sub(now))
		}
		select {
		case <-room: // a follower moved or went: look again
		case <-timer.C:
		}
	}
}

// Stop implements Flow: the producer stops waiting for good (the session is closing).
func (fc *flowControl) Stop() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.off = true
	close(fc.room)
	fc.room = make(chan struct{})
}
