package conversation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Replica keeps a copy of transcripts away from this node (a cluster's stream), a log of
// lines per key: the exact JSONL lines of the pi file, header first. Held appends each entry
// it writes and goes on only once the replica acknowledged it, so every entry a turn went on
// from survives the node; Rebuild writes the file again from it on another node. A Held's
// key is its transcript's session id (one log per transcript file).
type Replica interface {
	// Append stores line as key's next line after the line at position after (0: key has
	// no lines) and returns its position once the replica holds it. A line there already
	// (another writer) is ErrReplicaConflict, and nothing is stored.
	Append(ctx context.Context, key string, after uint64, line []byte) (uint64, error)
	// Tail returns how many lines key has and the position of the last (0, 0: none).
	Tail(ctx context.Context, key string) (n int, last uint64, err error)
	// Lines yields key's lines in order, each as appended.
	Lines(ctx context.Context, key string) iter.Seq2[[]byte, error]
}

// Purger is a Replica whose lines of a key can be dropped: a transcript archived, reset away
// or rewritten in place (line compaction) no longer holds the lines its replica has.
type Purger interface {
	Purge(ctx context.Context, key string) error
}

// LineLimiter is a Replica that bounds a line's size: the writers of a service with such a
// replica refuse a longer entry before writing it (LIMIT_EXCEEDED), so the file never holds a
// line its replica cannot.
type LineLimiter interface {
	MaxLine() int
}

// ErrReplicaConflict is a replica append that lost its compare-and-set: the key's log has a
// line after the one the writer named.
var ErrReplicaConflict = errors.New("the replica holds a line written by another writer")

// ErrLeaseLost is an append refused because this node no longer owns the conversation.
var ErrLeaseLost = errors.New("this node no longer holds the conversation's lease")

// Lease is this node's ownership of a conversation: Valid is nil while it is held and an
// error once it is lost (not renewed in time, or taken by another node).
type Lease interface {
	Valid() error
}

// MemoryReplica is a Replica in memory: a single node's, and the reference of the contract.
type MemoryReplica struct {
	mu   sync.Mutex
	logs map[string][][]byte
}

var _ Replica = (*MemoryReplica)(nil)

// NewMemoryReplica returns an empty MemoryReplica.
func NewMemoryReplica() *MemoryReplica { return &MemoryReplica{logs: map[string][][]byte{}} }

// Append implements Replica; a line's position is its 1-based index.
func (m *MemoryReplica) Append(ctx context.Context, key string, after uint64, line []byte) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err //nolint:wrapcheck // the caller's own context
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if uint64(len(m.logs[key])) != after {
		return 0, fmt.Errorf("append to %s after line %d: %w", key, after, ErrReplicaConflict)
	}
	m.logs[key] = append(m.logs[key], slices.Clone(line))
	return after + 1, nil
}

// Purge implements Purger.
func (m *MemoryReplica) Purge(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.logs, key)
	return nil
}

// Tail implements Replica.
func (m *MemoryReplica) Tail(ctx context.Context, key string) (int, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.logs[key])
	return n, uint64(n), nil
}

// Lines implements Replica.
func (m *MemoryReplica) Lines(ctx context.Context, key string) iter.Seq2[[]byte, error] {
	m.mu.Lock()
	lines := slices.Clone(m.logs[key])
	m.mu.Unlock()
	return func(yield func([]byte, error) bool) {
		for _, l := range lines {
			if !yield(slices.Clone(l), nil) {
				return
			}
		}
	}
}

