package source

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// OpenCode reads OpenCode's database: $XDG_DATA_HOME/opencode/opencode.db (default
// ~/.local/share/opencode), SQLite with one row per session, message and part, each message's
// and part's fields as JSON in its data column. Every session of every project is in the one
// file, read whole at each change (sqlitestore.go). The JSON files of the versions before the
// database (storage/) are not read.
type OpenCode struct{}

// Name implements Source.
func (OpenCode) Name() string { return "opencode" }

// DefaultRoots implements Source.
func (OpenCode) DefaultRoots(env Env) []string {
	data := env.get("XDG_DATA_HOME")
	if data == "" {
		data = filepath.Join(env.Home, ".local", "share")
	}
	return []string{filepath.Join(data, "opencode")}
}

// Discover implements Source: the database at a root's top (opencode.db, or the
// opencode-<channel>.db of a preview build).
func (OpenCode) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discoverTop(ctx, roots, func(name string) bool {
		return strings.HasPrefix(name, "opencode") && strings.HasSuffix(name, ".db")
	})
}

type ocMessage struct {
	Role       string `json:"role"`
	ModelID    string `json:"modelID"`
	ProviderID string `json:"providerID"`
	Model      struct {
		ModelID string `json:"modelID"`
	} `json:"model"`
	Tokens *struct {
		Input     int64 `json:"input"`
		Output    int64 `json:"output"`
		Reasoning int64 `json:"reasoning"`
		Cache     struct {
			Read  int64 `json:"read"`
			Write int64 `json:"write"`
		} `json:"cache"`
	} `json:"tokens"`
	Path struct {
		Cwd string `json:"cwd"`
	} `json:"path"`
}

type ocPart struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Synthetic bool   `json:"synthetic"`
	Ignored   bool   `json:"ignored"`
	Tool      string `json:"tool"`
	CallID    string `json:"callID"`
	State     struct {
		Status   string          `json:"status"`
		Input    json.RawMessage `json:"input"`
		Output   string          `json:"output"`
		Error    string          `json:"error"`
		Metadata struct {
			SessionID string `json:"sessionId"`
		} `json:"metadata"`
	} `json:"state"`
}

// ocKnownParts are the part types that hold no text or call the index keeps.
var ocKnownParts = map[string]bool{
	"step-start": true, "step-finish": true, "snapshot": true, "patch": true, "file": true,
	"agent": true, "subtask": true, "retry": true, "compaction": true, "reasoning": true,
}

// Parse implements Source. Every session of the database: its messages in order, each with
// the text of its text parts (not the ones OpenCode adds itself, synthetic); a tool part is a
// call with its input, output and status, and a task's names the session it ran
// (metadata.sessionId), whose parent_id names this one.
func (o OpenCode) Parse(ctx context.Context, _ io.Reader, path string, _ int64) (*Result, error) {
	res, err := o.parse(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("opencode: %w", err)
	}
	return res, nil
}

func (o OpenCode) parse(ctx context.Context, path string) (*Result, error) {
	db, err := openStore(ctx, path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	for _, t := range []string{"session", "message", "part"} {
		if ok, err := hasTable(ctx, db, t); err != nil || !ok {
			if err == nil {
				return storeResults(path, nil)
			}
			return nil, err
		}
	}
	var order []*Result
	byID := map[string]*Result{}
	rows, err := db.QueryContext(ctx, `SELECT id, coalesce(parent_id, ''), directory, title, coalesce(model, ''),
		time_created, time_updated FROM session ORDER BY time_created, id`)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	for rows.Next() {
		var id, parent, dir, title, model string
		var created, updated int64
		if err := rows.Scan(&id, &parent, &dir, &title, &model, &created, &updated); err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("sessions: %w", err)
		}
		r := &Result{Session: Session{Source: o.Name(), ID: id, Path: path, Project: dir,
			ParentSession: parent, IsSubagent: parent != "", Title: ocTitle(title)}}
		var m struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(model), &m) == nil {
			r.Session.Model = m.ID
		}
		r.seen(unixTime(created))
		r.seen(unixTime(updated))
		order = append(order, r)
		byID[id] = r
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	if err := o.messages(ctx, db, byID); err != nil {
		return nil, err
	}
	if err := o.parts(ctx, db, byID); err != nil {
		return nil, err
	}
	for _, r := range order {
		sortMessages(r.Messages)
	}
	return storeResults(path, order)
}

