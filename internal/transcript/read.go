// Package transcript reads pi coding agent session transcripts (JSONL, v1, v2
// and v3, migrated to v3 in memory), builds their entry tree and the model
// context for a leaf exactly as pi's buildSessionContext does. The format is
// described in docs/conversations.md (Formats, The transcript).
package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
)

// CurrentVersion is the transcript format version entries are migrated to.
const CurrentVersion = 3

// DefaultMaxLine is the longest line the reader accepts (tool results may
// carry huge base64 images). Longer lines are skipped with a note.
const DefaultMaxLine = 512 << 20

// ErrForeignFormat is returned for a file whose first line is not a pi
// session header (for example the harness format `{"kind":"header","version":4}`).
var ErrForeignFormat = errors.New("transcript: not a pi session file")

// ErrEmpty is returned for a file without any JSON line.
var ErrEmpty = errors.New("transcript: empty file")

// Header is the first line of a transcript. It is not part of the tree.
type Header struct {
	ID            string
	Timestamp     string
	Cwd           string
	ParentSession string
	// Version is the version as read (1 when the field is absent).
	Version int
	// Raw is the header line exactly as read.
	Raw json.RawMessage
}

// Entry is one line after the header, migrated to v3. Known fields are
// decoded; Raw holds the whole (migrated) entry so unknown types and fields
// survive untouched.
type Entry struct {
	Type      string
	ID        string
	ParentID  string // "" for null/absent (a root)
	Timestamp string
	// Line is the 1-based line number in the file.
	Line int
	// Raw is the line as read, or, when a migration changed the entry, the
	// entry re-encoded with only the migrated fields changed (other values
	// are kept byte-for-byte).
	Raw json.RawMessage

	// message
	Message json.RawMessage // the agent message
	Role    string          // message.role
	// model_change (Provider, ModelID) and assistant messages (Provider,
	// ModelID from message.provider/message.model).
	Provider string
	ModelID  string
	// custom, custom_message
	CustomType string
	// The fields of the other entry types (compaction, branch_summary,
	// custom_message, label, context_edit, session_info, ...), behind one
	// pointer: a million message entries do not pay for them.
	x *extraFields

	// off and size locate the line in its file; an entry whose Raw is nil
	// is light (read back by File.Full).
	off  int64
	size int
	// msgOff and msgEnd locate the message value in the line of a light
	// message entry that has no other known field, so Full can hand it
	// out without parsing the line again (0, 0: parse).
	msgOff, msgEnd int32
}

// entryJSON holds the raw values of the known entry fields.
type entryJSON struct {
	Type, ID, ParentID, Timestamp, Message, Provider, ModelID, ThinkingLevel json.RawMessage
	Summary, FirstKeptEntryID, TokensBefore, FromID, Details, CustomType     json.RawMessage
	Content, Display, TargetID, Label, Replacement, Name, Version, Cwd       json.RawMessage
	ParentSession, Kind                                                      json.RawMessage
}

func (j *entryJSON) field(key []byte) *json.RawMessage {
	switch string(key) {
	case "type":
		return &j.Type
	case "id":
		return &j.ID
	case "parentId":
		return &j.ParentID
	case "timestamp":
		return &j.Timestamp
	case "message":
		return &j.Message
	case "provider":
		return &j.Provider
	case "modelId":
		return &j.ModelID
	case "thinkingLevel":
		return &j.ThinkingLevel
	case "summary":
		return &j.Summary
	case "firstKeptEntryId":
		return &j.FirstKeptEntryID
	case "tokensBefore":
		return &j.TokensBefore
	case "fromId":
		return &j.FromID
	case "details":
		return &j.Details
	case "customType":
		return &j.CustomType
	case "content":
		return &j.Content
	case "display":
		return &j.Display
	case "targetId":
		return &j.TargetID
	case "label":
		return &j.Label
	case "replacement":
		return &j.Replacement
	case "name":
		return &j.Name
	case "version":
		return &j.Version
	case "cwd":
		return &j.Cwd
	case "parentSession":
		return &j.ParentSession
	case "kind":
		return &j.Kind
	}
	return nil
}

