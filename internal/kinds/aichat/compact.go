package aichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat/orchestrate"
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
	if c.acp != nil {
		return nil, c.acpCompactError()
	}
	var w conversation.TurnWriter = h
	if w.LeafID() == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "nothing to compact: the conversation is empty")
	}
	keep := c.keepTokens()
	cut, err := transcript.ChooseCut(w.File(), w.LeafID(), keep)
	if err != nil {
		return nil, compactError(c.sink.SessionID(), keep, err)
	}
	if len(cut.SummarizeIDs) == 0 && len(cut.TurnPrefixIDs) == 0 {
		// All of the context is the recent part kept as it is: no summary to ask for.
		return nil, compactError(c.sink.SessionID(), keep, transcript.ErrNothingToCompact)
	}
	if reason == CompactThreshold && c.compaction.MemoryFlush {
		c.flushMemory(ctx, w, cut.TokensBefore)
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
	id, err := w.Compact(ctx, summary, keep, cut.Details())
	switch {
	case id == "" && err != nil:
		return nil, compactError(c.sink.SessionID(), keep, err)
	case err != nil: // written, not counted in sessions.json
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

// thresholdCompact compacts the conversation when a context of used tokens is past the
// threshold, and reports whether its context changed. When there is nothing to cut (the part
// kept as it is already holds it all), nothing is asked of the model and it is said once, as
// an ai-compaction skipped event, not at every turn or iteration, until a compaction happens
// again.
func (c *chat) thresholdCompact(ctx context.Context, h *conversation.Held, run *chatstore.Run, used int) bool {
	if !c.needsCompaction(used) {
		return false
	}
	_, err := c.compact(ctx, h, run, CompactThreshold)
	switch {
	case err == nil:
		c.nothingToCut = false
		return true
	case errors.Is(err, &abi.Error{Code: abi.CodeInvalidArgument}):
		c.logs.verbosef("no compaction at %d tokens: %v", used, err)
		if !c.nothingToCut {
			c.nothingToCut = true
			c.sink.Publish(abi.EventData, abi.AICompaction{Type: abi.PayloadAICompaction, Phase: abi.PhaseSkipped, Reason: CompactThreshold, TokensBefore: used,
				Message: fmt.Sprintf("the context (about %d tokens) is past %.0f%% of the window (%d tokens), but it is all the recent part compaction keeps (the last %d tokens): nothing to compact", used, compactThreshold*100, c.windowTokens(), c.keepTokens())})
		}
	default:
		c.turnError(err)
	}
	return false
}

func compactError(id string, keep int, err error) error {
	switch {
	case errors.Is(err, transcript.ErrToolCallPending):
		return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "a tool call is unanswered; compact after its result is in", Err: err}
	case errors.Is(err, transcript.ErrNothingToCompact), errors.Is(err, transcript.ErrAlreadyCompacted):
		// The message says it all: the cause (a sentinel, with the transcript's path) is not
		// repeated after it.
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: id, Message: fmt.Sprintf("nothing to compact when keeping the last %d tokens", keep)}
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
		head = orchestrate.Clip(head, maxChars/2)
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
				b.WriteString(orchestrate.Clip(c.Text, maxRendered*4))
			case provider.BlockToolCall:
				fmt.Fprintf(&b, "[calls %s %s] ", c.Name, orchestrate.Clip(string(c.Arguments), maxRendered))
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// between checks the threshold between the iterations of a turn, on the last reply's usage
// plus an estimate of what came after it (the batch's results): a turn of many tool calls is
// compacted as it crosses the threshold, not only at the next message.
func (c *chat) between(ctx context.Context, h *conversation.Held, run *chatstore.Run, em *emitter, msgs []provider.Message) ([]provider.Message, error) {
	if c.windowTokens() <= 0 {
		return msgs, nil
	}
	rest, used := msgs, 0
	if em.last != nil {
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == provider.RoleAssistant {
				rest, used = msgs[i+1:], contextUsed(*em.last)
				break
			}
		}
	}
	for _, m := range rest {
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("estimate the context: %w", err)
		}
		used += transcript.EstimateTokens(raw)
	}
	if !c.thresholdCompact(ctx, h, run, used) {
		return msgs, nil
	}
	return c.contextMessages(h)
}

