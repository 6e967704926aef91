package abi

import "encoding/json"

// APIPrefix is the versioned path prefix of the gateway's HTTP API.
const APIPrefix = "/v1"

// CreateRequest is the body of POST /v1/sessions.
type CreateRequest struct {
	Type      SessionType `json:"type"`
	Context   Context     `json:"context"`
	Transport Transport   `json:"transport,omitempty"`
	// TTLSeconds sets expiresAt; 0 means no expiry.
	TTLSeconds int64 `json:"ttlSeconds,omitempty"`
	// Ephemeral sessions close when the connection that owns them ends (see docs/ABI.md).
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Options are type-specific creation options (terminal: shell, cols, rows, env).
	Options json.RawMessage `json:"options,omitempty"`
	// Node names the cluster node the session is created on (a gateway that is a node of a
	// cluster; default: as the cluster's placement says). A nexus addition.
	Node string `json:"node,omitempty"`
}

// TerminalOptions are the creation options of a terminal session.
type TerminalOptions struct {
	Shell string   `json:"shell,omitempty"`
	Cols  int      `json:"cols,omitempty"`
	Rows  int      `json:"rows,omitempty"`
	Env   []string `json:"env,omitempty"`
}

// SendRequest is the body of POST /v1/sessions/{id}/send.
type SendRequest struct {
	// Data is the input; with Encoding "base64" it is the base64 of the exact bytes.
	Data     string `json:"data"`
	Encoding string `json:"encoding,omitempty"`
	// Mode is an ai-chat message's queue mode (steer, followup, collect, steer-backlog,
	// queue, interrupt, reject, rollback); a nexus addition.
	Mode string `json:"mode,omitempty"`
}

// ControlRequest is the body of POST /v1/sessions/{id}/control.
type ControlRequest struct {
	Command Command `json:"command"`
	Width   int     `json:"width,omitempty"`
	Height  int     `json:"height,omitempty"`
	// RequestID and Answer are the confirm command's (ai-chat).
	RequestID string `json:"requestId,omitempty"`
	Answer    string `json:"answer,omitempty"`
	// Spawn is the spawn command's subagent (ai-chat).
	Spawn *SpawnRequest `json:"spawn,omitempty"`
	// Last is the queue command's: the last N messages of every state, not the queued ones.
	Last int `json:"last,omitempty"`
}

// SpawnRequest is a subagent to start: sessions_spawn's arguments.
type SpawnRequest struct {
	Task    string `json:"task"`
	Label   string `json:"label,omitempty"`
	Cleanup string `json:"cleanup,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Level   string `json:"level,omitempty"`
}

// ListResponse is the body of GET /v1/sessions.
type ListResponse struct {
	Sessions []Session `json:"sessions"`
}

// EventsResponse is the body of GET /v1/sessions/{id}/events (polling).
type EventsResponse struct {
	Events []Event `json:"events"`
	// Next is the sequence to pass as after= on the next poll.
	Next uint64 `json:"next"`
	// Closed is true when the session has ended and no event follows Next.
	Closed bool `json:"closed"`
}

// VersionResponse is the body of GET /v1/version.
type VersionResponse struct {
	Version    string `json:"version"`
	ABIVersion string `json:"abiVersion"`
	PID        int    `json:"pid,omitempty"`
}

// ClientMessage is what a WebSocket client may send: input and window sizes, so an attached
// terminal needs a single connection.
type ClientMessage struct {
	Op       string `json:"op"` // "send", "resize", or "ack" (a stream opened with ack=client)
	Data     string `json:"data,omitempty"`
	Encoding string `json:"encoding,omitempty"`
	Width    int    `json:"width,omitempty"`
	Height   int    `json:"height,omitempty"`
	// Seq is what an ack acknowledges: every event up to it has been handled (rendered).
	Seq uint64 `json:"seq,omitempty"`
}

// RunRequest is the body of POST /v1/sessions/{id}/run: run one command and return its
// structured result (an agent shell's ExecResult).
type RunRequest struct {
	Command     string `json:"command"`
	TimeoutSecs int    `json:"timeoutSecs,omitempty"`
	// Budget shapes the output: {grep{pattern,context}, keep, lines, max_chars}.
	Budget json.RawMessage `json:"budget,omitempty"`
}

// Shell describes an agent shell (docs/agent-shells.md): an entry of GET /v1/shells, the body
// of GET /v1/shells/{id}, and what the MCP tools session_create and session_list return. Its
// keys are snake_case, the MCP tools' shape, so one object serves both.
type Shell struct {
	SessionID string   `json:"session_id"`
	Transport string   `json:"transport"`
	Cwd       string   `json:"cwd"`
	Workspace string   `json:"workspace,omitempty"`
	Created   string   `json:"created"`
	LastUsed  string   `json:"last_used"`
	Execs     int      `json:"execs"`
	Allow     []string `json:"allow,omitempty"`
	Deny      []string `json:"deny,omitempty"`
}

// ConsoleCode is the answer of POST /v1/console/codes: a one-time sign-in code for the web
// console and the URL that uses it (empty when the gateway has no TCP listener).
type ConsoleCode struct {
	Code      string `json:"code"`
	URL       string `json:"url,omitempty"`
	ExpiresAt string `json:"expiresAt"`
}
