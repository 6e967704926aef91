package live

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// restore takes in the sessions an earlier registry left in the store. Their processes are
// gone (the gateway's groups die with it, and the next gateway reaps what is left), so a
// session that was still live is closed here, with reason gateway-restart: its log gets the
// closing events an orderly close would have appended, numbered after everything it held.
func (r *Registry) restore(ctx context.Context) error {
	restored, err := r.cfg.Store.Restore(ctx, r.cfg.Log)
	if err != nil {
		return fmt.Errorf("restore live sessions: %w", err)
	}
	now := r.now()
	for _, rs := range restored {
		s := &session{id: rs.Session.SessionID, obj: rs.Session, rev: rs.Revision, lastActive: now}
		s.lifeOver = true // restored sessions are closed: their instances are gone
		if s.obj.Metadata == nil {
			s.obj.Metadata = map[string]any{}
		}
		s.log = r.newLog(s.id, rs.Log)
		if !s.obj.Status.Final() {
			if err := replay(ctx, s, rs.Log); err != nil {
				r.cfg.Logger.Warn("restore a session", "id", s.id, "err", err)
			}
		}
		if s.obj.Status.Final() {
			s.closeReason, _ = s.obj.Metadata["closeReason"].(string)
			at, _ := s.obj.Metadata["closedAt"].(string)
			if s.closedAt, err = abi.ParseTime(at); err != nil {
				s.closedAt = now
			}
			s.log.finish()
		} else {
			s.obj.Status = abi.StatusClosed
			s.closeReason, s.closedAt = abi.CloseGatewayRestart, now
			s.obj.Metadata["closedAt"] = abi.FormatTime(now)
			s.obj.Metadata["closeReason"] = abi.CloseGatewayRestart
			r.closeLog(ctx, s, now, abi.CloseGatewayRestart, abi.StatusClosed, nil)
			r.cfg.Logger.Info("session closed", "id", s.id, "reason", abi.CloseGatewayRestart)
		}
		if now.Sub(s.closedAt) >= r.cfg.Retention {
			if err := r.cfg.Store.Remove(ctx, s.id); err != nil {
				r.cfg.Logger.Warn("forget a session", "id", s.id, "err", err)
			}
			continue
		}
		r.mu.Lock() // an Observer registered with New may already be looking
		r.sessions[s.id] = s
		r.changedLocked()
		r.mu.Unlock()
	}
	return nil
}

// replay brings the record of a session that was live when its registry ended up to date with
// its log: the record is written when the session starts and ends, the log carries what changed
// in between. A log that ends with a close event (the record was not rewritten in time) makes
// the session final.
func replay(ctx context.Context, s *session, l EventLog) error {
	p, err := l.Read(ctx, 0, 0)
	if err != nil {
		return fmt.Errorf("read its events: %w", err)
	}
	for _, e := range p.Events {
		switch pl := e.Payload.(type) {
		case abi.MetadataPayload:
			maps.Copy(s.obj.Metadata, pl.Metadata)
		case abi.StatusPayload:
			if pl.SessionStatus != "" && !pl.SessionStatus.Final() {
				s.obj.Status = pl.SessionStatus
			}
		case abi.ClosePayload:
			s.obj.Status = pl.Status
			s.obj.Metadata["closedAt"] = abi.FormatTime(e.Time)
			s.obj.Metadata["closeReason"] = pl.Reason
			if pl.ExitCode != nil {
				s.obj.Metadata["exitCode"] = *pl.ExitCode
			}
		}
	}
	return nil
}

// replayMetadata copies into md the metadata l's events set.
func replayMetadata(ctx context.Context, md map[string]any, l EventLog) error {
	p, err := l.Read(ctx, 0, 0)
	if err != nil {
		return fmt.Errorf("read its events: %w", err)
	}
	for _, e := range p.Events {
		if pl, ok := e.Payload.(abi.MetadataPayload); ok {
			maps.Copy(md, pl.Metadata)
		}
	}
	return nil
}

// WatchSessions implements View.
func (r *Registry) WatchSessions(ctx context.Context, after uint64, wait time.Duration) (Snapshot, error) {
	if r.cfg.Node != "" {
		return r.watchCluster(ctx, after, wait)
	}
	var timer <-chan time.Time
	for {
		r.mu.Lock()
		v, ch := r.version, r.changes
		r.mu.Unlock()
		if after == 0 || v != after || wait <= 0 {
			return Snapshot{Sessions: r.list(true), Version: v}, nil
		}
		if timer == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-ch:
		case <-timer:
			return Snapshot{Sessions: r.list(true), Version: v}, nil
		case <-ctx.Done():
			return Snapshot{}, fmt.Errorf("watch sessions: %w", ctx.Err())
		}
	}
}

// storeRetry is how long watchCluster waits before it asks a store that failed again.
const storeRetry = 500 * time.Millisecond

// watchCluster is WatchSessions on a node of a cluster: the snapshot is the cluster's, as List
// answers (the console on node b lists node a's sessions), and a record written by any node
// wakes the watch as a change here does. Its version is the registry's plus the store's: both
// only grow, so the sum moves whenever either does.
func (r *Registry) watchCluster(ctx context.Context, after uint64, wait time.Duration) (Snapshot, error) {
	var timer <-chan time.Time
	for {
		r.mu.Lock()
		v, ch := r.version, r.changes
		r.mu.Unlock()
		recs, err := r.cfg.Store.Watch(ctx, 0) // at once: every record, at the store's version
		if err != nil && (after == 0 || wait <= 0 || ctx.Err() != nil) {
			return Snapshot{}, fmt.Errorf("watch the cluster's sessions: %w", err)
		}
		if timer == nil && wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		if err != nil {
			// The cluster's store not answering for now (a leader being elected): a watcher
			// that waits (a meta-chat's, for good) waits on for it; the wait's end, reached
			// meanwhile, is answered as no change.
			retry := time.NewTimer(storeRetry)
			select {
			case <-retry.C:
				continue
			case <-timer:
				retry.Stop()
				return Snapshot{Sessions: r.list(true), Version: after}, nil
			case <-ctx.Done():
				retry.Stop()
				return Snapshot{}, fmt.Errorf("watch sessions: %w", ctx.Err())
			}
		}
		cur := v + recs.Version
		if after == 0 || cur != after || wait <= 0 {
			return Snapshot{Sessions: r.withRecords(r.list(true), recs.Records, true), Version: cur}, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		stored := make(chan struct{})
		go func() {
			defer close(stored)
			_, _ = r.cfg.Store.Watch(wctx, recs.Version)
		}()
		var timedOut bool
		select {
		case <-ch:
		case <-stored:
		case <-timer:
			timedOut = true
		case <-ctx.Done():
		}
		cancel()
		<-stored
		if err := ctx.Err(); err != nil {
			return Snapshot{}, fmt.Errorf("watch sessions: %w", err)
		}
		if timedOut {
			return Snapshot{Sessions: r.withRecords(r.list(true), recs.Records, true), Version: cur}, nil
		}
	}
}