// errNotObject is returned for a line that is not one JSON object.
var errNotObject = errors.New("not a JSON object")

// decodeEntry scans line into j; trusted skips validation of the values
// it does not decode (for lines validated before).
func decodeEntry(line []byte, trusted bool, j *entryJSON) error {
	if err := rawFields(line, trusted, j.field); err != nil {
		return errNotObject
	}
	return nil
}

func strPtr(raw json.RawMessage) *string {
	if len(raw) == 0 || raw[0] != '"' {
		return nil
	}
	s := str(raw)
	return &s
}

// ParseLine decodes one entry line (without migration). It fails only when
// the line is not a JSON object.
func ParseLine(line []byte) (*Entry, error) {
	e := new(Entry)
	if err := parseInto(line, false, e); err != nil {
		return nil, err
	}
	return e, nil
}

// parseInto decodes line into *e (overwriting every field).
func parseInto(line []byte, trusted bool, e *Entry) error {
	var j entryJSON
	if err := decodeEntry(line, trusted, &j); err != nil {
		return err
	}
	*e = Entry{
		Type:       str(j.Type),
		ID:         str(j.ID),
		ParentID:   str(j.ParentID),
		Timestamp:  str(j.Timestamp),
		Raw:        json.RawMessage(line),
		Provider:   str(j.Provider),
		ModelID:    str(j.ModelID),
		CustomType: str(j.CustomType),
	}
	if j.ThinkingLevel != nil || j.Summary != nil || j.FirstKeptEntryID != nil || j.TokensBefore != nil ||
		j.FromID != nil || j.Details != nil || j.Content != nil || j.Display != nil || j.TargetID != nil ||
		j.Label != nil || j.Replacement != nil || j.Name != nil {
		e.x = &extraFields{
			thinkingLevel:    str(j.ThinkingLevel),
			summary:          str(j.Summary),
			firstKeptEntryID: str(j.FirstKeptEntryID),
			tokensBefore:     j.TokensBefore,
			fromID:           str(j.FromID),
			details:          j.Details,
			content:          j.Content,
			display:          j.Display,
			targetID:         str(j.TargetID),
			label:            strPtr(j.Label),
			replacement:      j.Replacement,
			name:             strPtr(j.Name),
		}
	}
	if e.Type == "message" {
		e.Message = j.Message
		if len(j.Message) > 0 && j.Message[0] == '{' {
			var role, provider, model json.RawMessage
			_ = rawFields(j.Message, trusted, func(key []byte) *json.RawMessage {
				switch string(key) {
				case "role":
					return &role
				case "provider":
					return &provider
				case "model":
					return &model
				}
				return nil
			})
			e.Role = str(role)
			if e.Role == "assistant" {
				e.Provider = str(provider)
				e.ModelID = str(model)
			}
		}
	}
	return nil
}

// parseHeader decodes a header line.
func parseHeader(line []byte) (Header, error) {
	var j entryJSON
	if err := decodeEntry(line, false, &j); err != nil {
		return Header{}, err
	}
	if str(j.Type) != "session" {
		if str(j.Kind) == "header" {
			return Header{}, fmt.Errorf("%w: harness header (kind %q, version %s) is a different format", ErrForeignFormat, "header", j.Version)
		}
		return Header{}, fmt.Errorf("%w: first line has type %q, want \"session\"", ErrForeignFormat, str(j.Type))
	}
	h := Header{
		ID:            str(j.ID),
		Timestamp:     str(j.Timestamp),
		Cwd:           str(j.Cwd),
		ParentSession: str(j.ParentSession),
		Version:       1,
		Raw:           json.RawMessage(line),
	}
	// Like pi's `header.version ?? 1` compared numerically: a number, or a
	// numeric string (as some hand-written files have), counts.
	vraw := j.Version
	if s := str(vraw); s != "" {
		vraw = json.RawMessage(s)
	}
	var v float64
	if len(vraw) > 0 && json.Unmarshal(vraw, &v) == nil && v >= 1 {
		h.Version = int(v)
	}
	return h, nil
}

