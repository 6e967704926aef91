package aichat

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat/orchestrate"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Conversation states: sessions.json's state (idle, running, compacting) and the session's
// metadata state (also streaming and awaiting-confirmation).
const (
	StateIdle                 = "idle"
	StateRunning              = "running"
	StateStreaming            = "streaming"
	StateCompacting           = "compacting"
	StateAwaitingConfirmation = "awaiting-confirmation"
)

// turn runs one user message to its end: the transcript holds the user message, each reply
// and each tool result as they complete, framed by a run's start and end records. It returns
// the turn's end event, for the caller to publish once the turn no longer runs. A turn that
// continues (cont) one a gateway restart interrupted has no new message: the model answers
// the recorded context.
func (c *chat) turn(ctx context.Context, text string, ids []string, cont bool) abi.AITurn {
	c.sink.SetMetadata(map[string]any{"state": StateRunning})
	defer c.sink.SetMetadata(map[string]any{"state": StateIdle})
	// Every entry is written as it completes (a crash of nexus loses none); fsyncs, which a
	// crash of the machine needs, come at the user's message, at the end of each model call's
	// batch of tools and at the turn's end, not after each entry (docs/ai-chat.md).
	h, err := c.k.Chats.Hold(c.base, c.key, conversation.HoldOptions{Cwd: c.workspace, Sync: transcript.SyncBatch, ParentSession: c.parentSession, Lease: c.heldLease()})
	if err != nil {
		c.turnError(err)
		return abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, End: abi.TurnError, Reason: err.Error()}
	}
	c.nameTranscript(c.base, h.SessionID)
	if len(ids) > 0 {
		if err := c.rollBack(ctx, h, ids); err != nil {
			c.turnError(err) // the message still runs, where the conversation is
		}
	}
	res, runID, err := c.runTurn(ctx, h, text, ids, cont)
	if res == nil {
		// The turn failed before its end was recorded with its usage: sessions.json must not
		// say it still runs.
		if perr := h.Patch(context.WithoutCancel(c.base), map[string]any{"state": StateIdle}); perr != nil && err == nil {
			err = perr
		}
	}
	if cerr := h.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return c.finish(res, runID, err)
}

func (c *chat) runTurn(ctx context.Context, h *conversation.Held, text string, ids []string, cont bool) (*agent.Result, string, error) {
	var w conversation.TurnWriter = h
	run, err := chatstore.StartRunWith(w, h.SessionID, chatstore.RunOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("start run: %w", err)
	}
	// sessions.json says the conversation runs (another process, a console, sees it); the
	// finer states (streaming, awaiting-confirmation) are in the session's metadata only:
	// a sessions.json write per model call would cost an fsync each.
	patch := map[string]any{"state": StateRunning}
	origins, err := c.k.turnOrigins(ctx, ids)
	if err != nil {
		// Where the message came from is a record, not what the turn needs: it runs without.
		c.k.logger().Warn("the turn's origins", "key", c.key, "err", err)
	}
	if o := lastOrigin(origins); !o.IsZero() {
		for k, v := range originPatch(o) {
			patch[k] = v
		}
		c.mu.Lock()
		c.origin = o
		c.mu.Unlock()
	}
	if old, ok := recordedOptions(&h.Entry); !ok || !sameOptions(old, c.options) {
		patch[OptionsField] = c.options
	}
	if c.roadmap != "" && string(h.Entry.Extra[RoadmapField]) != strconv.Quote(c.roadmap) {
		patch[RoadmapField] = c.roadmap
	}
	if c.setQueueMode && h.Entry.QueueMode != string(c.queueMode) {
		patch["queueMode"] = string(c.queueMode)
	}
	if err := h.Patch(context.WithoutCancel(c.base), patch); err != nil {
		return nil, "", err
	}
	c.sink.Publish(abi.EventData, abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseStarted, RunID: run.ID, MessageIDs: ids})
	c.sink.Publish(abi.EventData, abi.AIRun{Type: abi.PayloadAIRun, Phase: abi.RunStart, RunID: run.ID})
	res, err := c.runModel(ctx, h, run, text, ids, origins, cont)
	outcome, cause := chatstore.OutcomeOK, error(nil)
	switch {
	case err != nil:
		outcome, cause = chatstore.OutcomeError, err
	case res.End == agent.EndError:
		outcome, cause = chatstore.OutcomeError, res.Err
	}
	if eerr := run.End(outcome, cause); eerr != nil && err == nil {
		err = eerr
	}
	return res, run.ID, err
}

