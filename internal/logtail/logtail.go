// Package logtail follows a log file by name through rotation, for the debug-stream session
// kind, which streams a file nexus does not own to subscribers line by line.
//
// It does what `tail -F` and the log followers of container runtimes get wrong: it neither stops
// at a rotation nor loses the end of the old file, and it never repeats a line, because it
// follows byte offsets in open files rather than timestamps.
//
//   - Rename rotation (logrotate's default: the file is renamed, a new one created at the name,
//     possibly later): the old file stays open and is read to its end for as long as nothing has
//     been written to the new one, since a writer holding the old descriptor still writes there
//     until it reopens the name. Only once the new file has data (the writer has moved to it)
//     is the old one read one last time and left for the new one, which is read from its start.
//   - Copy-truncate rotation (the file is copied to path.1, then truncated in place): seen when
//     the bytes just before the offset read are no longer there (the file is shorter, or was
//     written again past that offset). What was appended after the last read and before the copy
//     is then read from the copy, from the same offset, if path.1 holds the bytes read there, so
//     is a copy of this very file; then the truncated file is read from its start.
//   - Deletion: the deleted file is read to its end and kept open until a new file at the name
//     has data, exactly as for a rename.
//
// A line is only emitted once its newline has been read, except when its file is left (rotated,
// truncated) without one: the partial line is emitted then, as it will never be completed.
package logtail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Line is one line of the followed file.
type Line struct {
	// Text is the line without its newline, and without the \r of a \r\n. A line longer than
	// Options.MaxLine comes as several Lines, each a piece of at most MaxLine bytes (cut before
	// an incomplete UTF-8 sequence where one is at the cut, so that characters stay whole).
	Text string
	// Offset is the byte offset of the line's (or piece's) start in its file.
	Offset int64
	// Gen is the file generation the line belongs to: 0 for the file opened first, one more at
	// each rotation or truncation seen. Offsets compare within a generation only.
	Gen int
}

// Options tune Follow. The zero value follows the lines added after the start, with inotify.
type Options struct {
	// Last is how many complete lines already in the file to start with: at most the last Last
	// lines; 0 starts at the end (at the start of a last line still being written, which then
	// comes whole); -1 starts at the beginning. It applies to a file present when Follow starts:
	// a file that appears later, and every later generation, is read from its beginning.
	Last int
	// MaxLine is the longest piece of a line emitted at once (default 64 KiB): a line without a
	// newline in sight does not grow memory without bound.
	MaxLine int
	// Poll, when positive, is the interval at which to look at the file if inotify cannot be
	// used (no inotify instance or watch left, a directory that may not be watched). Without it,
	// Follow returns that error instead.
	Poll time.Duration
	// Read, when set, is called after the lines of each read of the file have been emitted: a
	// caller that batches lines delivers its batch then, so a burst costs one delivery.
	Read func() error
}

const (
	defaultMaxLine = 64 << 10
	// readSize is the read buffer: the memory a follower takes, besides a partial line.
	readSize = 64 << 10
	// tailWindow is how many bytes before the read offset are remembered to tell that a file was
	// truncated, and that a copy is a copy of it: enough to hold a log line's timestamp or
	// sequence, so that rewritten content is not mistaken for the old.
	tailWindow = 128
	// copySuffix names the copy that copy-truncate rotation makes (logrotate's name for the
	// newest rotated file, without compression or dateext).
	copySuffix = ".1"
)

// Follow calls emit with every complete line of the file at path, in order, through rotations
// and truncations (see the package comment), until ctx ends (it returns nil) or emit returns an
// error (returned as is). It waits, with inotify, for a file that is missing (or whose directory
// is), and for a new file after a deletion. Other errors are returned: the path names a
// directory or is not readable, inotify is unavailable and Options.Poll is not set.
//
// The path may be a symlink: it is followed, as its user expects, at every open, and the
// directories of the link and of its targets are watched, so the rotation of a target is seen.
//
// What no follower can do is not done either: a file that is truncated and rewritten to the very
// bytes read before, a generation created and rotated away entirely between two looks (before it
// was ever opened), and lines written to the old file after the new one received data, are not
// seen; copy-truncate loses what is written between the copy and the truncation (it is in neither
// file), and lines written after the copy but before a read, when there is no path.1 copy.
func Follow(ctx context.Context, path string, opts Options, emit func(Line) error) error {
	return follow(ctx, path, opts, emit, unix.InotifyInit1)
}

