// Package agent is the turn loop of an AI chat (docs/ai-chat.md, The turn loop): a user message
// becomes model calls and tool runs until the model answers without calling a tool. One turn:
// stream the reply → take its tool calls → run them (in order, halting at the first failure, or
// all at once when the model asks) → send the results back → again, at most MaxIterations
// times. It stops early, with an event saying why, when the model repeats itself (the same call
// three times, a cycle of two to four calls twice, or one tool failing five times in a row).
//
// Every message of the turn is handed to the caller as it completes (Options.Append), and every
// tool call gets exactly one result, even when the turn is interrupted or halted, so a
// transcript written from them always pairs calls with results and can be resumed.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/provider"
)

// Tools is what the loop runs tool calls with.
type Tools interface {
	// Specs are the tools offered to the model.
	Specs() []provider.Tool
	// Run runs one call. The context carries the call's timeout and the turn's cancellation;
	// a failure of the tool itself is an Outcome with IsError, not an error.
	Run(ctx context.Context, call provider.ToolCall) Outcome
}

// Outcome is a tool call's result.
type Outcome struct {
	Output  string
	IsError bool
	// Details is structured data kept with the result in the transcript (exit code, paths).
	Details json.RawMessage
}

// Defaults of Options.
const (
	DefaultMaxIterations    = 10
	DefaultMaxConcurrent    = 10
	DefaultProgressInterval = 10 * time.Second
)

// Loop detection thresholds.
const (
	repeatLimit  = 3 // the same call (name and arguments) this many times in a turn
	maxCycle     = 4 // a cycle of up to this many calls, seen twice in a row
	failureLimit = 5 // one tool failing this many times in a row
)

// Options configures a turn.
type Options struct {
	MaxIterations int
	// MaxConcurrent bounds the calls of a batch run at once.
	MaxConcurrent int
	// ToolTimeout, when set, bounds each call as the loop sees it, a confirmation's wait
	// included. Zero (the default) leaves timeouts to Tools: a Toolset times each call from
	// the moment it may run, by its tool's timeout, so a wait for the user costs it nothing.
	ToolTimeout time.Duration
	// ProgressInterval is how often a running call reports itself (EventToolProgress: time
	// since it started to run, the tail of its output); default DefaultProgressInterval,
	// negative never.
	ProgressInterval time.Duration
	// Now stamps messages (default time.Now).
	Now func() time.Time
	// Emit receives the turn's events, in order, one at a time (from the goroutine that
	// called Run, or a batch's goroutines when its calls run at once).
	Emit func(Event)
	// Append receives each message of the turn as it completes: the assistant replies and
	// the tool results, in transcript order. An error ends the turn.
	Append func(provider.Message) error
	// Between, when set, is called between two iterations of the turn (the results of a
	// batch are in, the next model call is to come) with the request's messages; the ones it
	// returns are sent instead (a compaction between iterations). An error ends the turn.
	Between func(ctx context.Context, msgs []provider.Message) ([]provider.Message, error)
}

