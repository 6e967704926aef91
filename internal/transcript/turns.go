package transcript

import (
	"encoding/json"
	"errors"
	"fmt"
)

// TurnMarkerType is the customType of the custom entries that record turns
// explicitly (a turn marker). pi keeps custom entries and leaves
// them out of the model context.
const TurnMarkerType = "nexus.turn"

// Turn is one query and response exchange: the query messages
// (user input, custom messages, bash executions) and everything the
// assistant did in answer, tool calls and results included, up to its final
// message. The turn id is the id of that final assistant message.
type Turn struct {
	// ID is the final assistant message's entry id: the last assistant
	// message of the turn ("" when no assistant message answered yet).
	ID           string `json:"id"`
	ParentTurnID string `json:"parentTurnId,omitempty"`
	// QueryIDs are the input entries, several when the user sent more than
	// one message before the reply.
	QueryIDs   []string `json:"queryIds"`
	ResponseID string   `json:"responseId,omitempty"`
	// AssistantIDs are every assistant message of the turn (one per model
	// call), in order.
	AssistantIDs []string `json:"assistantIds"`
	ToolCalls    int      `json:"toolCalls"`
	// ToolCallIDs and ToolNames describe each tool call, in order.
	ToolCallIDs []string `json:"toolCallIds"`
	ToolNames   []string `json:"toolNames"`
	ToolResults int      `json:"toolResults"`
	Provider    string   `json:"provider,omitempty"`
	Model       string   `json:"model,omitempty"`
	StopReason  string   `json:"stopReason,omitempty"`
	// Timestamp is the entry timestamp of the response (of the last entry
	// of the turn while there is none).
	Timestamp    string `json:"timestamp"`
	FirstEntryID string `json:"firstEntryId"`
	LastEntryID  string `json:"lastEntryId"`
	// Complete is true when the final assistant message answered without
	// calling tools and was not aborted or failed.
	Complete bool `json:"complete"`
}

// Turns splits the branch ending at leafID ("" for the default leaf) into
// turns:
//   - consecutive queries before any answer are one turn;
//   - a query while the assistant is running tools (its last message called
//     tools, not aborted or failed) joins the running turn: pi delivers such
//     steering messages with the tool results;
//   - any other query after an assistant message starts a new turn (the
//     previous one, without a final answer, is incomplete);
//   - an assistant message without tool calls ends its turn, unless it
//     failed (stopReason error: pi retries without new input); an aborted
//     one ends it incomplete;
//   - assistant messages or results after a finished turn without new input
//     (a second final message, a retry) extend that turn.
//
// The last turn may be open (Complete false, ID "" if nothing answered yet). Compactions do not change turns: they are computed over the
// whole branch.
func Turns(f *File, leafID string) ([]Turn, error) {
	var (
		turns []Turn
		cur   *Turn
		// running: the last assistant message called tools and the agent
		// loop goes on (their results, then another model call).
		running bool
	)
	open := func(e *Entry, reopen bool) {
		if cur == nil && reopen && len(turns) > 0 {
			// The assistant went on without new input (a second final
			// message, a retry): the previous turn continues.
			cur = &turns[len(turns)-1]
			turns = turns[:len(turns)-1]
			cur.ID, cur.ResponseID, cur.Complete = "", "", false
		}
		if cur == nil {
			cur = &Turn{FirstEntryID: e.ID, QueryIDs: []string{}, AssistantIDs: []string{}, ToolCallIDs: []string{}, ToolNames: []string{}}
		}
		cur.LastEntryID = e.ID
		cur.Timestamp = e.Timestamp
	}
	closeTurn := func(complete bool) {
		if cur == nil {
			return
		}
		if n := len(cur.AssistantIDs); n > 0 {
			cur.ID = cur.AssistantIDs[n-1]
			cur.ResponseID = cur.ID
		}
		cur.Complete = complete
		if n := len(turns); n > 0 {
			cur.ParentTurnID = turns[n-1].ID
		}
		turns = append(turns, *cur)
		cur = nil
		running = false
	}
	path := f.Path(leafID)
	// The assistant messages are read back first, in file batches; only
	// their stop reasons and tool calls are kept.
	var assistants []*Entry
	for _, e := range path {
		if e.Type == "message" && e.Role == "assistant" {
			assistants = append(assistants, e)
		}
	}
	type reply struct {
		stopReason string
		calls      []ToolCallRef
	}
	infos := make([]reply, 0, len(assistants))
	for full, err := range f.FullEntries(assistants) {
		if err != nil {
			return nil, fmt.Errorf("turns: %w", err)
		}
		// A malformed message reads as one without tool calls, as the
		// reader tolerates it.
		m, _ := full.MessageInfo()
		infos = append(infos, reply{m.StopReason, m.ToolCalls})
	}
	for _, e := range path {
		switch {
		case e.Type == "custom_message" || (e.Type == "message" && (e.Role == "user" || e.Role == "bashExecution" || e.Role == "custom")):
			// Input while tools run steers the running turn (pi delivers it
			// with the results); otherwise it starts a new turn.
			if cur != nil && len(cur.AssistantIDs) > 0 && !running {
				closeTurn(false)
			}
			open(e, false)
			cur.QueryIDs = append(cur.QueryIDs, e.ID)
		case e.Type == "message" && e.Role == "assistant":
			m := infos[0]
			infos = infos[1:]
			open(e, true)
			cur.AssistantIDs = append(cur.AssistantIDs, e.ID)
			cur.Provider, cur.Model, cur.StopReason = e.Provider, e.ModelID, m.stopReason
			calls := len(m.calls)
			for _, c := range m.calls {
				cur.ToolCallIDs = append(cur.ToolCallIDs, c.ID)
				cur.ToolNames = append(cur.ToolNames, c.Name)
			}
			cur.ToolCalls += calls
			running = calls > 0 && m.stopReason != "aborted" && m.stopReason != "error"
			// A failed call is retried without new input: the turn goes on.
			if calls == 0 && m.stopReason != "error" {
				closeTurn(m.stopReason != "aborted")
			}
		case e.Type == "message" && e.Role == "toolResult":
			open(e, true)
			cur.ToolResults++
		}
	}
	closeTurn(false)
	return turns, nil
}