func (c *chat) runModel(ctx context.Context, h *conversation.Held, run *chatstore.Run, text string, ids []string, origins []abi.Origin, cont bool) (*agent.Result, error) {
	var w conversation.TurnWriter = h
	cur, err := w.Context()
	if err != nil {
		return nil, fmt.Errorf("read context: %w", err)
	}
	if cur.Model == nil || cur.Model.Provider != c.backend.Name || cur.Model.ModelID != c.backend.Model {
		if _, err := w.AppendModelChange(c.backend.Name, c.backend.Model); err != nil {
			return nil, fmt.Errorf("record model: %w", err)
		}
	}
	if c.thinking != "" && c.thinking != cur.ThinkingLevel {
		if _, err := w.AppendThinkingLevel(c.thinking); err != nil {
			return nil, fmt.Errorf("record thinking level: %w", err)
		}
	}
	raw := cur.Messages
	if !cont {
		ub, err := c.record(ctx, w, text, ids, origins)
		if err != nil {
			return nil, err
		}
		raw = append(raw, ub)
	}
	msgs, err := c.prepare(ctx, h, run, raw)
	if err != nil {
		return nil, err
	}
	// The system prompt is composed at each turn, so an edit of the agent or of AGENTS.md
	// applies from the next message.
	system, report, err := c.prof.SystemPrompt(c.workspace)
	if err != nil {
		return nil, err
	}
	c.logs.system(system)
	if err := run.Phase(chatstore.PhaseStreaming); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	c.mu.Lock()
	before, _ := json.Marshal(c.allow)
	c.mu.Unlock()
	ts := &agent.Toolset{Registry: c.reg, Allowances: c.allow, Confirm: c.confirm}
	em := &emitter{c: c, run: run.ID}
	ctx, setReply := orchestrate.WithReply(ctx)
	req := provider.Request{Model: c.backend.Model, System: system, Messages: msgs, Thinking: c.thinking, Temperature: c.temperature}
	opts := agent.Options{
		MaxIterations:    c.maxIter,
		MaxConcurrent:    c.policy.MaxConcurrentTools,
		ProgressInterval: c.policy.ProgressInterval,
		Now:              c.k.now,
		Emit: func(ev agent.Event) {
			em.emit(ev)
			if ev.Type == agent.EventIterationCompleted {
				if err := w.Flush(); err != nil {
					c.turnError(fmt.Errorf("sync the transcript: %w", err))
				}
			}
		},
		Append: func(m provider.Message) error {
			id, err := w.AppendMessage(m, nil)
			if err != nil {
				return fmt.Errorf("record a message: %w", err)
			}
			if m.Role == provider.RoleAssistant {
				setReply(id) // the reply's calls run next (sessions_spawn names it)
			}
			c.logs.message(m)
			return nil
		},
		// A long turn crosses the threshold between its model calls too.
		Between: func(ctx context.Context, msgs []provider.Message) ([]provider.Message, error) {
			return c.between(ctx, h, run, em, msgs)
		},
	}
	res, err := c.runAgent(ctx, h, ts, req, opts)
	// A request the window cannot hold: compact, then try once more from the transcript.
	if res != nil && res.End == agent.EndError && errors.Is(res.Err, provider.ErrContextOverflow) && ctx.Err() == nil {
		c.logs.verbosef("context overflow: %v", res.Err)
		if _, cerr := c.compact(ctx, h, run, CompactOverflow); cerr != nil {
			c.turnError(cerr)
		} else if req.Messages, err = c.contextMessages(w); err == nil {
			first := res
			res, err = agent.Run(ctx, c.p, ts, req, opts)
			if res != nil {
				res.Iterations += first.Iterations
				res.Messages = append(first.Messages, res.Messages...)
			}
		}
	}
	// What the answers allowed persists with the conversation.
	c.mu.Lock()
	after, _ := json.Marshal(c.allow)
	c.mu.Unlock()
	if !bytes.Equal(before, after) {
		if _, aerr := w.AppendCustom(AllowancesCustomType, json.RawMessage(after)); aerr != nil && err == nil {
			err = fmt.Errorf("record allowances: %w", aerr)
		}
	}
	if res != nil {
		// One write of sessions.json per turn: usage, model and what the prompt was made of.
		patch := map[string]any{
			"systemPromptReport": report,
			"inputTokens":        res.Usage.Input + res.Usage.CacheRead + res.Usage.CacheWrite,
			"outputTokens":       res.Usage.Output,
			"model":              c.backend.Model,
			"modelProvider":      c.backend.Name,
			"state":              StateIdle,
		}
		if em.last != nil {
			used := contextUsed(*em.last)
			patch["totalTokens"] = used
			patch["contextTokensUsed"] = used
		}
		if c.backend.ContextWindow > 0 {
			patch["contextTokens"] = c.backend.ContextWindow
			patch["contextTokenLimit"] = c.backend.ContextWindow
		}
		if perr := h.Patch(context.WithoutCancel(c.base), patch); perr != nil && err == nil {
			err = perr
		}
	}
	return res, err
}

