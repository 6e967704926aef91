package transcript

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// SyncPolicy says when a Writer makes appended entries durable (fdatasync).
// Whatever the policy, an entry is in the kernel once Append returns, so a
// crash of the process never loses it; the policy only matters for a crash
// of the machine.
type SyncPolicy int

const (
	// SyncEntry syncs after every entry (the default).
	SyncEntry SyncPolicy = iota
	// SyncBatch syncs every BatchSize entries and on Flush and Close.
	SyncBatch
	// SyncNone never syncs except on an explicit Flush (tests, benchmarks).
	SyncNone
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncEntry:
		return "entry"
	case SyncBatch:
		return "batch"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// DefaultBatchSize is the SyncBatch batch when WriterOptions.BatchSize is 0.
const DefaultBatchSize = 64

// timestampLayout is JavaScript's Date.prototype.toISOString.
const timestampLayout = "2006-01-02T15:04:05.000Z"

// Errors of the writer.
var (
	// ErrLocked is returned when another Writer (in this or another
	// process) holds the transcript.
	ErrLocked = errors.New("transcript: another writer holds the file")
	// ErrNeedsMigration is returned by OpenWriter for a v1 or v2 file: its
	// entries have no ids on disk, so appending v3 entries would make a file
	// no reader can migrate. Call Migrate first.
	ErrNeedsMigration = errors.New("transcript: older format version, migrate before appending")
	// ErrUnknownEntry is returned when an id names no entry of the file.
	ErrUnknownEntry = errors.New("transcript: unknown entry")
	// ErrClosed is returned by a closed Writer.
	ErrClosed = errors.New("transcript: writer closed")
	// ErrLineTooLong is an entry longer than WriterOptions.MaxLine, not written.
	ErrLineTooLong = errors.New("transcript: entry longer than the longest line allowed")
)

// WriterOptions configure a Writer. The zero value is ready to use.
type WriterOptions struct {
	// Sync is the durability policy (default SyncEntry).
	Sync SyncPolicy
	// BatchSize is the number of entries per sync under SyncBatch
	// (default DefaultBatchSize).
	BatchSize int
	// Now is the clock for entry timestamps (default time.Now).
	Now func() time.Time
	// Rand is the source of entry ids and of the random part of session ids
	// (default crypto/rand).
	Rand io.Reader
	// NewSessionID makes the id of a new session (default: a UUID v7 from
	// Now and Rand).
	NewSessionID func() string
	// ParentSession is written in the header by Create (the absolute path
	// of the transcript this one continues); ignored by OpenWriter.
	ParentSession string
	// MaxLine, when positive, bounds an entry's line in bytes: a longer one is
	// refused (ErrLineTooLong) and nothing is written. A transcript replicated
	// on a cluster sets it to the longest line the cluster's messages hold.
	MaxLine int
}

func (o WriterOptions) withDefaults() WriterOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	return o
}

func (o WriterOptions) sessionID(now time.Time) (string, error) {
	if o.NewSessionID != nil {
		return o.NewSessionID(), nil
	}
	return newUUIDv7(now, o.Rand)
}

// newUUIDv7 builds a UUID v7 (RFC 9562) from a clock and a random source, so
// that tests can make it deterministic.
func newUUIDv7(now time.Time, r io.Reader) (string, error) {
	var u uuid.UUID
	if _, err := io.ReadFull(r, u[6:]); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(now.UnixMilli())) // #nosec G115 -- dates before 1970 do not occur
	copy(u[:6], ms[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u.String(), nil
}

// newEntryID returns 8 lowercase hex characters not yet used in the file
// (pi's generateId: retry on collision).
func newEntryID(r io.Reader, taken func(string) bool) (string, error) {
	var b [4]byte
	for range 100 {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return "", fmt.Errorf("entry id: %w", err)
		}
		id := hex.EncodeToString(b[:])
		if !taken(id) {
			return id, nil
		}
	}
	return "", errors.New("entry id: 100 collisions in a row, the random source is broken")
}

// ValidThinkingLevel reports whether level is one docs/conversations.md allows.
func ValidThinkingLevel(level string) bool {
	switch level {
	case "off", "minimal", "low", "medium", "high", "xhigh", "max":
		return true
	}
	return false
}

