package source

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ClaudeCode reads Claude Code's transcripts: ~/.claude/projects/<cwd with / as ->/<id>.jsonl,
// subagents in <id>/subagents/agent-*.jsonl (older: agent-*.jsonl beside the sessions).
// CLAUDE_CONFIG_DIR moves ~/.claude.
type ClaudeCode struct{}

// Name implements Source.
func (ClaudeCode) Name() string { return "claude-code" }

// DefaultRoots implements Source.
func (ClaudeCode) DefaultRoots(env Env) []string {
	if dir := env.get("CLAUDE_CONFIG_DIR"); dir != "" {
		return []string{filepath.Join(dir, "projects")}
	}
	return []string{filepath.Join(env.Home, ".claude", "projects")}
}

// Discover implements Source.
func (ClaudeCode) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(_, name string) bool { return strings.HasSuffix(name, ".jsonl") })
}

type ccLine struct {
	Type        string     `json:"type"`
	UUID        string     `json:"uuid"`
	SessionID   string     `json:"sessionId"`
	Cwd         string     `json:"cwd"`
	Timestamp   string     `json:"timestamp"`
	IsSidechain bool       `json:"isSidechain"`
	IsMeta      bool       `json:"isMeta"`
	RequestID   string     `json:"requestId"`
	Summary     string     `json:"summary"`
	AITitle     string     `json:"aiTitle"`
	CustomTitle string     `json:"customTitle"`
	Message     *ccMessage `json:"message"`
	// ToolUseResult is the tool's own account of a result; a Task result names the subagent
	// it ran (agentId), whose transcript is agent-<agentId>.jsonl.
	ToolUseResult ccToolUseResult `json:"toolUseResult"`
}

type ccToolUseResult struct{ AgentID string }

// UnmarshalJSON reads agentId from an object and ignores anything else: the field is a string
// in some versions and often holds whole files, so it is decoded only when it names an agent.
func (r *ccToolUseResult) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' || !bytes.Contains(b, []byte(`"agentId"`)) {
		return nil
	}
	var v struct {
		AgentID string `json:"agentId"`
	}
	if json.Unmarshal(b, &v) == nil {
		r.AgentID = v.AgentID
	}
	return nil
}

type ccMessage struct {
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Model   string          `json:"model"`
	Content json.RawMessage `json:"content"`
	Usage   *ccUsage        `json:"usage"`
}

type ccUsage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
}

type ccBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// ccKnown are the line types Claude Code writes that carry no message of their own.
var ccKnown = map[string]bool{
	"system": true, "attachment": true, "file-history-snapshot": true, "permission-mode": true,
	"last-prompt": true, "progress": true, "queue-operation": true, "tag": true,
	"agent-name": true, "pr-link": true, "mode": true, "worktree-state": true,
}

// Title sources, weakest first: a later line of a stronger kind wins.
const (
	titleNone = iota
	titleSummary
	titleAI
	titleCustom
)

// Parse implements Source. The lines of one streamed reply share message.id and are merged
// into one Message; its usage is the last snapshot per message.id and requestId (each line
// repeats the running figure, so adding them up counts a reply several times).
func (c ClaudeCode) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res := &Result{Session: Session{Source: c.Name(), Path: path}}
	pair := newPairing(res)
	replies := map[string]int{}           // message.id -> index in res.Messages
	usage := map[int]map[string]ccUsage{} // message index -> requestId -> last snapshot
	titleRank := titleNone
	if st, ok := stateOf(r).(ccState); ok {
		res.Session.Title, titleRank = st.title, st.titleRank
	}
	turn := 0
	name := stem(path)
	if strings.HasPrefix(name, "agent-") {
		res.Session.ID = name
		res.Session.IsSubagent = true
		// 2.1 writes beside each sidechain the call that spawned it, which may be in another
		// sidechain (a subagent's subagent): the index links the two by that call's id.
		res.Session.ToolCallID = ccSpawnCall(path)
	}
	err := lines(ctx, r, offset, res, func(line []byte, start int64) {
		var l ccLine
		if !decodeObject(line, &l, res) {
			return
		}
		ts := parseTime(l.Timestamp)
		if reason := c.invalid(&l, ts); reason != "" {
			res.skip(reason)
			return
		}
		res.seen(ts)
		if l.SessionID != "" {
			switch {
			case res.Session.IsSubagent:
				// A subagent's lines carry the session that started it.
				res.Session.ParentSession = l.SessionID
			case res.Session.ID == "":
				res.Session.ID = l.SessionID
			}
		}
		if l.Cwd != "" {
			res.Session.Project = l.Cwd
		}
		if l.IsSidechain {
			res.Session.IsSubagent = true
		}
		switch l.Type {
		case "user":
			text := c.userLine(l.Message.Content, l.ToolUseResult.AgentID, pair)
			if text == "" {
				return
			}
			injected := l.IsMeta || ccInjected(text)
			if !injected {
				turn++
			}
			res.Messages = append(res.Messages, Message{ID: l.UUID, Role: "user", Text: text,
				Timestamp: ts, Seq: len(res.Messages), Turn: turn, Context: injected})
		case "assistant":
			m := l.Message
			if m.Model != "" && m.Model != "<synthetic>" {
				res.Session.Model = m.Model
			}
			id := m.ID
			if id == "" {
				id = l.UUID
			}
			i, ok := replies[id]
			if !ok {
				i = len(res.Messages)
				replies[id] = i
				res.Messages = append(res.Messages, Message{ID: id, Role: "assistant",
					Timestamp: ts, Seq: i, Turn: turn})
			}
			msg := &res.Messages[i]
			if m.Model != "" {
				msg.Model = m.Model
			}
			res.appendText(msg, c.assistantLine(m.Content, id, pair))
			if m.Usage != nil {
				if usage[i] == nil {
					usage[i] = map[string]ccUsage{}
				}
				usage[i][l.RequestID] = *m.Usage
			}
		case "summary":
			if titleRank <= titleSummary && l.Summary != "" {
				res.Session.Title, titleRank = l.Summary, titleSummary
			}
		case "ai-title":
			if titleRank <= titleAI && l.AITitle != "" {
				res.Session.Title, titleRank = l.AITitle, titleAI
			}
		case "custom-title":
			if l.CustomTitle != "" {
				res.Session.Title, titleRank = l.CustomTitle, titleCustom
			}
		default:
			if !ccKnown[l.Type] {
				res.unknown(l.Type)
			}
		}
	})
	if err != nil {
		return res, fmt.Errorf("claude-code: %s: %w", path, err)
	}
	if res.Session.ID == "" {
		res.Session.ID = name
	}
	if dir := filepath.Dir(path); res.Session.IsSubagent && res.Session.ParentSession == "" && filepath.Base(dir) == "subagents" {
		// <session>/subagents/agent-*.jsonl: the directory names the parent.
		res.Session.ParentSession = filepath.Base(filepath.Dir(dir))
	}
	for i, byReq := range usage {
		var u Usage
		for _, s := range byReq {
			u = u.Add(Usage{Input: s.Input, Output: s.Output, CacheRead: s.CacheRead, CacheWrite: s.CacheWrite})
		}
		res.Messages[i].Usage = u
	}
	for _, m := range res.Messages {
		res.Usage = res.Usage.Add(m.Usage)
	}
	res.state = ccState{title: res.Session.Title, titleRank: titleRank}
	return res, nil
}

