package trigger

import (
	"context"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// JobStore keeps the jobs and hooks a Service fires and answers: on one node the SQLite
// Store, in a cluster a store every node shares (internal/triggerkv), so that a job added on
// one node fires while that node is down. Every implementation passes triggertest.Run.
type JobStore interface {
	// AddJob validates (PrepareJob) and stores a new job; an id in use is refused with
	// JobExists.
	AddJob(ctx context.Context, j Job, floor time.Duration) (Job, error)
	// Jobs lists the jobs by id; Job returns one (NoJob when there is none).
	Jobs(ctx context.Context) ([]Job, error)
	Job(ctx context.Context, id string) (Job, error)
	RemoveJob(ctx context.Context, id string) error
	// RecordRun stores the outcome of one of a job's runs (Run.Apply). Two nodes may
	// record runs of one job at once: neither's is lost.
	RecordRun(ctx context.Context, id string, r Run) error

	// AddHook validates (PrepareHook) and stores a new hook; the answer carries its secret,
	// which Hooks never does.
	AddHook(ctx context.Context, h Hook) (Hook, error)
	Hooks(ctx context.Context) ([]Hook, error)
	// Hook returns a hook and its secret; ok is false when there is none.
	Hook(ctx context.Context, id string) (h Hook, secret string, ok bool, err error)
	// HookCalled counts a call of the hook (none when it is gone).
	HookCalled(ctx context.Context, id string) error
	// RemoveHook deletes a hook: its secret stops working at once, everywhere.
	RemoveHook(ctx context.Context, id string) error

	// ClaimSignature records a signed call's signature until expires (at least): false when
	// it was recorded already, the call a replay. UnclaimSignature forgets one whose call
	// delivered nothing, so the sender's retry works.
	ClaimSignature(ctx context.Context, hook, sig string, expires time.Time) (bool, error)
	UnclaimSignature(ctx context.Context, hook, sig string) error

	Close() error
}

var _ JobStore = (*Store)(nil)

// JobWatcher is a JobStore whose jobs other writers change (a cluster's, where a job is added
// through any node): WatchJobs returns once it watches, then calls changed after each change
// to a job, from its own goroutine, until ctx ends. A Service's Run looks at the jobs again
// then, as Wake does for the jobs added through it.
type JobWatcher interface {
	WatchJobs(ctx context.Context, changed func()) error
}

// Claimer decides which node of a cluster delivers a job's firing: Claim answers true to
// exactly one caller per firing id, whichever node calls and however many at once. A
// Service without one (a single node) delivers every firing it finds due.
type Claimer interface {
	Claim(ctx context.Context, firing string) (bool, error)
}

// Run is the outcome of one of a job's runs.
type Run struct {
	// At is the scheduled time run (Unix ms; 0 for a run outside the schedule).
	At int64
	// Fired says a message was stored, MessageID its id; Error what went wrong, if anything.
	Fired     bool
	MessageID string
	Error     string
	// Elsewhere says another node claimed this firing: only the job's last scheduled time
	// moves on (the claiming node records the rest).
	Elsewhere bool
}

// Apply returns j with the run r recorded at now.
func (r Run) Apply(j Job, now time.Time) Job {
	if r.At > j.LastRunAt {
		j.LastRunAt = r.At
	}
	if r.Elsewhere {
		return j
	}
	if r.Fired {
		j.LastFiredAt = now.UnixMilli()
		j.LastMessageID = r.MessageID
		j.Runs++
	}
	j.LastError = r.Error
	return j
}

// NoJob is the error for a job id that names no job.
func NoJob(id string) error {
	return abi.Errorf(abi.CodeInvalidArgument, "", "no job %q (nexus cron list)", id)
}

// JobExists is the error for a new job whose id is in use.
func JobExists(id string) error {
	return abi.Errorf(abi.CodeInvalidArgument, "", "a job %q exists: remove it first or choose another id", id)
}

// NoHook is the error for a hook id that names no hook.
func NoHook(id string) error {
	return abi.Errorf(abi.CodeInvalidArgument, "", "no hook %q (nexus hook list)", id)
}

// HookExists is the error for a new hook whose id is in use.
func HookExists(id string) error {
	return abi.Errorf(abi.CodeInvalidArgument, "", "a hook %q exists: remove it first or choose another id", id)
}
