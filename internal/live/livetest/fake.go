package livetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// T0 is where a FakeClock starts.
var T0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// FakeClock is a registry's injected clock (Config.Now): time moves only when the test moves it.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a clock standing at T0.
func NewFakeClock() *FakeClock { return &FakeClock{now: T0} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock on by d and returns the new time.
func (c *FakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// SeqIDs returns a session id source yielding sess-0001, sess-0002, ...
func SeqIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("sess-%04d", n.Add(1)) }
}

// CoreCapabilities is the capability set docs/ABI.md gives each session type; a FakeKind of
// the type declares it.
func CoreCapabilities(t abi.SessionType) abi.Capabilities {
	switch t {
	case abi.TypeTerminal:
		return abi.Capabilities{Send: true, Receive: true, Interrupt: true, Resize: true, Close: true, Restart: true, Stream: true}
	case abi.TypeAIChat:
		return abi.Capabilities{Send: true, Receive: true, Interrupt: true, Close: true, Stream: true}
	case abi.TypeMetaChat, abi.TypeDebugStream, abi.TypeNetworkStream:
		return abi.Capabilities{Receive: true, Close: true, Stream: true}
	}
	return abi.Capabilities{Receive: true, Close: true}
}

// Probe observes and drives one session backend from a test, the way its real source would
// (a PTY producing output, a shell exiting).
type Probe interface {
	Emit(b []byte)
	End(reason string, exitCode *int)
	SetMetadata(md map[string]any)
	Sends() []string
	Requests() []live.SendRequest
	Controls() []abi.ControlRequest
	Closes() int
	// Paused lists the SetPaused calls; nil when the backend is not a Pauser.
	Paused() []bool
	FailSend(err error)
	FailControl(err error)
	FailClose(err error)
}

// KindUnderTest is a Kind plus a probe into each backend it started.
type KindUnderTest interface {
	live.Kind
	Probe(t *testing.T, id string) Probe
}

// FakeKind is an in-memory Kind of any session type. Its instances record every call they
// receive; Start publishes metadata {"backend": "fake"}, as a real kind announces itself.
type FakeKind struct {
	typ    abi.SessionType
	caps   abi.Capabilities
	pauser bool
	// Refuse, when set, is asked first by Start: an error it returns fails the start.
	Refuse func(req abi.CreateRequest) error

	mu    sync.Mutex
	insts map[string]*FakeInstance
	view  live.View
}

// NewFakeKind returns a fake kind of typ with the ABI's capabilities for it; with pauser its
// instances implement live.Pauser.
func NewFakeKind(typ abi.SessionType, pauser bool) *FakeKind {
	return &FakeKind{typ: typ, caps: CoreCapabilities(typ), pauser: pauser, insts: map[string]*FakeInstance{}}
}

// WithCapabilities makes k declare caps instead of the ABI's set for its type.
func (k *FakeKind) WithCapabilities(caps abi.Capabilities) *FakeKind {
	k.caps = caps
	return k
}

// Type implements live.Kind.
func (k *FakeKind) Type() abi.SessionType { return k.typ }

// Capabilities implements live.Kind.
func (k *FakeKind) Capabilities() abi.Capabilities { return k.caps }

// Attach implements live.Observer: the kind keeps the view it was given (see View).
func (k *FakeKind) Attach(v live.View) {
	k.mu.Lock()
	k.view = v
	k.mu.Unlock()
}

// View is the registry view the kind received when it was registered (nil before).
func (k *FakeKind) View() live.View {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.view
}

// Start implements live.Kind.
func (k *FakeKind) Start(_ context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	if k.Refuse != nil {
		if err := k.Refuse(req); err != nil {
			return nil, err
		}
	}
	inst := &FakeInstance{sink: sink, req: req, pauser: k.pauser}
	k.mu.Lock()
	k.insts[sink.SessionID()] = inst
	k.mu.Unlock()
	sink.SetMetadata(map[string]any{"backend": "fake"})
	if k.pauser {
		return pausingInstance{inst}, nil
	}
	return inst, nil
}

// Instance returns the backend started for session id, or nil.
func (k *FakeKind) Instance(id string) *FakeInstance {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.insts[id]
}

// Probe implements KindUnderTest.
func (k *FakeKind) Probe(t *testing.T, id string) Probe {
	t.Helper()
	inst := k.Instance(id)
	if inst == nil {
		t.Fatalf("fake kind %s started no session %q", k.typ, id)
	}
	return inst
}

// FakeInstance is a session backend of a FakeKind.
type FakeInstance struct {
	sink   live.Sink
	req    abi.CreateRequest
	pauser bool

	mu                            sync.Mutex
	sends                         []string
	requests                      []live.SendRequest
	controls                      []abi.ControlRequest
	closes                        int
	paused                        []bool
	sendErr, controlErr, closeErr error
}

