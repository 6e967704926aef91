package provider

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Roles of a Message.
const (
	RoleUser       = "user"
	RoleAssistant  = "assistant"
	RoleToolResult = "toolResult"
)

// Content block types.
const (
	BlockText     = "text"
	BlockThinking = "thinking"
	BlockToolCall = "toolCall"
	BlockImage    = "image"
)

// StopReason is why a reply ended, with pi's values so an assistant message is written to the
// transcript as it is.
type StopReason string

// Stop reasons, normalized over the providers.
const (
	// StopEndTurn: the model finished its answer (OpenAI stop, Anthropic end_turn and
	// stop_sequence, Responses completed).
	StopEndTurn StopReason = "stop"
	// StopToolUse: the model wants tool results (tool_calls, tool_use, function calls).
	StopToolUse StopReason = "toolUse"
	// StopMaxTokens: the reply hit the output limit (length, max_tokens, incomplete).
	StopMaxTokens StopReason = "length"
	// StopError: the provider failed or refused mid-reply; Stream.Err says why.
	StopError StopReason = "error"
	// StopAborted: the caller cancelled.
	StopAborted StopReason = "aborted"
)

// Message is an agent message of pi's model (docs/conversations.md, The transcript): user,
// assistant or toolResult. It marshals to exactly pi's shape for its role, and unmarshals a
// transcript message (a user content given as a string becomes one text block).
type Message struct {
	Role    string
	Content []Content

	// Assistant messages.
	API          string // openai-completions, openai-responses or anthropic-messages
	Provider     string // the backend's name
	Model        string
	ResponseID   string
	Usage        Usage
	StopReason   StopReason
	ErrorMessage string

	// Tool results.
	ToolCallID string
	ToolName   string
	IsError    bool
	Details    json.RawMessage

	// Timestamp is Unix milliseconds.
	Timestamp int64
}

// Content is one content block. Type says which fields belong to it: text (Text,
// TextSignature), thinking (Thinking, ThinkingSignature, Redacted), toolCall (ID, Name,
// Arguments, ThoughtSignature), image (Data in base64, MimeType).
type Content struct {
	Type string

	Text          string
	TextSignature string

	Thinking string
	// ThinkingSignature is what the provider needs to accept the thinking back: Anthropic's
	// signature (the encrypted data of redacted thinking), the OpenAI Responses API's
	// reasoning item as JSON.
	ThinkingSignature string
	Redacted          bool

	ID               string
	Name             string
	Arguments        json.RawMessage
	ThoughtSignature string
	// ArgumentsTruncated marks a call whose arguments were too large to keep: Arguments is
	// then {}, and the call was refused without running.
	ArgumentsTruncated *TruncatedArguments

	Data     string
	MimeType string
}

// TruncatedArguments is what is kept of tool call arguments past Request.MaxToolArguments: their
// size, the limit and their first bytes (a nexus addition to pi's toolCall block, which pi
// readers ignore).
type TruncatedArguments struct {
	Bytes  int    `json:"bytes"`
	Limit  int    `json:"limit"`
	Prefix string `json:"prefix"`
}

// truncatedPrefix is how much of oversized arguments is kept, to show what the call was.
const truncatedPrefix = 256

// Refusal is the error result the model gets for the call: the size and the limit, never the
// arguments.
func (t *TruncatedArguments) Refusal() string {
	return fmt.Sprintf("the call was not run: its arguments were %d bytes (%s), more than the %d bytes (%s) a call may send, and were not kept. Send less in one call.",
		t.Bytes, mib(t.Bytes), t.Limit, mib(t.Limit))
}

func mib(n int) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

// Usage is token usage, pi's shape plus reasoning tokens. Input excludes the cached tokens
// (CacheRead), as pi counts it; Output includes Reasoning.
type Usage struct {
	Input       int `json:"input"`
	Output      int `json:"output"`
	CacheRead   int `json:"cacheRead"`
	CacheWrite  int `json:"cacheWrite"`
	TotalTokens int `json:"totalTokens"`
	// Reasoning is the part of Output spent thinking, when the provider says (a nexus
	// addition pi readers ignore).
	Reasoning int  `json:"reasoning,omitempty"`
	Cost      Cost `json:"cost"`
}

// Cost is pi's cost in USD; nexus knows no prices, so it stays zero.
type Cost struct {
	Input      float64 `json:"input"`
	Output     float64 `json:"output"`
	CacheRead  float64 `json:"cacheRead"`
	CacheWrite float64 `json:"cacheWrite"`
	Total      float64 `json:"total"`
}

func (u *Usage) total() {
	u.TotalTokens = u.Input + u.Output + u.CacheRead + u.CacheWrite
}

// Text returns a text block.
func Text(s string) Content { return Content{Type: BlockText, Text: s} }

// UserText returns a user message of one text block.
func UserText(s string, timestamp int64) Message {
	return Message{Role: RoleUser, Content: []Content{Text(s)}, Timestamp: timestamp}
}

