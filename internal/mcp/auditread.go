package mcp

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

	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// AuditLine is one line of a shell's audit log: a agentshell.AuditRecord as written (redacted).
type AuditLine struct {
	// Seq is the line's number in the log, from 1: stable for as long as the log exists.
	Seq uint64
	// Time is the record's timestamp.
	Time string
	// Event is the record's event (open, exec, block, checkpoint, restore, close...).
	Event string
	// Record is the line's JSON.
	Record json.RawMessage
}

// AuditBatch is what ReadAudit returns.
type AuditBatch struct {
	Lines []AuditLine
	// Next is the sequence to read after next time.
	Next uint64
	// Closed is true once the log's close record has been returned: nothing follows.
	Closed bool
}

// Errors of ReadAudit.
var (
	// ErrNoAudit: the server keeps no audit log (Config.Session.AuditDir is empty).
	ErrNoAudit = errors.New("the audit log is off")
	// ErrBadSessionID: the id could not name a log (a path separator, "." or "..").
	ErrBadSessionID = errors.New("not a session id")
)

// maxAuditBatch bounds the lines of one ReadAudit.
const maxAuditBatch = 512

// ReadAudit returns the lines of shell id's audit log after line after (at most limit, 0
// meaning 512), waiting up to wait for the first one when there is none yet. Any shell with a
// log in the server's audit directory can be read, open or closed, including shells of other
// servers sharing the directory, as `nexus mcp watch` shows them. A log without the line a
// reader asked for (truncated or replaced) is read from its start again. A line that is not a
// record (a torn last write) keeps its number but is skipped.
func (s *Server) ReadAudit(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (AuditBatch, error) {
	dir := s.cfg.Session.AuditDir
	if dir == "" {
		return AuditBatch{}, ErrNoAudit
	}
	if err := checkID(id); err != nil {
		return AuditBatch{}, err
	}
	if limit <= 0 || limit > maxAuditBatch {
		limit = maxAuditBatch
	}
	path := filepath.Join(dir, id+".jsonl")
	var in *os.File
	if wait > 0 {
		// The watch is in place before the read, so a line appended in between wakes the wait.
		var err error
		if in, err = watchFile(path); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return AuditBatch{}, s.unknownShell(id)
			}
			return AuditBatch{}, err
		}
		defer func() { _ = in.Close() }()
	}
	deadline := time.Now().Add(wait)
	for {
		b, err := s.audit.read(path, after, limit)
		if errors.Is(err, fs.ErrNotExist) {
			return AuditBatch{}, s.unknownShell(id)
		}
		if err != nil || len(b.Lines) > 0 || b.Closed || in == nil {
			return b, err
		}
		if !waitChange(ctx, in, deadline) {
			return b, nil
		}
	}
}

// checkID refuses an id that could not name a log in the audit directory.
func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return fmt.Errorf("%w: %q", ErrBadSessionID, id)
	}
	return nil
}

// unknownShell names the audit directory and says where the ids are.
func (s *Server) unknownShell(id string) error {
	return fmt.Errorf("%w %q: no audit log of it in %s (see the open shells with session_list)", ErrUnknownSession, id, s.cfg.Session.AuditDir)
}

// watchFile returns an inotify descriptor, as a pollable file, that becomes readable when
// path is written to or goes away.
func watchFile(path string) (*os.File, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	mask := uint32(unix.IN_MODIFY | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW)
	if _, err := unix.InotifyAddWatch(fd, path, mask); err != nil {
		_ = unix.Close(fd)
		if errors.Is(err, unix.ENOENT) {
			return nil, fs.ErrNotExist
		}
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

// auditCache remembers where each log's next line starts, so a reader following a long log
// does not read it from the start on every poll.
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
func (c *auditCache) read(path string, after uint64, limit int) (AuditBatch, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0) //nolint:gosec // G304: a log of the operator's audit directory, named by a checked id
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return AuditBatch{}, fmt.Errorf("audit log %s is a symbolic link: refused", path)
		}
		return AuditBatch{}, err //nolint:wrapcheck // the caller tells fs.ErrNotExist apart
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return AuditBatch{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return AuditBatch{}, fmt.Errorf("audit log %s is not a regular file", path)
	}
	start := c.get(path)
	if start.seq > after || start.off > fi.Size() {
		start = auditPos{}
	}
	if _, err := f.Seek(start.off, io.SeekStart); err != nil {
		return AuditBatch{}, fmt.Errorf("audit log %s: %w", path, err)
	}
	b := AuditBatch{Next: after}
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
		b.Lines = append(b.Lines, AuditLine{Seq: seq, Time: head.Time, Event: head.Event, Record: append(json.RawMessage(nil), rec...)})
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

// ErrShellClosed is returned by Shell for a shell that is no longer open but whose audit log
// is still there.
var ErrShellClosed = errors.New("shell closed")

// Shell describes the open shell id as session_list does. For a shell that is not open it
// returns ErrShellClosed when its audit log exists (with the reason of its close record when
// it has one), else ErrUnknownSession.
func (s *Server) Shell(id string) (agentshell.Info, error) {
	for _, in := range s.mgr.List() {
		if in.SessionID == id {
			return in, nil
		}
	}
	if s.cfg.Session.AuditDir == "" {
		return agentshell.Info{}, s.unknownShell(id)
	}
	if err := checkID(id); err != nil {
		return agentshell.Info{}, err
	}
	tail, err := readTail(filepath.Join(s.cfg.Session.AuditDir, id+".jsonl"), maxAuditLine)
	if err != nil {
		return agentshell.Info{}, s.unknownShell(id)
	}
	var rec agentshell.AuditRecord
	if json.Unmarshal(lastLine(tail), &rec) == nil && rec.Event == "close" {
		return agentshell.Info{}, fmt.Errorf("%w: shell %q was closed (%s) at %s; its audit log is still readable", ErrShellClosed, id, rec.Reason, rec.Time)
	}
	return agentshell.Info{}, fmt.Errorf("%w: shell %q is not open here (its audit log has no close record: another server's shell, or one whose server died); its audit log is still readable", ErrShellClosed, id)
}