// Writer appends entries to a pi v3 transcript. Each entry is a child of the
// current leaf and becomes the new leaf; the in-memory index (File) follows
// every append, so BuildContext works without re-reading the file.
//
// A Writer holds an exclusive flock on the file while it is open, so two
// nexus writers never interleave their trees. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	path string
	opts WriterOptions

	file   *File
	header Header
	fh     *os.File // nil until the file exists (lazy creation)
	// held are the lines appended before the first message, written with
	// it (the header first).
	held [][]byte

	leaf        string
	lines       int  // lines in the file (held ones included)
	needNewline bool // the file ends with a torn line
	pending     int  // entries written but not synced
	err         error
	closed      bool
}

// entryField is one top-level field of an entry line, in output order.
type entryField struct {
	key string
	val any
}

// Create prepares a new transcript at path with header
// {"type":"session","version":3,"id":<uuid v7>,"timestamp":...,"cwd":cwd}.
// The file does not exist until the first message entry is appended
// (docs/conversations.md: "when the first message arrives"; pi itself waits for the
// first assistant message, which loses a user prompt sent just before a
// crash). Entries appended before it are held in memory and written with
// it; a Writer closed before any message leaves no file. The file (mode
// 0600) never replaces anything: an existing file or a symlink at path
// makes that append fail (see create), and Create checks both up front.
func Create(path, cwd string, opts WriterOptions) (*Writer, error) {
	opts = opts.withDefaults()
	if _, err := os.Lstat(path); err == nil { // #nosec G703 -- the caller names its transcript
		return nil, fmt.Errorf("create transcript %s: %w", path, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("create transcript %s: %w", path, err)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil { // #nosec G703 -- the caller names its transcript
		return nil, fmt.Errorf("create transcript %s: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("create transcript %s: parent is not a directory", path)
	}
	now := opts.Now()
	id, err := opts.sessionID(now)
	if err != nil {
		return nil, fmt.Errorf("create transcript %s: %w", path, err)
	}
	ts := now.UTC().Format(timestampLayout)
	line, err := headerLine(id, ts, cwd, opts.ParentSession)
	if err != nil {
		return nil, fmt.Errorf("create transcript %s: %w", path, err)
	}
	h := Header{ID: id, Timestamp: ts, Cwd: cwd, ParentSession: opts.ParentSession, Version: CurrentVersion, Raw: line}
	w := &Writer{
		path:   path,
		opts:   opts,
		header: h,
		file:   &File{Header: h, byID: map[string]*Entry{}},
		lines:  1,
	}
	return w, nil
}

// headerLine encodes a v3 header in pi's key order.
func headerLine(id, ts, cwd, parentSession string) (json.RawMessage, error) {
	fields := []entryField{{"version", CurrentVersion}, {"id", id}, {"timestamp", ts}, {"cwd", cwd}}
	if parentSession != "" {
		fields = append(fields, entryField{"parentSession", parentSession})
	}
	var buf bytes.Buffer
	buf.WriteString(`{"type":"session"`)
	for _, f := range fields {
		if err := writeField(&buf, f.key, f.val); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// OpenWriter continues the transcript at path: it takes the writer lock,
// indexes the file with Open (the leaf is the last entry) and appends with
// O_APPEND. A torn last line (a crash in the middle of a write) is kept as
// is and the next entry starts on a fresh line, so readers skip only the
// torn line. A symlink at path is refused.
//
// v1 and v2 files are refused with ErrNeedsMigration: v1 entries get ids
// only in memory, so appended entries would point at ids that do not exist
// on disk, and a v2 header over v3 entries would misstate the file. Migrate
// rewrites them as v3 (atomically, keeping the original as an archive).
// Files of a newer version are refused too.
func OpenWriter(path string, opts WriterOptions) (*Writer, error) {
	opts = opts.withDefaults()
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0) // #nosec G304 G703 -- the caller names its transcript
	if err != nil {
		return nil, fmt.Errorf("open transcript %s: %w", path, noFollowErr(err))
	}
	ok := false
	defer func() {
		if !ok {
			_ = unlockClose(fh)
		}
	}()
	if err := lockFile(fh, path); err != nil {
		return nil, err
	}
	if err := sameFile(fh, path); err != nil {
		return nil, err
	}
	f, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("open transcript %s: %w", path, err)
	}
	defer func() {
		if !ok {
			_ = f.Close()
		}
	}()
	if f.Header.Version < CurrentVersion {
		return nil, fmt.Errorf("open transcript %s: version %d: %w", path, f.Header.Version, ErrNeedsMigration)
	}
	if f.Header.Version > CurrentVersion {
		return nil, fmt.Errorf("open transcript %s: version %d is newer than %d, refusing to append", path, f.Header.Version, CurrentVersion)
	}
	lines, last, err := countLines(path)
	if err != nil {
		return nil, err
	}
	if f.byID == nil {
		f.index()
	}
	w := &Writer{
		path:        path,
		opts:        opts,
		file:        f,
		header:      f.Header,
		fh:          fh,
		lines:       lines,
		needNewline: last != '\n' && lines > 0,
	}
	if l := f.Leaf(); l != nil {
		w.leaf = l.ID
	}
	ok = true
	return w, nil
}

func noFollowErr(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("refusing a symlink: %w", err)
	}
	return err
}

// lockFile takes the exclusive writer lock (flock) on fh without waiting.
func lockFile(fh *os.File, path string) error {
	ok, err := fsutil.LockFile(fh, false)
	if err != nil {
		return fmt.Errorf("lock transcript %s: %w", path, err)
	}
	if !ok {
		return fmt.Errorf("lock transcript %s: %w", path, ErrLocked)
	}
	return nil
}

// unlockClose releases the writer lock, then closes fh: closing alone could leave the file
// locked for a child forked at that moment (see fsutil.UnlockFile), and the next writer would be
// refused with ErrLocked.
func unlockClose(fh *os.File) error {
	_ = fsutil.UnlockFile(fh)
	return fh.Close()
}

// sameFile checks that path still names the regular file fh has open: a
// compaction may have renamed it to an archive while we waited for the lock.
func sameFile(fh *os.File, path string) error {
	a, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("stat transcript %s: %w", path, err)
	}
	if !a.Mode().IsRegular() {
		return fmt.Errorf("open transcript %s: not a regular file", path)
	}
	b, err := os.Lstat(path) // #nosec G703 -- the caller names its transcript
	if err != nil {
		return fmt.Errorf("stat transcript %s: %w", path, err)
	}
	if !os.SameFile(a, b) {
		return fmt.Errorf("open transcript %s: the file was replaced while opening it", path)
	}
	return nil
}

// countLines returns the number of lines of the file (a last line without
// newline counts) and its last byte (0 for an empty file).
func countLines(path string) (int, byte, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0) // #nosec G304 G703 -- see OpenWriter
	if err != nil {
		return 0, 0, fmt.Errorf("read transcript %s: %w", path, err)
	}
	defer func() { _ = fh.Close() }()
	buf := make([]byte, 1<<20)
	n, last := 0, byte(0)
	for {
		k, err := fh.Read(buf)
		if chunk := buf[:k]; len(chunk) > 0 {
			n += bytes.Count(chunk, []byte{'\n'})
			last = chunk[len(chunk)-1]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read transcript %s: %w", path, err)
		}
	}
	if last != '\n' && last != 0 {
		n++
	}
	return n, last, nil
}