// record appends the turn's user message (durably, before the broker hears it was delivered)
// and returns it encoded, as the context holds it.
func (c *chat) record(ctx context.Context, w conversation.TurnWriter, text string, ids []string, origins []abi.Origin) (json.RawMessage, error) {
	user := provider.UserText(text, c.k.now().UnixMilli())
	var extra map[string]any
	if len(ids) > 0 {
		// The queued messages' ids go with the entry: a restart between this append and the
		// broker's record finds them here and does not deliver them twice.
		extra = map[string]any{MessageIDsField: ids}
	}
	extra = originFields(origins, extra)
	entryID, err := w.AppendMessage(user, extra)
	if err != nil {
		return nil, fmt.Errorf("record the message: %w", err)
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("record the message: %w", err)
	}
	if len(ids) > 0 {
		if err := c.k.Broker.Delivered(context.WithoutCancel(ctx), ids, entryID); err != nil {
			c.recheck.Store(true) // the next delivery looks in the transcript first
			return nil, err
		}
	}
	c.logs.message(user)
	// The context read above plus the message: the transcript is read once per turn.
	ub, err := json.Marshal(user)
	if err != nil {
		return nil, fmt.Errorf("encode the message: %w", err)
	}
	return ub, nil
}

// contextMessages is the conversation's context at the transcript's leaf, as the model gets it.
func (c *chat) contextMessages(w conversation.TurnWriter) ([]provider.Message, error) {
	cx, err := w.Context()
	if err != nil {
		return nil, fmt.Errorf("read context: %w", err)
	}
	msgs, err := provider.FromContext(cx.Messages)
	if err != nil {
		return nil, fmt.Errorf("context: %w", err)
	}
	return msgs, nil
}

// prepare reads the context for a turn, compacting it first when it is past the threshold
// (a failed compaction is reported and the turn goes on: an overflow still compacts).
func (c *chat) prepare(ctx context.Context, h *conversation.Held, run *chatstore.Run, raw []json.RawMessage) ([]provider.Message, error) {
	if c.thresholdCompact(ctx, h, run, transcript.EstimateContextTokens(raw).Tokens) {
		return c.contextMessages(h)
	}
	msgs, err := provider.FromContext(raw)
	if err != nil {
		return nil, fmt.Errorf("context: %w", err)
	}
	return msgs, nil
}