// ToolCalls returns the toolCall blocks of m.
func (m *Message) ToolCalls() []Content {
	var out []Content
	for _, c := range m.Content {
		if c.Type == BlockToolCall {
			out = append(out, c)
		}
	}
	return out
}

// TextContent returns the text blocks of m joined.
func (m *Message) TextContent() string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == BlockText {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

type textJSON struct {
	Type          string `json:"type"`
	Text          string `json:"text"`
	TextSignature string `json:"textSignature,omitempty"`
}

type thinkingJSON struct {
	Type              string `json:"type"`
	Thinking          string `json:"thinking"`
	ThinkingSignature string `json:"thinkingSignature,omitempty"`
	Redacted          bool   `json:"redacted,omitempty"`
}

type toolCallJSON struct {
	Type             string          `json:"type"`
	ID               string          `json:"id"`
	Name             string          `json:"name"`
	Arguments        json.RawMessage `json:"arguments"`
	ThoughtSignature string          `json:"thoughtSignature,omitempty"`
	// ArgumentsTruncated is a nexus addition (pi ignores it).
	ArgumentsTruncated *TruncatedArguments `json:"argumentsTruncated,omitempty"`
}

type imageJSON struct {
	Type     string `json:"type"`
	Data     string `json:"data"`
	MimeType string `json:"mimeType"`
}

// contentJSON reads any block.
type contentJSON struct {
	Type               string              `json:"type"`
	Text               string              `json:"text,omitempty"`
	TextSignature      string              `json:"textSignature,omitempty"`
	Thinking           string              `json:"thinking,omitempty"`
	ThinkingSignature  string              `json:"thinkingSignature,omitempty"`
	Redacted           bool                `json:"redacted,omitempty"`
	ID                 string              `json:"id,omitempty"`
	Name               string              `json:"name,omitempty"`
	Arguments          json.RawMessage     `json:"arguments,omitempty"`
	ThoughtSignature   string              `json:"thoughtSignature,omitempty"`
	ArgumentsTruncated *TruncatedArguments `json:"argumentsTruncated,omitempty"`
	Data               string              `json:"data,omitempty"`
	MimeType           string              `json:"mimeType,omitempty"`
}

// MarshalJSON writes pi's shape of the block's type.
func (c Content) MarshalJSON() ([]byte, error) {
	switch c.Type {
	case BlockText:
		return json.Marshal(textJSON{c.Type, c.Text, c.TextSignature})
	case BlockThinking:
		return json.Marshal(thinkingJSON{c.Type, c.Thinking, c.ThinkingSignature, c.Redacted})
	case BlockToolCall:
		args := c.Arguments
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		return json.Marshal(toolCallJSON{c.Type, c.ID, c.Name, args, c.ThoughtSignature, c.ArgumentsTruncated})
	case BlockImage:
		return json.Marshal(imageJSON{c.Type, c.Data, c.MimeType})
	}
	return json.Marshal(contentJSON(c))
}

// UnmarshalJSON reads a block of any type.
func (c *Content) UnmarshalJSON(b []byte) error {
	var v contentJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("content block: %w", err)
	}
	*c = Content(v)
	return nil
}

type userJSON struct {
	Role      string    `json:"role"`
	Content   []Content `json:"content"`
	Timestamp int64     `json:"timestamp"`
}

type assistantJSON struct {
	Role         string     `json:"role"`
	Content      []Content  `json:"content"`
	API          string     `json:"api"`
	Provider     string     `json:"provider"`
	Model        string     `json:"model"`
	ResponseID   string     `json:"responseId,omitempty"`
	Usage        Usage      `json:"usage"`
	StopReason   StopReason `json:"stopReason"`
	ErrorMessage string     `json:"errorMessage,omitempty"`
	Timestamp    int64      `json:"timestamp"`
}

type toolResultJSON struct {
	Role       string          `json:"role"`
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Content    []Content       `json:"content"`
	Details    json.RawMessage `json:"details,omitempty"`
	IsError    bool            `json:"isError"`
	Timestamp  int64           `json:"timestamp"`
}

// MarshalJSON writes pi's shape of the message's role.
func (m Message) MarshalJSON() ([]byte, error) {
	content := m.Content
	if content == nil {
		content = []Content{}
	}
	switch m.Role {
	case RoleAssistant:
		return json.Marshal(assistantJSON{m.Role, content, m.API, m.Provider, m.Model, m.ResponseID, m.Usage, m.StopReason, m.ErrorMessage, m.Timestamp})
	case RoleToolResult:
		return json.Marshal(toolResultJSON{m.Role, m.ToolCallID, m.ToolName, content, m.Details, m.IsError, m.Timestamp})
	}
	return json.Marshal(userJSON{m.Role, content, m.Timestamp})
}