// ccState is what the parse of a transcript's next piece continues from: the title so far and
// the kind of line it came from (a later line of a weaker kind does not replace it).
type ccState struct {
	title     string
	titleRank int
}

// ccInjectedPrefixes start the user lines Claude Code writes itself without marking them meta
// (older versions): notices and the output of local commands, which no one typed.
var ccInjectedPrefixes = []string{"Caveat: The messages below were generated by the user while running local commands",
	"Update available!", "<local-command-stdout>", "<local-command-stderr>", "<system-reminder>",
	"[Request interrupted by user"}

func ccInjected(text string) bool {
	for _, p := range ccInjectedPrefixes {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return false
}

// ccMetaMax bounds the sidechain metadata read: a few hundred bytes in practice.
const ccMetaMax = 64 << 10

// ccSpawnCall is the id of the call that spawned the subagent whose sidechain is at path, from
// agent-<id>.meta.json beside it (Claude Code 2.1: {agentType, description, toolUseId,
// spawnDepth}); "" when there is none. A symlink or anything but a small regular file is not
// read.
func ccSpawnCall(path string) string {
	meta := strings.TrimSuffix(path, ".jsonl") + ".meta.json"
	fi, err := os.Lstat(meta) //nolint:gosec // beside a transcript Discover found, not a path from input
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > ccMetaMax {
		return ""
	}
	b, err := os.ReadFile(meta) //nolint:gosec // beside a transcript Discover found
	if err != nil {
		return ""
	}
	var m struct {
		ToolUseID string `json:"toolUseId"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	return m.ToolUseID
}

// invalid says why a user or assistant line cannot be read (every one Claude Code writes has
// its time, its uuid and a message with a content), or "".
func (ClaudeCode) invalid(l *ccLine, ts time.Time) string {
	if l.Type != "user" && l.Type != "assistant" {
		return ""
	}
	switch {
	case l.Message == nil || !isContent(l.Message.Content):
		return ReasonMalformed
	case ts.IsZero():
		return ReasonNoTimestamp
	case l.UUID == "":
		return ReasonNoID
	}
	return ""
}

// userLine returns the text of a user line and pairs its tool results with their calls; a
// result that ran a subagent links its call to the subagent's session.
func (ClaudeCode) userLine(content json.RawMessage, agentID string, pair *pairing) string {
	return ccText(content, func(b *ccBlock) {
		if b.Type == "tool_result" {
			tc := pair.result(b.ToolUseID, blockText(b.Content), b.IsError)
			if tc != nil && agentID != "" {
				tc.ChildSession = "agent-" + agentID
			}
		}
	})
}

// assistantLine returns the text of an assistant line and records its tool calls.
func (ClaudeCode) assistantLine(content json.RawMessage, msgID string, pair *pairing) string {
	return ccText(content, func(b *ccBlock) {
		if b.Type == "tool_use" || b.Type == "server_tool_use" {
			pair.call(ToolCall{ID: b.ID, Name: b.Name, Params: string(b.Input), MessageID: msgID})
		}
	})
}

// ccText returns the text of a message content (a string, or its text blocks joined) and hands
// every other block to other.
func ccText(content json.RawMessage, other func(*ccBlock)) string {
	if s, ok := jsonString(content); ok {
		return s
	}
	var blocks []ccBlock
	if json.Unmarshal(content, &blocks) != nil {
		return ""
	}
	var text []string
	for i := range blocks {
		b := &blocks[i]
		if b.Type != "text" {
			other(b)
		} else if b.Text != "" {
			text = append(text, b.Text)
		}
	}
	return strings.Join(text, "\n")
}

// jsonString decodes raw when it is a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// blockText is the text of a content that is a string or text blocks (images and other
// blocks left out).
func blockText(raw json.RawMessage) string {
	if s, ok := jsonString(raw); ok {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	var text []string
	for _, b := range blocks {
		if b.Type == "text" && b.Text != "" {
			text = append(text, b.Text)
		}
	}
	return strings.Join(text, "\n")
}
