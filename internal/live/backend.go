package live

import (
	"context"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// View is a read-only view of a registry's sessions: what a kind that watches other sessions
// (meta-chat) is given (see Observer). Every method may fail the way a networked backend could.
type View interface {
	// List returns the live sessions (active, paused), and with all also the retained closed
	// ones, oldest first.
	List(ctx context.Context, all bool) ([]abi.Session, error)
	// Get returns a session object, whatever its status.
	Get(ctx context.Context, id string) (abi.Session, error)
	// Read returns the events after sequence number after (at most limit; 0 means all
	// retained), waiting up to wait for the first one when there is none yet.
	Read(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (Batch, error)
	// LastSeq is the sequence number of the session's newest event.
	LastSeq(ctx context.Context, id string) (uint64, error)
	// WatchSessions waits until the registry's sessions have changed since version after (a
	// session created, removed, or its status or metadata changed), ctx ends or wait elapses,
	// and returns every session (closed ones included) with the current version. Version 0
	// answers at once.
	WatchSessions(ctx context.Context, after uint64, wait time.Duration) (Snapshot, error)
}

// Snapshot is the registry's sessions at one version.
type Snapshot struct {
	Sessions []abi.Session
	Version  uint64
}

// Backend is what the gateway calls: a live-session registry, in this process (Registry) or
// behind a network. Every method takes the request's context and returns an error where a
// networked backend could fail.
type Backend interface {
	View
	// Create validates req, starts a session and returns its object.
	Create(ctx context.Context, req abi.CreateRequest) (abi.Session, error)
	// Send delivers input to a session and returns what it did: the sequence number the
	// events it causes follow, and the message id a kind that queues input gave it.
	Send(ctx context.Context, id string, req SendRequest) (SendResult, error)
	// Control runs a control command and returns the ABI's control response data.
	Control(ctx context.Context, id string, req abi.ControlRequest) (*abi.ControlData, error)
	// Run runs one command in a session that supports it and returns its structured result.
	Run(ctx context.Context, id string, req abi.RunRequest) (any, error)
	// Close closes a session and returns its object with the final status.
	Close(ctx context.Context, id string, reason string) (abi.Session, error)
	// Hold makes the caller an owner of the session until release: an ephemeral session
	// closes when its last owner lets go.
	Hold(ctx context.Context, id string) (release func(), err error)
	// Follow registers a reader positioned after seq whose progress the session's output
	// waits for (boundedly; see flow.go). The caller closes the follower when it goes.
	Follow(ctx context.Context, id string, after uint64) (Follower, error)
	// Watch registers a watcher until unwatch: a watched session is never idle.
	Watch(ctx context.Context, id string) (unwatch func(), err error)
	// Shutdown refuses new sessions and closes every live one.
	Shutdown(ctx context.Context) error
}

var _ Backend = (*Registry)(nil)

// view hides the registry behind View, so an observer cannot reach the rest of it.
type view struct{ r *Registry }

func (v view) List(ctx context.Context, all bool) ([]abi.Session, error) { return v.r.List(ctx, all) }
func (v view) Get(ctx context.Context, id string) (abi.Session, error)   { return v.r.Get(ctx, id) }
func (v view) LastSeq(ctx context.Context, id string) (uint64, error)    { return v.r.LastSeq(ctx, id) }
func (v view) Read(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (Batch, error) {
	return v.r.Read(ctx, id, after, limit, wait)
}

func (v view) WatchSessions(ctx context.Context, after uint64, wait time.Duration) (Snapshot, error) {
	return v.r.WatchSessions(ctx, after, wait)
}
