package aichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/transcript"
)

// A cluster's conversation has one owning node at a time (docs/cluster.md, conversations):
// the node takes its lease before a session of the kind opens on it, renews it while one is
// there, and releases it when the last ends. A node that marked a lost node's ai-chat
// session node-lost takes the conversation over (TakeOver).

// CloseLeaseLost is the close reason of a session whose node lost its conversation's lease
// (it could not renew it in time, and another node took the conversation).
const CloseLeaseLost = "lease-lost"

// heldLease is this node's lease on a conversation and how many holders it has here (the
// sessions on it, a takeover in progress).
type heldLease struct {
	l    conversation.OwnedLease
	refs int
}

// leaseKeyOf is the spelling of key a lease is taken under (its canonical form).
func leaseKeyOf(key string) string {
	if pk, err := chatstore.ParseKey(key); err == nil {
		return pk.String()
	}
	return key
}

// acquireLease takes key's lease for one more holder on this node. prev is who held it
// before when this call took it from the cluster (zero when this node held it already).
// The kind's lease lock is held across the cluster's answer: two starts on one key here take
// it once.
func (k *Kind) acquireLease(ctx context.Context, key string) (conversation.OwnedLease, conversation.Holder, error) {
	k.leaseMu.Lock()
	defer k.leaseMu.Unlock()
	if h := k.leases[key]; h != nil {
		// Held here already: shared, once it is valid. One that ran out (renewals failed)
		// is renewed from this node's record if no node wrote it since, so the sessions
		// holding it here go on with it.
		err := h.l.Valid()
		if err != nil {
			err = h.l.Renew(ctx)
		}
		if err == nil {
			h.refs++
			return h.l, conversation.Holder{}, nil
		}
	}
	l, err := k.Leases.Acquire(ctx, key)
	if err != nil {
		return nil, conversation.Holder{}, err
	}
	if k.leases == nil {
		k.leases = map[string]*heldLease{}
	}
	k.leases[key] = &heldLease{l: l, refs: 1}
	if !k.renewing {
		k.renewing = true
		// The renewer outlives the start that began it: it runs while any lease is held.
		go k.renewLeases(context.WithoutCancel(ctx))
	}
	return l, l.Previous(), nil
}

// releaseLease drops one holder of key's lease; the last gives the lease up.
func (k *Kind) releaseLease(key string, l conversation.OwnedLease) {
	k.leaseMu.Lock()
	h := k.leases[key]
	if h == nil || h.l != l {
		k.leaseMu.Unlock()
		return // lost, and dropped by the renewer
	}
	h.refs--
	if h.refs > 0 {
		k.leaseMu.Unlock()
		return
	}
	delete(k.leases, key)
	k.leaseMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), k.Leases.TTL())
	defer cancel()
	if err := l.Release(ctx); err != nil {
		k.logger().Warn("release a conversation's lease", "key", key, "err", err)
	}
}

// renewEvery is how often the held leases are renewed: a third of their length, so two
// renewals may fail before one expires.
func (k *Kind) renewEvery() time.Duration {
	if k.LeaseRenew > 0 {
		return k.LeaseRenew
	}
	return k.Leases.TTL() / 3
}

// renewLeases renews every lease this node holds until it holds none. A lease another node
// took ends the sessions on its conversation here: they could write nothing more.
func (k *Kind) renewLeases(base context.Context) {
	t := time.NewTicker(k.renewEvery())
	defer t.Stop()
	for range t.C {
		k.leaseMu.Lock()
		if len(k.leases) == 0 {
			k.renewing = false
			k.leaseMu.Unlock()
			return
		}
		held := make(map[string]conversation.OwnedLease, len(k.leases))
		for key, h := range k.leases {
			held[key] = h.l
		}
		k.leaseMu.Unlock()
		for key, l := range held {
			ctx, cancel := context.WithTimeout(base, k.renewEvery())
			err := l.Renew(ctx)
			cancel()
			switch {
			case errors.Is(err, conversation.ErrLeaseLost):
				k.leaseLost(base, key, l, err)
			case err != nil:
				// It expires unless a later renewal gets through; the writes stop then.
				k.logger().Warn("renew a conversation's lease", "key", key, "err", err)
			}
		}
	}
}

