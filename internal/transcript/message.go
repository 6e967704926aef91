package transcript

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MessageInfo is the bookkeeping of an agent message (docs/conversations.md, The transcript): the
// short fields decoded, the bulky ones (content, usage, output, summary)
// left as the raw JSON values. Keys match exactly and the last duplicate
// wins, as with JSON.parse; a field of the wrong type reads as its zero
// value.
type MessageInfo struct {
	Role         string
	Provider     string
	Model        string
	StopReason   string
	ErrorMessage string
	ToolCallID   string
	ToolName     string
	CustomType   string
	Command      string
	IsError      bool
	// ExitCode is a bashExecution's exit code: nil when absent, null or not
	// an integer.
	ExitCode *int
	// ToolCalls are the toolCall blocks of an array content, in order.
	ToolCalls []ToolCallRef
	// Content, Usage, Output and Summary are the raw values (nil when
	// absent). Content may be a string or blocks: see FirstText; Usage: see
	// ParseUsage; Output and Summary: see StringValue.
	Content json.RawMessage
	Usage   json.RawMessage
	Output  json.RawMessage
	Summary json.RawMessage
}

// ToolCallRef names one toolCall content block.
type ToolCallRef struct {
	ID   string
	Name string
}

// ErrNotJSON is returned for a value that is not valid JSON.
var ErrNotJSON = errors.New("transcript: not valid JSON")

// ParseMessageInfo reads the bookkeeping fields of an agent message without
// decoding its content: the content blocks are stepped over, only the type,
// id and name of each are read. A message that is absent, null or not an
// object has the zero MessageInfo; invalid JSON is an error.
func ParseMessageInfo(msg json.RawMessage) (MessageInfo, error) {
	return parseMessageInfo(msg, false)
}

// MessageInfo is ParseMessageInfo of a full message entry's message (from
// File.Full, or any entry of a File from Read). The reader validated the
// line when it indexed it, so the values are stepped over without
// validating them again; a light entry is an error.
func (e *Entry) MessageInfo() (MessageInfo, error) {
	if e.Raw == nil && e.size > 0 {
		return MessageInfo{}, errors.New("transcript: message info of a light entry (use File.Full)")
	}
	return parseMessageInfo(e.Message, e.Raw != nil)
}

func parseMessageInfo(msg json.RawMessage, trusted bool) (MessageInfo, error) {
	var m MessageInfo
	s := &scanner{b: msg, trusted: trusted}
	s.ws()
	if s.i == len(s.b) {
		return m, nil
	}
	if s.b[s.i] != '{' {
		if err := s.whole(); err != nil {
			return MessageInfo{}, err
		}
		return m, nil
	}
	err := s.object(0, func(key []byte) (bool, error) {
		switch string(key) {
		case "role":
			return s.strField(&m.Role)
		case "provider":
			return s.strField(&m.Provider)
		case "model":
			return s.strField(&m.Model)
		case "stopReason":
			return s.strField(&m.StopReason)
		case "errorMessage":
			return s.strField(&m.ErrorMessage)
		case "toolCallId":
			return s.strField(&m.ToolCallID)
		case "toolName":
			return s.strField(&m.ToolName)
		case "customType":
			return s.strField(&m.CustomType)
		case "command":
			return s.strField(&m.Command)
		case "isError":
			m.IsError = s.i < len(s.b) && s.b[s.i] == 't'
			return false, nil
		case "exitCode":
			start := s.i
			if err := s.skip(1); err != nil {
				return true, err
			}
			m.ExitCode = nil
			if n, ok := intValue(s.b[start:s.i]); ok {
				v := int(n)
				m.ExitCode = &v
			}
			return true, nil
		case "content":
			start := s.i
			m.ToolCalls = m.ToolCalls[:0]
			if s.i < len(s.b) && s.b[s.i] == '[' {
				if err := s.toolCalls(&m.ToolCalls); err != nil {
					return true, err
				}
			} else if err := s.skip(1); err != nil {
				return true, err
			}
			m.Content = s.b[start:s.i]
			return true, nil
		case "usage":
			return s.rawField(&m.Usage)
		case "output":
			return s.rawField(&m.Output)
		case "summary":
			return s.rawField(&m.Summary)
		}
		return false, nil
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return MessageInfo{}, ErrNotJSON
	}
	if len(m.ToolCalls) == 0 {
		m.ToolCalls = nil
	}
	return m, nil
}

// whole steps over the one value b must hold.
func (s *scanner) whole() error {
	if err := s.skip(0); err != nil {
		return ErrNotJSON
	}
	return s.end()
}

// end checks that only white space follows.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return ErrNotJSON
	}
	return nil
}

