package output

import (
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi/parser"
)

// maxSeqBytes bounds an escape sequence: an unterminated OSC/DCS/APC string (or a stray ESC ]
// in binary output) swallows at most this much output before the cleaner gives up on it and
// prints what follows.
const maxSeqBytes = 1 << 20

// cleaner turns raw terminal output into clean lines, byte by byte, across any chunking:
//
//   - escape sequences (CSI, OSC, DCS, SOS/PM/APC, other ESC sequences) are removed, walking the
//     DEC/ECMA-48 state table of charmbracelet/x/ansi/parser for 7-bit bytes. Bytes >= 0x80 are
//     UTF-8, never 8-bit C1 controls (in UTF-8 output they are continuation bytes): in text
//     they are decoded, invalid ones become U+FFFD; inside a string sequence they are part of
//     the string; in any other sequence they end it and are text.
//   - C0 controls, DEL and NUL are removed except \n and \t; C1 code points (U+0080-U+009F)
//     are removed.
//   - \r: a line keeps its last frame: text after a \r replaces the line so far ("a\rb\rc\n"
//     is "c\n"); a \r before \n or the end of the stream changes nothing ("100%\r\n").
//   - \b removes the rune before it on the line, as on a terminal (so man-page overstrike
//     "N\bN" is "N"), when that rune is still held.
//   - a line longer than headCap+2*tailCap runes is not held whole: its first headCap runes
//     and its last tailCap runes are kept, and the runes in between counted.
type cleaner struct {
	state  parser.State
	seqLen int
	u8     [utf8.UTFMax]byte // an incomplete UTF-8 sequence
	u8n    int

	buf       []byte // the current line (after the head, for a long line)
	bufRunes  int
	pendingCR bool

	long     bool   // the line outgrew headCap+2*tailCap runes
	head     string // its first headCap runes
	dropped  int    // runes dropped between head and buf
	headCap  int
	tailCap  int
	emitLine func(l rawLine)
}

// rawLine is a cleaned line as the cleaner hands it on.
type rawLine struct {
	text  string // the whole line, or the head of a long line
	runes int    // runes of text when the line is not long
	gap   int    // runes left out after text (long line)
	tail  string // the tail of a long line
	nl    bool   // the line ended with \n (false only for the last line)
}

func isStringState(s parser.State) bool {
	switch s {
	case parser.OscStringState, parser.DcsStringState, parser.SosStringState, parser.PmStringState, parser.ApcStringState:
		return true
	}
	return false
}

// write feeds raw bytes.
func (c *cleaner) write(p []byte) {
	i := 0
	for i < len(p) {
		if c.state == parser.GroundState && c.u8n == 0 {
			// Fast path: a run of printable ASCII.
			j := i
			for j < len(p) && p[j] >= 0x20 && p[j] < 0x7f {
				j++
			}
			if j > i {
				c.text(p[i:j])
				i = j
				continue
			}
		}
		c.byte(p[i])
		i++
	}
}

// byte is the slow path for one byte.
func (c *cleaner) byte(b byte) {
	if c.state != parser.GroundState {
		c.seqLen++
		if c.seqLen > maxSeqBytes {
			c.state, c.seqLen = parser.GroundState, 0
		}
	}
	if b >= 0x80 {
		if isStringState(c.state) {
			return // part of the string
		}
		c.state, c.seqLen = parser.GroundState, 0
		c.utf8Byte(b)
		return
	}
	if c.u8n > 0 {
		c.flushUTF8()
	}
	next, action := parser.Table.Transition(c.state, b)
	switch action {
	case parser.PrintAction:
		c.text([]byte{b})
	case parser.ExecuteAction:
		c.control(b)
	}
	if next == parser.GroundState {
		c.seqLen = 0
	}
	c.state = next
}

// control handles an executed C0 control.
func (c *cleaner) control(b byte) {
	switch b {
	case '\n':
		c.endLine(true)
	case '\t':
		c.text([]byte{'\t'})
	case '\r':
		c.pendingCR = true
	case '\b':
		if !c.pendingCR {
			c.backspace()
		}
	}
}

// utf8Byte collects a byte of a multi-byte sequence.
func (c *cleaner) utf8Byte(b byte) {
	if c.u8n == 0 && !utf8.RuneStart(b) {
		c.rune(utf8.RuneError)
		return
	}
	if c.u8n > 0 && utf8.RuneStart(b) {
		c.flushUTF8()
	}
	c.u8[c.u8n] = b
	c.u8n++
	if !utf8.FullRune(c.u8[:c.u8n]) {
		return
	}
	r, size := utf8.DecodeRune(c.u8[:c.u8n])
	if r == utf8.RuneError && size <= 1 {
		c.flushUTF8()
		return
	}
	c.u8n = 0
	c.rune(r)
}

