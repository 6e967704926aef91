package aichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat/orchestrate"
)

// OptionsField is the sessions.json field recording what a conversation's last session was
// started with (backend, model, agent, level, workspace...), so the gateway can open it again
// the same way when a message arrives for it and no session is open.
const OptionsField = "nexusChat"

// RoadmapField is the sessions.json field recording the roadmap the conversation's sessions
// were linked to, so a session the gateway opens to deliver is linked too.
const RoadmapField = "nexusRoadmap"

func recordedOptions(e *chatstore.SessionEntry) (abi.AIChatOptions, bool) {
	var o abi.AIChatOptions
	if e == nil {
		return o, false
	}
	raw, ok := e.Extra[OptionsField]
	if !ok || json.Unmarshal(raw, &o) != nil {
		return abi.AIChatOptions{}, false
	}
	return o, true
}

func sameOptions(a, b abi.AIChatOptions) bool { return reflect.DeepEqual(a, b) }

// Delivery is a message for a conversation from outside its sessions (orchestrate.Delivery).
type Delivery = orchestrate.Delivery

// Delivered is what Deliver stored.
type Delivered = orchestrate.Delivered

// Deliver stores a message durably in the conversation's queue, then makes sure a session
// delivers it: the conversation's live session if it has one, else a background session the
// gateway opens (and closes once the queue is empty).
func (k *Kind) Deliver(ctx context.Context, d Delivery) (Delivered, error) {
	if k.Broker == nil || k.Sessions == nil {
		return Delivered{}, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway has no message queue")
	}
	return k.orchestrator().Deliver(ctx, d)
}

// Resume takes over what a previous gateway left: the turns it was running are closed in
// their transcripts and, unless [recovery] continue_turns is false, continued; the sessions it
// had open on conversations are opened again on the same keys (the old ones name the new);
// the subagent runs it left are finished; and a background session opens on every other
// conversation with queued messages. ctx is the gateway's lifetime: once it ends no session
// is opened to deliver.
func (k *Kind) Resume(ctx context.Context) {
	k.chatsMu.Lock()
	k.life = ctx
	k.chatsMu.Unlock()
	if n, ok := k.Broker.(broker.Notifier); ok {
		// A message another node of the cluster stored for a conversation this node delivers.
		n.OnQueued(k.wakeKey)
	}
	if k.Chats == nil {
		return
	}
	if k.Leases != nil {
		defer k.takeOverLost(ctx)
	}
	closed := k.restartedOn(ctx)
	recs := k.recoverTurns(ctx, closed)
	if k.Broker == nil || k.Sessions == nil {
		return
	}
	if k.continueTurns() {
		for _, r := range recs {
			if r.unanswered && !isSubagentKey(r.key) {
				k.markContinue(r.key)
			}
		}
	}
	k.sweepOnce.Do(func() { k.orchestrator().SweepRuns(ctx) })
	for key, old := range closed {
		// A background session was the gateway's own: the queue (or the continuation) opens
		// one again below. A subagent's run ended with its gateway.
		if bg, _ := old.Metadata["background"].(bool); bg || isSubagentKey(key) {
			continue
		}
		if err := k.reopen(ctx, key, old); err != nil {
			k.logger().Warn("reopen a session a restart closed", "key", key, "err", err)
		}
	}
	keys, err := k.Broker.Keys(ctx)
	if err != nil {
		k.logger().Warn("resume queued messages", "err", err)
	}
	for _, r := range recs {
		if k.pendingContinue(r.key) && !slices.Contains(keys, r.key) {
			keys = append(keys, r.key)
		}
	}
	for _, key := range keys {
		if err := k.ensure(ctx, key, abi.AIChatOptions{}, nil); err != nil {
			k.logger().Warn("resume queued messages", "key", key, "err", err)
		}
	}
}

func isSubagentKey(key string) bool {
	p, err := chatstore.ParseKey(key)
	return err == nil && p.Kind == chatstore.KindSubagent
}

// ensure makes sure a session delivers key's queue: the deliverer is woken, or a background
// session is opened, with the options the conversation last had (else opts, and then powers
// are recorded on it first).
func (k *Kind) ensure(ctx context.Context, key string, opts abi.AIChatOptions, powers *Powers) error {
	k.chatsMu.Lock()
	if c := k.ownerLocked(key); c != nil {
		k.chatsMu.Unlock()
		c.wake()
		return nil
	}
	if k.opening[key] || (k.life != nil && k.life.Err() != nil) {
		k.chatsMu.Unlock()
		return nil
	}
	if k.opening == nil {
		k.opening = map[string]bool{}
	}
	k.opening[key] = true
	k.chatsMu.Unlock()
	defer func() {
		k.chatsMu.Lock()
		delete(k.opening, key)
		k.chatsMu.Unlock()
	}()
	var roadmap string
	recorded := false
	if sh, err := k.Chats.Show(ctx, key); err == nil {
		if rec, ok := recordedOptions(sh.Entry); ok {
			opts, recorded = rec, true
		}
		if sh.Entry != nil {
			_ = json.Unmarshal(sh.Entry.Extra[RoadmapField], &roadmap)
		}
	}
	if !recorded && powers != nil {
		if err := k.recordPowers(ctx, key, opts.Workspace, *powers); err != nil {
			return err
		}
	}
	opts.Background = true
	raw, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("options: %w", err)
	}
	_, err = k.Sessions.Create(context.WithoutCancel(ctx), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key, RoadmapID: roadmap}, Options: raw})
	if errors.Is(err, conversation.ErrLeaseHeld) {
		// Another node of the cluster owns the conversation: its session delivers, woken by
		// the queue's watcher there.
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", key, err)
	}
	return nil
}

