package acpagent

import (
	"encoding/json"
	"os"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/abi"
)

// maxDiffFile bounds a file read to show a whole-file diff; a bigger one shows the edit alone.
const maxDiffFile = 1 << 20

// readLocal reads a file the way the diff wants it: its text, or false when it is missing, too
// big or unreadable (a gateway on another machine: its paths are not ours).
func readLocal(path string) (string, bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxDiffFile {
		return "", false
	}
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path a tool of this conversation edits, read to show its diff
	if err != nil {
		return "", false
	}
	return string(b), true
}

// call is what the mapper remembers of a tool call between its events.
type call struct {
	name    string
	args    toolArgs
	path    string // the edited file, absolute (write_file, edit_file)
	oldText *string
}

// mapper turns one ai-chat session's events into ACP session updates. It is used by one
// goroutine (a prompt's, or a load's replay).
type mapper struct {
	workspace string
	read      func(path string) (string, bool)
	calls     map[string]*call
	order     []string // the calls' ids in the order they came
}

func newMapper(workspace string) *mapper {
	return &mapper{workspace: workspace, read: readLocal, calls: map[string]*call{}}
}

// mapped is what one event means for the prompt.
type mapped struct {
	updates []acp.SessionUpdate
	confirm *abi.AIConfirmation // a confirmation request: ask the editor
	end     *abi.AITurn         // the turn ended
	err     string              // an error event's code and message
}

func (m *mapper) event(e abi.Event) mapped {
	var out mapped
	switch e.Event {
	case abi.EventError:
		var ep abi.ErrorPayload
		if json.Unmarshal(e.Payload, &ep) == nil {
			out.err = string(ep.Error.Code) + ": " + ep.Error.Message
		}
		return out
	case abi.EventData:
	default:
		return out
	}
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(e.Payload, &head) != nil {
		return out
	}
	switch head.Type {
	case abi.PayloadAIToken:
		var t abi.AIToken
		if json.Unmarshal(e.Payload, &t) == nil && t.Content != "" {
			out.updates = append(out.updates, acp.UpdateAgentMessageText(t.Content))
		}
	case abi.PayloadAIReasoning:
		var r abi.AIReasoning
		if json.Unmarshal(e.Payload, &r) == nil && r.Phase == abi.PhaseDelta && r.Content != "" {
			out.updates = append(out.updates, acp.UpdateAgentThoughtText(r.Content))
		}
	case abi.PayloadAITool:
		var t abi.AITool
		if json.Unmarshal(e.Payload, &t) == nil {
			out.updates = append(out.updates, m.tool(t)...)
		}
	case abi.PayloadAIConfirmation:
		var c abi.AIConfirmation
		if json.Unmarshal(e.Payload, &c) == nil {
			out.confirm = &c
		}
	case abi.PayloadAITurn:
		var t abi.AITurn
		if json.Unmarshal(e.Payload, &t) == nil && t.Phase == abi.PhaseEnded {
			out.end = &t
			out.updates = append(out.updates, m.settle(t)...)
		}
	}
	return out
}

// tool maps a tool call's phases: detected is the call (pending, with its kind, title,
// locations and input), started is in_progress, completed is completed or failed with its
// output and, for a file edit, the diff.
func (m *mapper) tool(t abi.AITool) []acp.SessionUpdate {
	id := acp.ToolCallId(t.ToolCallID)
	switch t.Phase {
	case abi.PhaseDetected:
		a := parseArgs(t.Arguments)
		c := &call{name: t.Name, args: a}
		if t.Name == "write_file" || t.Name == "edit_file" {
			c.path = abs(m.workspace, a.Path)
			if old, ok := m.read(c.path); ok {
				c.oldText = &old
			}
		}
		m.calls[t.ToolCallID] = c
		m.order = append(m.order, t.ToolCallID)
		var raw any
		if json.Unmarshal(t.Arguments, &raw) != nil {
			raw = nil
		}
		return []acp.SessionUpdate{acp.StartToolCall(id, toolTitle(t.Name, a),
			acp.WithStartKind(toolKind(t.Name)),
			acp.WithStartStatus(acp.ToolCallStatusPending),
			acp.WithStartLocations(toolLocations(t.Name, a, m.workspace)),
			acp.WithStartRawInput(raw))}
	case abi.PhaseStarted:
		return []acp.SessionUpdate{acp.UpdateToolCall(id, acp.WithUpdateStatus(acp.ToolCallStatusInProgress))}
	case abi.PhaseCompleted:
		status := acp.ToolCallStatusCompleted
		if t.IsError {
			status = acp.ToolCallStatusFailed
		}
		content := []acp.ToolCallContent{}
		if t.Output != "" {
			content = append(content, acp.ToolContent(acp.TextBlock(clipText(t.Output, maxToolText))))
		}
		c := m.calls[t.ToolCallID]
		delete(m.calls, t.ToolCallID)
		if c != nil && !t.IsError {
			if d, ok := m.diff(c); ok {
				content = append(content, d)
			}
		}
		return []acp.SessionUpdate{acp.UpdateToolCall(id, acp.WithUpdateStatus(status), acp.WithUpdateContent(content))}
	}
	return nil
}

