package conversation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// TurnWriter is how a turn loop (the ai-chat kind) writes a conversation it holds: the few
// appends a turn makes, the compaction entry and the sessions.json fields, with this
// package's rules applied on the way (a tool result answers an open call of the reply before
// it, at most once; a compaction waits for the calls to be answered and is counted in
// compactionCount), and the reads the loop builds its requests from. *Held implements it.
type TurnWriter interface {
	// Path is the transcript's file, File what it holds so far (appends included), LeafID
	// the entry the next append follows ("" before the first), Context the model's context
	// at the leaf.
	Path() string
	File() *transcript.File
	LeafID() string
	Context() (*transcript.Context, error)

	// AppendMessage appends a message (user, assistant, tool result; any JSON object with a
	// role) with extra top-level entry fields (nil for none). A tool result must answer a
	// call of the last assistant message that is not answered yet (ErrUnpairedResult).
	AppendMessage(msg any, extra map[string]any) (string, error)
	AppendModelChange(provider, model string) (string, error)
	AppendThinkingLevel(level string) (string, error)
	AppendCustom(customType string, data any) (string, error)
	// Compact appends a compaction entry that keeps the last keepTokens of the context and
	// summarizes the rest as summary, and counts it in the entry's compactionCount.
	Compact(ctx context.Context, summary string, keepTokens int, details any) (string, error)
	// Branch moves the leaf to an entry, ResetLeaf before the first: the next append starts
	// a branch there (a rolled-back turn).
	Branch(id string) error
	ResetLeaf()
	// Flush makes what was appended durable.
	Flush() error

	// Patch and PatchFunc merge fields into the conversation's sessions.json entry.
	Patch(ctx context.Context, patch any) error
	PatchFunc(ctx context.Context, fn func(cur chatstore.SessionEntry) (any, error)) error
}

var _ TurnWriter = (*Held)(nil)

// ErrUnpairedResult is the error of a tool result that answers no open call: its call is
// not in the last assistant message, or was answered already.
var ErrUnpairedResult = errors.New("a tool result must answer an unanswered call of the last assistant message")

// pairing tracks the calls of the last assistant message on the writer's branch that are
// not answered yet. It is read from the file when first needed and after the leaf moves.
type pairing struct {
	mu    sync.Mutex
	known bool
	open  []string // call ids, one per unanswered call (ids may repeat)
}

// Path implements TurnWriter: the transcript file.
func (h *Held) Path() string { return h.w.Path() }

// File implements TurnWriter: the transcript as held, appends included.
func (h *Held) File() *transcript.File { return h.w.File() }

// LeafID implements TurnWriter: the entry the next append follows.
func (h *Held) LeafID() string { return h.w.LeafID() }

// Context implements TurnWriter: the model's context at the leaf.
func (h *Held) Context() (*transcript.Context, error) {
	cx, err := h.w.Context()
	if err != nil {
		return nil, fmt.Errorf("context of %s: %w", h.Key, err)
	}
	return cx, nil
}

// AppendMessage implements TurnWriter; a tool result that answers no open call is refused
// (ErrUnpairedResult) and not written.
func (h *Held) AppendMessage(msg any, extra map[string]any) (string, error) {
	raw, err := encodeMessage(msg)
	if err != nil {
		return "", fmt.Errorf("append message: %w", err)
	}
	info, err := transcript.ParseMessageInfo(raw)
	if err != nil {
		return "", fmt.Errorf("append message: %w", err)
	}
	h.pair.mu.Lock()
	defer h.pair.mu.Unlock()
	if info.Role == "toolResult" {
		if err := h.openCallsLocked(); err != nil {
			return "", err
		}
		i := slices.Index(h.pair.open, info.ToolCallID)
		if i < 0 {
			return "", fmt.Errorf("append the result of tool call %q: %w", info.ToolCallID, ErrUnpairedResult)
		}
		h.pair.open = slices.Delete(h.pair.open, i, i+1)
	}
	id, err := h.write(func() (string, error) { return h.w.AppendMessageExtra(raw, extra) })
	if id == "" {
		h.pair.known = false // not written: read the state again from the file
		return "", err       //nolint:wrapcheck // the writer names the transcript
	}
	if info.Role == "assistant" {
		h.pair.open = h.pair.open[:0]
		for _, c := range info.ToolCalls {
			h.pair.open = append(h.pair.open, c.ID)
		}
		h.pair.known = true
	}
	return id, err //nolint:wrapcheck // written, but its sync failed: the writer's error
}

