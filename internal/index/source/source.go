// Package source reads the session transcripts of the agent tools on the machine (pi, Claude
// Code, Codex) into one model for the history index (docs/ARCHITECTURE.md, internal/index).
// One adapter per tool implements Source: where its files live, how to find them, and how to
// turn one file, from a byte offset, into sessions, messages and tool calls. Parsing never
// drops a session for a bad line: a malformed line or an unknown record type is counted per
// reason in the Result and reading goes on.
package source

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Session is what a transcript says about the conversation it holds.
type Session struct {
	Source string // the adapter's Name
	ID     string
	Path   string // the file it was read from
	// Project is the working directory the tool ran in.
	Project string
	// Model is the last model the session used.
	Model   string
	Created time.Time // first timestamp seen
	Updated time.Time // last timestamp seen
	Title   string
	// ParentSession, ParentMessage and ToolCallID link a subagent to the session, message
	// and tool call that started it, as far as the file says.
	ParentSession string
	ParentMessage string
	ToolCallID    string
	IsSubagent    bool
	// TaskStatus is a subagent's status as its own records say (nexus: its run's, pending
	// while it runs, then ok, error or timeout); "" leaves it to the call that started it.
	TaskStatus string
	// ForkOrigin is the session (or file) this one was forked from.
	ForkOrigin string
}

// Message is one user, assistant or other visible message, after merging the lines a tool
// splits one reply over.
type Message struct {
	// ID is the tool's own id of the message when it has one (Claude Code's message.id or
	// uuid, pi's entry id), else a position in the file; the index upserts by it.
	ID        string
	Role      string
	Text      string
	Timestamp time.Time
	// Seq is the message's position among the messages of this parse, from 0.
	Seq int
	// Turn counts the user prompts of this parse, from 1 (0: before the first prompt).
	Turn  int
	Model string
	// Context says the message is text the tool injected itself (Codex's environment context,
	// Claude Code's meta lines and notices), not a prompt the user typed: it starts no turn and
	// never titles the session.
	Context bool
	// Usage is the tokens of this message (assistant replies), counted once.
	Usage Usage
	// Origin is where a user message came from, when its transcript says (nexus's
	// nexusOrigin: the CLI, a webhook, a cron job...).
	Origin abi.Origin
}

// Tool call statuses.
const (
	StatusPending = "pending" // no result seen (yet)
	StatusOK      = "ok"
	StatusError   = "error"
)

// ResultExcerptMax is how much of a tool result is shown (nexus index show) and the bound of a
// string of a cut line past its first 4 MiB. The whole result (up to the index's cap) is kept
// and searched.
const ResultExcerptMax = 4096

// ToolCall is one call of a tool and, when seen, its result.
type ToolCall struct {
	ID     string
	Name   string
	Params string // the arguments as JSON (or the raw input text)
	// Result is the result's whole text as the line held it (a line over LineMax has its
	// strings cut to TextMax: ResultCut says so); the index cuts it to its own cap.
	Result string
	// ResultCut says Result is not the whole of what the tool returned.
	ResultCut bool
	Status    string
	// MessageID is the Message.ID of the reply that made the call, when known. A call whose
	// Name is "" is a result alone: its call was before this parse's offset or in another file.
	MessageID string
	// ChildSession is the session a subagent-spawning call started, when the result names it.
	ChildSession string
}

// Usage is a token count. Each reply is counted once, from its final snapshot.
type Usage struct {
	Input, Output, CacheRead, CacheWrite, Reasoning int64
}

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.Input + v.Input, u.Output + v.Output, u.CacheRead + v.CacheRead,
		u.CacheWrite + v.CacheWrite, u.Reasoning + v.Reasoning}
}

// Total is every token counted, cache included.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// Skip reasons counted in Result.Skipped.
const (
	ReasonMalformed   = "malformed line"
	ReasonUnknownType = "unknown type"
	ReasonNoRecord    = "not a record" // valid JSON that is not an object
	ReasonNoType      = "no type"      // an object without the record type field
	// A record that would be a message or a tool call lacks what every one the tool writes
	// has: its time (absent or not RFC 3339), its id, or its role.
	ReasonNoTimestamp = "no timestamp"
	ReasonNoID        = "no id"
	ReasonNoRole      = "no role"
	// ReasonOversized is a line (or pretty-printed record) whose cut form is still over
	// CutLineMax.
	ReasonOversized = "oversized line"
)