// settle ends the calls of a turn that ended without their completion (an interrupt while a
// call waited for its confirmation): an editor shows every call of a finished turn finished.
func (m *mapper) settle(t abi.AITurn) []acp.SessionUpdate {
	var out []acp.SessionUpdate
	why := "not run: the turn ended (" + t.End + ")"
	for _, id := range m.order {
		if _, open := m.calls[id]; !open {
			continue
		}
		delete(m.calls, id)
		out = append(out, acp.UpdateToolCall(acp.ToolCallId(id), acp.WithUpdateStatus(acp.ToolCallStatusFailed),
			acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock(why))})))
	}
	m.order = m.order[:0]
	return out
}

// diff is a file edit's diff: the whole file before and after when this process can read it
// (the gateway is on this machine), else the edit itself (edit_file's old and new strings,
// write_file's content).
func (m *mapper) diff(c *call) (acp.ToolCallContent, bool) {
	switch c.name {
	case "write_file":
		if c.oldText != nil {
			return acp.ToolDiffContent(c.path, c.args.Content, *c.oldText), true
		}
		return acp.ToolDiffContent(c.path, c.args.Content), true
	case "edit_file":
		if now, ok := m.read(c.path); ok && c.oldText != nil {
			return acp.ToolDiffContent(c.path, now, *c.oldText), true
		}
		return acp.ToolDiffContent(c.path, c.args.NewString, c.args.OldString), true
	}
	return acp.ToolCallContent{}, false
}

// history turns one message of a conversation's context (pi's message shape) into the updates
// that replay it: the user's text, the model's text, thinking and tool calls, and the calls'
// results.
func (m *mapper) history(raw json.RawMessage) []acp.SessionUpdate {
	var msg struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"toolCallId"`
		IsError    bool            `json:"isError"`
		Summary    string          `json:"summary"`
	}
	if json.Unmarshal(raw, &msg) != nil {
		return nil
	}
	type block struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	var blocks []block
	var s string
	if json.Unmarshal(msg.Content, &s) == nil {
		blocks = []block{{Type: "text", Text: s}}
	} else {
		_ = json.Unmarshal(msg.Content, &blocks) // content of another shape: nothing to replay
	}
	var out []acp.SessionUpdate
	switch msg.Role {
	case "user":
		for _, b := range blocks {
			if b.Type == "text" && b.Text != "" {
				out = append(out, acp.UpdateUserMessageText(b.Text))
			}
		}
	case "assistant":
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text != "" {
					out = append(out, acp.UpdateAgentMessageText(b.Text))
				}
			case "thinking":
				if b.Thinking != "" {
					out = append(out, acp.UpdateAgentThoughtText(b.Thinking))
				}
			case "toolCall":
				a := parseArgs(b.Arguments)
				var rawIn any
				if json.Unmarshal(b.Arguments, &rawIn) != nil {
					rawIn = nil
				}
				m.calls[b.ID] = &call{name: b.Name, args: a}
				out = append(out, acp.StartToolCall(acp.ToolCallId(b.ID), toolTitle(b.Name, a),
					acp.WithStartKind(toolKind(b.Name)),
					acp.WithStartStatus(acp.ToolCallStatusPending),
					acp.WithStartLocations(toolLocations(b.Name, a, m.workspace)),
					acp.WithStartRawInput(rawIn)))
			}
		}
	case "toolResult":
		text := ""
		for _, b := range blocks {
			if b.Type == "text" {
				text += b.Text
			}
		}
		status := acp.ToolCallStatusCompleted
		if msg.IsError {
			status = acp.ToolCallStatusFailed
		}
		content := []acp.ToolCallContent{}
		if text != "" {
			content = append(content, acp.ToolContent(acp.TextBlock(clipText(text, maxToolText))))
		}
		if c := m.calls[msg.ToolCallID]; c != nil && !msg.IsError {
			delete(m.calls, msg.ToolCallID)
			// The file now may have changed since: the replay shows the edit as the call made it.
			switch c.name {
			case "write_file":
				content = append(content, acp.ToolDiffContent(abs(m.workspace, c.args.Path), c.args.Content))
			case "edit_file":
				content = append(content, acp.ToolDiffContent(abs(m.workspace, c.args.Path), c.args.NewString, c.args.OldString))
			}
		}
		out = append(out, acp.UpdateToolCall(acp.ToolCallId(msg.ToolCallID), acp.WithUpdateStatus(status), acp.WithUpdateContent(content)))
	case "compactionSummary", "branchSummary":
		if msg.Summary != "" {
			out = append(out, acp.UpdateAgentMessageText("[summary of the earlier conversation]\n"+msg.Summary+"\n"))
		}
	}
	return out
}
