package logtail

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/testkit"
)

// collector gathers what a Follow running in the background emits. Its emit can hold on a line
// until released, which keeps the follower from reading further while the test changes files:
// how the tests make "written after the last read" happen on purpose rather than by chance.
type collector struct {
	mu    sync.Mutex
	lines []Line

	hold     string        // the text of the line to hold on, if any
	held     chan struct{} // closed once the follower holds
	release  chan struct{} // closed by the test to let it go on
	holdOnce sync.Once

	done chan struct{} // closed when Follow returned, with err
	err  error
}

func (c *collector) emit(l Line) error {
	c.mu.Lock()
	c.lines = append(c.lines, l)
	c.mu.Unlock()
	if c.hold != "" && l.Text == c.hold {
		c.holdOnce.Do(func() {
			close(c.held)
			<-c.release
		})
	}
	return nil
}

func (c *collector) get() []Line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Line(nil), c.lines...)
}

// lastGen is the generation of the last line received, -1 before any.
func (c *collector) lastGen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) == 0 {
		return -1
	}
	return c.lines[len(c.lines)-1].Gen
}

// startFollow runs Follow on path until the test ends; stop cancels it and returns what it
// returned.
func startFollow(t *testing.T, path string, opts Options, c *collector) (stop func() error) {
	t.Helper()
	return startFollowWith(t, path, opts, c, unix.InotifyInit1)
}

func startFollowWith(t *testing.T, path string, opts Options, c *collector, inotifyInit func(int) (int, error)) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	c.done = make(chan struct{})
	go func() {
		c.err = follow(ctx, path, opts, c.emit, inotifyInit)
		close(c.done)
	}()
	stop = func() error {
		cancel()
		select {
		case <-c.done:
			return c.err
		case <-time.After(testkit.Patience()):
			t.Errorf("Follow did not return within %s of its context's end", testkit.Patience())
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFor waits until cond holds, failing at once should Follow return meanwhile.
func (c *collector) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, what, func() bool {
		select {
		case <-c.done:
			t.Fatalf("Follow returned (%v) while waiting for: %s", c.err, what)
		default:
		}
		return cond()
	})
}

// waitLines waits for at least n lines and returns them all.
func (c *collector) waitLines(t *testing.T, n int) []Line {
	t.Helper()
	var got []Line
	c.waitFor(t, fmt.Sprintf("%d lines", n), func() bool {
		got = c.get()
		return len(got) >= n
	})
	return got
}

// expect waits for want, then checks with a last line written after everything that nothing
// else came (no line repeated, no partial line emitted early).
func (c *collector) expect(t *testing.T, path string, want []Line) {
	t.Helper()
	got := c.waitLines(t, len(want))
	checkLines(t, got, want)
	end := Line{Text: "the end", Gen: want[len(want)-1].Gen}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	end.Offset = fi.Size()
	appendTo(t, path, end.Text+"\n")
	checkLines(t, c.waitLines(t, len(want)+1), append(want, end))
}

func checkLines(t *testing.T, got, want []Line) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("line %d of %d: got %+v, want %+v", i, len(want), got[i], want[i])
		}
	}
	switch {
	case len(got) > len(want):
		t.Fatalf("got %d lines, want %d: more %+v", len(got), len(want), got[len(want):min(len(got), len(want)+5)])
	case len(got) < len(want):
		t.Fatalf("got %d lines, want %d: missing %+v", len(got), len(want), want[len(got):min(len(want), len(got)+5)])
	}
}

// watched reports whether an inotify instance of this process watches the file or directory at
// path: how a test knows that Follow has looked at the path and waits, without sleeping.
func watched(t *testing.T, path string) bool {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:inotify" {
			continue
		}
		info, _ := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		for line := range strings.Lines(string(info)) {
			for _, field := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(field, "ino:"); ok {
					if n, err := strconv.ParseUint(v, 16, 64); err == nil && n == ino {
						return true
					}
				}
			}
		}
	}
	return false
}

