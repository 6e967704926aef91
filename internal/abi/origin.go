package abi

import (
	"encoding/json"
	"strings"
)

// Origin kinds: where a message entering a conversation came from (docs/ai-chat.md, Origin).
const (
	OriginCLI       = "cli"       // a client holding the gateway's token: the CLI, the REPL
	OriginConsole   = "console"   // a browser signed in to the web console
	OriginWebhook   = "webhook"   // POST /v1/hooks/{id}; ID is the hook's
	OriginCron      = "cron"      // a cron job's firing; ID is the job's
	OriginHeartbeat = "heartbeat" // a heartbeat's firing; ID is the job's
	OriginAgent     = "agent"     // another conversation's agent (sessions_send, a spawn's task); ID is its key
	OriginSubagent  = "subagent"  // a subagent's announcement of its end; ID is the run's
)

// Origin is where one message entering a conversation came from. It goes with the message
// through the queue, onto its transcript entry (nexusOrigin) and into sessions.json (origin,
// lastChannel). Channel, Peer and ChatType are what a webhook says of the chat it relays
// (telegram, alice, direct): they route it (DM scope) and are kept.
type Origin struct {
	Kind     string `json:"kind"`
	ID       string `json:"id,omitempty"`
	Channel  string `json:"channel,omitempty"`
	Peer     string `json:"peer,omitempty"`
	ChatType string `json:"chatType,omitempty"` // direct | group
}

// IsZero reports whether o names nothing.
func (o Origin) IsZero() bool { return o == Origin{} }

// String is kind, or kind:id.
func (o Origin) String() string {
	if o.ID == "" {
		return o.Kind
	}
	return o.Kind + ":" + o.ID
}

// LastChannel is sessions.json's lastChannel for a message of o: the chat channel a webhook
// named, else the origin's kind.
func (o Origin) LastChannel() string {
	if o.Channel != "" {
		return o.Channel
	}
	return o.Kind
}

// Matches reports whether filter names o: its kind (webhook), kind:id (webhook:ci) or the
// channel it came through (telegram); case-insensitive.
func (o Origin) Matches(filter string) bool {
	return filter != "" && (strings.EqualFold(filter, o.Kind) || strings.EqualFold(filter, o.String()) ||
		(o.Channel != "" && strings.EqualFold(filter, o.Channel)))
}

// Encode is o as JSON, "" for the zero origin (a queue's column).
func (o Origin) Encode() string {
	if o.IsZero() {
		return ""
	}
	b, _ := json.Marshal(o) // strings only: it cannot fail
	return string(b)
}

// DecodeOrigin reads what Encode wrote; "" and anything else is the zero origin.
func DecodeOrigin(s string) Origin {
	var o Origin
	if s == "" || json.Unmarshal([]byte(s), &o) != nil {
		return Origin{}
	}
	return o
}
