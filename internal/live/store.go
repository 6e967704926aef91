package live

import (
	"context"
	"fmt"
	"sync"

	"github.com/nexus-run/nexus/internal/abi"
)

// Store keeps what a registry knows of its sessions beyond its own lifetime: a record per
// session (its session object, in the StateStore it is) and the session's EventLog. The
// registry puts a record when a session is created and when it ends, each time naming the
// revision it last wrote (compare-and-set); between the two, the log carries every change.
//
// MemoryStore keeps nothing past the process; DiskStore keeps records and logs under a
// directory, so a restarted gateway still answers for the sessions of the previous run.
type Store interface {
	StateStore
	// Restore returns the sessions an earlier registry left, each with its log opened for
	// reading and appending, oldest first.
	Restore(ctx context.Context, limits LogLimits) ([]Restored, error)
	// CreateLog opens the empty log of a session whose record was just created (Put with
	// revision 0).
	CreateLog(ctx context.Context, id string, limits LogLimits) (EventLog, error)
	// Remove forgets a session: its record and its log.
	Remove(ctx context.Context, id string) error
	// Close releases the store once the registry is done with it; what it keeps stays for the
	// next registry.
	Close() error
}

// Restored is a session an earlier registry left in a Store.
type Restored struct {
	Session  abi.Session
	Revision uint64
	Log      EventLog
}

// MemoryStore is the Store of a registry that forgets everything when its process ends: its
// records are what the registry put, and each log a MemoryLog.
type MemoryStore struct {
	v       *versions
	mu      sync.Mutex
	records map[string]abi.Session
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{v: newVersions(), records: map[string]abi.Session{}}
}

var _ Store = (*MemoryStore)(nil)

// Restore implements Store: there is never anything to restore.
func (*MemoryStore) Restore(context.Context, LogLimits) ([]Restored, error) { return nil, nil }

// CreateLog implements Store.
func (*MemoryStore) CreateLog(_ context.Context, _ string, l LogLimits) (EventLog, error) {
	return NewMemoryLog(l), nil
}

// Get implements StateStore.
func (s *MemoryStore) Get(_ context.Context, id string) (Record, error) {
	rev, ok := s.v.revision(id)
	s.mu.Lock()
	rec, have := s.records[id]
	s.mu.Unlock()
	if !ok || !have {
		return Record{}, fmt.Errorf("session %s: %w", id, ErrNoRecord)
	}
	return Record{Session: copySession(rec), Revision: rev}, nil
}

// List implements StateStore.
func (s *MemoryStore) List(ctx context.Context) ([]Record, error) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.records))
	for id := range s.records {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	out := make([]Record, 0, len(ids))
	for _, id := range ids {
		if r, err := s.Get(ctx, id); err == nil {
			out = append(out, r)
		}
	}
	sortRecords(out)
	return out, nil
}

// Put implements StateStore.
func (s *MemoryStore) Put(_ context.Context, rec abi.Session, revision uint64) (uint64, error) {
	if err := s.v.begin(rec.SessionID, revision); err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.records[rec.SessionID] = copySession(rec)
	s.mu.Unlock()
	return s.v.end(rec.SessionID, true, false), nil
}

// Delete implements StateStore.
func (s *MemoryStore) Delete(_ context.Context, id string, revision uint64) error {
	if revision == 0 {
		return fmt.Errorf("session %s: %w (delete names no revision)", id, ErrConflict)
	}
	if err := s.v.begin(id, revision); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.records, id)
	s.mu.Unlock()
	s.v.end(id, true, true)
	return nil
}

// Watch implements StateStore.
func (s *MemoryStore) Watch(ctx context.Context, after uint64) (Records, error) {
	v, err := s.v.wait(ctx, after)
	if err != nil {
		return Records{}, err
	}
	rs, err := s.List(ctx)
	return Records{Records: rs, Version: v}, err
}

// Remove implements Store.
func (s *MemoryStore) Remove(_ context.Context, id string) error {
	s.mu.Lock()
	delete(s.records, id)
	s.mu.Unlock()
	s.v.forget(id)
	return nil
}

// Close implements Store.
func (*MemoryStore) Close() error { return nil }
