package aichat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat/orchestrate"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/transcript"
)

// MessageIDsField is the transcript entry field holding the queued messages a user message
// delivers (pi ignores fields it does not know).
const MessageIDsField = "nexusMessageIds"

// CollectOptions tune the collect mode.
type CollectOptions struct {
	// Debounce is how long no collect message must have come before the batch is delivered
	// (default 500 ms).
	Debounce time.Duration
	// Cap is the most messages of one batch (default 20); Drop says which go beyond it:
	// old (the oldest, default), new (the newest) or summarize (the oldest, named in a line
	// that replaces them).
	Cap  int
	Drop string
}

// Drop policies.
const (
	DropOld       = "old"
	DropNew       = "new"
	DropSummarize = "summarize"
)

func (o CollectOptions) withDefaults() CollectOptions {
	if o.Debounce <= 0 {
		o.Debounce = 500 * time.Millisecond
	}
	if o.Cap <= 0 {
		o.Cap = 20
	}
	if o.Drop == "" {
		o.Drop = DropOld
	}
	return o
}

// enqueue stores a message durably, then wakes the pump; a steering mode aborts the running
// turn first (its unrun calls are answered, so the transcript stays paired).
func (c *chat) enqueue(ctx context.Context, req live.SendRequest) (live.SendResult, error) {
	mode := c.queueMode
	if req.Mode != "" {
		m, err := broker.ParseMode(req.Mode)
		if err != nil {
			return live.SendResult{}, err
		}
		mode = m
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return live.SendResult{}, abi.Errorf(abi.CodeSessionClosed, c.sink.SessionID(), "the session is closing")
	}
	m, err := c.k.store(ctx, "", c.key, mode, string(req.Data), "", sendOrigin(req.Origin))
	if err != nil {
		var ae *abi.Error
		if errors.As(err, &ae) && ae.SessionID == "" {
			return live.SendResult{}, &abi.Error{Code: ae.Code, SessionID: c.sink.SessionID(), Message: ae.Message, Err: ae.Err}
		}
		return live.SendResult{}, err
	}
	c.sink.Publish(abi.EventData, abi.AIQueue{Type: abi.PayloadAIQueue, Phase: abi.QueueQueued, MessageIDs: []string{m.ID}, Mode: string(mode)})
	if len(m.Cleared) > 0 {
		c.sink.Publish(abi.EventData, abi.AIQueue{Type: abi.PayloadAIQueue, Phase: abi.QueueCleared, MessageIDs: m.Cleared, Reason: "cleared by the interrupt " + m.ID})
	}
	// The key's deliverer (this session, or the newest other one on the key) takes it.
	host{c.k}.Wake(c.key)
	return live.SendResult{MessageID: m.ID}, nil
}

// store puts a message of the mode in key's queue (once under id, when set), as the mode says
// for the conversation's state: a reject message is refused (BUSY) while an activity runs or
// messages wait; a steer-backlog steers only a running turn (else it waits its turn, once,
// like a followup); a rollback names a message of the turn it aborts. A steering message then
// aborts the turn.
func (k *Kind) store(ctx context.Context, id, key string, mode broker.Mode, text, from string, origin abi.Origin) (broker.Message, error) {
	running, turn := k.busy(key)
	o := broker.EnqueueOptions{ID: id, Origin: origin}
	switch mode {
	case broker.Reject:
		if running {
			return broker.Message{}, errBusy()
		}
		o.IfIdle = true
	case broker.SteerBacklog:
		o.Steer = running
	case broker.Rollback:
		if running && len(turn) > 0 {
			o.RollsBack = turn[0]
		}
	}
	m, err := k.Broker.EnqueueWith(ctx, key, mode, text, from, o)
	if err != nil || m.Duplicate {
		return m, err
	}
	if mode == broker.Reject {
		// A turn (or a compaction) may have started between the check and the store: unless it
		// took this very message, the message is refused after all. A pump woken by the turn
		// before can read the queue as this message lands and start a turn with it: that turn
		// runs it, so it is not refused (it was, while the turn went on with it: BUSY for a
		// message that was delivered, TestQueueReject once in CI).
		if running, turn := k.busy(key); running && !slices.Contains(turn, m.ID) {
			refused, err := k.Broker.Refuse(context.WithoutCancel(ctx), m.ID, "refused: the conversation became busy as it was stored")
			if err != nil {
				return broker.Message{}, err
			}
			if refused {
				return broker.Message{}, errBusy()
			}
		}
	}
	if mode.Aborts() || o.Steer {
		// Whichever session on the key runs the turn, the steering message ends it.
		host{k}.Interrupt(key)
	}
	return m, nil
}

func errBusy() error {
	return abi.Errorf(abi.CodeBusy, "", "the conversation is busy: a turn is running (queue mode reject refuses a message until it ends; send it with another mode to queue it)")
}