// Reader streams the entries of a transcript, migrating them to v3.
type Reader struct {
	br      *bufio.Reader
	header  Header
	line    int
	notes   []note
	maxLine int

	// v1 migration state: ids of parsed entries by index (header is 0).
	v1ids  []string
	prevID string

	// pos is the offset of the next unread byte; lineOff is where the line
	// readLine last returned starts.
	pos, lineOff int64
	scratch      []byte
	// lazy makes Next return light entries for message, custom and
	// custom_message lines (see File.Full) and reuse one line buffer.
	lazy   bool
	intern map[string]string
	tmp    Entry
	slab   []Entry
}

// NewReader reads the header from r and returns a Reader positioned at the
// first entry. Lines before the header that are not JSON are skipped with a
// note; a first JSON line that is not a session header is an error.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{br: bufio.NewReaderSize(r, 64<<10), maxLine: DefaultMaxLine}
	for {
		line, last, err := rd.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, ErrEmpty
			}
			return nil, err
		}
		if line == nil {
			continue
		}
		if !json.Valid(line) {
			rd.skip(line, last)
			continue
		}
		h, err := parseHeader(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", rd.line, err)
		}
		rd.header = h
		if h.Version < 2 {
			rd.v1ids = []string{""}
		}
		return rd, nil
	}
}

// Header returns the header as read.
func (rd *Reader) Header() Header { return rd.header }

// Notes returns the quirks tolerated so far (skipped lines and why).
func (rd *Reader) Notes() []string {
	out := make([]string, len(rd.notes))
	for i, n := range rd.notes {
		out[i] = n.String()
	}
	return out
}

// note is a tolerated quirk at a line; lines are renumbered when chunks
// indexed in parallel are joined.
type note struct {
	line int
	text string
}

func (n note) String() string { return fmt.Sprintf("line %d: %s", n.line, n.text) }

func (rd *Reader) skip(line []byte, last bool) {
	if last {
		rd.notes = append(rd.notes, note{rd.line, fmt.Sprintf("torn last line (%d bytes, no newline) ignored", len(line))})
		return
	}
	rd.notes = append(rd.notes, note{rd.line, "not a JSON object, skipped"})
}