func (o *Options) defaults() {
	if o.MaxIterations <= 0 {
		o.MaxIterations = DefaultMaxIterations
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Emit == nil {
		o.Emit = func(Event) {}
	}
	if o.Append == nil {
		o.Append = func(provider.Message) error { return nil }
	}
}

// Ends of a turn (Result.End and the turn-ended event).
const (
	EndCompleted     = "completed"      // the model answered without a tool call
	EndCancelled     = "cancelled"      // the context ended (an interrupt)
	EndMaxIterations = "max_iterations" // MaxIterations model calls all asked for tools
	EndLoop          = "loop_detected"  // the model repeated itself (Result.Reason says how)
	EndError         = "error"          // the provider or Append failed (Result.Err)
)

// Result is how a turn ended.
type Result struct {
	End    string
	Reason string // for EndLoop: what repeated
	// Messages are the messages the turn appended, in order.
	Messages   []provider.Message
	Iterations int
	Usage      provider.Usage
	Err        error
}

// turn is one Run's state.
type turn struct {
	opts  Options
	tools Tools
	res   *Result
	// seen counts each call signature; history is the signatures in order; failures counts
	// each tool's consecutive failures.
	seen     map[string]int
	history  []string
	failures map[string]int
}

// Run runs one turn: req holds the conversation so far, its last message the user's new one.
// It returns when the model answers without calling a tool, or the turn stops early; the
// Result says which. The error is non-nil only for EndError.
func Run(ctx context.Context, p provider.Provider, tools Tools, req provider.Request, opts Options) (*Result, error) {
	opts.defaults()
	t := &turn{opts: opts, tools: tools, res: &Result{}, seen: map[string]int{}, failures: map[string]int{}}
	if tools != nil {
		req.Tools = tools.Specs()
	}
	for t.res.Iterations < opts.MaxIterations {
		t.res.Iterations++
		msg, argErrs, err := t.call(ctx, p, req)
		if msg != nil {
			req.Messages = append(req.Messages, *msg)
			if aerr := t.append(*msg); aerr != nil {
				return t.fail(aerr)
			}
		}
		calls := toolCalls(msg, argErrs)
		switch {
		case ctx.Err() != nil || (msg != nil && msg.StopReason == provider.StopAborted):
			results, aerr := t.unanswered(calls, "the turn was interrupted before this call ran")
			req.Messages = append(req.Messages, results...)
			if aerr != nil {
				return t.fail(aerr)
			}
			return t.end(EndCancelled, "")
		case err != nil:
			if _, aerr := t.unanswered(calls, "the reply failed before this call ran"); aerr != nil {
				return t.fail(aerr)
			}
			return t.fail(err)
		case len(calls) == 0:
			t.opts.Emit(Event{Type: EventIterationCompleted, Iteration: t.res.Iterations})
			return t.end(EndCompleted, "")
		}
		if reason := t.detectLoop(calls); reason != "" {
			results, aerr := t.unanswered(calls, "not run: "+reason)
			req.Messages = append(req.Messages, results...)
			if aerr != nil {
				return t.fail(aerr)
			}
			return t.end(EndLoop, reason)
		}
		results, ran, err := t.runBatch(ctx, calls)
		req.Messages = append(req.Messages, results...)
		if err != nil {
			return t.fail(err)
		}
		if reason := t.detectFailures(calls, results, ran); reason != "" {
			return t.end(EndLoop, reason)
		}
		t.opts.Emit(Event{Type: EventIterationCompleted, Iteration: t.res.Iterations,
			WillContinue: ctx.Err() == nil && t.res.Iterations < opts.MaxIterations})
		if ctx.Err() != nil {
			return t.end(EndCancelled, "")
		}
		if opts.Between != nil && t.res.Iterations < opts.MaxIterations {
			msgs, err := opts.Between(ctx, req.Messages)
			if err != nil {
				return t.fail(fmt.Errorf("agent: between iterations: %w", err))
			}
			req.Messages = msgs
		}
	}
	return t.end(EndMaxIterations, "")
}

func (t *turn) append(m provider.Message) error {
	if err := t.opts.Append(m); err != nil {
		return fmt.Errorf("agent: append: %w", err)
	}
	t.res.Messages = append(t.res.Messages, m)
	return nil
}

func (t *turn) end(end, reason string) (*Result, error) {
	t.res.End, t.res.Reason = end, reason
	t.opts.Emit(Event{Type: EventTurnEnded, End: end, Reason: reason, Iteration: t.res.Iterations})
	return t.res, nil
}

func (t *turn) fail(err error) (*Result, error) {
	t.res.End, t.res.Err = EndError, err
	t.opts.Emit(Event{Type: EventTurnEnded, End: EndError, Reason: err.Error(), Iteration: t.res.Iterations})
	return t.res, err
}

// call streams one model reply, relaying its events, and returns the assistant message (nil
// when nothing was received) with the argument errors of its calls by content index. Each call
// of the message has an id of its own (see callIDs), the same in its events.
func (t *turn) call(ctx context.Context, p provider.Provider, req provider.Request) (*provider.Message, map[int]string, error) {
	t.opts.Emit(Event{Type: EventStatus, Status: StatusConnecting})
	s, err := p.Stream(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("agent: model call: %w", err)
	}
	ids := callIDs{byIndex: map[int]string{}, used: map[string]bool{}}
	argErrs := map[int]string{}
	defer func() { _ = s.Close() }()
	responding := false
	for s.Next() {
		ev := s.Event()
		if !responding && ev.Type != provider.EventDone {
			responding = true
			t.opts.Emit(Event{Type: EventStatus, Status: StatusResponding})
		}
		switch ev.Type {
		case provider.EventTextDelta:
			t.opts.Emit(Event{Type: EventToken, Index: ev.Index, Content: ev.Delta})
		case provider.EventTextEnd:
			t.opts.Emit(Event{Type: EventToken, Index: ev.Index, Final: true})
		case provider.EventThinkingStart:
			t.opts.Emit(Event{Type: EventReasoningStarted, Index: ev.Index})
		case provider.EventThinkingDelta:
			if ev.Delta != "" {
				t.opts.Emit(Event{Type: EventReasoning, Index: ev.Index, Content: ev.Delta})
			}
		case provider.EventThinkingEnd:
			t.opts.Emit(Event{Type: EventReasoningEnded, Index: ev.Index})
		case provider.EventToolCallEnd:
			if ev.ToolCall != nil {
				c := *ev.ToolCall
				c.ID = ids.assign(ev.Index, c.ID)
				if c.ArgumentsError != "" {
					argErrs[ev.Index] = c.ArgumentsError
				}
				t.opts.Emit(Event{Type: EventToolDetected, Call: &c})
			}
		case provider.EventUsage:
			t.opts.Emit(Event{Type: EventUsage, Usage: ev.Usage})
		}
	}
	msg := s.Message()
	msg.Timestamp = t.opts.Now().UnixMilli()
	// The ids are settled before the message is recorded or any call runs, so the transcript,
	// the results and every later request agree on them.
	msg.Content = slices.Clone(msg.Content)
	for i := range msg.Content {
		if msg.Content[i].Type == provider.BlockToolCall {
			msg.Content[i].ID = ids.assign(i, msg.Content[i].ID)
		}
	}
	addUsage(&t.res.Usage, msg.Usage)
	t.opts.Emit(Event{Type: EventStatus, Status: StatusIdle})
	if err := s.Err(); err != nil && msg.StopReason != provider.StopAborted {
		return &msg, argErrs, fmt.Errorf("agent: model reply: %w", err)
	}
	return &msg, argErrs, nil
}

// callIDs gives each tool call of a reply an id no other call of the reply has. Some servers
// give two calls one id, or none; their results could not be told apart, and an API refuses
// a request holding them. A call keeps its id when it is the first with it (a Responses id
// "call_id|item_id" counts by its call part); the others get their call part (or "call") and
// a random suffix, so the new id is not met again in the conversation either.
type callIDs struct {
	byIndex map[int]string  // content index -> id given
	used    map[string]bool // call parts given
}

func (ids *callIDs) assign(index int, id string) string {
	if given, ok := ids.byIndex[index]; ok {
		return given
	}
	key, _, _ := strings.Cut(id, "|")
	if key == "" || ids.used[key] {
		base := key
		if base == "" {
			base = "call"
		}
		for key == "" || ids.used[key] {
			key = base + "_" + randomSuffix()
		}
		id = key
	}
	ids.used[key] = true
	ids.byIndex[index] = id
	return id
}

// randomSuffix is 8 random hex digits.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics instead)
	return hex.EncodeToString(b[:])
}