// strField decodes a string value into *dst, or sets it to "" for a value
// of another type (a later duplicate key overrides an earlier one).
func (s *scanner) strField(dst *string) (bool, error) {
	if s.i < len(s.b) && s.b[s.i] == '"' {
		v, err := s.strShared()
		*dst = v
		return true, err
	}
	*dst = ""
	return false, nil
}

// rawField records the raw value at s.i in *dst.
func (s *scanner) rawField(dst *json.RawMessage) (bool, error) {
	start := s.i
	if err := s.skip(1); err != nil {
		return true, err
	}
	*dst = s.b[start:s.i]
	return true, nil
}

// common are the values that repeat on every message (roles, stop
// reasons, block types): returned without allocating.
var common = func() map[string]string {
	m := map[string]string{}
	for _, v := range []string{
		"user", "assistant", "toolResult", "bashExecution", "custom", "compactionSummary", "branchSummary",
		"stop", "length", "toolUse", "error", "aborted", "text", "thinking", "toolCall", "image",
	} {
		m[v] = v
	}
	return m
}()

// strShared is str(true) that returns the shared copy of a common value.
func (s *scanner) strShared() (string, error) {
	start := s.i + 1
	if start <= len(s.b) {
		if q := indexQuote(s.b[start:min(start+20, len(s.b))]); q >= 0 {
			if v, ok := common[string(s.b[start:start+q])]; ok {
				s.i = start + q + 1
				return v, nil
			}
		}
	}
	return s.str(true)
}

// indexQuote returns the index of the first quote of b, or -1 when a
// backslash or control byte comes first (or no quote).
func indexQuote(b []byte) int {
	for i, c := range b {
		if c == '"' {
			return i
		}
		if strByte[c] {
			return -1
		}
	}
	return -1
}

// errStop ends an array walk early.
var errStop = errors.New("stop")

// toolCalls walks a content array, appending the id and name of each
// toolCall block.
func (s *scanner) toolCalls(dst *[]ToolCallRef) error {
	return s.array(1, func() (bool, error) {
		if s.b[s.i] != '{' {
			return false, nil
		}
		var typ, id, name string
		err := s.object(2, func(key []byte) (bool, error) {
			switch string(key) {
			case "type":
				return s.strField(&typ)
			case "id":
				return s.strField(&id)
			case "name":
				return s.strField(&name)
			}
			return false, nil
		})
		if err == nil && typ == "toolCall" {
			*dst = append(*dst, ToolCallRef{ID: id, Name: name})
		}
		return true, err
	})
}

