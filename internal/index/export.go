package index

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/nexus-run/nexus/internal/abi"
)

// Ledgers an export writes (docs/history.md).
const (
	// LedgerEvents is one record per turn: the user's query and the final response.
	LedgerEvents = "events"
	// LedgerAgents is every session, message and tool call, at full fidelity.
	LedgerAgents = "agents"
)

// ExportOptions selects a ledger and where it continues from.
type ExportOptions struct {
	Ledger string
	// Cursor is the cursor of the last record a previous export wrote (0: from the start).
	// Records written by later syncs follow; a record changed since is written again, whole,
	// and a reader upserts it by its key.
	Cursor int64
}

// ExportRecord is one line of a ledger. Type says which of the optional parts it carries.
type ExportRecord struct {
	Type    string `json:"type"` // "session", "message", "tool_call", "turn"
	Cursor  int64  `json:"cursor"`
	Source  string `json:"source"`
	Session string `json:"session"`

	SessionInfo *SessionInfo `json:"session_info,omitempty"`
	Message     *Message     `json:"message,omitempty"`
	ToolCall    *ExportCall  `json:"tool_call,omitempty"`
	Turn        *Turn        `json:"turn,omitempty"`
}

// ExportCall is a tool call with the message that made it.
type ExportCall struct {
	ToolCall
	MessageID string `json:"message_id,omitempty"`
}

// Turn is one user prompt and the reply that ended it.
type Turn struct {
	Turn     int    `json:"turn"`
	Project  string `json:"project,omitempty"`
	Model    string `json:"model,omitempty"`
	Started  string `json:"started,omitempty"`
	Ended    string `json:"ended,omitempty"`
	Query    string `json:"query"`
	Response string `json:"response"`
}

// Export writes the records of a ledger changed after the cursor as JSON Lines, in cursor
// order, and returns the cursor to continue from (the input cursor when nothing is new).
func (ix *Index) Export(ctx context.Context, w io.Writer, o ExportOptions) (int64, error) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	switch o.Ledger {
	case LedgerEvents:
		return ix.exportEvents(ctx, enc, o.Cursor)
	case LedgerAgents:
		return ix.exportAgents(ctx, enc, o.Cursor)
	}
	return 0, abi.Errorf(abi.CodeInvalidArgument, "", "export: unknown ledger %q (ledgers: %s, %s)", o.Ledger, LedgerEvents, LedgerAgents)
}

func (ix *Index) exportEvents(ctx context.Context, enc *json.Encoder, cursor int64) (int64, error) {
	return ix.turnRecords(ctx, enc, "t.gen > ?", cursor)
}

// turnRecords writes the turns that match cond (on t.gen, with arg) in cursor order.
func (ix *Index) turnRecords(ctx context.Context, enc *json.Encoder, cond string, cursor int64) (int64, error) {
	//nolint:gosec // cond is one of this file's constants; the cursor is bound
	rows, err := ix.db.QueryContext(ctx, `SELECT t.gen, s.source, s.sid, t.turn, s.project,
			coalesce(nullif(r.model, ''), s.model), t.started, t.ended, coalesce(p.text, ''), coalesce(r.text, '')
		FROM turns t JOIN sessions s ON s.id = t.session
		LEFT JOIN messages p ON p.id = t.prompt LEFT JOIN messages r ON r.id = t.response
		WHERE `+cond+` AND t.prompt <> 0 ORDER BY t.gen, t.session, t.turn`, cursor)
	if err != nil {
		return cursor, queryError(err)
	}
	defer func() { _ = rows.Close() }()
	last := cursor
	for rows.Next() {
		var rec ExportRecord
		var t Turn
		var started, ended int64
		if err := rows.Scan(&rec.Cursor, &rec.Source, &rec.Session, &t.Turn, &t.Project, &t.Model, &started, &ended, &t.Query, &t.Response); err != nil {
			return last, queryError(err)
		}
		t.Started, t.Ended = stamp(started), stamp(ended)
		rec.Type, rec.Turn = "turn", &t
		if err := enc.Encode(&rec); err != nil {
			return last, fmt.Errorf("export: %w", err)
		}
		last = rec.Cursor
	}
	if err := rows.Err(); err != nil {
		return last, queryError(err)
	}
	return last, nil
}