// Send implements live.Instance. An ai-chat fake reports a MessageID as the real one does
// with its queue: it numbers the sends the instance took (fake-1, fake-2, ...), so a caller
// can see that what a kind reports reaches it.
func (f *FakeInstance) Send(_ context.Context, req live.SendRequest) (live.SendResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sendErr != nil {
		return live.SendResult{}, f.sendErr
	}
	f.sends = append(f.sends, string(req.Data))
	f.requests = append(f.requests, req)
	if f.req.Type != abi.TypeAIChat {
		return live.SendResult{}, nil
	}
	return live.SendResult{MessageID: fmt.Sprintf("fake-%d", len(f.sends))}, nil
}

// Control implements live.Instance; its result is {"done": command}.
func (f *FakeInstance) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.controls = append(f.controls, req)
	if f.controlErr != nil {
		return nil, f.controlErr
	}
	return map[string]any{"done": string(req.Command)}, nil
}

// Close implements live.Instance.
func (f *FakeInstance) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	return f.closeErr
}

// Sink is the sink the registry gave this backend.
func (f *FakeInstance) Sink() live.Sink { return f.sink }

// Request is the create request the backend was started with.
func (f *FakeInstance) Request() abi.CreateRequest { return f.req }

// Emit publishes output as the backend's own.
func (f *FakeInstance) Emit(b []byte) { f.sink.Output(b) }

// EmitData publishes a data event under flow control (Sink.PublishFlow).
func (f *FakeInstance) EmitData(payload any) { f.sink.PublishFlow(payload) }

// End reports that the backend stopped by itself.
func (f *FakeInstance) End(reason string, exitCode *int) { f.sink.Ended(reason, exitCode) }

// SetMetadata publishes metadata as the backend's own.
func (f *FakeInstance) SetMetadata(md map[string]any) { f.sink.SetMetadata(md) }

// FailSend makes later sends fail with err (nil: succeed).
func (f *FakeInstance) FailSend(err error) { f.mu.Lock(); f.sendErr = err; f.mu.Unlock() }

// FailControl makes later control commands fail with err (nil: succeed).
func (f *FakeInstance) FailControl(err error) { f.mu.Lock(); f.controlErr = err; f.mu.Unlock() }

// FailClose makes later closes fail with err (nil: succeed).
func (f *FakeInstance) FailClose(err error) { f.mu.Lock(); f.closeErr = err; f.mu.Unlock() }

// Sends lists the input received, one entry per Send.
func (f *FakeInstance) Sends() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sends...)
}

// Requests lists the send requests received (data, mode, origin), one entry per Send.
func (f *FakeInstance) Requests() []live.SendRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]live.SendRequest(nil), f.requests...)
}

// Closes counts the Close calls.
func (f *FakeInstance) Closes() int { f.mu.Lock(); defer f.mu.Unlock(); return f.closes }

// Controls lists the control commands received.
func (f *FakeInstance) Controls() []abi.ControlRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.ControlRequest(nil), f.controls...)
}

// Paused lists the SetPaused calls; nil when the backend is not a Pauser.
func (f *FakeInstance) Paused() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.pauser {
		return nil
	}
	return append([]bool{}, f.paused...)
}

// pausingInstance is a FakeInstance that also implements live.Pauser.
type pausingInstance struct{ *FakeInstance }

func (p pausingInstance) SetPaused(paused bool) {
	p.mu.Lock()
	p.paused = append(p.paused, paused)
	p.mu.Unlock()
}

// ---- wrappers that change how any kind starts ----

// heldStart counts the starts it saw and holds each one in Start until the test opens the gate,
// so the window between reservation and registration stays open as long as the test needs.
type heldStart struct {
	KindUnderTest
	starts atomic.Int32
	gate   chan struct{}
}

func (k *heldStart) Start(ctx context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	k.starts.Add(1)
	<-k.gate
	return k.KindUnderTest.Start(ctx, sink, req)
}

// failStart fails every Start with err.
type failStart struct {
	KindUnderTest
	err error
}

func (k *failStart) Start(context.Context, live.Sink, abi.CreateRequest) (live.Instance, error) {
	return nil, k.err
}

// gatedStart blocks in Start until the test opens the gate, after announcing it got there.
type gatedStart struct {
	KindUnderTest
	entered chan struct{}
	gate    chan struct{}
}

func (k *gatedStart) Start(ctx context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	close(k.entered)
	<-k.gate
	return k.KindUnderTest.Start(ctx, sink, req)
}
