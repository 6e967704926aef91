package provider

import (
	"fmt"
	"hash/fnv"
	"strconv"
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
//
// Beyond pi: every call is sent with an id no other call of the request has. A reply that gave
// two calls one id, or none (some servers do, and transcripts written before the loop renamed
// them hold such replies), has its results paired with its calls in order (a result answers the
// first unanswered call of its id), and the later calls get ids of their own, on calls and
// results alike. The new ids follow from the messages before them only, so a request's prefix
// stays the same from one turn to the next (prompt caches still match).
func prepare(msgs []Message, t target) ([]Message, error) {
	type call struct {
		orig     string  // the id in the message
		c        Content // as sent
		answered bool
	}
	out := make([]Message, 0, len(msgs))
	var pending []call           // calls of the last assistant message, waiting for results
	skipped := map[string]bool{} // ids of the calls of replies left out
	used := map[string]bool{}    // call ids sent (their call part, see callKey)
	flush := func(ts int64) {
		for _, p := range pending {
			if !p.answered {
				out = append(out, Message{Role: RoleToolResult, ToolCallID: p.c.ID, ToolName: p.c.Name,
					Content: []Content{Text(noResult)}, IsError: true, Timestamp: ts})
			}
		}
		pending = nil
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleUser:
			flush(m.Timestamp)
			out = append(out, m)
		case RoleAssistant:
			flush(m.Timestamp)
			if m.StopReason == StopError || m.StopReason == StopAborted {
				for _, c := range m.Content {
					if c.Type == BlockToolCall {
						skipped[c.ID] = true
					}
				}
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
					orig := c.ID
					c.ID = t.uniqueID(c.ID, used)
					pending = append(pending, call{orig: orig, c: c})
				}
				content = append(content, c)
			}
			m.Content = content
			out = append(out, m)
		case RoleToolResult:
			var p *call
			answered := false
			for j := range pending {
				if pending[j].orig == m.ToolCallID {
					if !pending[j].answered {
						p = &pending[j]
						break
					}
					answered = true
				}
			}
			if p == nil {
				if skipped[m.ToolCallID] {
					continue
				}
				what := "has no tool call before it"
				if answered {
					what = "answers a call that already has a result"
				}
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "message %d: tool result for call %q %s", i, m.ToolCallID, what)
			}
			p.answered = true
			m.ToolCallID = p.c.ID
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

// uniqueID maps a call's id to what the API accepts and, when that is empty or taken by an
// earlier call of the request, to a new one: its call part (or "call") and a number, the first
// free one. used holds the call parts taken.
func (t target) uniqueID(id string, used map[string]bool) string {
	if t.callID != nil {
		id = t.callID(id)
	}
	key := callKey(id)
	if key == "" || used[key] {
		base := key
		if base == "" {
			base = "call"
		}
		for n := 2; ; n++ {
			id = base + "_" + strconv.Itoa(n)
			if t.callID != nil {
				id = t.callID(id)
			}
			if key = callKey(id); !used[key] {
				break
			}
		}
	}
	used[key] = true
	return id
}

// callKey is the part of a call id its result pairs with: a Responses id is "call_id|item_id".
func callKey(id string) string {
	k, _, _ := strings.Cut(id, "|")
	return k
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
