package acpengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/provider"
)

// API is the api of the assistant messages an ACP agent's turns record (pi's field: which
// wire produced the reply).
const API = provider.APIACP

// Confirm asks the user about a permission request of the agent (the ai-chat kind's
// confirmation-request); Deny or an error rejects it.
type Confirm func(ctx context.Context, call provider.ToolCall, req *permission.Request) (permission.Answer, error)

// Turn is one prompt.
type Turn struct {
	Prompt string
	// Resume is the agent session id recorded for the conversation: loaded if the agent has
	// to be started and can load sessions.
	Resume string
	// Options' Emit, Append and Now are used as agent.Run uses them: the turn's events in
	// order, each message as it completes (assistant replies, then their tool results).
	Options agent.Options
	Confirm Confirm
	// Provider and Model stamp the assistant messages.
	Provider, Model string
	// History, when set, is the conversation so far as text: sent before the prompt when the
	// agent's session is new (the agent cannot load the recorded one, or none was recorded),
	// so it knows what the conversation said.
	History func() string
}

// Run sends the prompt and relays the turn until the agent answers it (or ctx ends: then
// session/cancel, and the agent's answer to it). Every tool call the turn records gets a
// result. A failure of the agent (it exits, it refuses) is Result.Err with End error; the
// next Run starts it again.
func (e *Engine) Run(ctx context.Context, t Turn) (*agent.Result, error) {
	if t.Options.Now == nil {
		t.Options.Now = time.Now
	}
	if t.Options.Emit == nil {
		t.Options.Emit = func(agent.Event) {}
	}
	if t.Options.Append == nil {
		t.Options.Append = func(provider.Message) error { return nil }
	}
	tr := &turn{t: t, ctx: ctx, calls: map[acp.ToolCallId]*call{}, res: &agent.Result{}}
	tr.emit(agent.Event{Type: agent.EventStatus, Status: agent.StatusConnecting})
	if err := e.ensure(ctx, t.Resume); err != nil {
		if ctx.Err() != nil {
			return tr.end(acp.StopReasonCancelled, nil), nil
		}
		return tr.end("", err), nil
	}
	e.mu.Lock()
	p, sid, fresh := e.proc, e.session, e.fresh
	e.fresh = false
	e.mu.Unlock()
	prompt := []acp.ContentBlock{acp.TextBlock(t.Prompt)}
	if fresh && t.History != nil {
		if h := t.History(); h != "" {
			prompt = append([]acp.ContentBlock{acp.TextBlock(h)}, prompt...)
		}
	}
	e.turnMu.Lock()
	e.turn, tr.sid = tr, sid
	e.turnMu.Unlock()
	defer func() {
		e.turnMu.Lock()
		e.turn = nil
		e.turnMu.Unlock()
	}()

	type answer struct {
		r   acp.PromptResponse
		err error
	}
	// The prompt's own context is not the turn's: an interrupt is session/cancel, which the
	// agent answers with the prompt's stop reason (cancelled).
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	ch := make(chan answer, 1)
	go func() {
		r, err := p.conn.Prompt(pctx, acp.PromptRequest{SessionId: sid, Prompt: prompt})
		ch <- answer{r, err}
	}()
	var a answer
	select {
	case a = <-ch:
	case <-ctx.Done():
		_ = p.conn.Cancel(context.WithoutCancel(ctx), acp.CancelNotification{SessionId: sid})
		grace := time.NewTimer(e.cfg.CancelGrace)
		select {
		case a = <-ch:
		case <-grace.C:
			// An agent that ignores session/cancel is stopped: the next message starts it
			// again (and loads the session).
			pcancel()
			a = <-ch
			e.mu.Lock()
			if e.proc == p {
				e.stopLocked(context.WithoutCancel(ctx))
			}
			e.mu.Unlock()
			a.err = nil
			a.r.StopReason = acp.StopReasonCancelled
		}
		grace.Stop()
	}
	if a.err != nil {
		// An interrupted turn whose agent answered the prompt with an error rather than the
		// cancelled stop reason (the SDK's "Request cancelled" once its handler's context
		// ends; or the permission answered cancelled came first) is still cancelled, unless
		// the agent exited: that is the turn's error, and the process is reaped.
		if ctx.Err() != nil && !exited(p) {
			return tr.end(acp.StopReasonCancelled, nil), nil
		}
		return tr.end("", e.promptError(ctx, p, a.err)), nil
	}
	if a.r.Usage != nil {
		u := provider.Usage{Input: a.r.Usage.InputTokens, Output: a.r.Usage.OutputTokens, TotalTokens: a.r.Usage.TotalTokens}
		if a.r.Usage.CachedReadTokens != nil {
			u.CacheRead = *a.r.Usage.CachedReadTokens
		}
		if a.r.Usage.CachedWriteTokens != nil {
			u.CacheWrite = *a.r.Usage.CachedWriteTokens
		}
		tr.usage(u)
	}
	stop := a.r.StopReason
	if ctx.Err() != nil {
		stop = acp.StopReasonCancelled
	}
	return tr.end(stop, nil), nil
}

