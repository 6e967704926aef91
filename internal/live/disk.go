package live

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/procfs"
)

// The disk store keeps, under its directory (state/live), one directory per session:
//
//	<id>/session.json           the session object, replaced when the session is created and ends
//	<id>/seq                    sequence numbers handed out at most up to here, and the boot id
//	<id>/<first seq>.log        segments of the event log: framed canonical events, appended
//	<id>/pinned.log             non-data events whose segment was dropped (see MemoryLog)
//
// Durability (docs/live-sessions.md states it for users):
//   - Every event is written (write(2), to the kernel) before any reader can see it or its
//     sequence number (a log writes what it buffered before a Read or LastSeq answers), and every record
//     before the request that changed it is answered, so a killed process — kill -9 included
//     — loses nothing a client saw or was told. Events nobody has read yet wait in a buffer of
//     up to writeBatch bytes, so a burst of output costs one write(2) per batch; a kill may
//     lose those, at most the last SyncInterval's, and their numbers are given out again.
//   - fsync is batched: a flusher syncs what changed every SyncInterval (default 1 s), and
//     closing the store (a clean shutdown) syncs everything. A power loss or kernel crash may lose what was
//     written in the last interval; a torn last record is detected (length and CRC-32C per
//     record) and dropped.
//   - Sequence numbers are reserved in blocks of seqBlock, the reservation synced before a
//     number beyond it is used, so after a reboot a session continues after every number it may
//     have handed out: a gap, read as EVENTS_MISSED, never a number used twice.
//
// Bounds: a log keeps segments until every event in them has left the in-memory window
// (LogLimits: 8192 events / 8 MiB by default), so a session's files hold at most that window
// plus one segment (a quarter of it) and the pinned events; the registry removes a session's
// directory when its retention ends. In memory, only logs that may still append hold their
// events (and the store the last finished one read): a gateway's memory does not grow with the
// closed sessions it keeps.

const (
	recordFile = "session.json"
	seqFile    = "seq"
	pinnedFile = "pinned.log"
	// volatileFile marks a log whose data events are not written (LogLimits.VolatileData): restored,
	// it goes on after its reservation, since data numbers past its last written event were
	// handed out.
	volatileFile = "volatile-data"
	segSuffix    = ".log"
	// seqBlock is how many sequence numbers are reserved at once: a reservation costs an fsync.
	seqBlock = 1 << 16
	// frameHeader is a record's length and CRC-32C (Castagnoli), both little-endian uint32.
	frameHeader = 8
	// maxFrame bounds a record, so a corrupt length cannot make the loader allocate gigabytes.
	maxFrame = 64 << 20
	// DefaultSyncInterval is how often a DiskStore syncs what changed.
	DefaultSyncInterval = time.Second
)

var (
	crcTable = crc32.MakeTable(crc32.Castagnoli)
	// frameBufs lends appends their write buffer, so an idle session keeps none.
	frameBufs = sync.Pool{New: func() any { return new([]byte) }}
	validID   = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)
	segmentRe = regexp.MustCompile(`^[0-9]{20}\.log$`)
)

// DiskOptions tune a DiskStore. Zero values take the defaults.
type DiskOptions struct {
	// SyncInterval is how often changed files are synced; default DefaultSyncInterval.
	SyncInterval time.Duration
	Logger       *slog.Logger
	// BootID identifies the running boot (default: the kernel's); a test changes it to play a
	// reboot.
	BootID func() string
}

// DiskStore is the Store that keeps records and event logs in a directory.
type DiskStore struct {
	dir  string
	opt  DiskOptions
	boot string

	v *versions // records' revisions: given at Put, or when Restore or List first finds a record

	mu          sync.Mutex
	logs        map[string]*diskLog
	parentDirty bool
	closed      bool

	// recent are finished logs decoded by reads, the newest last, within coldCacheBytes: a
	// reader paging through a closed session's events reads its files once, not once a page,
	// and the store's memory does not grow with the closed sessions it keeps (see diskLog.cold).
	recentMu sync.Mutex
	recent   []*coldEvents
	decoded  atomic.Int64 // logs decoded from their files so far (tests count reads of the disk)

	stop chan struct{}
	done chan struct{}
}

