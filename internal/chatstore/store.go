// Package chatstore keeps nexus's durable conversation index: state/sessions/sessions.json
// (session key -> SessionEntry, OpenClaw's field names, docs/conversations.md, sessions.json), session keys and their
// routing (§3), resets that mint a new sessionId and archive the old transcript, run records
// written into transcripts as custom entries, and the subagent run registry
// state/subagents/runs.json.
//
// Every write is a JSON merge patch (RFC 7386) applied to the file as it is on disk at that
// moment, under a flock shared by all processes, and lands by temp file, fsync, rename and
// directory fsync before it is acknowledged. Concurrent writers in one process are batched
// into one file replacement (group commit). Entries are kept as raw JSON members, so fields
// nexus does not know survive with their bytes unchanged.
//
// Damaged files are never overwritten: reading or patching a sessions.json that does not parse
// fails with ErrCorrupt naming the file. Store.Recover archives it and restores the previous
// version, which every write keeps as sessions.json.bak (a hard link, no copy).
package chatstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/transcript"
)

// FileName is the index file in the sessions directory.
const FileName = "sessions.json"

// Errors of the chatstore.
var (
	ErrNotFound      = errors.New("no such session")
	ErrExists        = errors.New("session already exists")
	ErrLabelConflict = errors.New("label already used by another session")
	ErrTooLarge      = errors.New("value too large for the index")
)

// Options configure a Store. Zero values take the defaults.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// NewID mints session ids (default: uuid v7).
	NewID func() string
	// Reset is the automatic reset policy (default DefaultResetPolicy()).
	Reset *ResetPolicy
}

// Store is the sessions.json of one sessions directory. It is safe for concurrent use, and
// several processes may open the same directory.
type Store struct {
	dir   string
	t     *table
	now   func() time.Time
	newID func() string
	reset ResetPolicy
}

// NewUUIDv7 returns a fresh uuid v7 string (time-ordered).
func NewUUIDv7() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Open returns the store of dir (state/sessions), creating dir (0700) if needed. The file is
// read lazily, so a damaged one is reported by the first read or write, not here.
func Open(dir string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sessions directory %s: %w", dir, err)
	}
	if err := fsutil.MkdirPrivate(abs); err != nil {
		return nil, err
	}
	s := &Store{dir: abs, now: opts.Now, newID: opts.NewID, reset: DefaultResetPolicy()}
	if s.now == nil {
		s.now = time.Now
	}
	if s.newID == nil {
		s.newID = NewUUIDv7
	}
	if opts.Reset != nil {
		s.reset = *opts.Reset
	}
	s.t = newTable(filepath.Join(abs, FileName), "", []string{"sessionId", "updatedAt"})
	s.t.backup = true
	return s, nil
}

// Dir is the sessions directory (absolute).
func (s *Store) Dir() string { return s.dir }

// Path is the sessions.json path.
func (s *Store) Path() string { return s.t.path }

// TranscriptPath is where the transcript of sessionID lives: <dir>/<sessionId>.jsonl.
func (s *Store) TranscriptPath(sessionID string) string {
	return filepath.Join(s.dir, safeName(sessionID)+".jsonl")
}

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// canon finds the stored key for key: its canonical form, or the string as written when an
// entry has exactly that key (entries written by upstream under keys nexus would normalize
// differently stay reachable).
func canon(key string, recs map[string]record) (string, error) {
	k, err := ParseKey(key)
	if err == nil {
		if _, ok := recs[k.String()]; ok {
			return k.String(), nil
		}
	}
	if _, ok := recs[key]; ok {
		return key, nil
	}
	if err != nil {
		return "", err
	}
	return k.String(), nil
}

// Get returns the entry of key.
func (s *Store) Get(key string) (SessionEntry, error) {
	snap, err := s.t.load()
	if err != nil {
		return SessionEntry{}, err
	}
	c, err := canon(key, snap.recs)
	if err != nil {
		return SessionEntry{}, err
	}
	r, ok := snap.recs[c]
	if !ok {
		return SessionEntry{}, fmt.Errorf("%w: %s", ErrNotFound, c)
	}
	return decodeEntry(r), nil
}

// Item is one listed session.
type Item struct {
	Key   string       `json:"key"`
	Entry SessionEntry `json:"entry"`
}