// leaseLost forgets a lease another node took and closes this node's sessions on its
// conversation.
func (k *Kind) leaseLost(ctx context.Context, key string, l conversation.OwnedLease, why error) {
	k.leaseMu.Lock()
	if h := k.leases[key]; h != nil && h.l == l {
		delete(k.leases, key)
	}
	k.leaseMu.Unlock()
	k.logger().Warn("a conversation's lease was lost: its sessions here close", "key", key, "err", why)
	k.chatsMu.Lock()
	var ids []string
	for c := range k.live {
		if c.lease == l {
			ids = append(ids, c.sink.SessionID())
		}
	}
	k.chatsMu.Unlock()
	for _, id := range ids {
		if _, err := k.Sessions.Close(ctx, id, CloseLeaseLost); err != nil {
			k.logger().Warn("close a session whose lease was lost", "id", id, "err", err)
		}
	}
}

// takeLease is Start's side of the lease: key's lease for a session, and, when another node
// held the conversation last, its transcript made key's current one here, rebuilt from the
// cluster's copy (so this node goes on from every entry the other acknowledged).
func (k *Kind) takeLease(ctx context.Context, key string) (conversation.OwnedLease, string, error) {
	lk := leaseKeyOf(key)
	l, prev, err := k.acquireLease(ctx, lk)
	if err != nil {
		return nil, "", err
	}
	if err := k.adopt(ctx, lk, prev); err != nil {
		k.releaseLease(lk, l)
		return nil, "", err
	}
	return l, lk, nil
}

// adopt makes the transcript prev names key's current one here when prev is another node.
func (k *Kind) adopt(ctx context.Context, key string, prev conversation.Holder) error {
	if prev.Node == "" || prev.Node == k.Node || prev.Session == "" {
		return nil
	}
	err := k.Chats.Adopt(ctx, key, prev.Session)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // it never wrote an entry: nothing to go on from
	}
	if err != nil {
		return fmt.Errorf("take conversation %s over from node %s: %w", key, prev.Node, err)
	}
	k.logger().Info("conversation taken over", "key", key, "from", prev.Node, "transcript", prev.Session)
	return nil
}

// nameTranscript writes the conversation's current transcript into its lease, for the node
// that takes it over next.
func (c *chat) nameTranscript(ctx context.Context, session string) {
	if c.lease == nil || session == "" || c.lease.Session() == session {
		return
	}
	if err := c.lease.SetSession(ctx, session); err != nil {
		c.k.logger().Warn("name the transcript in the conversation's lease", "key", c.leaseKey, "err", err)
	}
}

// TakeOver implements live.TakeOverer: lost is an ai-chat session of a node this node found
// lost. Once the node's lease on the conversation expired, this node takes it, rebuilds the
// transcript from the cluster's copy, closes the turn the node was running (as after a
// restart: the cut reply kept as aborted, calls without a result answered), and opens a
// session on the conversation with lost's options, which continues that turn and delivers
// what is queued. lost names the new session (movedTo).
func (k *Kind) TakeOver(ctx context.Context, lost abi.Session) {
	if k.Leases == nil || k.Chats == nil || k.Sessions == nil {
		return
	}
	key, _ := lost.Metadata["chatKey"].(string)
	if key == "" {
		key = lost.Context.ChatID
	}
	if key == "" || isSubagentKey(key) {
		return // a subagent's run ended with its node (its parent's node sweeps it)
	}
	if _, moved := lost.Metadata["movedTo"]; moved {
		return
	}
	if err := k.takeOver(ctx, leaseKeyOf(key), lost); err != nil {
		k.logger().Warn("take over a lost node's conversation", "key", key, "session", lost.SessionID, "node", lost.Node, "err", err)
	}
}