func (c *collector) waitWatched(t *testing.T, path string) {
	t.Helper()
	c.waitFor(t, "an inotify watch on "+path, func() bool { return watched(t, path) })
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, f *os.File, s string) {
	t.Helper()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestConsume: the line splitter, fed chunks as reads return them: lines split across reads,
// \r\n, empty lines, partial lines held (and emitted when their file is left), long lines cut
// into MaxLine pieces without splitting a UTF-8 character or leaving an empty piece.
func TestConsume(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxLine int
		chunks  []string
		leave   bool // the file is left after the chunks (rotated away)
		want    []Line
	}{
		{"lines in one read", 0, []string{"a\nbb\n"}, false, []Line{{"a", 0, 0}, {"bb", 2, 0}}},
		{"a line across reads", 0, []string{"he", "llo\nwo", "rld\n"}, false, []Line{{"hello", 0, 0}, {"world", 6, 0}}},
		{"crlf", 0, []string{"a\r\nb\r", "\n"}, false, []Line{{"a", 0, 0}, {"b", 3, 0}}},
		{"a \\r inside stays", 0, []string{"a\rb\n"}, false, []Line{{"a\rb", 0, 0}}},
		{"empty lines", 0, []string{"\n\n"}, false, []Line{{"", 0, 0}, {"", 1, 0}}},
		{"a partial line is held", 0, []string{"a\nb"}, false, []Line{{"a", 0, 0}}},
		{"a partial line is emitted when its file is left", 0, []string{"a\nb"}, true, []Line{{"a", 0, 0}, {"b", 2, 0}}},
		{"a long line is cut", 4, []string{"abcdefghij\n"}, false, []Line{{"abcd", 0, 0}, {"efgh", 4, 0}, {"ij", 8, 0}}},
		{"a long partial line is cut as it grows", 4, []string{"abc", "defg", "hij", "\n"}, false, []Line{{"abcd", 0, 0}, {"efgh", 4, 0}, {"ij", 8, 0}}},
		{"a line of MaxLine bytes is whole", 4, []string{"abcd\n"}, false, []Line{{"abcd", 0, 0}}},
		{"no empty piece from a \\r\\n at the cut", 4, []string{"abcd\r", "\n"}, false, []Line{{"abcd", 0, 0}}},
		{"a UTF-8 character is not split", 4, []string{"ab€c\n"}, false, []Line{{"ab", 0, 0}, {"€c", 2, 0}}},
		{"cut pieces keep their offsets after earlier lines", 3, []string{"x\nabcdefg", "h\n"}, false, []Line{{"x", 0, 0}, {"abc", 2, 0}, {"def", 5, 0}, {"gh", 8, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Line
			f := &follower{opts: Options{MaxLine: tc.maxLine}, emit: func(l Line) error { got = append(got, l); return nil }}
			if f.opts.MaxLine == 0 {
				f.opts.MaxLine = defaultMaxLine
			}
			var off int64
			for _, ch := range tc.chunks {
				if err := f.consume([]byte(ch), off); err != nil {
					t.Fatal(err)
				}
				off += int64(len(ch))
			}
			if tc.leave {
				if err := f.leave(); err != nil {
					t.Fatal(err)
				}
			}
			checkLines(t, got, tc.want)
		})
	}
}

// TestStartOffset: where Options.Last starts, with scan buffers from one byte (every newline at
// a chunk boundary) to the real size.
func TestStartOffset(t *testing.T) {
	for _, tc := range []struct {
		content string
		last    int
		maxLine int
		want    int64
	}{
		{"a\nb\nc\n", -1, 0, 0},
		{"a\nb\nc\n", 0, 0, 6},
		{"a\nb\nc\n", 1, 0, 4},
		{"a\nb\nc\n", 2, 0, 2},
		{"a\nb\nc\n", 3, 0, 0},
		{"a\nb\nc\n", 10, 0, 0},
		{"a\nb\nc\npart", 0, 0, 6}, // the partial line comes whole once completed
		{"a\nb\nc\npart", 2, 0, 2},
		{"no newline yet", 0, 0, 0},
		{"no newline yet", 1, 0, 0},
		{"", 0, 0, 0},
		{"", 3, 0, 0},
		{"a\n" + strings.Repeat("x", 100), 0, 10, 102}, // a long partial line: from the end
		{"a\n" + strings.Repeat("x", 10), 0, 10, 2},    // one of MaxLine bytes: whole
		{"a\n" + strings.Repeat("x", 100), 1, 10, 0},   // lines asked for are looked for anywhere
	} {
		for _, bufSize := range []int{1, 3, readSize} {
			t.Run(fmt.Sprintf("%q last %d buf %d", tc.content, tc.last, bufSize), func(t *testing.T) {
				maxLine := tc.maxLine
				if maxLine == 0 {
					maxLine = defaultMaxLine
				}
				got, err := startOffset(strings.NewReader(tc.content), int64(len(tc.content)), tc.last, maxLine, make([]byte, bufSize))
				if err != nil || got != tc.want {
					t.Fatalf("got %d, %v; want %d", got, err, tc.want)
				}
			})
		}
	}
}

// TestFollowPlain: lines appended in several writes, a line split across writes among them, come
// in order, with their offsets, once each.
func TestFollowPlain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   []Line
	}{
		{"one write", []string{"a\nb\n"}, []Line{{"a", 0, 0}, {"b", 2, 0}}},
		{"a line split across writes", []string{"a\nhel", "lo\nwor", "ld\n"}, []Line{{"a", 0, 0}, {"hello", 2, 0}, {"world", 8, 0}}},
		{"crlf and an empty line", []string{"x\r\n\n", "y\r", "\n"}, []Line{{"x", 0, 0}, {"", 3, 0}, {"y", 4, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.log")
			appendTo(t, path, "")
			c := &collector{}
			startFollow(t, path, Options{Last: -1}, c)
			newlines := 0
			for _, w := range tc.writes {
				appendTo(t, path, w)
				// The follower reads before the next write, so writes are seen apart as a
				// writer's would be; a line's start read without its end is held meanwhile.
				newlines += strings.Count(w, "\n")
				c.waitLines(t, newlines)
			}
			c.expect(t, path, tc.want)
		})
	}
}