// readLine returns the next non-blank line (a fresh copy, without the line
// terminator), nil for a blank or over-long line, and last=true when the line
// had no terminating newline. It returns io.EOF when nothing is left.
func (rd *Reader) readLine() (line []byte, last bool, err error) {
	var buf []byte
	if rd.lazy {
		buf = rd.scratch[:0]
		defer func() { rd.scratch = buf[:0] }()
	}
	tooLong := false
	rd.lineOff = rd.pos
	for {
		chunk, err := rd.br.ReadSlice('\n')
		rd.pos += int64(len(chunk))
		if !tooLong {
			if len(buf)+len(chunk) > rd.maxLine {
				tooLong = true
				buf = nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, err
		}
		eof := err != nil
		if eof && len(chunk) == 0 && len(buf) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		rd.line++
		if tooLong {
			rd.notes = append(rd.notes, note{rd.line, fmt.Sprintf("longer than %d bytes, skipped", rd.maxLine)})
			return nil, eof, nil
		}
		line := bytes.TrimSuffix(buf, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if rd.line == 1 && bytes.HasPrefix(line, []byte("\xef\xbb\xbf")) {
			line = line[3:]
			rd.lineOff += 3
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return nil, eof, nil
		}
		return line, eof, nil
	}
}

// Next returns the next entry, migrated to v3, or io.EOF.
func (rd *Reader) Next() (*Entry, error) {
	for {
		line, last, err := rd.readLine()
		if err != nil {
			return nil, err
		}
		if line == nil {
			continue
		}
		if rd.lazy && rd.header.Version >= CurrentVersion {
			if e, ok := rd.light(line); ok {
				return e, nil
			}
		}
		if rd.lazy {
			line = bytes.Clone(line)
		}
		e, err := ParseLine(line)
		if err != nil || !isObject(line) {
			rd.skip(line, last)
			continue
		}
		if e.Type == "session" {
			// pi drops every session line from the entries (two files
			// concatenated carry a second header): so do we.
			rd.notes = append(rd.notes, note{rd.line, "another session header, ignored"})
			continue
		}
		e.Line = rd.line
		e.off, e.size = rd.lineOff, len(line)
		if err := rd.migrate(e); err != nil {
			return nil, fmt.Errorf("line %d: %w", rd.line, err)
		}
		return e, nil
	}
}

// light returns a light entry for a message, custom or custom_message line
// (the bulk of a transcript), or false when the line must be kept resident.
func (rd *Reader) light(line []byte) (*Entry, bool) {
	e := &rd.tmp
	if parseInto(line, false, e) != nil {
		return nil, false
	}
	switch e.Type {
	case "message", "custom", "custom_message":
	default:
		return nil, false
	}
	// Keep only what the tree and context need; the strings decoded by
	// ParseLine are copies, the raw fields point into the reused buffer.
	// Light entries come from slabs: a million small objects less for the
	// allocator and the collector on a 1 GB file.
	var msgOff, msgEnd int32
	if e.Type == "message" && plainMessage(e) {
		msgOff = int32(cap(line) - cap(e.Message)) // #nosec G115 -- lines are at most DefaultMaxLine (512 MiB)
		msgEnd = msgOff + int32(len(e.Message))    // #nosec G115 -- idem
	}
	if len(rd.slab) == 0 {
		rd.slab = make([]Entry, 256)
	}
	le := &rd.slab[0]
	rd.slab = rd.slab[1:]
	*le = Entry{
		Type:       rd.interned(e.Type),
		ID:         e.ID,
		ParentID:   e.ParentID,
		Timestamp:  e.Timestamp,
		Role:       rd.interned(e.Role),
		Provider:   rd.interned(e.Provider),
		ModelID:    rd.interned(e.ModelID),
		CustomType: rd.interned(e.CustomType),
		Line:       rd.line,
		off:        rd.lineOff,
		size:       len(line),
		msgOff:     msgOff,
		msgEnd:     msgEnd,
	}
	return le, true
}

// plainSpan returns the message of a plain light message entry from its
// line as read back, after cheap checks that the line is still the one
// indexed; false means: parse the line.
func plainSpan(e *Entry, line []byte) (json.RawMessage, bool) {
	if e.msgEnd > 0 && len(line) == e.size && int(e.msgEnd) <= len(line) &&
		line[e.msgOff] == '{' && line[e.msgEnd-1] == '}' && line[len(line)-1] == '}' &&
		bytes.Contains(line[:e.msgOff], []byte(`"id":"`+e.ID+`"`)) {
		return line[e.msgOff:e.msgEnd], true
	}
	return nil, false
}

// plainMessage reports whether a parsed message entry has an object message
// and no known field but type, id, parentId, timestamp and message: then
// the resident fields and the message's span are the whole parse.
func plainMessage(e *Entry) bool {
	nonAssistant := e.Role != "assistant" && (e.Provider != "" || e.ModelID != "")
	return len(e.Message) > 1 && e.Message[0] == '{' && !nonAssistant && e.CustomType == "" && e.x == nil
}

// interned returns a shared copy of a string that repeats across entries
// (types, roles, providers, models).
func (rd *Reader) interned(s string) string {
	if v, ok := rd.intern[s]; ok {
		return v
	}
	if rd.intern == nil {
		rd.intern = map[string]string{}
	}
	if len(rd.intern) < 4096 {
		rd.intern[s] = s
	}
	return s
}

func isObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// v1ID is the id given to the n-th entry (1-based) of a v1 file. Ids are
// deterministic so that a v1 file read twice yields the same tree (it is
// migrated in memory only, and callers refer to entries by id).
func v1ID(n int) string { return fmt.Sprintf("%08x", n) }

// migrate applies the v1→v2 and v2→v3 migrations to e in place.
func (rd *Reader) migrate(e *Entry) error {
	patch := map[string]any{}
	var msgPatch map[string]any
	if rd.header.Version < 2 {
		// v1 → v2: fresh id, previous entry as parent, compaction index → id.
		e.ID = v1ID(len(rd.v1ids))
		patch["id"] = e.ID
		if rd.prevID == "" {
			e.ParentID = ""
			patch["parentId"] = nil
		} else {
			e.ParentID = rd.prevID
			patch["parentId"] = e.ParentID
		}
		rd.prevID = e.ID
		rd.v1ids = append(rd.v1ids, e.ID)
		if e.Type == "compaction" {
			var c struct {
				Index *float64 `json:"firstKeptEntryIndex"`
			}
			if json.Unmarshal(e.Raw, &c) == nil && c.Index != nil {
				i := int(*c.Index)
				// pi resolves the index against entries already migrated;
				// the header (index 0) and later entries give no id.
				if i > 0 && i < len(rd.v1ids) && float64(i) == *c.Index {
					e.extra().firstKeptEntryID = rd.v1ids[i]
					patch["firstKeptEntryId"] = rd.v1ids[i]
				}
				patch["firstKeptEntryIndex"] = deleteKey{}
			}
		}
	}
	if rd.header.Version < 3 && e.Type == "message" && e.Role == "hookMessage" {
		// v2 → v3: hookMessage becomes custom.
		e.Role = "custom"
		msgPatch = map[string]any{"role": "custom"}
	}
	if len(patch) == 0 && msgPatch == nil {
		return nil
	}
	if msgPatch != nil {
		m, err := patchObject(e.Message, msgPatch)
		if err != nil {
			return err
		}
		e.Message = m
		patch["message"] = m
	}
	raw, err := patchObject(e.Raw, patch)
	if err != nil {
		return err
	}
	e.Raw = raw
	return nil
}

// deleteKey marks a key to remove in patchObject.
type deleteKey struct{}

// patchObject sets (or deletes) top-level keys of a JSON object, keeping
// the other members byte-for-byte and in their order; a replaced key keeps
// its place, new keys go last (sorted). HTML characters are not escaped.
func patchObject(raw json.RawMessage, patch map[string]any) (json.RawMessage, error) {
	vals := make(map[string][]byte, len(patch))
	for k, v := range patch {
		if _, del := v.(deleteKey); del {
			vals[k] = nil
			continue
		}
		b, err := marshal(v)
		if err != nil {
			return nil, err
		}
		vals[k] = b
	}
	out := []byte{'{'}
	done := map[string]bool{}
	add := func(k string, v []byte) error {
		kb, err := marshal(k)
		if err != nil {
			return err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, kb...), ':'), v...)
		return nil
	}
	s := &scanner{b: raw}
	s.ws()
	if err := s.object(0, func(key []byte) (bool, error) {
		start := s.i
		if err := s.skip(1); err != nil {
			return true, err
		}
		k := string(key)
		if v, patched := vals[k]; patched {
			if done[k] || v == nil {
				done[k] = true
				return true, nil
			}
			done[k] = true
			return true, add(k, v)
		}
		return true, add(k, s.b[start:s.i])
	}); err != nil {
		return nil, fmt.Errorf("patch object: %w", err)
	}
	var fresh []string
	for k, v := range vals {
		if !done[k] && v != nil {
			fresh = append(fresh, k)
		}
	}
	sort.Strings(fresh)
	for _, k := range fresh {
		if err := add(k, vals[k]); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

// Marshal encodes v compactly without HTML escaping, as JavaScript's
// JSON.stringify does: what nexus writes into pi and OpenClaw files.
func Marshal(v any) (json.RawMessage, error) { return marshal(v) }

func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// File is a transcript migrated to v3 with its tree index. A File from Read
// holds every entry in memory; a File from Open keeps large message, custom
// and custom_message entries on disk as light entries (only the fields the
// tree and context need are resident) and reads them back in Full, so a
// 1 GB transcript costs its index, not its size.
type File struct {
	Header  Header
	Entries []*Entry
	// Notes lists the quirks tolerated while reading (torn last line,
	// malformed or over-long lines skipped).
	Notes []string

	byID map[string]*Entry
	path string
	src  *os.File
}

// Read reads a whole transcript from r into memory.
func Read(r io.Reader) (*File, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	return readAll(rd)
}

func readAll(rd *Reader) (*File, error) {
	f := &File{Header: rd.Header()}
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		f.Entries = append(f.Entries, e)
	}
	f.Notes = rd.Notes()
	f.index()
	return f, nil
}

// Open indexes the transcript at path. The File keeps the file open to read
// light entries back: Close it.
func Open(path string) (*File, error) { return open(path, parallelMin) }

func open(path string, parallelFrom int64) (*File, error) {
	fh, err := os.Open(path) // #nosec G304 G703 -- reading a transcript the caller names is the purpose
	if err != nil {
		return nil, fmt.Errorf("open transcript: %w", err)
	}
	rd, err := NewReader(fh)
	if err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rd.lazy = true
	var f *File
	if st, serr := fh.Stat(); serr == nil && rd.header.Version >= CurrentVersion &&
		st.Size()-rd.pos >= parallelFrom && runtime.GOMAXPROCS(0) > 1 {
		f, err = indexParallel(fh, rd, st.Size())
	} else {
		f, err = readAll(rd)
	}
	if err != nil {
		_ = fh.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.path, f.src = path, fh
	return f, nil
}

// parallelMin is the size from which Open indexes a v3 file in parallel
// chunks (entries carry their own ids and parents, so chunks are
// independent; v1/v2 migration is sequential).
const parallelMin = 4 << 20

// indexParallel indexes src after the header hdr has read, in one chunk per
// CPU split at line boundaries, and joins the chunks in file order.
func indexParallel(src *os.File, hdr *Reader, size int64) (*File, error) {
	n := min(runtime.GOMAXPROCS(0), 8)
	bounds := []int64{hdr.pos}
	for k := 1; k < n; k++ {
		b, err := nextLineStart(src, hdr.pos+(size-hdr.pos)*int64(k)/int64(n), size)
		if err != nil {
			return nil, err
		}
		if b > bounds[len(bounds)-1] && b < size {
			bounds = append(bounds, b)
		}
	}
	bounds = append(bounds, size)
	type part struct {
		entries []*Entry
		notes   []note
		lines   int
		err     error
	}
	parts := make([]part, len(bounds)-1)
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() {
			rd := &Reader{
				br:      bufio.NewReaderSize(io.NewSectionReader(src, bounds[i], bounds[i+1]-bounds[i]), 64<<10),
				maxLine: hdr.maxLine, header: hdr.header, lazy: true, pos: bounds[i],
			}
			p := &parts[i]
			for {
				e, err := rd.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					p.err = err
					return
				}
				p.entries = append(p.entries, e)
			}
			p.notes, p.lines = rd.notes, rd.line
		})
	}
	wg.Wait()
	total := 0
	for _, p := range parts {
		if p.err != nil {
			return nil, p.err
		}
		total += len(p.entries)
	}
	f := &File{Header: hdr.header, Entries: make([]*Entry, 0, total)}
	notes := hdr.notes
	base := hdr.line
	for _, p := range parts {
		for _, e := range p.entries {
			e.Line += base
		}
		for _, nt := range p.notes {
			nt.line += base
			notes = append(notes, nt)
		}
		f.Entries = append(f.Entries, p.entries...)
		base += p.lines
	}
	for _, nt := range notes {
		f.Notes = append(f.Notes, nt.String())
	}
	f.index()
	return f, nil
}

