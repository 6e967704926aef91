package chatstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// record is one object of a table (a SessionEntry or a SubagentRunRecord) kept as raw JSON
// members, so fields nexus does not know survive a round trip with their bytes unchanged.
// Records are never modified in place once they are in a snapshot: writers build a new map.
type record map[string]json.RawMessage

func (r record) clone() record {
	c := make(record, len(r)+2)
	for k, v := range r {
		c[k] = v
	}
	return c
}

// fileID identifies one version of a file. Every write replaces the file by rename, so a
// different inode (or size or times) means another writer has been there.
type fileID struct {
	dev, ino   uint64
	size       int64
	mtim, ctim syscall.Timespec
}

// snapshot is an immutable parsed version of a table file.
type snapshot struct {
	id     fileID
	exists bool
	// top holds the members of a wrapped file other than the records member (runs.json's
	// "version" and anything unknown); nil for an unwrapped file.
	top  map[string]json.RawMessage
	recs map[string]record
}

// table is a JSON file holding one object of records (key -> object), optionally wrapped in an
// outer object under a member name. Writers are serialized across processes by a flock on
// <file>.lock and within the process by a single committer goroutine that applies every
// queued operation and replaces the file once (group commit): read under the lock, apply,
// temp file, fsync, rename, fsync directory, then acknowledge.
type table struct {
	path   string
	wrap   string   // "" or the member holding the records ("runs")
	first  []string // record members written first, in this order
	wrapV  json.RawMessage
	backup bool // keep <file>.bak as a hard link to the previous version

	lockPath string // path + ".lock": writers of every process take it (fsutil.LockWait)

	cache atomic.Pointer[snapshot]

	mu      sync.Mutex
	queue   []*op
	running bool
	swept   bool // stale temp files removed (committer goroutine only)
}

// op is one queued write. apply runs in the committer goroutine with the file locked.
type op struct {
	ctx   context.Context
	apply func(*tx) error
	// exclusive, when set, runs alone with the lock held instead of apply, on the file as it
	// is (Recover: the file may not parse).
	exclusive func() error
	state     atomic.Int32 // opQueued, opTaken, opCancelled
	done      chan error
}

const (
	opQueued int32 = iota
	opTaken
	opCancelled
)

func newTable(path, wrap string, first []string) *table {
	return &table{
		path:  path,
		wrap:  wrap,
		first: first,
		// O_NOFOLLOW: a symlink planted at the lock path is refused, not followed.
		lockPath: path + ".lock",
	}
}

// ErrCorrupt is returned when a state file is not valid JSON of the expected shape. nexus never
// overwrites such a file: fix it by hand, or call Recover, which archives it and restores the
// last good version from the .bak kept next to it.
var ErrCorrupt = errors.New("corrupt state file")

// load returns the current version of the file, parsing it only when it changed since the
// cached snapshot.
func (t *table) load() (*snapshot, error) {
	f, err := os.OpenFile(t.path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return &snapshot{recs: map[string]record{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", t.path, err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", t.path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", t.path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	var id fileID
	if ok {
		id = fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtim: st.Mtim, ctim: st.Ctim}
		if c := t.cache.Load(); c != nil && c.exists && c.id == id {
			return c, nil
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", t.path, err)
	}
	s, err := t.parse(data)
	if err != nil {
		return nil, err
	}
	s.exists = true
	s.id = id
	if ok {
		t.cache.Store(s)
	}
	return s, nil
}

func (t *table) parse(data []byte) (*snapshot, error) {
	s := &snapshot{}
	if t.wrap == "" {
		var recs map[string]json.RawMessage
		if err := json.Unmarshal(data, &recs); err != nil || recs == nil {
			return nil, t.corrupt(err, "want a JSON object")
		}
		r, err := t.records(recs)
		if err != nil {
			return nil, err
		}
		s.recs = r
		return s, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return nil, t.corrupt(err, "want a JSON object")
	}
	var recs map[string]json.RawMessage
	if raw, ok := top[t.wrap]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &recs); err != nil || recs == nil {
			return nil, t.corrupt(err, fmt.Sprintf("member %q is not an object", t.wrap))
		}
	}
	delete(top, t.wrap)
	r, err := t.records(recs)
	if err != nil {
		return nil, err
	}
	s.top, s.recs = top, r
	return s, nil
}

func (t *table) records(raw map[string]json.RawMessage) (map[string]record, error) {
	out := make(map[string]record, len(raw))
	for k, v := range raw {
		var r record
		if err := json.Unmarshal(v, &r); err != nil || r == nil {
			return nil, t.corrupt(err, fmt.Sprintf("record %q is not an object", k))
		}
		out[k] = r
	}
	return out, nil
}

func (t *table) corrupt(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%w %s: %s (%w); it is left untouched", ErrCorrupt, t.path, what, err)
	}
	return fmt.Errorf("%w %s: %s; it is left untouched", ErrCorrupt, t.path, what)
}