// TestFollowLast: Options.Last starts with the last lines of a file present at the start (with a
// partial last line that comes whole once written), then follows what is appended.
func TestFollowLast(t *testing.T) {
	var content strings.Builder
	var old []Line
	for i := range 10 {
		old = append(old, Line{Text: fmt.Sprintf("line %d", i), Offset: int64(content.Len())})
		fmt.Fprintf(&content, "line %d\n", i)
	}
	for _, tc := range []struct {
		name    string
		last    int
		partial bool
		want    []Line
	}{
		{"the last 3", 3, false, old[7:]},
		{"more than there are", 20, false, old},
		{"all", -1, false, old},
		{"none", 0, false, nil},
		{"the last 2 and a partial line", 2, true, old[8:]},
		{"a partial line only", 0, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "app.log")
			text, more := content.String(), "new\n"
			want := append([]Line(nil), tc.want...)
			if tc.partial {
				want = append(want, Line{Text: "partial", Offset: int64(len(text))})
				text += "par"
				more = "tial\n" + more
			}
			want = append(want, Line{Text: "new", Offset: int64(len(content.String()))})
			if tc.partial {
				want[len(want)-1].Offset += int64(len("partial\n"))
			}
			appendTo(t, path, text)
			c := &collector{}
			startFollow(t, path, Options{Last: tc.last}, c)
			c.waitWatched(t, dir) // Follow has looked, and placed itself, before the append
			appendTo(t, path, more)
			c.expect(t, path, want)
		})
	}
}

// TestFollowUnderLoad: a writer appends 10,000 numbered lines as fast as it can, rotating every
// 1,000 lines, and every line is received exactly once, in order, with its generation and its
// offset in its file.
//
// rename: as logrotate does by default, with the logger still writing a few lines to its old
// descriptor after the rename, before it opens the new file.
//
// copytruncate: the file is copied to app.log.1, then truncated; the writer (O_APPEND) goes on at
// the new end at once, so the truncated file is often written past the offset read before the
// follower looks. A line written between the copy and the truncation is in neither file and lost
// by any follower: the writer, the test's own, writes none there. The lines written after the
// follower's last read but before the copy are read from the copy.
//
// Before each rotation the writer waits until the follower reached the generation it rotates:
// a generation created and rotated away again before a follower ever looked (here, 1,000 lines
// later) is invisible to it, and is not what this test is about.
func TestFollowUnderLoad(t *testing.T) {
	const total, perGen, afterRename = 10000, 1000, 3
	for _, mode := range []string{"rename", "copytruncate"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.log")
			open := func() *os.File {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			f := open()
			defer func() { _ = f.Close() }()
			c := &collector{}
			startFollow(t, path, Options{Last: -1}, c)

			var want []Line
			gen, off := 0, int64(0)
			put := func(f *os.File, i int) {
				s := fmt.Sprintf("%05d %s", i, strings.Repeat(string(rune('a'+i%26)), i%41))
				write(t, f, s+"\n")
				want = append(want, Line{Text: s, Offset: off, Gen: gen})
				off += int64(len(s)) + 1
			}
			for i := 0; i < total; {
				if i > 0 && i%perGen == 0 {
					c.waitFor(t, fmt.Sprintf("the follower in generation %d", gen), func() bool { return c.lastGen() >= gen })
					switch mode {
					case "rename":
						if err := os.Rename(path, path+".1"); err != nil {
							t.Fatal(err)
						}
						for range afterRename {
							put(f, i)
							i++
						}
						_ = f.Close()
						f = open()
					case "copytruncate":
						data, err := os.ReadFile(path)
						if err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(path+".1", data, 0o600); err != nil {
							t.Fatal(err)
						}
						if err := os.Truncate(path, 0); err != nil {
							t.Fatal(err)
						}
					}
					gen, off = gen+1, 0
				}
				put(f, i)
				i++
			}
			c.expect(t, path, want)
			if gen != total/perGen-1 || len(want) != total {
				t.Fatalf("the writer made %d generations, %d lines", gen+1, len(want))
			}
		})
	}
}