// finish reports a turn's errors and returns its end event.
func (c *chat) finish(res *agent.Result, runID string, err error) abi.AITurn {
	if err != nil && (res == nil || res.End != agent.EndError) {
		c.turnError(err)
	}
	p := abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, RunID: runID, End: abi.TurnError}
	if res != nil {
		p.End, p.Reason, p.Iterations = res.End, res.Reason, res.Iterations
		u := res.Usage
		p.Usage = &abi.AIUsage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, Total: u.TotalTokens}
		if res.End == agent.EndError && res.Err != nil {
			p.Reason = res.Err.Error()
			c.turnError(res.Err)
		}
	} else if err != nil {
		p.Reason = err.Error()
	}
	c.logs.turnEnded(p)
	return p
}

// turnError publishes an error event with the error's ABI code.
func (c *chat) turnError(err error) {
	code, msg := abi.CodeInternal, err.Error()
	var ae *abi.Error
	if errors.As(err, &ae) {
		// The event carries the code beside the message: not in it too.
		code, msg = ae.Code, strings.Replace(msg, string(ae.Code)+": ", "", 1)
	}
	if errors.Is(err, provider.ErrContextOverflow) {
		code = abi.CodeLimitExceeded
	}
	c.sink.Publish(abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: code, Message: msg}})
	c.logs.verbosef("error: %s", msg)
}

// contextUsed is the context a reply's call took: its prompt and its output.
func contextUsed(u provider.Usage) int {
	return u.Input + u.CacheRead + u.CacheWrite + u.Output
}

// confirm asks the user about a call: a confirmation-request event, then the answer from the
// confirm control command (or deny when the turn ends first).
func (c *chat) confirm(ctx context.Context, call provider.ToolCall, req *permission.Request) (permission.Answer, error) {
	ch := make(chan permission.Answer, 1)
	c.mu.Lock()
	c.reqSeq++
	id := "confirm-" + strconv.Itoa(c.reqSeq)
	c.pending[id] = ch
	c.mu.Unlock()
	opts := make([]string, len(req.Options))
	for i, o := range req.Options {
		opts[i] = string(o)
	}
	c.sink.Publish(abi.EventData, abi.AIConfirmation{
		Type: abi.PayloadAIConfirmation, RequestID: id, ToolCallID: call.ID, Tool: req.Tool,
		Arguments: call.Arguments, Paths: req.Paths, Command: req.Command, Cwd: req.Cwd,
		Programs: req.Programs, Reason: req.Dynamic, Options: opts,
	})
	c.sink.SetMetadata(map[string]any{"state": StateAwaitingConfirmation})
	defer c.sink.SetMetadata(map[string]any{"state": StateRunning})
	// The request stays open as long as the session lives, unless confirm_timeout says less.
	var expired <-chan time.Time
	if d := c.policy.ConfirmTimeout; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	unanswered := func(answer string, err error) (permission.Answer, error) {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		c.sink.Publish(abi.EventData, abi.AIConfirmed{Type: abi.PayloadAIConfirmed, RequestID: id, Answer: answer})
		return permission.Deny, err
	}
	select {
	case a := <-ch:
		c.sink.Publish(abi.EventData, abi.AIConfirmed{Type: abi.PayloadAIConfirmed, RequestID: id, Answer: string(a)})
		return a, nil
	case <-expired:
		return unanswered("expired", fmt.Errorf("no answer within %s (confirm_timeout)", c.policy.ConfirmTimeout))
	case <-ctx.Done():
		return unanswered("interrupted", fmt.Errorf("confirmation: %w", ctx.Err()))
	}
}

// emitter maps the loop's events onto the ABI.
type emitter struct {
	c    *chat
	run  string
	call int // model calls so far, for message ids
	last *provider.Usage
}

