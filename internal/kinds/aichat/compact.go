package aichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Compaction's ratios of the context window (docs/ai-chat.md, Compaction).
const (
	// compactThreshold: compact when the context passes this share of the window.
	compactThreshold = 0.9
	// summaryShare bounds the summary; keepShare is the recent part kept as it is.
	summaryShare = 0.25
	keepShare    = 0.25
	// promptReserve is what the summary request's instructions and framing may take.
	promptReserve = 1024
	// unknownWindowInput bounds the summary request's input (in estimated tokens) when the
	// window is unknown.
	unknownWindowInput = 32000
)

// Compaction reasons.
const (
	CompactThreshold = "threshold"
	CompactOverflow  = "overflow"
	CompactRequested = "requested"
)

const summaryInstructions = `You compact a conversation between a user and an AI agent that uses tools. Write a summary the agent will continue from, in place of the messages below: the user's goals and requests, decisions made, what was done (files read and changed, commands run and their outcomes), what is in progress, and what remains. Keep exact names, paths, values and errors. Write plain text, no preamble.`

// windowTokens is the backend's context window (0: unknown).
func (c *chat) windowTokens() int { return c.backend.ContextWindow }

// needsCompaction reports whether a context of used tokens is past the threshold.
func (c *chat) needsCompaction(used int) bool {
	w := c.windowTokens()
	return w > 0 && float64(used) > compactThreshold*float64(w)
}

// keepTokens is how much of the recent context a compaction keeps as it is.
func (c *chat) keepTokens() int {
	if w := c.windowTokens(); w > 0 {
		return int(keepShare * float64(w))
	}
	return transcript.DefaultKeepRecentTokens
}

// compact replaces the older part of the conversation with a summary the model writes.
// run is the turn's run; nil for a compaction asked for between turns, whose caller publishes
// the returned end event itself (as it stops counting as running).
func (c *chat) compact(ctx context.Context, h *conversation.Held, run *chatstore.Run, reason string) (*abi.AICompaction, error) {
	w := h.Writer
	if w.LeafID() == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "nothing to compact: the conversation is empty")
	}
	keep := c.keepTokens()
	cut, err := transcript.ChooseCut(w.File(), w.LeafID(), keep)
	if err != nil {
		return nil, compactError(c.sink.SessionID(), keep, err)
	}
	if run != nil {
		if err := run.Phase(chatstore.PhaseCompacting); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	}
	c.sink.SetMetadata(map[string]any{"state": StateCompacting})
	if err := h.Patch(context.WithoutCancel(ctx), map[string]any{"state": StateCompacting}); err != nil {
		return nil, err
	}
	// Back to what it was: a turn's compaction goes on running, one asked for ends idle.
	then := StateIdle
	if run != nil {
		then = StateRunning
	}
	defer func() { _ = h.Patch(context.WithoutCancel(ctx), map[string]any{"state": then}) }()
	ev := abi.AICompaction{Type: abi.PayloadAICompaction, Phase: abi.PhaseStarted, Reason: reason, TokensBefore: cut.TokensBefore}
	c.sink.Publish(abi.EventData, ev)
	summary, err := c.summarize(ctx, w.File(), cut)
	if err != nil {
		return nil, err
	}
	id, err := transcript.Compact(w, summary, keep, cut.Details())
	if err != nil {
		return nil, compactError(c.sink.SessionID(), keep, err)
	}
	if err := h.PatchFunc(context.WithoutCancel(ctx), func(cur chatstore.SessionEntry) (any, error) {
		return map[string]any{"compactionCount": cur.CompactionCount + 1}, nil
	}); err != nil {
		return nil, err
	}
	cx, err := w.Context()
	if err != nil {
		return nil, fmt.Errorf("read context: %w", err)
	}
	after := transcript.EstimateContextTokens(cx.Messages)
	ev.Phase, ev.CompactionID, ev.FirstKeptEntryID, ev.TokensAfter, ev.SummaryChars = abi.PhaseEnded, id, cut.FirstKeptEntryID, after.Tokens, len(summary)
	if run != nil {
		c.sink.Publish(abi.EventData, ev)
	}
	c.logs.verbosef("compacted (%s): %d tokens before, about %d after, summary of %d characters", reason, cut.TokensBefore, after.Tokens, len(summary))
	if run != nil {
		if err := run.Phase(chatstore.PhaseStreaming); err != nil {
			return nil, fmt.Errorf("run: %w", err)
		}
	}
	return &ev, nil
}