// follow is Follow with the inotify constructor as a parameter, so tests can take it away.
func follow(ctx context.Context, path string, opts Options, emit func(Line) error, inotifyInit func(int) (int, error)) error {
	if opts.MaxLine <= 0 {
		opts.MaxLine = defaultMaxLine
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("follow %s: %w", path, err)
	}
	t := &follower{
		ctx: ctx, path: abs, opts: opts, emit: emit, inotifyInit: inotifyInit,
		atStart: true, dirty: true, lookPath: true, buf: make([]byte, readSize),
	}
	err = t.run()
	t.close()
	switch {
	case t.emitErr != nil:
		return t.emitErr
	case ctx.Err() != nil:
		return nil
	}
	return err
}

// follower is the state of one Follow.
type follower struct {
	ctx         context.Context
	path        string // absolute, so that a missing directory's ancestors can be watched
	opts        Options
	emit        func(Line) error
	inotifyInit func(int) (int, error)

	// cur is the generation being read; nil until the file first exists. next is the file at
	// the path once it is no longer cur: it is switched to when it has data (see look).
	cur, next *logFile
	gen       int
	atStart   bool // no look at the path yet: Options.Last applies to a file found now

	buf     []byte
	scratch [tailWindow]byte
	pending []byte // a partial line: read, but its newline not yet
	pendOff int64  // pending's offset in cur

	w       *watcher
	polling bool // inotify is not available: look every Options.Poll
	dirty   bool // the watches do not match the open files and the path: set them up again
	// lookPath: something may have changed at the path (not just data written to cur), so look
	// at it. A follower woken by nothing but writes to cur skips that stat.
	lookPath bool
	emitErr  error
}

// run brings the follower up to date, waits for a change, and again, until an error.
func (t *follower) run() error {
	for {
		if err := t.step(); err != nil {
			return err
		}
		if t.dirty && !t.polling {
			// A change between the last look and the new watches would go unnoticed: look again
			// once they are in place.
			t.dirty, t.lookPath = false, true
			if err := t.arm(); err != nil {
				return err
			}
			continue
		}
		if err := t.wait(); err != nil {
			return err
		}
	}
}

// step opens the file once it exists, reads what was appended, and moves past rotations and
// truncations, until there is nothing left to do before the next change.
func (t *follower) step() error {
	if t.cur == nil {
		lf, err := openLog(t.path)
		if err != nil {
			if isNotExist(err) {
				t.atStart = false
				return nil
			}
			return err
		}
		if t.atStart {
			t.position(lf)
		}
		t.atStart = false
		t.cur, t.dirty = lf, true
	}
	for {
		move := false
		if t.lookPath || t.next != nil {
			t.lookPath = false
			var err error
			if move, err = t.look(); err != nil {
				return err
			}
		}
		if err := t.readCur(); err != nil {
			return err
		}
		if !move {
			return nil
		}
		if err := t.leave(); err != nil {
			return err
		}
		t.cur.close()
		t.cur, t.next = t.next, nil
		t.gen++
		t.dirty, t.lookPath = true, true
	}
}

// position places a file found at the start where Options.Last says.
func (t *follower) position(lf *logFile) {
	fi, err := lf.f.Stat()
	if err != nil {
		return
	}
	off, err := startOffset(lf.f, fi.Size(), t.opts.Last, t.opts.MaxLine, t.buf)
	if err != nil || lf.seekTo(off) != nil {
		// The file changed under the scan (it shrank): its start is a safe place to begin.
		_ = lf.seekTo(0)
	}
}

