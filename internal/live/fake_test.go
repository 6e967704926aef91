package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/testkit"
)

// ---- deterministic clock and ids ----

// fakeClock is the registry's injected clock. Time only moves when a test moves it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// seqIDs returns an id source yielding sess-0001, sess-0002, ...
func seqIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("sess-%04d", n.Add(1)) }
}

// ---- the kind under test ----

// probe observes and drives one session backend from the test, the way its real source would
// (a PTY producing output, a shell exiting).
type probe interface {
	Emit(b []byte)
	End(reason string, exitCode *int)
	SetMetadata(md map[string]any)
	Sends() []string
	Controls() []abi.ControlRequest
	Closes() int
	// Paused lists the SetPaused calls; nil when the backend is not a Pauser.
	Paused() []bool
	FailSend(err error)
	FailControl(err error)
	FailClose(err error)
}

// kindUnderTest is what runRegistrySuite needs: a Kind, plus a probe into each backend it started.
type kindUnderTest interface {
	Kind
	Probe(t *testing.T, id string) probe
}

// fakeKind is an in-memory Kind. It records every call its instances receive.
type fakeKind struct {
	typ    abi.SessionType
	pauser bool // instances implement Pauser

	mu    sync.Mutex
	insts map[string]*fakeInstance
}

func newFakeKind(typ abi.SessionType, pauser bool) *fakeKind {
	return &fakeKind{typ: typ, pauser: pauser, insts: map[string]*fakeInstance{}}
}

func (k *fakeKind) Type() abi.SessionType { return k.typ }

func (k *fakeKind) Start(_ context.Context, sink *Sink, req abi.CreateRequest) (Instance, error) {
	inst := &fakeInstance{sink: sink, req: req, pauser: k.pauser}
	k.mu.Lock()
	k.insts[sink.SessionID()] = inst
	k.mu.Unlock()
	sink.SetMetadata(map[string]any{"backend": "fake"})
	if k.pauser {
		return pausingInstance{inst}, nil
	}
	return inst, nil
}

func (k *fakeKind) Probe(t *testing.T, id string) probe {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	inst, ok := k.insts[id]
	if !ok {
		t.Fatalf("fake kind %s started no session %q", k.typ, id)
	}
	return inst
}

type fakeInstance struct {
	sink   *Sink
	req    abi.CreateRequest
	pauser bool

	mu                            sync.Mutex
	sends                         []string
	controls                      []abi.ControlRequest
	closes                        int
	paused                        []bool
	sendErr, controlErr, closeErr error
}

func (f *fakeInstance) Send(_ context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sendErr != nil {
		return f.sendErr
	}
	f.sends = append(f.sends, string(data))
	return nil
}

func (f *fakeInstance) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.controls = append(f.controls, req)
	if f.controlErr != nil {
		return nil, f.controlErr
	}
	return map[string]any{"done": string(req.Command)}, nil
}

func (f *fakeInstance) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	return f.closeErr
}

func (f *fakeInstance) Emit(b []byte)                    { f.sink.Output(b) }
func (f *fakeInstance) End(reason string, exitCode *int) { f.sink.Ended(reason, exitCode) }
func (f *fakeInstance) SetMetadata(md map[string]any)    { f.sink.SetMetadata(md) }
func (f *fakeInstance) FailSend(err error)               { f.mu.Lock(); f.sendErr = err; f.mu.Unlock() }
func (f *fakeInstance) FailControl(err error)            { f.mu.Lock(); f.controlErr = err; f.mu.Unlock() }
func (f *fakeInstance) FailClose(err error)              { f.mu.Lock(); f.closeErr = err; f.mu.Unlock() }
func (f *fakeInstance) Sends() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sends...)
}
func (f *fakeInstance) Closes() int { f.mu.Lock(); defer f.mu.Unlock(); return f.closes }
func (f *fakeInstance) Controls() []abi.ControlRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.ControlRequest(nil), f.controls...)
}

func (f *fakeInstance) Paused() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.pauser {
		return nil
	}
	return append([]bool{}, f.paused...)
}

// pausingInstance is a fakeInstance that also implements Pauser.
type pausingInstance struct{ *fakeInstance }

func (p pausingInstance) SetPaused(paused bool) {
	p.mu.Lock()
	p.paused = append(p.paused, paused)
	p.mu.Unlock()
}

// ---- wrappers that change how any kind starts ----

// heldStart counts the starts it saw and holds each one in Start until the test opens the gate,
// so the window between reservation and registration stays open as long as the test needs.
type heldStart struct {
	kindUnderTest
	starts atomic.Int32
	gate   chan struct{}
}

func (k *heldStart) Start(ctx context.Context, sink *Sink, req abi.CreateRequest) (Instance, error) {
	k.starts.Add(1)
	<-k.gate
	return k.kindUnderTest.Start(ctx, sink, req)
}

