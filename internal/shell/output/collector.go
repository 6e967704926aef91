package output

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/shell"
)

// minLineCap is the least a collector holds of a long line's head and of its tail, in runes,
// however small max_chars is: grep and redaction see at least this much of every line.
const minLineCap = 64 << 10

// ErrFinished is returned by Write after Finish.
var ErrFinished = errors.New("output: write after Finish")

// unit is a line (or a PEM block shown as one marker line) on its way through the stages.
type unit struct {
	id, idEnd int    // stream lines it shows (1-based, inclusive); 0 for markers
	text      string // the line, or the head of a long line
	gap       int    // runes left out of a long line after text
	tail      string // the tail of a long line
	nl        bool   // followed by \n
	sep       bool   // grep: a "--" separator goes before it
	runes     int    // runes of text and tail, +1 for the newline
}

func (u *unit) lines() int { return u.idEnd - u.id + 1 }

// Collector processes one stream of one command: it cleans the raw bytes, redacts each line,
// then applies the budget (grep with context, keep, max_chars), streaming and in bounded
// memory: O(max_chars) runes plus O(grep context) lines, whatever the command prints. Feed it
// with Write (any chunking gives the same result) and call Finish once. A Collector is not
// safe for concurrent use; its Redactor is.
type Collector struct {
	cl     cleaner
	red    *Redactor
	pem    pemState
	dangle danglingState
	pend   *unit // the marker line of an open PEM block, passed on when the block ends
	tap    func(line string)

	linesTotal int
	maxChars   int
	finished   bool
	mode       string

	// grep
	re        *matcher
	context   int
	before    []unit // the last context lines that did not match
	beforeRn  int
	afterLeft int
	lastOut   int // idEnd of the last unit grep passed on
	grepDrop  bool

	// keep
	keep     string
	headLeft int // units head (or head_tail's head) still passes
	ringCap  int // units tail (or head_tail's tail) keeps: the window
	// The window is pruned units (oldest first; their text was let go, see keepUnit) followed
	// by the units of ring. A pruned unit is its runes, with the top bit set when it shows
	// more than one line (a PEM block), its line count then in prunedML.
	prunedQ  fifo[uint32]
	prunedML fifo[uint32]
	pruned   int // runes of prunedQ
	ring     fifo[unit]
	ringRn   int // runes of ring
	dropped  int // stream lines the keep stage dropped

	cs charStage
}

// NewCollector returns a collector for one stream under budget b (already merged with the
// session default, see MergeBudget). It fails, saying what to fix, when the budget is invalid:
// a bad grep regex fails here, before the command runs. r redacts and may be shared by the
// session's collectors; nil redacts with the fixed rules only.
func NewCollector(b shell.Budget, r *Redactor) (*Collector, error) {
	return newCollector(b, r, 0)
}

// newCollector is NewCollector with the line cap (runes kept of a long line's head and of its
// tail) as a parameter; 0 means max(max_chars, minLineCap). Tests use small ones.
func newCollector(b shell.Budget, r *Redactor, lineCap int) (*Collector, error) {
	re, err := compileBudget(b)
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = defaultRedactor
	}
	maxChars := b.MaxChars
	if maxChars == 0 {
		maxChars = shell.DefaultMaxChars
	}
	if lineCap <= 0 {
		lineCap = max(maxChars, minLineCap)
	}
	c := &Collector{red: r, maxChars: maxChars, keep: b.Keep, mode: b.Keep}
	if c.keep == "" {
		c.keep, c.mode = shell.KeepAll, shell.KeepAll
	}
	if re != nil {
		c.re = newMatcher(re)
		c.context = b.Grep.Context
		c.mode = shell.ModeGrep
	}
	switch c.keep {
	case shell.KeepHead:
		c.headLeft = b.Lines
	case shell.KeepTail:
		c.ringCap = b.Lines
	case shell.KeepHeadTail:
		c.headLeft, c.ringCap = (b.Lines+1)/2, b.Lines/2
	}
	c.cl = cleaner{headCap: lineCap, tailCap: lineCap, emitLine: c.line}
	c.cs.max = maxChars
	return c, nil
}

// Write feeds raw output. It never fails before Finish.
func (c *Collector) Write(p []byte) (int, error) {
	if c.finished {
		return 0, ErrFinished
	}
	c.cl.write(p)
	return len(p), nil
}

// Finish ends the stream and returns the text for the result, the budget's report (mode,
// lines_total, lines_kept) and whether anything was dropped (by grep, keep or the character
// cap). lines_kept counts the stream's lines that appear in text, whole or in part.
func (c *Collector) Finish() (text string, rep shell.StreamReport, truncated bool) {
	if !c.finished {
		c.finished = true
		c.cl.finish()
		c.flushPEM()
		c.finishKeep()
	}
	text, kept, elided := c.cs.result()
	rep = shell.StreamReport{Mode: c.mode, LinesTotal: c.linesTotal, LinesKept: kept}
	truncated = c.grepDrop || c.dropped > 0 || c.pruned > 0 || elided
	return text, rep, truncated
}