func (k *Kind) takeOver(ctx context.Context, key string, lost abi.Session) error {
	// One takeover of a conversation at a time on this node (the sweep that marked it and a
	// start's scan may both try); across nodes the lease decides.
	k.leaseMu.Lock()
	if k.takingOver[key] {
		k.leaseMu.Unlock()
		return nil
	}
	if k.takingOver == nil {
		k.takingOver = map[string]bool{}
	}
	k.takingOver[key] = true
	k.leaseMu.Unlock()
	defer func() {
		k.leaseMu.Lock()
		delete(k.takingOver, key)
		k.leaseMu.Unlock()
	}()
	l, prev, err := k.awaitLease(ctx, key, lost.Node)
	if err != nil || l == nil {
		return err
	}
	defer k.releaseLease(key, l)
	if prev.Node != lost.Node {
		// The conversation went on after the lost node (here, or on a node that let it go
		// since): nothing of the lost session's is left to take over.
		return nil
	}
	// Another node may have taken it over and let it go while this one waited.
	if cur, err := k.Sessions.Get(ctx, lost.SessionID); err == nil {
		if _, moved := cur.Metadata["movedTo"]; moved {
			return nil
		}
	}
	if err := k.adopt(ctx, key, prev); err != nil {
		return err
	}
	h, err := k.Chats.Hold(ctx, key, conversation.HoldOptions{Sync: transcript.SyncBatch, Lease: l})
	if err != nil {
		return err
	}
	// Every session the lost node had on the conversation goes to the one opened here (a
	// foreground one and the background one that delivered its queue, say); the newest
	// foreground one is reopened, and the turn is closed from the log of the one that ran it.
	lostOnKey := k.lostOn(ctx, key, lost)
	primary := lostOnKey[0]
	r, err := k.recoverHeldBy(ctx, h, func(run string) *interruption {
		for _, s := range lostOnKey {
			if in := k.readInterruption(ctx, s.SessionID); in != nil && in.run == run {
				return in
			}
		}
		return nil
	}, byNodeLoss(lost.Node))
	if cerr := h.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close the turn node %s was running: %w", lost.Node, err)
	}
	if r != nil && r.unanswered && k.Broker != nil && k.continueTurns() {
		k.markContinue(r.key)
	}
	opts := optionsOf(primary)
	opts.Replaces = primary.SessionID
	raw, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("options: %w", err)
	}
	cx := primary.Context
	cx.ChatID = key
	s, err := k.Sessions.Create(context.WithoutCancel(ctx), abi.CreateRequest{Type: abi.TypeAIChat, Context: cx, Options: raw})
	if err != nil {
		return fmt.Errorf("reopen %s: %w", key, err)
	}
	if m, ok := k.Sessions.(mover); ok {
		for _, old := range lostOnKey {
			if err := m.Moved(ctx, old.SessionID, s.SessionID); err != nil {
				return fmt.Errorf("record where %s went: %w", old.SessionID, err)
			}
		}
	}
	k.logger().Info("session taken over from a lost node", "key", key, "node", lost.Node, "old", primary.SessionID, "new", s.SessionID,
		"continued", r != nil && r.unanswered, "sessions", len(lostOnKey))
	return nil
}

// lostOn are the sessions lost's node had on the conversation key, marked node-lost and not
// moved: the newest foreground one first (lost itself when none is).
func (k *Kind) lostOn(ctx context.Context, key string, lost abi.Session) []abi.Session {
	all, err := k.Sessions.List(ctx, true)
	if err != nil {
		return []abi.Session{lost}
	}
	var fg, bg []abi.Session
	seen := false
	for _, s := range all { // oldest first
		if s.Type != abi.TypeAIChat || s.Node != lost.Node || s.Metadata["closeReason"] != live.CloseNodeLost {
			continue
		}
		if _, moved := s.Metadata["movedTo"]; moved {
			continue
		}
		sk, _ := s.Metadata["chatKey"].(string)
		if sk == "" {
			sk = s.Context.ChatID
		}
		if leaseKeyOf(sk) != key {
			continue
		}
		seen = seen || s.SessionID == lost.SessionID
		if bgd, _ := s.Metadata["background"].(bool); bgd {
			bg = append(bg, s)
		} else {
			fg = append([]abi.Session{s}, fg...) // newest first
		}
	}
	if !seen {
		if bgd, _ := lost.Metadata["background"].(bool); bgd {
			bg = append(bg, lost)
		} else {
			fg = append([]abi.Session{lost}, fg...)
		}
	}
	return append(fg, bg...)
}