// look opens the file now at the path, if it is not cur, as next, and reports whether to move on
// to next after cur is read to its end. It looks before that last read, which is what makes the
// switch lossless for a writer that moves from the old file to the new one: once the new file
// has data, the writer has written all it will write to the old file, and the read that follows
// gets it.
func (t *follower) look() (bool, error) {
	fi, statErr := os.Stat(t.path)
	if statErr != nil && !isNotExist(statErr) {
		return false, fmt.Errorf("follow: %w", statErr)
	}
	if t.next != nil {
		if statErr != nil || idOf(fi) != t.next.id {
			// next was rotated away too before it had data: move on along the chain.
			return true, nil
		}
		return hasData(t.next)
	}
	if statErr != nil || idOf(fi) == t.cur.id {
		return false, nil
	}
	lf, err := openLog(t.path)
	if err != nil {
		// Gone again, or not yet readable (logrotate creates the file, then sets its owner and
		// mode, an IN_ATTRIB that wakes the follower): the next change tells.
		if isNotExist(err) || errors.Is(err, fs.ErrPermission) {
			return false, nil
		}
		return false, err
	}
	if lf.id == t.cur.id {
		lf.close()
		return false, nil
	}
	t.next, t.dirty = lf, true
	return hasData(lf)
}

func hasData(lf *logFile) (bool, error) {
	fi, err := lf.f.Stat()
	if err != nil {
		return false, fmt.Errorf("follow: %w", err)
	}
	return fi.Size() > 0, nil
}

// readCur reads cur to its end, first reading a copy-truncate rotation's copy and starting cur
// over when it was truncated.
func (t *follower) readCur() error {
	rewritten, err := t.cur.rewritten(t.scratch[:])
	if err != nil {
		return err
	}
	if rewritten {
		if err := t.readCopy(); err != nil {
			return err
		}
		if err := t.leave(); err != nil {
			return err
		}
		t.gen++
		_ = t.cur.seekTo(0)
	}
	return t.drain(t.cur)
}

// readCopy reads, from the offset cur was read to, the lines that copy-truncate rotation saved
// in the copy before they could be read from cur: the copy is path.1 beside the name cur has (the
// symlink's target when the path is one), or beside the path. A file there is taken for the copy
// only if it holds, just before that offset, the bytes read there from cur.
func (t *follower) readCopy() error {
	names := []string{t.path + copySuffix}
	if real, err := os.Readlink(fdPath(t.cur.f)); err == nil && filepath.IsAbs(real) && real+copySuffix != names[0] {
		names = append([]string{real + copySuffix}, names...)
	}
	for _, name := range names {
		cp, err := openLog(name)
		if err != nil {
			continue
		}
		if cp.id == t.cur.id {
			cp.close()
			continue
		}
		cp.pos, cp.tail, cp.tailN = t.cur.pos, t.cur.tail, t.cur.tailN
		if differs, err := cp.rewritten(t.scratch[:]); err != nil || differs {
			cp.close()
			continue
		}
		err = t.drain(cp)
		cp.close()
		return err
	}
	return nil
}

// leave ends cur's stream: a partial line is emitted, as nothing will complete it.
func (t *follower) leave() error {
	if len(t.pending) == 0 {
		return nil
	}
	err := t.line(t.pending, t.pendOff)
	t.pending = t.pending[:0]
	if err == nil && t.opts.Read != nil {
		if err = t.opts.Read(); err != nil {
			t.emitErr = err
		}
	}
	return err
}

// drain reads lf from its offset to its end, emitting its lines.
func (t *follower) drain(lf *logFile) error {
	for {
		if err := t.ctx.Err(); err != nil {
			return err //nolint:wrapcheck // the caller's own context, told apart by Follow
		}
		n, err := lf.pread(t.buf, lf.pos)
		if err != nil {
			return fmt.Errorf("follow: read %s: %w", lf.f.Name(), err)
		}
		if n > 0 {
			base := lf.pos
			lf.pos += int64(n)
			lf.remember(t.buf[:n])
			if err := t.consume(t.buf[:n], base); err != nil {
				return err
			}
			if t.opts.Read != nil {
				if err := t.opts.Read(); err != nil {
					t.emitErr = err
					return err
				}
			}
		}
		if n < len(t.buf) {
			return nil
		}
	}
}

