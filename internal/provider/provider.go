// Package provider holds the LLM clients an agent turn loop calls (docs/ai-chat.md, Providers and
// backends): one small interface, Provider, over OpenAI-compatible chat completions, the OpenAI
// Responses API and Anthropic messages, built on the official SDKs. A request carries pi's
// message model (the same JSON as a transcript's agent messages, see docs/conversations.md), and
// a reply streams as typed events that end in one assistant message in that model, so what the
// loop sends and what it writes to the transcript are the same values.
//
// Every failure is an *abi.Error with a code: INVALID_ARGUMENT for bad configuration or a
// request the provider refused, LIMIT_EXCEEDED when rate limits outlast the retries,
// RESOURCE_UNAVAILABLE when server errors do, CONNECTION_LOST for a stream cut short. A request
// too large for the model's context window also matches ErrContextOverflow with errors.Is.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
)

// Provider streams one model reply per call.
type Provider interface {
	// Stream sends req and returns the reply as it arrives. An error here means nothing was
	// received (bad request, refusal, retries exhausted, context overflow); an error after
	// that is reported by the Stream, which keeps what came before it.
	Stream(ctx context.Context, req Request) (Stream, error)
}

// Stream is one reply being received. Cancelling the context given to Provider.Stream closes
// the connection at once; the stream then ends with stop reason aborted.
//
//	for s.Next() {
//		ev := s.Event()
//		...
//	}
//	msg, err := s.Message(), s.Err()
//
// The last event is always EventDone, whatever the outcome. Next, Event, Message and Err are
// for one goroutine; Close may be called from any.
type Stream interface {
	// Next advances to the next event; false once EventDone has been read.
	Next() bool
	// Event is the current event.
	Event() Event
	// Message is the assistant message received so far: complete after EventDone, with
	// StopReason aborted or error (and ErrorMessage) when the reply did not finish.
	Message() Message
	// Err is why the reply did not finish: nil for stop reasons stop, length and toolUse.
	// An aborted reply's error matches context.Canceled (or the context's cause).
	Err() error
	// Close releases the connection; the stream ends as aborted if it had not ended.
	Close() error
}

// Request is one model call.
type Request struct {
	// Model overrides the backend's model when not empty.
	Model string
	// System is the system prompt.
	System string
	// Messages are user, assistant and toolResult messages, oldest first: a transcript
	// context converted by FromContext can be given as is. Assistant messages that ended in
	// error or aborted are left out (with the results of their tool calls), as pi does, and a
	// tool call without a result gets a synthetic error result; a result whose call is not
	// in an earlier assistant message is refused.
	Messages []Message
	// Tools the model may call.
	Tools []Tool
	// MaxTokens bounds the reply; 0 uses the backend's max_tokens.
	MaxTokens int
	// Temperature is left to the provider when nil. Anthropic ignores it while thinking.
	Temperature *float64
	// Thinking is a transcript thinking level (off, minimal, low, medium, high, xhigh, max);
	// "" or off asks for no reasoning.
	Thinking string
	// MaxToolArguments bounds the arguments of one tool call as they stream, in bytes (0:
	// DefaultMaxToolArguments). Past it the rest is neither kept nor relayed: the call ends
	// with {} as arguments, ArgumentsTruncated on its block and ArgumentsError on its end
	// event, so the loop refuses it without the arguments ever being whole in memory.
	MaxToolArguments int
	// MaxReply bounds the text and thinking of one reply as they stream, in bytes (0:
	// DefaultMaxReply). Past it the stream is closed and the reply ends in error
	// (ReplyTooLongError), what came before kept: a model (or a server) that streams without
	// end cannot take the process's memory.
	MaxReply int
}

// DefaultMaxReply is Request.MaxReply's default: far above any model's output limit (the
// largest are ~128k tokens, ~0.5 MB), far below the process's memory.
const DefaultMaxReply = 16 << 20

// ReplyTooLongError ends a reply whose text and thinking passed Request.MaxReply.
type ReplyTooLongError struct{ Limit int }

func (e *ReplyTooLongError) Error() string {
	return fmt.Sprintf("the reply's text and thinking passed %d bytes: the stream was closed", e.Limit)
}

// DefaultMaxToolArguments is Request.MaxToolArguments's default: room for the largest call the
// tools accept (two fields of 10 MB, the tools' per-field limit, with their JSON escapes), far
// below what would take the process's memory with it.
const DefaultMaxToolArguments = 24 << 20

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters json.RawMessage
}

// EventType says which fields of an Event are set.
type EventType uint8

// Event types. Content blocks are numbered by Event.Index in the order they appear in the
// assistant message; each block has a start, deltas and an end.
const (
	// EventTextStart, EventTextDelta (Delta), EventTextEnd (Content: the whole text).
	EventTextStart EventType = iota + 1
	EventTextDelta
	EventTextEnd
	// EventThinkingStart, EventThinkingDelta (Delta, or Signature when the API sends
	// one), EventThinkingEnd (Content: the whole thinking, Signature: the whole signature).
	EventThinkingStart
	EventThinkingDelta
	EventThinkingEnd
	// EventToolCallStart (ToolCall.ID and Name), EventToolCallDelta (Delta: a piece of the
	// arguments JSON), EventToolCallEnd (ToolCall complete, Arguments reassembled).
	EventToolCallStart
	EventToolCallDelta
	EventToolCallEnd
	// EventUsage: Usage holds the usage so far (not an increment).
	EventUsage
	// EventDone: StopReason is final; Stream.Message and Stream.Err tell the rest.
	EventDone
)

var eventNames = [...]string{
	EventTextStart: "text_start", EventTextDelta: "text_delta", EventTextEnd: "text_end",
	EventThinkingStart: "thinking_start", EventThinkingDelta: "thinking_delta", EventThinkingEnd: "thinking_end",
	EventToolCallStart: "toolcall_start", EventToolCallDelta: "toolcall_delta", EventToolCallEnd: "toolcall_end",
	EventUsage: "usage", EventDone: "done",
}

func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "unknown"
}

// Event is one step of a reply.
type Event struct {
	Type EventType
	// Index is the content block's index in the assistant message.
	Index int
	// Delta is the text, thinking or arguments piece of a delta event.
	Delta string
	// Signature is a thinking block's signature (Anthropic's signature_delta, the OpenAI
	// Responses API's reasoning item) on a thinking delta or end.
	Signature string
	// Content is the whole text or thinking of an end event.
	Content string
	// ToolCall is set on tool-call start (ID, Name) and end (all fields).
	ToolCall *ToolCall
	// Usage is set on EventUsage.
	Usage Usage
	// StopReason is set on EventDone.
	StopReason StopReason
}

// ToolCall is a complete tool call.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is a JSON object: what the model sent, or {} when it sent nothing, something
	// that is not a JSON object, or more than Request.MaxToolArguments (ArgumentsError then
	// says what).
	Arguments json.RawMessage
	// ArgumentsError is set when the streamed arguments were not a JSON object (cut short
	// by max tokens, or malformed) or too large to keep: the loop answers the call with it
	// as an error result, without running it.
	ArgumentsError string
}
