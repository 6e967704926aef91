package agent

import (
	"time"

	"github.com/nexus-run/nexus/internal/provider"
)

// EventType names a turn event. The ai-chat session kind maps them onto the ABI's events
// (docs/ai-chat.md): tokens to ai-token data, status to status events, the rest to data
// payloads of their own.
type EventType string

// Turn events.
const (
	// EventStatus: Status is connecting (a model call is sent), responding (its first
	// event arrived) or idle (the reply ended).
	EventStatus EventType = "status"
	// EventToken: Content is a piece of the reply's text block Index; Final marks its end.
	EventToken EventType = "token"
	// EventReasoningStarted, EventReasoning (Content), EventReasoningEnded: a thinking block.
	EventReasoningStarted EventType = "reasoning_started"
	EventReasoning        EventType = "reasoning"
	EventReasoningEnded   EventType = "reasoning_ended"
	// EventUsage: Usage is the reply's usage so far.
	EventUsage EventType = "usage"
	// EventToolDetected: the reply holds Call (complete).
	EventToolDetected EventType = "tool_detected"
	// EventBatchStarted: Calls calls are about to run, Parallel says how.
	EventBatchStarted EventType = "batch_started"
	// EventToolStarted, EventToolCompleted (Output, IsError): one call.
	EventToolStarted   EventType = "tool_started"
	EventToolCompleted EventType = "tool_completed"
	// EventToolProgress: Call is running; Elapsed since it started to run (a wait for the
	// user's confirmation is not counted), Output the tail of its output so far.
	EventToolProgress EventType = "tool_progress"
	// EventBatchHalted: a call failed in an ordered batch (Reason); the rest did not run.
	EventBatchHalted EventType = "batch_halted"
	// EventBatchCompleted: every call of the batch ran.
	EventBatchCompleted EventType = "batch_completed"
	// EventIterationCompleted: model call Iteration and its tools are done.
	EventIterationCompleted EventType = "iteration_completed"
	// EventTurnEnded: the turn is over; End (and Reason) say how.
	EventTurnEnded EventType = "turn_ended"
)

// Statuses of EventStatus.
const (
	StatusConnecting = "connecting"
	StatusResponding = "responding"
	StatusIdle       = "idle"
)

// Event is one step of a turn; Type says which fields are set.
type Event struct {
	Type      EventType
	Index     int
	Content   string
	Final     bool
	Status    string
	Usage     provider.Usage
	Call      *provider.ToolCall
	Output    string
	IsError   bool
	Elapsed   time.Duration
	Calls     int
	Parallel  bool
	Iteration int
	// WillContinue (iteration_completed): the model is called again.
	WillContinue bool
	End          string
	Reason       string
}