// OpenDiskStore opens (creating it, 0700) the store in dir and starts its flusher.
func OpenDiskStore(dir string, opt DiskOptions) (*DiskStore, error) {
	if opt.SyncInterval <= 0 {
		opt.SyncInterval = DefaultSyncInterval
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.BootID == nil {
		opt.BootID = procfs.BootID
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	s := &DiskStore{dir: dir, opt: opt, boot: opt.BootID(), v: newVersions(), logs: map[string]*diskLog{}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.flusher()
	return s, nil
}

// Dir is the store's directory.
func (s *DiskStore) Dir() string { return s.dir }

func (s *DiskStore) flusher() {
	defer close(s.done)
	t := time.NewTicker(s.opt.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.Sync(); err != nil {
				s.opt.Logger.Warn("sync live-session store", "err", err)
			}
		}
	}
}

// Sync makes everything written so far durable (what the flusher does every SyncInterval).
func (s *DiskStore) Sync() error {
	s.mu.Lock()
	logs := make([]*diskLog, 0, len(s.logs))
	for _, l := range s.logs {
		logs = append(logs, l)
	}
	parent := s.parentDirty
	s.parentDirty = false
	s.mu.Unlock()
	// fsyncs of one file system are committed together by its journal: run them side by side.
	errs := make([]error, len(logs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, l := range logs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = l.sync()
		}()
	}
	wg.Wait()
	if parent {
		if err := fsutil.SyncDir(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops the flusher and syncs everything; the files stay for the next store.
func (s *DiskStore) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	err := s.Sync()
	s.mu.Lock()
	logs := s.logs
	s.logs = map[string]*diskLog{}
	s.mu.Unlock()
	for _, l := range logs {
		l.release()
	}
	return err
}

// ErrStoreClosed is returned by a DiskStore used after Close.
var ErrStoreClosed = errors.New("the live-session store is closed")

func (s *DiskStore) sessionDir(id string) (string, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return "", ErrStoreClosed
	}
	if !validID.MatchString(id) {
		return "", fmt.Errorf("session id %q cannot name a directory", id)
	}
	return filepath.Join(s.dir, id), nil
}

// Put implements StateStore. A new record makes the session's directory; its log is created
// next (CreateLog).
func (s *DiskStore) Put(_ context.Context, rec abi.Session, revision uint64) (uint64, error) {
	dir, err := s.sessionDir(rec.SessionID)
	if err != nil {
		return 0, err
	}
	if err := s.v.begin(rec.SessionID, revision); err != nil {
		return 0, err
	}
	err = s.put(dir, rec, revision == 0)
	rev := s.v.end(rec.SessionID, err == nil, false)
	return rev, err
}

func (s *DiskStore) put(dir string, rec abi.Session, create bool) error {
	if create {
		if err := os.Mkdir(dir, fsutil.DirMode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				// A session the store keeps but could not restore holds the id.
				return fmt.Errorf("create session directory: %w: %w", ErrConflict, err)
			}
			return fmt.Errorf("create session directory: %w", err)
		}
	}
	if err := writeRecord(dir, rec); err != nil {
		if create {
			_ = os.RemoveAll(dir)
		}
		return err
	}
	s.mu.Lock()
	l := s.logs[rec.SessionID]
	if create {
		s.parentDirty = true
	}
	s.mu.Unlock()
	if l != nil {
		l.mu.Lock()
		l.recordDirty, l.dirDirty = true, true
		l.mu.Unlock()
	}
	return nil
}

// CreateLog implements Store: the sequence reservation first, so no number is handed out
// before it is reserved.
func (s *DiskStore) CreateLog(_ context.Context, id string, limits LogLimits) (EventLog, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return nil, err
	}
	l := &diskLog{store: s, id: id, dir: dir, mem: NewMemoryLog(limits), limits: limits, dirDirty: true, recordDirty: true}
	if err := l.writeReservation(seqBlock, false); err != nil {
		return nil, err
	}
	if limits.VolatileData {
		f, err := os.OpenFile(filepath.Join(dir, volatileFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode) //nolint:gosec // G304: our own session directory
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("mark the session's data volatile: %w", err)
		}
	}
	s.mu.Lock()
	s.logs[id] = l
	s.parentDirty = true
	s.mu.Unlock()
	return l, nil
}

func writeRecord(dir string, rec abi.Session) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode session %s: %w", rec.SessionID, err)
	}
	return fsutil.ReplaceFile(filepath.Join(dir, recordFile), append(b, '\n'))
}