// exited reports whether the agent's output has closed (it is exiting).
func exited(p *process) bool {
	select {
	case <-p.conn.Done():
		return true
	default:
		return false
	}
}

// promptError says why a prompt failed: the agent exited (then it is reaped and the next
// message starts it again) or it answered with an error.
func (e *Engine) promptError(ctx context.Context, p *process, err error) error {
	select {
	case <-p.conn.Done():
		// Its output closed: it is exiting. Wait for its status, a bounded while.
		t := time.NewTimer(e.cfg.StopGrace)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
		e.mu.Lock()
		if e.proc == p {
			e.stopLocked(context.WithoutCancel(ctx))
		}
		e.mu.Unlock()
		return fmt.Errorf("agent %s (%s) exited during the turn: %s; the next message starts it again", e.cfg.Name, e.cfg.Command, p.exitError())
	default:
	}
	var re *acp.RequestError
	if errors.As(err, &re) {
		msg := re.Message
		if re.Data != nil {
			msg += fmt.Sprintf(" (%v)", re.Data)
		}
		return fmt.Errorf("agent %s: session/prompt: %s", e.cfg.Name, msg)
	}
	return fmt.Errorf("agent %s: session/prompt: %w", e.cfg.Name, err)
}

// turn is one Run's state: the reply being built from the agent's updates. A reply is
// recorded (appended) once its tool calls have all finished and the agent goes on, or at the
// turn's end; its calls' results follow it.
type turn struct {
	t   Turn
	ctx context.Context
	sid acp.SessionId

	mu        sync.Mutex
	msg       provider.Message
	order     []acp.ToolCallId // the calls of msg, in order
	calls     map[acp.ToolCallId]*call
	inText    bool
	inThought bool
	responded bool
	failed    error // an Append failed: the turn ends with it
	res       *agent.Result
}

// call is a tool call of the agent.
type call struct {
	block   int // its block in msg.Content
	title   string
	kind    acp.ToolKind
	input   any
	locs    []acp.ToolCallLocation
	output  string
	status  acp.ToolCallStatus
	started bool
	done    bool
	raw     any
}

func (tr *turn) emit(ev agent.Event) { tr.t.Options.Emit(ev) }

func (tr *turn) usage(u provider.Usage) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.res.Usage = u
	tr.msg.Usage = u
	tr.emit(agent.Event{Type: agent.EventUsage, Usage: u})
}

// respondLocked marks the reply's first update.
func (tr *turn) respondLocked() {
	if !tr.responded {
		tr.responded = true
		tr.emit(agent.Event{Type: agent.EventStatus, Status: agent.StatusResponding})
	}
}

// update takes one session/update of the running turn.
func (tr *turn) update(u acp.SessionUpdate) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.failed != nil {
		return
	}
	switch {
	case u.AgentMessageChunk != nil:
		if s := blockText(u.AgentMessageChunk.Content); s != "" {
			tr.textLocked(s)
		}
	case u.AgentThoughtChunk != nil:
		if s := blockText(u.AgentThoughtChunk.Content); s != "" {
			tr.thoughtLocked(s)
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		st := tc.Status
		tr.toolLocked(tc.ToolCallId, &tc.Title, &tc.Kind, tc.RawInput, tc.Locations, tc.Content, &st, tc.RawOutput)
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		tr.toolLocked(tc.ToolCallId, tc.Title, tc.Kind, tc.RawInput, tc.Locations, tc.Content, tc.Status, tc.RawOutput)
	case u.Plan != nil:
		// A plan is the agent's own bookkeeping, shown as reasoning.
		var b strings.Builder
		b.WriteString("Plan:\n")
		for _, e := range u.Plan.Entries {
			fmt.Fprintf(&b, "- [%s] %s\n", e.Status, e.Content)
		}
		tr.thoughtLocked(b.String())
	}
}