func addUsage(sum *provider.Usage, u provider.Usage) {
	sum.Input += u.Input
	sum.Output += u.Output
	sum.CacheRead += u.CacheRead
	sum.CacheWrite += u.CacheWrite
	sum.Reasoning += u.Reasoning
	sum.TotalTokens += u.TotalTokens
}

// toolCalls are the calls of an assistant message, with the argument errors of their end
// events by content index (arguments too large to keep say so on the block itself).
func toolCalls(msg *provider.Message, argErrs map[int]string) []provider.ToolCall {
	if msg == nil {
		return nil
	}
	var out []provider.ToolCall
	for i, c := range msg.Content {
		if c.Type == provider.BlockToolCall {
			tc := provider.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments, ArgumentsError: argErrs[i]}
			if c.ArgumentsTruncated != nil {
				tc.ArgumentsError = c.ArgumentsTruncated.Refusal()
			}
			out = append(out, tc)
		}
	}
	return out
}

// unanswered gives every call an error result that says why it did not run, so the
// transcript pairs every call.
func (t *turn) unanswered(calls []provider.ToolCall, why string) ([]provider.Message, error) {
	var out []provider.Message
	for _, c := range calls {
		m := t.result(c, Outcome{Output: why, IsError: true})
		if err := t.append(m); err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (t *turn) result(c provider.ToolCall, o Outcome) provider.Message {
	return provider.Message{Role: provider.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
		Content: []provider.Content{provider.Text(o.Output)}, IsError: o.IsError, Details: o.Details,
		Timestamp: t.opts.Now().UnixMilli()}
}

// parallel reports whether the model asked for the batch to run at once: a call whose
// arguments carry "_parallel": true.
func parallel(calls []provider.ToolCall) bool {
	for _, c := range calls {
		var a struct {
			Parallel bool `json:"_parallel"`
		}
		if json.Unmarshal(c.Arguments, &a) == nil && a.Parallel {
			return true
		}
	}
	return false
}

// runBatch runs a reply's calls and appends their results in call order. In order, the first
// failure halts the batch (the calls after it get a result saying so); at once, at most
// MaxConcurrent run together and every call runs.
func (t *turn) runBatch(ctx context.Context, calls []provider.ToolCall) ([]provider.Message, []bool, error) {
	par := len(calls) > 1 && parallel(calls)
	t.opts.Emit(Event{Type: EventBatchStarted, Calls: len(calls), Parallel: par})
	outcomes := make([]Outcome, len(calls))
	ran := make([]bool, len(calls))
	halted := -1
	if par {
		var wg sync.WaitGroup
		var emitMu sync.Mutex // Emit is called from one goroutine at a time
		sem := make(chan struct{}, t.opts.MaxConcurrent)
		for i := range calls {
			t.opts.Emit(Event{Type: EventToolStarted, Call: &calls[i]})
			ran[i] = true
		}
		for i := range calls {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				emit := func(ev Event) {
					emitMu.Lock()
					defer emitMu.Unlock()
					t.opts.Emit(ev)
				}
				outcomes[i] = t.runOne(ctx, &calls[i], emit)
				// Each call's end is told as it comes, not when the slowest ends.
				emit(Event{Type: EventToolCompleted, Call: &calls[i], Output: outcomes[i].Output, IsError: outcomes[i].IsError})
			})
		}
		wg.Wait()
	} else {
		for i := range calls {
			if ctx.Err() != nil {
				break
			}
			t.opts.Emit(Event{Type: EventToolStarted, Call: &calls[i]})
			outcomes[i], ran[i] = t.runOne(ctx, &calls[i], t.opts.Emit), true
			t.opts.Emit(Event{Type: EventToolCompleted, Call: &calls[i], Output: outcomes[i].Output, IsError: outcomes[i].IsError})
			if outcomes[i].IsError && i < len(calls)-1 {
				halted = i
				break
			}
		}
	}
	var out []provider.Message
	for i, c := range calls {
		o := outcomes[i]
		switch {
		case !ran[i] && halted >= 0:
			o = Outcome{Output: fmt.Sprintf("not run: call %s (%s) before it in the batch failed", calls[halted].ID, calls[halted].Name), IsError: true}
		case !ran[i]:
			o = Outcome{Output: "the turn was interrupted before this call ran", IsError: true}
		}
		m := t.result(c, o)
		if err := t.append(m); err != nil {
			return out, ran, err
		}
		out = append(out, m)
	}
	if halted >= 0 {
		t.opts.Emit(Event{Type: EventBatchHalted, Calls: len(calls), Reason: fmt.Sprintf("%s failed", calls[halted].Name)})
	} else {
		t.opts.Emit(Event{Type: EventBatchCompleted, Calls: len(calls), Parallel: par})
	}
	return out, ran, nil
}

