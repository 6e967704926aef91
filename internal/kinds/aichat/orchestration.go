package aichat

import (
	"context"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/kinds/aichat/orchestrate"
)

// The orchestration of conversations (family tools, subagents, powers, delivery without an
// open session) is package orchestrate's; these are its names as the kind's users know them.
type (
	// Powers are what a conversation's model may do (orchestrate.Powers).
	Powers = orchestrate.Powers
	// SubagentLimits bound spawning (docs/ai-chat.md, Subagents).
	SubagentLimits = orchestrate.SubagentLimits
)

// The sessions.json and transcript names orchestration records (see orchestrate).
const (
	PowersField          = orchestrate.PowersField
	AnnouncePrefix       = orchestrate.AnnouncePrefix
	RunEndCustomType     = orchestrate.RunEndCustomType
	RequesterOriginField = orchestrate.RequesterOriginField
)

// orchestrator is the orchestration over the kind's stores as they are now: built again when
// one of them was set since (Sessions is set once the registry exists), else shared, since
// every conversation's tools hold it.
func (k *Kind) orchestrator() *orchestrate.Orchestrator {
	k.orchMu.Lock()
	defer k.orchMu.Unlock()
	if o := k.orch; o != nil && o.Chats == k.Chats && o.Sessions == k.Sessions && o.Runs == k.Runs && o.Broker == k.Broker {
		return o
	}
	k.orch = &orchestrate.Orchestrator{StateDir: k.StateDir, Chats: k.Chats, Sessions: k.Sessions, Runs: k.Runs, Broker: k.Broker,
		Limits: k.Subagents, Host: host{k}, Now: k.Now, Logger: k.Logger}
	return k.orch
}

// host is the kind as orchestration sees it: its live sessions by conversation key.
type host struct{ k *Kind }

// onKey calls fn with each live session on the conversation key, under k.chatsMu.
func (k *Kind) onKey(key string, fn func(c *chat)) {
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	for c := range k.live {
		if c.key == key {
			fn(c)
		}
	}
}

func (h host) Live(key string) (live, running bool) {
	h.k.onKey(key, func(c *chat) {
		c.mu.Lock()
		live, running = true, running || c.running
		c.mu.Unlock()
	})
	return live, running
}

func (h host) Interrupt(key string) int {
	n := 0
	h.k.onKey(key, func(c *chat) {
		c.mu.Lock()
		if c.cancel != nil {
			c.cancel()
			n++
		}
		c.mu.Unlock()
	})
	return n
}

func (h host) SessionIDs(key string) []string {
	var ids []string
	h.k.onKey(key, func(c *chat) { ids = append(ids, c.sink.SessionID()) })
	return ids
}

// Wake wakes the pumps of the live sessions on key (a message just queued): the owner
// delivers it, the others may close if they are background sessions.
func (h host) Wake(key string) { h.k.onKey(key, (*chat).wake) }

func (h host) Enqueue(ctx context.Context, id, key string, mode broker.Mode, text, from string, origin abi.Origin) (broker.Message, error) {
	return h.k.store(ctx, id, key, mode, text, from, origin)
}

func (h host) Open(ctx context.Context, key string, opts abi.AIChatOptions, powers *Powers) error {
	return h.k.ensure(ctx, key, opts, powers)
}

// self is the conversation as its orchestration tools see it when they run.
func (c *chat) self() orchestrate.Self {
	c.mu.Lock()
	origin := c.origin
	c.mu.Unlock()
	return orchestrate.Self{
		Key: c.key, SpawnedBy: c.spawnedBy, Agent: c.prof.ID, SessionID: c.chatSession, Transcript: c.transcript,
		Workspace: c.workspace, Level: c.level, Powers: c.powers, Backend: c.backend.Name, Model: c.backend.Model,
		Temperature: c.temperature, Roadmap: c.roadmap, Subagents: c.subagents, Origin: origin,
		Publish: func(p any) { c.sink.Publish(abi.EventData, p) },
	}
}