// nextReplyLocked records the reply if its calls are all done: what the agent sends next is
// its next reply (an iteration of the turn).
func (tr *turn) nextReplyLocked() {
	if len(tr.order) == 0 {
		return
	}
	for _, id := range tr.order {
		if !tr.calls[id].done {
			return
		}
	}
	tr.flushLocked(provider.StopToolUse, "")
	tr.res.Iterations++
	tr.emit(agent.Event{Type: agent.EventIterationCompleted, Iteration: tr.res.Iterations, WillContinue: true})
	tr.emit(agent.Event{Type: agent.EventStatus, Status: agent.StatusConnecting})
	tr.responded = false
}

func (tr *turn) textLocked(s string) {
	tr.nextReplyLocked()
	tr.respondLocked()
	tr.endThoughtLocked()
	n := len(tr.msg.Content)
	if n > 0 && tr.msg.Content[n-1].Type == provider.BlockText && tr.inText {
		tr.msg.Content[n-1].Text += s
	} else {
		tr.msg.Content = append(tr.msg.Content, provider.Text(s))
	}
	tr.inText = true
	tr.emit(agent.Event{Type: agent.EventToken, Index: len(tr.msg.Content) - 1, Content: s})
}

func (tr *turn) thoughtLocked(s string) {
	tr.nextReplyLocked()
	tr.respondLocked()
	tr.endTextLocked()
	n := len(tr.msg.Content)
	if n > 0 && tr.msg.Content[n-1].Type == provider.BlockThinking && tr.inThought {
		tr.msg.Content[n-1].Thinking += s
	} else {
		tr.msg.Content = append(tr.msg.Content, provider.Content{Type: provider.BlockThinking, Thinking: s})
		tr.emit(agent.Event{Type: agent.EventReasoningStarted, Index: len(tr.msg.Content) - 1})
	}
	tr.inThought = true
	tr.emit(agent.Event{Type: agent.EventReasoning, Index: len(tr.msg.Content) - 1, Content: s})
}

func (tr *turn) endTextLocked() {
	if tr.inText {
		tr.inText = false
		tr.emit(agent.Event{Type: agent.EventToken, Index: len(tr.msg.Content) - 1, Final: true})
	}
}

func (tr *turn) endThoughtLocked() {
	if tr.inThought {
		tr.inThought = false
		tr.emit(agent.Event{Type: agent.EventReasoningEnded, Index: len(tr.msg.Content) - 1})
	}
}

// toolLocked takes a tool call's start or update (the fields sent; nil: unchanged).
func (tr *turn) toolLocked(id acp.ToolCallId, title *string, kind *acp.ToolKind, input any, locs []acp.ToolCallLocation, content []acp.ToolCallContent, status *acp.ToolCallStatus, raw any) {
	c := tr.calls[id]
	if c == nil {
		tr.nextReplyLocked()
		tr.respondLocked()
		tr.endTextLocked()
		tr.endThoughtLocked()
		c = &call{block: len(tr.msg.Content), kind: acp.ToolKindOther}
		tr.calls[id] = c
		tr.order = append(tr.order, id)
		tr.msg.Content = append(tr.msg.Content, provider.Content{Type: provider.BlockToolCall, ID: string(id)})
		defer func() {
			tr.emit(agent.Event{Type: agent.EventToolDetected, Call: tr.callOf(id)})
			tr.progressLocked(id, c)
		}()
	} else {
		defer tr.progressLocked(id, c)
	}
	if title != nil && *title != "" {
		c.title = *title
	}
	if kind != nil && *kind != "" {
		c.kind = *kind
	}
	if input != nil {
		c.input = input
	}
	if locs != nil {
		c.locs = locs
	}
	if content != nil {
		c.output = contentText(content)
	}
	if raw != nil {
		c.raw = raw
	}
	if status != nil && *status != "" {
		c.status = *status
	}
	if !c.done {
		b := &tr.msg.Content[c.block]
		b.Name, b.Arguments = toolName(c.kind), arguments(c)
	}
}

// progressLocked publishes a call's start and end as its status says.
func (tr *turn) progressLocked(id acp.ToolCallId, c *call) {
	if c.done {
		return
	}
	if !c.started && (c.status == acp.ToolCallStatusInProgress || c.status == acp.ToolCallStatusCompleted || c.status == acp.ToolCallStatusFailed) {
		c.started = true
		tr.emit(agent.Event{Type: agent.EventToolStarted, Call: tr.callOf(id)})
	}
	if c.status == acp.ToolCallStatusCompleted || c.status == acp.ToolCallStatusFailed {
		c.done = true
		tr.emit(agent.Event{Type: agent.EventToolCompleted, Call: tr.callOf(id), Output: c.result(), IsError: c.status == acp.ToolCallStatusFailed})
	}
}