func readRecord(dir, id string) (abi.Session, error) {
	data, err := fsutil.ReadFileNoFollow(filepath.Join(dir, recordFile))
	if err != nil {
		return abi.Session{}, fmt.Errorf("read record: %w", err)
	}
	var rec abi.Session
	if err := json.Unmarshal(data, &rec); err != nil {
		return abi.Session{}, fmt.Errorf("decode %s: %w", filepath.Join(dir, recordFile), err)
	}
	if rec.SessionID != id {
		return abi.Session{}, fmt.Errorf("record names session %q", rec.SessionID)
	}
	return rec, nil
}

// Get implements StateStore.
func (s *DiskStore) Get(_ context.Context, id string) (Record, error) {
	dir, err := s.sessionDir(id)
	if err != nil {
		return Record{}, err
	}
	rec, err := readRecord(dir, id)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("session %s: %w", id, ErrNoRecord)
	}
	if err != nil {
		return Record{}, err
	}
	return Record{Session: rec, Revision: s.v.adopt(id)}, nil
}

// List implements StateStore: every session directory whose record reads.
func (s *DiskStore) List(ctx context.Context) ([]Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.dir, err)
	}
	var out []Record
	for _, de := range entries {
		if !de.IsDir() || !validID.MatchString(de.Name()) || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		if r, err := s.Get(ctx, de.Name()); err == nil {
			out = append(out, r)
		}
	}
	sortRecords(out)
	return out, nil
}

// Delete implements StateStore: the record goes with the session's log.
func (s *DiskStore) Delete(ctx context.Context, id string, revision uint64) error {
	if revision == 0 {
		return fmt.Errorf("session %s: %w (delete names no revision)", id, ErrConflict)
	}
	if _, err := s.sessionDir(id); err != nil {
		return err
	}
	if err := s.v.begin(id, revision); err != nil {
		return err
	}
	err := s.remove(id)
	s.v.end(id, err == nil, true)
	return err
}

// Watch implements StateStore.
func (s *DiskStore) Watch(ctx context.Context, after uint64) (Records, error) {
	v, err := s.v.wait(ctx, after)
	if err != nil {
		return Records{}, err
	}
	rs, err := s.List(ctx)
	return Records{Records: rs, Version: v}, err
}

// Remove implements Store.
func (s *DiskStore) Remove(_ context.Context, id string) error {
	if _, err := s.sessionDir(id); err != nil {
		return err
	}
	err := s.remove(id)
	s.v.forget(id)
	return err
}

func (s *DiskStore) remove(id string) error {
	dir, err := s.sessionDir(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	l := s.logs[id]
	delete(s.logs, id)
	s.parentDirty = true
	s.mu.Unlock()
	if l != nil {
		l.release()
		s.forgetRecent(l)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove session %s: %w", id, err)
	}
	return nil
}

// Restore implements Store. A directory that is not a session's (a symlink, an unreadable
// record) is left alone and logged; a torn last record is dropped.
func (s *DiskStore) Restore(_ context.Context, limits LogLimits) ([]Restored, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.dir, err)
	}
	var out []Restored
	for _, de := range entries {
		if strings.HasPrefix(de.Name(), ".") {
			continue
		}
		if !de.IsDir() || !validID.MatchString(de.Name()) { // a symlink is not a directory here
			s.opt.Logger.Warn("live-session store: ignoring an entry that is not a session directory", "path", filepath.Join(s.dir, de.Name()))
			continue
		}
		r, err := s.restore(de.Name(), limits)
		if err != nil {
			s.opt.Logger.Warn("live-session store: cannot restore a session", "id", de.Name(), "err", err)
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Restored) int {
		return strings.Compare(a.Session.CreatedAt+a.Session.SessionID, b.Session.CreatedAt+b.Session.SessionID)
	})
	return out, nil
}

func (s *DiskStore) restore(id string, limits LogLimits) (Restored, error) {
	dir := filepath.Join(s.dir, id)
	rec, err := readRecord(dir, id)
	if err != nil {
		return Restored{}, err
	}
	l := &diskLog{store: s, id: id, dir: dir, limits: limits}
	if rec.Status.Final() {
		// Nothing will be appended: its events stay on disk until someone reads them (and its
		// files are not even read now), so neither the gateway's memory nor its start grows
		// with the closed sessions it keeps.
		l.cold, l.closed = true, true
	} else {
		l.mem = NewMemoryLog(limits)
		if err := l.load(s.boot, false); err != nil {
			return Restored{}, err
		}
	}
	s.mu.Lock()
	s.logs[id] = l
	s.mu.Unlock()
	return Restored{Session: rec, Revision: s.v.adopt(id), Log: l}, nil
}

