package process

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/abi"
)

// Streams of a line.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	// StreamStatus marks a status line: the process started, ended, restarted.
	StreamStatus = "status"
)

// MaxLine cuts longer lines into pieces, so a process that writes no newline cannot make the
// gateway hold an unbounded line.
const MaxLine = 64 << 10

// Line is one line of a process's output (or a status change), numbered for its followers.
type Line struct {
	// Seq numbers the process's lines from 1, across its runs: a follower resumes after one.
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Text   string `json:"line"`
	// Offset is where the line starts among all the bytes its stream ever wrote (its files
	// rotate; the offset goes on).
	Offset int64 `json:"offset"`
	Time   int64 `json:"time"`
	// Level is a gateway log line's level.
	Level string `json:"level,omitempty"`
	// chunk holds the lines the capture added with this one, idx is this one's place in it.
	chunk *Chunk
	idx   int32
}

// Chunk is the lines of a process's stream that the capture added together, and their
// encoding as a debug stream's log-line payloads (abi.LogLine): one run of JSON objects
// separated by commas, so consecutive lines are one slice of it, a batch as it goes out. The
// first follower that wants it encodes it, once, for every other: the capture does not pay
// for it, and it runs on the followers' CPUs.
type Chunk struct {
	once   sync.Once
	stream string
	text   string // the lines as the stream wrote them, newlines included
	base   int64  // the stream offset of text
	run    []byte
	ends   []int32 // where each line's object ends in run
}

// encode fills run and ends, once.
func (c *Chunk) encode() {
	c.once.Do(func() {
		run := make([]byte, 0, len(c.text)+len(c.text)/8+64*strings.Count(c.text, "\n")+64)
		text, off := c.text, c.base
		for text != "" {
			line := nextLine(text)
			text = text[len(line):]
			if len(run) > 0 {
				run = append(run, ',')
			}
			run = abi.LogLine{Type: abi.PayloadLogLine, Stream: c.stream, Line: trimLine(line), Offset: off}.AppendJSON(run)
			c.ends = append(c.ends, int32(len(run)))
			off += int64(len(line))
		}
		c.run = run
	})
}

// Encoded returns l as a log-line payload: run[at:end] is its JSON object, and consecutive
// lines of one chunk follow one another in run, a comma apart. ok is false for a line that is
// not in a chunk (a status line, a journal's).
func (l *Line) Encoded() (run []byte, at, end int, ok bool) {
	c := l.chunk
	if c == nil {
		return nil, 0, 0, false
	}
	c.encode()
	if int(l.idx) > 0 {
		at = int(c.ends[l.idx-1]) + 1
	}
	return c.run, at, int(c.ends[l.idx]), true
}

// SameChunk reports whether l and m were added together (so m may follow l in one run).
func (l *Line) SameChunk(m *Line) bool { return l.chunk != nil && l.chunk == m.chunk }

// nextLine is the first line of text with its newline, or its first MaxLine bytes when the
// line is longer (the rest comes as more pieces).
func nextLine(text string) string {
	if i := strings.IndexByte(text, '\n'); i >= 0 && i < MaxLine {
		return text[:i+1]
	}
	return text[:min(len(text), MaxLine)]
}

func trimLine(line string) string {
	return strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
}

// ring keeps the recent lines of a process and wakes its followers. Followers that registered
// a cursor hold the capture back: while one is more than half a ring behind, adding waits (the
// process then blocks on its full pipe, as a program behind a slow terminal does) for at most
// MaxStall without progress of that cursor, after which it is released until it catches up.
// So a session that keeps up loses nothing, and a stuck one cannot stall the process for
// long. A cursor held (Hold) is waited for without a clock: its session is busy delivering
// what it read, under a flow control of its own that bounds the wait.
type ring struct {
	mu      sync.Mutex
	lines   []Line // circular, len = capacity
	next    uint64 // the next line's seq (lines next-n .. next-1 are kept)
	n       int
	offsets map[string]int64
	wake    chan struct{} // closed and replaced at each append
	cursors map[*Cursor]struct{}
	room    chan struct{} // closed and replaced when a cursor advances
	// maxStall is how long the capture waits for a cursor that makes no progress.
	maxStall time.Duration
}

// MaxStall is how long the capture waits for a cursor that makes no progress (by default).
const MaxStall = time.Second

func newRing(capacity int, maxStall time.Duration) *ring {
	if maxStall <= 0 {
		maxStall = MaxStall
	}
	return &ring{lines: make([]Line, capacity), next: 1, offsets: map[string]int64{}, wake: make(chan struct{}),
		cursors: map[*Cursor]struct{}{}, room: make(chan struct{}), maxStall: maxStall}
}

