package output

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// piece is a run of output text on its way to the character cap.
type piece struct {
	s         string
	nl        bool // followed by \n
	runes     int  // runes of s, +1 for the newline
	bol       bool // s begins a line
	id, idEnd int  // stream lines this piece shows (part of); 0 for markers and separators
}

// charStage applies max_chars in bounded memory: it keeps the first max runes (up to the first
// gap) and the last max runes (after the last gap), counting the rest. Finish takes a head and
// a tail from these, at most max runes together, with one elision marker between them.
type charStage struct {
	max      int
	total    int // runes seen, gaps included
	gapped   bool
	head     []piece
	headRn   int
	headDone bool
	tail     []piece // a FIFO: tail[tstart:]
	tstart   int
	tailRn   int
}

// unit adds a line. noSep drops its grep separator (first line of the output or after a marker).
func (cs *charStage) unit(u unit, noSep bool) {
	if u.sep && !noSep && cs.total > 0 {
		cs.add(piece{s: "--", nl: true, runes: 3, bol: true})
	}
	if u.gap == 0 && u.tail == "" {
		cs.add(piece{s: u.text, nl: u.nl, runes: u.runes, bol: true, id: u.id, idEnd: u.idEnd})
		return
	}
	hr := utf8.RuneCountInString(u.text)
	cs.add(piece{s: u.text, runes: hr, bol: true, id: u.id, idEnd: u.idEnd})
	cs.gapRunes(u.gap)
	cs.add(piece{s: u.tail, nl: u.nl, runes: u.runes - hr, id: u.id, idEnd: u.idEnd})
}

// marker adds an elision marker line.
func (cs *charStage) marker(s string) {
	cs.add(piece{s: s, nl: true, runes: utf8.RuneCountInString(s) + 1, bol: true})
}

// gapRunes records n runes left out before they got here.
func (cs *charStage) gapRunes(n int) {
	if n <= 0 {
		return
	}
	cs.total += n
	cs.gapped, cs.headDone = true, true
	clear(cs.tail)
	cs.tail, cs.tstart, cs.tailRn = cs.tail[:0], 0, 0
}

func (cs *charStage) add(p piece) {
	if p.runes == 0 {
		return
	}
	cs.total += p.runes
	if !cs.headDone {
		if cs.headRn+p.runes <= cs.max {
			cs.head = append(cs.head, p)
			cs.headRn += p.runes
		} else {
			cs.head = append(cs.head, cutHead(p, cs.max-cs.headRn))
			cs.headRn = cs.max
			cs.headDone = true
		}
	}
	cs.tail = append(cs.tail, p)
	cs.tailRn += p.runes
	for len(cs.tail)-cs.tstart > 1 && cs.tailRn-cs.tail[cs.tstart].runes >= cs.max {
		cs.tailRn -= cs.tail[cs.tstart].runes
		cs.tail[cs.tstart] = piece{}
		cs.tstart++
	}
	if cs.tstart > 64 && 2*cs.tstart > len(cs.tail) {
		n := copy(cs.tail, cs.tail[cs.tstart:])
		clear(cs.tail[n:])
		cs.tail, cs.tstart = cs.tail[:n], 0
	}
}

// cutHead keeps the first n runes of p.
func cutHead(p piece, n int) piece {
	if n >= p.runes {
		return p
	}
	off := runeOffsetString(p.s, n)
	return piece{s: p.s[:off], runes: n, bol: p.bol, id: p.id, idEnd: p.idEnd}
}

// cutTail keeps the last n runes of p.
func cutTail(p piece, n int) piece {
	if n >= p.runes {
		return p
	}
	if n == 0 {
		return piece{}
	}
	sr := p.runes
	if p.nl {
		sr--
	}
	keepS := n
	if p.nl {
		keepS--
	}
	off := runeOffsetString(p.s, sr-keepS)
	return piece{s: p.s[off:], nl: p.nl, runes: n, bol: p.bol && off == 0, id: p.id, idEnd: p.idEnd}
}

// runeOffsetString is the byte offset of rune n in s (len(s) if s is shorter).
func runeOffsetString(s string, n int) int {
	off := 0
	for ; n > 0 && off < len(s); n-- {
		if s[off] < utf8.RuneSelf {
			off++
			continue
		}
		_, size := utf8.DecodeRuneInString(s[off:])
		off += size
	}
	return off
}