// Result is what one parse of one file found.
type Result struct {
	Session   Session
	Messages  []Message
	ToolCalls []ToolCall
	// Usage is the session's tokens. For Codex it is the tool's own running total as of the
	// last count in this parse (UsageCumulative), so a later parse replaces it; for the others
	// it is the sum over Messages.
	Usage           Usage
	UsageCumulative bool
	// Offset is where the last complete line read ends: the next parse starts there. A last
	// line without its newline (a write in progress, or torn) is not consumed.
	Offset int64
	// Lines is the number of complete lines read; Pending the bytes after Offset that were
	// not consumed.
	Lines   int
	Pending int64
	// Skipped counts the lines left out, by reason (ReasonMalformed, or ReasonUnknownType +
	// ": " + the type).
	Skipped map[string]int
	// Cut counts the lines read with a string cut to its bound (a line over LineMax), and the
	// messages whose text was cut to TextMax.
	Cut int
	// More says the parse stopped at the bound of a Piece reader: lines follow Offset.
	More bool
	// Whole says the parse read the whole file whatever its offset (a tool's SQLite database):
	// its rows replace the file's, as a rewritten file's do.
	Whole bool
	// Also are the file's other sessions, for a file that holds many (Whole).
	Also []*Result
	// lineCut says the line being read was cut (a line over LineMax): a result read from it is
	// not whole.
	lineCut bool
	// state is what the adapter knew at the end of the parse that the next piece's parse
	// needs (State).
	state any
}

// State is what a parse knew at its end of the lines before (Codex's model, the reply its tool
// calls belong to), for the parse of the next piece (Piece): opaque.
func (r *Result) State() any { return r.state }

// Piece bounds a parse of r: Parse stops at the first line end at or past n bytes and sets
// Result.More, so that a file of any size is read a piece at a time (each parse from the last
// one's Offset), in memory bounded by the piece rather than the file. state is the State of
// the parse of the piece before (nil for the first), so that the pieces read as the whole.
func Piece(r io.Reader, n int64, state any) io.Reader { return &piece{Reader: r, max: n, state: state} }

type piece struct {
	io.Reader
	max   int64
	state any
}

// stateOf is the state a Piece reader carries from the piece before, or nil.
func stateOf(r io.Reader) any {
	if p, ok := r.(*piece); ok {
		return p.state
	}
	return nil
}

func (r *Result) skip(reason string) {
	if r.Skipped == nil {
		r.Skipped = map[string]int{}
	}
	r.Skipped[reason]++
}

func (r *Result) unknown(typ string) {
	if typ == "" {
		r.skip(ReasonNoType)
		return
	}
	r.skip(ReasonUnknownType + ": " + typ)
}

// appendText adds text to m's text, on a line of its own, keeping at most TextMax: a reply
// Claude Code splits over many lines is joined in bounded memory. A line whose text is cut
// counts in Cut.
func (r *Result) appendText(m *Message, text string) {
	if text == "" {
		return
	}
	if m.Text != "" {
		text = "\n" + text
	}
	if room := TextMax - len(m.Text); len(text) > room {
		r.Cut++
		text = excerpt(text, max(room, 0))
	}
	m.Text += text
}

// seen widens the session's created/updated span to include t.
func (r *Result) seen(t time.Time) {
	if t.IsZero() {
		return
	}
	if r.Session.Created.IsZero() || t.Before(r.Session.Created) {
		r.Session.Created = t
	}
	if t.After(r.Session.Updated) {
		r.Session.Updated = t
	}
}

// Env is how an adapter finds its default roots: the home directory and the environment.
type Env struct {
	Home   string
	Getenv func(string) string
}

// OSEnv is the process's own home and environment.
func OSEnv() (Env, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return Env{}, fmt.Errorf("source: home directory: %w", err)
	}
	return Env{Home: home, Getenv: os.Getenv}, nil
}

func (e Env) get(key string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(key)
}

// Source is one agent tool's transcripts.
type Source interface {
	// Name is the source's name in the index ("pi", "claude-code", "codex").
	Name() string
	// DefaultRoots are the directories the tool writes to; callers may pass others to
	// Discover instead.
	DefaultRoots(env Env) []string
	// Discover lists the transcript files under roots, sorted. A root that does not exist
	// is not an error.
	Discover(ctx context.Context, roots []string) ([]string, error)
	// Parse reads a transcript from r, whose first byte is at offset in the file at path
	// (path names the session when the file does not). It stops at the last complete line,
	// or, when r is a Piece, at the first line end past its bound.
	Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error)
}

// All returns every adapter.
func All() []Source {
	return []Source{Nexus{stores: newStores()}, Pi{}, OpenClaw{stores: newStores()}, ClaudeCode{}, Codex{},
		OpenCode{}, QwenCode{}, Gemini{}, Crush{}}
}

// ByName returns the adapter called name.
func ByName(name string) (Source, bool) {
	for _, s := range All() {
		if s.Name() == name {
			return s, true
		}
	}
	return nil, false
}