// nextLineStart returns the offset just after the first '\n' at or after
// off, or size when there is none.
func nextLineStart(src io.ReaderAt, off, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for off < size {
		n, err := src.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1, nil
		}
		off += int64(n)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("find line boundary: %w", err)
		}
		if n == 0 {
			break
		}
	}
	return size, nil
}

// Close releases the file handle an opened File keeps for Full. Entries
// already returned by Full stay valid.
func (f *File) Close() error {
	if f.src == nil {
		return nil
	}
	err := f.src.Close()
	f.src = nil
	return err
}

// Full returns e with every field decoded: e itself when it is resident,
// otherwise a fresh Entry read back from the file (not cached, so memory
// stays bounded). Callers that need Raw, Message, Content, Details, Display,
// Replacement or TokensBefore must go through Full.
func (f *File) Full(e *Entry) (*Entry, error) {
	if e.Raw != nil || e.size == 0 {
		return e, nil
	}
	if f.src == nil {
		return nil, fmt.Errorf("transcript %s: closed, cannot read line %d", f.path, e.Line)
	}
	buf := make([]byte, e.size)
	if _, err := f.src.ReadAt(buf, e.off); err != nil {
		return nil, fmt.Errorf("transcript %s: read line %d: %w", f.path, e.Line, err)
	}
	return f.reparse(e, buf)
}

