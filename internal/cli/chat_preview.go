package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/transcript"
)

// previewLen bounds the one-line text previews of `chat tree`.
const previewLen = 72

// block is the union of the content block shapes of pi agent messages.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	MimeType  string          `json:"mimeType"`
	Data      string          `json:"data"`
	Redacted  bool            `json:"redacted"`
}

// agentMessage is the union of the agent message shapes (FORMATS.md §1) the CLI renders.
type agentMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	IsError      bool            `json:"isError"`
	Command      string          `json:"command"`
	Output       string          `json:"output"`
	ExitCode     *int            `json:"exitCode"`
	CustomType   string          `json:"customType"`
	Summary      string          `json:"summary"`
	Provider     string          `json:"provider"`
	Model        string          `json:"model"`
	StopReason   string          `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	Usage        *usage          `json:"usage"`
}

// usage is an assistant message's token usage. Old files lack totalTokens: the parts are summed.
type usage struct {
	Input       int64 `json:"input"`
	Output      int64 `json:"output"`
	CacheRead   int64 `json:"cacheRead"`
	CacheWrite  int64 `json:"cacheWrite"`
	TotalTokens int64 `json:"totalTokens"`
	Cost        struct {
		Total float64 `json:"total"`
	} `json:"cost"`
}

func (u usage) total() int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.Input + u.Output + u.CacheRead + u.CacheWrite
}

// decodeMessage decodes an agent message; a malformed one yields its zero value, as the reader
// tolerates wrongly typed fields.
func decodeMessage(raw json.RawMessage) agentMessage {
	var m agentMessage
	_ = json.Unmarshal(raw, &m)
	return m
}

// contentBlocks returns a content value as blocks: a plain string becomes one text block.
func contentBlocks(raw json.RawMessage) []block {
	if len(raw) == 0 {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return []block{{Type: "text", Text: s}}
		}
		return nil
	}
	var bs []block
	if json.Unmarshal(raw, &bs) != nil {
		return nil
	}
	return bs
}

// firstText returns the first non-empty text of the blocks.
func firstText(bs []block) string {
	for _, b := range bs {
		if b.Type == "text" && strings.TrimSpace(b.Text) != "" {
			return b.Text
		}
	}
	return ""
}

// oneLine squeezes white space (newlines included) and control characters to single spaces and
// cuts s to at most n runes, so a preview never breaks a table row or a terminal.
func oneLine(s string, n int) string {
	// Only the head can show; tool results may be megabytes long.
	if len(s) > 8*n {
		s = s[:8*n]
	}
	s = strings.ToValidUTF8(s, "")
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// preview is the short text shown for an entry in `chat tree`; e must be a full entry.
func preview(e *transcript.Entry) string {
	switch e.Type {
	case "message":
		return oneLine(messagePreview(decodeMessage(e.Message)), previewLen)
	case "model_change":
		return e.Provider + "/" + e.ModelID
	case "thinking_level_change":
		return e.ThinkingLevel
	case "compaction", "branch_summary":
		return oneLine(e.Summary, previewLen)
	case "custom":
		return e.CustomType
	case "custom_message":
		return oneLine(e.CustomType+": "+firstText(contentBlocks(e.Content)), previewLen)
	case "label":
		if e.Label == nil || *e.Label == "" {
			return e.TargetID + " (cleared)"
		}
		return oneLine(e.TargetID+" = "+*e.Label, previewLen)
	case "session_info":
		if e.Name == nil {
			return "(name cleared)"
		}
		return oneLine(*e.Name, previewLen)
	case "context_edit":
		return "edits " + e.TargetID
	}
	return ""
}

func messagePreview(m agentMessage) string {
	switch m.Role {
	case "user", "custom":
		return firstText(contentBlocks(m.Content))
	case "assistant":
		bs := contentBlocks(m.Content)
		if t := firstText(bs); t != "" {
			return t
		}
		var calls []string
		for _, b := range bs {
			if b.Type == "toolCall" {
				calls = append(calls, b.Name)
			}
		}
		if len(calls) > 0 {
			return "[tool call: " + strings.Join(calls, ", ") + "]"
		}
		if m.ErrorMessage != "" {
			return "[" + m.StopReason + ": " + m.ErrorMessage + "]"
		}
		if m.StopReason != "" && m.StopReason != "stop" {
			return "[" + m.StopReason + "]"
		}
		return ""
	case "toolResult":
		t := firstText(contentBlocks(m.Content))
		if m.IsError {
			return fmt.Sprintf("[%s error] %s", m.ToolName, t)
		}
		return fmt.Sprintf("[%s] %s", m.ToolName, t)
	case "bashExecution":
		return "$ " + m.Command
	case "compactionSummary", "branchSummary":
		return m.Summary
	}
	return ""
}