func (ix *Index) exportAgents(ctx context.Context, enc *json.Encoder, cursor int64) (int64, error) {
	// The rows of each generation in turn, so a reader that stops part way resumes at a
	// generation boundary without missing any.
	gens, err := ix.db.QueryContext(ctx, `SELECT gen FROM sessions WHERE gen > ?1 UNION SELECT gen FROM messages WHERE gen > ?1
		UNION SELECT gen FROM tool_calls WHERE gen > ?1 ORDER BY 1`, cursor)
	if err != nil {
		return cursor, queryError(err)
	}
	var list []int64
	for gens.Next() {
		var g int64
		if err := gens.Scan(&g); err != nil {
			_ = gens.Close()
			return cursor, queryError(err)
		}
		list = append(list, g)
	}
	if err := gens.Close(); err != nil {
		return cursor, queryError(err)
	}
	last := cursor
	for _, g := range list {
		if err := ix.exportGen(ctx, enc, g); err != nil {
			return last, err
		}
		last = g
	}
	return last, nil
}

func (ix *Index) exportGen(ctx context.Context, enc *json.Encoder, gen int64) error {
	// Sessions first, so a reader has the session of every message that follows.
	rows, err := ix.db.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions s WHERE s.gen = ? ORDER BY s.id`, gen)
	if err != nil {
		return queryError(err)
	}
	for rows.Next() {
		s, err := scanSession(rows)
		if err != nil {
			_ = rows.Close()
			return queryError(err)
		}
		if err := enc.Encode(&ExportRecord{Type: "session", Cursor: gen, Source: s.Source, Session: s.ID, SessionInfo: &s.SessionInfo}); err != nil {
			_ = rows.Close()
			return fmt.Errorf("export: %w", err)
		}
	}
	if err := rows.Close(); err != nil {
		return queryError(err)
	}
	rows, err = ix.db.QueryContext(ctx, `SELECT s.source, s.sid, m.mid, m.role, m.text, m.ts, m.seq, m.turn, m.model,
			m.input, m.output, m.cache_read, m.cache_write, m.reasoning
		FROM messages m JOIN sessions s ON s.id = m.session WHERE m.gen = ? ORDER BY m.session, m.seq`, gen)
	if err != nil {
		return queryError(err)
	}
	for rows.Next() {
		var rec ExportRecord
		var m Message
		var ts int64
		var t Tokens
		if err := rows.Scan(&rec.Source, &rec.Session, &m.ID, &m.Role, &m.Text, &ts, &m.Seq, &m.Turn, &m.Model,
			&t.Input, &t.Output, &t.CacheRead, &t.CacheWrite, &t.Reasoning); err != nil {
			_ = rows.Close()
			return queryError(err)
		}
		m.Timestamp = stamp(ts)
		if t != (Tokens{}) {
			t.Total = t.Input + t.Output + t.CacheRead + t.CacheWrite
			m.Tokens = &t
		}
		rec.Type, rec.Cursor, rec.Message = "message", gen, &m
		if err := enc.Encode(&rec); err != nil {
			_ = rows.Close()
			return fmt.Errorf("export: %w", err)
		}
	}
	if err := rows.Close(); err != nil {
		return queryError(err)
	}
	rows, err = ix.db.QueryContext(ctx, `SELECT s.source, s.sid, t.mid, t.cid, t.name, t.params, t.result, t.status, t.child_session
		FROM tool_calls t JOIN sessions s ON s.id = t.session WHERE t.gen = ? ORDER BY t.session, t.id`, gen)
	if err != nil {
		return queryError(err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var rec ExportRecord
		var c ExportCall
		if err := rows.Scan(&rec.Source, &rec.Session, &c.MessageID, &c.ID, &c.Name, &c.Params, &c.Result, &c.Status, &c.ChildSession); err != nil {
			return queryError(err)
		}
		rec.Type, rec.Cursor, rec.ToolCall = "tool_call", gen, &c
		if err := enc.Encode(&rec); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return queryError(err)
	}
	_, err = ix.turnRecords(ctx, enc, "t.gen = ?", gen)
	return err
}

func jsonUnmarshal(s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}