// consume splits data, read from cur at offset base, into lines, keeping a partial last line.
func (t *follower) consume(data []byte, base int64) error {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(t.pending) == 0 {
				t.pendOff = base
			}
			t.pending = append(t.pending, data...)
			return t.cutPending()
		}
		line, off := data[:i], base
		if len(t.pending) > 0 {
			t.pending = append(t.pending, line...)
			line, off = t.pending, t.pendOff
		}
		if err := t.line(line, off); err != nil {
			return err
		}
		t.pending = t.pending[:0]
		data = data[i+1:]
		base += int64(i) + 1
	}
	return nil
}

// cutPending emits the pieces of a partial line that is longer than MaxLine. It keeps more than
// one byte: were it to keep a lone \r, that \r and the newline after it would make an empty piece.
func (t *follower) cutPending() error {
	start := 0
	for len(t.pending)-start > t.opts.MaxLine+1 {
		c := cut(t.pending[start:], t.opts.MaxLine)
		if err := t.send(t.pending[start:start+c], t.pendOff); err != nil {
			return err
		}
		start += c
		t.pendOff += int64(c)
	}
	if start > 0 {
		t.pending = t.pending[:copy(t.pending, t.pending[start:])]
	}
	return nil
}

// line emits a complete line, in pieces of at most MaxLine bytes.
func (t *follower) line(b []byte, off int64) error {
	b = bytes.TrimSuffix(b, []byte{'\r'})
	for len(b) > t.opts.MaxLine {
		c := cut(b, t.opts.MaxLine)
		if err := t.send(b[:c], off); err != nil {
			return err
		}
		b, off = b[c:], off+int64(c)
	}
	return t.send(b, off)
}

func (t *follower) send(b []byte, off int64) error {
	if err := t.emit(Line{Text: string(b), Offset: off, Gen: t.gen}); err != nil {
		t.emitErr = err
		return err
	}
	return nil
}

// cut returns the length of the next piece of b, at most n bytes: n, or less so as not to end
// the piece inside a UTF-8 sequence (when b is UTF-8 there).
func cut(b []byte, n int) int {
	if len(b) <= n {
		return len(b)
	}
	for c := n; c > 0 && c > n-utf8.UTFMax; c-- {
		if utf8.RuneStart(b[c]) {
			return c
		}
	}
	return n
}

// startOffset returns where to start reading a file of size bytes to get at most its last
// complete lines (last < 0: all of it): after the last+1'th newline from its end. For last = 0,
// the newline is looked for in the last maxLine+1 bytes only: a longer partial line is joined at
// the end, rather than read (in pieces) from its far start.
func startOffset(f io.ReaderAt, size int64, last, maxLine int, buf []byte) (int64, error) {
	if last < 0 {
		return 0, nil
	}
	var lo int64
	if last == 0 {
		lo = max(0, size-int64(maxLine)-1)
	}
	need := last + 1
	for end := size; end > lo; {
		n := min(int64(len(buf)), end-lo)
		chunk := buf[:n]
		if _, err := f.ReadAt(chunk, end-n); err != nil {
			return 0, fmt.Errorf("follow: scan for the last lines: %w", err)
		}
		for {
			i := bytes.LastIndexByte(chunk, '\n')
			if i < 0 {
				break
			}
			if need--; need == 0 {
				return end - n + int64(i) + 1, nil
			}
			chunk = chunk[:i]
		}
		end -= n
	}
	if lo > 0 {
		return size, nil
	}
	return 0, nil
}

// arm sets up the watches afresh: the directories of the path and of its symlinks' targets, and
// the open files. A new inotify instance every time keeps it simple and is cheap, since it only
// happens when the files or directories change.
func (t *follower) arm() error {
	if t.w != nil {
		t.w.close()
		t.w = nil
	}
	var files []*os.File
	for _, lf := range []*logFile{t.cur, t.next} {
		if lf != nil {
			files = append(files, lf.f)
		}
	}
	w, err := newWatcher(t.inotifyInit, watchDirs(t.path), files)
	if err != nil {
		if t.opts.Poll > 0 {
			t.polling = true
			return nil
		}
		return fmt.Errorf("follow %s: %w (Options.Poll would poll instead)", t.path, err)
	}
	t.w = w
	return nil
}