// runOne runs a call (under ToolTimeout when one is set), reporting its progress through emit
// every ProgressInterval while it runs. Arguments the model did not send as a JSON object, or
// sent too large to keep, are an error result, not a run.
func (t *turn) runOne(ctx context.Context, c *provider.ToolCall, emit func(Event)) Outcome {
	if c.ArgumentsError != "" {
		return Outcome{Output: c.ArgumentsError, IsError: true}
	}
	if t.tools == nil {
		return Outcome{Output: "no tools are available", IsError: true}
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(c.Arguments, &probe); err != nil {
		return Outcome{Output: "the arguments are not a JSON object: " + err.Error(), IsError: true}
	}
	cctx := ctx
	if t.opts.ToolTimeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, t.opts.ToolTimeout)
		defer cancel()
	}
	o := t.watch(cctx, c, emit)
	if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return Outcome{Output: fmt.Sprintf("timed out after %s", t.opts.ToolTimeout), IsError: true}
	}
	if ctx.Err() != nil && !o.IsError {
		o.IsError = true
		o.Output = "interrupted: " + o.Output
	}
	return o
}

// startsItself is a Tools that marks when a call starts to run (tools.Progress.Start), after
// its confirmation: a Toolset.
type startsItself interface{ marksStart() }

// watch runs the call, and while it runs emits a progress event every ProgressInterval: the
// time since it started to run (none while it waits for the user) and its output's tail.
func (t *turn) watch(ctx context.Context, c *provider.ToolCall, emit func(Event)) Outcome {
	if t.opts.ProgressInterval < 0 {
		return t.tools.Run(ctx, *c)
	}
	p := &tools.Progress{}
	if _, ok := t.tools.(startsItself); !ok {
		p.Start(time.Now())
	}
	done := make(chan Outcome, 1)
	go func() { done <- t.tools.Run(tools.WithProgress(ctx, p), *c) }()
	tick := time.NewTicker(t.opts.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case o := <-done:
			return o
		case now := <-tick.C:
			if started, tail := p.Snapshot(); !started.IsZero() {
				emit(Event{Type: EventToolProgress, Call: c, Elapsed: now.Sub(started), Output: tail})
			}
		}
	}
}