// ParseFile parses the file at path from offset with src.
func ParseFile(ctx context.Context, src Source, path string, offset int64) (*Result, error) {
	f, err := os.Open(path) //nolint:gosec // the path comes from Discover or the user
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src.Name(), err)
	}
	defer func() { _ = f.Close() }()
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return nil, fmt.Errorf("%s: seek %s: %w", src.Name(), path, err)
		}
	}
	return src.Parse(ctx, f, path, offset)
}

// discover walks roots for regular files that match keep, without following symlinks.
func discover(ctx context.Context, roots []string, keep func(rel string, name string) bool) ([]string, error) {
	var out []string
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			if keep(filepath.ToSlash(rel), d.Name()) {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("source: discover %s: %w", root, err)
		}
	}
	sort.Strings(out)
	return out, nil
}

// lineReader yields the complete lines of a reader and the offset after each. A last line
// without its newline is left unconsumed and reported as pending (a write in progress, or torn
// by a crash), unless it is a whole JSON object: no prefix of a longer object is one, so such a
// line is finished and only its newline is missing (files some tools and fixtures end so).
type lineReader struct {
	br      *bufio.Reader
	offset  int64
	buf     []byte
	pending int64
	// inBlock says a pretty-printed record is open, so a last line "}" closes it.
	inBlock bool
	// start is where the line next returned last begins.
	start int64
	// cutter streams a line longer than LineMax; cut says it cut the line last returned, and
	// oversized that it kept none of it (its cut form was over CutLineMax).
	cutter    cutter
	cut       bool
	oversized bool
}

func newLineReader(r io.Reader, offset int64) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 256<<10), offset: offset}
}

// next returns the next complete line without its newline (and without a \r before it).
// The slice is valid until the next call. ok is false at the end. A line longer than LineMax is
// returned cut (l.cut), or, when even its cut form is over CutLineMax, empty (l.oversized): it
// is never held whole.
func (l *lineReader) next() (line []byte, ok bool, err error) {
	l.buf = l.buf[:0]
	l.start = l.offset
	l.cut, l.oversized = false, false
	var n int64 // the line's length in the file
	cutting := false
	add := func(b []byte) {
		if !cutting && len(l.buf)+len(b) > LineMax {
			cutting = true
			l.cutter.reset()
			l.cutter.write(l.buf)
		}
		if cutting {
			l.cutter.write(b)
		} else {
			l.buf = append(l.buf, b...)
		}
	}
	for {
		chunk, err := l.br.ReadSlice('\n')
		n += int64(len(chunk))
		switch {
		case err == nil:
			body := chunk[:len(chunk)-1]
			if len(l.buf) == 0 && !cutting {
				line = body // the whole line is in the reader's buffer
			} else {
				add(body)
				line = l.buf
				if cutting {
					line, l.cut, l.oversized = l.cutter.out, l.cutter.cut, l.cutter.over()
				}
			}
			l.offset += n
			if k := len(line); k > 0 && line[k-1] == '\r' {
				line = line[:k-1]
			}
			if l.oversized {
				line = nil
			}
			return line, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			add(chunk)
		case errors.Is(err, io.EOF):
			add(chunk)
			tail := l.buf
			if cutting {
				tail = l.cutter.out
			}
			kept := !cutting || !l.cutter.over()
			if kept && (completeObject(tail) || (l.inBlock && string(bytes.TrimSpace(tail)) == "}")) {
				l.offset += n
				l.cut = cutting && l.cutter.cut
				return tail, true, nil
			}
			l.pending = n
			return nil, false, nil
		default:
			return nil, false, fmt.Errorf("read: %w", err)
		}
	}
}