// Filter selects sessions for List. Zero fields match everything.
type Filter struct {
	Agent   string    // agent id of the key
	Kinds   []KeyKind // key kinds
	Channel string    // channel of the key, or else lastChannel / origin.provider
	// Since keeps entries updated at or after this time.
	Since time.Time
	// Search keeps entries whose key, label, displayName or sessionId contains it
	// (case-insensitive).
	Search string
	// Limit caps the result (0: no cap).
	Limit int
}

// List returns the sessions matching f, most recently updated first (ties by key).
func (s *Store) List(f Filter) ([]Item, error) {
	snap, err := s.t.load()
	if err != nil {
		return nil, err
	}
	var since int64
	if !f.Since.IsZero() {
		since = f.Since.UnixMilli()
	}
	search := strings.ToLower(f.Search)
	out := make([]Item, 0, len(snap.recs))
	for key, r := range snap.recs {
		if f.Agent != "" || len(f.Kinds) > 0 || f.Channel != "" {
			k, err := ParseKey(key)
			if err != nil {
				continue
			}
			if f.Agent != "" && k.Agent != NormalizeAgentID(f.Agent) {
				continue
			}
			if len(f.Kinds) > 0 && !slices.Contains(f.Kinds, k.Kind) {
				continue
			}
			if f.Channel != "" && !matchChannel(k, decodeEntry(r), strings.ToLower(f.Channel)) {
				continue
			}
		}
		e := decodeEntry(r)
		if since != 0 && e.UpdatedAt < since {
			continue
		}
		if search != "" && !strings.Contains(strings.ToLower(key), search) &&
			!strings.Contains(strings.ToLower(e.Label), search) &&
			!strings.Contains(strings.ToLower(e.DisplayName), search) &&
			!strings.Contains(strings.ToLower(e.SessionID), search) {
			continue
		}
		out = append(out, Item{Key: key, Entry: e})
	}
	slices.SortFunc(out, func(a, b Item) int {
		if a.Entry.UpdatedAt != b.Entry.UpdatedAt {
			if a.Entry.UpdatedAt > b.Entry.UpdatedAt {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

func matchChannel(k Key, e SessionEntry, ch string) bool {
	if k.Channel == ch || strings.EqualFold(e.LastChannel, ch) {
		return true
	}
	return e.Origin != nil && strings.EqualFold(e.Origin.Provider, ch)
}

// Lookup finds a session by key, sessionId or label, in that order. When several keys share a
// sessionId the most recently updated wins.
func (s *Store) Lookup(ref string) (string, SessionEntry, error) {
	snap, err := s.t.load()
	if err != nil {
		return "", SessionEntry{}, err
	}
	if c, err := canon(ref, snap.recs); err == nil {
		if r, ok := snap.recs[c]; ok {
			return c, decodeEntry(r), nil
		}
	}
	var best string
	var bestE SessionEntry
	for _, member := range []string{"sessionId", "label"} {
		for key, r := range snap.recs {
			var v string
			if !decString(r[member], &v) || v != ref {
				continue
			}
			e := decodeEntry(r)
			if best == "" || e.UpdatedAt > bestE.UpdatedAt || (e.UpdatedAt == bestE.UpdatedAt && key < best) {
				best, bestE = key, e
			}
		}
		if best != "" {
			return best, bestE, nil
		}
	}
	return "", SessionEntry{}, fmt.Errorf("%w: no key, sessionId or label %q", ErrNotFound, ref)
}

// Patch applies an RFC 7386 merge patch to the entry of key: members set to null are deleted,
// objects (origin, deliveryContext, ...) merge, everything else is replaced. patch is a
// json.RawMessage, []byte or any value that marshals to a JSON object (map[string]any, a
// struct). updatedAt is set to now. The entry must exist (see Create and Resolve).
func (s *Store) Patch(ctx context.Context, key string, patch any) (SessionEntry, error) {
	pobj, err := patchObject(patch)
	if err != nil {
		return SessionEntry{}, err
	}
	return s.patch(ctx, key, func(record) (map[string]json.RawMessage, error) { return pobj, nil })
}

// PatchFunc is Patch with a patch computed from the entry as it is under the store's lock, so
// read-modify-write updates (counters such as compactionCount) lose nothing to a concurrent
// writer, in this process or another. fn may run more than once and must not block.
func (s *Store) PatchFunc(ctx context.Context, key string, fn func(cur SessionEntry) (any, error)) (SessionEntry, error) {
	return s.patch(ctx, key, func(cur record) (map[string]json.RawMessage, error) {
		patch, err := fn(decodeEntry(cur))
		if err != nil {
			return nil, err
		}
		return patchObject(patch)
	})
}

func (s *Store) patch(ctx context.Context, key string, mk func(cur record) (map[string]json.RawMessage, error)) (SessionEntry, error) {
	var out SessionEntry
	err := s.t.update(ctx, func(x *tx) error {
		c, cur, err := x.existing(key)
		if err != nil {
			return err
		}
		pobj, err := mk(cur)
		if err != nil {
			return err
		}
		r, err := s.applyPatch(x, c, cur, pobj, s.nowMs())
		if err != nil {
			return err
		}
		out = decodeEntry(r)
		return nil
	})
	if err != nil {
		return SessionEntry{}, fmt.Errorf("patch session %s: %w", key, err)
	}
	return out, nil
}

// Create adds the entry of key (which must parse as a session key and not exist yet) with a
// fresh sessionId, its transcript path, sessionStartedAt and the key's chatType, then applies
// fields (a merge patch; nil for none), which may also set any of those.
func (s *Store) Create(ctx context.Context, key string, fields any) (SessionEntry, error) {
	pobj := map[string]json.RawMessage{}
	if fields != nil {
		var err error
		if pobj, err = patchObject(fields); err != nil {
			return SessionEntry{}, err
		}
	}
	k, err := ParseKey(key)
	if err != nil {
		return SessionEntry{}, err
	}
	c := k.String()
	var out SessionEntry
	err = s.t.update(ctx, func(x *tx) error {
		if _, ok := x.get(c); ok {
			return fmt.Errorf("%w: %s", ErrExists, c)
		}
		if _, ok := x.get(key); ok {
			return fmt.Errorf("%w: %s", ErrExists, key)
		}
		base := s.fresh(k, s.nowMs())
		var id string
		if decString(pobj["sessionId"], &id) && id != "" {
			// a caller-chosen id (an imported transcript) gets its own transcript path
			base["sessionFile"] = mustMarshal(s.TranscriptPath(id))
		}
		r, err := s.applyPatch(x, c, base, pobj, s.nowMs())
		if err != nil {
			return err
		}
		out = decodeEntry(r)
		return nil
	})
	if err != nil {
		return SessionEntry{}, fmt.Errorf("create session %s: %w", c, err)
	}
	return out, nil
}

// fresh is a new entry for k: new sessionId and transcript path.
func (s *Store) fresh(k Key, now int64) record {
	id := s.newID()
	r := record{
		"sessionId":        mustMarshal(id),
		"sessionFile":      mustMarshal(s.TranscriptPath(id)),
		"sessionStartedAt": mustMarshal(now),
		"updatedAt":        mustMarshal(now),
	}
	if ct := k.ChatType(); ct != "" {
		r["chatType"] = mustMarshal(ct)
	}
	return r
}

func mustMarshal(v any) json.RawMessage {
	b, err := transcript.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("store: marshal %T: %v", v, err)) // strings and integers always encode
	}
	return b
}

// applyPatch merges pobj into cur and puts the result under key.
func (s *Store) applyPatch(x *tx, key string, cur record, pobj map[string]json.RawMessage, now int64) (record, error) {
	r := cur.clone()
	for k, pv := range pobj {
		if k == "updatedAt" {
			continue
		}
		if k == "sessionId" && isNull(pv) {
			return nil, fmt.Errorf("%w: sessionId cannot be deleted", ErrInvalid)
		}
		old, had := r[k]
		target := old
		oldRef, wasBlob := parseBlobRef(old)
		if wasBlob && isObject(pv) {
			data, err := s.ReadBlob(oldRef)
			if err != nil {
				return nil, err
			}
			target = data
		}
		v, keep, err := mergePatch(target, pv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if wasBlob {
			x.onCommit(func() { s.removeBlobUnlessUsed(oldRef, x.recs) })
		}
		if !keep {
			if had {
				delete(r, k)
			}
			continue
		}
		if err := validateMember(k, v); err != nil {
			return nil, err
		}
		if len(v) > MaxInlineValue {
			if slices.Contains(pinned, k) {
				return nil, fmt.Errorf("%w: %s is %d bytes (limit %d)", ErrTooLarge, k, len(v), MaxInlineValue)
			}
			var sid string
			_ = decString(r["sessionId"], &sid)
			ref, err := s.writeBlob(sid, k, v)
			if err != nil {
				return nil, err
			}
			x.onUndo(func() {
				if !usesBlob(x.base.recs, ref) && !usesBlob(x.recs, ref) {
					s.removeBlob(ref)
				}
			})
			v = mustMarshal(ref)
		}
		r[k] = v
	}
	r["updatedAt"] = mustMarshal(now)
	if size := recordSize(r); size > MaxEntryBytes {
		return nil, fmt.Errorf("%w: entry %s is %d bytes (limit %d)", ErrTooLarge, key, size, MaxEntryBytes)
	}
	if _, ok := pobj["label"]; ok {
		if err := checkLabel(x.recs, key, r); err != nil {
			return nil, err
		}
	}
	x.put(key, r)
	return r, nil
}

func usesBlob(recs map[string]record, ref BlobRef) bool {
	for _, r := range recs {
		for _, v := range r {
			if other, ok := parseBlobRef(v); ok && other.Path == ref.Path {
				return true
			}
		}
	}
	return false
}

func recordSize(r record) int {
	n := 2
	for k, v := range r {
		n += len(k) + len(v) + 4
	}
	return n
}

func checkLabel(recs map[string]record, key string, r record) error {
	var label string
	if !decString(r["label"], &label) || label == "" {
		return nil
	}
	for other, o := range recs {
		var l string
		if other != key && decString(o["label"], &l) && l == label {
			return fmt.Errorf("%w: %q is the label of %s", ErrLabelConflict, label, other)
		}
	}
	return nil
}

// Delete removes the entry of key and archives its transcript as <file>.deleted.<ts> (never
// unlinked). It returns the archive path ("" when the transcript had not been created).
func (s *Store) Delete(ctx context.Context, key string) (string, error) {
	var archived string
	err := s.t.update(ctx, func(x *tx) error {
		c, cur, err := x.existing(key)
		if err != nil {
			return err
		}
		a, err := s.archiveTranscript(x, cur, "deleted")
		if err != nil {
			return err
		}
		archived = a
		x.del(c)
		for _, v := range cur {
			if ref, ok := parseBlobRef(v); ok {
				x.onCommit(func() { s.removeBlobUnlessUsed(ref, x.recs) })
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("delete session %s: %w", key, err)
	}
	return archived, nil
}

// archiveTranscript renames the entry's transcript to <file>.<kind>.<ts>, undone if the
// operation or the write fails.
func (s *Store) archiveTranscript(x *tx, cur record, kind string) (string, error) {
	var file string
	if !decString(cur["sessionFile"], &file) || file == "" {
		var sid string
		if !decString(cur["sessionId"], &sid) || sid == "" {
			return "", nil
		}
		file = s.TranscriptPath(sid)
	}
	if !filepath.IsAbs(file) {
		file = filepath.Join(s.dir, file)
	}
	archived, err := archive(file, kind, s.now())
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	x.onUndo(func() { _ = renameNoReplace(archived, file) })
	return archived, nil
}

// RecoverReport says what Recover did.
type RecoverReport struct {
	// Damaged is false when the file parsed and nothing was done.
	Damaged bool `json:"damaged"`
	// Archived is where the damaged file was moved.
	Archived string `json:"archived,omitempty"`
	// From is "bak" (restored from sessions.json.bak) or "empty" (no usable backup).
	From string `json:"from,omitempty"`
	// Entries is the number of entries after recovery.
	Entries int `json:"entries"`
}

// Recover repairs a sessions.json that does not parse: the damaged file is archived as
// sessions.json.corrupt.<ts> (kept for inspection), and the previous version (.bak) is
// restored when it parses; otherwise the index starts empty (transcripts are untouched and
// can be imported again). It does nothing to a file that parses.
func (s *Store) Recover(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	err := s.t.locked(ctx, func() error {
		data, err := fsutil.ReadFileNoFollow(s.t.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", s.t.path, err)
		}
		if snap, err := s.t.parse(data); err == nil {
			rep.Entries = len(snap.recs)
			return nil
		}
		rep.Damaged = true
		restore := []byte("{}\n")
		rep.From = "empty"
		if bak, err := fsutil.ReadFileNoFollow(s.t.path + ".bak"); err == nil {
			if snap, err := s.t.parse(bak); err == nil {
				restore, rep.From, rep.Entries = bak, "bak", len(snap.recs)
			}
		}
		if rep.Archived, err = archive(s.t.path, "corrupt", s.now()); err != nil {
			return err
		}
		s.t.cache.Store(nil)
		return fsutil.WriteFileAtomic(s.t.path, restore)
	})
	if err != nil {
		return rep, fmt.Errorf("recover %s: %w", s.t.path, err)
	}
	return rep, nil
}