// Cursor is a follower of a process's lines whose progress the capture waits for.
type Cursor struct {
	r        *ring
	pos      uint64 // read so far (the reader's own)
	acked    uint64 // delivered, under r.mu
	released bool   // under r.mu: too slow, no longer waited for
	held     bool   // under r.mu: delivering, waited for without a clock (Hold)
	buf      []Line // what Read returns, reused
}

// behindLocked reports whether c holds the capture back.
func (r *ring) behindLocked(c *Cursor) bool {
	return !c.released && r.next-1-c.acked > uint64(len(r.lines)/2)
}

// cursorStall is a cursor the capture waits for: where it was and since when it has not moved
// (or has been held).
type cursorStall struct {
	acked uint64
	since time.Time
	held  bool // at the last look
}

// waitRoom blocks the capture while a cursor is too far behind. Each cursor has a clock of its
// own, from the start of the wait or its last progress (others' progress does not reset it),
// and is released after maxStall without progress. A held cursor is waited for without one:
// its clock starts when it is let go.
func (r *ring) waitRoom() {
	var (
		timer  *time.Timer
		clocks map[*Cursor]cursorStall
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.Lock()
		now := time.Now()
		var next time.Time // the earliest release to come
		waiting := false   // for a cursor too far behind, held or not yet released
		for c := range r.cursors {
			if !r.behindLocked(c) {
				continue
			}
			if clocks == nil {
				clocks = map[*Cursor]cursorStall{}
			}
			st, ok := clocks[c]
			if !ok || c.acked != st.acked || c.held || st.held { // new, moved, held or just let go
				st = cursorStall{acked: c.acked, since: now, held: c.held}
				clocks[c] = st
			}
			if c.held {
				waiting = true
				continue
			}
			at := st.since.Add(r.maxStall)
			if !now.Before(at) {
				c.released = true
				continue
			}
			waiting = true
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		room := r.room
		r.mu.Unlock()
		if !waiting {
			return
		}
		var expired <-chan time.Time
		if !next.IsZero() {
			if timer == nil {
				timer = time.NewTimer(next.Sub(now))
			} else {
				timer.Reset(next.Sub(now))
			}
			expired = timer.C
		}
		select {
		case <-room: // a cursor moved, was let go or went: look again
		case <-expired:
		}
	}
}

// Hold says whether the cursor's reader is at work on what it reads (true) or has stopped
// (false: an interrupted session). While held, the capture waits for it without a clock: a
// debug-stream session delivering lines waits for its own followers under their flow
// control, which lets go of a stalled one within its own bound; releasing the session's
// cursor meanwhile would lose lines for every follower that keeps up.
func (c *Cursor) Hold(on bool) {
	r := c.r
	r.mu.Lock()
	if c.held != on {
		c.held = on
		close(r.room)
		r.room = make(chan struct{})
	}
	r.mu.Unlock()
}

// Read returns the lines after the cursor's position (waiting for one) and moves it on; lost
// says some were overwritten before it read them (it had been released). The slice is the
// cursor's own, valid until the next Read: a flood is read without an allocation per read.
func (c *Cursor) Read(ctx context.Context, limit int) ([]Line, bool, error) {
	lines, lost, err := c.r.read(ctx, c.pos, limit, c.buf[:0])
	c.buf = lines[:0]
	if len(lines) > 0 {
		c.pos = lines[len(lines)-1].Seq
	}
	return lines, lost, err
}

// Ack says every line up to seq is delivered: the capture may go on.
func (c *Cursor) Ack(seq uint64) {
	r := c.r
	r.mu.Lock()
	if seq > c.acked {
		c.acked = seq
		if c.released && !r.behindLocked(&Cursor{acked: seq}) {
			c.released = false // caught up: waited for again
		}
		close(r.room)
		r.room = make(chan struct{})
	}
	r.mu.Unlock()
}

// Close unregisters the cursor.
func (c *Cursor) Close() {
	r := c.r
	r.mu.Lock()
	delete(r.cursors, c)
	close(r.room)
	r.room = make(chan struct{})
	r.mu.Unlock()
}

func (r *ring) cursor(after uint64) *Cursor {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Cursor{r: r, pos: after, acked: after}
	r.cursors[c] = struct{}{}
	return c
}

func (r *ring) add(stream, text string, size int64, now time.Time) {
	r.addLevel(stream, text, "", size, now)
}

func (r *ring) addLevel(stream, text, level string, size int64, now time.Time) {
	r.mu.Lock()
	l := Line{Seq: r.next, Stream: stream, Text: text, Offset: r.offsets[stream], Time: now.UnixMilli(), Level: level}
	r.offsets[stream] += size
	r.lines[int(r.next%uint64(len(r.lines)))] = l
	r.next++
	r.n = min(r.n+1, len(r.lines))
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// offset is where stream's next line starts.
func (r *ring) offset(stream string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.offsets[stream]
}

// addLines appends lines of one stream (their Offset set from the stream's, Seq unset) as one
// step: one lock and one wake-up for all of them; size is the bytes they took in the stream.
func (r *ring) addLines(stream string, lines []Line, size int64) {
	r.mu.Lock()
	for _, l := range lines {
		l.Seq = r.next
		r.lines[int(r.next%uint64(len(r.lines)))] = l
		r.next++
	}
	r.n = min(r.n+len(lines), len(r.lines))
	r.offsets[stream] += size
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

func (r *ring) status(text string, now time.Time) { r.add(StreamStatus, text, 0, now) }

// read returns up to limit lines after seq after (the oldest kept when after is older) and
// whether lines after it were lost (overwritten before they were read); with none yet, it
// waits until one comes or ctx ends.
func (r *ring) read(ctx context.Context, after uint64, limit int, out []Line) ([]Line, bool, error) {
	for {
		r.mu.Lock()
		first := r.next - uint64(r.n)
		lost := after+1 < first
		start := max(after+1, first)
		if start < r.next {
			end := r.next
			if limit > 0 && end-start > uint64(limit) {
				end = start + uint64(limit)
			}
			if out == nil {
				out = make([]Line, 0, end-start)
			}
			for s := start; s < end; s++ {
				out = append(out, r.lines[int(s%uint64(len(r.lines)))])
			}
			r.mu.Unlock()
			return out, lost, nil
		}
		wake := r.wake
		r.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, false, ctx.Err() //nolint:wrapcheck // the caller's own context
		}
	}
}

// tail is the newest n lines.
func (r *ring) tail(n int) []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, r.n)
	out := make([]Line, 0, n)
	for s := r.next - uint64(n); s < r.next; s++ {
		out = append(out, r.lines[int(s%uint64(len(r.lines)))])
	}
	return out
}

