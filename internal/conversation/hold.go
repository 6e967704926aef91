package conversation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Held is a chat's transcript held for writing by one owner, the ai-chat kind during a turn:
// other writers of this Service wait for it, other processes are refused. It is written
// through its TurnWriter methods, which apply this package's rules; for a chat whose
// transcript does not exist yet, the file appears with the first message. Close releases it.
type Held struct {
	// Key is the chat's session key and SessionID its current session.
	Key       string
	SessionID string
	// Entry is the chat's sessions.json entry when it was held.
	Entry chatstore.SessionEntry

	w      *transcript.Writer
	pair   pairing
	rep    *replicated // nil: no replica
	lease  Lease       // nil: the node owns its conversations alone
	ctx    context.Context
	st     *chatstore.Store
	unlock func()
}

// HoldOptions choose how Hold finds or starts the chat.
type HoldOptions struct {
	// Cwd is the header's cwd when the transcript is created.
	Cwd string
	// Fields are sessions.json fields set when the key is new (chatstore.Store.Create).
	Fields any
	// Sync is the writer's durability policy (default transcript.SyncEntry: an fsync per entry).
	Sync transcript.SyncPolicy
	// ParentSession is the header's parentSession when the transcript is created (a
	// subagent's: the path of its parent's transcript).
	ParentSession string
	// Lease, when set, is checked before every write: once it is lost the writes are
	// refused (ErrLeaseLost from a cluster's lease).
	Lease Lease
}

// Hold resolves key to its current session (created when the key is new; an explicitly held
// chat is never reset by the idle or daily policy) and holds its transcript.
func (s *Service) Hold(ctx context.Context, key string, opts HoldOptions) (*Held, error) {
	if err := CheckRef(key); err != nil {
		return nil, err
	}
	st, err := s.store()
	if err != nil {
		return nil, err
	}
	e, err := st.Get(key)
	if errors.Is(err, chatstore.ErrNotFound) {
		e, err = st.Create(ctx, key, opts.Fields)
		if errors.Is(err, chatstore.ErrExists) {
			// Another holder created it since the Get (two sessions opened on a new key at
			// once): this one holds that entry, after it.
			e, err = st.Get(key)
		}
	}
	if err != nil {
		return nil, storeError(err)
	}
	k, _, err := st.Lookup(e.SessionID)
	if err != nil {
		k = key
	}
	c := chat{Key: k, SessionID: e.SessionID, Path: transcriptPath(st, e), Entry: &e}
	unlock, err := s.locks.lock(ctx, c.Path)
	if err != nil {
		return nil, err
	}
	var w *transcript.Writer
	wopts := s.writerOptions()
	wopts.Sync = opts.Sync
	replica := s.replicaOf()
	_, serr := os.Lstat(c.Path)
	if errors.Is(serr, fs.ErrNotExist) && replica != nil {
		// Another node wrote this transcript: its file here is rebuilt from the replica.
		if err := Rebuild(ctx, replica, e.SessionID, c.Path); err == nil {
			serr = nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			unlock()
			return nil, writerError(c, err)
		}
	}
	if errors.Is(serr, fs.ErrNotExist) {
		wopts.NewSessionID = func() string { return e.SessionID }
		wopts.ParentSession = opts.ParentSession
		w, err = transcript.Create(c.Path, opts.Cwd, wopts)
	} else {
		w, err = s.openWriterWith(c, wopts)
	}
	if err != nil {
		unlock()
		return nil, writerError(c, err)
	}
	h := &Held{Key: k, SessionID: e.SessionID, w: w, Entry: e, st: st, unlock: unlock, lease: opts.Lease, ctx: context.WithoutCancel(ctx)}
	if replica != nil {
		if err := h.startReplica(ctx, replica); err != nil {
			_ = h.Close()
			return nil, writerError(c, err)
		}
	}
	return h, nil
}

// Patch merges fields into the chat's sessions.json entry (usage, model, state).
func (h *Held) Patch(ctx context.Context, patch any) error {
	if _, err := h.st.Patch(ctx, h.Key, patch); err != nil {
		return storeError(err)
	}
	return nil
}

// PatchFunc merges the fields fn returns from the current entry (counters).
func (h *Held) PatchFunc(ctx context.Context, fn func(cur chatstore.SessionEntry) (any, error)) error {
	if _, err := h.st.PatchFunc(ctx, h.Key, fn); err != nil {
		return storeError(err)
	}
	return nil
}

// Close flushes and releases the transcript.
func (h *Held) Close() error {
	defer h.unlock()
	if err := h.w.Close(); err != nil {
		return fmt.Errorf("close transcript %s: %w", h.w.Path(), err)
	}
	return nil
}
