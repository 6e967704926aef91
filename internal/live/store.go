package live

import (
	"context"

	"github.com/nexus-run/nexus/internal/abi"
)

// Store keeps what a registry knows of its sessions beyond its own lifetime: a record per
// session (its session object) and the session's EventLog. The registry writes a record when a
// session is created and when it ends; between the two, the log carries every change.
//
// MemoryStore keeps nothing past the process; DiskStore keeps records and logs under a
// directory, so a restarted gateway still answers for the sessions of the previous run.
type Store interface {
	// Restore returns the sessions an earlier registry left, each with its log opened for
	// reading and appending, oldest first.
	Restore(ctx context.Context, limits LogLimits) ([]Restored, error)
	// Create records a new session and opens its empty log.
	Create(ctx context.Context, rec abi.Session, limits LogLimits) (EventLog, error)
	// Save replaces a session's record.
	Save(ctx context.Context, rec abi.Session) error
	// Remove forgets a session: its record and its log.
	Remove(ctx context.Context, id string) error
	// Close releases the store once the registry is done with it; what it keeps stays for the
	// next registry.
	Close() error
}

// Restored is a session an earlier registry left in a Store.
type Restored struct {
	Session abi.Session
	Log     EventLog
}

// MemoryStore is the Store of a registry that forgets everything when its process ends.
type MemoryStore struct{}

// Restore implements Store: there is never anything to restore.
func (MemoryStore) Restore(context.Context, LogLimits) ([]Restored, error) { return nil, nil }

// Create implements Store.
func (MemoryStore) Create(_ context.Context, _ abi.Session, l LogLimits) (EventLog, error) {
	return NewMemoryLog(l), nil
}

// Save implements Store.
func (MemoryStore) Save(context.Context, abi.Session) error { return nil }

// Remove implements Store.
func (MemoryStore) Remove(context.Context, string) error { return nil }

// Close implements Store.
func (MemoryStore) Close() error { return nil }
