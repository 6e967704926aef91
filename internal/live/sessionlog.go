package live

import (
	"context"
	"errors"
	"sync"
)

// sessionLog is what the registry puts around a session's EventLog: it knows when the session
// has ended, reports the log's first failure, and paces output for followers (flow.go). The log
// numbers the events and wakes its readers itself, so no lock of the registry is held while
// the log works: appends wait for each other (appendMu: flow control needs them in order), but
// readers and followers only take mu, which guards memory.
type sessionLog struct {
	// ctx is what the log's calls run under: the registry's, never a request's (an append
	// outlives the request that caused it).
	ctx      context.Context
	appendMu sync.Mutex // serializes appends and the close that ends them

	mu     sync.Mutex
	log    EventLog
	limits LogLimits
	closed bool
	// failed reports an EventLog error: the first one of the session (a log that cannot write
	// fails the same way every time).
	failed   func(error)
	reported bool

	// fc paces output for followers (flow); it has a lock of its own.
	fc flowControl
}

// flow is the session's flow control.
func (l *sessionLog) flow() Flow { return &l.fc }

func newSessionLog(ctx context.Context, log EventLog, l LogLimits, failed func(error)) *sessionLog {
	sl := &sessionLog{ctx: ctx, log: log, limits: l, failed: failed}
	// A closed session restored from disk answers LastSeq only by reading its files, which a
	// restart must not do for every closed session it keeps: its flow measures from 0.
	var last uint64
	if k, ok := log.(interface{ lastKnown() bool }); !ok || k.lastKnown() {
		if n, err := log.LastSeq(ctx); err == nil {
			last = n
		}
	}
	sl.fc.init(&sl.limits, last)
	return sl
}

// append appends e; see appendAll.
func (l *sessionLog) append(e *Event) bool {
	return l.appendAll(e)
}

// appendAll appends events as one step: a reader woken by the first sees them all (a poller
// must get a session's final status and close event in one answer, or it may ask again after
// the gateway is gone). It reports false when the log has ended or could not store the events.
func (l *sessionLog) appendAll(events ...*Event) bool {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return false
	}
	res, err := l.log.Append(l.ctx, events...)
	if err != nil {
		l.report(err)
		if !errors.Is(err, ErrNotDurable) {
			return false
		}
	}
	l.fc.Appended(events, res.Last)
	return true
}

func (l *sessionLog) report(err error) {
	l.mu.Lock()
	first := !l.reported && l.failed != nil
	l.reported = true
	l.mu.Unlock()
	if first {
		l.failed(err)
	}
}

// finish marks the log complete (readers drain what is left and then stop) and closes the
// EventLog, which makes a persisting log durable and wakes its readers.
func (l *sessionLog) finish() {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	l.fc.Finish()
	if err := l.log.Close(l.ctx); err != nil {
		l.report(err)
	}
}

// readResult is one pull from the log.
type readResult struct {
	Page
	// Done is true when the log is finished and everything up to Next has been read.
	Done bool
}

func (l *sessionLog) read(ctx context.Context, after uint64, limit int) (readResult, error) {
	// Whether the log had ended is taken before the read: then the read saw every event.
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	p, err := l.log.Read(ctx, after, limit)
	if err != nil {
		return readResult{}, err
	}
	res := readResult{Page: p}
	if closed {
		last, err := l.log.LastSeq(ctx)
		if err != nil {
			return readResult{}, err
		}
		res.Done = p.Next >= last
	}
	return res, nil
}

// wait returns once the log holds an event after after, or has ended, or ctx ends.
func (l *sessionLog) wait(ctx context.Context, after uint64) error {
	return l.log.Wait(ctx, after)
}

func (l *sessionLog) lastSeq(ctx context.Context) (uint64, error) {
	return l.log.LastSeq(ctx)
}