// tx is the state one batch of operations works on. Operations replace records (put, del),
// never modify one in place, so a failed operation is undone by restoring the old values.
type tx struct {
	t    *table
	base *snapshot
	top  map[string]json.RawMessage
	recs map[string]record

	// per operation
	undo     map[string]*record // key -> previous record (nil pointer value: absent)
	sideUndo []func()           // undo of side effects (archives, blob files), newest last
	after    []func()           // run once the batch is durable

	// per batch
	batchUndo  []func()
	batchAfter []func()
	changed    bool
}

// existing returns the canonical form of key and its entry, ErrNotFound when there is none.
func (x *tx) existing(key string) (string, record, error) {
	c, err := canon(key, x.recs)
	if err != nil {
		return "", nil, err
	}
	cur, ok := x.get(c)
	if !ok {
		return "", nil, fmt.Errorf("%w: %s", ErrNotFound, c)
	}
	return c, cur, nil
}

func (x *tx) get(key string) (record, bool) {
	r, ok := x.recs[key]
	return r, ok
}

func (x *tx) remember(key string) {
	if _, seen := x.undo[key]; seen {
		return
	}
	if r, ok := x.recs[key]; ok {
		x.undo[key] = &r
	} else {
		x.undo[key] = nil
	}
}

func (x *tx) put(key string, r record) {
	x.remember(key)
	x.recs[key] = r
}

func (x *tx) del(key string) {
	x.remember(key)
	delete(x.recs, key)
}

// onUndo registers the undo of a side effect done by the current operation; it runs if the
// operation fails or the batch cannot be written.
func (x *tx) onUndo(f func()) { x.sideUndo = append(x.sideUndo, f) }

// onCommit registers work to do once the batch is durable (removing unreferenced blobs).
func (x *tx) onCommit(f func()) { x.after = append(x.after, f) }

func (x *tx) beginOp() {
	x.undo = map[string]*record{}
	x.sideUndo = nil
	x.after = nil
}

func (x *tx) endOp(err error) {
	if err != nil {
		for k, prev := range x.undo {
			if prev == nil {
				delete(x.recs, k)
			} else {
				x.recs[k] = *prev
			}
		}
		for i := len(x.sideUndo) - 1; i >= 0; i-- {
			x.sideUndo[i]()
		}
		return
	}
	if len(x.undo) > 0 {
		x.changed = true
	}
	x.batchUndo = append(x.batchUndo, x.sideUndo...)
	x.batchAfter = append(x.batchAfter, x.after...)
}

// update queues apply and waits until it is durable (nil) or failed. A caller whose ctx ends
// while the operation is still queued gets ctx's error and the operation never runs; once
// the committer has taken it, update waits for the outcome so the answer is never ambiguous.
func (t *table) update(ctx context.Context, apply func(*tx) error) error {
	return t.submit(ctx, &op{ctx: ctx, apply: apply, done: make(chan error, 1)})
}

// locked runs fn alone with the file locked.
func (t *table) locked(ctx context.Context, fn func() error) error {
	return t.submit(ctx, &op{ctx: ctx, exclusive: fn, done: make(chan error, 1)})
}

func (t *table) submit(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	t.queue = append(t.queue, o)
	if !t.running {
		t.running = true
		go t.commitLoop()
	}
	t.mu.Unlock()
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opCancelled) {
			return fmt.Errorf("write %s: %w", t.path, ctx.Err())
		}
		return <-o.done
	}
}

// commitLoop runs batches until the queue is empty. It blocks on the file lock without a
// deadline: callers time out on their own contexts (their queued operations are then
// skipped), and the kernel drops a dead holder's lock.
func (t *table) commitLoop() {
	for {
		t.mu.Lock()
		if len(t.queue) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		lk, err := fsutil.LockWait(t.lockPath)
		if err != nil {
			t.failQueued(err)
			continue
		}
		t.mu.Lock()
		batch := t.queue
		t.queue = nil
		t.mu.Unlock()
		var taken []*op
		for _, o := range batch {
			if !o.state.CompareAndSwap(opQueued, opTaken) {
				continue
			}
			if o.exclusive != nil {
				o.done <- o.exclusive()
				continue
			}
			taken = append(taken, o)
		}
		if len(taken) > 0 {
			t.runBatch(taken)
		}
		_ = lk.Unlock()
	}
}

func (t *table) failQueued(err error) {
	t.mu.Lock()
	batch := t.queue
	t.queue = nil
	t.mu.Unlock()
	for _, o := range batch {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			o.done <- err
		}
	}
}