func (tr *turn) callOf(id acp.ToolCallId) *provider.ToolCall {
	c := tr.calls[id]
	b := tr.msg.Content[c.block]
	return &provider.ToolCall{ID: string(id), Name: b.Name, Arguments: b.Arguments}
}

// result is what a call's result records: its output, else its raw output.
func (c *call) result() string {
	if c.output != "" {
		return c.output
	}
	if c.raw != nil {
		if b, err := json.Marshal(c.raw); err == nil && string(b) != "null" {
			return string(b)
		}
	}
	return ""
}

// flushLocked records the reply and the results of its calls; calls that have not finished
// are answered with why (the turn ended first).
func (tr *turn) flushLocked(stop provider.StopReason, errMsg string) {
	tr.endTextLocked()
	tr.endThoughtLocked()
	msg := tr.msg
	msg.Role, msg.API, msg.Provider, msg.Model = provider.RoleAssistant, API, tr.t.Provider, tr.t.Model
	msg.StopReason, msg.ErrorMessage = stop, errMsg
	msg.Timestamp = tr.t.Options.Now().UnixMilli()
	tr.msg = provider.Message{}
	order := tr.order
	tr.order = nil
	if err := tr.appendLocked(msg); err != nil {
		return
	}
	for _, id := range order {
		c := tr.calls[id]
		out, isErr := c.result(), c.status == acp.ToolCallStatusFailed
		if !c.done {
			c.done, isErr = true, true
			out = "the turn ended before the agent finished this call"
			if stop == provider.StopAborted {
				out = "interrupted: the turn was cancelled before the agent finished this call"
			}
			tr.emit(agent.Event{Type: agent.EventToolCompleted, Call: &provider.ToolCall{ID: string(id), Name: toolName(c.kind)}, Output: out, IsError: true})
		}
		details, _ := json.Marshal(map[string]any{"title": c.title, "kind": c.kind, "status": c.status, "locations": c.locs})
		r := provider.Message{Role: provider.RoleToolResult, ToolCallID: string(id), ToolName: toolName(c.kind),
			Content: []provider.Content{provider.Text(out)}, IsError: isErr, Details: details, Timestamp: tr.t.Options.Now().UnixMilli()}
		if err := tr.appendLocked(r); err != nil {
			return
		}
	}
}

func (tr *turn) appendLocked(m provider.Message) error {
	if tr.failed != nil {
		return tr.failed
	}
	if err := tr.t.Options.Append(m); err != nil {
		tr.failed = err
		return err
	}
	tr.res.Messages = append(tr.res.Messages, m)
	return nil
}

// end records what is left of the turn and says how it ended.
func (tr *turn) end(stop acp.StopReason, err error) *agent.Result {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	res := tr.res
	ps, errMsg := provider.StopEndTurn, ""
	switch {
	case err != nil:
		ps, errMsg = provider.StopError, err.Error()
		res.End, res.Err = agent.EndError, err
	case stop == acp.StopReasonCancelled:
		ps = provider.StopAborted
		res.End = agent.EndCancelled
	case stop == acp.StopReasonMaxTokens:
		ps = provider.StopMaxTokens
		res.End, res.Reason = agent.EndCompleted, string(stop)
	case stop == acp.StopReasonMaxTurnRequests:
		res.End, res.Reason = agent.EndMaxIterations, string(stop)
	case stop == acp.StopReasonRefusal:
		res.End, res.Reason = agent.EndCompleted, string(stop)
	default:
		res.End = agent.EndCompleted
	}
	// The turn's last reply, even an empty one: the user's message is answered.
	if len(tr.msg.Content) > 0 || len(tr.order) > 0 || len(res.Messages) == 0 || err != nil {
		tr.flushLocked(ps, errMsg)
		res.Iterations++
		tr.emit(agent.Event{Type: agent.EventIterationCompleted, Iteration: res.Iterations})
	}
	if tr.failed != nil && res.End != agent.EndError {
		res.End, res.Err = agent.EndError, tr.failed
	}
	tr.emit(agent.Event{Type: agent.EventStatus, Status: agent.StatusIdle})
	tr.emit(agent.Event{Type: agent.EventTurnEnded, End: res.End, Reason: res.Reason})
	return res
}

