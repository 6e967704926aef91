package index

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/index/source"
)

// SessionInfo is abi.IndexSession.
type SessionInfo = abi.IndexSession

// Tokens is abi.IndexTokens.
type Tokens = abi.IndexTokens

const sessionColumns = `s.id, s.source, s.sid, s.path, s.project, s.model, s.created, s.updated, s.title,
	s.message_count, s.turn_count, s.parent_session, s.parent_message, s.tool_call_id, s.task, s.task_status,
	s.is_subagent, s.context_limit, s.fork_origin, s.input_tokens, s.output_tokens, s.cache_read, s.cache_write,
	s.reasoning, s.deleted`

// row is a session and its row id.
type row struct {
	SessionInfo
	rowid int64
}

func scanSession(sc interface{ Scan(...any) error }) (row, error) {
	var r row
	s := &r.SessionInfo
	var created, updated int64
	err := sc.Scan(&r.rowid, &s.Source, &s.ID, &s.Path, &s.Project, &s.Model, &created, &updated, &s.Title,
		&s.Messages, &s.Turns, &s.ParentSession, &s.ParentMessage, &s.ToolCallID, &s.Task, &s.TaskStatus,
		&s.IsSubagent, &s.ContextLimit, &s.ForkOrigin, &s.Tokens.Input, &s.Tokens.Output, &s.Tokens.CacheRead,
		&s.Tokens.CacheWrite, &s.Tokens.Reasoning, &s.Deleted)
	if err != nil {
		return r, err //nolint:wrapcheck // wrapped by the callers
	}
	s.Created, s.Updated = stamp(created), stamp(updated)
	s.Tokens.Total = s.Tokens.Input + s.Tokens.Output + s.Tokens.CacheRead + s.Tokens.CacheWrite
	s.Show, s.Resume, s.ResumeNote = commands(session{source: s.Source, id: s.ID, project: s.Project, path: s.Path,
		subagent: s.IsSubagent, parent: s.ParentSession}, "")
	return r, nil
}

// SessionsOptions is abi.IndexSessions.
type SessionsOptions = abi.IndexSessions

// Sessions lists sessions, most recently updated first.
func (ix *Index) Sessions(ctx context.Context, o SessionsOptions) ([]SessionInfo, error) {
	if _, err := Sources(o.Sources); err != nil {
		return nil, err
	}
	where, args := sessionFilter(SearchOptions{Sources: o.Sources, Project: o.Project}, []string{"1"}, nil)
	args = append(args, limit(o.Limit))
	//nolint:gosec // the conditions are this package's constants; values are bound
	rows, err := ix.db.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions s WHERE `+strings.Join(where, " AND ")+
		` ORDER BY s.updated DESC, s.id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, queryError(err)
	}
	defer func() { _ = rows.Close() }()
	var out []SessionInfo
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return nil, queryError(err)
		}
		out = append(out, s.SessionInfo)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(err)
	}
	return out, nil
}

// Message is abi.IndexMessage.
type Message = abi.IndexMessage

// ToolCall is abi.IndexToolCall.
type ToolCall = abi.IndexToolCall

// ShowOptions is abi.IndexShow.
type ShowOptions = abi.IndexShow

// DefaultContext is how many messages around --around are shown on each side.
const DefaultContext = 5

// SessionDetail is abi.IndexSessionDetail.
type SessionDetail = abi.IndexSessionDetail

// FindSession resolves a session id (or a unique prefix of one) to its session.
func (ix *Index) FindSession(ctx context.Context, id, src string) (SessionInfo, error) {
	r, err := ix.findSession(ctx, id, src)
	return r.SessionInfo, err
}

func (ix *Index) findSession(ctx context.Context, id, src string) (row, error) {
	if strings.TrimSpace(id) == "" {
		return row{}, abi.Errorf(abi.CodeInvalidArgument, "", "index: a session id is required")
	}
	q := `SELECT ` + sessionColumns + ` FROM sessions s WHERE (s.sid = ?1 OR (length(?1) >= 4 AND substr(s.sid, 1, length(?1)) = ?1))
		AND (?2 = '' OR s.source = ?2) ORDER BY s.sid = ?1 DESC LIMIT 3`
	rows, err := ix.db.QueryContext(ctx, q, id, src)
	if err != nil {
		return row{}, queryError(err)
	}
	defer func() { _ = rows.Close() }()
	var found []row
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			return row{}, queryError(err)
		}
		found = append(found, s)
	}
	if err := rows.Err(); err != nil {
		return row{}, queryError(err)
	}
	switch {
	case len(found) == 0:
		return row{}, abi.Errorf(abi.CodeSessionNotFound, id, "index: no indexed session %q", id)
	case found[0].ID == id && (len(found) == 1 || found[1].ID != id):
		return found[0], nil
	case len(found) == 1:
		return found[0], nil
	}
	var names []string
	for _, s := range found {
		names = append(names, s.Source+":"+s.ID)
	}
	return row{}, abi.Errorf(abi.CodeInvalidArgument, id, "index: %q names more than one session (%s): give more of the id or --source",
		id, strings.Join(names, ", "))
}

