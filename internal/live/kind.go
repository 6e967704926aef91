package live

import (
	"context"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Kind creates the sessions of one type and describes them. A kind knows nothing of HTTP; it
// reports through its Sink.
type Kind interface {
	// Type is the session type the kind serves.
	Type() abi.SessionType
	// Capabilities is what every session of the kind supports; the registry refuses the
	// rest before it reaches an instance, and the session object carries it.
	Capabilities() abi.Capabilities
	// Start validates req and starts the session's backend. ctx bounds the start only.
	Start(ctx context.Context, sink Sink, req abi.CreateRequest) (Instance, error)
}

// Observer is implemented by kinds whose sessions watch other sessions (meta-chat): when the
// kind is registered, Attach gives it a read-only view of the registry.
type Observer interface {
	Attach(v View)
}

// Instance is one running session backend.
type Instance interface {
	// Send delivers input and returns what it did (SendResult.MessageID; the registry sets
	// AfterSeq).
	Send(ctx context.Context, req SendRequest) (SendResult, error)
	// Control runs interrupt, resize or restart and returns the command's result object.
	Control(ctx context.Context, req abi.ControlRequest) (any, error)
	// Close stops the backend and releases every resource (processes reaped). It must be idempotent.
	Close(ctx context.Context) error
}

// Runner is implemented by instances that can run one command and return a structured result
// (terminal sessions: an agent shell beside the PTY).
type Runner interface {
	Run(ctx context.Context, req abi.RunRequest) (any, error)
}

// Beginner is implemented by instances that hold their output back until the runtime has
// announced the session (its "connected" status), so every log opens the same way.
type Beginner interface {
	Begin()
}

// DataKeeper is a Kind whose sessions' data events are derived from something kept elsewhere
// (a debug stream's lines are in the followed process's log files): their event logs keep data
// events in memory only (LogLimits.VolatileData). After a gateway restart such a session's
// status, errors and close are still there; its data is not.
type DataKeeper interface {
	Kind
	DataKeptElsewhere() bool
}

// Resumer is implemented by instances whose interrupt stops their delivery while the session
// stays active (debug and network streams, meta-chat): resume on an active session starts it
// again, after what was last delivered.
type Resumer interface {
	Resume(ctx context.Context) (any, error)
}

// Pauser is implemented by instances that can stop producing events while paused.
type Pauser interface {
	SetPaused(paused bool)
}

// Sink is how an instance reports events and state to the runtime, and the lifetime it runs
// under. It is an interface so a kind depends on nothing of the registry that serves it: the
// registry in this process gives a sink of its own (regSink), a registry elsewhere may give
// another. See regSink's methods for what each does.
type Sink interface {
	// Context is the session's lifetime: it is cancelled once the session has closed (after
	// its instance's Close). Start's ctx bounds the start only; what a kind runs for the
	// session's whole life derives from this one, never from context.Background().
	Context() context.Context
	// SessionID is the id of the session this sink reports for.
	SessionID() string
	// Output publishes terminal output bytes as a data event, under flow control.
	Output(b []byte)
	// PublishFlow publishes a data event under the flow control of Output.
	PublishFlow(payload any)
	// PublishFlowAll publishes data events in order, a step at a time, under flow control.
	PublishFlowAll(payloads []any)
	// Publish publishes an event with a payload of the ABI's payload types.
	Publish(typ abi.EventType, payload any)
	// SetMetadata merges keys into the session object's metadata and publishes them.
	SetMetadata(md map[string]any)
	// Ended tells the runtime the backend stopped by itself; the session closes.
	Ended(reason string, exitCode *int)
	// LastSeq is the sequence number of the session's newest event.
	LastSeq() uint64
	// Now is the runtime's clock.
	Now() time.Time
}

// regSink is the Sink of a session of this process's Registry.
type regSink struct {
	r *Registry
	s *session
}

var _ Sink = (*regSink)(nil)

// Context is the session's lifetime: it is cancelled once the session has closed (after its
// instance's Close). Start's ctx bounds the start only; what a kind runs for the session's
// whole life derives from this one, never from context.Background().
func (k *regSink) Context() context.Context { return k.s.lifetime(k.r.base) }

// SessionID is the id of the session this sink reports for.
func (k *regSink) SessionID() string { return k.s.id }

// Output publishes terminal output bytes as a data event. The slice is retained; do not reuse it.
//
// Output blocks while a follower is far behind (see flow.go), which pushes back on the producer;
// a backend must call it from the goroutine that reads its output, never holding a lock.
func (k *regSink) Output(b []byte) {
	k.s.log.flow().WaitRoom()
	k.s.publish(k.r.now(), abi.EventData, Output(b))
}

// PublishFlow publishes a data event under the flow control of Output: while a follower is
// far behind it waits (at most MaxStall without progress), so a stream of many small events
// (an AI reply's tokens) pushes back on its producer instead of lapping a slow reader. Call it
// as Output: from the producing goroutine, holding no lock.
func (k *regSink) PublishFlow(payload any) {
	k.s.log.flow().WaitRoom()
	k.s.publish(k.r.now(), abi.EventData, payload)
}

// PublishFlowAll publishes data events as PublishFlow does, in order, appended a step at a time:
// a reader woken by the first sees the rest of its step, and the log takes each step in one
// go (one lock, one wake-up, one write), which is what makes a flood of small events cheap.
// Flow control is applied before each step; a step is at most an eighth of the log's ring.
func (k *regSink) PublishFlowAll(payloads []any) {
	step := max(1, k.s.log.limits.Events/8)
	for len(payloads) > 0 {
		n := min(len(payloads), step)
		k.s.log.flow().WaitRoom()
		k.s.publishAll(k.r.now(), abi.EventData, payloads[:n])
		payloads = payloads[n:]
	}
}

// Publish publishes an event with a payload of the ABI's payload types.
func (k *regSink) Publish(typ abi.EventType, payload any) {
	k.s.publish(k.r.now(), typ, payload)
}

// SetMetadata merges keys into the session object's metadata and publishes a metadata event.
func (k *regSink) SetMetadata(md map[string]any) {
	k.s.mu.Lock()
	for key, v := range md {
		k.s.obj.Metadata[key] = v
	}
	k.s.mu.Unlock()
	k.Publish(abi.EventMetadata, abi.MetadataPayload{Type: abi.PayloadMetadata, Metadata: md})
	k.r.changed()
}

// Ended tells the runtime the backend stopped by itself (a shell exited); the session closes.
func (k *regSink) Ended(reason string, exitCode *int) {
	go k.r.finish(context.Background(), k.s, reason, exitCode)
}

// LastSeq is the sequence number of the session's newest event: what a control command's
// caller follows the events it causes from.
func (k *regSink) LastSeq() uint64 {
	last, _ := k.s.log.lastSeq(k.s.log.ctx) // a log that cannot answer fails its reads too
	return last
}

// Now is the runtime's clock.
func (k *regSink) Now() time.Time { return k.r.now() }

// SendRequest is one input to a session: its bytes and what the caller says of them. It is
// a plain value, not something carried in a context, so it can cross a network to a registry
// (or an instance) elsewhere.
type SendRequest struct {
	Data []byte
	// Mode is an ai-chat message's queue mode ("" for the session's own); other kinds ignore it.
	Mode string
	// Origin is where the input came from (the CLI, the console, another agent); the gateway
	// sets it from how the request was authenticated. Zero means unknown.
	Origin abi.Origin
}

// SendResult is what a send did.
type SendResult struct {
	// AfterSeq is the sequence number of the session's newest event before the input was
	// delivered: the events it causes come after it. The registry sets it (a kind's value is
	// replaced), since only the registry reads the log before the instance sees the input.
	AfterSeq uint64
	// MessageID is set by a kind that queued the input durably (ai-chat with its broker).
	MessageID string
}
