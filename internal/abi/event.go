package abi

import (
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"
)

// EventType is the kind of a streamed event. New values may be added.
type EventType string

// Event types of the ABI.
const (
	EventData      EventType = "data"
	EventStatus    EventType = "status"
	EventError     EventType = "error"
	EventInterrupt EventType = "interrupt"
	EventClose     EventType = "close"
	EventMetadata  EventType = "metadata"
)

// Event is the streaming envelope. Seq is a nexus addition: a per-session sequence number, strictly
// increasing by one, that clients use to resume without loss or duplicates.
type Event struct {
	Event     EventType       `json:"event"`
	Timestamp string          `json:"timestamp"`
	SessionID string          `json:"sessionId"`
	Seq       uint64          `json:"seq"`
	Payload   json.RawMessage `json:"payload"`
}

// ContentType chooses how terminal output is carried in a data event.
type ContentType string

// Content types: ansi keeps escape sequences, text strips them, raw is the exact bytes in base64.
const (
	ContentANSI ContentType = "ansi"
	ContentText ContentType = "text"
	ContentRaw  ContentType = "raw"
)

// Valid reports whether c is a known content type.
func (c ContentType) Valid() bool { return c == ContentANSI || c == ContentText || c == ContentRaw }

// Payload type names.
const (
	PayloadTerminalOutput = "terminal-output"
	PayloadAIToken        = "ai-token"
	PayloadStatus         = "status"
	PayloadError          = "error"
	PayloadInterrupt      = "interrupt"
	PayloadMetadata       = "metadata"
	PayloadClose          = "close"
)

// TerminalOutput is the payload of a terminal data event.
type TerminalOutput struct {
	Type        string      `json:"type"`
	Content     string      `json:"content"`
	ContentType ContentType `json:"contentType"`
}

// NewTerminalOutput renders PTY bytes in the chosen content type.
func NewTerminalOutput(raw []byte, ct ContentType) TerminalOutput {
	var content string
	switch ct {
	case ContentRaw:
		content = base64.StdEncoding.EncodeToString(raw)
	case ContentText:
		content = StripANSI(raw)
	default:
		ct = ContentANSI
		content = string(raw)
	}
	return TerminalOutput{Type: PayloadTerminalOutput, Content: content, ContentType: ct}
}

// Bytes recovers the output bytes (exact for raw, the UTF-8 text otherwise).
func (o TerminalOutput) Bytes() ([]byte, error) {
	if o.ContentType == ContentRaw {
		return base64.StdEncoding.DecodeString(o.Content)
	}
	return []byte(o.Content), nil
}

// AIToken is the payload of an ai-chat data event.
type AIToken struct {
	Type      string `json:"type"`
	Content   string `json:"content"`
	MessageID string `json:"messageId,omitempty"`
	IsFinal   bool   `json:"isFinal"`
}

// Connection states carried by status events.
const (
	StateConnecting = "connecting"
	StateConnected  = "connected"
	StateResponding = "responding"
	StateIdle       = "idle"
	StateClosed     = "closed"
)

// StatusPayload is the payload of a status event. SessionStatus (a nexus addition) carries the
// session object's status after the change.
type StatusPayload struct {
	Type          string `json:"type"`
	Status        string `json:"status"`
	Message       string `json:"message,omitempty"`
	SessionStatus Status `json:"sessionStatus,omitempty"`
}

// ErrorPayload is the payload of an error event.
type ErrorPayload struct {
	Type  string      `json:"type"`
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an error inside an error event.
type ErrorDetail struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// Interrupt reasons.
const (
	ReasonUserRequested = "user-requested"
	ReasonTimeout       = "timeout"
	ReasonError         = "error"
)

// InterruptPayload is the payload of an interrupt event.
type InterruptPayload struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// MetadataPayload is the payload of a metadata event.
type MetadataPayload struct {
	Type     string         `json:"type"`
	Metadata map[string]any `json:"metadata"`
}

// Close reasons (nexus additions; the close event is core).
const (
	CloseRequested = "user-requested"
	CloseTimeout   = "timeout"
	CloseIdle      = "idle"
	CloseExited    = "exited"
	CloseShutdown  = "shutdown"
	CloseEphemeral = "ephemeral"
	CloseError     = "error"
	// CloseGatewayRestart: the session's process ended with a gateway that did not close it
	// (kill -9, a crash, a power loss); the next gateway recorded the end.
	CloseGatewayRestart = "gateway-restart"
)

// ClosePayload is the payload of a close event, the last event of every session.
type ClosePayload struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Status Status `json:"status"`
	// ExitCode is the shell's exit status when a process ended the session.
	ExitCode *int `json:"exitCode,omitempty"`
}

// ValidUTF8Prefix returns the length of the longest prefix of b that does not end inside a UTF-8
// sequence, so a stream cut at that point never splits a character.
func ValidUTF8Prefix(b []byte) int {
	n := len(b)
	for i := 1; i <= utf8.UTFMax && i <= n; i++ {
		c := b[n-i]
		if c < 0x80 {
			return n
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[n-i:]) {
				return n
			}
			return n - i
		}
	}
	return n
}