// Show returns a session and its messages, with their tool calls.
func (ix *Index) Show(ctx context.Context, o ShowOptions) (*SessionDetail, error) {
	r, err := ix.findSession(ctx, o.Session, o.Source)
	if err != nil {
		return nil, err
	}
	s := &r
	from, to := int64(-1<<62), int64(1<<62)
	if o.Around != "" {
		n := o.Context
		if n <= 0 {
			n = DefaultContext
		}
		var seq int64
		err := ix.db.QueryRowContext(ctx, `SELECT seq FROM messages WHERE session = ? AND mid = ?`, s.rowid, o.Around).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, s.ID, "index: session %s has no message %q", s.ID, o.Around)
		}
		if err != nil {
			return nil, queryError(err)
		}
		// n messages on each side, counted in messages (seqs may have gaps).
		if err := ix.db.QueryRowContext(ctx, `SELECT coalesce(min(seq), ?2) FROM (SELECT seq FROM messages WHERE session = ?1 AND seq <= ?2 ORDER BY seq DESC LIMIT ?3)`,
			s.rowid, seq, n+1).Scan(&from); err != nil {
			return nil, queryError(err)
		}
		if err := ix.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), ?2) FROM (SELECT seq FROM messages WHERE session = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3)`,
			s.rowid, seq, n+1).Scan(&to); err != nil {
			return nil, queryError(err)
		}
	}
	d := &SessionDetail{Session: s.SessionInfo, Messages: []Message{}}
	rows, err := ix.db.QueryContext(ctx, `SELECT mid, role, text, ts, seq, turn, model, input, output, cache_read, cache_write, reasoning
		FROM messages WHERE session = ? AND seq BETWEEN ? AND ? ORDER BY seq`, s.rowid, from, to)
	if err != nil {
		return nil, queryError(err)
	}
	idx := map[string]int{}
	for rows.Next() {
		var m Message
		var ts int64
		var t Tokens
		if err := rows.Scan(&m.ID, &m.Role, &m.Text, &ts, &m.Seq, &m.Turn, &m.Model, &t.Input, &t.Output, &t.CacheRead, &t.CacheWrite, &t.Reasoning); err != nil {
			_ = rows.Close()
			return nil, queryError(err)
		}
		m.Timestamp = stamp(ts)
		if t != (Tokens{}) {
			t.Total = t.Input + t.Output + t.CacheRead + t.CacheWrite
			m.Tokens = &t
		}
		idx[m.ID] = len(d.Messages)
		d.Messages = append(d.Messages, m)
	}
	if err := rows.Close(); err != nil {
		return nil, queryError(err)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(err)
	}
	// A result is searched whole and shown as its first ShowResultMax bytes.
	tr, err := ix.db.QueryContext(ctx, `SELECT mid, cid, name, params, coalesce(CAST(substr(CAST(result AS BLOB), 1, ?) AS TEXT), ''),
		max(length(CAST(result AS BLOB)), result_bytes), status, child_session FROM tool_calls WHERE session = ? ORDER BY id`, ShowResultMax, s.rowid)
	if err != nil {
		return nil, queryError(err)
	}
	defer func() { _ = tr.Close() }()
	for tr.Next() {
		var mid string
		var tc ToolCall
		var n int64
		if err := tr.Scan(&mid, &tc.ID, &tc.Name, &tc.Params, &tc.Result, &n, &tc.Status, &tc.ChildSession); err != nil {
			return nil, queryError(err)
		}
		if n > int64(len(tc.Result)) {
			// The excerpt may end inside a character: cut it before, and say how long it was.
			tc.Result, tc.ResultBytes = trimPartialRune(tc.Result), n
		}
		if i, ok := idx[mid]; ok {
			d.Messages[i].ToolCalls = append(d.Messages[i].ToolCalls, tc)
		}
		if tc.ChildSession != "" {
			d.Children = append(d.Children, tc.ChildSession)
		}
	}
	if err := tr.Err(); err != nil {
		return nil, queryError(err)
	}
	return d, nil
}

// trimPartialRune drops the bytes of a character cut at the end of s.
func trimPartialRune(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			return s
		}
		s = s[:len(s)-1]
	}
	return s
}

// ShowResultMax is how much of a tool result Show returns: the start of a build log or a file
// read, enough to see what it was; the whole of it is searched.
const ShowResultMax = source.ResultExcerptMax

// StatsRow is abi.IndexStatsRow.
type StatsRow = abi.IndexStatsRow

// Stats is abi.IndexStats.
type Stats = abi.IndexStats

// usageRows is every counted token once, with its session's source and project, the model
// and the day: per message for the tools that count per reply, per session for those that
// keep a running total (Codex), dated by the session's last update.
const usageRows = `
	SELECT s.source AS source, s.project AS project, coalesce(nullif(m.model, ''), s.model) AS model,
		strftime('%Y-%m-%d', coalesce(nullif(m.ts, 0), s.updated) / 1000, 'unixepoch') AS day,
		m.session AS session, 1 AS msgs, m.input AS input, m.output AS output, m.cache_read AS cache_read,
		m.cache_write AS cache_write, m.reasoning AS reasoning
	FROM messages m JOIN sessions s ON s.id = m.session WHERE s.cumulative = 0
	UNION ALL
	SELECT s.source, s.project, s.model, strftime('%Y-%m-%d', s.updated / 1000, 'unixepoch'),
		s.id, s.message_count, s.input_tokens, s.output_tokens, s.cache_read, s.cache_write, s.reasoning
	FROM sessions s WHERE s.cumulative = 1`

// Stats counts the index.
func (ix *Index) Stats(ctx context.Context) (*Stats, error) {
	st := &Stats{}
	if err := ix.db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM sessions WHERE deleted = 1),
		(SELECT count(*) FROM messages), (SELECT count(*) FROM tool_calls), (SELECT count(*) FROM files)`).
		Scan(&st.Sessions, &st.Deleted, &st.Messages, &st.ToolCalls, &st.Files); err != nil {
		return nil, queryError(err)
	}
	if err := ix.db.QueryRowContext(ctx, `SELECT coalesce(sum(cut), 0) FROM files WHERE deleted = 0`).Scan(&st.CutLines); err != nil {
		return nil, queryError(err)
	}
	failed, err := ix.failedFiles(ctx)
	if err != nil {
		return nil, err
	}
	st.FailedFiles = failed
	rows, err := ix.db.QueryContext(ctx, `SELECT source, skipped FROM files WHERE skipped <> ''`)
	if err != nil {
		return nil, queryError(err)
	}
	for rows.Next() {
		var src, sk string
		if err := rows.Scan(&src, &sk); err != nil {
			_ = rows.Close()
			return nil, queryError(err)
		}
		if err := addSkipped(&st.SkippedLines, src, sk); err != nil {
			_ = rows.Close()
			return nil, err
		}
	}
	if err := rows.Close(); err != nil {
		return nil, queryError(err)
	}
	for _, g := range []struct {
		col string
		out *[]StatsRow
	}{{"source", &st.BySource}, {"model", &st.ByModel}, {"project", &st.ByProject}, {"day", &st.ByDay}} {
		//nolint:gosec // g.col is one of the four column names above
		rows, err := ix.db.QueryContext(ctx, `SELECT `+g.col+`, count(DISTINCT session), sum(msgs), sum(input), sum(output),
			sum(cache_read), sum(cache_write), sum(reasoning) FROM (`+usageRows+`) GROUP BY 1 ORDER BY 1`)
		if err != nil {
			return nil, queryError(err)
		}
		*g.out = []StatsRow{}
		for rows.Next() {
			var r StatsRow
			var key sql.NullString
			t := &r.Tokens
			if err := rows.Scan(&key, &r.Sessions, &r.Messages, &t.Input, &t.Output, &t.CacheRead, &t.CacheWrite, &t.Reasoning); err != nil {
				_ = rows.Close()
				return nil, queryError(err)
			}
			r.Key = key.String
			t.Total = t.Input + t.Output + t.CacheRead + t.CacheWrite
			*g.out = append(*g.out, r)
		}
		if err := rows.Close(); err != nil {
			return nil, queryError(err)
		}
	}
	for _, r := range st.BySource {
		st.Tokens.Input += r.Tokens.Input
		st.Tokens.Output += r.Tokens.Output
		st.Tokens.CacheRead += r.Tokens.CacheRead
		st.Tokens.CacheWrite += r.Tokens.CacheWrite
		st.Tokens.Reasoning += r.Tokens.Reasoning
		st.Tokens.Total += r.Tokens.Total
	}
	return st, nil
}

// failedFiles are the files whose last read failed, skipped until they change.
func (ix *Index) failedFiles(ctx context.Context) ([]FileError, error) {
	rows, err := ix.db.QueryContext(ctx, `SELECT source, path, error FROM files WHERE error <> '' AND deleted = 0 ORDER BY path`)
	if err != nil {
		return nil, queryError(err)
	}
	defer func() { _ = rows.Close() }()
	var out []FileError
	for rows.Next() {
		var fe FileError
		if err := rows.Scan(&fe.Source, &fe.Path, &fe.Error); err != nil {
			return nil, queryError(err)
		}
		out = append(out, fe)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(err)
	}
	return out, nil
}

func addSkipped(into *map[string]int, src, js string) error {
	var m map[string]int
	if err := jsonUnmarshal(js, &m); err != nil {
		return fmt.Errorf("index: skipped lines of a %s file: %w", src, err)
	}
	if *into == nil {
		*into = map[string]int{}
	}
	for k, v := range m {
		(*into)[src+": "+k] += v
	}
	return nil
}