// Rebuild writes the transcript at path from key's replicated lines: a new private file
// (0600) beside path, synced, renamed over it, so a reader sees the old file or the whole
// new one. A key with no lines is fs.ErrNotExist and path is left alone.
func Rebuild(ctx context.Context, r Replica, key, path string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".rebuild-*")
	if err != nil {
		return fmt.Errorf("rebuild %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(fsutil.FileMode); err != nil {
		return fmt.Errorf("rebuild %s: %w", path, err)
	}
	n := 0
	for line, err := range r.Lines(ctx, key) {
		if err != nil {
			return fmt.Errorf("rebuild %s: read the replica of %s: %w", path, key, err)
		}
		if _, err := tmp.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("rebuild %s: %w", path, err)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("rebuild %s: the replica has no lines of %s: %w", path, key, fs.ErrNotExist)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("rebuild %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("rebuild %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rebuild %s: %w", path, err)
	}
	done = true
	if err := fsutil.SyncDir(dir); err != nil {
		return fmt.Errorf("rebuild %s: %w", path, err)
	}
	return nil
}

// replicated is a Held's side of its replica: where its transcript's log ends.
type replicated struct {
	mu  sync.Mutex // held across an entry's write and its append, so the order is the file's
	r   Replica
	key string
	pos uint64
	// header is the header line still to append before the first entry (nil once sent).
	header []byte
	// err stops the writer: a line the file has and the replica may not.
	err error
}

// startReplica makes the replica hold what the file holds: a log with no lines gets the
// header and every entry; one with fewer lines than the file gets the file's later ones (the
// entries written outside a Held: a label, a name); one with as many is taken as its copy.
// One with more means the file is not the conversation's latest (another node wrote on):
// refused.
func (h *Held) startReplica(ctx context.Context, r Replica) error {
	h.rep = &replicated{r: r, key: h.SessionID}
	n, last, err := r.Tail(ctx, h.rep.key)
	if err != nil {
		return fmt.Errorf("transcript %s: read its replica: %w", h.w.Path(), err)
	}
	f := h.w.File()
	want := len(f.Entries) + 1
	if n > want {
		return fmt.Errorf("transcript %s: its replica holds %d lines, the file %d: rebuild the file from the replica first: %w",
			h.w.Path(), n, want, ErrReplicaConflict)
	}
	h.rep.pos = last
	if n == 0 && len(f.Entries) == 0 {
		// A new transcript: its header goes with its first entry, as the file's does, so a
		// Hold that writes nothing leaves nothing to rebuild.
		h.rep.header = h.w.Header().Raw
		return nil
	}
	if n == 0 {
		if err := h.rep.append(ctx, h.w.Header().Raw); err != nil {
			return err
		}
		n = 1
	}
	for _, e := range f.Entries[n-1:] {
		full, err := f.Full(e)
		if err != nil {
			return fmt.Errorf("transcript %s: %w", h.w.Path(), err)
		}
		if err := h.rep.append(ctx, full.Raw); err != nil {
			return err
		}
	}
	return nil
}

func (r *replicated) append(ctx context.Context, line []byte) error {
	pos, err := r.r.Append(ctx, r.key, r.pos, line)
	if err != nil {
		return fmt.Errorf("replicate transcript %s: %w", r.key, err)
	}
	r.pos = pos
	return nil
}

// write runs one write of the transcript (fn returns the id of the entry written, "" for
// none) and appends the entry's line to the replica, once the lease is checked: an entry
// is acknowledged to the caller only once the replica holds it. A replica that failed stops
// the writer (the file may hold a line the replica does not).
func (h *Held) write(fn func() (string, error)) (string, error) {
	if h.lease != nil {
		if err := h.lease.Valid(); err != nil {
			return "", fmt.Errorf("write %s: %w", h.Key, err)
		}
	}
	if h.rep == nil {
		return fn()
	}
	h.rep.mu.Lock()
	defer h.rep.mu.Unlock()
	if h.rep.err != nil {
		return "", h.rep.err
	}
	id, err := fn()
	if id == "" {
		if errors.Is(err, transcript.ErrLineTooLong) {
			return "", &abi.Error{Code: abi.CodeLimitExceeded, SessionID: h.SessionID, Message: "a transcript entry longer than the cluster's largest message", Err: err}
		}
		return id, err
	}
	e := h.w.File().Entry(id)
	if e == nil || e.Raw == nil {
		h.rep.err = fmt.Errorf("replicate transcript %s: entry %s not resident", h.w.Path(), id)
		return id, h.rep.err
	}
	if h.rep.header != nil {
		if rerr := h.rep.append(h.ctx, h.rep.header); rerr != nil {
			h.rep.err = fmt.Errorf("%w (the transcript stops here on this node)", rerr)
			return id, h.rep.err
		}
		h.rep.header = nil
	}
	if rerr := h.rep.append(h.ctx, e.Raw); rerr != nil {
		h.rep.err = fmt.Errorf("%w (the transcript stops here on this node)", rerr)
		return id, h.rep.err
	}
	return id, err
}

// purgeReplica drops sessionID's lines from the service's replica, if it can: its transcript
// was archived or rewritten. A failure is returned for the caller to report; the file is
// already what it is.
func (s *Service) purgeReplica(ctx context.Context, sessionID string) error {
	p, ok := s.replicaOf().(Purger)
	if !ok || sessionID == "" {
		return nil
	}
	if err := p.Purge(ctx, sessionID); err != nil {
		return fmt.Errorf("transcript %s: drop its replicated lines: %w", sessionID, err)
	}
	return nil
}

// reseedReplica makes the replica hold exactly the transcript at path (rewritten in place):
// its lines dropped, then the file's appended, header first. A failure leaves the replica
// empty or short, which the next Hold makes whole from the file.
func (s *Service) reseedReplica(ctx context.Context, sessionID, path string) error {
	r := s.replicaOf()
	if r == nil {
		return nil
	}
	if err := s.purgeReplica(ctx, sessionID); err != nil {
		return err
	}
	f, err := os.Open(path) //nolint:gosec // the service's own transcript
	if err != nil {
		return fmt.Errorf("transcript %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	br := bufio.NewReader(f)
	var pos uint64
	for {
		line, rerr := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = line[:len(line)-1]
		}
		if len(line) > 0 {
			var err error
			if pos, err = r.Append(ctx, sessionID, pos, line); err != nil {
				return fmt.Errorf("transcript %s: replicate it again: %w", path, err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("transcript %s: %w", path, rerr)
		}
	}
}
