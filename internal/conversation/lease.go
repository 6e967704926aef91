package conversation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
)

// Leases give each conversation of a cluster one owning node at a time (a cluster's
// jetstore.Leases). The ai-chat kind takes a conversation's lease before it opens a session on
// it, renews it while it has one there, and releases it when its last session there ends.
type Leases interface {
	// Acquire takes key's lease for this node: free, expired, released, or this node's own.
	// Held by another node: an error with code RESOURCE_UNAVAILABLE naming the holder.
	Acquire(ctx context.Context, key string) (OwnedLease, error)
	// TTL is how long a lease lasts from its last renewal.
	TTL() time.Duration
}

// OwnedLease is this node's lease on one conversation.
type OwnedLease interface {
	Lease
	// Renew moves the lease's end on; once another node took it, ErrLeaseLost for good.
	Renew(ctx context.Context) error
	// SetSession names the conversation's current transcript (its session id) in the lease,
	// for the node that takes the conversation over next; Session reads it.
	SetSession(ctx context.Context, session string) error
	Session() string
	// Release gives the lease up, keeping the transcript it names for the next holder.
	Release(ctx context.Context) error
	// Previous is the holder before this node and its transcript (zero: none).
	Previous() Holder
}

// Holder is a conversation's lease holder: a node, and the conversation's transcript then.
type Holder struct {
	Node    string
	Session string
}

// Adopt makes sessionID — a transcript another node wrote, held by the replica — key's
// current session on this node: key's sessions.json entry is created for it or pointed at it
// (a transcript key had here before stays where it is, no longer current), and its file is
// written again from the replica, so it holds exactly what the cluster acknowledged. A
// replica with no lines of sessionID is fs.ErrNotExist, and nothing changes.
func (s *Service) Adopt(ctx context.Context, key, sessionID string) error {
	if err := CheckRef(key); err != nil {
		return err
	}
	r := s.replicaOf()
	if r == nil {
		return errors.New("adopt a transcript: this node has no replica")
	}
	if n, _, err := r.Tail(ctx, sessionID); err != nil {
		return fmt.Errorf("adopt %s: read its replica: %w", sessionID, err)
	} else if n == 0 {
		return fmt.Errorf("adopt %s: the replica has no lines of it: %w", sessionID, fs.ErrNotExist)
	}
	st, err := s.store()
	if err != nil {
		return err
	}
	e, err := st.Get(key)
	switch {
	case errors.Is(err, chatstore.ErrNotFound):
		e, err = st.Create(ctx, key, map[string]any{"sessionId": sessionID})
	case err == nil && e.SessionID != sessionID:
		e, err = st.Patch(ctx, key, map[string]any{"sessionId": sessionID, "sessionFile": st.TranscriptPath(sessionID)})
	}
	if err != nil {
		return storeError(err)
	}
	path := transcriptPath(st, e)
	unlock, err := s.locks.lock(ctx, path)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("adopt %s: %w", sessionID, err)
	}
	return Rebuild(ctx, r, sessionID, path)
}

// ErrLeaseHeld is an Acquire refused: another node holds the conversation's lease and it has
// not expired.
var ErrLeaseHeld = errors.New("another node holds the conversation's lease")

// HeldError is an Acquire refused, naming the holder: it is ErrLeaseHeld.
type HeldError struct {
	Key   string
	Node  string
	Until time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("conversation %s is owned by node %s (lease until %s)", e.Key, e.Node, e.Until.UTC().Format(time.RFC3339))
}

// Is makes a HeldError ErrLeaseHeld.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// MemoryLeases are Leases in memory, shared by the "nodes" of one process (a test's): the
// reference of the jetstore leases' behaviour. Each node is a MemoryLeases of its own name on
// one LeaseTable.
type MemoryLeases struct {
	t    *LeaseTable
	node string
}

// LeaseTable is what MemoryLeases share: every conversation's holder.
type LeaseTable struct {
	mu  sync.Mutex
	ttl time.Duration
	now func() time.Time
	m   map[string]*memLeaseRec
}

type memLeaseRec struct {
	node, session string
	until         time.Time
	gen           uint64
}

// NewLeaseTable returns an empty table whose leases last ttl by the clock now (nil:
// time.Now).
func NewLeaseTable(ttl time.Duration, now func() time.Time) *LeaseTable {
	if now == nil {
		now = time.Now
	}
	return &LeaseTable{ttl: ttl, now: now, m: map[string]*memLeaseRec{}}
}

// Node is the table as node sees it.
func (t *LeaseTable) Node(node string) *MemoryLeases { return &MemoryLeases{t: t, node: node} }

var _ Leases = (*MemoryLeases)(nil)

// TTL implements Leases.
func (m *MemoryLeases) TTL() time.Duration { return m.t.ttl }

// Acquire implements Leases.
func (m *MemoryLeases) Acquire(_ context.Context, key string) (OwnedLease, error) {
	t := m.t
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	rec := t.m[key]
	var prev Holder
	if rec != nil {
		if rec.node != m.node && now.Before(rec.until) {
			he := &HeldError{Key: key, Node: rec.node, Until: rec.until}
			return nil, &abi.Error{Code: abi.CodeResourceUnavailable, Message: he.Error(), Err: he}
		}
		prev = Holder{Node: rec.node, Session: rec.session}
	} else {
		rec = &memLeaseRec{}
		t.m[key] = rec
	}
	rec.node, rec.until = m.node, now.Add(t.ttl)
	rec.gen++
	return &memLease{t: t, key: key, gen: rec.gen, until: rec.until, session: rec.session, prev: prev}, nil
}

// memLease is a MemoryLeases lease: valid while the table's record is still its generation
// and its end has not passed.
type memLease struct {
	t       *LeaseTable
	key     string
	gen     uint64
	until   time.Time
	session string
	lost    error
	prev    Holder
}

func (l *memLease) Valid() error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	if l.lost != nil {
		return l.lost
	}
	if !l.t.now().Before(l.until) {
		return fmt.Errorf("conversation %s: the lease expired: %w", l.key, ErrLeaseLost)
	}
	return nil
}

func (l *memLease) renewLocked(session string) error {
	if l.lost != nil {
		return l.lost
	}
	rec := l.t.m[l.key]
	if rec == nil || rec.gen != l.gen {
		l.lost = fmt.Errorf("conversation %s: the lease was taken by another node: %w", l.key, ErrLeaseLost)
		return l.lost
	}
	rec.until, rec.session = l.t.now().Add(l.t.ttl), session
	rec.gen++
	l.gen, l.until, l.session = rec.gen, rec.until, session
	return nil
}

func (l *memLease) Renew(context.Context) error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	return l.renewLocked(l.session)
}

func (l *memLease) SetSession(_ context.Context, session string) error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	return l.renewLocked(session)
}

func (l *memLease) Session() string {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	return l.session
}

func (l *memLease) Release(context.Context) error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	if l.lost != nil {
		return nil
	}
	l.lost = fmt.Errorf("conversation %s: the lease was released: %w", l.key, ErrLeaseLost)
	if rec := l.t.m[l.key]; rec != nil && rec.gen == l.gen {
		rec.until = time.Time{}
		rec.gen++
	}
	return nil
}

func (l *memLease) Previous() Holder { return l.prev }
