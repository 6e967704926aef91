package index

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
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
		`r.mid, r.role, '', '', r.ts, s.source, s.sid, s.project, s.title, s.path, s.deleted, s.is_subagent, s.parent_session, 0, 0`, match, where, args, n)
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
			s.source, s.sid, s.project, s.title, s.path, s.deleted, s.is_subagent, s.parent_session, r.result_bytes, r.result_cut`, match, where, args, n)
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
		var ts, resultBytes int64
		var path, parent string
		var sub bool
		if err := rows.Scan(&h.rowid, &h.Score, &h.MessageID, &h.Role, &h.ToolCallID, &h.Tool, &ts, &h.Source, &h.Session,
			&h.Project, &h.Title, &path, &h.Deleted, &sub, &parent, &resultBytes, &h.ResultCut); err != nil {
			return nil, queryError(err)
		}
		if h.ResultCut {
			h.ResultBytes = resultBytes
		}
		h.Timestamp = stamp(ts)
		h.Show, h.Resume, h.ResumeNote = commands(session{source: h.Source, id: h.Session, project: h.Project, path: path,
			subagent: sub, parent: parent}, h.MessageID)
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

// session is what the commands of a hit need to know of its session.
type session struct {
	source, id, project, path string
	// subagent says the session is a subagent's; parent is the session that started it.
	subagent bool
	parent   string
}

// commands are the command lines that show a session in nexus and resume it in its own tool,
// and a note when the resume command is not the session's own. Claude Code and Codex resume a
// session in the directory they are started in (Claude Code finds its sessions by it; Codex
// runs its tools there), so their commands start there. A subagent cannot be resumed on its own
// (Claude Code: `--resume agent-…` is not a session id): its command resumes the session that
// started it.
func commands(s session, mid string) (show, resume, note string) {
	show = "nexus index show " + shellQuote(s.id)
	if s.source != "" {
		show += " --source " + s.source
	}
	if mid != "" {
		show += " --around " + shellQuote(mid)
	}
	id := s.id
	switch s.source {
	case "claude-code", "codex":
		if s.subagent {
			id = rootSession(s)
			if id == "" {
				return show, "", "a subagent's session cannot be resumed on its own, and the session that started it is not known"
			}
			note = "a subagent's session cannot be resumed on its own: this resumes the session that started it (" + id + ")"
		}
	}
	switch s.source {
	case "nexus":
		resume = "nexus chat history " + shellQuote(id)
	case "pi":
		resume = "pi --session " + shellQuote(s.path)
	case "claude-code":
		resume = inDir(s.project, "claude --resume "+shellQuote(id))
	case "codex":
		resume = inDir(s.project, "codex resume "+shellQuote(id))
	default:
		resume = source.Resume(s.source, id, s.project)
	}
	return show, resume, note
}

// rootSession is the top session a subagent's session belongs to, the one its tool resumes:
// for Claude Code the session whose directory holds the sidechain (<session>/subagents/agent-*)
// or, in the older flat layout, the session its lines name; for Codex the parent thread.
func rootSession(s session) string {
	if s.source == "claude-code" {
		if dir := filepath.Dir(s.path); filepath.Base(dir) == "subagents" {
			return filepath.Base(filepath.Dir(dir))
		}
	}
	return s.parent
}

// inDir prefixes cmd with a cd to dir, when dir is known.
func inDir(dir, cmd string) string {
	if dir == "" {
		return cmd
	}
	return "cd " + shellQuote(dir) + " && " + cmd
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