// lines runs fn on every complete record of r, with the offset the record starts at, and fills
// res's Offset, Lines and Pending. A record is one line, or, in a file someone pretty-printed,
// the lines from a lone "{" to the next lone "}". Blank lines are stepped over.
func lines(ctx context.Context, r io.Reader, offset int64, res *Result, fn func(rec []byte, start int64)) error {
	lr := newLineReader(r, offset)
	res.Offset = offset
	bound := int64(-1)
	if p, ok := r.(*piece); ok {
		bound = offset + p.max
	}
	var block []byte
	blockStart := int64(-1)
	// blockOver says the open block passed CutLineMax: the rest of it is not kept.
	blockOver := false
	for {
		if bound >= 0 && res.Offset >= bound && blockStart < 0 {
			res.More = true
			break
		}
		line, ok, err := lr.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		res.Lines++
		if res.Lines%4096 == 0 || lr.cut || lr.oversized {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("parse: %w", err)
			}
		}
		if lr.oversized {
			res.skip(ReasonOversized)
			if blockStart >= 0 {
				res.skip(ReasonMalformed) // the open block, torn by it
			}
			lr.inBlock, blockStart, blockOver = false, -1, false
			res.Offset = lr.offset
			continue
		}
		if lr.cut {
			res.Cut++
		}
		start := res.Offset
		if blockStart >= 0 {
			start = blockStart
		}
		res.lineCut = lr.cut
		switch trimmed := bytes.TrimRight(line, " \t"); {
		case blockStart >= 0 && len(line) > 0 && line[0] == '{' && completeObject(line):
			// A one-line record inside a block: the block was torn.
			res.skip(ReasonMalformed)
			lr.inBlock, blockStart = false, -1
			start = lr.start
			res.Offset = lr.offset
			fn(line, start)
		case blockStart >= 0:
			if !blockOver {
				block = append(append(block, '\n'), line...)
				blockOver = len(block) > CutLineMax
			}
			if string(trimmed) == "}" {
				lr.inBlock, blockStart = false, -1
				res.Offset = lr.offset
				if blockOver {
					res.skip(ReasonOversized)
					blockOver = false
				} else {
					fn(block, start)
				}
			}
		case string(trimmed) == "{":
			lr.inBlock, blockStart, blockOver = true, start, false
			block = append(block[:0], line...)
		default:
			res.Offset = lr.offset
			if len(bytes.TrimSpace(line)) > 0 {
				fn(line, start)
			}
		}
	}
	res.Pending = lr.offset + lr.pending - res.Offset
	for i := range res.Messages {
		if m := &res.Messages[i]; len(m.Text) > TextMax {
			m.Text = excerpt(m.Text, TextMax)
			res.Cut++
		}
	}
	return nil
}

// decodeObject unmarshals an object line into v, counting the line as malformed (or as not a
// record) when it does not decode.
func decodeObject(line []byte, v any, res *Result) bool {
	if err := json.Unmarshal(line, v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field == "" {
			res.skip(ReasonNoRecord)
		} else {
			res.skip(ReasonMalformed)
		}
		return false
	}
	return true
}

// isContent reports whether raw is a message content the adapters read: a string or an array
// (of blocks).
func isContent(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && (raw[0] == '"' || raw[0] == '[')
}

// excerpt cuts s to at most max bytes on a UTF-8 boundary.
func excerpt(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i]
}

// parseTime reads an RFC 3339 timestamp; anything else is the zero time.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// stem is a file name without its directory and from its .jsonl suffix on (so an archive,
// <id>.jsonl.deleted.<ts>, has its session's stem).
func stem(path string) string {
	name := filepath.Base(path)
	if i := strings.Index(name, ".jsonl"); i > 0 {
		return name[:i]
	}
	return name
}

// pairing indexes a parse's tool calls by id so results find their call.
type pairing struct {
	res  *Result
	byID map[string]int
}

func newPairing(res *Result) *pairing { return &pairing{res: res, byID: map[string]int{}} }

func (p *pairing) call(tc ToolCall) {
	if tc.Status == "" {
		tc.Status = StatusPending
	}
	if i, ok := p.byID[tc.ID]; ok && tc.ID != "" {
		// A streamed reply repeats its blocks: keep the first, fill what was missing.
		old := &p.res.ToolCalls[i]
		if old.Params == "" {
			old.Params = tc.Params
		}
		return
	}
	if tc.ID != "" {
		p.byID[tc.ID] = len(p.res.ToolCalls)
	}
	p.res.ToolCalls = append(p.res.ToolCalls, tc)
}

// result attaches a result to its call; a result whose call is not in this parse (before the
// offset, or in another file) becomes a call with only its id and result, so the index can
// join it. A result without an id answers no call: it is counted (ReasonNoID) and nil.
func (p *pairing) result(id, text string, isError bool) *ToolCall {
	if id == "" {
		p.res.skip(ReasonNoID)
		return nil
	}
	status := StatusOK
	if isError {
		status = StatusError
	}
	i, ok := p.byID[id]
	if !ok {
		p.byID[id] = len(p.res.ToolCalls)
		p.res.ToolCalls = append(p.res.ToolCalls, ToolCall{ID: id})
		i = len(p.res.ToolCalls) - 1
	}
	tc := &p.res.ToolCalls[i]
	tc.Result, tc.ResultCut = text, p.res.lineCut
	tc.Status = status
	return tc
}

// lineID names a record that has no id of its own by where its line starts in the file, so a
// later parse from another offset names it the same.
func lineID(start int64) string { return "line-" + strconv.FormatInt(start, 10) }

// completeObject reports whether b is one whole JSON object.
func completeObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}