// permission asks the user about the agent's request and picks the option the answer means.
func (tr *turn) permission(ctx context.Context, req acp.RequestPermissionRequest) acp.RequestPermissionOutcome {
	tc := req.ToolCall
	tr.mu.Lock()
	// A request may name a call no update announced: it is a call of the reply all the same.
	tr.toolLocked(tc.ToolCallId, tc.Title, tc.Kind, tc.RawInput, tc.Locations, tc.Content, tc.Status, tc.RawOutput)
	callv := *tr.callOf(tc.ToolCallId)
	c := tr.calls[tc.ToolCallId]
	preq := &permission.Request{Tool: toolName(c.kind), Command: c.title, Options: []permission.Answer{permission.Deny, permission.AllowOnce}}
	for _, l := range c.locs {
		preq.Paths = append(preq.Paths, l.Path)
	}
	if in, ok := c.input.(map[string]any); ok {
		if cmd, ok := in["command"].(string); ok {
			preq.Command = cmd
		}
	}
	if optionOf(req.Options, acp.PermissionOptionKindAllowAlways) != "" {
		preq.Options = append(preq.Options, alwaysAnswer(c.kind))
	}
	tr.mu.Unlock()
	if tr.t.Confirm == nil {
		return acp.NewRequestPermissionOutcomeCancelled()
	}
	ans, err := tr.t.Confirm(ctx, callv, preq)
	if err != nil && ctx.Err() != nil {
		return acp.NewRequestPermissionOutcomeCancelled()
	}
	var pick acp.PermissionOptionId
	switch {
	case err != nil || ans == permission.Deny:
		pick = firstOption(req.Options, acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways)
	case ans == permission.AllowOnce:
		pick = firstOption(req.Options, acp.PermissionOptionKindAllowOnce, acp.PermissionOptionKindAllowAlways)
	default:
		pick = firstOption(req.Options, acp.PermissionOptionKindAllowAlways, acp.PermissionOptionKindAllowOnce)
	}
	if pick == "" {
		return acp.NewRequestPermissionOutcomeCancelled()
	}
	return acp.NewRequestPermissionOutcomeSelected(pick)
}

// alwaysAnswer is the nexus answer that stands for the agent's "allow always" on a call of
// this kind (the agent, not nexus, keeps what it allows).
func alwaysAnswer(k acp.ToolKind) permission.Answer {
	switch k {
	case acp.ToolKindRead:
		return permission.AllowFile
	case acp.ToolKindEdit, acp.ToolKindDelete, acp.ToolKindMove:
		return permission.AllowWriteDirectory
	default:
		return permission.AllowExecGlobal
	}
}

func optionOf(opts []acp.PermissionOption, kind acp.PermissionOptionKind) acp.PermissionOptionId {
	for _, o := range opts {
		if o.Kind == kind {
			return o.OptionId
		}
	}
	return ""
}

func firstOption(opts []acp.PermissionOption, kinds ...acp.PermissionOptionKind) acp.PermissionOptionId {
	for _, k := range kinds {
		if id := optionOf(opts, k); id != "" {
			return id
		}
	}
	return ""
}

// toolName is the name a call of the agent is recorded under: acp_<kind> (read, edit,
// execute, ...), never one of nexus's own tools.
func toolName(k acp.ToolKind) string {
	if k == "" {
		k = acp.ToolKindOther
	}
	return "acp_" + string(k)
}

// arguments are a call's recorded arguments: its title, its input as the agent gave it and
// the paths it touches.
func arguments(c *call) json.RawMessage {
	a := map[string]any{"title": c.title}
	if c.input != nil {
		a["input"] = c.input
	}
	if len(c.locs) > 0 {
		paths := make([]string, 0, len(c.locs))
		for _, l := range c.locs {
			paths = append(paths, l.Path)
		}
		a["paths"] = slices.Compact(paths)
	}
	b, err := json.Marshal(a)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// blockText is a content block's text (an image or audio block is named, not kept).
func blockText(b acp.ContentBlock) string {
	switch {
	case b.Text != nil:
		return b.Text.Text
	case b.ResourceLink != nil:
		return b.ResourceLink.Uri
	case b.Image != nil:
		return "[image]"
	case b.Audio != nil:
		return "[audio]"
	}
	return ""
}

// contentText renders a call's content: text, diffs (path and new text), terminals by id.
func contentText(cs []acp.ToolCallContent) string {
	var parts []string
	for _, c := range cs {
		switch {
		case c.Content != nil:
			if s := blockText(c.Content.Content); s != "" {
				parts = append(parts, s)
			}
		case c.Diff != nil:
			d := c.Diff
			s := "--- " + d.Path + "\n"
			if d.OldText != nil {
				s += *d.OldText + "\n"
			}
			s += "+++ " + d.Path + "\n" + d.NewText
			parts = append(parts, s)
		case c.Terminal != nil:
			parts = append(parts, "[terminal "+c.Terminal.TerminalId+"]")
		}
	}
	return strings.Join(parts, "\n")
}
