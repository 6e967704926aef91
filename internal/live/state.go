package live

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nexus-run/nexus/internal/abi"
)

// StateStore holds the registry's session records with a revision each: what a registry shared
// by several nodes is built on (a key-value bucket with compare-and-set, such as JetStream KV,
// implements it as well as the memory and disk stores do). Every write names the revision it
// read, so of two writers that raced (a create and a close, two closes) exactly one wins and the
// other learns ErrConflict. livetest.RunStateStore is its contract.
type StateStore interface {
	// Get returns a session's record; an error wrapping ErrNoRecord when there is none.
	Get(ctx context.Context, id string) (Record, error)
	// List returns every record, the oldest session first.
	List(ctx context.Context) ([]Record, error)
	// Put writes rec if the record's revision is still revision (0: there must be no record
	// yet) and returns its new revision; an error wrapping ErrConflict when it is not.
	Put(ctx context.Context, rec abi.Session, revision uint64) (uint64, error)
	// Delete removes a record if its revision is still revision; ErrConflict when it is not,
	// ErrNoRecord when there is none.
	Delete(ctx context.Context, id string, revision uint64) error
	// Watch waits until the store's version passes after (every write and delete moves it
	// on), or ctx ends, and returns every record with the version they are at. A store's
	// version is never 0, so after 0 answers at once.
	Watch(ctx context.Context, after uint64) (Records, error)
}

// Record is a session object as a StateStore holds it.
type Record struct {
	Session abi.Session
	// Revision is the store's version when the record was last written.
	Revision uint64
}

// Records is a StateStore's records at one version.
type Records struct {
	Records []Record
	Version uint64
}

var (
	// ErrConflict is a StateStore write that lost: the record changed since the revision it
	// named (or exists, for a create).
	ErrConflict = errors.New("the session record changed")
	// ErrNoRecord is a StateStore read or delete of a session it holds no record of.
	ErrNoRecord = errors.New("no such session record")
)

// versions is the compare-and-set and watch bookkeeping the memory and disk stores share: the
// store's version, each record's revision, and whether it is being written (a write in progress
// makes a racing one lose, so a slow write holds no lock). It costs a map entry per session.
type versions struct {
	mu      sync.Mutex
	version uint64
	revs    map[string]revision
	changes chan struct{} // closed at the next change
}

// revision is a record's: rev 0 while its first write is under way.
type revision struct {
	rev  uint64
	busy bool
}

func newVersions() *versions {
	return &versions{version: 1, revs: map[string]revision{}, changes: make(chan struct{})}
}

// begin claims id for a write from revision, or says why it cannot.
func (v *versions) begin(id string, revision uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, ok := v.revs[id]
	switch {
	case cur.busy:
		return fmt.Errorf("session %s: %w (another write is under way)", id, ErrConflict)
	case !ok && revision != 0:
		return fmt.Errorf("session %s: %w", id, ErrNoRecord)
	case ok && cur.rev != revision:
		return fmt.Errorf("session %s: %w (revision %d, not %d)", id, ErrConflict, cur.rev, revision)
	}
	cur.busy = true
	v.revs[id] = cur
	return nil
}

// end finishes the write begun on id: done says it happened (deleted: the record is gone), and
// the record gets the next revision.
func (v *versions) end(id string, done, deleted bool) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur := v.revs[id]
	cur.busy = false
	switch {
	case !done && cur.rev == 0:
		delete(v.revs, id) // a create that failed: there is no record
		return 0
	case !done:
		v.revs[id] = cur
		return cur.rev
	}
	v.bumpLocked()
	if deleted {
		delete(v.revs, id)
		return 0
	}
	v.revs[id] = revision{rev: v.version}
	return v.version
}

func (v *versions) bumpLocked() {
	v.version++
	close(v.changes)
	v.changes = make(chan struct{})
}

// adopt gives a record found in storage (a restart's) a revision, once.
func (v *versions) adopt(id string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if cur, ok := v.revs[id]; ok && cur.rev != 0 {
		return cur.rev
	} else if ok {
		return 0 // its first write is under way: whoever reads it now reads no revision
	}
	v.bumpLocked()
	v.revs[id] = revision{rev: v.version}
	return v.version
}

// forget drops id whatever its revision (a store's Remove).
func (v *versions) forget(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.revs[id]; ok {
		delete(v.revs, id)
		v.bumpLocked()
	}
}

func (v *versions) revision(id string) (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur, ok := v.revs[id]
	return cur.rev, ok && cur.rev != 0
}

// wait returns the version once it passes after, or ctx's error.
func (v *versions) wait(ctx context.Context, after uint64) (uint64, error) {
	for {
		v.mu.Lock()
		cur, ch := v.version, v.changes
		v.mu.Unlock()
		if after == 0 || cur > after {
			return cur, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("watch session records: %w", ctx.Err())
		}
	}
}

// SortRecords orders records as StateStore.List returns them: the oldest session first.
func SortRecords(rs []Record) { sortRecords(rs) }

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Session.CreatedAt, b.Session.CreatedAt), cmp.Compare(a.Session.SessionID, b.Session.SessionID))
	})
}

// copySession returns rec with a metadata map of its own: a store's record never shares one
// with its caller.
func copySession(rec abi.Session) abi.Session {
	if rec.Metadata != nil {
		md := make(map[string]any, len(rec.Metadata))
		for k, v := range rec.Metadata {
			md[k] = v
		}
		rec.Metadata = md
	}
	return rec
}