// encodeMessage encodes msg as the transcript writer would (no HTML escaping), once: the
// rules read it and the writer takes it as it is.
func encodeMessage(msg any) (json.RawMessage, error) {
	if raw, ok := msg.(json.RawMessage); ok {
		return raw, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(msg); err != nil {
		return nil, err //nolint:wrapcheck // the caller says what it was appending
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// openCallsLocked reads the open calls from the branch when they are not known: the calls of
// the last assistant message on it, less the results that follow it.
func (h *Held) openCallsLocked() error {
	if h.pair.known {
		return nil
	}
	f := h.w.File()
	var answered []string
	h.pair.open = h.pair.open[:0]
	path := f.Path(h.w.LeafID())
	for i := len(path) - 1; i >= 0; i-- {
		e := path[i]
		if e.Type != "message" || (e.Role != "assistant" && e.Role != "toolResult") {
			continue
		}
		full, err := f.Full(e)
		if err != nil {
			return fmt.Errorf("read %s: %w", h.w.Path(), err)
		}
		info, err := full.MessageInfo()
		if err != nil {
			return fmt.Errorf("read %s: %w", h.w.Path(), err)
		}
		if e.Role == "toolResult" {
			answered = append(answered, info.ToolCallID)
			continue
		}
		for _, c := range info.ToolCalls {
			if j := slices.Index(answered, c.ID); j >= 0 {
				answered = slices.Delete(answered, j, j+1)
				continue
			}
			h.pair.open = append(h.pair.open, c.ID)
		}
		break
	}
	h.pair.known = true
	return nil
}

// AppendModelChange implements TurnWriter.
func (h *Held) AppendModelChange(provider, model string) (string, error) {
	return h.write(func() (string, error) { return h.w.AppendModelChange(provider, model) }) //nolint:wrapcheck // the writer names the transcript
}

// AppendThinkingLevel implements TurnWriter.
func (h *Held) AppendThinkingLevel(level string) (string, error) {
	return h.write(func() (string, error) { return h.w.AppendThinkingLevel(level) }) //nolint:wrapcheck // the writer names the transcript
}

// AppendCustom implements TurnWriter.
func (h *Held) AppendCustom(customType string, data any) (string, error) {
	return h.write(func() (string, error) { return h.w.AppendCustom(customType, data) }) //nolint:wrapcheck // the writer names the transcript
}

// Compact implements TurnWriter: transcript.Compact (ErrToolCallPending while a call is
// open), then compactionCount is counted; an error after the entry was written comes with
// its id.
func (h *Held) Compact(ctx context.Context, summary string, keepTokens int, details any) (string, error) {
	id, err := h.write(func() (string, error) { return transcript.Compact(h.w, summary, keepTokens, details) })
	if err != nil {
		return "", err //nolint:wrapcheck // the caller maps transcript's errors (ErrToolCallPending...) to its codes
	}
	h.forgetPairing()
	if err := h.PatchFunc(context.WithoutCancel(ctx), countCompaction); err != nil {
		return id, err
	}
	return id, nil
}

// countCompaction is the sessions.json update of a summary compaction.
func countCompaction(cur chatstore.SessionEntry) (any, error) {
	return map[string]any{"compactionCount": cur.CompactionCount + 1}, nil
}

// Branch implements TurnWriter.
func (h *Held) Branch(id string) error {
	defer h.forgetPairing()
	return h.w.Branch(id) //nolint:wrapcheck // the writer names the entry
}

// ResetLeaf implements TurnWriter.
func (h *Held) ResetLeaf() {
	defer h.forgetPairing()
	h.w.ResetLeaf()
}

func (h *Held) forgetPairing() {
	h.pair.mu.Lock()
	h.pair.known = false
	h.pair.mu.Unlock()
}

// Flush implements TurnWriter.
func (h *Held) Flush() error {
	return h.w.Flush() //nolint:wrapcheck // the writer names the transcript
}