// segment is one file of a disk log.
type segment struct {
	first, last uint64 // sequence numbers it holds (last < first while empty)
	bytes       int
	count       int
	nonData     int
	// f is open while the segment is appended to or not yet synced since it was.
	f *os.File
}

func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segSuffix) }

// diskLog is the EventLog of a DiskStore: while the session runs a MemoryLog answers reads,
// and every append is written to the current segment first; once it has ended (cold), reads
// decode its files.
type diskLog struct {
	store  *DiskStore
	id     string
	dir    string
	limits LogLimits

	// mu guards the rest and serializes appends: an append and the flush before a read
	// hold it while they write to the kernel's page cache (never for an fsync of events: the
	// flusher syncs outside it).
	mu       sync.Mutex
	mem      *MemoryLog
	segs     []*segment // oldest first; the last is the one appended to
	cur      *os.File   // the last segment's file, opened on the first append
	pending  *[]byte    // framed events of the last segment not yet written (see Flush)
	pinCount int
	reserved uint64
	broken   error // the first write error: the log carries on in memory only
	closed   bool
	// cold is set once the log is finished and its files hold everything it does (the flusher
	// passed after it was closed, or it was restored final): mem is dropped, reads decode the
	// files (DiskStore.recent keeps some), and last is its LastSeq once haveLast is set (a
	// restored log learns it from its first read).
	cold     bool
	last     uint64
	haveLast bool

	dirty, recordDirty, dirDirty, pinDirty bool

	syncMu sync.Mutex // one sync at a time, and none while the files are being closed
}

// Append implements EventLog. The events are framed into a buffer and written (one write(2)
// for many events) before the next Read or LastSeq answers, or when the buffer holds
// writeBatch bytes; so a producer printing faster than anyone reads pays one system call per
// batch, not per event. The sequence numbers come from the in-memory log, within the
// reservation this log keeps in its seq file.
func (l *diskLog) Append(ctx context.Context, events ...*Event) (Appended, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cold || l.closed {
		return Appended{}, fmt.Errorf("session %s: %w", l.id, ErrLogClosed)
	}
	res, err := l.mem.Append(ctx, events...)
	if err != nil || len(events) == 0 {
		return res, err
	}
	if l.broken != nil {
		return res, fmt.Errorf("%w: %w", ErrNotDurable, l.broken)
	}
	persist := events
	if l.limits.VolatileData {
		persist = make([]*Event, 0, 1)
		for _, e := range events {
			if e.retained() {
				persist = append(persist, e)
			}
		}
	}
	err = l.reserve(events[len(events)-1].Seq)
	if err == nil && len(persist) > 0 {
		err = l.queue(persist)
	}
	if err == nil {
		err = l.prune()
	}
	if err != nil {
		l.broken = err
		l.dropPending()
		return res, fmt.Errorf("%w: session %s: %w", ErrNotDurable, l.id, err)
	}
	return res, nil
}

// writeBatch is how many framed bytes wait for a reader before they are written anyway.
const writeBatch = 64 << 10

// reserve makes sure sequence numbers up to last are reserved durably: they become visible
// once appended (written or not, see LogLimits.VolatileData), so the reservation must be on disk first.
func (l *diskLog) reserve(last uint64) error {
	if last > l.reserved {
		return l.writeReservation(last+seqBlock, true)
	}
	return nil
}

// queue frames events into the pending buffer, in the current segment.
func (l *diskLog) queue(events []*Event) error {
	lastSeq := events[len(events)-1].Seq
	if err := l.rotate(events[0].Seq); err != nil {
		return err
	}
	if l.pending == nil {
		l.pending = frameBufs.Get().(*[]byte)
	}
	at := len(*l.pending)
	buf, err := frameAll(*l.pending, events)
	if err != nil {
		return err
	}
	*l.pending = buf
	nonData := 0
	for _, e := range events {
		if e.retained() {
			nonData++
		}
	}
	seg := l.segs[len(l.segs)-1]
	if seg.count == 0 {
		seg.first = events[0].Seq
	}
	seg.last = lastSeq
	seg.count += len(events)
	seg.bytes += len(buf) - at
	seg.nonData += nonData
	if len(buf) >= writeBatch {
		return l.flushLocked()
	}
	return nil
}