// awaitLease takes key's lease once node's expired: nil, nil when another node took it
// first, or after three of the lease's lengths (node renews it: it is not lost).
func (k *Kind) awaitLease(ctx context.Context, key, node string) (conversation.OwnedLease, conversation.Holder, error) {
	k.chatsMu.Lock()
	life := k.life
	k.chatsMu.Unlock()
	if life == nil {
		life = ctx
	}
	deadline := k.now().Add(3 * k.Leases.TTL())
	for {
		l, prev, err := k.acquireLease(ctx, key)
		if err == nil {
			return l, prev, nil
		}
		var he *conversation.HeldError
		if !errors.As(err, &he) {
			return nil, conversation.Holder{}, err
		}
		if he.Node != node {
			return nil, conversation.Holder{}, nil // another node has it: it goes on there
		}
		now := k.now()
		if now.After(deadline) {
			return nil, conversation.Holder{}, fmt.Errorf("node %s still renews the lease of %s: %w", node, key, err)
		}
		wait := min(max(he.Until.Sub(now), 0)+10*time.Millisecond, k.Leases.TTL())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-life.Done():
			t.Stop()
			return nil, conversation.Holder{}, life.Err() //nolint:wrapcheck // the gateway stopped
		}
	}
}

// optionsOf are the options a lost session was opened with, as its metadata says.
func optionsOf(s abi.Session) abi.AIChatOptions {
	str := func(name string) string { v, _ := s.Metadata[name].(string); return v }
	bg, _ := s.Metadata["background"].(bool)
	o := abi.AIChatOptions{Backend: str("backend"), Model: str("model"), Agent: str("agent"), Level: str("level"),
		Workspace: str("workspacePath"), QueueMode: str("queueMode"), Background: bg, Thinking: str("thinking")}
	// Numbers as the session's node set them, or as JSON gave them back (a record's).
	if t, ok := number(s.Metadata["temperature"]); ok {
		o.Temperature = &t
	}
	if n, ok := number(s.Metadata["maxToolIterations"]); ok {
		o.MaxToolIterations = int(n)
	}
	return o
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	}
	return 0, false
}

// heldLease is c's lease as the transcript's writers check it (nil: none).
func (c *chat) heldLease() conversation.Lease {
	if c.lease == nil {
		return nil
	}
	return c.lease
}

// takeOverLost takes over, at the gateway's start, the conversations of the cluster's
// sessions marked node-lost that no node took over (the node that marked them stopped
// first; or this node is the lost one, back before anyone took them).
func (k *Kind) takeOverLost(ctx context.Context) {
	all, err := k.Sessions.List(ctx, true)
	if err != nil {
		k.logger().Warn("list the sessions of lost nodes", "err", err)
		return
	}
	for _, s := range all {
		if s.Type != abi.TypeAIChat || s.Metadata["closeReason"] != live.CloseNodeLost {
			continue
		}
		if _, moved := s.Metadata["movedTo"]; moved {
			continue
		}
		go k.TakeOver(ctx, s)
	}
}

// dropLease gives back the session's hold on its conversation's lease, once.
func (c *chat) dropLease() {
	if c.lease != nil && c.dropped.CompareAndSwap(false, true) {
		c.k.releaseLease(c.leaseKey, c.lease)
	}
}
