// Package transcript reads pi coding agent session transcripts (JSONL, v1, v2
// and v3, migrated to v3 in memory), builds their entry tree and the model
// context for a leaf exactly as pi's buildSessionContext does. The format is
// described in shared/design/FORMATS.md §1.
package transcript

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
	// thinking_level_change
	ThinkingLevel string
	// compaction, branch_summary
	Summary          string
	FirstKeptEntryID string
	TokensBefore     json.RawMessage
	FromID           string
	Details          json.RawMessage
	// custom, custom_message
	CustomType string
	Content    json.RawMessage
	Display    json.RawMessage
	// label, context_edit
	TargetID    string
	Label       *string
	Replacement json.RawMessage // context_edit: {"content":...} or null
	// session_info
	Name *string
}

// entryJSON is the decoding shape of the known entry fields.
type entryJSON struct {
	Type             string          `json:"type"`
	ID               json.RawMessage `json:"id"`
	ParentID         json.RawMessage `json:"parentId"`
	Timestamp        json.RawMessage `json:"timestamp"`
	Message          json.RawMessage `json:"message"`
	Provider         json.RawMessage `json:"provider"`
	ModelID          json.RawMessage `json:"modelId"`
	ThinkingLevel    json.RawMessage `json:"thinkingLevel"`
	Summary          json.RawMessage `json:"summary"`
	FirstKeptEntryID json.RawMessage `json:"firstKeptEntryId"`
	TokensBefore     json.RawMessage `json:"tokensBefore"`
	FromID           json.RawMessage `json:"fromId"`
	Details          json.RawMessage `json:"details"`
	CustomType       json.RawMessage `json:"customType"`
	Content          json.RawMessage `json:"content"`
	Display          json.RawMessage `json:"display"`
	TargetID         json.RawMessage `json:"targetId"`
	Label            json.RawMessage `json:"label"`
	Replacement      json.RawMessage `json:"replacement"`
	Name             json.RawMessage `json:"name"`
	Version          json.RawMessage `json:"version"`
	Cwd              json.RawMessage `json:"cwd"`
	ParentSession    json.RawMessage `json:"parentSession"`
	Kind             json.RawMessage `json:"kind"`
}

type messageJSON struct {
	Role     json.RawMessage `json:"role"`
	Provider json.RawMessage `json:"provider"`
	Model    json.RawMessage `json:"model"`
}

// str returns the value of a JSON string, or "" for anything else (null,
// numbers, objects, absent): the reader tolerates wrongly typed fields.
func str(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
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
	var j entryJSON
	if err := json.Unmarshal(line, &j); err != nil {
		return nil, err
	}
	e := &Entry{
		Type:             j.Type,
		ID:               str(j.ID),
		ParentID:         str(j.ParentID),
		Timestamp:        str(j.Timestamp),
		Raw:              json.RawMessage(line),
		Provider:         str(j.Provider),
		ModelID:          str(j.ModelID),
		ThinkingLevel:    str(j.ThinkingLevel),
		Summary:          str(j.Summary),
		FirstKeptEntryID: str(j.FirstKeptEntryID),
		TokensBefore:     j.TokensBefore,
		FromID:           str(j.FromID),
		Details:          j.Details,
		CustomType:       str(j.CustomType),
		Content:          j.Content,
		Display:          j.Display,
		TargetID:         str(j.TargetID),
		Label:            strPtr(j.Label),
		Replacement:      j.Replacement,
		Name:             strPtr(j.Name),
	}
	if e.Type == "message" {
		e.Message = j.Message
		var m messageJSON
		if len(j.Message) > 0 && j.Message[0] == '{' && json.Unmarshal(j.Message, &m) == nil {
			e.Role = str(m.Role)
			if e.Role == "assistant" {
				e.Provider = str(m.Provider)
				e.ModelID = str(m.Model)
			}
		}
	}
	return e, nil
}