// last is the seq after which the last n lines start.
func (r *ring) last(n int) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n = min(n, r.n)
	return r.next - 1 - uint64(n)
}

// Subscribe registers a cursor on the process's lines, positioned after seq after; the
// capture waits for it (see ring). Close it when the follower goes.
func (m *Manager) Subscribe(ref string, after uint64) (*Cursor, error) {
	p, err := m.get(ref)
	if err != nil {
		return nil, err
	}
	return p.ring.cursor(after), nil
}

// pipeBytes is the capacity asked for a process's output pipes (Linux's default is 64 KiB, and
// what an unprivileged process may ask for is 1 MiB by default): a process that floods its
// output then writes more between two reads of the capture, which takes it in larger chunks.
const pipeBytes = 1 << 20

// growPipe asks for a larger pipe, best effort (through SyscallConn: Fd would make the pipe
// blocking).
func growPipe(r io.Reader) {
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeBytes)
		})
	}
}

// capture reads a stream of the process into its log file and the ring, a read at a time: the
// complete lines of each read are written with one call and added to the ring in steps of at
// most a quarter of it (the capture waits for slow cursors before each), sharing one string and
// one timestamp. A line longer than MaxLine is cut into pieces.
func (p *proc) capture(rd io.Reader, stream string, w *rotating) {
	buf := make([]byte, 4*MaxLine)
	step := max(1, len(p.ring.lines)/4)
	start, end := 0, 0
	for {
		if start > 0 && start == end {
			start, end = 0, 0
		}
		if end == len(buf) && start > 0 { // an unfinished line: move it to the front
			end = copy(buf, buf[start:end])
			start = 0
		}
		n, err := rd.Read(buf[end:])
		end += n
		chunk := buf[start:end]
		cut := bytes.LastIndexByte(chunk, '\n') + 1
		if cut == 0 && (len(chunk) >= MaxLine || err != nil) {
			cut = min(len(chunk), MaxLine) // a piece of a long line, or the last bytes
		}
		if cut > 0 {
			chunk = chunk[:cut]
			start += cut
			if _, werr := w.write(chunk); werr != nil {
				p.m.opt.Logger.Warn("process log", "process", p.info.ID, "err", werr)
			}
			w.flush()
			p.addChunk(stream, string(chunk), step)
		}
		if err != nil {
			return
		}
	}
}