func (e *emitter) msgID() string { return e.run + "-" + strconv.Itoa(e.call) }

func (e *emitter) emit(ev agent.Event) {
	s := e.c.sink
	e.c.logs.event(ev)
	switch ev.Type {
	case agent.EventStatus:
		switch ev.Status {
		case agent.StatusConnecting:
			e.call++
		case agent.StatusResponding:
			s.SetMetadata(map[string]any{"state": StateStreaming})
		case agent.StatusIdle:
			s.SetMetadata(map[string]any{"state": StateRunning})
		}
		s.Publish(abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: ev.Status, SessionStatus: abi.StatusActive})
		if ev.Status == agent.StatusIdle && e.last != nil {
			used := contextUsed(*e.last)
			md := map[string]any{"tokenCount": used, "contextWindow": e.c.backend.ContextWindow}
			if w := e.c.backend.ContextWindow; w > 0 {
				md["remainingTokens"] = max(w-used, 0)
			}
			s.SetMetadata(md)
		}
	case agent.EventToken:
		// Tokens (and thinking) wait for slow WebSocket followers rather than lap them.
		s.PublishFlow(abi.AIToken{Type: abi.PayloadAIToken, Content: ev.Content, MessageID: e.msgID(), IsFinal: ev.Final})
	case agent.EventReasoningStarted:
		s.Publish(abi.EventData, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseStarted, MessageID: e.msgID()})
	case agent.EventReasoning:
		s.PublishFlow(abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseDelta, Content: ev.Content, MessageID: e.msgID()})
	case agent.EventReasoningEnded:
		s.Publish(abi.EventData, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseEnded, MessageID: e.msgID()})
	case agent.EventUsage:
		u := ev.Usage
		e.last = &u
	case agent.EventToolDetected:
		s.Publish(abi.EventData, toolPayload(abi.PhaseDetected, ev, true))
	case agent.EventToolStarted:
		s.Publish(abi.EventData, toolPayload(abi.PhaseStarted, ev, false))
	case agent.EventToolCompleted:
		p := toolPayload(abi.PhaseCompleted, ev, false)
		p.Output, p.IsError = ev.Output, ev.IsError
		s.Publish(abi.EventData, p)
	case agent.EventToolProgress:
		p := abi.AIToolProgress{Type: abi.PayloadAIToolProgress, ElapsedMs: ev.Elapsed.Milliseconds(), Output: ev.Output}
		if ev.Call != nil {
			p.ToolCallID, p.Name = ev.Call.ID, ev.Call.Name
		}
		s.Publish(abi.EventData, p)
	case agent.EventBatchStarted:
		s.Publish(abi.EventData, abi.AIBatch{Type: abi.PayloadAIBatch, Phase: abi.PhaseStarted, Calls: ev.Calls, Parallel: ev.Parallel})
	case agent.EventBatchHalted:
		s.Publish(abi.EventData, abi.AIBatch{Type: abi.PayloadAIBatch, Phase: abi.PhaseHalted, Reason: ev.Reason})
	case agent.EventBatchCompleted:
		s.Publish(abi.EventData, abi.AIBatch{Type: abi.PayloadAIBatch, Phase: abi.PhaseCompleted})
	case agent.EventIterationCompleted:
		s.Publish(abi.EventData, abi.AIIteration{Type: abi.PayloadAIIteration, Iteration: ev.Iteration, WillContinue: ev.WillContinue})
	case agent.EventTurnEnded:
		// finish publishes the turn's end once the transcript is complete.
	}
}

func toolPayload(phase string, ev agent.Event, args bool) abi.AITool {
	p := abi.AITool{Type: abi.PayloadAITool, Phase: phase}
	if ev.Call != nil {
		p.ToolCallID, p.Name = ev.Call.ID, ev.Call.Name
		if args && json.Valid(ev.Call.Arguments) {
			p.Arguments = ev.Call.Arguments
		}
	}
	return p
}