// line takes a cleaned line from the cleaner: redaction, PEM blocks.
func (c *Collector) line(l rawLine) {
	c.linesTotal++
	id := c.linesTotal
	u := unit{id: id, idEnd: id, nl: l.nl}
	u.text = c.red.redactLine(l.text, nil)
	long := l.gap > 0 || l.tail != ""
	if t, changed := c.dangle.line(u.text); changed {
		// The value of a key on an earlier line: all of it goes, a long line's tail too.
		u.text = t
		if long {
			u.gap, long = l.gap+utf8.RuneCountInString(l.tail), false
		}
	}
	if len(u.text) == len(l.text) && u.text == l.text && l.gap == 0 && l.tail == "" {
		u.runes = l.runes // unchanged: the cleaner counted
		if l.nl {
			u.runes++
		}
	}
	if long {
		// A long line: head and tail were redacted apart, so a secret could straddle either
		// cut. Drop the run of non-delimiter characters touching each cut: whatever a token
		// shape, name=value or literal left there goes with it.
		tail := c.red.redactLine(l.tail, nil)
		head, cutH := trimRunRight(u.text)
		tail, cutT := trimRunLeft(tail)
		u.text, u.tail, u.gap = head, tail, l.gap+cutH+cutT
	}
	switch ev, rest := c.pem.line(l.text, u.text); ev {
	case pemBody:
		if c.pend != nil {
			c.pend.idEnd = id
		}
		return
	case pemEnd:
		if c.pend != nil {
			c.pend.idEnd = id
		}
		c.flushPEM()
		if rest == "" {
			return
		}
		u = unit{id: id, idEnd: id, text: rest, nl: l.nl}
	case pemBegin:
		c.flushPEM()
		u.tail, u.gap = "", 0
		c.pend = &u
		return
	default:
		c.flushPEM()
	}
	c.grep(u)
}

func (c *Collector) flushPEM() {
	if c.pend != nil {
		p := *c.pend
		c.pend = nil
		c.grep(p)
	}
}

// Tap calls f, in Write's goroutine, with every line of the stream as soon as it is complete,
// cleaned and redacted, before any budget (without its newline; a PEM block as its marker
// when the block ends; an over-long line as its head and tail around an elision marker). It
// is for live views (progress notifications, terminal events) that must not see raw output.
// Call it before the first Write. f sees every line, so it must be cheap or rate-limit itself.
func (c *Collector) Tap(f func(line string)) { c.tap = f }

// grep passes on matching units with context; the others are dropped.
func (c *Collector) grep(u unit) {
	if c.tap != nil {
		if u.gap > 0 || u.tail != "" {
			c.tap(u.text + " ... [" + strconv.Itoa(u.gap) + " chars elided] ... " + u.tail)
		} else {
			c.tap(u.text)
		}
	}
	if u.runes == 0 {
		u.runes = utf8.RuneCountInString(u.text) + utf8.RuneCountInString(u.tail)
		if u.nl {
			u.runes++
		}
	}
	if c.re == nil {
		c.keepUnit(u)
		return
	}
	if c.re.match(u.text) || (u.tail != "" && c.re.match(u.tail)) {
		first := u.id
		if len(c.before) > 0 {
			first = c.before[0].id
		}
		sep := c.context > 0 && c.lastOut > 0 && first > c.lastOut+1
		for i := range c.before {
			b := c.before[i]
			b.sep = sep && i == 0
			c.keepUnit(b)
		}
		c.before, c.beforeRn = c.before[:0], 0
		u.sep = sep && first == u.id
		c.keepUnit(u)
		c.lastOut, c.afterLeft = u.idEnd, c.context
		return
	}
	if c.afterLeft > 0 {
		c.afterLeft--
		c.keepUnit(u)
		c.lastOut = u.idEnd
		return
	}
	c.grepDrop = true
	if c.context == 0 {
		return
	}
	c.before = append(c.before, u)
	c.beforeRn += u.runes
	// Keep context lines bounded in count and, best effort, in size.
	for len(c.before) > c.context || (len(c.before) > 1 && c.beforeRn > 4*(c.maxChars+c.cl.tailCap)) {
		c.beforeRn -= c.before[0].runes
		c.before[0] = unit{}
		c.before = c.before[1:]
	}
}