// flushForReadLocked writes the pending events (to the kernel) before anyone is shown them. A
// failure leaves the log in memory only: the next Append reports it as ErrNotDurable.
func (l *diskLog) flushForReadLocked() {
	if l.broken != nil || l.pending == nil {
		return // reported by the Append that broke it; the log lives on in memory
	}
	if err := l.flushLocked(); err != nil {
		l.broken = err
		l.dropPending()
		l.store.opt.Logger.Warn("live-session store: write an event log", "id", l.id, "err", err)
	}
}

func (l *diskLog) flushLocked() error {
	if l.pending == nil {
		return nil
	}
	buf := *l.pending
	var err error
	if len(buf) > 0 {
		_, err = l.cur.Write(buf)
		l.dirty = true
	}
	l.dropPending()
	if err != nil {
		return fmt.Errorf("write event log: %w", err)
	}
	return nil
}

// dropPending gives the pending buffer back: an idle session keeps none.
func (l *diskLog) dropPending() {
	if l.pending == nil {
		return
	}
	if cap(*l.pending) <= 2*writeBatch {
		*l.pending = (*l.pending)[:0]
		frameBufs.Put(l.pending)
	}
	l.pending = nil
}

// rotate makes sure an open segment with room is there for events from seq on.
func (l *diskLog) rotate(seq uint64) error {
	if l.cur != nil {
		seg := l.segs[len(l.segs)-1]
		if seg.count < max(l.limits.Events/4, 1) && seg.bytes < max(l.limits.Bytes/4, 64<<10) {
			return nil
		}
		if err := l.flushLocked(); err != nil { // what is pending belongs to this segment
			return err
		}
		l.cur = nil // the segment keeps its file until it is synced or dropped
	}
	f, err := os.OpenFile(filepath.Join(l.dir, segmentName(seq)), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode) //nolint:gosec // G304: a name we made
	if err != nil {
		return fmt.Errorf("create event log segment: %w", err)
	}
	l.cur = f
	l.segs = append(l.segs, &segment{first: seq, last: seq - 1, f: f})
	l.dirDirty = true
	return nil
}

// prune drops the segments whose events have all left the in-memory window, saving first the
// pinned events among them.
func (l *diskLog) prune() error {
	first := l.mem.first()
	for len(l.segs) > 1 && l.segs[0].last < first {
		seg := l.segs[0]
		if seg.nonData > 0 {
			if err := l.savePins(seg); err != nil {
				return err
			}
		}
		if err := os.Remove(filepath.Join(l.dir, segmentName(seg.first))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("drop event log segment: %w", err)
		}
		if seg.f != nil { // gone: nothing to sync
			_ = seg.f.Close()
			seg.f = nil
		}
		l.segs = l.segs[1:]
		l.dirDirty = true
	}
	return nil
}

// savePins appends to pinned.log the pinned events that seg holds, and rewrites the file when
// it has grown to twice what the pins hold.
func (l *diskLog) savePins(seg *segment) error {
	var pins []*Event
	for _, e := range l.mem.pinned {
		if e.Seq >= seg.first && e.Seq <= seg.last {
			pins = append(pins, e)
		}
	}
	path := filepath.Join(l.dir, pinnedFile)
	l.pinDirty, l.dirDirty = true, true
	if l.pinCount+len(pins) > 2*max(l.limits.Pinned, 16) {
		b, err := frameAll(nil, l.mem.pinned)
		if err != nil {
			return err
		}
		l.pinCount = len(l.mem.pinned)
		return fsutil.ReplaceFile(path, b)
	}
	if len(pins) == 0 {
		return nil
	}
	b, err := frameAll(nil, pins)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode) //nolint:gosec // G304: a name we made
	if err != nil {
		return fmt.Errorf("open pinned events: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write pinned events: %w", err)
	}
	l.pinCount += len(pins)
	return nil
}

func frameAll(b []byte, events []*Event) ([]byte, error) {
	for _, e := range events {
		at := len(b)
		b = append(b, make([]byte, frameHeader)...)
		var err error
		if b, err = e.AppendBinary(b); err != nil {
			return nil, err
		}
		body := b[at+frameHeader:]
		binary.LittleEndian.PutUint32(b[at:], uint32(len(body)))
		binary.LittleEndian.PutUint32(b[at+4:], crc32.Checksum(body, crcTable))
	}
	return b, nil
}

