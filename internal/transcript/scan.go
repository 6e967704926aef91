package transcript

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"unicode/utf8"
)

// errScan reports a line the fast scanner does not accept. The caller falls
// back to encoding/json, which either parses the line (the scanner is
// stricter than needed in a few corners, e.g. escaped keys) or says why it
// is not JSON.
var errScan = errors.New("transcript: fast scan failed")

// maxScanDepth bounds nesting so an adversarial line cannot exhaust the stack.
const maxScanDepth = 512

// strByte marks bytes that end the fast path inside a JSON string: the
// closing quote, an escape, and the control characters JSON forbids.
var strByte = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'] = true
	t['\\'] = true
	return t
}()

// scanner validates JSON and extracts the few top-level strings the index
// needs without building values: a message line is mostly one large
// message object whose content the index never looks at.
type scanner struct {
	b []byte
	i int
	// trusted skips values without validating them (bytes.IndexByte over
	// strings, bracket counting): for lines validated when indexed and
	// read back by File.Full.
	trusted bool
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// str scans a string at s.i and returns its decoded value when wantValue.
func (s *scanner) str(wantValue bool) (string, error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", errScan
	}
	start := s.i + 1
	i := start
	escaped := false
	for {
		// Eight bytes at a time while none of them is special: strings
		// (message text, tool output, base64 images) are most of a line.
		for i+8 <= len(s.b) {
			if m := special8(binary.LittleEndian.Uint64(s.b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		for i < len(s.b) && !strByte[s.b[i]] {
			i++
		}
		if i >= len(s.b) {
			return "", errScan
		}
		switch s.b[i] {
		case '"':
			s.i = i + 1
			if !wantValue {
				return "", nil
			}
			if !escaped && utf8.Valid(s.b[start:i]) {
				return string(s.b[start:i]), nil
			}
			// escapes, or invalid UTF-8 that decodes to U+FFFD as in JavaScript
			var v string
			if err := json.Unmarshal(s.b[start-1:i+1], &v); err != nil {
				return "", errScan
			}
			return v, nil
		case '\\':
			escaped = true
			if i+1 >= len(s.b) {
				return "", errScan
			}
			switch s.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s.b) || !isHex4(s.b[i+2:i+6]) {
					return "", errScan
				}
				i += 6
			default:
				return "", errScan
			}
		default: // a raw control character: invalid JSON
			return "", errScan
		}
	}
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 flags (high bit of each byte) the bytes of x (eight string bytes,
// little endian) that are a quote, a backslash or below 0x20, with the
// classic "has zero byte" trick. The lowest flag is always exact (borrows
// only cause false flags above a true one), which is all the caller uses.
func special8(x uint64) uint64 {
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	t := (q - ones) &^ q
	t |= (b - ones) &^ b
	t |= (x - ones*0x20) &^ x
	return t & highs
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// key scans an object key. Plain keys are returned as a sub-slice (no
// allocation: the callers switch on string(key)); escaped ones decoded.
func (s *scanner) key() ([]byte, error) {
	start := s.i + 1
	if _, err := s.str(false); err != nil {
		return nil, err
	}
	raw := s.b[start : s.i-1]
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			var v string
			if err := json.Unmarshal(s.b[start-1:s.i], &v); err != nil {
				return nil, errScan
			}
			return []byte(v), nil
		}
	}
	return raw, nil
}

func (s *scanner) lit(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return errScan
	}
	s.i += len(word)
	return nil
}

func (s *scanner) number() error {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := func() int {
		n := 0
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++ // a leading zero stands alone
	} else if digits() == 0 {
		return errScan
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return errScan
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return errScan
		}
	}
	if s.i == start {
		return errScan
	}
	return nil
}

// skip validates and steps over one value.
func (s *scanner) skip(depth int) error {
	if s.trusted {
		return s.skipTrusted()
	}
	if depth > maxScanDepth {
		return errScan
	}
	s.ws()
	if s.i >= len(s.b) {
		return errScan
	}
	switch s.b[s.i] {
	case '"':
		_, err := s.str(false)
		return err
	case '{':
		return s.object(depth, func([]byte) (bool, error) { return false, nil })
	case '[':
		return s.array(depth, skipElem)
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		return s.number()
	}
}

// skipTrusted steps over one value without validating it.
func (s *scanner) skipTrusted() error {
	s.ws()
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			j := s.i + 1
			for {
				k := bytes.IndexByte(s.b[j:], '"')
				if k < 0 {
					return errScan
				}
				j += k
				n := 0
				for p := j - 1; p > s.i && s.b[p] == '\\'; p-- {
					n++
				}
				j++
				if n%2 == 0 {
					break
				}
			}
			s.i = j
			if depth == 0 {
				return nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the enclosing value closes a scalar
				return nil
			}
			depth--
			if depth == 0 {
				s.i++
				return nil
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return nil
			}
		}
		s.i++
	}
	if depth != 0 {
		return errScan
	}
	return nil
}

// skipElem leaves every element to array's own skip.
func skipElem() (bool, error) { return false, nil }

// object steps over an object at s.i. For each key, field is called with
// the scanner positioned at the value; it returns true when it consumed the
// value itself.
func (s *scanner) object(depth int, field func(key []byte) (bool, error)) error {
	return s.list(depth, '{', '}', func() (bool, error) {
		key, err := s.key()
		if err != nil {
			return false, err
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false, errScan
		}
		s.i++
		s.ws()
		return field(key)
	})
}

// array steps over an array at s.i. For each element, elem is called with
// the scanner positioned at it; it returns true when it consumed the
// element itself. elem returning errStop ends the walk early (and array
// returns errStop, leaving s.i where elem left it).
func (s *scanner) array(depth int, elem func() (bool, error)) error {
	if depth > maxScanDepth {
		return errScan
	}
	return s.list(depth, '[', ']', elem)
}

// list steps over the members of an object or array (open .. close) at
// s.i, calling item at the start of each; a member item did not consume is
// skipped.
func (s *scanner) list(depth int, open, closing byte, item func() (bool, error)) error {
	if s.i >= len(s.b) || s.b[s.i] != open {
		return errScan
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == closing {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) {
			return errScan
		}
		done, err := item()
		if err != nil {
			return err
		}
		if !done {
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
		s.ws()
		if s.i >= len(s.b) {
			return errScan
		}
		if s.b[s.i] == closing {
			s.i++
			return nil
		}
		if s.b[s.i] != ',' {
			return errScan
		}
		s.i++
	}
}

// rawFields scans a JSON object and returns the raw value of each key
// fields maps to a destination; keys match exactly (JSON.parse semantics,
// unlike encoding/json's case-insensitive match) and the last duplicate
// wins. Values are sub-slices of b. The whole of b must be one object.
func rawFields(b []byte, trusted bool, fields func(key []byte) *json.RawMessage) error {
	s := &scanner{b: b, trusted: trusted}
	s.ws()
	if err := s.object(0, func(key []byte) (bool, error) {
		dst := fields(key)
		if dst == nil {
			return false, nil
		}
		start := s.i
		if err := s.skip(1); err != nil {
			return true, err
		}
		*dst = b[start:s.i]
		return true, nil
	}); err != nil {
		return err
	}
	s.ws()
	if s.i != len(s.b) {
		return errScan
	}
	return nil
}

// str returns the value of a JSON string, or "" for anything else (null,
// numbers, objects, absent): the reader tolerates wrongly typed fields.
func str(raw json.RawMessage) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	s := &scanner{b: raw}
	v, err := s.str(true)
	if err != nil || s.i != len(raw) {
		return ""
	}
	return v
}