// Path returns the transcript's path.
func (w *Writer) Path() string { return w.path }

// Header returns the transcript's header.
func (w *Writer) Header() Header {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.header
}

// File returns the in-memory index, kept up to date by every append. It
// must not be used while another goroutine appends; Context is safe.
func (w *Writer) File() *File { return w.file }

// LeafID returns the current leaf ("" before the first entry or after
// ResetLeaf).
func (w *Writer) LeafID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leaf
}

// Persisted reports whether the file exists on disk (lazy creation: not
// before the first message).
func (w *Writer) Persisted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fh != nil
}

// Context builds the model context at the current leaf (empty after
// ResetLeaf, like pi's buildSessionContext(null)).
func (w *Writer) Context() (*Context, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leaf == "" {
		return &Context{ThinkingLevel: "off", Messages: []json.RawMessage{}}, nil
	}
	return w.file.BuildContext(w.leaf)
}

// Branch moves the leaf to the entry id: the next append starts a new branch
// there. Nothing is written.
func (w *Writer) Branch(id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file.Entry(id) == nil {
		return fmt.Errorf("branch to %q: %w", id, ErrUnknownEntry)
	}
	w.leaf = id
	return nil
}

// ResetLeaf moves the leaf before the first entry: the next append is a new
// root (parentId null).
func (w *Writer) ResetLeaf() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leaf = ""
}

