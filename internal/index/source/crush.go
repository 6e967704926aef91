package source

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Crush reads Crush's databases: <project>/.crush/crush.db (its data_directory), SQLite with a
// row per session and per message, each message's content a JSON array of typed parts. Crush
// lists the projects it ran in, with their data directories, in projects.json beside its global
// data ($CRUSH_GLOBAL_DATA, else $XDG_DATA_HOME/crush, else ~/.local/share/crush): those are the
// default roots. Each database is read whole at each change (sqlitestore.go).
type Crush struct{}

// Name implements Source.
func (Crush) Name() string { return "crush" }

// DefaultRoots implements Source: the data directory of every project projects.json lists.
func (Crush) DefaultRoots(env Env) []string {
	dir := env.get("CRUSH_GLOBAL_DATA")
	if dir == "" {
		data := env.get("XDG_DATA_HOME")
		if data == "" {
			data = filepath.Join(env.Home, ".local", "share")
		}
		dir = filepath.Join(data, "crush")
	}
	b, err := os.ReadFile(filepath.Join(dir, "projects.json")) //nolint:gosec // Crush's own list
	if err != nil || len(b) > ocStoreMax {
		return nil
	}
	var list struct {
		Projects []struct {
			Path    string `json:"path"`
			DataDir string `json:"data_dir"`
		} `json:"projects"`
	}
	if json.Unmarshal(b, &list) != nil {
		return nil
	}
	var out []string
	for _, p := range list.Projects {
		if d := p.DataDir; d != "" && filepath.IsAbs(d) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}

// Discover implements Source: crush.db at a root's top (a data directory), or in its .crush
// (a project's directory).
func (Crush) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discoverTop(ctx, roots, func(string) bool { return false }, "crush.db", filepath.Join(".crush", "crush.db"))
}

type crushPart struct {
	Type string `json:"type"`
	Data struct {
		Text       string `json:"text"`
		ID         string `json:"id"`
		Name       string `json:"name"`
		Input      string `json:"input"`
		ToolCallID string `json:"tool_call_id"`
		Content    string `json:"content"`
		IsError    bool   `json:"is_error"`
		Command    string `json:"command"`
		Output     string `json:"output"`
		ExitCode   int    `json:"exit_code"`
	} `json:"data"`
}

// crushKnownParts hold nothing the index keeps.
var crushKnownParts = map[string]bool{"reasoning": true, "image_url": true, "binary": true, "finish": true}

// Parse implements Source. A session's messages in order: a user message starts a turn, an
// assistant message's tool_call parts are its calls, a tool message's tool_result parts answer
// them. A subagent's session (id <message id>$$<tool call id>) is linked to that call; the
// sessions Crush makes to write a title (title-<id>) are not conversations and are left out.
// Crush keeps tokens per session only: they are the session's (UsageCumulative).
func (c Crush) Parse(ctx context.Context, _ io.Reader, path string, _ int64) (*Result, error) {
	res, err := c.parse(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("crush: %w", err)
	}
	return res, nil
}

func (c Crush) parse(ctx context.Context, path string) (*Result, error) {
	db, err := openStore(ctx, path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	for _, t := range []string{"sessions", "messages"} {
		if ok, err := hasTable(ctx, db, t); err != nil || !ok {
			if err == nil {
				return storeResults(path, nil)
			}
			return nil, err
		}
	}
	project := ""
	if dataDir := filepath.Dir(path); filepath.Base(dataDir) == ".crush" {
		project = filepath.Dir(dataDir)
	}
	var order []*Result
	byID := map[string]*Result{}
	rows, err := db.QueryContext(ctx, `SELECT id, coalesce(parent_session_id, ''), title, prompt_tokens, completion_tokens,
		created_at, updated_at FROM sessions ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	for rows.Next() {
		var id, parent, title string
		var in, out, created, updated int64
		if err := rows.Scan(&id, &parent, &title, &in, &out, &created, &updated); err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("sessions: %w", err)
		}
		if strings.HasPrefix(id, "title-") {
			continue
		}
		r := &Result{Session: Session{Source: c.Name(), ID: id, Path: path, Project: project, Title: title,
			ParentSession: parent, IsSubagent: parent != ""}, Usage: Usage{Input: in, Output: out}, UsageCumulative: true}
		if msg, call, ok := strings.Cut(id, "$$"); ok {
			r.Session.ParentMessage, r.Session.ToolCallID = msg, call
		}
		r.seen(unixTime(created))
		r.seen(unixTime(updated))
		order = append(order, r)
		byID[id] = r
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	if err := c.messages(ctx, db, byID); err != nil {
		return nil, err
	}
	for _, r := range order {
		sortMessages(r.Messages)
		if r.Session.ToolCallID == "" {
			continue
		}
		if p := byID[r.Session.ParentSession]; p != nil {
			for i := range p.ToolCalls {
				if p.ToolCalls[i].ID == r.Session.ToolCallID {
					p.ToolCalls[i].ChildSession = r.Session.ID
				}
			}
		}
	}
	return storeResults(path, order)
}

func (Crush) messages(ctx context.Context, db *sql.DB, byID map[string]*Result) error {
	rows, err := db.QueryContext(ctx, `SELECT id, session_id, role, parts, coalesce(model, ''), created_at
		FROM messages ORDER BY session_id, created_at, rowid`)
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	turns := map[string]int{}
	pairs := map[string]*pairing{}
	for rows.Next() {
		var id, sid, role, model string
		var parts []byte
		var created int64
		if err := rows.Scan(&id, &sid, &role, &parts, &model, &created); err != nil {
			_ = rows.Close()
			return fmt.Errorf("messages: %w", err)
		}
		r := byID[sid]
		if r == nil {
			continue
		}
		pair := pairs[sid]
		if pair == nil {
			pair = newPairing(r)
			pairs[sid] = pair
		}
		var ps []crushPart
		if err := json.Unmarshal(parts, &ps); err != nil {
			r.skip(ReasonMalformed)
			continue
		}
		ts := unixTime(created)
		r.seen(ts)
		if role == "user" {
			turns[sid]++
		}
		msg := Message{ID: id, Role: role, Timestamp: ts, Turn: turns[sid], Model: model}
		if model != "" && role == "assistant" {
			r.Session.Model = model
		}
		for _, p := range ps {
			switch p.Type {
			case "text":
				r.appendText(&msg, p.Data.Text)
			case "tool_call":
				pair.call(ToolCall{ID: p.Data.ID, Name: p.Data.Name, Params: p.Data.Input, MessageID: id})
			case "tool_result":
				pair.result(p.Data.ToolCallID, p.Data.Content, p.Data.IsError)
			case "shell_command":
				params, _ := json.Marshal(map[string]string{"command": p.Data.Command})
				status := StatusOK
				if p.Data.ExitCode != 0 {
					status = StatusError
				}
				pair.call(ToolCall{ID: id + "/shell", Name: "bash", Params: string(params),
					Result: p.Data.Output, Status: status, MessageID: id})
			default:
				if !crushKnownParts[p.Type] {
					r.unknown("part/" + p.Type)
				}
			}
		}
		if role != "tool" {
			r.Messages = append(r.Messages, msg)
		}
	}
	return closeRows(rows)
}
