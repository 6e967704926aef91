package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Line is one line of a shell's audit log: a Record as written (redacted).
type Line struct {
	// Seq is the line's number in the log, from 1: stable for as long as the log exists.
	Seq uint64
	// Time is the record's timestamp.
	Time string
	// Event is the record's event (open, exec, block, checkpoint, restore, close...).
	Event string
	// Record is the line's JSON.
	Record json.RawMessage
}

// Batch is what Read returns.
type Batch struct {
	Lines []Line
	// Next is the sequence to read after next time.
	Next uint64
	// Closed is true once the log's close record has been returned: nothing follows.
	Closed bool
}

// Errors of Read and Last.
var (
	// ErrNoAudit: the reader has no audit directory (the server keeps no audit log).
	ErrNoAudit = errors.New("the audit log is off")
	// ErrBadSessionID: the id could not name a log (a path separator, "." or "..").
	ErrBadSessionID = errors.New("not a session id")
	// ErrUnknownSession: the audit directory holds no log of the session.
	ErrUnknownSession = errors.New("unknown session")
)

// maxBatch bounds the lines of one Read.
const maxBatch = 512

// Reader reads the audit logs of one directory. It remembers where each log's next line
// starts, so a reader following a long log does not read it from the start on every poll.
type Reader struct {
	dir   string
	cache auditCache
}

// NewReader reads the logs in dir; an empty dir means the audit log is off.
func NewReader(dir string) *Reader { return &Reader{dir: dir} }

// Read returns the lines of shell id's audit log after line after (at most limit, 0 meaning
// 512), waiting up to wait for the first one when there is none yet. Any shell with a log in
// the directory can be read, open or closed, including shells of other servers sharing the
// directory, as `nexus mcp watch` shows them. A log without the line a reader asked for
// (truncated or replaced) is read from its start again. A line that is not a record (a torn
// last write) keeps its number but is skipped.
func (r *Reader) Read(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (Batch, error) {
	if r.dir == "" {
		return Batch{}, ErrNoAudit
	}
	if err := checkID(id); err != nil {
		return Batch{}, err
	}
	if limit <= 0 || limit > maxBatch {
		limit = maxBatch
	}
	path := filepath.Join(r.dir, id+".jsonl")
	var in *os.File
	if wait > 0 {
		// The watch is in place before the read, so a line appended in between wakes the wait.
		var err error
		if in, err = watchFile(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return Batch{}, r.unknown(id)
			}
			return Batch{}, err
		}
		defer func() { _ = in.Close() }()
	}
	deadline := time.Now().Add(wait)
	for {
		b, err := r.cache.read(path, after, limit)
		if errors.Is(err, fs.ErrNotExist) {
			return Batch{}, r.unknown(id)
		}
		if err != nil || len(b.Lines) > 0 || b.Closed || in == nil {
			return b, err
		}
		if !waitChange(ctx, in, deadline) {
			return b, nil
		}
	}
}

// Last returns the record of the last line of shell id's audit log, the zero Record when that
// line is not one (a torn write). A shell without a log, or a reader without a directory,
// is ErrUnknownSession.
func (r *Reader) Last(id string) (Record, error) {
	if r.dir == "" {
		return Record{}, r.unknown(id)
	}
	if err := checkID(id); err != nil {
		return Record{}, err
	}
	tail, err := readTail(filepath.Join(r.dir, id+".jsonl"), maxAuditLine)
	if err != nil {
		return Record{}, r.unknown(id)
	}
	var rec Record
	if json.Unmarshal(lastLine(tail), &rec) != nil {
		return Record{}, nil
	}
	return rec, nil
}

// checkID refuses an id that could not name a log in the audit directory.
func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return fmt.Errorf("%w: %q", ErrBadSessionID, id)
	}
	return nil
}

// unknown names the audit directory and says where the ids are.
func (r *Reader) unknown(id string) error {
	return fmt.Errorf("%w %q: no audit log of it in %s (see the open shells with session_list)", ErrUnknownSession, id, r.dir)
}

// watchFile returns an inotify descriptor, as a pollable file, that becomes readable when
// path is written to or goes away. A missing path is an error that is fs.ErrNotExist.
func watchFile(path string) (*os.File, error) {
	return newInotify(path, unix.IN_MODIFY|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_DONT_FOLLOW)
}

// newInotify watches path for the events of mask. The non-blocking descriptor becomes a
// pollable *os.File: Read waits in the runtime's poller and a read deadline interrupts it.
func newInotify(path string, mask uint32) (*os.File, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, mask); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), "inotify:"+path), nil
}