// writeReservation records that sequence numbers up to n may be handed out. When durable is
// set it is synced before it returns: the numbers it covers are about to be used.
func (l *diskLog) writeReservation(n uint64, durable bool) error {
	line := fmt.Sprintf("%020d %s", n, l.store.boot)
	line = fmt.Sprintf("%s %08x\n", line, crc32.Checksum([]byte(line), crcTable))
	f, err := os.OpenFile(filepath.Join(l.dir, seqFile), os.O_WRONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, fsutil.FileMode) //nolint:gosec // G304: a name we made
	if err != nil {
		return fmt.Errorf("open sequence reservation: %w", err)
	}
	defer func() { _ = f.Close() }()
	// The line has a fixed length, so it is overwritten in place: one sector, never torn
	// into two valid lines.
	if _, err := f.WriteAt([]byte(line), 0); err != nil {
		return fmt.Errorf("write sequence reservation: %w", err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync sequence reservation: %w", err)
		}
		if err := fsutil.SyncDir(l.dir); err != nil {
			return err
		}
	}
	l.reserved = n
	return nil
}

// readReservation returns the reservation and the boot it was made in; ok is false when the
// file is missing or torn.
func readReservation(dir string) (n uint64, boot string, ok bool) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, seqFile))
	if err != nil {
		return 0, "", false
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, "", false
	}
	line := f[0] + " " + f[1]
	if fmt.Sprintf("%08x", crc32.Checksum([]byte(line), crcTable)) != f[2] {
		return 0, "", false
	}
	n, err = strconv.ParseUint(f[0], 10, 64)
	return n, f[1], err == nil
}

// LastSeq implements EventLog. A finished log that cannot be read has 0: its reads report why.
func (l *diskLog) LastSeq(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cold {
		l.flushForReadLocked() // nobody learns a number whose event is not written
		return l.mem.LastSeq(ctx)
	}
	if !l.haveLast {
		mem, err := l.store.coldRead(l)
		if err != nil {
			return 0, nil
		}
		last, _ := mem.LastSeq(ctx)
		l.last, l.haveLast = last, true
	}
	return l.last, nil
}

// lastKnown reports whether LastSeq answers without reading the log's files.
func (l *diskLog) lastKnown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.cold || l.haveLast
}

// Read implements EventLog.
func (l *diskLog) Read(ctx context.Context, after uint64, limit int) (Page, error) {
	l.mu.Lock()
	if !l.cold {
		// The read is in memory, under the lock an append takes: no reader sees an event that
		// is not written.
		defer l.mu.Unlock()
		l.flushForReadLocked()
		return l.mem.Read(ctx, after, limit)
	}
	l.mu.Unlock()
	// A finished log's events no longer change.
	mem, err := l.store.coldRead(l)
	if err != nil {
		return Page{}, err
	}
	return mem.Read(ctx, after, limit)
}

// Wait implements EventLog.
func (l *diskLog) Wait(ctx context.Context, after uint64) error {
	l.mu.Lock()
	mem := l.mem
	done := l.cold || l.closed
	l.mu.Unlock()
	if done {
		return nil
	}
	return mem.Wait(ctx, after)
}

// Close implements EventLog: the session has ended. The flusher syncs what it wrote with
// everything else (closing a thousand sessions at a shutdown must not cost a thousand rounds
// of fsyncs), then lets go of its files and its events: from then on (within a SyncInterval)
// they are read from the files. Readers still streaming the session when it closed read its
// last events from memory meanwhile.
func (l *diskLog) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.broken == nil && l.pending != nil {
		if err = l.flushLocked(); err != nil {
			l.broken = err
			l.dropPending()
			err = fmt.Errorf("%w: session %s: %w", ErrNotDurable, l.id, err)
		}
	}
	l.closed = true
	if l.mem != nil {
		_ = l.mem.Close(ctx) // wakes its waiting readers
	}
	return err
}

// goColdLocked drops the events of a finished log whose files hold all it does. A broken log
// holds events its files lack, and a volatile one its data events: those keep answering from
// memory.
func (l *diskLog) goColdLocked() {
	if l.cold || !l.closed || l.broken != nil || l.limits.VolatileData {
		return
	}
	l.last, l.haveLast = l.mem.last, true
	l.cold, l.mem = true, nil
}

