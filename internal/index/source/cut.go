package source

import (
	"bytes"
	"unicode/utf8"
)

// The bounds of what a parse keeps of one line, so that a transcript line of any length (a
// tool's output of hundreds of megabytes on one line) is read in bounded memory.
const (
	// LineMax is the longest line read as it is. A longer line is streamed through a cutter:
	// its JSON structure is kept and each of its strings cut to TextMax.
	LineMax = 1 << 20
	// TextMax is the most kept of one string of a line longer than LineMax, and of one
	// message's text.
	TextMax = 1 << 20
	// cutBudget is how much of a cut line is kept with strings of up to TextMax; past it the
	// line's strings are cut to ResultExcerptMax (a line of many long strings).
	cutBudget = 4 << 20
	// CutLineMax is the most kept of a cut line. A line still longer (its structure alone:
	// millions of values, or bytes that are no JSON at all) is skipped as ReasonOversized.
	CutLineMax = 16 << 20
)

// cutter copies a JSON text while cutting its long strings, a chunk at a time, in memory
// bounded by CutLineMax. It only follows strings (quotes and escapes), so it copies what is not
// JSON as it comes, and a cut string is still a JSON string: it is cut before an escape or a
// UTF-8 sequence, never in one, and closed by its own closing quote.
type cutter struct {
	// The bounds: a string is cut to textMax while out is under budget, to small after; out
	// stops at max (TextMax, cutBudget, ResultExcerptMax, CutLineMax).
	textMax, budget, small, max int

	out []byte
	// inStr says a string is open; strStart is where its text starts in out and limit what
	// is kept of it.
	inStr    bool
	strStart int
	limit    int
	// esc says a backslash was read and not the byte after it; hex counts the digits of a \u
	// still to read. dropping says the open string was cut, its bytes skipped to its closing
	// quote.
	esc      bool
	hex      int
	dropping bool
	// safe is where in out the open string's last escape ends (or its text starts): a cut
	// never takes back bytes before it.
	safe int
	// cut says a string was cut; stopped that out passed max by more than a cut takes back
	// (the rest is not kept). Over says the line is over its bound.
	cut     bool
	stopped bool
}

// over reports whether the line copied is longer than its bound: nothing of it is kept.
func (c *cutter) over() bool { return c.stopped || len(c.out) > c.max }

// reset readies c for a line with the default bounds.
func (c *cutter) reset() {
	*c = cutter{out: c.out[:0], textMax: TextMax, budget: cutBudget, small: ResultExcerptMax, max: CutLineMax}
}

// write copies p, cutting as it goes.
func (c *cutter) write(p []byte) {
	sc := scanner{p: p, q: -1, b: -1}
	for i := 0; i < len(p) && !c.stopped; {
		switch {
		case !c.inStr:
			q := sc.quote(i)
			if q == len(p) {
				c.emit(p[i:])
				return
			}
			c.emit(p[i : q+1])
			i = q + 1
			c.inStr, c.esc, c.hex, c.dropping, c.strStart, c.safe = true, false, 0, false, len(c.out), len(c.out)
			c.limit = c.textMax
			if len(c.out) >= c.budget {
				c.limit = c.small
			}
		case c.esc || c.hex > 0:
			switch {
			case c.hex > 0:
				c.hex--
			case p[i] == 'u':
				c.hex = 4
			}
			c.esc = false
			if !c.dropping {
				c.emit(p[i : i+1])
				if c.hex == 0 {
					c.safe = len(c.out)
				}
			}
			i++
		case c.dropping:
			// Skipped to the closing quote; the byte after a backslash is never it (nor are
			// \u's digits).
			j := sc.next(i)
			if j < len(p) && p[j] == '"' {
				c.emit(p[j : j+1])
				c.inStr, c.dropping = false, false
			} else if j < len(p) {
				c.esc = true
			}
			i = j + 1
		default:
			i = c.text(p, i, &sc)
		}
	}
}

// text copies the open string's bytes from p[i] up to its next quote or backslash, or cuts it
// there, and returns where it stopped.
func (c *cutter) text(p []byte, i int, sc *scanner) int {
	room := c.limit - (len(c.out) - c.strStart)
	j := sc.next(i)
	run := j - i
	if run > room || (j < len(p) && p[j] == '\\' && room-run < len(`\uXXXX`)) {
		// The string is cut here: before the UTF-8 sequence that would cross the limit, or
		// before an escape that might.
		take := min(run, room)
		for take > 0 && p[i+take]&0xC0 == 0x80 {
			take--
		}
		c.emit(p[i : i+take])
		if take == 0 && p[i]&0xC0 == 0x80 {
			// The sequence began before p[i] (in the chunk before): the cut moves back in out
			// until the first byte it drops is not a continuation byte, as it does in p.
			k := len(c.out) - 1
			for k >= c.safe && c.out[k]&0xC0 == 0x80 {
				k--
			}
			c.out = c.out[:max(k, c.safe)]
		}
		c.dropping, c.cut = true, true
		return i + take
	}
	if j == len(p) {
		c.emit(p[i:])
		return j
	}
	c.emit(p[i : j+1])
	if p[j] == '"' {
		c.inStr = false
	} else {
		c.esc = true
	}
	return j + 1
}

// emit appends b. A string's last bytes may be taken back when it is cut (the start of a UTF-8
// sequence the chunk before ended in), so out may pass max by that much before it is over
// for good, whatever the chunks.
func (c *cutter) emit(b []byte) {
	if len(c.out)+len(b) > c.max+utf8.UTFMax {
		c.stopped = true
		return
	}
	c.out = append(c.out, b...)
}

// scanner finds the quotes and backslashes of one chunk, each found once (IndexByte, in
// assembly, from where the last one was), so a cut string of hundreds of megabytes full of
// escapes is one pass.
type scanner struct {
	p    []byte
	q, b int // the next quote and backslash at or after the last position asked, len(p) if none; -1 not yet looked for
}

// quote is the first quote at or after i, or len(p).
func (s *scanner) quote(i int) int {
	if s.q < i {
		s.q = indexFrom(s.p, i, '"')
	}
	return s.q
}

// next is the first quote or backslash at or after i, or len(p).
func (s *scanner) next(i int) int {
	if s.b < i {
		s.b = indexFrom(s.p, i, '\\')
	}
	return min(s.quote(i), s.b)
}

func indexFrom(p []byte, i int, c byte) int {
	if k := bytes.IndexByte(p[i:], c); k >= 0 {
		return i + k
	}
	return len(p)
}