type messageJSON struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	API          string          `json:"api"`
	Provider     string          `json:"provider"`
	Model        string          `json:"model"`
	ResponseID   string          `json:"responseId"`
	Usage        *Usage          `json:"usage"`
	StopReason   StopReason      `json:"stopReason"`
	ErrorMessage string          `json:"errorMessage"`
	ToolCallID   string          `json:"toolCallId"`
	ToolName     string          `json:"toolName"`
	IsError      bool            `json:"isError"`
	Details      json.RawMessage `json:"details"`
	Timestamp    json.Number     `json:"timestamp"`
}

// UnmarshalJSON reads a message of any role; content may be a string or blocks.
func (m *Message) UnmarshalJSON(b []byte) error {
	var v messageJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("message: %w", err)
	}
	content, err := decodeContent(v.Content)
	if err != nil {
		return err
	}
	*m = Message{
		Role: v.Role, Content: content, API: v.API, Provider: v.Provider, Model: v.Model,
		ResponseID: v.ResponseID, StopReason: v.StopReason, ErrorMessage: v.ErrorMessage,
		ToolCallID: v.ToolCallID, ToolName: v.ToolName, IsError: v.IsError, Details: v.Details,
	}
	if v.Usage != nil {
		m.Usage = *v.Usage
	}
	if f, err := strconv.ParseFloat(string(v.Timestamp), 64); err == nil {
		m.Timestamp = int64(f)
	}
	return nil
}

// decodeContent reads a content value: a string is one text block, null or absent none.
func decodeContent(raw json.RawMessage) ([]Content, error) {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return nil, nil
	case s[0] == '"':
		var t string
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("message content: %w", err)
		}
		return []Content{Text(t)}, nil
	}
	var out []Content
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("message content: %w", err)
	}
	return out, nil
}

// FromContext converts the messages of a transcript context (transcript.Context.Messages) to
// what a model is sent, as pi's convertToLlm does: user, assistant and toolResult messages as
// they are; custom messages and shell executions (bashExecution) as user text; compaction and
// branch summaries as user text in pi's wrappers. Other roles are left out. A message that is
// not valid JSON is an INVALID_ARGUMENT error naming its position.
func FromContext(raw []json.RawMessage) ([]Message, error) {
	out := make([]Message, 0, len(raw))
	for i, r := range raw {
		var head struct {
			Role               string          `json:"role"`
			Content            json.RawMessage `json:"content"`
			Summary            string          `json:"summary"`
			Command            string          `json:"command"`
			Output             string          `json:"output"`
			ExitCode           *int            `json:"exitCode"`
			Cancelled          bool            `json:"cancelled"`
			Truncated          bool            `json:"truncated"`
			FullOutputPath     string          `json:"fullOutputPath"`
			ExcludeFromContext bool            `json:"excludeFromContext"`
			Timestamp          json.Number     `json:"timestamp"`
		}
		if err := json.Unmarshal(r, &head); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "context message %d: %v", i, err)
		}
		ts, _ := strconv.ParseFloat(string(head.Timestamp), 64)
		var text string
		switch head.Role {
		case RoleUser, RoleAssistant, RoleToolResult:
			var m Message
			if err := json.Unmarshal(r, &m); err != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "context message %d: %v", i, err)
			}
			out = append(out, m)
			continue
		case "custom":
			content, err := decodeContent(head.Content)
			if err != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "context message %d: %v", i, err)
			}
			out = append(out, Message{Role: RoleUser, Content: content, Timestamp: int64(ts)})
			continue
		case "bashExecution":
			if head.ExcludeFromContext {
				continue
			}
			text = bashExecutionText(head.Command, head.Output, head.ExitCode, head.Cancelled, head.Truncated, head.FullOutputPath)
		case "branchSummary":
			text = transcript.BranchSummaryPrefix + head.Summary + transcript.BranchSummarySuffix
		case "compactionSummary":
			text = transcript.CompactionSummaryPrefix + head.Summary + transcript.CompactionSummarySuffix
		default:
			continue
		}
		out = append(out, UserText(text, int64(ts)))
	}
	return out, nil
}

// bashExecutionText is how pi shows a shell execution to the model.
func bashExecutionText(command, output string, exitCode *int, cancelled, truncated bool, fullOutputPath string) string {
	var b strings.Builder
	b.WriteString("Ran `" + command + "`\n")
	if output != "" {
		b.WriteString("```\n" + output + "\n```")
	} else {
		b.WriteString("(no output)")
	}
	switch {
	case cancelled:
		b.WriteString("\n\n(command cancelled)")
	case exitCode != nil && *exitCode != 0:
		b.WriteString("\n\nCommand exited with code " + strconv.Itoa(*exitCode))
	}
	if truncated && fullOutputPath != "" {
		b.WriteString("\n\n[Output truncated. Full output: " + fullOutputPath + "]")
	}
	return b.String()
}