// FirstText returns the first text of a message content that is not blank
// (white space only): the content itself when it is a string, else the
// text of the first such text block. Only that text is decoded, and when
// maxBytes > 0 only its first maxBytes bytes (a cut may split a character,
// as text[:maxBytes] would). Content that is absent, of another type or not
// valid JSON up to that text yields "".
func FirstText(content json.RawMessage, maxBytes int) string {
	s := &scanner{b: content}
	s.ws()
	if s.i >= len(s.b) {
		return ""
	}
	switch s.b[s.i] {
	case '"':
		t, _ := s.nonBlankPrefix(maxBytes)
		return t
	case '[':
	default:
		return ""
	}
	var out string
	err := s.array(1, func() (bool, error) {
		if s.b[s.i] != '{' {
			return false, nil
		}
		var typ string
		text := -1 // offset of the last "text" value
		err := s.object(2, func(key []byte) (bool, error) {
			switch string(key) {
			case "type":
				return s.strField(&typ)
			case "text":
				text = s.i
			}
			return false, nil
		})
		if err != nil || typ != "text" || text < 0 || s.b[text] != '"' {
			return true, err
		}
		end := s.i
		s.i = text
		t, ok := s.nonBlankPrefix(maxBytes)
		s.i = end
		if ok {
			out = t
			return true, errStop
		}
		return true, nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return ""
	}
	return out
}

// nonBlankPrefix decodes the string at s.i, cut to maxBytes bytes when
// maxBytes > 0, and reports whether the whole string is not blank. s.i is
// left anywhere.
func (s *scanner) nonBlankPrefix(maxBytes int) (string, bool) {
	start := s.i
	head, cut, err := s.strPrefix(maxBytes)
	if err != nil {
		return "", false
	}
	// head ends on a character boundary: a cut could end in a partial
	// character, which TrimSpace would take for text.
	blank := strings.TrimSpace(head) == ""
	if blank && cut {
		// A blank head: only the rest of the text can tell.
		s.i = start
		whole, err := s.str(true)
		blank = err != nil || strings.TrimSpace(whole) == ""
	}
	if blank {
		return "", false
	}
	if maxBytes > 0 && len(head) > maxBytes {
		head = head[:maxBytes]
	}
	return head, true
}

// strPrefix decodes the string at s.i like str(true) but stops once
// maxBytes bytes (maxBytes > 0) of its value are known: it returns a head
// of the value at least that long (or the whole value), ending on a
// character boundary, and cut=true when the value is longer than the head.
// The raw text is never cut inside an escape, a surrogate pair or a
// character, so the head is exactly a prefix of the whole value.
func (s *scanner) strPrefix(maxBytes int) (v string, cut bool, err error) {
	if maxBytes <= 0 {
		v, err = s.str(true)
		return v, false, err
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false, errScan
	}
	start := s.i + 1
	i, n := start, 0 // n: bytes of the value up to raw offset i
	plain := true    // no escape and no invalid UTF-8 so far
	for {
		// Eight plain ASCII bytes at a time: most text is.
		for n+8 <= maxBytes && i+8 <= len(s.b) {
			x := binary.LittleEndian.Uint64(s.b[i:])
			if special8(x)|x&highs != 0 {
				break
			}
			i += 8
			n += 8
		}
		if n >= maxBytes {
			break
		}
		if i >= len(s.b) {
			return "", false, errScan
		}
		c := s.b[i]
		switch {
		case c == '"':
			s.i = start - 1
			v, err = s.str(true)
			return v, false, err
		case c == '\\':
			plain = false
			if i+1 >= len(s.b) {
				return "", false, errScan
			}
			if s.b[i+1] != 'u' {
				i += 2
				n++
				continue
			}
			r, ok := hex4(s.b, i+2)
			if !ok {
				return "", false, errScan
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s.b, i+2); ok && i+1 < len(s.b) && s.b[i] == '\\' && s.b[i+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						i += 6
						r = d
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			n += utf8.RuneLen(r)
		case c < 0x20:
			return "", false, errScan
		case c < utf8.RuneSelf:
			i++
			n++
		default:
			r, size := utf8.DecodeRune(s.b[i:])
			if r == utf8.RuneError && size == 1 {
				plain = false
				n += 3 // U+FFFD
			} else {
				n += size
			}
			i += size
		}
	}
	// Is the string over right here?
	if i < len(s.b) && s.b[i] == '"' {
		s.i = start - 1
		v, err = s.str(true)
		return v, false, err
	}
	raw := s.b[start:i]
	if plain {
		return string(raw), true, nil
	}
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	var dec string
	if json.Unmarshal(quoted, &dec) != nil {
		return "", false, errScan
	}
	return dec, true, nil
}

// hex4 decodes the four hex digits at b[i:], as encoding/json's getu4.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) || !isHex4(b[i:i+4]) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Block is one content block of an agent message (docs/conversations.md, The transcript) with the
// fields of its known types decoded (exact keys, last duplicate wins, a
// field of the wrong type reads as zero).
type Block struct {
	Type string
	// Text is a text block's text.
	Text string
	// Thinking and Redacted belong to thinking blocks.
	Thinking string
	Redacted bool
	// ID, Name and Arguments (raw) belong to toolCall blocks.
	ID        string
	Name      string
	Arguments json.RawMessage
	// MimeType and Data (the raw base64 string: see StringValue) belong to
	// image blocks.
	MimeType string
	Data     json.RawMessage
}

// Blocks decodes a message content: a string is one text block, an array
// its objects in order (other elements are left out); anything else has no
// blocks. Invalid JSON is an error.
func Blocks(content json.RawMessage) ([]Block, error) {
	s := &scanner{b: content}
	s.ws()
	if s.i >= len(s.b) {
		return nil, nil
	}
	switch s.b[s.i] {
	case '"':
		t, err := s.str(true)
		if err != nil || s.end() != nil {
			return nil, ErrNotJSON
		}
		return []Block{{Type: "text", Text: t}}, nil
	case '[':
	default:
		return nil, s.whole()
	}
	var out []Block
	err := s.array(1, func() (bool, error) {
		if s.b[s.i] != '{' {
			return false, nil
		}
		var b Block
		err := s.object(2, func(key []byte) (bool, error) {
			switch string(key) {
			case "type":
				return s.strField(&b.Type)
			case "text":
				return s.strField(&b.Text)
			case "thinking":
				return s.strField(&b.Thinking)
			case "redacted":
				b.Redacted = s.i < len(s.b) && s.b[s.i] == 't'
			case "id":
				return s.strField(&b.ID)
			case "name":
				return s.strField(&b.Name)
			case "arguments":
				return s.rawField(&b.Arguments)
			case "mimeType":
				return s.strField(&b.MimeType)
			case "data":
				return s.rawField(&b.Data)
			}
			return false, nil
		})
		out = append(out, b)
		return true, err
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return nil, ErrNotJSON
	}
	return out, nil
}

// Usage is the token usage of an assistant message with each number as
// written ("" when absent or not a number), so callers convert it with the
// type they sum in (see Int and Float).
type Usage struct {
	Input, Output, CacheRead, CacheWrite, TotalTokens json.Number
	// CostTotal is cost.total, in USD.
	CostTotal json.Number
}

// ParseUsage reads a usage object (MessageInfo.Usage). Absent, null or a
// value of another type is the zero Usage; invalid JSON is an error.
func ParseUsage(raw json.RawMessage) (Usage, error) {
	var u Usage
	s := &scanner{b: raw}
	s.ws()
	if s.i == len(s.b) {
		return u, nil
	}
	if s.b[s.i] != '{' {
		return Usage{}, s.whole()
	}
	num := func(dst *json.Number) (bool, error) {
		start := s.i
		if err := s.skip(1); err != nil {
			return true, err
		}
		*dst = ""
		if v := s.b[start:s.i]; len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9') {
			*dst = json.Number(v)
		}
		return true, nil
	}
	err := s.object(0, func(key []byte) (bool, error) {
		switch string(key) {
		case "input":
			return num(&u.Input)
		case "output":
			return num(&u.Output)
		case "cacheRead":
			return num(&u.CacheRead)
		case "cacheWrite":
			return num(&u.CacheWrite)
		case "totalTokens":
			return num(&u.TotalTokens)
		case "cost":
			u.CostTotal = ""
			if s.i >= len(s.b) || s.b[s.i] != '{' {
				return false, nil
			}
			return true, s.object(1, func(key []byte) (bool, error) {
				if string(key) == "total" {
					return num(&u.CostTotal)
				}
				return false, nil
			})
		}
		return false, nil
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return Usage{}, ErrNotJSON
	}
	return u, nil
}

// intValue converts an integer literal as encoding/json does for an int64
// (no fraction, no exponent, in range).
func intValue(raw []byte) (int64, bool) {
	n, err := json.Number(raw).Int64()
	if err != nil || !isIntLiteral(raw) {
		return 0, false
	}
	return n, true
}

func isIntLiteral(raw []byte) bool {
	if len(raw) > 0 && raw[0] == '-' {
		raw = raw[1:]
	}
	if len(raw) == 0 {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// StringValue returns the value of a JSON string, or "" for any other
// value (null, numbers, objects, absent, invalid).
func StringValue(raw json.RawMessage) string { return str(raw) }

// fullBatch bounds the bytes of light entries FullEntries reads back at
// once: large enough that a batch is one read of neighbouring lines, small
// enough to stay a small part of the index's memory.
const fullBatch = 1 << 20

// FullEntries returns Full of each of entries, in their order, reading
// light entries back in batches of about 1 MB (lines close together in the
// file with one read) and keeping none of them, so memory stays bounded by
// what the caller holds. A read error ends the sequence with that error.
func (f *File) FullEntries(entries []*Entry) iter.Seq2[*Entry, error] {
	return f.fullEntries(entries, fullBatch)
}

func (f *File) fullEntries(entries []*Entry, batch int) iter.Seq2[*Entry, error] {
	return func(yield func(*Entry, error) bool) {
		err := f.inBatches(entries, batch, func(full []*Entry) error {
			for _, e := range full {
				if !yield(e, nil) {
					return errStop
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(nil, err)
		}
	}
}