// result builds the text, counts the stream lines shown, and says whether the cap elided runes.
func (cs *charStage) result() (text string, kept int, elided bool) {
	var lc lineCounter
	if !cs.gapped && cs.total <= cs.max {
		var b strings.Builder
		for _, p := range cs.head {
			writePiece(&b, p)
			lc.add(p)
		}
		return b.String(), lc.n, false
	}
	// The head: the first max/2 runes (fewer if a gap comes first), snapped back to a line
	// end; the tail gets the rest of max_chars, snapped forward to a line start.
	var hb strings.Builder
	var headPieces []piece
	left := min(cs.headRn, cs.max/2)
	for _, p := range cs.head {
		if left == 0 {
			break
		}
		q := cutHead(p, left)
		if q.runes < p.runes && p.id == 0 {
			break // never half a marker or separator
		}
		left -= q.runes
		headPieces = append(headPieces, q)
		writePiece(&hb, q)
	}
	headText, headDrop := snapHead(hb.String())
	for _, p := range trimPiecesRight(headPieces, headDrop) {
		lc.add(p)
	}
	var tailPieces []piece
	left = min(cs.tailRn, cs.max-utf8.RuneCountInString(headText))
	for i := len(cs.tail) - 1; i >= cs.tstart && left > 0; i-- {
		p := cutTail(cs.tail[i], left)
		if p.runes < cs.tail[i].runes && p.id == 0 {
			break
		}
		left -= p.runes
		tailPieces = append(tailPieces, p)
	}
	var tb strings.Builder
	for i := len(tailPieces) - 1; i >= 0; i-- {
		writePiece(&tb, tailPieces[i])
	}
	tailText, tailDrop := tb.String(), 0
	if n := len(tailPieces); n > 0 && !tailPieces[n-1].bol {
		tailText, tailDrop = snapTail(tailText)
	}
	for i := len(tailPieces) - 1; i >= 0; i-- {
		if p := trimPieceLeft(tailPieces[i], &tailDrop); p.runes > 0 {
			lc.add(p)
		}
	}
	n := cs.total - utf8.RuneCountInString(headText) - utf8.RuneCountInString(tailText)
	var b strings.Builder
	b.Grow(len(headText) + len(tailText) + 40)
	b.WriteString(headText)
	if headText != "" && !strings.HasSuffix(headText, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString("... [" + strconv.Itoa(n) + " chars elided] ...\n")
	b.WriteString(tailText)
	return b.String(), lc.n, true
}

func writePiece(b *strings.Builder, p piece) {
	b.WriteString(p.s)
	if p.nl {
		b.WriteByte('\n')
	}
}

// lineCounter counts distinct stream lines over pieces in stream order.
type lineCounter struct {
	n, last int
}

func (lc *lineCounter) add(p piece) {
	if p.id == 0 || p.runes == 0 {
		return
	}
	from := max(p.id, lc.last+1)
	if p.idEnd >= from {
		lc.n += p.idEnd - from + 1
		lc.last = p.idEnd
	}
}

// trimPiecesRight drops the last n bytes of text from pieces.
func trimPiecesRight(ps []piece, n int) []piece {
	for n > 0 && len(ps) > 0 {
		p := &ps[len(ps)-1]
		l := len(p.s)
		if p.nl {
			l++
		}
		if l <= n {
			n -= l
			ps = ps[:len(ps)-1]
			continue
		}
		if p.nl {
			p.nl = false
			n--
		}
		p.s = p.s[:len(p.s)-n]
		p.runes = utf8.RuneCountInString(p.s)
		n = 0
	}
	return ps
}

// trimPieceLeft drops up to *n leading bytes of p, decrementing *n.
func trimPieceLeft(p piece, n *int) piece {
	if *n == 0 {
		return p
	}
	l := len(p.s)
	if p.nl {
		l++
	}
	if l <= *n {
		*n -= l
		return piece{}
	}
	p.s = p.s[*n:]
	*n = 0
	p.runes = utf8.RuneCountInString(p.s)
	if p.nl {
		p.runes++
	}
	return p
}

// snapHead shortens a cut head to its last line end when that loses at most half of it,
// and never ends it inside a redaction marker. It returns the text and the bytes dropped.
func snapHead(s string) (string, int) {
	orig := len(s)
	if s != "" && !strings.HasSuffix(s, "\n") {
		if i := strings.LastIndexByte(s, '\n'); i >= 0 && len(s)-(i+1) <= len(s)/2 {
			s = s[:i+1]
		}
	}
	if i := strings.LastIndex(s, "[REDACTED:"); i >= 0 && !strings.Contains(s[i:], "]") {
		s = s[:i]
	} else if j := partialMarkerSuffix(s); j > 0 {
		s = s[:len(s)-j]
	}
	return s, orig - len(s)
}

// snapTail starts a cut tail after its first line end when that loses at most half of it, and
// never inside a redaction marker.
func snapTail(s string) (string, int) {
	orig := len(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 && i+1 <= len(s)/2 && i+1 < len(s) {
		s = s[i+1:]
	}
	if j := partialMarkerPrefix(s); j > 0 {
		s = s[j:]
	}
	return s, orig - len(s)
}

// partialMarkerSuffix: if s ends with a proper non-empty prefix of "[REDACTED:" or of a marker
// (up to its closing bracket), the length of that prefix.
func partialMarkerSuffix(s string) int {
	const open = "[REDACTED:"
	for j := len(open) - 1; j > 0; j-- {
		if strings.HasSuffix(s, open[:j]) {
			return j
		}
	}
	return 0
}

// partialMarkerPrefix: if s starts with the end of a marker cut in half ("TED:jwt]", "jwt]"),
// its length.
func partialMarkerPrefix(s string) int {
	i := strings.IndexByte(s, ']')
	if i < 0 || i > 40 {
		return 0
	}
	frag := s[:i+1]
	for _, k := range allKinds {
		m := Marker(k)
		for j := 1; j < len(m); j++ {
			if m[j:] == frag {
				return len(frag)
			}
		}
	}
	return 0
}

var allKinds = []string{KindPrivateKey, KindAWSAccessKey, KindGitHubToken, KindGitLabToken, KindSlackToken,
	KindStripeKey, KindGoogleAPIKey, KindAnthropicKey, KindOpenAIKey, KindJWT, KindURLPassword,
	KindAuthorization, KindSecret, KindLearned}
