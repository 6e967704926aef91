package index

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/index/source"
)

// Snippet markers around the matched words: two private-use characters, so a marker is never
// text (Markdown's ** is common in replies); every front end renders them its own way. Text is
// indexed with these two characters replaced by U+FFFD.
const (
	MarkOpen  = "\ue000"
	MarkClose = "\ue001"
)

// Limits of a search or listing.
const (
	DefaultLimit = 20
	MaxLimit     = 1000
)

// SearchOptions is abi.IndexSearch.
type SearchOptions = abi.IndexSearch

// Hit is abi.IndexHit.
type Hit = abi.IndexHit

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
		if len(words(o.Query)) > 0 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "search: the query %q only excludes words: add a word to search for", o.Query)
		}
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "search: the query %q has no words to search for", o.Query)
	}
	if _, err := Sources(o.Sources); err != nil {
		return nil, err
	}
	n := limit(o.Limit)
	var hits []hit
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
	// bm25 is lower for better matches; ties go newest first (each list is so ordered, and the
	// sort is stable), so a search always answers in the same order.
	sort.SliceStable(hits, func(i, j int) bool { return hits[i].Score < hits[j].Score })
	if len(hits) > n {
		hits = hits[:n]
	}
	out := make([]Hit, len(hits))
	for i := range hits {
		if err := ix.snippet(ctx, match, &hits[i]); err != nil {
			return nil, err
		}
		out[i] = hits[i].Hit
	}
	return out, nil
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

// RankWindow bounds the work of ranking a query that matches a large part of the index: when
// more than this many rows match, the newest RankWindow matches (by index order, which is the
// order they were read) are ranked, so a word found in half of a million messages costs what
// one found in RankWindow does. BM25's statistics stay those of the whole index. With filters
// the window widens until enough hits pass them or it holds every match.
const RankWindow = 4000

// ranked runs a ranked search on one FTS table: fts is its name, score its BM25 expression,
// cols the rest of a Hit's columns over alias r (the content row) and s (its session).
func (ix *Index) ranked(ctx context.Context, kind, fts, score, from, cols string, match string, where []string, args []any, n int) ([]hit, error) {
	filtered := len(where) > 0
	for window := ix.window; ; window *= 4 {
		// The rowid the window starts at: the window-th newest match, if there are more.
		var floor int64
		err := ix.db.QueryRowContext(ctx, `SELECT rowid FROM `+fts+` WHERE `+fts+` MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?`,
			match, window-1).Scan(&floor)
		all := errors.Is(err, sql.ErrNoRows)
		if err != nil && !all {
			return nil, queryError(err)
		}
		var q string
		qargs := []any{match}
		if filtered {
			//nolint:gosec // the conditions are this file's constants; values are bound
			q = `SELECT r.id, ` + score + ` AS score, ` + cols + ` FROM ` + fts + ` JOIN ` + from + ` ON r.id = ` + fts + `.rowid
				JOIN sessions s ON s.id = r.session WHERE ` + fts + ` MATCH ? AND ` + fts + `.rowid >= ? AND ` + strings.Join(where, " AND ") +
				` ORDER BY score, r.id DESC LIMIT ?`
			qargs = append(append(append(qargs, floor), args...), n)
		} else {
			// Rank in the FTS table alone, then join the few rows kept.
			//nolint:gosec // the conditions are this file's constants; values are bound
			q = `SELECT r.id, f.score, ` + cols + ` FROM (SELECT rowid AS id, ` + score + ` AS score FROM ` + fts +
				` WHERE ` + fts + ` MATCH ? AND rowid >= ? ORDER BY score, rowid DESC LIMIT ?) f
				JOIN ` + from + ` ON r.id = f.id JOIN sessions s ON s.id = r.session ORDER BY f.score, f.id DESC`
			qargs = append(qargs, floor, n)
		}
		hits, err := ix.hits(ctx, kind, q, qargs)
		if err != nil || all || len(hits) >= n || !filtered {
			return hits, err
		}
	}
}

func (ix *Index) searchMessages(ctx context.Context, match string, o SearchOptions, n int) ([]hit, error) {
	where, args := sessionFilter(o, nil, nil)
	if o.Role != "" {
		where = append(where, "r.role = ?")
		args = append(args, o.Role)
	}
	if !o.Since.IsZero() {
		where = append(where, "r.ts >= ?")
		args = append(args, ms(o.Since))
	}
	where, args = originFilter(o.Origin, "r.turn", where, args)
	return ix.ranked(ctx, "message", "message_fts", "bm25(message_fts)", "messages r",
		`r.mid, r.role, '', '', r.ts, s.source, s.sid, s.project, s.title, s.path, s.deleted`, match, where, args, n)
}

func (ix *Index) searchTools(ctx context.Context, match string, o SearchOptions, n int) ([]hit, error) {
	where, args := sessionFilter(o, nil, nil)
	if o.Tool != "" {
		where = append(where, "r.name = ?")
		args = append(args, o.Tool)
	}
	if !o.Since.IsZero() {
		// A call has no time of its own: its message's.
		where = append(where, "coalesce((SELECT ts FROM messages m WHERE m.session = r.session AND m.mid = r.mid), s.updated) >= ?")
		args = append(args, ms(o.Since))
	}
	where, args = originFilter(o.Origin, "(SELECT m.turn FROM messages m WHERE m.session = r.session AND m.mid = r.mid)", where, args)
	return ix.ranked(ctx, "tool_call", "tool_fts", "bm25(tool_fts, 2.0, 1.0, 1.0)", "tool_calls r",
		`r.mid, 'tool', r.cid, r.name, coalesce((SELECT ts FROM messages m WHERE m.session = r.session AND m.mid = r.mid), 0),
			s.source, s.sid, s.project, s.title, s.path, s.deleted`, match, where, args, n)
}

// hits runs a search query whose columns are a Hit's.
// hit is a Hit and the row it came from.
type hit struct {
	Hit
	rowid int64
}

func (ix *Index) hits(ctx context.Context, kind, q string, args []any) ([]hit, error) {
	rows, err := ix.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, queryError(err)
	}
	defer func() { _ = rows.Close() }()
	var hits []hit
	for rows.Next() {
		h := hit{Hit: Hit{Kind: kind}}
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
func (ix *Index) snippet(ctx context.Context, match string, h *hit) error {
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
	default:
		resume = source.Resume(src, sid, project)
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