// busy reports whether an activity (a turn, a compaction) runs on key, and the queued
// messages the running turn delivers.
func (k *Kind) busy(key string) (running bool, turn []string) {
	k.onKey(key, func(c *chat) {
		c.mu.Lock()
		if c.running {
			running = true
			if k.delivering[key] == c {
				turn = c.turnIDs
			}
		}
		c.mu.Unlock()
	})
	return running, turn
}

// wake asks the pump to look at the queue.
func (c *chat) wake() {
	if c.wakeCh == nil {
		return
	}
	select {
	case c.wakeCh <- struct{}{}:
	default:
	}
}

// pump delivers the conversation's queued messages, one turn at a time, until the session
// ends.
func (c *chat) pump() {
	var timer *time.Timer
	for {
		select {
		case <-c.base.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-c.wakeCh:
		}
		c.mu.Lock()
		busy := c.running || c.closed || c.paused
		c.mu.Unlock()
		if busy {
			continue
		}
		if !c.k.isOwner(c) {
			// Another session on the key delivers its queue.
			c.closeIfDone()
			continue
		}
		// A turn a gateway restart interrupted is answered before anything queued since.
		if c.k.pendingContinue(c.key) && c.k.claim(c) {
			took := c.k.takeContinue(c.key) // the kind's lock before c.mu, as everywhere
			c.mu.Lock()
			if c.running || c.closed || !took {
				c.mu.Unlock()
				if took {
					c.k.markContinue(c.key)
				}
				c.k.unclaim(c)
				continue
			}
			c.turnIDs = nil
			c.startTurnLocked("", nil, true)
			c.mu.Unlock()
			continue
		}
		text, ids, wait, err := c.next(c.base)
		if err != nil {
			c.turnError(err)
			continue
		}
		if wait > 0 {
			if timer != nil {
				timer.Stop()
			}
			timer = time.AfterFunc(wait, c.wake)
			continue
		}
		if len(ids) == 0 {
			c.closeIfDone()
			continue
		}
		if !c.k.claim(c) {
			continue
		}
		c.mu.Lock()
		if c.running || c.closed {
			c.mu.Unlock()
			c.k.unclaim(c)
			continue
		}
		c.turnIDs = ids
		c.startLocked(text, ids)
		c.mu.Unlock()
	}
}

// next is the next turn's text and messages, or how long a collect batch must still wait.
// Messages the transcript already has (a restart between its append and the broker's
// record) are marked delivered and skipped.
func (c *chat) next(ctx context.Context) (string, []string, time.Duration, error) {
	for {
		q, err := c.k.Broker.Queued(ctx, c.key)
		if err != nil || len(q) == 0 {
			return "", nil, 0, err
		}
		if c.recheck.Load() {
			found, err := c.inTranscript(ctx, ids(q))
			if err != nil {
				return "", nil, 0, err
			}
			for id, entry := range found {
				if err := c.k.Broker.Delivered(ctx, []string{id}, entry); err != nil {
					return "", nil, 0, err
				}
			}
			// Within this process a delivered message is recorded as such right after its
			// entry: the transcript need not be read again for every turn.
			c.recheck.Store(false)
			if len(found) > 0 {
				continue
			}
		}
		plan := planCollect(q, c.k.now(), c.k.Collect.withDefaults())
		if plan.wait > 0 {
			return "", nil, plan.wait, nil
		}
		if len(plan.dropped) > 0 {
			if err := c.k.Broker.Drop(ctx, ids(plan.dropped), plan.dropReason); err != nil {
				return "", nil, 0, err
			}
			c.sink.Publish(abi.EventData, abi.AIQueue{Type: abi.PayloadAIQueue, Phase: abi.QueueDropped, MessageIDs: ids(plan.dropped), Reason: plan.dropReason})
		}
		return plan.text, ids(plan.deliver), 0, nil
	}
}