// coldCacheBytes bounds the decoded events of finished logs that a store keeps after reading
// them (always the last one read, however big): a reader paging through a closed session, or a
// few readers of small ones, decode each log once, and the store's memory stays bounded however
// many closed sessions it keeps.
const coldCacheBytes = 8 << 20

// coldEvents is a finished log's events decoded from its files.
type coldEvents struct {
	log  *diskLog
	mem  *MemoryLog
	size int
}

// coldRead returns the events of the finished log l, decoded from its files (or kept from an
// earlier read). The events are immutable, so a page handed out stays valid after they leave
// the cache.
func (s *DiskStore) coldRead(l *diskLog) (*MemoryLog, error) {
	s.recentMu.Lock()
	for i, r := range s.recent {
		if r.log == l {
			s.recent = append(append(s.recent[:i:i], s.recent[i+1:]...), r) // the newest last
			s.recentMu.Unlock()
			return r.mem, nil
		}
	}
	s.recentMu.Unlock()
	// Decoded outside the lock: a big log must not hold up reads of the others.
	tmp := &diskLog{store: s, id: l.id, dir: l.dir, mem: NewMemoryLog(l.limits), limits: l.limits}
	if err := tmp.load(s.boot, true); err != nil {
		return nil, fmt.Errorf("read the events of session %s: %w", l.id, err)
	}
	s.recentMu.Lock()
	defer s.recentMu.Unlock()
	for _, r := range s.recent {
		if r.log == l { // another reader decoded it meanwhile
			return r.mem, nil
		}
	}
	s.recent = append(s.recent, &coldEvents{log: l, mem: tmp.mem, size: tmp.mem.heldBytes()})
	total := 0
	for _, r := range s.recent {
		total += r.size
	}
	for len(s.recent) > 1 && total > coldCacheBytes {
		total -= s.recent[0].size
		s.recent[0] = nil
		s.recent = s.recent[1:]
	}
	return tmp.mem, nil
}

// forgetRecent drops l's decoded events, if the store keeps them.
func (s *DiskStore) forgetRecent(l *diskLog) {
	s.recentMu.Lock()
	s.recent = slices.DeleteFunc(s.recent, func(r *coldEvents) bool { return r.log == l })
	s.recentMu.Unlock()
}

// decodedLogs is how many times a log was decoded from its files.
func (s *DiskStore) decodedLogs() int { return int(s.decoded.Load()) }

// heldLogs counts the logs whose events the store holds in memory: the open (hot) ones, closed
// ones the flusher has not let go of yet included, and the finished ones kept from a read.
func (s *DiskStore) heldLogs() (hot, recent int) {
	s.mu.Lock()
	for _, l := range s.logs {
		l.mu.Lock()
		if !l.cold {
			hot++
		}
		l.mu.Unlock()
	}
	s.mu.Unlock()
	s.recentMu.Lock()
	recent = len(s.recent)
	s.recentMu.Unlock()
	return hot, recent
}

// sync makes what l wrote durable.
func (l *diskLog) sync() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	var errs []error
	if l.broken == nil {
		if err := l.flushLocked(); err != nil {
			l.broken = err
			l.dropPending()
			errs = append(errs, fmt.Errorf("session %s: %w", l.id, err))
		}
	}
	var files, retired []*os.File
	if l.dirty && l.cur != nil {
		files = append(files, l.cur)
	}
	for _, seg := range l.segs {
		if seg.f != nil && seg.f != l.cur {
			retired = append(retired, seg.f)
			seg.f = nil
		}
	}
	record, dir, pin := l.recordDirty, l.dirDirty, l.pinDirty
	l.dirty, l.recordDirty, l.dirDirty, l.pinDirty = false, false, false, false
	closed := l.closed
	l.mu.Unlock()

	for _, f := range append(retired, files...) {
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, fmt.Errorf("sync %s: %w", f.Name(), err))
		}
	}
	for _, f := range retired {
		_ = f.Close()
	}
	for name, ok := range map[string]bool{recordFile: record, pinnedFile: pin} {
		if ok {
			errs = append(errs, syncFile(filepath.Join(l.dir, name)))
		}
	}
	if dir {
		errs = append(errs, fsutil.SyncDir(l.dir))
	}
	if closed {
		l.releaseFiles()
		l.mu.Lock()
		l.goColdLocked()
		l.mu.Unlock()
	}
	return errors.Join(errs...)
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0) //nolint:gosec // G304: a name we made
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// releaseFiles closes the open files of a finished log (it is read from memory from now on).
func (l *diskLog) releaseFiles() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, seg := range l.segs {
		if seg.f != nil {
			_ = seg.f.Close()
			seg.f = nil
		}
	}
	l.cur = nil
	l.dropPending()
}

