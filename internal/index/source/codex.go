package source

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
)

// Codex reads Codex's rollouts: $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl
// (CODEX_HOME defaults to ~/.codex). Lines are {timestamp, type, payload}.
type Codex struct{}

// Name implements Source.
func (Codex) Name() string { return "codex" }

// DefaultRoots implements Source.
func (Codex) DefaultRoots(env Env) []string {
	home := env.get("CODEX_HOME")
	if home == "" {
		home = filepath.Join(env.Home, ".codex")
	}
	return []string{filepath.Join(home, "sessions")}
}

// Discover implements Source.
func (Codex) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(_, name string) bool {
		return strings.HasPrefix(name, "rollout-") && strings.HasSuffix(name, ".jsonl")
	})
}

type cxLine struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   json.RawMessage `json:"payload"`
}

type cxPayload struct {
	Type string `json:"type"`
	// session_meta
	ID             string          `json:"id"`
	Cwd            string          `json:"cwd"`
	Timestamp      string          `json:"timestamp"`
	ParentThreadID string          `json:"parent_thread_id"`
	ForkedFromID   string          `json:"forked_from_id"`
	Source         json.RawMessage `json:"source"`
	// turn_context
	Model string `json:"model"`
	// response_item message
	Role    string `json:"role"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	// function_call and friends; an MCP tool's call names its server's namespace (mcp__<server>)
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	CallID    string          `json:"call_id"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Action    json.RawMessage `json:"action"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output"`
	// event_msg item_completed: the tool's own account of an item, by the call's id
	Item *cxItem `json:"item"`
	// event_msg token_count
	Info *struct {
		Total *struct {
			Input     int64 `json:"input_tokens"`
			Cached    int64 `json:"cached_input_tokens"`
			Output    int64 `json:"output_tokens"`
			Reasoning int64 `json:"reasoning_output_tokens"`
		} `json:"total_token_usage"`
	} `json:"info"`
}

// cxItem is an item_completed event's item: for a tool call, its id is the call's and its
// status and result say whether it failed (an MCP call's result.isError).
type cxItem struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Status string `json:"status"`
	Result *struct {
		IsError bool `json:"isError"`
	} `json:"result"`
}

// failed says the item is a tool call that failed.
func (it *cxItem) failed() bool {
	return it.ID != "" && (it.Status == "failed" || (it.Result != nil && it.Result.IsError))
}

// cxKnown are the record and item types Codex writes that hold no message or tool call.
var cxKnown = map[string]bool{
	"reasoning": true, "ghost_snapshot": true, "compaction": true, "other": true,
}

// cxKnownRecords are the line types Codex writes that hold nothing the index keeps: 0.171's
// per-response usage (token_count events carry the running total the index takes) and the
// snapshot of the thread's settings and environment.
var cxKnownRecords = map[string]bool{"compacted": true, "token_usage_record": true, "world_state": true}

// cxCalls are the response items that call a tool, and cxOutputs those that answer one.
var (
	cxCalls = map[string]bool{
		"function_call": true, "custom_tool_call": true, "local_shell_call": true,
		"tool_search_call": true, "web_search_call": true, "image_generation_call": true,
	}
	cxOutputs = map[string]bool{
		"function_call_output": true, "custom_tool_call_output": true, "tool_search_output": true,
	}
)

// cxContextPrefixes start the user messages Codex injects itself (environment, instructions):
// they are kept as user messages but do not start a turn.
var cxContextPrefixes = []string{"<environment_context>", "<user_instructions>", "# AGENTS.md",
	"<permissions instructions>", "<turn_aborted>", "<user_shell_command>"}

