package transcript

import (
	"encoding/json"
	"fmt"
)

// PairingProblem is one violation of tool-call/result pairing in a context.
type PairingProblem struct {
	// Index is the position in the message list of the offending message.
	Index      int
	ToolCallID string
	// Kind is "unanswered" (a call without result), "duplicate" (a second
	// result for one call) or "orphan" (a result without its call).
	Kind string
}

func (p PairingProblem) String() string {
	return fmt.Sprintf("message %d: tool call %q %s", p.Index, p.ToolCallID, p.Kind)
}

// CheckToolPairing checks that every toolCall block of an assistant message
// has exactly one toolResult (matched by toolCallId) and that no toolResult
// lacks its call (a result must follow its call). It returns nil when the
// messages can be sent to a provider.
//
// Calls that share an id (two in one reply, as some servers send, or one id
// in two replies) are answered in order: a result answers the first
// unanswered call of its id in the latest assistant message that has one,
// as the provider's request builder pairs them (and renames them apart).
func CheckToolPairing(messages []json.RawMessage) []PairingProblem {
	type call struct {
		id       string
		index    int
		answered bool
	}
	var calls []*call // in order
	var problems []PairingProblem
	for i, raw := range messages {
		var m struct {
			Role       string          `json:"role"`
			ToolCallID string          `json:"toolCallId"`
			Content    json.RawMessage `json:"content"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		switch m.Role {
		case "assistant":
			var blocks []struct {
				Type string `json:"type"`
				ID   string `json:"id"`
			}
			if json.Unmarshal(m.Content, &blocks) != nil {
				continue
			}
			for _, b := range blocks {
				if b.Type == "toolCall" {
					calls = append(calls, &call{id: b.ID, index: i})
				}
			}
		case "toolResult":
			var open *call
			latest := -1 // the latest assistant message with a call of this id
			for j := len(calls) - 1; j >= 0; j-- {
				c := calls[j]
				if latest >= 0 && c.index != latest {
					break
				}
				if c.id != m.ToolCallID {
					continue
				}
				latest = c.index
				if !c.answered {
					open = c // the earliest unanswered so far
				}
			}
			switch {
			case open != nil:
				open.answered = true
			case latest >= 0:
				problems = append(problems, PairingProblem{Index: i, ToolCallID: m.ToolCallID, Kind: "duplicate"})
			default:
				problems = append(problems, PairingProblem{Index: i, ToolCallID: m.ToolCallID, Kind: "orphan"})
			}
		}
	}
	for _, c := range calls {
		if !c.answered {
			problems = append(problems, PairingProblem{Index: c.index, ToolCallID: c.id, Kind: "unanswered"})
		}
	}
	return problems
}