// The memory flush (config.toml [compaction] memory_flush): before a threshold compaction,
// one silent turn on the context as it is, whose only tool appends to the workspace's
// MEMORY.md. Nothing of it enters the transcript or the session's events but its outcome.
const (
	memoryFile        = "MEMORY.md"
	defaultMinReserve = 2000
	flushIterations   = 4
	maxMemoryAppend   = 64 << 10
	flushPrompt       = "[memory flush] The conversation is about to be compacted: its older messages will be replaced by a summary. If anything must outlive that (decisions, facts learned, the state of the work, what remains to do), append it now as short notes with the memory_append tool (it goes to " + memoryFile + " in the workspace). Do not repeat what is there already. When done, or if nothing needs keeping, answer NO_REPLY."
)

// flushMemory runs the memory flush before a compaction of a context of used tokens, if the
// window has min_reserve_tokens left for it; its outcome is an ai-compaction event
// (phase memory-flush). A failure is reported there and the compaction goes on.
func (c *chat) flushMemory(ctx context.Context, w conversation.TurnWriter, used int) {
	reserve := c.compaction.MinReserveTokens
	if reserve <= 0 {
		reserve = defaultMinReserve
	}
	ev := abi.AICompaction{Type: abi.PayloadAICompaction, Phase: abi.PhaseMemoryFlush, Reason: CompactThreshold, TokensBefore: used}
	defer func() {
		c.sink.Publish(abi.EventData, ev)
		c.logs.verbosef("%s", ev.Message)
	}()
	if left := c.windowTokens() - used; left < reserve {
		ev.Message = fmt.Sprintf("memory flush skipped: %d tokens of the window are left, min_reserve_tokens is %d", left, reserve)
		return
	}
	msgs, err := c.contextMessages(w)
	if err != nil {
		ev.Message = "memory flush failed: " + err.Error()
		return
	}
	system, _, err := c.prof.SystemPrompt(c.workspace)
	if err != nil {
		ev.Message = "memory flush failed: " + err.Error()
		return
	}
	mem := &memoryTool{path: filepath.Join(c.workspace, memoryFile)}
	req := provider.Request{Model: c.backend.Model, System: system, Thinking: c.thinking, Temperature: c.temperature,
		Messages: append(msgs, provider.UserText(flushPrompt, c.k.now().UnixMilli()))}
	res, err := agent.Run(ctx, c.p, mem, req, agent.Options{MaxIterations: flushIterations, MaxConcurrent: 1, Now: c.k.now})
	switch {
	case err != nil:
		ev.Message = fmt.Sprintf("memory flush failed (%d characters appended to %s): %v", mem.written, mem.path, err)
	case res.End != agent.EndCompleted:
		ev.Message = fmt.Sprintf("memory flush ended %s: %d characters appended to %s", res.End, mem.written, mem.path)
	default:
		ev.Message = fmt.Sprintf("memory flush: %d characters appended to %s", mem.written, mem.path)
	}
}

// memoryTool is the memory flush's one tool (the agent.Tools of its turn): memory_append.
type memoryTool struct {
	path    string
	written int
}

func (m *memoryTool) Specs() []provider.Tool {
	return []provider.Tool{{Name: "memory_append", Description: "Append notes (Markdown) to " + memoryFile + " in the workspace, the memory that outlives compaction.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"the notes to append"}},"required":["text"],"additionalProperties":false}`)}}
}

func (m *memoryTool) Run(_ context.Context, call provider.ToolCall) agent.Outcome {
	var args struct {
		Text string `json:"text"`
	}
	if call.Name != "memory_append" {
		return agent.Outcome{Output: "unknown tool " + call.Name + ": only memory_append is offered now", IsError: true}
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || strings.TrimSpace(args.Text) == "" {
		return agent.Outcome{Output: "memory_append needs {\"text\": \"...\"}", IsError: true}
	}
	if len(args.Text) > maxMemoryAppend {
		return agent.Outcome{Output: fmt.Sprintf("%d bytes is over the limit of %d per call", len(args.Text), maxMemoryAppend), IsError: true}
	}
	text := strings.TrimRight(args.Text, "\n") + "\n"
	// O_NOFOLLOW: a symlink planted as MEMORY.md does not redirect the write.
	f, err := os.OpenFile(m.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600) //nolint:gosec // G304: the workspace's memory file
	if err != nil {
		return agent.Outcome{Output: "memory_append: " + err.Error(), IsError: true}
	}
	_, werr := f.WriteString(text)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return agent.Outcome{Output: "memory_append: " + werr.Error(), IsError: true}
	}
	m.written += len(text)
	return agent.Outcome{Output: fmt.Sprintf("appended %d characters to %s", len(text), memoryFile)}
}