// waitChange waits for an event on in until deadline or ctx ends; it reports whether one came.
func waitChange(ctx context.Context, in *os.File, deadline time.Time) bool {
	stop := context.AfterFunc(ctx, func() { _ = in.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = in.SetReadDeadline(deadline)
	buf := make([]byte, 4096)
	n, err := in.Read(buf)
	return err == nil && n > 0 && ctx.Err() == nil
}

// auditCache remembers where each log's next line starts.
type auditCache struct {
	mu  sync.Mutex
	pos map[string]auditPos
}

type auditPos struct {
	seq uint64 // lines before off
	off int64
}

// maxCachedLogs bounds the cache; past it, it starts afresh.
const maxCachedLogs = 1024

func (c *auditCache) get(path string) auditPos {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos[path]
}

func (c *auditCache) put(path string, p auditPos) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pos == nil || len(c.pos) >= maxCachedLogs {
		c.pos = map[string]auditPos{}
	}
	if old, ok := c.pos[path]; !ok || p.seq > old.seq {
		c.pos[path] = p
	}
}

// read returns up to limit complete lines after line after.
func (c *auditCache) read(path string, after uint64, limit int) (Batch, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0) //nolint:gosec // G304: a log of the operator's audit directory, named by a checked id
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return Batch{}, fmt.Errorf("audit log %s is a symbolic link: refused", path)
		}
		return Batch{}, err //nolint:wrapcheck // the caller tells fs.ErrNotExist apart
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return Batch{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Batch{}, fmt.Errorf("audit log %s is not a regular file", path)
	}
	start := c.get(path)
	if start.seq > after || start.off > fi.Size() {
		start = auditPos{}
	}
	if _, err := f.Seek(start.off, io.SeekStart); err != nil {
		return Batch{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	b := Batch{Next: after}
	seq, off := start.seq, start.off
	var last []byte // the last complete line scanned
	r := newLineReader(f)
	for {
		line, err := r.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return b, fmt.Errorf("audit log %s: %w", path, err)
		}
		seq++
		off += int64(len(line))
		last = line
		if seq <= after {
			continue
		}
		c.put(path, auditPos{seq: seq, off: off})
		b.Next = seq
		var head struct {
			Time  string `json:"ts"`
			Event string `json:"event"`
		}
		rec := bytes.TrimSpace(line)
		if json.Unmarshal(rec, &head) != nil {
			continue
		}
		b.Lines = append(b.Lines, Line{Seq: seq, Time: head.Time, Event: head.Event, Record: append(json.RawMessage(nil), rec...)})
		if head.Event == "close" {
			// A session's close is its log's last record.
			b.Closed = true
			return b, nil
		}
		if len(b.Lines) >= limit {
			return b, nil
		}
	}
	if len(b.Lines) == 0 && seq > 0 && seq <= after {
		// Nothing new: the reader has every line, the close too if the last line is one.
		if last == nil {
			last, _ = readTail(path, maxAuditLine)
		}
		b.Closed = isClose(last)
	}
	return b, nil
}

// isClose reports whether the last line of data is a close record.
func isClose(data []byte) bool {
	var head struct {
		Event string `json:"event"`
	}
	return json.Unmarshal(lastLine(data), &head) == nil && head.Event == "close"
}

// lastLine is the last line of data, without its newline.
func lastLine(data []byte) []byte {
	data = bytes.TrimRight(data, "\n")
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[i+1:]
	}
	return data
}

// readTail returns up to n bytes of the end of path.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0) //nolint:gosec // G304: see read
	if err != nil {
		return nil, err //nolint:wrapcheck // only success matters to the caller
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err //nolint:wrapcheck // see above
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	_, err = f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err //nolint:wrapcheck // see above
	}
	return buf, nil
}

// lineReader returns the complete lines of a file, each with its newline; an unterminated
// last line (a record being written) is not returned.
type lineReader struct {
	r   io.Reader
	buf []byte
	eof bool
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{r: r} }

// maxAuditLine bounds one line held in memory; a record is far smaller (streams are clipped
// to 8 KB each in the log).
const maxAuditLine = 4 << 20

func (l *lineReader) next() ([]byte, error) {
	for {
		if i := bytes.IndexByte(l.buf, '\n'); i >= 0 {
			line := l.buf[:i+1]
			l.buf = l.buf[i+1:]
			return line, nil
		}
		if l.eof {
			return nil, io.EOF
		}
		if len(l.buf) > maxAuditLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxAuditLine)
		}
		chunk := make([]byte, 64<<10)
		n, err := l.r.Read(chunk)
		l.buf = append(l.buf, chunk[:n]...)
		if errors.Is(err, io.EOF) {
			l.eof = true
		} else if err != nil {
			return nil, err //nolint:wrapcheck // the caller names the file
		}
	}
}
