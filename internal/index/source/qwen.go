package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// QwenCode reads Qwen Code's chat records: $QWEN_HOME/projects/<cwd with / as ->/chats/<session
// id>.jsonl (QWEN_HOME defaults to ~/.qwen), one record a line, each with its uuid, session id,
// working directory and time. Message content is Gemini's: parts of text, functionCall and
// functionResponse (Qwen Code is a fork of Gemini CLI).
type QwenCode struct{}

// Name implements Source.
func (QwenCode) Name() string { return "qwen-code" }

// DefaultRoots implements Source.
func (QwenCode) DefaultRoots(env Env) []string {
	if dir := env.get("QWEN_HOME"); dir != "" {
		return []string{filepath.Join(dir, "projects")}
	}
	return []string{filepath.Join(env.Home, ".qwen", "projects")}
}

// Discover implements Source.
func (QwenCode) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(rel, name string) bool {
		return strings.HasSuffix(name, ".jsonl") && filepath.Base(filepath.Dir(rel)) == "chats"
	})
}

type qwenRecord struct {
	UUID          string          `json:"uuid"`
	SessionID     string          `json:"sessionId"`
	Timestamp     string          `json:"timestamp"`
	Type          string          `json:"type"`
	Subtype       string          `json:"subtype"`
	Cwd           string          `json:"cwd"`
	Model         string          `json:"model"`
	Message       *geminiContent  `json:"message"`
	Usage         *geminiUsage    `json:"usageMetadata"`
	SystemPayload json.RawMessage `json:"systemPayload"`
	ToolResult    *struct {
		CallID        string          `json:"callId"`
		Status        string          `json:"status"`
		ResultDisplay json.RawMessage `json:"resultDisplay"`
	} `json:"toolCallResult"`
}

// geminiContent is a Gemini API content: a role and its parts.
type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

type geminiPart struct {
	Text         string `json:"text"`
	Thought      bool   `json:"thought"`
	FunctionCall *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
}

// geminiUsage is a Gemini API usageMetadata; the prompt count includes the cached tokens.
type geminiUsage struct {
	Prompt     int64 `json:"promptTokenCount"`
	Candidates int64 `json:"candidatesTokenCount"`
	Thoughts   int64 `json:"thoughtsTokenCount"`
	Cached     int64 `json:"cachedContentTokenCount"`
}

func (u *geminiUsage) usage() Usage {
	if u == nil {
		return Usage{}
	}
	return Usage{Input: max(u.Prompt-u.Cached, 0), Output: u.Candidates, CacheRead: u.Cached, Reasoning: u.Thoughts}
}

