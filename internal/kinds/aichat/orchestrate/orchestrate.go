// Package orchestrate is how ai-chat conversations reach each other and the world outside
// their sessions: the family tools (sessions_list, sessions_history, sessions_send,
// nexus_status, nexus_cancel, nexus_destroy, agents_list), subagents (sessions_spawn and the
// runs it starts: limits, timeouts, the end recorded and announced), the powers a
// conversation started by another is bounded by, and the delivery of a message to a
// conversation that has no open session.
//
// The ai-chat kind (internal/kinds/aichat) runs the sessions and their turns; it builds an
// Orchestrator over its stores and implements Host, the little orchestration needs of its
// live sessions. The kind imports this package and not the other way round: the kind's start
// computes a session's powers here and offers the tools made here, so the other direction
// would be an import cycle, and what the kind must answer (Host) stays small.
package orchestrate

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
)

// Host is what orchestration needs of the kind that runs the conversations' sessions.
type Host interface {
	// Live reports whether a session of this gateway is on the conversation key, and whether
	// a turn runs in one.
	Live(key string) (live, running bool)
	// Interrupt stops the running turns of the sessions on key and says how many it stopped.
	Interrupt(key string) int
	// SessionIDs are the live sessions on key.
	SessionIDs(key string) []string
	// Wake tells the session delivering key's queue that a message is there.
	Wake(key string)
	// Enqueue stores a message durably in key's queue under its mode's rules (a reject is
	// refused while the conversation is busy, a rollback names the running turn...).
	Enqueue(ctx context.Context, id, key string, mode broker.Mode, text, from string, origin abi.Origin) (broker.Message, error)
	// Open makes sure a session delivers key's queue: its deliverer is woken, or a background
	// session opened, as the conversation's last session was, else with opts (and powers
	// are recorded on the new conversation first).
	Open(ctx context.Context, key string, opts abi.AIChatOptions, powers *Powers) error
}

// Orchestrator does the orchestration of one gateway's ai-chat conversations. Its zero
// value is not usable: Chats, Runs, Broker, Sessions and Host are needed by the tools and
// Deliver (the kind offers the tools only when it has them).
type Orchestrator struct {
	// StateDir is the gateway's state directory (the agents).
	StateDir string
	Chats    *conversation.Service
	// Sessions is the registry: subagents are ai-chat sessions created there.
	Sessions live.Backend
	// Runs is state/subagents/runs.json; Broker the durable message queue.
	Runs   chatstore.SubagentRuns
	Broker broker.Queues
	// Limits are the kind's own subagent limits (config.toml's [subagents] fills the rest).
	Limits SubagentLimits
	Host   Host
	Now    func() time.Time
	Logger *slog.Logger
}

func (k *Orchestrator) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func (k *Orchestrator) logger() *slog.Logger {
	if k.Logger != nil {
		return k.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Self is the conversation whose model calls a tool, as its session has it when the call runs.
type Self struct {
	// Key is its session key, SpawnedBy its parent's ("" for none), Agent its agent's id.
	Key, SpawnedBy, Agent string
	// SessionID is its conversation's session id, Transcript its transcript's path (a
	// subagent's parent).
	SessionID, Transcript string
	Workspace             string
	Level                 permission.Level
	Powers                Powers
	// Backend, Model and Temperature are what its subagents talk to, as it does.
	Backend, Model string
	Temperature    *float64
	// Roadmap is the roadmap its session is linked to (its subagents are too).
	Roadmap string
	// Subagents is config.toml's [subagents].
	Subagents provider.Subagents
	// Origin is where the message its running turn answers came from.
	Origin abi.Origin
	// Publish emits an event (a subagent's start) on its session.
	Publish func(payload any)
}

// caller is a tool's call: the orchestrator and the calling conversation.
type caller struct {
	k *Orchestrator
	Self
}

// Tools are the tools a conversation gets to reach others: sessions_spawn and the family
// tools. self is read at each call (a session's key and transcript are known only once it
// is attached to its conversation).
func (k *Orchestrator) Tools(self func() Self) []tools.Tool {
	b := &binding{k, self}
	return append([]tools.Tool{spawnTool{b}}, familyTools(b)...)
}

// binding is what a conversation's tools share (one per conversation: an idle session's
// memory counts).
type binding struct {
	o    *Orchestrator
	self func() Self
}

func (b *binding) caller() *caller { return &caller{k: b.o, Self: b.self()} }

// AgentOfKey is the agent id a session key names (agent:<id>:...), "" for other keys.
func AgentOfKey(key string) string {
	rest, ok := strings.CutPrefix(key, "agent:")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ":")
	return id
}

// Clip cuts s to at most n bytes (on a character boundary), saying it was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:abi.ValidUTF8Prefix([]byte(s[:n]))] + " …(cut)"
}

// RequesterOriginField is the child conversation's sessions.json field (and its run record's
// requesterOrigin) naming where the message its requester was answering came from.
const RequesterOriginField = "requesterOrigin"

// requesterOrigin is a subagent run's requesterOrigin: where the message its requester was
// answering came from (nil when that is not known).
func requesterOrigin(o abi.Origin) *chatstore.DeliveryContext {
	if o.IsZero() {
		return nil
	}
	return &chatstore.DeliveryContext{Channel: o.LastChannel(), To: o.Peer}
}

func firstOf(vals ...string) string { return cmp.Or(vals...) }
