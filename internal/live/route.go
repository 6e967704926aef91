package live

import (
	"context"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Router carries a command for another node's session to that node and returns its answer
// (docs/cluster.md): a node of a cluster sends, controls, runs in and closes every node's
// sessions, while only the owner holds the session's instance. An error the owner answered
// with keeps its ABI code; a node that cannot be reached is RESOURCE_UNAVAILABLE, naming it.
type Router interface {
	Send(ctx context.Context, node, id string, req SendRequest) (SendResult, error)
	Control(ctx context.Context, node, id string, req abi.ControlRequest) (*abi.ControlData, error)
	Run(ctx context.Context, node, id string, req abi.RunRequest) (any, error)
	Close(ctx context.Context, node, id, reason string) (abi.Session, error)
	// Touch tells node that this node's readers follow its sessions ids: they are not idle.
	Touch(ctx context.Context, node string, ids []string) error
}

// Local is what a node serves to the others (the far end of a Router): the commands of a
// Backend for this registry's own sessions only. A session that is not its own is refused,
// never passed on, so a stale record cannot send a request round the cluster.
type Local interface {
	Send(ctx context.Context, id string, req SendRequest) (SendResult, error)
	Control(ctx context.Context, id string, req abi.ControlRequest) (*abi.ControlData, error)
	Run(ctx context.Context, id string, req abi.RunRequest) (any, error)
	Close(ctx context.Context, id, reason string) (abi.Session, error)
	// Touch marks the live sessions of ids this registry holds active now (another node's
	// readers follow them); the others are skipped.
	Touch(ctx context.Context, ids []string) error
}

// Local returns the registry's own sessions' commands, for the node's Router's server.
func (r *Registry) Local() Local { return local{r} }

type local struct{ r *Registry }

// own refuses a session this registry does not hold.
func (l local) own(id string) error {
	if _, err := l.r.lookup(id); err != nil {
		return abi.Errorf(abi.CodeSessionNotFound, id, "no session %q on node %s", id, l.r.cfg.Node)
	}
	return nil
}

func (l local) Send(ctx context.Context, id string, req SendRequest) (SendResult, error) {
	if err := l.own(id); err != nil {
		return SendResult{}, err
	}
	return l.r.sendLocal(ctx, id, req)
}

func (l local) Control(ctx context.Context, id string, req abi.ControlRequest) (*abi.ControlData, error) {
	if err := l.own(id); err != nil {
		return nil, err
	}
	return l.r.controlLocal(ctx, id, req)
}

func (l local) Run(ctx context.Context, id string, req abi.RunRequest) (any, error) {
	if err := l.own(id); err != nil {
		return nil, err
	}
	return l.r.runLocal(ctx, id, req)
}

func (l local) Close(ctx context.Context, id, reason string) (abi.Session, error) {
	if err := l.own(id); err != nil {
		return abi.Session{}, err
	}
	return l.r.closeLocal(ctx, id, reason)
}

func (l local) Touch(_ context.Context, ids []string) error {
	now := l.r.now()
	for _, id := range ids {
		if s, err := l.r.lookup(id); err == nil {
			s.mu.Lock()
			if !s.obj.Status.Final() && now.After(s.lastActive) {
				s.lastActive = now
			}
			s.mu.Unlock()
		}
	}
	return nil
}

// touchRemote tells the owners of the other nodes' sessions this node's readers hold open
// (a WebSocket attached here) that they are followed, so the owners' idle timers do not close
// them: at most every third of the idle timeout, from the sweep.
func (r *Registry) touchRemote(ctx context.Context, now time.Time) {
	if r.cfg.Router == nil || r.cfg.IdleTimeout <= 0 {
		return
	}
	r.foreignMu.Lock()
	if now.Sub(r.touched) < r.cfg.IdleTimeout/3 {
		r.foreignMu.Unlock()
		return
	}
	byNode := map[string][]string{}
	for id, sl := range r.foreignLogs {
		byNode[sl.node] = append(byNode[sl.node], id)
	}
	r.touched = now
	r.foreignMu.Unlock()
	for node, ids := range byNode {
		if err := r.cfg.Router.Touch(ctx, node, ids); err != nil {
			r.cfg.Logger.Warn("tell a node its sessions are followed here", "node", node, "sessions", len(ids), "err", err)
		}
	}
}

// route says where a command for session id goes: "" (and nil) for this registry (its own
// session, or one no node has: the local path answers SESSION_NOT_FOUND), or the node whose
// session it is, when this registry is a node of a cluster with a Router. A session of
// another node that has ended is answered here, from its record, without asking its node
// (which may be the lost node that ended it).
func (r *Registry) route(ctx context.Context, id string) (string, error) {
	if r.cfg.Router == nil || r.cfg.Node == "" {
		return "", nil
	}
	if _, err := r.lookup(id); err == nil {
		return "", nil
	}
	r.foreignMu.Lock()
	node := r.owners[id]
	r.foreignMu.Unlock()
	if node != "" {
		return node, nil
	}
	rec, err := r.cfg.Store.Get(ctx, id)
	if err != nil || rec.Session.Node == "" || rec.Session.Node == r.cfg.Node {
		return "", nil
	}
	if rec.Session.Status.Final() {
		return "", recordFinalError(rec.Session)
	}
	// A session never changes node: the next command for it (a keystroke) skips the store.
	r.foreignMu.Lock()
	if len(r.owners) >= maxOwners {
		clear(r.owners)
	}
	if r.owners == nil {
		r.owners = map[string]string{}
	}
	r.owners[id] = rec.Session.Node
	r.foreignMu.Unlock()
	return rec.Session.Node, nil
}

// maxOwners bounds the nodes of other nodes' sessions a registry remembers (route).
const maxOwners = 4096

// remote runs call on the node of another node's session; handled is false when the session
// is this node's (or no node's). An owner that cannot be reached may be one the cluster has
// found lost since: then the session's record, which says so, answers.
func remote[T any](ctx context.Context, r *Registry, id string, call func(Router, string) (T, error)) (res T, handled bool, err error) {
	node, err := r.route(ctx, id)
	if err != nil {
		return res, true, err
	}
	if node == "" {
		return res, false, nil
	}
	res, err = call(r.cfg.Router, node)
	if err != nil && abi.CodeOf(err) == abi.CodeResourceUnavailable {
		if rec, gerr := r.cfg.Store.Get(ctx, id); gerr == nil && rec.Session.Status.Final() {
			return res, true, recordFinalError(rec.Session)
		}
	}
	return res, true, err
}

// otherNodes returns the record of session id when it is another node's of this registry's
// cluster.
func (r *Registry) otherNodes(ctx context.Context, id string) (Record, error) {
	if r.cfg.Node == "" {
		return Record{}, ErrNoRecord
	}
	rec, err := r.cfg.Store.Get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if rec.Session.Node == "" || rec.Session.Node == r.cfg.Node {
		return Record{}, ErrNoRecord
	}
	return rec, nil
}

// recordFinalError is finalError for a session known by its record only.
func recordFinalError(obj abi.Session) error {
	id := obj.SessionID
	reason, _ := obj.Metadata["closeReason"].(string)
	at, _ := obj.Metadata["closedAt"].(string)
	switch reason {
	case abi.CloseTimeout, abi.CloseIdle:
		return abi.Errorf(abi.CodeSessionExpired, id, "session %s expired (%s) at %s", id, reason, at)
	}
	if reason == CloseNodeLost {
		return abi.Errorf(abi.CodeSessionClosed, id, "session %s was lost with its node %s", id, obj.Node)
	}
	if obj.Status == abi.StatusError {
		return abi.Errorf(abi.CodeSessionClosed, id, "session %s failed and was closed at %s", id, at)
	}
	return abi.Errorf(abi.CodeSessionClosed, id, "session %s was closed (%s) at %s", id, reason, at)
}

// sharedLog is another node's session's log, opened from the cluster's store and shared by
// this node's readers of it (a WebSocket attached here, a long poll) until the last lets go.
type sharedLog struct {
	log  EventLog
	node string // the session's
	refs int
}

// foreign returns another node's session's log, opened for reading, when this registry is a
// node of a cluster whose store holds it; release lets go of the log (closed once no reader of
// this node holds it). A log this node's readers hold already is shared without asking the
// store.
func (r *Registry) foreign(ctx context.Context, id string) (EventLog, func(), error) {
	opener, ok := r.cfg.Store.(LogOpener)
	if r.cfg.Node == "" || !ok {
		return nil, nil, ErrNoRecord
	}
	r.foreignMu.Lock()
	sl := r.foreignLogs[id]
	if sl != nil {
		sl.refs++
	}
	r.foreignMu.Unlock()
	if sl == nil {
		rec, err := r.cfg.Store.Get(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		// A record of this node's that the registry does not hold (callers looked) was
		// written last by another node (marked node-lost while this node was gone): it is
		// read as another's.
		if rec.Session.Node == "" {
			return nil, nil, ErrNoRecord
		}
		log, err := opener.OpenEventLog(ctx, id, r.cfg.Log)
		if err != nil {
			return nil, nil, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id,
				Message: "open the events of node " + rec.Session.Node + "'s session", Err: err}
		}
		r.foreignMu.Lock()
		if sl = r.foreignLogs[id]; sl != nil { // another reader opened it meanwhile
			sl.refs++
		} else {
			sl = &sharedLog{log: log, node: rec.Session.Node, refs: 1}
			if r.foreignLogs == nil {
				r.foreignLogs = map[string]*sharedLog{}
			}
			r.foreignLogs[id] = sl
			log = nil
		}
		r.foreignMu.Unlock()
		if log != nil {
			_ = log.Close(context.WithoutCancel(ctx))
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			r.foreignMu.Lock()
			sl.refs--
			last := sl.refs == 0
			if last {
				delete(r.foreignLogs, id)
			}
			r.foreignMu.Unlock()
			if last {
				_ = sl.log.Close(r.base)
			}
		})
	}
	return sl.log, release, nil
}

// remoteFollower follows another node's session from this node: it holds the session's log
// open for this node's reads. Its acknowledgments pace nothing: the owner's output does not
// wait on a reader of another node (docs/cluster.md).
type remoteFollower struct{ release func() }

var _ Follower = remoteFollower{}

func (remoteFollower) Ack(uint64) {}
func (f remoteFollower) Close()   { f.release() }