// wait returns after a change (or, polling, after Options.Poll), or with ctx's error.
func (t *follower) wait() error {
	if t.polling {
		timer := time.NewTimer(t.opts.Poll)
		defer timer.Stop()
		select {
		case <-t.ctx.Done():
			return t.ctx.Err() //nolint:wrapcheck // the caller's own context, told apart by Follow
		case <-timer.C:
			t.lookPath = true
			return nil
		}
	}
	ev, err := t.w.wait(t.ctx)
	t.dirty = t.dirty || ev.rearm
	t.lookPath = t.lookPath || ev.names
	return err
}

func (t *follower) close() {
	for _, lf := range []*logFile{t.cur, t.next} {
		if lf != nil {
			lf.close()
		}
	}
	if t.w != nil {
		t.w.close()
	}
}

// watchDirs returns the directories to watch for path: its own, and that of each symlink on the
// way to the file (a dangling one included), so that a rotation of the target is seen too.
func watchDirs(path string) []string {
	dirs := []string{filepath.Dir(path)}
	p := path
	for range 40 { // the kernel's own limit on symlinks followed (ELOOP)
		target, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
		if d := filepath.Dir(p); !containsString(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// logFile is an open generation of the log.
type logFile struct {
	f   *os.File
	fd  int // f's, for pread without os.File.ReadAt's second call to learn of the end
	id  fileID
	pos int64 // bytes read: where the next read starts
	// tail holds the tailN bytes before pos, as read: see rewritten.
	tail  [tailWindow]byte
	tailN int
}

type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is not uint64 on every Linux architecture
	}
	return fileID{}
}

// openLog opens the file at path (following a symlink) for reading. A path that names no file is
// an error that is fs.ErrNotExist; anything but a regular file is refused.
func openLog(path string) (*logFile, error) {
	// O_NONBLOCK: opening a FIFO put at the path must not wait for a writer; it is refused below.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0) //nolint:gosec // G304: following the file its user named is the point
	if err != nil {
		return nil, fmt.Errorf("follow: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("follow: %w", err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("follow %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	return &logFile{f: f, fd: int(f.Fd()), id: idOf(fi)}, nil
}

func (lf *logFile) close() { _ = lf.f.Close() }

// pread reads at off once: fewer bytes than asked for means the end of the file (a regular
// file's read is short only there), which os.File.ReadAt would confirm with a second read.
func (lf *logFile) pread(b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(lf.fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err //nolint:wrapcheck // the caller names the file
		}
		return n, nil
	}
}

// seekTo moves the read offset to off, remembering the bytes before it.
func (lf *logFile) seekTo(off int64) error {
	k := int(min(off, tailWindow))
	if n, err := lf.f.ReadAt(lf.tail[:k], off-int64(k)); n < k {
		lf.pos, lf.tailN = 0, 0
		return fmt.Errorf("follow: %w", err)
	}
	lf.pos, lf.tailN = off, k
	return nil
}

// remember keeps the last bytes read, data having just been read up to pos.
func (lf *logFile) remember(data []byte) {
	if len(data) >= tailWindow {
		lf.tailN = copy(lf.tail[:], data[len(data)-tailWindow:])
		return
	}
	keep := min(lf.tailN, tailWindow-len(data))
	copy(lf.tail[:], lf.tail[lf.tailN-keep:lf.tailN])
	lf.tailN = keep + copy(lf.tail[keep:], data)
}

// rewritten reports whether the bytes before the read offset are no longer those read there:
// the file was truncated (it is shorter now), or truncated and written again past the offset. A
// size check alone would miss the second, and read the new content from the middle.
func (lf *logFile) rewritten(scratch []byte) (bool, error) {
	if lf.tailN == 0 {
		return false, nil
	}
	b := scratch[:lf.tailN]
	n, err := lf.f.ReadAt(b, lf.pos-int64(lf.tailN))
	if n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			return true, nil
		}
		return false, fmt.Errorf("follow: read %s: %w", lf.f.Name(), err)
	}
	return !bytes.Equal(b, lf.tail[:lf.tailN]), nil
}

// fdPath names an open file by its descriptor, which stays the file whatever becomes of its name.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// isNotExist tells a path that names nothing, including one through a component that is now a
// file rather than a directory.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
