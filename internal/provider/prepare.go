package provider

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
)

// noResult is the synthetic result of a tool call the conversation never answered (pi's).
const noResult = "No result provided"

// target is the model a request goes to: a replayed assistant message keeps its thinking
// signatures only when it came from the same one.
type target struct {
	api, provider, model string
	// callID maps a tool call id to one the API accepts ("" keeps it).
	callID func(string) string
}

// prepare returns the messages to send, as pi's transformMessages does: assistant messages
// that ended in error or aborted are left out with the results of their calls; thinking from
// another model becomes text (empty or redacted thinking is dropped); tool call ids are mapped
// to what the API accepts, on calls and results alike; a call left without a result gets a
// synthetic error result before the next user or assistant message. A result whose call is not
// in an earlier assistant message, or a message of another role, is an INVALID_ARGUMENT error.
func prepare(msgs []Message, t target) ([]Message, error) {
	skipped := map[string]bool{}
	for _, m := range msgs {
		if m.Role == RoleAssistant && (m.StopReason == StopError || m.StopReason == StopAborted) {
			for _, c := range m.Content {
				if c.Type == BlockToolCall {
					skipped[c.ID] = true
				}
			}
		}
	}
	out := make([]Message, 0, len(msgs))
	ids := map[string]string{}    // original call id -> id sent
	pending := []Content(nil)     // calls of the last assistant message, ids as sent
	answered := map[string]bool{} // ids as sent
	flush := func(ts int64) {
		for _, c := range pending {
			if !answered[c.ID] {
				out = append(out, Message{Role: RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
					Content: []Content{Text(noResult)}, IsError: true, Timestamp: ts})
			}
		}
		pending = nil
		clear(answered)
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleUser:
			flush(m.Timestamp)
			out = append(out, m)
		case RoleAssistant:
			flush(m.Timestamp)
			if m.StopReason == StopError || m.StopReason == StopAborted {
				continue
			}
			same := m.API == t.api && m.Provider == t.provider && m.Model == t.model
			content := make([]Content, 0, len(m.Content))
			for _, c := range m.Content {
				switch c.Type {
				case BlockThinking:
					switch {
					case c.Redacted:
						if same {
							content = append(content, c)
						}
					case same && c.ThinkingSignature != "":
						content = append(content, c)
					case strings.TrimSpace(c.Thinking) == "":
					case same:
						content = append(content, c)
					default:
						content = append(content, Text(c.Thinking))
					}
					continue
				case BlockText:
					if !same {
						c = Text(c.Text)
					}
				case BlockToolCall:
					if !same {
						c.ThoughtSignature = ""
					}
					if t.callID != nil {
						id := t.callID(c.ID)
						ids[c.ID] = id
						c.ID = id
					}
					pending = append(pending, c)
				}
				content = append(content, c)
			}
			m.Content = content
			out = append(out, m)
		case RoleToolResult:
			if skipped[m.ToolCallID] {
				continue
			}
			id := m.ToolCallID
			if mapped, ok := ids[id]; ok {
				id = mapped
			}
			known := false
			for _, c := range pending {
				if c.ID == id {
					known = true
					break
				}
			}
			if !known || answered[id] {
				what := "has no tool call before it"
				if answered[id] {
					what = "answers a call that already has a result"
				}
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "message %d: tool result for call %q %s", i, m.ToolCallID, what)
			}
			answered[id] = true
			m.ToolCallID = id
			out = append(out, m)
		default:
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "message %d: role %q cannot be sent to a model (convert transcript messages with FromContext)", i, m.Role)
		}
	}
	var last int64
	if len(msgs) > 0 {
		last = msgs[len(msgs)-1].Timestamp
	}
	flush(last)
	return out, nil
}

// shortID returns id when it is at most max characters, all accepted by ok; otherwise the
// accepted characters of its start and a hash of the whole, so two ids never map to one.
func shortID(id string, limit int, ok func(rune) bool) string {
	good := len(id) > 0 && len(id) <= limit
	for _, r := range id {
		if !ok(r) {
			good = false
			break
		}
	}
	if good {
		return id
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	suffix := fmt.Sprintf("_%08x", h.Sum32())
	var b strings.Builder
	for _, r := range id {
		if b.Len() >= limit-len(suffix) {
			break
		}
		if ok(r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + suffix
}

func idChar(r rune) bool {
	return r == '_' || r == '-' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}
