// Package abi holds the wire types of the Nexus CLI Session ABI (docs/ABI.md): the session object,
// the event envelope, the control response and the error response, plus the error codes.
//
// These types are shared by the gateway, the Go client and the CLI. Field names and meanings are
// a compatibility promise (see docs/ABI.md); new fields may be added, existing ones never change.
package abi

import (
	"encoding/json"
	"time"
)

// Version is the ABI version. Minor versions only add fields, payload types and enum values.
const Version = "1.0"

// SessionType is the kind of a live session. New values may be added.
type SessionType string

// The five session types of the ABI.
const (
	TypeTerminal      SessionType = "terminal"
	TypeAIChat        SessionType = "ai-chat"
	TypeMetaChat      SessionType = "meta-chat"
	TypeDebugStream   SessionType = "debug-stream"
	TypeNetworkStream SessionType = "network-stream"
)

// Types lists every session type in the ABI's order.
func Types() []SessionType {
	return []SessionType{TypeTerminal, TypeAIChat, TypeMetaChat, TypeDebugStream, TypeNetworkStream}
}

// Valid reports whether t is a known session type.
func (t SessionType) Valid() bool {
	for _, k := range Types() {
		if t == k {
			return true
		}
	}
	return false
}

// Status is a session's lifecycle state. closed and error are final.
type Status string

// Session statuses.
const (
	StatusActive Status = "active"
	StatusPaused Status = "paused"
	StatusClosed Status = "closed"
	StatusError  Status = "error"
)

// Final reports whether no transition leaves s.
func (s Status) Final() bool { return s == StatusClosed || s == StatusError }

// Transport is how a client receives a session's events. "local" means in-process, no gateway.
type Transport string

// Transports.
const (
	TransportWebSocket Transport = "websocket"
	TransportPolling   Transport = "polling"
	TransportHybrid    Transport = "hybrid"
	TransportLocal     Transport = "local"
)

// Valid reports whether t is a known transport.
func (t Transport) Valid() bool {
	switch t {
	case TransportWebSocket, TransportPolling, TransportHybrid, TransportLocal:
		return true
	}
	return false
}

// Context links a session to the objects it works on.
type Context struct {
	ProjectID string `json:"projectId,omitempty"`
	RoadmapID string `json:"roadmapId,omitempty"`
	ChatID    string `json:"chatId,omitempty"`
	ProcessID string `json:"processId,omitempty"`
	ServerID  string `json:"serverId,omitempty"`
}

// Capabilities says which operations a session supports. Every flag is always present. Each
// kind declares its own (live.Kind); docs/ABI.md lists the sets of the ABI's types.
type Capabilities struct {
	Send      bool `json:"send"`
	Receive   bool `json:"receive"`
	Interrupt bool `json:"interrupt"`
	Resize    bool `json:"resize"`
	Close     bool `json:"close"`
	Restart   bool `json:"restart"`
	Stream    bool `json:"stream"`
}

// Allows reports whether the capability set permits a control command.
func (c Capabilities) Allows(cmd Command) bool {
	switch cmd {
	case CommandInterrupt:
		return c.Interrupt
	case CommandResize:
		return c.Resize
	case CommandClose:
		return c.Close
	case CommandRestart:
		return c.Restart
	case CommandPause, CommandResume:
		return c.Stream
	case CommandConfirm, CommandCompact, CommandSpawn, CommandQueue:
		// Answering a question is input; kinds that never ask refuse it themselves.
		return c.Send
	}
	return false
}

// Session is the ABI's session object.
type Session struct {
	SessionID    string         `json:"sessionId"`
	Type         SessionType    `json:"type"`
	CreatedAt    string         `json:"createdAt"`
	ExpiresAt    string         `json:"expiresAt,omitempty"`
	Context      Context        `json:"context"`
	Transport    Transport      `json:"transport"`
	Status       Status         `json:"status"`
	Capabilities Capabilities   `json:"capabilities"`
	Metadata     map[string]any `json:"metadata"`
	// LastActivityAt is when the session last had input or output (a live session's).
	LastActivityAt string `json:"lastActivityAt,omitempty"`
	// Node is the cluster node that owns the session (a gateway that is a node of a cluster).
	Node string `json:"node,omitempty"`
}

// Command is a control command.
type Command string

// Control commands. pause and resume are nexus additions (flow control for slow viewers).
const (
	CommandInterrupt Command = "interrupt"
	CommandClose     Command = "close"
	CommandResize    Command = "resize"
	CommandRestart   Command = "restart"
	CommandPause     Command = "pause"
	CommandResume    Command = "resume"
	// CommandConfirm answers an ai-chat confirmation request (requestId, answer).
	CommandConfirm Command = "confirm"
	// CommandCompact compacts an ai-chat's conversation now.
	CommandCompact Command = "compact"
	// CommandSpawn starts a subagent of an ai-chat's conversation (spawn: its task).
	CommandSpawn Command = "spawn"
	// CommandQueue reads what waits in an ai-chat's queue (last: its last N messages of
	// every state instead), from the node that owns the session.
	CommandQueue Command = "queue"
)

// Valid reports whether c is a known control command.
func (c Command) Valid() bool {
	switch c {
	case CommandInterrupt, CommandClose, CommandResize, CommandRestart, CommandPause, CommandResume, CommandConfirm, CommandCompact, CommandSpawn, CommandQueue:
		return true
	}
	return false
}

// ControlResponse is the answer to every control command, and the error envelope of every API call.
type ControlResponse struct {
	Status  string       `json:"status"`
	Data    *ControlData `json:"data"`
	Message string       `json:"message,omitempty"`
	Errors  []ErrorItem  `json:"errors,omitempty"`
}

// ControlData is the successful part of a control response.
type ControlData struct {
	SessionID string  `json:"sessionId"`
	Command   Command `json:"command"`
	Result    any     `json:"result"`
}

// Response statuses.
const (
	ResponseOK    = "ok"
	ResponseError = "error"
)

// TimeFormat is the one timestamp format on the wire: ISO 8601, UTC, millisecond precision.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime parses a wire timestamp (any RFC 3339 form is accepted).
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// RawPayload is a helper for clients that decode payloads lazily.
type RawPayload = json.RawMessage