// Parse implements Source. Assistant replies are output_text (input_text is the user's);
// function_call and function_call_output pair by call_id; a subagent's session_meta names its
// parent in parent_thread_id; a spawn_agent output names the child's thread.
func (c Codex) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res := &Result{Session: Session{Source: c.Name(), Path: path}, UsageCumulative: true}
	pair := newPairing(res)
	turn := 0
	// anchor is the message the calls that follow belong to: the turn's last reply, or, when the
	// model's first action in a turn is a call, the turn's prompt (so the call has a time and a
	// place in the session).
	anchor := ""
	// failed are the calls Codex recorded as failed before their output was read.
	failed := map[string]bool{}
	if st, ok := stateOf(r).(cxState); ok {
		res.Session.Model, anchor = st.model, st.anchor
		for _, id := range st.failed {
			failed[id] = true
		}
	}
	err := lines(ctx, r, offset, res, func(line []byte, start int64) {
		var l cxLine
		if !decodeObject(line, &l, res) {
			return
		}
		ts := parseTime(l.Timestamp)
		res.seen(ts)
		var p cxPayload
		if len(l.Payload) > 0 && json.Unmarshal(l.Payload, &p) != nil {
			res.skip(ReasonMalformed)
			return
		}
		switch l.Type {
		case "session_meta":
			c.meta(&p, res)
		case "turn_context":
			if p.Model != "" {
				res.Session.Model = p.Model
			}
		case "event_msg":
			if p.Type == "item_completed" && p.Item != nil && p.Item.failed() {
				c.fail(pair, failed, p.Item.ID)
			}
			if p.Type == "token_count" && p.Info != nil && p.Info.Total != nil {
				t := p.Info.Total
				// input_tokens includes the cached part: split it so Total is not inflated.
				res.Usage = Usage{Input: t.Input - t.Cached, CacheRead: t.Cached, Output: t.Output,
					Reasoning: t.Reasoning}
			}
		case "response_item":
			if ts.IsZero() {
				res.skip(ReasonNoTimestamp)
				return
			}
			switch {
			case p.Type == "message" && p.Role == "":
				res.skip(ReasonNoRole)
			case p.Type == "message":
				var text []string
				for _, b := range p.Content {
					if b.Text != "" {
						text = append(text, b.Text)
					}
				}
				joined := strings.Join(text, "\n")
				id := lineID(start)
				injected := p.Role == "user" && cxInjected(joined)
				if p.Role == "user" && !injected {
					turn++
					anchor = id
				}
				if p.Role == "assistant" {
					anchor = id
				}
				res.Messages = append(res.Messages, Message{ID: id, Role: p.Role, Text: joined,
					Timestamp: ts, Seq: len(res.Messages), Turn: turn, Model: c.model(p.Role, res), Context: injected})
			case cxCalls[p.Type]:
				params := p.Arguments
				if len(params) == 0 {
					params = p.Input
				}
				if len(params) == 0 {
					params = p.Action
				}
				name := p.Name
				if name == "" {
					name = strings.TrimSuffix(p.Type, "_call")
				}
				if p.Namespace != "" {
					// mcp__<server>__<tool>, as the tool is named to the model and by Claude Code.
					name = p.Namespace + "__" + name
				}
				tc := ToolCall{ID: p.CallID, Name: name, Params: rawText(params), MessageID: anchor}
				if p.CallID == "" {
					// Web searches have no id and no output item: their status is their result,
					// and their line names them, the same in any parse.
					tc.ID, tc.Status = lineID(start), cxStatus(p.Status)
				}
				pair.call(tc)
			case cxOutputs[p.Type] && p.CallID == "":
				// An output that answers no call (the goals feature writes them): no tool call.
			case cxOutputs[p.Type]:
				out := cxOutputText(p.Output)
				tc := pair.result(p.CallID, out, failed[p.CallID])
				delete(failed, p.CallID)
				if child := cxChild(out); tc != nil && child != "" {
					tc.ChildSession = child
				}
			case cxKnown[p.Type]:
			default:
				res.unknown("response_item/" + p.Type)
			}
		default:
			if !cxKnownRecords[l.Type] {
				res.unknown(l.Type)
			}
		}
	})
	if err != nil {
		return res, fmt.Errorf("codex: %s: %w", path, err)
	}
	if res.Session.ID == "" {
		res.Session.ID = cxIDFromName(path)
	}
	st := cxState{model: res.Session.Model, anchor: anchor}
	for id := range failed {
		st.failed = append(st.failed, id)
	}
	res.state = st
	return res, nil
}