// flushUTF8 ends a pending sequence that cannot be completed: one U+FFFD per byte, as Go's
// range over a string does.
func (c *cleaner) flushUTF8() {
	for k := 0; k < c.u8n; k++ {
		c.rune(utf8.RuneError)
	}
	c.u8n = 0
}

func (c *cleaner) rune(r rune) {
	if r >= 0x80 && r <= 0x9f {
		return // C1 control
	}
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], r)
	c.appendRunes(b[:n], 1)
}

// text appends printable ASCII.
func (c *cleaner) text(p []byte) {
	for len(p) > 0 {
		n := c.room(len(p))
		c.appendRunes(p[:n], n)
		p = p[n:]
	}
}

// room is how many more runes (at most n) may be appended before the long-line bookkeeping
// must run; it runs that bookkeeping when the answer would be 0. Doing it at exact rune
// counts keeps the result independent of how the input was chunked.
func (c *cleaner) room(n int) int {
	c.resetIfCR()
	if !c.long {
		if left := c.headCap + 2*c.tailCap - c.bufRunes; left > 0 {
			return min(n, left)
		}
		c.startLong()
	}
	if left := 2*c.tailCap - c.bufRunes; left > 0 {
		return min(n, left)
	}
	c.compact()
	return min(n, 2*c.tailCap-c.bufRunes)
}

func (c *cleaner) resetIfCR() {
	if c.pendingCR {
		c.pendingCR = false
		c.buf, c.bufRunes = c.buf[:0], 0
		c.long, c.head, c.dropped = false, "", 0
	}
}

// appendRunes appends b, which holds n runes, after making room for a single rune if n is 1.
func (c *cleaner) appendRunes(b []byte, n int) {
	if n == 1 && len(b) > 1 {
		c.room(1)
	}
	c.buf = append(c.buf, b...)
	c.bufRunes += n
}

// startLong freezes the first headCap runes of the line as its head.
func (c *cleaner) startLong() {
	off := runeOffset(c.buf, c.headCap)
	c.head = string(c.buf[:off])
	rest := copy(c.buf, c.buf[off:])
	c.buf = c.buf[:rest]
	c.bufRunes -= c.headCap
	c.long = true
	c.compact()
}

// compact keeps the last tailCap runes of a long line's buffer.
func (c *cleaner) compact() {
	if c.bufRunes <= c.tailCap {
		return
	}
	drop := c.bufRunes - c.tailCap
	off := runeOffset(c.buf, drop)
	n := copy(c.buf, c.buf[off:])
	c.buf = c.buf[:n]
	c.bufRunes = c.tailCap
	c.dropped += drop
	if cap(c.buf) > 16*(c.tailCap+64) {
		c.buf = append([]byte(nil), c.buf...)
	}
}

func (c *cleaner) backspace() {
	if c.bufRunes == 0 {
		return
	}
	_, size := utf8.DecodeLastRune(c.buf)
	c.buf = c.buf[:len(c.buf)-size]
	c.bufRunes--
}

// endLine hands on the current line.
func (c *cleaner) endLine(nl bool) {
	c.pendingCR = false
	l := rawLine{nl: nl}
	if c.long {
		c.compact()
		l.text, l.gap, l.tail = c.head, c.dropped, string(c.buf)
	} else {
		l.text, l.runes = string(c.buf), c.bufRunes
	}
	c.buf, c.bufRunes = c.buf[:0], 0
	c.long, c.head, c.dropped = false, "", 0
	if cap(c.buf) > 64<<10 {
		c.buf = nil // don't keep a long line's buffer for the rest of the stream
	}
	c.emitLine(l)
}

// finish ends the stream: an unterminated escape sequence is dropped, an incomplete UTF-8
// sequence becomes U+FFFD, and a last line without \n is handed on if it has any text.
func (c *cleaner) finish() {
	if c.u8n > 0 {
		c.flushUTF8()
	}
	c.state = parser.GroundState
	if c.bufRunes > 0 || c.long {
		c.endLine(false)
	}
}

// runeOffset is the byte offset of rune n in b.
func runeOffset(b []byte, n int) int {
	off := 0
	for ; n > 0 && off < len(b); n-- {
		if b[off] < utf8.RuneSelf {
			off++
			continue
		}
		_, size := utf8.DecodeRune(b[off:])
		off += size
	}
	return off
}