// wakeKey wakes the session delivering key's queue here, if any.
func (k *Kind) wakeKey(key string) {
	key = leaseKeyOf(key)
	k.chatsMu.Lock()
	c := k.ownerLocked(key)
	k.chatsMu.Unlock()
	if c != nil {
		c.wake()
	}
}

// handOver runs when a session on key ends: what is still queued there goes on being
// delivered.
func (k *Kind) handOver(key string) {
	k.chatsMu.Lock()
	life := k.life
	k.chatsMu.Unlock()
	if life == nil || life.Err() != nil || k.Broker == nil || k.Sessions == nil {
		return
	}
	q, err := k.Broker.Queued(life, key)
	if err != nil || len(q) == 0 {
		return
	}
	if err := k.ensure(life, key, abi.AIChatOptions{}, nil); err != nil && !errors.Is(err, context.Canceled) {
		k.logger().Warn("hand over queued messages", "key", key, "err", err)
	}
}

// ownerLocked is the session that delivers key's queue: the newest foreground session on the
// key, else the newest background one. k.chatsMu is held.
func (k *Kind) ownerLocked(key string) *chat {
	var best *chat
	for c := range k.live {
		if c.key != key {
			continue
		}
		switch {
		case best == nil,
			best.background && !c.background,
			best.background == c.background && c.seq > best.seq:
			best = c
		}
	}
	return best
}

// claim makes c the one delivering its conversation's queue for a turn: it must be the
// owner, and no other session on the key may be delivering (two sessions on one key never
// deliver the same message).
func (k *Kind) claim(c *chat) bool {
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	if k.ownerLocked(c.key) != c {
		return false
	}
	if d := k.delivering[c.key]; d != nil && d != c {
		return false
	}
	if k.delivering == nil {
		k.delivering = map[string]*chat{}
	}
	k.delivering[c.key] = c
	return true
}

// unclaim ends c's delivering turn and wakes the key's owner (which may be another session).
func (k *Kind) unclaim(c *chat) {
	k.chatsMu.Lock()
	if k.delivering[c.key] == c {
		delete(k.delivering, c.key)
	}
	owner := k.ownerLocked(c.key)
	k.chatsMu.Unlock()
	if owner != nil && owner != c {
		owner.wake()
	}
}

// isOwner reports whether c delivers its conversation's queue.
func (k *Kind) isOwner(c *chat) bool {
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	return k.ownerLocked(c.key) == c
}

// closeIfDone closes a background session that has nothing left to deliver: no turn, no
// question waiting, an empty queue (or another session delivering it).
func (c *chat) closeIfDone() {
	if !c.background {
		return
	}
	c.mu.Lock()
	done := !c.running && !c.closed && len(c.pending) == 0
	c.mu.Unlock()
	if !done || c.k.pendingContinue(c.key) {
		return
	}
	if c.k.isOwner(c) {
		if q, err := c.k.Broker.Queued(c.base, c.key); err != nil || len(q) > 0 {
			return
		}
	}
	go func() {
		_, _ = c.k.Sessions.Close(context.WithoutCancel(c.base), c.sink.SessionID(), abi.CloseRequested)
	}()
}

// recordPowers bounds the conversation key by powers (PowersField on its sessions.json entry,
// created with it when it is new), adding to any bounds it has.
func (k *Kind) recordPowers(ctx context.Context, key, cwd string, powers Powers) error {
	h, err := k.Chats.Hold(ctx, key, conversation.HoldOptions{Cwd: cwd, Fields: map[string]any{PowersField: powers}})
	if err != nil {
		return fmt.Errorf("record the powers of %s: %w", key, err)
	}
	defer func() { _ = h.Close() }()
	if raw, ok := h.Entry.Extra[PowersField]; ok {
		var old Powers
		if err := json.Unmarshal(raw, &old); err != nil {
			return fmt.Errorf("record the powers of %s: the recorded ones: %w", key, err)
		}
		powers = old.Bound(powers)
	}
	if err := h.Patch(ctx, map[string]any{PowersField: powers}); err != nil {
		return fmt.Errorf("record the powers of %s: %w", key, err)
	}
	return nil
}