func (t *table) runBatch(ops []*op) {
	results := make([]error, len(ops))
	fail := func(err error) {
		for _, o := range ops {
			o.done <- err
		}
	}
	if !t.swept {
		t.swept = true
		t.sweepTemps()
	}
	base, err := t.load()
	if err != nil {
		fail(err)
		return
	}
	x := &tx{t: t, base: base, recs: make(map[string]record, len(base.recs)+len(ops))}
	for k, v := range base.recs {
		x.recs[k] = v
	}
	if base.top != nil {
		x.top = base.top
	}
	for i, o := range ops {
		x.beginOp()
		if err := o.ctx.Err(); err != nil {
			results[i] = fmt.Errorf("write %s: %w", t.path, err)
			continue
		}
		err := o.apply(x)
		x.endOp(err)
		results[i] = err
	}
	if x.changed {
		if err := t.write(base, x); err != nil {
			for i := len(x.batchUndo) - 1; i >= 0; i-- {
				x.batchUndo[i]()
			}
			for i := range results {
				if results[i] == nil {
					results[i] = err
				}
			}
			// the file may or may not have been replaced; read it again next time
			t.cache.Store(nil)
			for i, o := range ops {
				o.done <- results[i]
			}
			return
		}
		for _, f := range x.batchAfter {
			f()
		}
	}
	for i, o := range ops {
		o.done <- results[i]
	}
}

// write replaces the file with x's records. With backup, the version being replaced stays
// reachable as <file>.bak (a hard link: no copy).
func (t *table) write(base *snapshot, x *tx) error {
	data := t.encode(x.top, x.recs)
	if t.backup && base.exists {
		tmp := t.path + ".bak.tmp"
		_ = os.Remove(tmp)
		if err := os.Link(t.path, tmp); err == nil {
			if err := os.Rename(tmp, t.path+".bak"); err != nil {
				_ = os.Remove(tmp)
			}
		}
	}
	if err := fsutil.WriteFileAtomic(t.path, data); err != nil {
		return err
	}
	fi, err := os.Lstat(t.path)
	if err != nil {
		t.cache.Store(nil)
		return nil //nolint:nilerr // the write is durable; only the cache is not refreshed
	}
	s := &snapshot{exists: true, top: x.top, recs: x.recs}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.id = fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtim: st.Mtim, ctim: st.Ctim}
		t.cache.Store(s)
	}
	return nil
}

// sweepTemps removes temp files a killed writer left behind. It runs with the lock held, when
// no other writer can be between creating and renaming its temp file.
func (t *table) sweepTemps() {
	dir, base := filepath.Split(t.path)
	matches, err := filepath.Glob(filepath.Join(dir, "."+globEscape(base)+".tmp-*"))
	if err != nil {
		return
	}
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

func globEscape(s string) string {
	r := strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`)
	return r.Replace(s)
}

// encode writes the table in the layout upstream uses (JSON.stringify(obj, null, 2)): records
// at depth 1 (2 under a wrapper), members one per line. Member values are written verbatim,
// so a value read from the file is written back byte for byte.
func (t *table) encode(top map[string]json.RawMessage, recs map[string]record) []byte {
	var b bytes.Buffer
	b.Grow(256 * (len(recs) + 1))
	if t.wrap == "" {
		t.encodeRecords(&b, recs, "")
		b.WriteByte('\n')
		return b.Bytes()
	}
	b.WriteString("{\n")
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString("  ")
		writeString(&b, k)
		b.WriteString(": ")
		b.Write(top[k])
		b.WriteString(",\n")
	}
	b.WriteString("  ")
	writeString(&b, t.wrap)
	b.WriteString(": ")
	t.encodeRecords(&b, recs, "  ")
	b.WriteString("\n}\n")
	return b.Bytes()
}

func (t *table) encodeRecords(b *bytes.Buffer, recs map[string]record, indent string) {
	if len(recs) == 0 {
		b.WriteString("{}")
		return
	}
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteString("{\n")
	for i, k := range keys {
		b.WriteString(indent + "  ")
		writeString(b, k)
		b.WriteString(": ")
		t.encodeRecord(b, recs[k], indent+"  ")
		if i < len(keys)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(indent + "}")
}

func (t *table) encodeRecord(b *bytes.Buffer, r record, indent string) {
	if len(r) == 0 {
		b.WriteString("{}")
		return
	}
	keys := make([]string, 0, len(r))
	for _, f := range t.first {
		if _, ok := r[f]; ok {
			keys = append(keys, f)
		}
	}
	nFirst := len(keys)
	for k := range r {
		if !slices.Contains(t.first, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys[nFirst:])
	b.WriteString("{\n")
	for i, k := range keys {
		b.WriteString(indent + "  ")
		writeString(b, k)
		b.WriteString(": ")
		b.Write(r[k])
		if i < len(keys)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(indent + "}")
}

// writeString writes s as a JSON string without HTML escaping (as JSON.stringify does).
func writeString(b *bytes.Buffer, s string) {
	if plain(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// plain reports whether s needs no escaping in a JSON string.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}