// TestFollowRotationEdges: the rotations' awkward moments, made to happen on purpose. The
// follower is held inside emit on the line "a" (it has read up to there and no further) while the
// test writes and rotates, then let go.
func TestFollowRotationEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		// rotate runs while the follower holds on "a"; f is the writer's open descriptor.
		rotate func(t *testing.T, path string, f *os.File)
		want   []Line
	}{
		{
			"rename: the old file's end, written after the rename, comes first",
			func(t *testing.T, path string, f *os.File) {
				write(t, f, "b\n")
				rename(t, path, path+".1")
				write(t, f, "c\n") // the logger has not reopened yet
				appendTo(t, path, "n\n")
			},
			[]Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 4, 0}, {"n", 0, 1}},
		},
		{
			"rename: a partial last line is emitted at the switch",
			func(t *testing.T, path string, f *os.File) {
				write(t, f, "tail")
				rename(t, path, path+".1")
				appendTo(t, path, "n\n")
			},
			[]Line{{"a", 0, 0}, {"tail", 2, 0}, {"n", 0, 1}},
		},
		{
			"rename: the new file created empty, the old one written meanwhile",
			// logrotate's create: the new file is there before the logger reopens it.
			func(t *testing.T, path string, f *os.File) {
				rename(t, path, path+".1")
				appendTo(t, path, "")
				write(t, f, "b\n")
				appendTo(t, path, "n\n")
			},
			[]Line{{"a", 0, 0}, {"b", 2, 0}, {"n", 0, 1}},
		},
		{
			"copytruncate: the lines written before the copy are read from the copy",
			func(t *testing.T, path string, f *os.File) {
				write(t, f, "b\nc\n")
				copyTruncate(t, path)
				write(t, f, "d\n")
			},
			[]Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 4, 0}, {"d", 0, 1}},
		},
		{
			"copytruncate: the truncated file written again past the offset read",
			func(t *testing.T, path string, f *os.File) {
				write(t, f, "b\n")
				copyTruncate(t, path)
				write(t, f, "xyzzy\n")
			},
			[]Line{{"a", 0, 0}, {"b", 2, 0}, {"xyzzy", 0, 1}},
		},
		{
			"copytruncate: a partial line in the copy is emitted at the switch",
			func(t *testing.T, path string, f *os.File) {
				write(t, f, "bc")
				copyTruncate(t, path)
				write(t, f, "d\n")
			},
			[]Line{{"a", 0, 0}, {"bc", 2, 0}, {"d", 0, 1}},
		},
		{
			"truncation without a copy",
			func(t *testing.T, path string, f *os.File) {
				if err := os.Truncate(path, 0); err != nil {
					t.Fatal(err)
				}
				write(t, f, "d\n")
			},
			[]Line{{"a", 0, 0}, {"d", 0, 1}},
		},
		{
			"truncation beside a path.1 that is not its copy",
			func(t *testing.T, path string, f *os.File) {
				if err := os.WriteFile(path+".1", []byte("x\nold\nlines\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(path, 0); err != nil {
					t.Fatal(err)
				}
				write(t, f, "d\n")
			},
			[]Line{{"a", 0, 0}, {"d", 0, 1}},
		},
		{
			"deleted, then created again",
			func(t *testing.T, path string, f *os.File) {
				write(t, f, "b\n")
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				write(t, f, "c\n")
				appendTo(t, path, "n\n")
			},
			[]Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 4, 0}, {"n", 0, 1}},
		},
		{
			"two rotations between looks: the middle file, never seen, is passed over",
			func(t *testing.T, path string, f *os.File) {
				rename(t, path, path+".1")
				appendTo(t, path, "")
				rename(t, path, path+".2")
				appendTo(t, path, "n\n")
			},
			[]Line{{"a", 0, 0}, {"n", 0, 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "app.log")
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			c := &collector{hold: "a", held: make(chan struct{}), release: make(chan struct{})}
			startFollow(t, path, Options{Last: -1}, c)
			write(t, f, "a\n")
			select {
			case <-c.held:
			case <-time.After(testkit.Patience()):
				t.Fatal("the follower never emitted the first line")
			}
			tc.rotate(t, path, f)
			close(c.release)
			c.expect(t, path, tc.want)
		})
	}
}