func compactError(id string, keep int, err error) error {
	switch {
	case errors.Is(err, transcript.ErrToolCallPending):
		return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "a tool call is unanswered; compact after its result is in", Err: err}
	case errors.Is(err, transcript.ErrNothingToCompact), errors.Is(err, transcript.ErrAlreadyCompacted):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: id, Message: fmt.Sprintf("nothing to compact when keeping the last %d tokens", keep), Err: err}
	}
	return fmt.Errorf("compact: %w", err)
}

// summarize asks the model (the backend's summary model) for the summary of what the cut
// removes. The request fits the window: the conversation is rendered as text and cut, oldest
// first, to the window less the summary's budget and the instructions.
func (c *chat) summarize(ctx context.Context, f *transcript.File, cut transcript.Cut) (string, error) {
	ids := append(append([]string{}, cut.SummarizeIDs...), cut.TurnPrefixIDs...)
	raw, err := transcript.SummaryMessages(f, ids)
	if err != nil {
		return "", fmt.Errorf("compact: %w", err)
	}
	budget, input := c.summaryBudget()
	text := renderForSummary(cut.PreviousSummary, raw, input*4)
	model := c.backend.SummaryModel
	if model == "" {
		model = c.backend.Model
	}
	zero := 0.0
	s, err := c.p.Stream(ctx, provider.Request{
		Model:       model,
		System:      summaryInstructions,
		Messages:    []provider.Message{provider.UserText(text, c.k.now().UnixMilli())},
		MaxTokens:   budget,
		Temperature: &zero,
	})
	if err != nil {
		return "", fmt.Errorf("compact: the summary request: %w", err)
	}
	defer func() { _ = s.Close() }()
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("compact: the summary: %w", err)
	}
	msg := s.Message()
	var b strings.Builder
	for _, blk := range msg.Content {
		if blk.Type == provider.BlockText {
			b.WriteString(blk.Text)
		}
	}
	summary := strings.TrimSpace(b.String())
	if summary == "" {
		return "", abi.Errorf(abi.CodeResourceUnavailable, c.sink.SessionID(), "compact: the model wrote an empty summary")
	}
	return summary, nil
}

// summaryBudget is the summary's token budget and the most the summary request's input may
// take, so that both fit the window.
func (c *chat) summaryBudget() (budget, input int) {
	w := c.windowTokens()
	if w <= 0 {
		budget = 4096
		if c.backend.MaxTokens > 0 {
			budget = min(budget, c.backend.MaxTokens)
		}
		return budget, unknownWindowInput
	}
	budget = int(summaryShare * float64(w))
	if c.backend.MaxTokens > 0 {
		budget = min(budget, c.backend.MaxTokens)
	}
	return budget, max(w-budget-promptReserve, w/4)
}

// renderForSummary writes the messages as text for the summarizer: the previous summary, then
// each message as "role: text", tool calls with their arguments and results (clipped). When
// it is longer than maxChars, the beginning of the messages is left out (the previous summary
// stays, clipped itself only when it alone is too long).
func renderForSummary(previous string, raw []json.RawMessage, maxChars int) string {
	const intro = "The conversation to summarize:\n\n"
	const cutNote = "(the beginning of this part is left out to fit)\n"
	head := ""
	if previous != "" {
		head = "Summary of the conversation before this part:\n" + previous + "\n\n"
	}
	var body strings.Builder
	for _, r := range raw {
		body.WriteString(renderMessage(r))
		body.WriteByte('\n')
	}
	text := body.String()
	if len(head) > maxChars/2 {
		head = clipText(head, maxChars/2)
	}
	room := maxChars - len(head) - len(intro) - len(cutNote)
	if len(text) > room {
		text = cutNote + tailText(text, max(room, 0))
	}
	return head + intro + text
}

// tailText is the last n bytes of s, starting on a character.
func tailText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// maxRendered bounds one rendered tool result or argument list.
const maxRendered = 2000

func renderMessage(raw json.RawMessage) string {
	msgs, err := provider.FromContext([]json.RawMessage{raw})
	if err != nil || len(msgs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, m := range msgs {
		label := m.Role
		if m.Role == provider.RoleToolResult {
			label = "result of " + m.ToolName
		}
		b.WriteString(label + ": ")
		for _, c := range m.Content {
			switch c.Type {
			case provider.BlockText:
				b.WriteString(clipText(c.Text, maxRendered*4))
			case provider.BlockToolCall:
				fmt.Fprintf(&b, "[calls %s %s] ", c.Name, clipText(string(c.Arguments), maxRendered))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:abi.ValidUTF8Prefix([]byte(s[:n]))] + " …(cut)"
}
