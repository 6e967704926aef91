package index

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Snippet markers around the matched words.
const (
	MarkOpen  = "**"
	MarkClose = "**"
)

// Limits of a search or listing.
const (
	DefaultLimit = 20
	MaxLimit     = 1000
)

// SearchOptions is a search.
type SearchOptions struct {
	Query   string
	Sources []string
	// Project keeps sessions whose project (working directory) contains it.
	Project string
	// Role keeps messages of this role; "tool" keeps tool calls only.
	Role  string
	Since time.Time
	// Tool keeps the calls of this tool (by name), and no messages.
	Tool  string
	Limit int
}

// Hit is one search result: a message or a tool call.
type Hit struct {
	Kind       string  `json:"kind"` // "message" or "tool_call"
	Source     string  `json:"source"`
	Session    string  `json:"session"`
	Project    string  `json:"project,omitempty"`
	Title      string  `json:"title,omitempty"`
	MessageID  string  `json:"message_id,omitempty"`
	Role       string  `json:"role"`
	Tool       string  `json:"tool,omitempty"`
	ToolCallID string  `json:"tool_call_id,omitempty"`
	Timestamp  string  `json:"timestamp,omitempty"`
	Snippet    string  `json:"snippet"`
	Score      float64 `json:"score"`
	Deleted    bool    `json:"deleted,omitempty"`
	// Show is the nexus command that shows the hit in its session; Resume the command that
	// resumes the session in its own tool, when the tool has one.
	Show   string `json:"show"`
	Resume string `json:"resume,omitempty"`

	rowid int64
}

func limit(n int) int {
	switch {
	case n <= 0:
		return DefaultLimit
	case n > MaxLimit:
		return MaxLimit
	}
	return n
}

// Search returns the best hits for a query, best first.
func (ix *Index) Search(ctx context.Context, o SearchOptions) ([]Hit, error) {
	match := MatchQuery(o.Query)
	if match == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "search: the query %q has no words to search for", o.Query)
	}
	if _, err := Sources(o.Sources); err != nil {
		return nil, err
	}
	n := limit(o.Limit)
	var hits []Hit
	if o.Tool == "" && o.Role != "tool" {
		h, err := ix.searchMessages(ctx, match, o, n)
		if err != nil {
			return nil, err
		}
		hits = append(hits, h...)
	}
	if o.Role == "" || o.Role == "tool" {
		h, err := ix.searchTools(ctx, match, o, n)
		if err != nil {
			return nil, err
		}
		hits = append(hits, h...)
	}
	// bm25 is lower for better matches.
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score < hits[j].Score })
	if len(hits) > n {
		hits = hits[:n]
	}
	for i := range hits {
		if err := ix.snippet(ctx, match, &hits[i]); err != nil {
			return nil, err
		}
	}
	return hits, nil
}

// sessionFilter appends the session conditions of o on alias s.
func sessionFilter(o SearchOptions, where []string, args []any) ([]string, []any) {
	if len(o.Sources) > 0 {
		where = append(where, "s.source IN ("+strings.TrimSuffix(strings.Repeat("?,", len(o.Sources)), ",")+")")
		for _, s := range o.Sources {
			args = append(args, s)
		}
	}
	if o.Project != "" {
		where = append(where, "instr(s.project, ?) > 0")
		args = append(args, o.Project)
	}
	return where, args
}

func (ix *Index) searchMessages(ctx context.Context, match string, o SearchOptions, n int) ([]Hit, error) {
	where := []string{"message_fts MATCH ?"}
	args := []any{match}
	where, args = sessionFilter(o, where, args)
	if o.Role != "" {
		where = append(where, "m.role = ?")
		args = append(args, o.Role)
	}
	if !o.Since.IsZero() {
		where = append(where, "m.ts >= ?")
		args = append(args, ms(o.Since))
	}
	//nolint:gosec // the conditions are this file's constants; values are bound
	q := `SELECT m.id, bm25(message_fts) AS score, m.mid, m.role, '', '', m.ts, s.source, s.sid, s.project, s.title, s.path, s.deleted
		FROM message_fts JOIN messages m ON m.id = message_fts.rowid JOIN sessions s ON s.id = m.session
		WHERE ` + strings.Join(where, " AND ") + ` ORDER BY score LIMIT ?`
	return ix.hits(ctx, "message", q, append(args, n))
}

