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
func CheckToolPairing(messages []json.RawMessage) []PairingProblem {
	type call struct {
		index    int
		answered bool
	}
	calls := map[string]*call{}
	var order []string
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
				if b.Type != "toolCall" {
					continue
				}
				if _, dup := calls[b.ID]; !dup {
					order = append(order, b.ID)
				}
				calls[b.ID] = &call{index: i}
			}
		case "toolResult":
			c := calls[m.ToolCallID]
			switch {
			case c == nil:
				problems = append(problems, PairingProblem{Index: i, ToolCallID: m.ToolCallID, Kind: "orphan"})
			case c.answered:
				problems = append(problems, PairingProblem{Index: i, ToolCallID: m.ToolCallID, Kind: "duplicate"})
			default:
				c.answered = true
			}
		}
	}
	for _, id := range order {
		if c := calls[id]; !c.answered {
			problems = append(problems, PairingProblem{Index: c.index, ToolCallID: id, Kind: "unanswered"})
		}
	}
	return problems
}
