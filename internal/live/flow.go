package live

import (
	"sync/atomic"
	"time"
)

// Flow control. A terminal can print far faster than a client can take it, and the ring only
// holds a moment of bulk output. So output waits for the followers (WebSocket streams that
// acknowledge what they have sent) while one of them is more than half a ring behind: the PTY
// reader stops reading, the kernel's buffer fills, and the program blocks, as it would behind a
// slow ssh link. A follower that makes no progress for MaxStall is released: it no longer holds
// output back (it will get EVENTS_MISSED if it is lapped) until it catches up again. So a fast
// client loses nothing and a stuck one cannot stall the session for more than MaxStall.

// DefaultMaxStall is how long output waits for a follower that makes no progress.
const DefaultMaxStall = time.Second

type flowState struct {
	total     uint64 // output bytes appended so far
	followers map[*Follower]struct{}
	room      chan struct{} // closed when a follower advances while output waits
	waiting   atomic.Bool
	off       bool // the session is ending: never wait again
}

// Follower is a reader whose progress the session's output waits for.
type Follower struct {
	log      *eventLog
	seq      atomic.Uint64
	released atomic.Bool
	unwatch  func()
}

// follow registers a follower positioned after seq.
func (l *eventLog) follow(after uint64) *Follower {
	f := &Follower{log: l}
	f.seq.Store(after)
	l.mu.Lock()
	l.flow.followers[f] = struct{}{}
	l.mu.Unlock()
	return f
}

// Ack records that every event up to seq has been delivered.
func (f *Follower) Ack(seq uint64) {
	if seq <= f.seq.Load() {
		return
	}
	f.seq.Store(seq)
	l := f.log
	if !l.flow.waiting.Load() && !f.released.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.released.Load() && !l.behindLocked(f) {
		f.released.Store(false) // caught up: it holds output back again
	}
	if l.flow.waiting.Load() {
		close(l.flow.room)
		l.flow.room = make(chan struct{})
	}
}

// Close unregisters the follower.
func (f *Follower) Close() {
	if f.unwatch != nil {
		f.unwatch()
	}
	l := f.log
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.flow.followers, f)
	if l.flow.waiting.Load() {
		close(l.flow.room)
		l.flow.room = make(chan struct{})
	}
}

// behindLocked reports whether f is more than half a ring behind the head. A follower already
// lapped by the ring has lost events anyway and does not count.
func (l *eventLog) behindLocked(f *Follower) bool {
	live := l.ring[l.head:]
	if len(live) == 0 {
		return false
	}
	c := f.seq.Load()
	first := live[0].Seq
	if c < first {
		return false
	}
	if c >= l.last {
		return false
	}
	lagEvents := l.last - c
	lagBytes := l.flow.total - live[c-first].through
	return lagEvents > uint64(l.limits.Events/2) || lagBytes > uint64(l.limits.Bytes/2)
}

// waitRoom blocks the producer while an engaged follower is too far behind, for at most
// MaxStall without progress; then it releases the laggards and returns.
func (l *eventLog) waitRoom() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		l.mu.Lock()
		if l.flow.off || l.closed || len(l.flow.followers) == 0 {
			l.mu.Unlock()
			return
		}
		var slow []*Follower
		for f := range l.flow.followers {
			if !f.released.Load() && l.behindLocked(f) {
				slow = append(slow, f)
			}
		}
		if len(slow) == 0 {
			l.flow.waiting.Store(false)
			l.mu.Unlock()
			return
		}
		l.flow.waiting.Store(true)
		room := l.flow.room
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(l.limits.MaxStall)
		}
		select {
		case <-room:
			timer.Reset(l.limits.MaxStall) // progress: the clock restarts
		case <-timer.C:
			for _, f := range slow {
				f.released.Store(true)
			}
			l.mu.Lock()
			l.flow.waiting.Store(false)
			l.mu.Unlock()
			return
		}
	}
}

// stopFlow makes the producer stop waiting for good (the session is closing).
func (l *eventLog) stopFlow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flow.off = true
	close(l.flow.room)
	l.flow.room = make(chan struct{})
}