// TurnMarker is the data of a nexus.turn custom entry.
type TurnMarker struct {
	Type              string   `json:"type"` // always "turn"
	ID                string   `json:"id"`
	ParentTurnID      string   `json:"parentTurnId,omitempty"`
	QueryMessageIDs   []string `json:"queryMessageIds"`
	ResponseMessageID string   `json:"responseMessageId"`
	// Timestamp is Unix milliseconds.
	Timestamp     int64  `json:"timestamp"`
	ToolCallCount int    `json:"toolCallCount"`
	Model         string `json:"model,omitempty"`
}

// AppendTurnMarker records a finished turn as a custom entry (customType
// nexus.turn) at the leaf. The turn's response must be an entry of the file.
func (w *Writer) AppendTurnMarker(t Turn) (string, error) {
	if t.ID == "" {
		return "", errors.New("append turn marker: the turn has no response yet")
	}
	ts := w.opts.Now().UnixMilli()
	if ms := unixMillis(t.Timestamp); ms != nil {
		ts = *ms
	}
	queries := t.QueryIDs
	if queries == nil {
		queries = []string{}
	}
	m := TurnMarker{
		Type: "turn", ID: t.ID, ParentTurnID: t.ParentTurnID, QueryMessageIDs: queries,
		ResponseMessageID: t.ID, Timestamp: ts, ToolCallCount: t.ToolCalls, Model: t.Model,
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file.Entry(t.ID) == nil {
		return "", fmt.Errorf("append turn marker %q: %w", t.ID, ErrUnknownEntry)
	}
	return w.appendLocked("custom", []entryField{{"customType", TurnMarkerType}, {"data", m}})
}

// TurnMarkers returns the turn markers of the file, in file order.
func TurnMarkers(f *File) ([]TurnMarker, error) {
	var out []TurnMarker
	for _, e := range f.Entries {
		if e.Type != "custom" || e.CustomType != TurnMarkerType {
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			return nil, fmt.Errorf("turn markers: %w", err)
		}
		var c struct {
			Data TurnMarker `json:"data"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("turn markers: line %d: %w", e.Line, err)
		}
		out = append(out, c.Data)
	}
	return out, nil
}