// parseHeader decodes a header line.
func parseHeader(line []byte) (Header, error) {
	var j entryJSON
	if err := json.Unmarshal(line, &j); err != nil {
		return Header{}, err
	}
	if j.Type != "session" {
		if str(j.Kind) == "header" {
			return Header{}, fmt.Errorf("%w: harness header (kind %q, version %s) is a different format", ErrForeignFormat, "header", j.Version)
		}
		return Header{}, fmt.Errorf("%w: first line has type %q, want \"session\"", ErrForeignFormat, j.Type)
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
	notes   []string
	maxLine int

	// v1 migration state: ids of parsed entries by index (header is 0).
	v1ids  []string
	prevID string
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
func (rd *Reader) Notes() []string { return rd.notes }

func (rd *Reader) skip(line []byte, last bool) {
	if last {
		rd.notes = append(rd.notes, fmt.Sprintf("line %d: torn last line (%d bytes, no newline) ignored", rd.line, len(line)))
		return
	}
	rd.notes = append(rd.notes, fmt.Sprintf("line %d: not a JSON object, skipped", rd.line))
}

// readLine returns the next non-blank line (a fresh copy, without the line
// terminator), nil for a blank or over-long line, and last=true when the line
// had no terminating newline. It returns io.EOF when nothing is left.
func (rd *Reader) readLine() (line []byte, last bool, err error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := rd.br.ReadSlice('\n')
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
			rd.notes = append(rd.notes, fmt.Sprintf("line %d: longer than %d bytes, skipped", rd.line, rd.maxLine))
			return nil, eof, nil
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if rd.line == 1 {
			buf = bytes.TrimPrefix(buf, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(buf)) == 0 {
			return nil, eof, nil
		}
		return buf, eof, nil
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
		e, err := ParseLine(line)
		if err != nil || !isObject(line) {
			rd.skip(line, last)
			continue
		}
		e.Line = rd.line
		if err := rd.migrate(e); err != nil {
			return nil, fmt.Errorf("line %d: %w", rd.line, err)
		}
		return e, nil
	}
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
					e.FirstKeptEntryID = rd.v1ids[i]
					patch["firstKeptEntryId"] = e.FirstKeptEntryID
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

// patchObject sets (or deletes) top-level keys of a JSON object, keeping all
// other values byte-for-byte. Key order is not preserved (readers must not
// depend on it); HTML characters are not escaped.
func patchObject(raw json.RawMessage, patch map[string]any) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	if obj == nil {
		obj = map[string]json.RawMessage{}
	}
	for k, v := range patch {
		if _, del := v.(deleteKey); del {
			delete(obj, k)
			continue
		}
		b, err := marshal(v)
		if err != nil {
			return nil, err
		}
		obj[k] = b
	}
	return marshal(obj)
}

// marshal encodes v compactly without HTML escaping (like JSON.stringify).
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// File is a whole transcript in memory, migrated to v3, with its tree index.
type File struct {
	Header  Header
	Entries []*Entry
	// Notes lists the quirks tolerated while reading (torn last line,
	// malformed or over-long lines skipped).
	Notes []string

	byID map[string]*Entry
}

// Read reads a whole transcript from r.
func Read(r io.Reader) (*File, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
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

// Open reads the transcript at path.
func Open(path string) (*File, error) {
	fh, err := os.Open(path) // #nosec G304 -- reading a transcript the caller names is the purpose
	if err != nil {
		return nil, err
	}
	defer func() { _ = fh.Close() }()
	f, err := Read(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Full returns e with every field decoded. Files opened with Open keep large
// entries on disk (only their index is resident); Full reads them back.
// Callers that need Raw, Message, Content, Details or Replacement of an
// entry of an opened file must go through Full.
func (f *File) Full(e *Entry) (*Entry, error) {
	return e, nil
}

// Raw returns the (migrated) JSON line of e.
func (f *File) Raw(e *Entry) (json.RawMessage, error) {
	full, err := f.Full(e)
	if err != nil {
		return nil, err
	}
	return full.Raw, nil
}

// Close releases the file handle an opened File keeps for Full.
func (f *File) Close() error { return nil }