// keepUnit applies keep.
func (c *Collector) keepUnit(u unit) {
	switch c.keep {
	case shell.KeepAll:
		c.cs.unit(u, false)
		return
	case shell.KeepHead, shell.KeepHeadTail:
		if c.headLeft > 0 {
			c.headLeft--
			c.cs.unit(u, false)
			return
		}
		if c.keep == shell.KeepHead {
			c.dropped += u.lines()
			return
		}
	}
	if c.ringCap == 0 {
		c.dropped += u.lines()
		return
	}
	c.ring.push(u)
	c.ringRn += u.runes
	if c.prunedQ.len()+c.ring.len() > c.ringCap {
		if c.prunedQ.len() > 0 {
			p := c.prunedQ.pop()
			c.pruned -= int(p &^ multiLine)
			if p&multiLine != 0 {
				c.dropped += int(c.prunedML.pop())
			} else {
				c.dropped++
			}
		} else {
			f := c.ring.pop()
			c.ringRn -= f.runes
			c.dropped += f.lines()
		}
	}
	// Memory: only the window's last max_chars runes need their text: what precedes them
	// could only show in the middle of the result, where the character cap cuts. Older units
	// of the window are kept as counts.
	for c.ring.len() > 1 && c.ringRn-c.ring.front().runes >= c.maxChars {
		f := c.ring.pop()
		c.ringRn -= f.runes
		p := uint32(min(f.runes, 1<<31-1))
		if f.lines() > 1 {
			p |= multiLine
			c.prunedML.push(uint32(f.lines()))
		}
		c.prunedQ.push(p)
		c.pruned += int(p &^ multiLine)
	}
}

// multiLine flags a pruned unit of several lines.
const multiLine = 1 << 31

func (c *Collector) finishKeep() {
	marker := func(n int) string { return "... [" + strconv.Itoa(n) + " lines elided] ..." }
	if c.keep == shell.KeepHead {
		if c.dropped > 0 {
			c.cs.marker(marker(c.dropped))
		}
		return
	}
	if c.keep == shell.KeepAll {
		return
	}
	if c.dropped > 0 {
		c.cs.marker(marker(c.dropped))
	}
	if c.pruned > 0 {
		c.cs.gapRunes(c.pruned)
	}
	first := c.dropped > 0 || c.pruned > 0 || c.cs.total == 0
	for c.ring.len() > 0 {
		c.cs.unit(c.ring.pop(), first)
		first = false
	}
}

// maxCutRun bounds what a cut drops: no secret shape or learned literal is longer, and a long
// line that is a single run (a minified file, a progress bar of dots) must keep its head and tail.
const maxCutRun = 4096

// trimRunRight drops the run of non-delimiter characters at the end of s (at most maxCutRun
// runes of it); it returns the rest and the number of runes dropped.
func trimRunRight(s string) (string, int) {
	i := strings.LastIndexFunc(s, isDelimiter)
	run := s[i+1:]
	if n := utf8.RuneCountInString(run); n > maxCutRun {
		keep := len(s)
		for range maxCutRun {
			_, size := utf8.DecodeLastRuneInString(s[:keep])
			keep -= size
		}
		return s[:keep], maxCutRun
	}
	return s[:i+1], utf8.RuneCountInString(run)
}

// trimRunLeft drops the run of non-delimiter characters at the start of s (at most maxCutRun
// runes of it).
func trimRunLeft(s string) (string, int) {
	i := strings.IndexFunc(s, isDelimiter)
	if i < 0 {
		i = len(s)
	}
	if n := utf8.RuneCountInString(s[:i]); n > maxCutRun {
		skip := 0
		for range maxCutRun {
			_, size := utf8.DecodeRuneInString(s[skip:])
			skip += size
		}
		return s[skip:], maxCutRun
	}
	return s[i:], utf8.RuneCountInString(s[:i])
}

func isDelimiter(r rune) bool {
	switch r {
	case ' ', '\t', '"', '\'', '`', '<', '>', '(', ')', '[', ']', '{', '}', ',', ';', '|':
		return true
	}
	return false
}

// fifo is a queue.
type fifo[T any] struct {
	buf   []T
	start int
}

func (q *fifo[T]) len() int   { return len(q.buf) - q.start }
func (q *fifo[T]) front() *T  { return &q.buf[q.start] }
func (q *fifo[T]) push(v T)   { q.buf = append(q.buf, v) }
func (q *fifo[T]) items() []T { return q.buf[q.start:] }

func (q *fifo[T]) pop() T {
	var zero T
	v := q.buf[q.start]
	q.buf[q.start] = zero
	q.start++
	if q.start > 64 && q.start*2 > len(q.buf) {
		n := copy(q.buf, q.buf[q.start:])
		clear(q.buf[n:])
		q.buf, q.start = q.buf[:n], 0
	}
	return v
}