// reparse decodes the bytes read back for a light entry and checks they are
// the line that was indexed (the file may have been rewritten meanwhile).
func (f *File) reparse(e *Entry, line []byte) (*Entry, error) {
	if msg, ok := plainSpan(e, line); ok {
		full := *e
		full.Raw, full.Message = line, msg
		return &full, nil
	}
	full := new(Entry)
	err := parseInto(line, true, full)
	if err != nil || full.ID != e.ID || full.Type != e.Type {
		return nil, fmt.Errorf("transcript %s: line %d changed on disk since it was indexed", f.path, e.Line)
	}
	full.Line, full.off, full.size, full.msgOff, full.msgEnd = e.Line, e.off, e.size, e.msgOff, e.msgEnd
	return full, nil
}

// fullAll returns Full of every entry, reading light entries that lie close
// together in the file with one read.
func (f *File) fullAll(entries []*Entry) ([]*Entry, error) {
	out := make([]*Entry, len(entries))
	err := f.readBack(entries, nil, func(i int, line []byte) error {
		if line == nil {
			out[i] = entries[i]
			return nil
		}
		full, err := f.reparse(entries[i], line)
		out[i] = full
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readBack calls fn(i, line) for every light entries[i] with its line read
// back (lines lying close together in the file come from one read), in file
// order, and fn(i, nil) for the resident ones. Lines are read into fresh
// buffers, or, with arena, into *arena (grown as needed): then they are
// valid only until the next readBack with the same arena.
func (f *File) readBack(entries []*Entry, arena *[]byte, fn func(i int, line []byte) error) error {
	var light []int
	for i, e := range entries {
		if e.Raw != nil || e.size == 0 {
			if err := fn(i, nil); err != nil {
				return err
			}
		} else {
			light = append(light, i)
		}
	}
	if len(light) == 0 {
		return nil
	}
	if f.src == nil {
		return fmt.Errorf("transcript %s: closed", f.path)
	}
	sort.Slice(light, func(a, b int) bool { return entries[light[a]].off < entries[light[b]].off })
	const maxGap, maxSpan = 64 << 10, 8 << 20
	used := 0
	for lo := 0; lo < len(light); {
		start := entries[light[lo]].off
		end := start + int64(entries[light[lo]].size)
		hi := lo + 1
		for ; hi < len(light); hi++ {
			e := entries[light[hi]]
			if e.off-end > maxGap || e.off+int64(e.size)-start > maxSpan {
				break
			}
			end = max(end, e.off+int64(e.size))
		}
		var buf []byte
		if n := int(end - start); arena == nil {
			buf = make([]byte, n)
		} else {
			if used+n > cap(*arena) {
				// Earlier ranges keep the old array; only later reads move on.
				*arena = make([]byte, max(2*cap(*arena), used+n))
				used = 0
			}
			buf = (*arena)[used : used+n]
			used += n
		}
		if _, err := f.src.ReadAt(buf, start); err != nil {
			return fmt.Errorf("transcript %s: read at %d: %w", f.path, start, err)
		}
		for _, i := range light[lo:hi] {
			e := entries[i]
			if err := fn(i, buf[e.off-start:e.off-start+int64(e.size)]); err != nil {
				return err
			}
		}
		lo = hi
	}
	return nil
}

// Raw returns the (migrated) JSON line of e.
func (f *File) Raw(e *Entry) (json.RawMessage, error) {
	full, err := f.Full(e)
	if err != nil {
		return nil, err
	}
	return full.Raw, nil
}

// extraFields holds the decoded fields of the entry types other than
// message (see Entry's accessors).
type extraFields struct {
	thinkingLevel    string
	summary          string
	firstKeptEntryID string
	tokensBefore     json.RawMessage
	fromID           string
	details          json.RawMessage
	content          json.RawMessage
	display          json.RawMessage
	targetID         string
	label            *string
	replacement      json.RawMessage
	name             *string
}

func (e *Entry) extra() *extraFields {
	if e.x == nil {
		e.x = &extraFields{}
	}
	return e.x
}

// ThinkingLevel is a thinking_level_change entry's level.
func (e *Entry) ThinkingLevel() string {
	if e.x == nil {
		return ""
	}
	return e.x.thinkingLevel
}

// Summary is a compaction or branch_summary entry's summary.
func (e *Entry) Summary() string {
	if e.x == nil {
		return ""
	}
	return e.x.summary
}

// FirstKeptEntryID is a compaction entry's first kept entry (migrated from
// firstKeptEntryIndex in v1 files).
func (e *Entry) FirstKeptEntryID() string {
	if e.x == nil {
		return ""
	}
	return e.x.firstKeptEntryID
}

// TokensBefore is a compaction entry's raw tokensBefore.
func (e *Entry) TokensBefore() json.RawMessage {
	if e.x == nil {
		return nil
	}
	return e.x.tokensBefore
}

// FromID is a branch_summary entry's fromId.
func (e *Entry) FromID() string {
	if e.x == nil {
		return ""
	}
	return e.x.fromID
}

// Details is the raw details of a compaction, branch_summary or
// custom_message entry (resident entries and Full only).
func (e *Entry) Details() json.RawMessage {
	if e.x == nil {
		return nil
	}
	return e.x.details
}

// Content is a custom_message entry's raw content (Full only for light
// entries).
func (e *Entry) Content() json.RawMessage {
	if e.x == nil {
		return nil
	}
	return e.x.content
}

// Display is a custom_message entry's raw display flag.
func (e *Entry) Display() json.RawMessage {
	if e.x == nil {
		return nil
	}
	return e.x.display
}

// TargetID is a label or context_edit entry's target.
func (e *Entry) TargetID() string {
	if e.x == nil {
		return ""
	}
	return e.x.targetID
}

// Label is a label entry's label (nil when absent: the label is cleared).
func (e *Entry) Label() *string {
	if e.x == nil {
		return nil
	}
	return e.x.label
}

// Replacement is a context_edit entry's raw replacement ({"content":...} or
// null).
func (e *Entry) Replacement() json.RawMessage {
	if e.x == nil {
		return nil
	}
	return e.x.replacement
}

// Name is a session_info entry's name (nil when absent).
func (e *Entry) Name() *string {
	if e.x == nil {
		return nil
	}
	return e.x.name
}