// failStart fails every Start with err.
type failStart struct {
	kindUnderTest
	err error
}

func (k *failStart) Start(context.Context, *Sink, abi.CreateRequest) (Instance, error) {
	return nil, k.err
}

// gatedStart blocks in Start until the test opens the gate, after announcing it got there.
type gatedStart struct {
	kindUnderTest
	entered chan struct{}
	gate    chan struct{}
}

func (k *gatedStart) Start(ctx context.Context, sink *Sink, req abi.CreateRequest) (Instance, error) {
	close(k.entered)
	<-k.gate
	return k.kindUnderTest.Start(ctx, sink, req)
}

// ---- registry helpers ----

// newReg builds a registry on a fake clock and sequential ids. The background sweeper is pushed
// out of the way (tests call Sweep with chosen times), and the registry is shut down at the end.
func newReg(t *testing.T, cfg Config, kinds ...Kind) (*Registry, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	if cfg.Now == nil {
		cfg.Now = clk.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = seqIDs()
	}
	if cfg.Sweep == 0 {
		cfg.Sweep = 24 * time.Hour
	}
	r := New(cfg, kinds...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r, clk
}

func mustCreate(t *testing.T, r *Registry, req abi.CreateRequest) abi.Session {
	t.Helper()
	s, err := r.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create(%+v): %v", req, err)
	}
	return s
}

// wantCode fails unless err carries code (and the code's retriable flag is as the ABI says).
func wantCode(t *testing.T, err error, code abi.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	var e *abi.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) carries no ABI code, want %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("error %v has code %s, want %s", err, e.Code, code)
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

// readAll returns every event currently retained, without waiting.
func readAll(t *testing.T, r *Registry, id string) Batch {
	t.Helper()
	b, err := r.Read(context.Background(), id, 0, 0, 0)
	if err != nil {
		t.Fatalf("Read(%s): %v", id, err)
	}
	return b
}

// readUntilDone reads from after until the session's log is finished, blocking on new events
// (this is how a test waits for an asynchronous close without sleeping).
func readUntilDone(t *testing.T, r *Registry, id string, after uint64) []*Event {
	t.Helper()
	ctx := testCtx(t)
	var out []*Event
	for {
		b, err := r.Read(ctx, id, after, 0, time.Minute)
		if err != nil {
			t.Fatalf("Read(%s, after %d): %v", id, after, err)
		}
		out = append(out, b.Events...)
		after = b.Next
		if b.Done {
			return out
		}
	}
}

// describe renders an event compactly for sequence comparisons.
func describe(e *Event) string {
	switch p := e.Payload.(type) {
	case Output:
		return "data:" + string(p)
	case abi.StatusPayload:
		return "status:" + p.Status + "/" + string(p.SessionStatus)
	case abi.InterruptPayload:
		return "interrupt:" + p.Reason
	case abi.ClosePayload:
		s := "close:" + p.Reason + "/" + string(p.Status)
		if p.ExitCode != nil {
			s += fmt.Sprintf("/exit=%d", *p.ExitCode)
		}
		return s
	case abi.ErrorPayload:
		return "error:" + string(p.Error.Code)
	case abi.MetadataPayload:
		return "metadata"
	}
	return fmt.Sprintf("%s:%T", e.Type, e.Payload)
}

func describeAll(es []*Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = describe(e)
	}
	return out
}

// without drops the metadata events (kinds publish them at will) from a description list.
func withoutMetadata(ds []string) []string {
	out := ds[:0:0]
	for _, d := range ds {
		if d != "metadata" {
			out = append(out, d)
		}
	}
	return out
}

func wantEvents(t *testing.T, got []*Event, want ...string) {
	t.Helper()
	g := withoutMetadata(describeAll(got))
	if strings.Join(g, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n got  %v\n want %v", g, want)
	}
}

// tail returns the last n described events (metadata excluded).
func tail(es []*Event, n int) []string {
	d := withoutMetadata(describeAll(es))
	if len(d) < n {
		return d
	}
	return d[len(d)-n:]
}

func missedOf(t *testing.T, e *Event) uint64 {
	t.Helper()
	p, ok := e.Payload.(abi.ErrorPayload)
	if !ok || p.Error.Code != abi.CodeEventsMissed || e.Seq != 0 || e.Type != abi.EventError {
		t.Fatalf("event %s (seq %d) is not a synthetic EVENTS_MISSED error", describe(e), e.Seq)
	}
	n, ok := p.Error.Details["missed"].(uint64)
	if !ok {
		t.Fatalf("missed detail is %T", p.Error.Details["missed"])
	}
	return n
}

func intp(n int) *int { return &n }