// addChunk splits text (whole lines, the last maybe without its newline) into the ring, in
// steps; each step is one Chunk.
func (p *proc) addChunk(stream, text string, step int) {
	now := p.m.opt.Now().UnixMilli()
	lines := make([]Line, 0, min(step, strings.Count(text, "\n")+1))
	for text != "" {
		p.ring.waitRoom()
		c := &Chunk{stream: stream, base: p.ring.offset(stream)}
		lines = lines[:0]
		rest := text
		var size int64
		for len(lines) < step && rest != "" {
			line := nextLine(rest)
			rest = rest[len(line):]
			lines = append(lines, Line{Stream: stream, Text: trimLine(line), Offset: c.base + size, Time: now, chunk: c, idx: int32(len(lines))})
			size += int64(len(line))
		}
		c.text, text = text[:len(text)-len(rest)], rest
		p.ring.addLines(stream, lines, size)
	}
}

// Follow returns the process's lines after seq after, waiting for some when there are none;
// lost says lines after it were overwritten in the ring before this call.
func (m *Manager) Follow(ctx context.Context, ref string, after uint64, limit int) ([]Line, bool, error) {
	p, err := m.get(ref)
	if err != nil {
		return nil, false, err
	}
	return p.ring.read(ctx, after, limit, nil)
}

// Tail returns the process's newest n lines (status lines included) without waiting.
func (m *Manager) Tail(ref string, n int) ([]Line, error) {
	p, err := m.get(ref)
	if err != nil {
		return nil, err
	}
	return p.ring.tail(n), nil
}

// Since is the seq after which the process's last n lines start (for Follow).
func (m *Manager) Since(ref string, n int) (uint64, error) {
	p, err := m.get(ref)
	if err != nil {
		return 0, err
	}
	return p.ring.last(n), nil
}

// rotating is a log file rotated by size: name, name.1 (the previous), ... name.keep.
type rotating struct {
	mu   sync.Mutex
	name string
	max  int64
	keep int
	f    *os.File
	bw   *bufio.Writer
	size int64
}

func openRotating(name string, maxBytes int64, keep int) (*rotating, error) {
	r := &rotating{name: name, max: maxBytes, keep: keep}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotating) open() error {
	f, err := os.OpenFile(r.name, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600) //nolint:gosec // G304: the process's own log in its private directory
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return abi.Errorf(abi.CodeInvalidArgument, "", "process log %s is a symbolic link: refused", r.name)
		}
		return fmt.Errorf("process log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("process log: %w", err)
	}
	r.f, r.bw, r.size = f, bufio.NewWriterSize(f, 64<<10), fi.Size()
	return nil
}

// write appends whole lines, rotating between two lines when the next would pass the size (a
// single line longer than the size gets a file of its own).
func (r *rotating) write(lines []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, errors.New("process log closed")
	}
	written := 0
	for len(lines) > 0 {
		part := lines
		if r.size+int64(len(part)) > r.max {
			room := int(max(r.max-r.size, 0))
			cut := bytes.LastIndexByte(part[:min(room, len(part))], '\n') + 1
			if cut == 0 { // not even one line fits: it goes first into a new file
				if r.size > 0 {
					if err := r.rotate(); err != nil {
						return written, err
					}
					continue
				}
				if cut = bytes.IndexByte(part, '\n') + 1; cut == 0 {
					cut = len(part)
				}
			}
			part = part[:cut]
		}
		n, err := r.bw.Write(part)
		r.size += int64(n)
		written += n
		if err != nil {
			return written, fmt.Errorf("process log: %w", err)
		}
		lines = lines[len(part):]
	}
	return written, nil
}

func (r *rotating) rotate() error {
	if err := r.bw.Flush(); err != nil {
		return fmt.Errorf("process log: %w", err)
	}
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("process log: %w", err)
	}
	for i := r.keep - 1; i >= 1; i-- {
		_ = os.Rename(fmt.Sprintf("%s.%d", r.name, i), fmt.Sprintf("%s.%d", r.name, i+1))
	}
	if err := os.Rename(r.name, r.name+".1"); err != nil {
		return fmt.Errorf("process log: %w", err)
	}
	return r.open()
}

func (r *rotating) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bw != nil {
		_ = r.bw.Flush()
	}
}

func (r *rotating) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	ferr := r.bw.Flush()
	err := r.f.Close()
	r.f = nil
	if ferr != nil {
		return fmt.Errorf("process log: %w", ferr)
	}
	if err != nil {
		return fmt.Errorf("process log: %w", err)
	}
	return nil
}