func ids(ms []broker.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// inTranscript returns which of the queued messages a user entry of the conversation already
// carries, with the entry's id: delivered by a process that stopped before it could record it.
func (c *chat) inTranscript(ctx context.Context, queued []string) (map[string]string, error) {
	h, err := c.k.Chats.Hold(ctx, c.key, conversation.HoldOptions{Cwd: c.workspace, Lease: c.heldLease()})
	if err != nil {
		return nil, err
	}
	defer func() { _ = h.Close() }()
	f := h.File()
	found := map[string]string{}
	// Only the newest entries can hold them: they were appended just before a crash.
	for i := len(f.Entries) - 1; i >= 0 && i >= len(f.Entries)-256; i-- {
		e := f.Entries[i]
		if e.Type != "message" || e.Role != "user" {
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			return nil, fmt.Errorf("read transcript: %w", err)
		}
		for _, id := range queued {
			if strings.Contains(string(raw), `"`+id+`"`) {
				found[id] = e.ID
			}
		}
	}
	return found, nil
}

// collectPlan is what the queue's head gives the next turn.
type collectPlan struct {
	deliver    []broker.Message
	dropped    []broker.Message
	dropReason string
	text       string
	wait       time.Duration
}

// planCollect picks the next turn's messages from the queue q (in delivery order): the head
// alone, unless it is a collect message; then the run of collect messages at the head, once
// none has come for the debounce, at most Cap of them (the rest dropped by the policy),
// joined into one message.
func planCollect(q []broker.Message, now time.Time, o CollectOptions) collectPlan {
	if len(q) == 0 {
		return collectPlan{}
	}
	if q[0].Mode != broker.Collect {
		return collectPlan{deliver: q[:1], text: q[0].Content}
	}
	run := q
	for i, m := range q {
		if m.Mode != broker.Collect {
			run = q[:i]
			break
		}
	}
	latest := run[0].CreatedMs
	for _, m := range run {
		latest = max(latest, m.CreatedMs)
	}
	if since := now.Sub(time.UnixMilli(latest)); since < o.Debounce {
		return collectPlan{wait: o.Debounce - since}
	}
	p := collectPlan{deliver: run}
	var summary string
	if len(run) > o.Cap {
		switch o.Drop {
		case DropNew:
			p.deliver, p.dropped = run[:o.Cap], run[o.Cap:]
			p.dropReason = fmt.Sprintf("collect cap %d: the newest went beyond it", o.Cap)
		case DropSummarize:
			p.deliver, p.dropped = run[len(run)-o.Cap:], run[:len(run)-o.Cap]
			p.dropReason = fmt.Sprintf("collect cap %d: summarized in the batch", o.Cap)
			var b strings.Builder
			fmt.Fprintf(&b, "(%d earlier messages were left out; they began:", len(p.dropped))
			for _, m := range p.dropped {
				fmt.Fprintf(&b, " %q", orchestrate.Clip(strings.Join(strings.Fields(m.Content), " "), 60))
			}
			b.WriteString(")")
			summary = b.String()
		default:
			p.deliver, p.dropped = run[len(run)-o.Cap:], run[:len(run)-o.Cap]
			p.dropReason = fmt.Sprintf("collect cap %d: the oldest went beyond it", o.Cap)
		}
	}
	parts := make([]string, 0, len(p.deliver)+1)
	if summary != "" {
		parts = append(parts, summary)
	}
	for _, m := range p.deliver {
		parts = append(parts, m.Content)
	}
	p.text = strings.Join(parts, "\n\n")
	return p
}

// rollBack moves the transcript's leaf back to where the conversation was before the turn a
// rollback message among ids aborted, so that this turn's entries (its user message first)
// branch off there: the aborted turn stays in the file as an abandoned branch (pi's tree
// format: each entry names its parent), out of every context built from the new leaf.
func (c *chat) rollBack(ctx context.Context, h *conversation.Held, ids []string) error {
	ms, err := c.k.Broker.Get(ctx, ids)
	if err != nil {
		return err
	}
	var target, by string
	for _, m := range ms {
		if m.Mode == broker.Rollback && m.RollsBack != "" {
			target, by = m.RollsBack, m.ID
		}
	}
	if target == "" {
		return nil // nothing ran when it was sent: it runs where the conversation is
	}
	var w conversation.TurnWriter = h
	user, err := deliveringEntry(w.File(), target)
	if err != nil || user == nil {
		return err // the turn never reached the transcript: nothing to roll back
	}
	base := turnBase(w.File(), user)
	if base == "" {
		w.ResetLeaf()
	} else if err := w.Branch(base); err != nil {
		return fmt.Errorf("roll back: %w", err)
	}
	reason := fmt.Sprintf("rolled back by %s: the turn from entry %s is left as a branch; the conversation goes on from ", by, user.ID)
	if base == "" {
		reason += "its start"
	} else {
		reason += "entry " + base
	}
	c.sink.Publish(abi.EventData, abi.AIQueue{Type: abi.PayloadAIQueue, Phase: abi.QueueRolledBack, MessageIDs: []string{target}, Reason: reason})
	c.logs.verbosef("%s", reason)
	return nil
}

// rollbackScan bounds how far back a rolled-back turn's user message is looked for: it is the
// turn that was running a moment ago.
const rollbackScan = 4096

// deliveringEntry is the user entry that delivered the queued message id (nil if none).
func deliveringEntry(f *transcript.File, id string) (*transcript.Entry, error) {
	quoted := []byte(`"` + id + `"`)
	for i := len(f.Entries) - 1; i >= 0 && i >= len(f.Entries)-rollbackScan; i-- {
		e := f.Entries[i]
		if e.Type != "message" || e.Role != "user" {
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			return nil, fmt.Errorf("read transcript: %w", err)
		}
		if bytes.Contains(raw, quoted) {
			return e, nil
		}
	}
	return nil, nil
}

// turnBase is the entry before the turn of the user entry: the parent of the turn's run start
// record (the turn's model and thinking-level records, between the two, go with the turn).
func turnBase(f *transcript.File, user *transcript.Entry) string {
	for p := f.Entry(user.ParentID); p != nil; p = f.Entry(p.ParentID) {
		switch {
		case p.Type == "custom" && p.CustomType == chatstore.RunCustomType:
			return p.ParentID
		case p.Type == "model_change", p.Type == "thinking_level_change":
			continue
		}
		break
	}
	return user.ParentID
}