func (OpenCode) messages(ctx context.Context, db *sql.DB, byID map[string]*Result) error {
	rows, err := db.QueryContext(ctx, `SELECT id, session_id, time_created, data FROM message ORDER BY session_id, time_created, id`)
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	turns := map[string]int{}
	for rows.Next() {
		var id, sid string
		var created int64
		var data []byte
		if err := rows.Scan(&id, &sid, &created, &data); err != nil {
			_ = rows.Close()
			return fmt.Errorf("messages: %w", err)
		}
		r := byID[sid]
		if r == nil {
			continue // a session deleted under it
		}
		var m ocMessage
		if !decodeObject(data, &m, r) {
			continue
		}
		if m.Role == "" {
			r.skip(ReasonNoRole)
			continue
		}
		ts := unixTime(created)
		r.seen(ts)
		if m.Role == "user" {
			turns[sid]++
		}
		msg := Message{ID: id, Role: m.Role, Timestamp: ts, Turn: turns[sid], Model: m.ModelID}
		if msg.Model == "" {
			msg.Model = m.Model.ModelID
		}
		if t := m.Tokens; t != nil {
			msg.Usage = Usage{Input: t.Input, Output: t.Output, CacheRead: t.Cache.Read, CacheWrite: t.Cache.Write, Reasoning: t.Reasoning}
		}
		if m.Role == "assistant" && m.ModelID != "" {
			r.Session.Model = m.ModelID
		}
		if r.Session.Project == "" {
			r.Session.Project = m.Path.Cwd
		}
		r.Messages = append(r.Messages, msg)
	}
	return closeRows(rows)
}

func (OpenCode) parts(ctx context.Context, db *sql.DB, byID map[string]*Result) error {
	rows, err := db.QueryContext(ctx, `SELECT message_id, session_id, data FROM part ORDER BY session_id, message_id, id`)
	if err != nil {
		return fmt.Errorf("parts: %w", err)
	}
	// idx finds a message of a session by id; a session's pairing pairs nothing (OpenCode
	// keeps a call and its result in one part) but keeps its calls in order.
	idx := map[string]map[string]int{}
	for rows.Next() {
		var mid, sid string
		var data []byte
		if err := rows.Scan(&mid, &sid, &data); err != nil {
			_ = rows.Close()
			return fmt.Errorf("parts: %w", err)
		}
		r := byID[sid]
		if r == nil {
			continue
		}
		if idx[sid] == nil {
			idx[sid] = map[string]int{}
			for i, m := range r.Messages {
				idx[sid][m.ID] = i
			}
		}
		var p ocPart
		if !decodeObject(data, &p, r) {
			continue
		}
		switch p.Type {
		case "text":
			if i, ok := idx[sid][mid]; ok && !p.Synthetic && !p.Ignored {
				r.appendText(&r.Messages[i], p.Text)
			}
		case "tool":
			tc := ToolCall{ID: p.CallID, Name: p.Tool, Params: string(p.State.Input), MessageID: mid,
				ChildSession: p.State.Metadata.SessionID}
			switch p.State.Status {
			case "completed":
				tc.Status, tc.Result = StatusOK, p.State.Output
			case "error":
				tc.Status, tc.Result = StatusError, p.State.Error
			default:
				tc.Status = StatusPending
			}
			r.ToolCalls = append(r.ToolCalls, tc)
		default:
			if !ocKnownParts[p.Type] {
				r.unknown("part/" + p.Type)
			}
		}
	}
	return closeRows(rows)
}

// ocTitle is a session's title, "" for the placeholder OpenCode gives a session until its
// title is made ("New session - <time>", "Child session - <time>"): the first prompt is a
// better one.
func ocTitle(t string) string {
	if strings.HasPrefix(t, "New session - ") || strings.HasPrefix(t, "Child session - ") {
		return ""
	}
	return t
}

func closeRows(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}