// TestFollowOldFileUntilNewHasData: after a rename, while the new file is empty, the old one is
// still read (the logger writes there until it reopens its file), and the new one, watched, is
// switched to as soon as it has data.
func TestFollowOldFileUntilNewHasData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	c := &collector{}
	startFollow(t, path, Options{Last: -1}, c)
	write(t, f, "a\n")
	c.waitLines(t, 1)
	rename(t, path, path+".1")
	appendTo(t, path, "")
	c.waitWatched(t, path) // the follower holds the new, empty file
	write(t, f, "b\n")
	checkLines(t, c.waitLines(t, 2), []Line{{"a", 0, 0}, {"b", 2, 0}})
	write(t, f, "c\n")
	appendTo(t, path, "n\n")
	c.expect(t, path, []Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 4, 0}, {"n", 0, 1}})
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func copyTruncate(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".1", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
}

// TestFollowAppears: a file missing at the start (or whose directories are) is waited for and
// read from its beginning whatever Options.Last says; deleted, it is waited for again, and a new
// file created empty is read once it is written.
func TestFollowAppears(t *testing.T) {
	for _, sub := range []string{"", "sub/deeper"} {
		t.Run("in "+strconv.Quote(sub), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, sub, "app.log")
			c := &collector{}
			startFollow(t, path, Options{Last: 0}, c)
			c.waitWatched(t, dir)
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			appendTo(t, path, "a\nb\n")
			checkLines(t, c.waitLines(t, 2), []Line{{"a", 0, 0}, {"b", 2, 0}})

			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			appendTo(t, path, "c\n")
			checkLines(t, c.waitLines(t, 3)[2:], []Line{{"c", 0, 1}})

			// Created empty: the follower keeps the deleted file until the new one has data,
			// and learns that it has from a watch on it, not from its directory.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			appendTo(t, path, "")
			c.waitWatched(t, path)
			appendTo(t, path, "d\n")
			c.expect(t, path, []Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 0, 1}, {"d", 0, 2}})
		})
	}
}

// TestFollowSymlink: a path that is a symlink is followed to its target, whose directory is
// watched too: the target's rotations (rename, and copy-truncate with its copy beside the target)
// and a new target are all seen.
func TestFollowSymlink(t *testing.T) {
	t.Parallel()
	linkDir, targetDir := t.TempDir(), t.TempDir()
	path, target := filepath.Join(linkDir, "app.log"), filepath.Join(targetDir, "real.log")
	appendTo(t, target, "")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	c := &collector{hold: "a", held: make(chan struct{}), release: make(chan struct{})}
	startFollow(t, path, Options{Last: -1}, c)
	appendTo(t, target, "a\n")
	select {
	case <-c.held:
	case <-time.After(testkit.Patience()):
		t.Fatal("the follower never emitted the first line")
	}
	appendTo(t, target, "b\n")
	copyTruncate(t, target) // the copy is real.log.1, not app.log.1
	appendTo(t, target, "c\n")
	close(c.release)
	checkLines(t, c.waitLines(t, 3), []Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 0, 1}})

	rename(t, target, target+".1")
	appendTo(t, target, "d\n")
	checkLines(t, c.waitLines(t, 4)[3:], []Line{{"d", 0, 2}})

	other := filepath.Join(targetDir, "other.log")
	appendTo(t, other, "e\n")
	if err := os.Symlink(other, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	rename(t, path+".tmp", path)
	c.expect(t, path, []Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 0, 1}, {"d", 0, 2}, {"e", 0, 3}})
}