// cxState is what the parse of a rollout's next piece continues from: the model of the last
// turn context, the message the calls that follow belong to, and the calls recorded as failed
// whose output is still to come.
type cxState struct {
	model, anchor string
	failed        []string
}

// fail marks the call id failed: now if its output was read, else when it is.
func (Codex) fail(pair *pairing, failed map[string]bool, id string) {
	if i, ok := pair.byID[id]; ok && pair.res.ToolCalls[i].Status != StatusPending {
		pair.res.ToolCalls[i].Status = StatusError
		return
	}
	failed[id] = true
}

func (Codex) meta(p *cxPayload, res *Result) {
	if p.ID != "" {
		res.Session.ID = p.ID
	}
	if p.Cwd != "" {
		res.Session.Project = p.Cwd
	}
	res.seen(parseTime(p.Timestamp))
	parent := p.ParentThreadID
	if parent == "" && len(p.Source) > 0 && p.Source[0] == '{' {
		var src struct {
			Subagent struct {
				ThreadSpawn struct {
					ParentThreadID string `json:"parent_thread_id"`
				} `json:"thread_spawn"`
			} `json:"subagent"`
		}
		if json.Unmarshal(p.Source, &src) == nil {
			parent = src.Subagent.ThreadSpawn.ParentThreadID
		}
	}
	if parent != "" {
		res.Session.ParentSession = parent
		res.Session.IsSubagent = true
	}
	if p.ForkedFromID != "" {
		res.Session.ForkOrigin = p.ForkedFromID
	}
}

func (Codex) model(role string, res *Result) string {
	if role == "assistant" {
		return res.Session.Model
	}
	return ""
}

func cxInjected(text string) bool {
	for _, p := range cxContextPrefixes {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return false
}

func cxStatus(s string) string {
	switch s {
	case "completed":
		return StatusOK
	case "failed", "incomplete":
		return StatusError
	}
	return StatusPending
}

// cxChild is the thread a spawn_agent output names ({"agent_id": ...}).
func cxChild(out string) string {
	if !strings.HasPrefix(out, "{") || !strings.Contains(out, `"agent_id"`) {
		return ""
	}
	var v struct {
		AgentID string `json:"agent_id"`
	}
	if json.Unmarshal([]byte(out), &v) != nil {
		return ""
	}
	return v.AgentID
}

// cxOutputText is the readable text of a call's output: a string as it is, the text items of
// a content array ([{"type":"input_text","text":...}], what an MCP call returns) joined by
// lines, anything else as its JSON.
func cxOutputText(raw json.RawMessage) string {
	raw = json.RawMessage(bytes.TrimSpace(raw))
	if len(raw) == 0 || raw[0] != '[' {
		return rawText(raw)
	}
	var items []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &items) != nil {
		return rawText(raw)
	}
	var text []string
	for _, it := range items {
		if it.Text != "" {
			text = append(text, it.Text)
		}
	}
	if len(text) == 0 {
		return rawText(raw)
	}
	return strings.Join(text, "\n")
}

// rawText is a JSON string's value, or the raw JSON of anything else (arguments objects,
// structured outputs).
func rawText(raw json.RawMessage) string {
	if s, ok := jsonString(raw); ok {
		return s
	}
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	return string(raw)
}

var cxUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// cxIDFromName is the thread id at the end of a rollout's name, for a parse that starts after
// the session_meta line.
func cxIDFromName(path string) string {
	return cxUUID.FindString(stem(path))
}
