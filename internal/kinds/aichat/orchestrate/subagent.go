package orchestrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/google/uuid"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
)

// SubagentLimits bound spawning (docs/ai-chat.md, Subagents).
type SubagentLimits struct {
	// MaxDepth is how deep subagents may nest (default 3: a subagent's subagent's subagent).
	MaxDepth int
	// MaxChildren is how many subagents one conversation may have running (default 5).
	MaxChildren int
	// MaxRunning is how many subagents may run at once in the gateway (default 16).
	MaxRunning int
	// MaxRuns is how many subagents one conversation may start in any Window (defaults 30
	// and 10 minutes): six rounds of MaxChildren, more than a manager handing out real work
	// starts (a run is minutes of model calls), while a model that spawns at every
	// announcement is stopped after 30 runs instead of running until its budget is gone.
	MaxRuns int
	Window  time.Duration
	// RunTimeout is how long a run may take, from its start to its child's answer (default
	// 1 hour: a run does real work, builds and test suites of minutes each, while a child
	// that never answers, a hung model or an unanswered confirmation, still ends). Past it
	// the child's turn is interrupted and the run ends as timeout, announced to the parent.
	RunTimeout time.Duration
}

// runInterruptGrace is how long a timed-out run waits for its interrupted turn to end before
// it closes the child's session anyway.
const runInterruptGrace = 30 * time.Second

// limits are the kind's own limits, config.toml's [subagents] where the kind sets none, then
// the defaults.
func (k *Orchestrator) limits(cfg provider.Subagents) SubagentLimits {
	l := k.Limits
	window, runTimeout, _ := cfg.Durations() // checked when config.toml was read
	for _, f := range []struct {
		dst *int
		v   int
	}{{&l.MaxDepth, cfg.MaxDepth}, {&l.MaxChildren, cfg.MaxChildren}, {&l.MaxRunning, cfg.MaxRunning}, {&l.MaxRuns, cfg.MaxRuns}} {
		if *f.dst <= 0 {
			*f.dst = f.v
		}
	}
	if l.Window <= 0 {
		l.Window = window
	}
	if l.RunTimeout <= 0 {
		l.RunTimeout = runTimeout
	}
	return l.withDefaults()
}

func (l SubagentLimits) withDefaults() SubagentLimits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = 3
	}
	if l.MaxChildren <= 0 {
		l.MaxChildren = 5
	}
	if l.MaxRunning <= 0 {
		l.MaxRunning = 16
	}
	if l.MaxRuns <= 0 {
		l.MaxRuns = 30
	}
	if l.Window <= 0 {
		l.Window = 10 * time.Minute
	}
	if l.RunTimeout <= 0 {
		l.RunTimeout = time.Hour
	}
	return l
}

// check refuses a new run of requester when the runs recorded (all of them, ended or not)
// reach a limit. now is the new run's start.
func (l SubagentLimits) check(runs []chatstore.SubagentRunRecord, requester string, now time.Time) error {
	if d := depth(runs, requester, l.MaxDepth); d >= l.MaxDepth {
		return fmt.Errorf("refused: this conversation is a subagent at depth %d, the most is %d", d, l.MaxDepth)
	}
	since := now.Add(-l.Window).UnixMilli()
	mine, running, recent := 0, 0, 0
	oldest := now.UnixMilli()
	for _, r := range runs {
		if r.EndedAt == 0 {
			running++
			if r.RequesterSessionKey == requester {
				mine++
			}
		}
		if r.RequesterSessionKey == requester && r.CreatedAt > since {
			recent++
			oldest = min(oldest, r.CreatedAt)
		}
	}
	switch {
	case mine >= l.MaxChildren:
		return abi.Errorf(abi.CodeLimitExceeded, "", "%d subagents of this conversation are running, the most is %d; wait for one to announce", mine, l.MaxChildren)
	case running >= l.MaxRunning:
		return abi.Errorf(abi.CodeLimitExceeded, "", "%d subagents are running in the gateway, the most is %d; wait for one to end", running, l.MaxRunning)
	case recent >= l.MaxRuns:
		next := time.UnixMilli(oldest).Add(l.Window).Sub(now).Round(time.Second)
		return abi.Errorf(abi.CodeLimitExceeded, "", "this conversation started %d subagents in the last %s, the most is %d; the next may start in %s", recent, l.Window, l.MaxRuns, next)
	}
	return nil
}