func (ix *Index) searchTools(ctx context.Context, match string, o SearchOptions, n int) ([]Hit, error) {
	where := []string{"tool_fts MATCH ?"}
	args := []any{match}
	where, args = sessionFilter(o, where, args)
	if o.Tool != "" {
		where = append(where, "t.name = ?")
		args = append(args, o.Tool)
	}
	if !o.Since.IsZero() {
		// A call has no time of its own: its message's.
		where = append(where, "coalesce((SELECT ts FROM messages m WHERE m.session = t.session AND m.mid = t.mid), s.updated) >= ?")
		args = append(args, ms(o.Since))
	}
	//nolint:gosec // the conditions are this file's constants; values are bound
	q := `SELECT t.id, bm25(tool_fts, 2.0, 1.0, 1.0) AS score, t.mid, 'tool', t.cid, t.name,
			coalesce((SELECT ts FROM messages m WHERE m.session = t.session AND m.mid = t.mid), 0),
			s.source, s.sid, s.project, s.title, s.path, s.deleted
		FROM tool_fts JOIN tool_calls t ON t.id = tool_fts.rowid JOIN sessions s ON s.id = t.session
		WHERE ` + strings.Join(where, " AND ") + ` ORDER BY score LIMIT ?`
	return ix.hits(ctx, "tool_call", q, append(args, n))
}

// hits runs a search query whose columns are a Hit's.
func (ix *Index) hits(ctx context.Context, kind, q string, args []any) ([]Hit, error) {
	rows, err := ix.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, queryError(err)
	}
	defer func() { _ = rows.Close() }()
	var hits []Hit
	for rows.Next() {
		h := Hit{Kind: kind}
		var ts int64
		var path string
		if err := rows.Scan(&h.rowid, &h.Score, &h.MessageID, &h.Role, &h.ToolCallID, &h.Tool, &ts, &h.Source, &h.Session,
			&h.Project, &h.Title, &path, &h.Deleted); err != nil {
			return nil, queryError(err)
		}
		h.Timestamp = stamp(ts)
		h.Show, h.Resume = commands(h.Source, h.Session, h.MessageID, h.Project, path)
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(err)
	}
	return hits, nil
}

// snippetWords is how many words a snippet shows around the match.
const snippetWords = 24

// snippet fills a hit's snippet. It runs per hit, after ranking, so snippets are built for the
// hits shown and not for every match.
func (ix *Index) snippet(ctx context.Context, match string, h *Hit) error {
	q := `SELECT snippet(message_fts, 0, ?, ?, '…', ?) FROM message_fts WHERE message_fts MATCH ? AND rowid = ?`
	if h.Kind == "tool_call" {
		q = `SELECT snippet(tool_fts, -1, ?, ?, '…', ?) FROM tool_fts WHERE tool_fts MATCH ? AND rowid = ?`
	}
	if err := ix.db.QueryRowContext(ctx, q, MarkOpen, MarkClose, snippetWords, match, h.rowid).Scan(&h.Snippet); err != nil &&
		!errors.Is(err, sql.ErrNoRows) {
		return queryError(err)
	}
	return nil
}

// queryError keeps a cancelled context recognisable and wraps the rest.
func queryError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("index: query: %w", err)
}

func stamp(v int64) string {
	if v == 0 {
		return ""
	}
	return abi.FormatTime(fromMS(v))
}

// commands are the command lines that show a session in nexus and resume it in its own tool.
func commands(src, sid, mid, project, path string) (show, resume string) {
	show = "nexus index show " + shellQuote(sid)
	if src != "" {
		show += " --source " + src
	}
	if mid != "" {
		show += " --around " + shellQuote(mid)
	}
	switch src {
	case "nexus":
		resume = "nexus chat history " + shellQuote(sid)
	case "pi":
		resume = "pi --session " + shellQuote(path)
	case "claude-code":
		resume = "claude --resume " + shellQuote(sid)
		if project != "" {
			resume = "cd " + shellQuote(project) + " && " + resume
		}
	case "codex":
		resume = "codex resume " + shellQuote(sid)
	}
	return show, resume
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./:@+=,", r)
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
