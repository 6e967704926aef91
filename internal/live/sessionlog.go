package live

import (
	"errors"
	"sync"
)

// sessionLog is what the registry puts around a session's EventLog: it assigns sequence
// numbers, wakes waiting readers (by closing a broadcast channel, so a slow reader never blocks
// another), knows when the session has ended, and paces output for followers (flow.go).
type sessionLog struct {
	mu      sync.Mutex
	log     EventLog
	flusher Flusher // log's, when it buffers writes
	limits  LogLimits
	last    uint64
	// lastUnknown is set while last has not been asked of a log that must read its files to
	// answer (a closed session restored from disk): a restart reads no closed session's log.
	lastUnknown bool
	wake        chan struct{}
	closed      bool
	// failed reports an EventLog error: the first one of the session (a log that cannot write
	// fails the same way every time).
	failed   func(error)
	reported bool

	flow flowState
}

func newSessionLog(log EventLog, l LogLimits, failed func(error)) *sessionLog {
	sl := &sessionLog{
		log: log, limits: l, wake: make(chan struct{}), failed: failed,
		flow: flowState{room: make(chan struct{}), followers: map[*follower]struct{}{}},
	}
	if k, ok := log.(interface{ lastKnown() bool }); ok && !k.lastKnown() {
		sl.lastUnknown = true
	} else {
		sl.last = log.LastSeq()
	}
	sl.flusher, _ = log.(Flusher)
	return sl
}

// lastLocked is the newest event's sequence number. Flow control reads last directly: it has
// nothing to pace once a session is closed, which every log whose last is unknown is.
func (l *sessionLog) lastLocked() uint64 {
	if l.lastUnknown {
		l.last, l.lastUnknown = l.log.LastSeq(), false
	}
	return l.last
}

// flushLocked writes what the log buffered: before anyone sees an event or a sequence number.
func (l *sessionLog) flushLocked() {
	if l.flusher == nil {
		return
	}
	if err := l.flusher.Flush(); err != nil {
		l.report(err)
	}
}

// append assigns the next sequence number and wakes every waiting reader. It reports false when
// the log has ended or could not store the event.
func (l *sessionLog) append(e *Event) bool {
	return l.appendAll(e)
}

// appendAll appends events as one step: a reader woken by the first sees them all (a poller
// must get a session's final status and close event in one answer, or it may ask again after
// the gateway is gone).
func (l *sessionLog) appendAll(events ...*Event) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	last := l.lastLocked()
	for i, e := range events {
		e.Seq = last + 1 + uint64(i)
	}
	if err := l.log.Append(events...); err != nil {
		l.report(err)
		if !errors.Is(err, ErrNotDurable) {
			return false
		}
	}
	for _, e := range events {
		l.last = e.Seq
		l.flow.appended(e, l.limits.Events)
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return true
}

func (l *sessionLog) report(err error) {
	if !l.reported && l.failed != nil {
		l.reported = true
		l.failed(err)
	}
}

// finish marks the log complete (readers drain what is left and then stop) and closes the
// EventLog, which makes a persisting log durable.
func (l *sessionLog) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.wake)
	// Nothing is appended any more, so flow control has nothing to pace: its record of the
	// ring (8 bytes an event, up to 64 KiB) would otherwise stay with every closed session.
	l.flow.before, l.flow.beforeHead, l.flow.beforeFirst = nil, 0, 0
	if err := l.log.Close(); err != nil {
		l.report(err)
	}
}

// readResult is one pull from the log.
type readResult struct {
	Page
	// Done is true when the log is finished and everything up to Next has been read.
	Done bool
	// Wake is closed when something is appended after this read.
	Wake <-chan struct{}
}

func (l *sessionLog) read(after uint64, limit int) (readResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
	p, err := l.log.Read(after, limit)
	if err != nil {
		return readResult{}, err
	}
	return readResult{Page: p, Done: l.closed && p.Next >= l.lastLocked(), Wake: l.wake}, nil
}

func (l *sessionLog) lastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
	return l.lastLocked()
}