// text is the content's visible text: its text parts, not the model's thoughts.
func (c *geminiContent) text() string {
	if c == nil {
		return ""
	}
	var out []string
	for _, p := range c.Parts {
		if p.Text != "" && !p.Thought {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// responseText is a functionResponse's result as text: its output (or error) when it is a
// string, else the JSON as written.
func responseText(raw json.RawMessage) (text string, isError bool) {
	var r struct {
		Output json.RawMessage `json:"output"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &r) == nil {
		if s, ok := gmString(r.Error); ok && s != "" {
			return s, true
		}
		if s, ok := gmString(r.Output); ok {
			return s, false
		}
	}
	return string(raw), false
}

// gmString is raw as a string when it is a JSON string.
func gmString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// qwenKnown are the system subtypes that hold nothing the index keeps (telemetry, snapshots,
// the slash commands' own records).
var qwenKnown = map[string]bool{
	"chat_compression": true, "slash_command": true, "ui_telemetry": true, "at_command": true,
	"attribution_snapshot": true, "notification": true, "background_task_completed": true, "cron": true,
	"mid_turn_user_message": true, "realtime_message": true, "rewind": true, "agent_bootstrap": true,
	"agent_launch_prompt": true, "agent_retry": true, "agent_session_ready": true,
	"file_history_snapshot": true, "session_source": true, "session_model": true, "omni_recall": true,
	"session_sources_snapshot": true, "branch_checkpoint": true, "goal_state": true, "goal_runtime": true,
	"goal_turn_end": true, "session_artifact_snapshot": true, "session_artifact_event": true,
	"user_text_elements": true, "turn_result": true, "session_recording_degraded": true, "init": true,
}

// Parse implements Source. A user record starts a turn; an assistant record is a reply whose
// functionCall parts are its tool calls; a tool_result record answers them by id, with the
// status Qwen Code gave it (toolCallResult.status).
func (q QwenCode) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res := &Result{Session: Session{Source: q.Name(), Path: path}}
	if st, ok := stateOf(r).(piState); ok {
		res.Session.Title, res.Session.Model = st.title, st.model
	}
	pair := newPairing(res)
	turn := 0
	err := lines(ctx, r, offset, res, func(line []byte, start int64) {
		var rec qwenRecord
		if !decodeObject(line, &rec, res) {
			return
		}
		ts := parseTime(rec.Timestamp)
		res.seen(ts)
		if rec.SessionID != "" {
			res.Session.ID = rec.SessionID
		}
		if rec.Cwd != "" {
			res.Session.Project = rec.Cwd
		}
		id := rec.UUID
		if id == "" {
			id = lineID(start)
		}
		switch rec.Type {
		case "user", "assistant", "tool_result":
			if ts.IsZero() {
				res.skip(ReasonNoTimestamp)
				return
			}
			if rec.Message == nil {
				res.skip(ReasonMalformed)
				return
			}
		}
		switch rec.Type {
		case "user":
			turn++
			res.Messages = append(res.Messages, Message{ID: id, Role: "user", Text: rec.Message.text(),
				Timestamp: ts, Seq: len(res.Messages), Turn: turn})
		case "assistant":
			if rec.Model != "" {
				res.Session.Model = rec.Model
			}
			res.Messages = append(res.Messages, Message{ID: id, Role: "assistant", Text: rec.Message.text(),
				Timestamp: ts, Seq: len(res.Messages), Turn: turn, Model: rec.Model, Usage: rec.Usage.usage()})
			for _, p := range rec.Message.Parts {
				if fc := p.FunctionCall; fc != nil {
					pair.call(ToolCall{ID: fc.ID, Name: fc.Name, Params: string(fc.Args), MessageID: id})
				}
			}
		case "tool_result":
			for _, p := range rec.Message.Parts {
				fr := p.FunctionResponse
				if fr == nil {
					continue
				}
				text, isErr := responseText(fr.Response)
				if rec.ToolResult != nil && rec.ToolResult.CallID == fr.ID {
					isErr = isErr || rec.ToolResult.Status == "error" || rec.ToolResult.Status == "cancelled"
				}
				pair.result(fr.ID, text, isErr)
			}
		case "system":
			switch rec.Subtype {
			case "custom_title":
				var p struct {
					CustomTitle string `json:"customTitle"`
				}
				if json.Unmarshal(rec.SystemPayload, &p) == nil && p.CustomTitle != "" {
					res.Session.Title = p.CustomTitle
				}
			case "parent_session":
				var p struct {
					ParentSessionID string `json:"parentSessionId"`
				}
				if json.Unmarshal(rec.SystemPayload, &p) == nil {
					res.Session.ParentSession = p.ParentSessionID
				}
			default:
				if !qwenKnown[rec.Subtype] {
					res.unknown("system/" + rec.Subtype)
				}
			}
		default:
			res.unknown(rec.Type)
		}
	})
	if err != nil {
		return res, fmt.Errorf("qwen-code: %s: %w", path, err)
	}
	if res.Session.ID == "" {
		res.Session.ID = stem(path)
	}
	for _, m := range res.Messages {
		res.Usage = res.Usage.Add(m.Usage)
	}
	res.state = piState{title: res.Session.Title, model: res.Session.Model}
	return res, nil
}