// depth is how many subagent levels a session key is below a top-level conversation: by the
// run records, from child to requester (a subagent's key does not nest its parent's), or by
// the key itself for keys written nested, whichever is deeper. The walk stops past limit, so
// a cycle in the records cannot loop.
func depth(runs []chatstore.SubagentRunRecord, key string, limit int) int {
	requester := make(map[string]string, len(runs))
	for _, r := range runs {
		requester[r.ChildSessionKey] = r.RequesterSessionKey
	}
	d := 0
	for k, ok := requester[key]; ok && d <= limit; k, ok = requester[k] {
		d++
	}
	return max(d, strings.Count(key, ":subagent:"))
}

// spawnTool is sessions_spawn: it starts a child conversation that works on a task in the
// background and announces its result into this one.
type spawnTool struct{ b *binding }

type spawnArgs struct {
	Task    string `json:"task"`
	Label   string `json:"label,omitempty"`
	Cleanup string `json:"cleanup,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Level   string `json:"level,omitempty"`
}

func (spawnTool) Spec() tools.Spec {
	str := func(desc string) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Description: desc} }
	cleanup := str("delete (default): archive the subagent's conversation once its result is announced; keep: leave it")
	cleanup.Enum = []any{"delete", "keep"}
	level := str("its permission level, no higher than yours: yolo, trusted or sandboxed (default: yours)")
	level.Enum = []any{"yolo", "trusted", "sandboxed"}
	task := str("what the subagent should do; it starts with this and nothing else of this conversation")
	task.MinLength = ptrInt(1)
	return tools.Spec{
		Name: "sessions_spawn",
		Description: "Start a subagent: a separate conversation that works on a task in the background, with the same workspace. " +
			"It returns at once with the run's id; when the subagent finishes, its answer arrives in this conversation as a message.",
		Schema: &jsonschema.Schema{Type: "object", Required: []string{"task"}, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
			Properties: map[string]*jsonschema.Schema{
				"task":    task,
				"label":   str("a short name for the run (shown with its result)"),
				"cleanup": cleanup,
				"agent":   str("a configured agent to run as (nexus agent list; default: yours)"),
				"level":   level,
			}},
	}
}

func ptrInt(n int) *int { return &n }

// replyKey carries the transcript entry id of the assistant message whose tool calls run
// (set by the turn as each reply is recorded), for sessions_spawn's parentMessageId.
type replyKey struct{}

type replyRef struct {
	mu sync.Mutex
	id string
}

// WithReply is ctx for a turn's tool calls, and the setter the turn calls with each reply's
// transcript entry id as it records it: a subagent spawned by the reply's calls names it.
func WithReply(ctx context.Context) (context.Context, func(entryID string)) {
	r := &replyRef{}
	return context.WithValue(ctx, replyKey{}, r), r.set
}

func (r *replyRef) set(id string) {
	r.mu.Lock()
	r.id = id
	r.mu.Unlock()
}

// replyOf is the entry id of the reply whose calls run in ctx, "" outside a turn (a spawn
// from the CLI).
func replyOf(ctx context.Context) string {
	r, _ := ctx.Value(replyKey{}).(*replyRef)
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

func (t spawnTool) Run(ctx context.Context, raw json.RawMessage) (tools.Result, error) {
	var a spawnArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return tools.Result{}, fmt.Errorf("arguments: %w", err)
	}
	out, err := t.b.caller().spawn(ctx, a, agent.CallID(ctx))
	if err != nil {
		return tools.Result{Output: err.Error(), IsError: true}, nil //nolint:nilerr // the model reads why
	}
	b, _ := json.Marshal(out)
	return tools.Result{Output: string(b)}, nil
}

// Spawn starts a subagent of self's conversation from outside its turns (the spawn command),
// as sessions_spawn would.
func (k *Orchestrator) Spawn(ctx context.Context, self Self, sp abi.SpawnRequest) (map[string]any, error) {
	return (&caller{k: k, Self: self}).spawn(ctx, spawnArgs{Task: sp.Task, Label: sp.Label, Cleanup: sp.Cleanup, Agent: sp.Agent, Level: sp.Level}, "")
}

// spawn checks the limits and records the run in one transaction (so parallel spawns cannot
// pass a limit together), creates the child conversation bounded by this one's powers, and
// starts it.
func (c *caller) spawn(ctx context.Context, a spawnArgs, callID string) (map[string]any, error) {
	k := c.k
	lim := k.limits(c.Subagents)
	if k.Sessions == nil || k.Runs == nil || k.Broker == nil {
		return nil, errors.New("subagents are not available in this gateway")
	}
	level := c.Level
	if a.Level != "" {
		l, err := permission.ParseLevel(a.Level)
		if err != nil {
			return nil, err //nolint:wrapcheck // the text names the level
		}
		if !c.Level.Allows(l) {
			return nil, fmt.Errorf("refused: level %s is higher than this conversation's (%s)", l, c.Level)
		}
		level = l
	}
	agentID := firstOf(a.Agent, c.Agent)
	prof, err := profile.Load(k.StateDir, agentID)
	if err != nil {
		return nil, err //nolint:wrapcheck // the text names the agent
	}
	agentLevel, err := levelOf(prof)
	if err != nil {
		return nil, err
	}
	// The child's powers: this conversation's, at the level asked for, bounded by its agent's
	// (whose own level bounds it only when the agent sets one); it works in this workspace.
	mine := c.Powers.inherited(c.Key)
	mine.Level = level
	theirs := OwnPowers(prof, agentLevel, c.Workspace)
	theirs.Workspace = ""
	powers := mine.Bound(theirs)
	cleanup := firstOf(a.Cleanup, "delete")
	runID := uuid.NewString()
	childKey := "agent:" + agentID + ":subagent:" + runID
	now := k.now()
	parentMessage := replyOf(ctx)
	reqOrigin := requesterOrigin(c.Origin)
	rec := chatstore.SubagentRunRecord{RunID: runID, ChildSessionKey: childKey, RequesterSessionKey: c.Key, Task: a.Task,
		Cleanup: cleanup, Label: a.Label, CreatedAt: now.UnixMilli(), StartedAt: now.UnixMilli(),
		ToolCallID: callID, ParentMessageID: parentMessage, RequesterOrigin: reqOrigin}
	rawPowers, err := json.Marshal(powers)
	if err != nil {
		return nil, fmt.Errorf("subagents: %w", err)
	}
	rec.Extra = map[string]json.RawMessage{PowersField: rawPowers}
	if err := k.Runs.PutChecked(ctx, rec, func(runs []chatstore.SubagentRunRecord) error {
		return lim.check(runs, c.Key, now)
	}); err != nil {
		return nil, err //nolint:wrapcheck // a refusal is the check's own text; a store error names runs.json
	}
	fail := func(err error) (map[string]any, error) {
		k.endRun(context.WithoutCancel(ctx), rec, chatstore.OutcomeError, "could not start: "+err.Error(), "")
		return nil, fmt.Errorf("the subagent could not start: %w", err)
	}
	fields := map[string]any{
		"spawnedBy": c.Key, "parentSessionId": c.SessionID, "parentMessageId": parentMessage, "toolCallId": callID,
		"taskDescription": a.Task, "taskStatus": "running", "isSubagent": true, "label": a.Label, "project": c.Workspace,
		"isAgentic": true, PowersField: powers,
	}
	if reqOrigin != nil {
		fields[RequesterOriginField] = reqOrigin
	}
	h, err := k.Chats.Hold(ctx, childKey, conversation.HoldOptions{Cwd: c.Workspace, ParentSession: c.Transcript, Fields: fields})
	if err != nil && a.Label != "" && errors.Is(err, chatstore.ErrLabelConflict) {
		// A label names one conversation of the store: another run's "worker" keeps its
		// own, this one gets the label with its run's id.
		fields["label"] = a.Label + "#" + runID[:8]
		h, err = k.Chats.Hold(ctx, childKey, conversation.HoldOptions{Cwd: c.Workspace, ParentSession: c.Transcript, Fields: fields})
	}
	if err != nil {
		return fail(err)
	}
	childSession := h.SessionID
	patched, err := k.Runs.Patch(ctx, runID, map[string]any{"childSessionId": childSession})
	if err != nil {
		_ = h.Close()
		return fail(err)
	}
	rec = patched
	if err := h.Close(); err != nil {
		return fail(err)
	}
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: c.Backend, Model: c.Model, Agent: agentID, Level: string(powers.Level),
		Workspace: c.Workspace, Temperature: c.Temperature})
	s, err := k.Sessions.Create(context.WithoutCancel(ctx), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: childKey, RoadmapID: c.Roadmap}, Options: opts})
	if err == nil {
		_, err = k.Sessions.Send(context.WithoutCancel(ctx), s.SessionID, live.SendRequest{Data: []byte(a.Task), Mode: "followup", Origin: abi.Origin{Kind: abi.OriginAgent, ID: c.Key}})
	}
	if err != nil {
		return fail(err)
	}
	c.Publish(abi.AISubagent{Type: abi.PayloadAISubagent, Phase: abi.PhaseStarted, RunID: runID, ChildSessionKey: childKey, SessionID: s.SessionID, Label: a.Label, Task: a.Task})
	go k.watchRun(context.WithoutCancel(ctx), rec, s.SessionID, lim.RunTimeout)
	return map[string]any{"runId": runID, "childSessionKey": childKey, "childSessionId": childSession, "sessionId": s.SessionID, "status": "started",
		"note": "the subagent works in the background; its result will arrive here as a message"}, nil
}

// watchRun waits for the child's turn to end, then announces its result to the requester
// and closes the child's session. A run past the limits' RunTimeout has its turn interrupted
// and ends as timeout.
// ctx outlives the spawning call (the run goes on after the tool returned).
func (k *Orchestrator) watchRun(ctx context.Context, rec chatstore.SubagentRunRecord, sessionID string, limit time.Duration) {
	reading, stop := context.WithCancel(ctx)
	defer stop()
	var late atomic.Bool
	timer := time.AfterFunc(limit, func() {
		late.Store(true)
		stop()
	})
	defer timer.Stop()
	var after uint64
	for {
		b, err := k.Sessions.Read(reading, sessionID, after, 0, time.Minute)
		if err != nil && late.Load() && ctx.Err() == nil {
			k.timeoutRun(ctx, rec, sessionID, after, limit)
			return
		}
		if err != nil {
			k.endRun(ctx, rec, chatstore.OutcomeError, "the subagent's session: "+err.Error(), "")
			return
		}
		if end, ok := turnEnd(b.Events); ok {
			outcome, why := chatstore.OutcomeOK, ""
			if end.End != abi.TurnCompleted {
				outcome, why = chatstore.OutcomeError, strings.TrimSpace(end.End+" "+end.Reason)
			}
			k.endRun(ctx, rec, outcome, why, runStats(end))
			_, _ = k.Sessions.Close(ctx, sessionID, abi.CloseRequested)
			return
		}
		if b.Done {
			k.endRun(ctx, rec, chatstore.OutcomeError, "the subagent's session closed before it answered", "")
			return
		}
		after = b.Next
	}
}

// timeoutRun ends a run past its time: the child's turn is interrupted (what it said so far
// is kept, and announced), the run recorded as timeout, and its session closed.
func (k *Orchestrator) timeoutRun(ctx context.Context, rec chatstore.SubagentRunRecord, sessionID string, after uint64, limit time.Duration) {
	k.logger().Info("subagent run timed out", "run", rec.RunID, "limit", limit)
	stats := ""
	if _, err := k.Sessions.Control(ctx, sessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err == nil {
		// The interrupted turn ends at once (an interrupt answers every call); a child that
		// does not is closed below all the same.
		wait, cancel := context.WithTimeout(ctx, runInterruptGrace)
		for wait.Err() == nil {
			b, err := k.Sessions.Read(wait, sessionID, after, 0, runInterruptGrace)
			if err != nil {
				break
			}
			if end, ok := turnEnd(b.Events); ok {
				stats = runStats(end)
				break
			}
			if b.Done {
				break
			}
			if turnStarted(b.Events) {
				// The task's turn started after the interrupt (the run timed out before it
				// began): that one is interrupted too.
				_, _ = k.Sessions.Control(ctx, sessionID, abi.ControlRequest{Command: abi.CommandInterrupt})
			}
			after = b.Next
		}
		cancel()
	}
	// Closed first: a turn the interrupt did not end must not hold the transcript the run's
	// end is written to.
	_, _ = k.Sessions.Close(ctx, sessionID, abi.CloseRequested)
	k.endRun(ctx, rec, chatstore.OutcomeTimeout, fmt.Sprintf("no answer within %s; its turn was interrupted", limit), stats)
}

// turnEnd is the first turn-ended event among events.
func turnEnd(events []*live.Event) (abi.AITurn, bool) {
	for _, e := range events {
		if p, ok := e.Payload.(abi.AITurn); ok && p.Phase == abi.PhaseEnded {
			return p, true
		}
	}
	return abi.AITurn{}, false
}

func turnStarted(events []*live.Event) bool {
	for _, e := range events {
		if p, ok := e.Payload.(abi.AITurn); ok && p.Phase == abi.PhaseStarted {
			return true
		}
	}
	return false
}

func runStats(end abi.AITurn) string {
	return fmt.Sprintf("%d model calls, %d tokens", end.Iterations, usageTotal(end.Usage))
}

func usageTotal(u *abi.AIUsage) int {
	if u == nil {
		return 0
	}
	return u.Total
}

// endRun records the run's end and announces it (once: the announcement's id is the run's).
func (k *Orchestrator) endRun(ctx context.Context, rec chatstore.SubagentRunRecord, outcome chatstore.RunOutcome, why, stats string) {
	if rec.EndedAt == 0 {
		patch := map[string]any{"endedAt": k.now().UnixMilli(), "outcome": chatstore.SubagentOutcome{Status: outcome, Error: why}}
		if rec.Cleanup == "delete" {
			patch["archiveAtMs"] = k.now().UnixMilli()
		}
		if r, err := k.Runs.Patch(ctx, rec.RunID, patch); err == nil {
			rec = r
		} else {
			k.logger().Warn("subagent run", "run", rec.RunID, "err", err)
		}
		status := "completed"
		if outcome != chatstore.OutcomeOK {
			status = "failed"
		}
		if err := k.Chats.SetTaskStatus(ctx, rec.ChildSessionKey, status); err != nil {
			k.logger().Warn("subagent run: the child's task status", "run", rec.RunID, "err", err)
		}
		k.recordRunEnd(ctx, rec)
	}
	k.announce(ctx, rec, stats)
}

// RunEndCustomType is the custom entry that ends a subagent's transcript with its run's
// outcome (after sessions.json and runs.json say it): a reader of the file alone, and the
// history index, which reads a file again when it grows, see how the run ended.
const RunEndCustomType = "nexus.subagent.end"

// recordRunEnd appends the run's end to the child's transcript, once there is one.
func (k *Orchestrator) recordRunEnd(ctx context.Context, rec chatstore.SubagentRunRecord) {
	if rec.ChildSessionID == "" || rec.Outcome == nil {
		return // it never started: there is no conversation to write to
	}
	// Hold creates a key it does not find: a child destroyed (archived) meanwhile is not
	// brought back.
	if sh, err := k.Chats.Show(ctx, rec.ChildSessionKey); err != nil || sh.Entry.SessionID != rec.ChildSessionID {
		return
	}
	// Bounded: a writer that never lets go (a turn that did not end) costs this record, not
	// the announcement after it.
	hctx, cancel := context.WithTimeout(ctx, runInterruptGrace)
	defer cancel()
	h, err := k.Chats.Hold(hctx, rec.ChildSessionKey, conversation.HoldOptions{})
	if err != nil {
		k.logger().Warn("subagent run: the child's transcript", "run", rec.RunID, "err", err)
		return
	}
	defer func() { _ = h.Close() }()
	if h.SessionID != rec.ChildSessionID {
		return // the conversation was reset since: that session is not the run's
	}
	if _, err := h.AppendCustom(RunEndCustomType, map[string]any{"runId": rec.RunID, "outcome": rec.Outcome, "endedAt": rec.EndedAt}); err != nil {
		k.logger().Warn("subagent run: the child's transcript", "run", rec.RunID, "err", err)
	}
}

// AnnouncePrefix starts every subagent announcement.
const AnnouncePrefix = "[subagent"

// announce puts the run's result in the requester's queue, at most once, and archives a
// delete child. It is retried at the next start when it fails (SweepRuns).
func (k *Orchestrator) announce(ctx context.Context, rec chatstore.SubagentRunRecord, stats string) {
	id := "announce_" + rec.RunID
	if done, err := k.Broker.Has(ctx, id); err != nil || done {
		return
	}
	status := "completed"
	switch {
	case rec.Outcome == nil || rec.Outcome.Status == chatstore.OutcomeOK:
	case rec.Outcome.Status == chatstore.OutcomeTimeout:
		status = "timed out: " + rec.Outcome.Error
	default:
		status = "failed: " + rec.Outcome.Error
	}
	answer := k.lastAnswer(ctx, rec.ChildSessionKey)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", AnnouncePrefix, firstOf(rec.Label, rec.RunID))
	fmt.Fprintf(&b, " %s] task: %s", status, Clip(rec.Task, 500))
	if stats != "" {
		fmt.Fprintf(&b, " (%s)", stats)
	}
	b.WriteString("\n\n")
	if answer == "" {
		answer = "(no answer)"
	}
	b.WriteString(Clip(answer, 64<<10))
	fresh, err := k.Broker.Announce(ctx, id, rec.RequesterSessionKey, b.String(), "subagent:"+rec.RunID, rec.RunID)
	if err != nil {
		k.logger().Warn("subagent announce", "run", rec.RunID, "err", err)
		return
	}
	if fresh {
		k.Host.Wake(rec.RequesterSessionKey)
	}
	if rec.Cleanup == "delete" {
		if _, err := k.Chats.Archive(ctx, rec.ChildSessionKey); err != nil {
			k.logger().Warn("subagent cleanup", "run", rec.RunID, "err", err)
		}
	}
}

// lastAnswer is the text of the child conversation's last assistant message.
func (k *Orchestrator) lastAnswer(ctx context.Context, key string) string {
	h, err := k.Chats.History(ctx, key, conversation.HistoryOptions{})
	if err != nil {
		return ""
	}
	defer func() { _ = h.Close() }()
	var last string
	for raw, err := range h.Messages {
		if err != nil {
			break
		}
		msgs, err := provider.FromContext([]json.RawMessage{raw})
		if err != nil || len(msgs) == 0 || msgs[0].Role != provider.RoleAssistant {
			continue
		}
		var t strings.Builder
		for _, c := range msgs[0].Content {
			if c.Type == provider.BlockText {
				t.WriteString(c.Text)
			}
		}
		if t.Len() > 0 {
			last = t.String()
		}
	}
	return last
}

// SweepRuns finishes what a previous gateway left: runs whose child died with it are ended as
// failed, and ended runs not yet announced are announced. The kind runs it once.
func (k *Orchestrator) SweepRuns(ctx context.Context) {
	if k.Runs == nil || k.Broker == nil {
		return
	}
	runs, err := k.Runs.List(chatstore.SubagentFilter{})
	if err != nil {
		k.logger().Warn("subagent sweep", "err", err)
		return
	}
	for _, r := range runs {
		if r.EndedAt == 0 {
			k.endRun(ctx, r, chatstore.OutcomeError, "the gateway stopped while it ran", "")
			continue
		}
		k.announce(ctx, r, "")
	}
}