// signature names a call by its tool and arguments (compacted, so spacing does not matter).
func signature(c provider.ToolCall) string {
	var v any
	if err := json.Unmarshal(c.Arguments, &v); err == nil {
		if b, err := json.Marshal(v); err == nil {
			return c.Name + " " + string(b)
		}
	}
	return c.Name + " " + string(c.Arguments)
}

// detectLoop records a reply's calls and says what repeats, if anything does.
func (t *turn) detectLoop(calls []provider.ToolCall) string {
	for _, c := range calls {
		sig := signature(c)
		t.seen[sig]++
		t.history = append(t.history, sig)
		if t.seen[sig] >= repeatLimit {
			return fmt.Sprintf("the same call (%s) %d times", c.Name, t.seen[sig])
		}
	}
	h := t.history
	for k := 2; k <= maxCycle; k++ {
		if len(h) < 2*k {
			break
		}
		cycle := true
		for i := range k {
			if h[len(h)-k+i] != h[len(h)-2*k+i] {
				cycle = false
				break
			}
		}
		if cycle {
			return fmt.Sprintf("a cycle of %d calls repeated", k)
		}
	}
	return ""
}

// detectFailures counts each tool's consecutive failures among the calls that ran.
func (t *turn) detectFailures(calls []provider.ToolCall, results []provider.Message, ran []bool) string {
	for i, c := range calls {
		if i >= len(results) || !ran[i] {
			continue
		}
		if results[i].IsError {
			t.failures[c.Name]++
			if t.failures[c.Name] >= failureLimit {
				return fmt.Sprintf("%s failed %d times in a row", c.Name, t.failures[c.Name])
			}
		} else {
			t.failures[c.Name] = 0
		}
	}
	return ""
}