// release closes l's files without syncing (the store is done with the session).
func (l *diskLog) release() {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	l.closed = true
	l.broken = errors.New("the store has let go of this log")
	l.mu.Unlock()
	l.releaseFiles()
}

// load reads what the session's directory holds into the in-memory log. The newest contiguous
// run of events becomes the ring; the non-data events before it are pinned. A restore drops
// a segment that cannot be trusted; a read (readOnly, of a finished log) skips it.
func (l *diskLog) load(boot string, readOnly bool) error {
	l.store.decoded.Add(1)
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", l.dir, err)
	}
	var names []string
	for _, de := range entries {
		if segmentRe.MatchString(de.Name()) && de.Type().IsRegular() {
			names = append(names, de.Name())
		}
	}
	slices.Sort(names) // zero-padded: the order of their first sequence numbers
	var run, pins []*Event
	var last uint64
	for _, name := range names {
		first, _ := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		events, err := readFrames(filepath.Join(l.dir, name), l.id)
		if err != nil {
			return err
		}
		if first == 0 || len(events) == 0 || events[0].Seq != first {
			// Nothing in it can be trusted (a segment created just before a crash, or not
			// ours); its name would also stand in the way of the next one.
			if readOnly {
				continue
			}
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return fmt.Errorf("drop empty event log segment: %w", err)
			}
			continue
		}
		seg := &segment{first: first, last: first - 1}
		for _, e := range events {
			if e.Seq <= last && last > 0 {
				break // out of order: nothing after it is trusted
			}
			if len(run) > 0 && e.Seq != run[len(run)-1].Seq+1 {
				for _, d := range run { // a gap: what came before it is history
					if d.retained() {
						pins = append(pins, d)
					}
				}
				run = run[:0]
			}
			run = append(run, e)
			last = e.Seq
			seg.last = e.Seq
			seg.count++
			if e.retained() {
				seg.nonData++
			}
		}
		l.segs = append(l.segs, seg)
	}
	saved, err := readFrames(filepath.Join(l.dir, pinnedFile), l.id)
	if err != nil {
		return err
	}
	pins = append(pins, saved...)
	start := last + 1
	if len(run) > 0 {
		start = run[0].Seq
	}
	pins = slices.DeleteFunc(pins, func(e *Event) bool { return e.Seq >= start })
	slices.SortStableFunc(pins, func(a, b *Event) int { return cmpSeq(a.Seq, b.Seq) })
	pins = slices.CompactFunc(pins, func(a, b *Event) bool { return a.Seq == b.Seq })
	l.pinCount = len(saved)

	// After a reboot, numbers up to the reservation may have been seen by readers even though
	// the events were lost with the page cache: continue after them.
	next := last
	if n, rboot, ok := readReservation(l.dir); ok {
		l.reserved = n
		_, verr := os.Lstat(filepath.Join(l.dir, volatileFile))
		if rboot != boot || verr == nil {
			next = max(next, n)
		}
	} else {
		next = last + seqBlock
		l.reserved = next
	}
	l.mem.restore(pins, run, next)
	return nil
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readFrames reads the records of a log file up to the first one that is torn or corrupt (the
// tail of a write a crash cut short). A missing file holds nothing.
func readFrames(path, id string) ([]*Event, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0) //nolint:gosec // G304: a name we listed
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var out []*Event
	for len(data) >= frameHeader {
		n := binary.LittleEndian.Uint32(data)
		sum := binary.LittleEndian.Uint32(data[4:])
		if n > maxFrame || int(n) > len(data)-frameHeader {
			break
		}
		body := data[frameHeader : frameHeader+int(n)]
		if crc32.Checksum(body, crcTable) != sum {
			break
		}
		e, err := UnmarshalEvent(id, body)
		if err != nil {
			break
		}
		out = append(out, e)
		data = data[frameHeader+int(n):]
	}
	return out, nil
}
