package live

import (
	"context"
	"errors"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Batch is one read from a session's event log.
type Batch struct {
	// Events are in sequence order. When the reader fell behind the retained window, the first
	// event is a synthetic error event (Seq 0, code EVENTS_MISSED) saying how many were lost.
	Events []*Event
	// Next is the sequence to read after next time.
	Next uint64
	// Done is true when the session has ended and every event has been read.
	Done bool
}

// Read returns the events after sequence after (at most limit; 0 means all retained). With wait
// > 0 and nothing to return yet, it blocks until an event arrives, the wait elapses or ctx ends.
// Reading never blocks the session: a slow reader only risks falling behind the retained window.
func (r *Registry) Read(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (Batch, error) {
	s, err := r.lookup(id)
	if err != nil {
		log, release, ferr := r.foreign(ctx, id)
		if ferr != nil {
			return Batch{}, foreignErr(id, err, ferr)
		}
		defer release()
		return r.readForeign(ctx, id, log, after, limit, wait)
	}
	var waitCtx context.Context
	for {
		res, err := s.log.read(ctx, after, limit)
		if err != nil {
			return Batch{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read events", Err: err}
		}
		if len(res.Events) > 0 || res.Missed > 0 || res.Done || wait <= 0 {
			return r.batch(s.id, res), nil
		}
		if waitCtx == nil {
			var cancel context.CancelFunc
			waitCtx, cancel = context.WithTimeout(ctx, wait)
			defer cancel()
		}
		if err := s.log.wait(waitCtx, after); err != nil {
			if ctx.Err() != nil {
				return Batch{}, ctx.Err()
			}
			return r.batch(s.id, res), nil // the wait elapsed
		}
	}
}

// LogOpener is a Store that opens any session's log for reading, another node's included (a
// cluster's shared store).
type LogOpener interface {
	OpenEventLog(ctx context.Context, id string, limits LogLimits) (EventLog, error)
}

// foreignErr is what a read of a session this node does not hold fails with, given foreign's
// error: notFound (the local lookup's SESSION_NOT_FOUND) when the store holds no record of
// another node's; the error itself when it has a code; else RESOURCE_UNAVAILABLE: a store
// that cannot answer for now (its leader being elected, this node cut off) does not say the
// session is gone.
func foreignErr(id string, notFound, ferr error) error {
	if errors.Is(ferr, ErrNoRecord) {
		return notFound
	}
	if abi.CodeOf(ferr) != abi.CodeInternal {
		return ferr
	}
	return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read the session from the cluster's store", Err: ferr}
}

// readForeign is Read for another node's session, from its log in the shared store. Whether
// the session has ended is its record's to say, read only when it may matter: when there is
// nothing to return, or the page ends with the close (a read that returns output goes without
// a round trip to the store; the one after it learns the end).
func (r *Registry) readForeign(ctx context.Context, id string, log EventLog, after uint64, limit int, wait time.Duration) (Batch, error) {
	var waitCtx context.Context
	for {
		p, err := log.Read(ctx, after, limit)
		if err != nil {
			return Batch{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read events", Err: err}
		}
		res := readResult{Page: p}
		var final bool
		if n := len(p.Events); n == 0 || p.Events[n-1].Type == abi.EventClose {
			rec, err := r.cfg.Store.Get(ctx, id)
			if err != nil {
				return Batch{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read the session's record", Err: err}
			}
			final = rec.Session.Status.Final()
		}
		if final {
			last, err := log.LastSeq(ctx)
			if err != nil {
				return Batch{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read events", Err: err}
			}
			res.Done = p.Next >= last
		}
		if len(res.Events) > 0 || res.Missed > 0 || res.Done || wait <= 0 {
			return r.batch(id, res), nil
		}
		if waitCtx == nil {
			var cancel context.CancelFunc
			waitCtx, cancel = context.WithTimeout(ctx, wait)
			defer cancel()
		}
		if err := log.Wait(waitCtx, after); err != nil {
			if ctx.Err() != nil {
				return Batch{}, ctx.Err()
			}
			return r.batch(id, res), nil // the wait elapsed
		}
	}
}

func (r *Registry) batch(id string, res readResult) Batch {
	b := Batch{Events: res.Events, Next: res.Next, Done: res.Done}
	if res.Missed > 0 {
		gap := &Event{Type: abi.EventError, Time: r.now(), SessionID: id, Payload: abi.ErrorPayload{
			Type: abi.PayloadError,
			Error: abi.ErrorDetail{
				Code:    abi.CodeEventsMissed,
				Message: "reader fell behind the retained window; events were dropped",
				Details: map[string]any{"missed": res.Missed, "fromSeq": res.MissedFrom, "toSeq": res.MissedTo},
			},
		}}
		b.Events = append([]*Event{gap}, b.Events...)
	}
	return b
}

// LastSeq is the sequence number of the session's newest event.
func (r *Registry) LastSeq(ctx context.Context, id string) (uint64, error) {
	s, err := r.lookup(id)
	if err != nil {
		log, release, ferr := r.foreign(ctx, id)
		if ferr != nil {
			return 0, foreignErr(id, err, ferr)
		}
		defer release()
		last, lerr := log.LastSeq(ctx)
		if lerr != nil {
			return 0, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read the last sequence number", Err: lerr}
		}
		return last, nil
	}
	last, err := s.log.lastSeq(ctx)
	if err != nil {
		return 0, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read the last sequence number", Err: err}
	}
	return last, nil
}