// TestFollowEnds: Follow returns nil soon after its context ends, whatever it waits for, and
// returns emit's error as is.
func TestFollowEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) (path, watch string)
	}{
		{"following a file", func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "app.log")
			appendTo(t, p, "a\n")
			return p, dir
		}},
		{"waiting for the file", func(t *testing.T, dir string) (string, string) {
			return filepath.Join(dir, "app.log"), dir
		}},
		{"waiting for its directory", func(t *testing.T, dir string) (string, string) {
			return filepath.Join(dir, "missing", "app.log"), dir
		}},
	} {
		t.Run("cancel while "+tc.name, func(t *testing.T) {
			t.Parallel()
			path, watch := tc.setup(t, t.TempDir())
			c := &collector{}
			stop := startFollow(t, path, Options{}, c)
			c.waitWatched(t, watch)
			begin := time.Now()
			if err := stop(); err != nil {
				t.Fatalf("Follow returned %v at its context's end, want nil", err)
			}
			t.Logf("returned %s after the cancel", time.Since(begin))
		})
	}
	t.Run("emit's error", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "app.log")
		appendTo(t, path, "a\nb\nc\n")
		boom := errors.New("boom")
		calls := 0
		err := Follow(t.Context(), path, Options{Last: -1}, func(l Line) error {
			calls++
			if l.Text == "b" {
				return boom
			}
			return nil
		})
		if err != boom || calls != 2 { //nolint:errorlint // returned as is, not wrapped
			t.Fatalf("Follow returned %v after %d lines, want boom after 2", err, calls)
		}
	})
	t.Run("a context already ended", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "app.log")
		appendTo(t, path, "a\n")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := Follow(ctx, path, Options{Last: -1}, func(Line) error { return errors.New("called") }); err != nil {
			t.Fatalf("got %v, want nil", err)
		}
	})
}

// TestFollowErrors: what cannot be followed is an error at once, not a wait.
func TestFollowErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.log")
	appendTo(t, unreadable, "a\n")
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       string
	}{
		{"a directory", dir, "not a regular file"},
		{"a FIFO", fifo, "not a regular file"},
		{"not readable", unreadable, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "not readable" && os.Geteuid() == 0 {
				t.Skip("root reads a file of mode 0")
			}
			err := Follow(t.Context(), tc.path, Options{}, func(Line) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	t.Run("no inotify, no Poll", func(t *testing.T) {
		path := filepath.Join(dir, "app.log")
		appendTo(t, path, "a\n")
		err := follow(t.Context(), path, Options{}, func(Line) error { return nil }, noInotify)
		if !errors.Is(err, unix.EMFILE) || !strings.Contains(err.Error(), "Poll") {
			t.Fatalf("got %v, want EMFILE and a word of Options.Poll", err)
		}
	})
}

func noInotify(int) (int, error) { return -1, unix.EMFILE }

// TestFollowPolling: without inotify, Options.Poll looks at the file at its interval, through
// rotations alike.
func TestFollowPolling(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "app.log")
	appendTo(t, path, "a\n")
	c := &collector{}
	startFollowWith(t, path, Options{Last: -1, Poll: 5 * time.Millisecond}, c, noInotify)
	c.waitLines(t, 1)
	appendTo(t, path, "b\n")
	rename(t, path, path+".1")
	appendTo(t, path+".1", "c\n")
	appendTo(t, path, "n\n")
	c.expect(t, path, []Line{{"a", 0, 0}, {"b", 2, 0}, {"c", 4, 0}, {"n", 0, 1}})
}

// BenchmarkFollow measures lines followed per second from a file being appended: by one write
// per line (the follower wakes often, reads little), and by 64 KiB writes (it reads a lot at
// once). Lines are 100 bytes.
func BenchmarkFollow(b *testing.B) {
	line := []byte(strings.Repeat("x", 99) + "\n")
	for _, bc := range []struct {
		name  string
		batch int // lines per write
	}{
		{"write-per-line", 1},
		{"64KiB-writes", 64 << 10 / len(line)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "app.log")
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			var n atomic.Int64
			all := make(chan struct{})
			ctx, cancel := context.WithCancel(b.Context())
			done := make(chan error, 1)
			go func() {
				done <- Follow(ctx, path, Options{Last: -1}, func(Line) error {
					if n.Add(1) == int64(b.N) {
						close(all)
					}
					return nil
				})
			}()
			batch := make([]byte, 0, bc.batch*len(line))
			b.SetBytes(int64(len(line)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				batch = append(batch, line...)
				if len(batch) == cap(batch) || i == b.N-1 {
					if _, err := f.Write(batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			<-all
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