// Append appends an entry of any type (for types without a helper, such as
// usage or context_edit). fields are written after type, id, parentId and
// timestamp, sorted by key; those four keys may not appear in fields.
// Values are encoded like JSON.stringify (no HTML escaping);
// json.RawMessage values are written as given (compacted). Use the typed
// helpers for validated entries.
func (w *Writer) Append(typ string, fields map[string]any) (string, error) {
	if typ == "" || typ == "session" {
		return "", fmt.Errorf("append: invalid entry type %q", typ)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		switch k {
		case "type", "id", "parentId", "timestamp":
			return "", fmt.Errorf("append %s: field %q is set by the writer", typ, k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ef := make([]entryField, 0, len(keys))
	for _, k := range keys {
		ef = append(ef, entryField{k, fields[k]})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked(typ, ef)
}

// AppendMessage appends a message entry. msg is an agent message (a
// json.RawMessage or any value encoding to a JSON object) with a string
// role; compactionSummary and branchSummary are refused (use
// AppendCompaction and BranchWithSummary, as pi does). The first message
// creates the file.
func (w *Writer) AppendMessage(msg any) (string, error) {
	return w.AppendMessageExtra(msg, nil)
}

// AppendMessageExtra is AppendMessage with extra top-level fields on the
// entry, after message, sorted by key. This is how nexus records the
// metadata nexus adds (token counts, subagent links, ...) in a way pi
// tolerates: pi keeps unknown entry fields and ignores them. Put them under
// one namespaced key, e.g. {"nexus": {...}}.
func (w *Writer) AppendMessageExtra(msg any, extra map[string]any) (string, error) {
	raw, err := encodeJSON(msg)
	if err != nil {
		return "", fmt.Errorf("append message: %w", err)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return "", errors.New("append message: the message must be a JSON object")
	}
	ef := []entryField{{"message", preEncoded(raw)}}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		switch k {
		case "type", "id", "parentId", "timestamp", "message":
			return "", fmt.Errorf("append message: extra field %q is reserved", k)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ef = append(ef, entryField{k, extra[k]})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendChecked("message", ef, checkMessage)
}

// checkMessage validates a message entry from its parsed line (which reads
// message.role without decoding the rest).
func checkMessage(e *Entry) error {
	switch e.Role {
	case "":
		return errors.New("the message must have a non-empty string role")
	case "compactionSummary", "branchSummary":
		return fmt.Errorf("role %s is written as its own entry type", e.Role)
	}
	return nil
}

// AppendModelChange appends a model_change entry.
func (w *Writer) AppendModelChange(provider, modelID string) (string, error) {
	if provider == "" || modelID == "" {
		return "", errors.New("append model_change: provider and model id are required")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked("model_change", []entryField{{"provider", provider}, {"modelId", modelID}})
}

// AppendThinkingLevel appends a thinking_level_change entry; level is one of
// off, minimal, low, medium, high, xhigh, max.
func (w *Writer) AppendThinkingLevel(level string) (string, error) {
	if !ValidThinkingLevel(level) {
		return "", fmt.Errorf("append thinking_level_change: invalid level %q", level)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked("thinking_level_change", []entryField{{"thinkingLevel", level}})
}

// AppendCompaction appends a compaction entry. firstKeptEntryID must be on
// the path to the current leaf (ChooseCut picks it); details (omitted when
// nil) is pi's {readFiles, modifiedFiles}; fromHook is written only when
// true.
func (w *Writer) AppendCompaction(summary, firstKeptEntryID string, tokensBefore int, details any, fromHook bool) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendCompactionLocked(summary, firstKeptEntryID, tokensBefore, details, fromHook)
}

func (w *Writer) appendCompactionLocked(summary, firstKeptEntryID string, tokensBefore int, details any, fromHook bool) (string, error) {
	if tokensBefore < 0 {
		return "", errors.New("append compaction: negative tokensBefore")
	}
	onPath := false
	if w.leaf != "" {
		for _, e := range w.file.Path(w.leaf) {
			if e.ID == firstKeptEntryID {
				onPath = true
				break
			}
		}
	}
	if !onPath {
		return "", fmt.Errorf("append compaction: first kept entry %q is not on the current branch: %w", firstKeptEntryID, ErrUnknownEntry)
	}
	ef := []entryField{{"summary", summary}, {"firstKeptEntryId", firstKeptEntryID}, {"tokensBefore", tokensBefore}}
	if details != nil {
		ef = append(ef, entryField{"details", details})
	}
	if fromHook {
		ef = append(ef, entryField{"fromHook", true})
	}
	return w.appendLocked("compaction", ef)
}

// BranchWithSummary moves the leaf to fromID ("" for the root: the entry
// becomes a new root with fromId "root", as pi's branchWithSummary(null))
// and appends a branch_summary entry there summarizing the abandoned path.
func (w *Writer) BranchWithSummary(fromID, summary string, details any, fromHook bool) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	from := "root"
	if fromID != "" {
		if w.file.Entry(fromID) == nil {
			return "", fmt.Errorf("branch with summary from %q: %w", fromID, ErrUnknownEntry)
		}
		from = fromID
	}
	ef := []entryField{{"fromId", from}, {"summary", summary}}
	if details != nil {
		ef = append(ef, entryField{"details", details})
	}
	if fromHook {
		ef = append(ef, entryField{"fromHook", true})
	}
	old := w.leaf
	w.leaf = fromID
	id, err := w.appendLocked("branch_summary", ef)
	if err != nil {
		w.leaf = old
	}
	return id, err
}

// AppendCustom appends a custom entry (extension state, not in the model
// context); data is omitted when nil. pi writes customType and data before
// id; nexus keeps type, id, parentId, timestamp first on every line
// (docs/conversations.md), which readers do not depend on.
func (w *Writer) AppendCustom(customType string, data any) (string, error) {
	if customType == "" {
		return "", errors.New("append custom: empty customType")
	}
	ef := []entryField{{"customType", customType}}
	if data != nil {
		ef = append(ef, entryField{"data", data})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked("custom", ef)
}

// AppendCustomMessage appends a custom_message entry, which reaches the model
// as a user message; content is a string or an array of text/image blocks,
// details (omitted when nil) is not sent to the model.
func (w *Writer) AppendCustomMessage(customType string, content any, display bool, details any) (string, error) {
	if customType == "" {
		return "", errors.New("append custom_message: empty customType")
	}
	raw, err := encodeJSON(content)
	if err != nil {
		return "", fmt.Errorf("append custom_message: %w", err)
	}
	if len(raw) == 0 || (raw[0] != '"' && raw[0] != '[') {
		return "", errors.New("append custom_message: content must be a string or an array of blocks")
	}
	ef := []entryField{{"customType", customType}, {"content", preEncoded(raw)}, {"display", display}}
	if details != nil {
		ef = append(ef, entryField{"details", details})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked("custom_message", ef)
}

// AppendLabel sets the label of the entry targetID; an empty label clears
// it (the label field is then omitted).
func (w *Writer) AppendLabel(targetID, label string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file.Entry(targetID) == nil {
		return "", fmt.Errorf("label %q: %w", targetID, ErrUnknownEntry)
	}
	ef := []entryField{{"targetId", targetID}}
	if label != "" {
		ef = append(ef, entryField{"label", label})
	}
	return w.appendLocked("label", ef)
}

// AppendSessionInfo sets the session's display name (trimmed; empty clears).
func (w *Writer) AppendSessionInfo(name string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked("session_info", []entryField{{"name", strings.TrimSpace(name)}})
}

// appendLocked writes one entry: a child of the leaf, which then moves to it.
func (w *Writer) appendLocked(typ string, fields []entryField) (string, error) {
	return w.appendChecked(typ, fields, nil)
}

// appendChecked is appendLocked with a check of the entry before it is
// written.
func (w *Writer) appendChecked(typ string, fields []entryField, check func(*Entry) error) (string, error) {
	if w.closed {
		return "", ErrClosed
	}
	if w.err != nil {
		return "", w.err
	}
	id, err := newEntryID(w.opts.Rand, func(id string) bool { return w.file.Entry(id) != nil })
	if err != nil {
		return "", fmt.Errorf("append %s: %w", typ, err)
	}
	ts := w.opts.Now().UTC().Format(timestampLayout)
	line, err := encodeEntry(typ, id, w.leaf, ts, fields)
	if err != nil {
		return "", fmt.Errorf("append %s: %w", typ, err)
	}
	if w.opts.MaxLine > 0 && len(line) > w.opts.MaxLine {
		return "", fmt.Errorf("append %s of %d bytes (at most %d): %w", typ, len(line), w.opts.MaxLine, ErrLineTooLong)
	}
	e, err := ParseLine(line)
	if err != nil {
		return "", fmt.Errorf("append %s: %w", typ, err)
	}
	if check != nil {
		if err := check(e); err != nil {
			return "", fmt.Errorf("append %s: %w", typ, err)
		}
	}
	switch {
	case w.fh != nil:
		err = w.writeLine(line)
	case typ == "message":
		err = w.create(line)
	default:
		w.held = append(w.held, line)
	}
	if err != nil && !w.written(err) {
		return "", err
	}
	w.lines++
	e.Line = w.lines
	w.file.appendIndexed(e)
	w.leaf = id
	return id, err
}

// written reports whether an append error came after the entry reached the
// file (a failed sync): the entry is then indexed like the file has it.
func (w *Writer) written(err error) bool {
	return w.err != nil && errors.Is(err, w.err)
}

// create makes the file for the first message: the header, the held
// entries and the message are written with one write to a new private file
// next to path (O_CREATE|O_EXCL|O_WRONLY|O_APPEND|O_NOFOLLOW, 0600), synced,
// then linked to path, which fails if anything (a symlink included) is
// there. A crash therefore never leaves an empty or headless transcript
// that OpenWriter would refuse; at worst a stray ".<name>.new-*" file.
func (w *Writer) create(line []byte) error {
	size := len(w.header.Raw) + 1 + len(line) + 1
	for _, h := range w.held {
		size += len(h) + 1
	}
	buf := make([]byte, 0, size)
	buf = append(append(buf, w.header.Raw...), '\n')
	for _, h := range w.held {
		buf = append(append(buf, h...), '\n')
	}
	buf = append(append(buf, line...), '\n')

	dir := filepath.Dir(w.path)
	var (
		fh  *os.File
		tmp string
		err error
	)
	for range 10 {
		var b [4]byte
		if _, err = io.ReadFull(w.opts.Rand, b[:]); err != nil {
			return fmt.Errorf("create transcript %s: %w", w.path, err)
		}
		tmp = filepath.Join(dir, "."+filepath.Base(w.path)+".new-"+hex.EncodeToString(b[:]))
		fh, err = os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, fsutil.FileMode) // #nosec G304 G703 -- next to the caller's transcript
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create transcript %s: %w", w.path, err)
	}
	linked := false
	defer func() {
		if !linked {
			_ = unlockClose(fh)
		}
		_ = os.Remove(tmp) // #nosec G703 -- our own temp file beside the transcript
	}()
	if err := lockFile(fh, w.path); err != nil {
		return err
	}
	if _, err := fh.Write(buf); err != nil {
		return fmt.Errorf("write transcript %s: %w", w.path, err)
	}
	if w.opts.Sync != SyncNone {
		if err := fdatasync(fh); err != nil {
			return fmt.Errorf("sync transcript %s: %w", w.path, err)
		}
	}
	if err := os.Link(tmp, w.path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create transcript %s: %w", w.path, fs.ErrExist)
		}
		return fmt.Errorf("create transcript %s: %w", w.path, err)
	}
	linked = true
	w.fh = fh
	if w.opts.Sync == SyncNone {
		w.pending += 1 + len(w.held)
	}
	w.held = nil
	if w.opts.Sync == SyncNone {
		return nil
	}
	if err := fsutil.SyncDir(dir); err != nil {
		w.err = fmt.Errorf("transcript %s: %w", w.path, err)
		return w.err
	}
	return nil
}

// writeLine appends one line with one write(2), after a newline when the
// file ends with a torn line, and syncs per policy.
func (w *Writer) writeLine(line []byte) error {
	off := 0
	if w.needNewline {
		off = 1
	}
	buf := make([]byte, 0, off+len(line)+1)
	if off == 1 {
		buf = append(buf, '\n')
	}
	buf = append(append(buf, line...), '\n')
	n, err := w.fh.Write(buf)
	if err != nil {
		// A short write leaves a torn line unless only the newline got out.
		switch {
		case n > off:
			w.needNewline = true
		case n == off && off == 1:
			w.needNewline = false
		}
		return fmt.Errorf("write transcript %s: %w", w.path, err)
	}
	if off == 1 {
		// The torn line stays in the file (readers skip it) and counts
		// as a line of its own.
		w.needNewline = false
	}
	w.pending++
	switch w.opts.Sync {
	case SyncEntry:
		return w.syncLocked()
	case SyncBatch:
		if w.pending >= w.opts.BatchSize {
			return w.syncLocked()
		}
	}
	return nil
}

// syncLocked makes the written entries durable. A failed fdatasync leaves
// the writer unusable: the kernel may have dropped the dirty pages, so
// whether earlier entries are on disk is unknown.
func (w *Writer) syncLocked() error {
	if w.fh == nil || w.pending == 0 {
		return nil
	}
	if err := fdatasync(w.fh); err != nil {
		w.err = fmt.Errorf("sync transcript %s: %w", w.path, err)
		return w.err
	}
	w.pending = 0
	return nil
}

func fdatasync(fh *os.File) error {
	rc, err := fh.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Fdatasync(int(fd)) // #nosec G115 -- a file descriptor fits an int
			if !errors.Is(serr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}

// Flush syncs the entries written so far (whatever the policy).
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	return w.syncLocked()
}

// Close syncs (unless SyncNone), releases the lock and closes the file.
// Entries held before the first message are dropped with no file written.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	if w.fh != nil {
		if w.opts.Sync != SyncNone && w.err == nil {
			errs = append(errs, w.syncLocked())
		}
		if err := unlockClose(w.fh); err != nil {
			errs = append(errs, fmt.Errorf("close transcript %s: %w", w.path, err))
		}
	}
	w.held = nil
	errs = append(errs, w.file.Close())
	return errors.Join(errs...)
}

// appendIndexed adds an entry the Writer wrote (fully resident) to the index.
func (f *File) appendIndexed(e *Entry) {
	if f.byID == nil {
		f.index()
	}
	f.Entries = append(f.Entries, e)
	if e.ID != "" {
		f.byID[e.ID] = e
	}
}

// encodeEntry encodes an entry line: type, id, parentId, timestamp, then
// fields in order.
func encodeEntry(typ, id, parent, ts string, fields []entryField) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"type":`)
	if err := writeValue(&buf, typ); err != nil {
		return nil, err
	}
	if err := writeField(&buf, "id", id); err != nil {
		return nil, err
	}
	if parent == "" {
		buf.WriteString(`,"parentId":null`)
	} else if err := writeField(&buf, "parentId", parent); err != nil {
		return nil, err
	}
	if err := writeField(&buf, "timestamp", ts); err != nil {
		return nil, err
	}
	for _, f := range fields {
		if err := writeField(&buf, f.key, f.val); err != nil {
			return nil, fmt.Errorf("field %s: %w", f.key, err)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func writeField(buf *bytes.Buffer, key string, val any) error {
	buf.WriteByte(',')
	if err := writeValue(buf, key); err != nil {
		return err
	}
	buf.WriteByte(':')
	return writeValue(buf, val)
}

// preEncoded is a value encodeJSON already produced: written as is.
type preEncoded []byte

func writeValue(buf *bytes.Buffer, v any) error {
	if p, ok := v.(preEncoded); ok {
		buf.Write(p)
		return nil
	}
	raw, err := encodeJSON(v)
	if err != nil {
		return err
	}
	buf.Write(raw)
	return nil
}

// encodeJSON encodes v compactly without HTML escaping, like JSON.stringify
// (json.RawMessage values are validated and compacted, never re-encoded).
func encodeJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	if raw, ok := v.(json.RawMessage); ok && raw != nil {
		if err := json.Compact(&buf, raw); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
