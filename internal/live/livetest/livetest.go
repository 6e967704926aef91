// Package livetest is the contract of a live-session backend, as tests every backend runs:
// Run checks a registry (status machine, expiry, idle and ephemeral reaping, retention, the cap,
// capabilities, the event log, shutdown, and — for a backend with a durable Store — restarts),
// RunKind checks a Kind through a registry, and RunEventLog checks an EventLog. It also holds
// the fakes those tests and others drive: FakeKind, FakeClock, SeqIDs.
package livetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

// Backend is what the suite drives: the gateway's interface plus the hooks a test needs.
type Backend interface {
	live.Backend
	// Sweep runs the expiry, idleness and retention checks as of now (the sweeper's tick).
	Sweep(ctx context.Context, now time.Time)
	// LiveCount is the number of live (active, paused or starting) sessions.
	LiveCount() int
	// Config is the effective configuration.
	Config() live.Config
	// Check returns nil when a session is usable, or the error a command using it would get.
	Check(ctx context.Context, id string) error
	// Register adds a kind after the backend was built.
	Register(k live.Kind) error
}

// Harness builds the backends under test.
type Harness struct {
	// New builds a backend on cfg serving kinds. cfg.Store, when set, is the store it must
	// keep its sessions in.
	New func(t *testing.T, cfg live.Config, kinds ...live.Kind) Backend
	// Store, when set, opens the durable store kept in dir: the whole contract then runs on
	// it, and so do the restart tests, which build a second backend on the store the first
	// left (after a clean shutdown, or with the first store closed under a running backend,
	// which is what a kill -9 leaves).
	Store func(t *testing.T, dir string) live.Store
}

// suiteEnv is what one test of the suite builds its backends with.
type suiteEnv struct {
	h Harness
}

// newReg builds a backend on a fresh FakeClock (standing at T0), with sequential ids, the
// sweeper pushed out of the way (tests call Sweep with chosen times) and, when the harness has
// a durable store, a store of its own; it is shut down when the test ends.
func newReg(t *testing.T, se *suiteEnv, cfg live.Config, kinds ...live.Kind) (Backend, *FakeClock) {
	t.Helper()
	clk := NewFakeClock()
	if se.h.Store != nil && cfg.Store == nil {
		cfg.Store = se.h.Store(t, t.TempDir())
	}
	return build(t, se.h, clk, cfg, kinds...), clk
}

// build makes a backend on clk and shuts it down when the test ends.
func build(t *testing.T, h Harness, clk *FakeClock, cfg live.Config, kinds ...live.Kind) Backend {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = clk.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = SeqIDs()
	}
	if cfg.Sweep == 0 {
		cfg.Sweep = 24 * time.Hour
	}
	b := h.New(t, cfg, kinds...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		if err := b.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return b
}

// testFunc is one test of the registry contract.
type testFunc func(t *testing.T, se *suiteEnv, newKind newKindFunc)

// newKindFunc builds the kind under test for a session type.
type newKindFunc func(t *testing.T, typ abi.SessionType) KindUnderTest

// Run checks the registry contract on the backends h builds, with FakeKind (plain and a
// live.Pauser) as the kinds.
func Run(t *testing.T, h Harness) {
	t.Helper()
	variants := []struct {
		name   string
		pauser bool
	}{{"fake", false}, {"fake-pauser", true}}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			newKind := func(_ *testing.T, typ abi.SessionType) KindUnderTest { return NewFakeKind(typ, v.pauser) }
			for _, tc := range registryTests() {
				t.Run(tc.name, func(t *testing.T) { tc.fn(t, &suiteEnv{h: h}, newKind) })
			}
		})
	}
	if h.Store != nil {
		newKind := func(_ *testing.T, typ abi.SessionType) KindUnderTest { return NewFakeKind(typ, true) }
		for _, tc := range restartTests() {
			t.Run("restart/"+tc.name, func(t *testing.T) { tc.fn(t, &suiteEnv{h: h}, newKind) })
		}
	}
}

type namedTest struct {
	name string
	fn   testFunc
}

func registryTests() []namedTest {
	return []namedTest{
		{"CreateIsActive", testCreateIsActive},
		{"CreateRefusesBadRequests", testCreateRefusesBadRequests},
		{"RegisterLater", testRegisterLater},
		{"PauseResume", testPauseResume},
		{"Close", testClose},
		{"ClosedIsFinal", testClosedIsFinal},
		{"ErrorIsFinal", testErrorIsFinal},
		{"BackendEnded", testBackendEnded},
		{"CloseErrorStillCloses", testCloseErrorStillCloses},
		{"SendAndControl", testSendAndControl},
		{"KindErrors", testKindErrors},
		{"Capabilities", testCapabilities},
		{"UnknownID", testUnknownID},
		{"ExpiryLazy", testExpiryLazy},
		{"ExpiryBySweep", testExpiryBySweep},
		{"IdleReaping", testIdleReaping},
		{"Ephemeral", testEphemeral},
		{"Retention", testRetention},
		{"ListOrder", testListOrder},
		{"Cap", testCap},
		{"StartErrorReleasesSlot", testStartErrorReleasesSlot},
		{"Shutdown", testShutdown},
		{"ShutdownDuringCreate", testShutdownDuringCreate},
		{"SetMetadata", testSetMetadata},
		{"View", testView},
		{"EventSeq", testEventSeq},
		{"ReadAfter", testReadAfter},
		{"ReadMissed", testReadMissed},
		{"ReadMissedWithLimit", testReadMissedWithLimit},
		{"ReadWait", testReadWait},
		{"ReadWaitCancel", testReadWaitCancel},
		{"Concurrent", testConcurrent},
	}
}

// ---- helpers ----

var termReq = abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "demo"}}

// allKinds builds one kind per session type.
func allKinds(t *testing.T, newKind newKindFunc) (map[abi.SessionType]KindUnderTest, []live.Kind) {
	m := map[abi.SessionType]KindUnderTest{}
	var ks []live.Kind
	for _, typ := range abi.Types() {
		k := newKind(t, typ)
		m[typ] = k
		ks = append(ks, k)
	}
	return m, ks
}

func mustCreate(t *testing.T, r Backend, req abi.CreateRequest) abi.Session {
	t.Helper()
	s, err := r.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("Create(%+v): %v", req, err)
	}
	return s
}

// WantCode fails the test unless err carries the ABI error code.
func WantCode(t testing.TB, err error, code abi.Code) {
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

// Send sends data to session id with no mode or origin, for a test that wants only the error.
func Send(ctx context.Context, r live.Backend, id string, data []byte) error {
	_, err := r.Send(ctx, id, live.SendRequest{Data: data})
	return err
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

func list(t *testing.T, r Backend, all bool) []abi.Session {
	t.Helper()
	ss, err := r.List(context.Background(), all)
	mustOK(t, err)
	return ss
}

func lastSeq(t *testing.T, r Backend, id string) uint64 {
	t.Helper()
	n, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	return n
}

// readAll returns every event currently retained, without waiting.
func readAll(t *testing.T, r live.View, id string) live.Batch {
	t.Helper()
	b, err := r.Read(context.Background(), id, 0, 0, 0)
	if err != nil {
		t.Fatalf("Read(%s): %v", id, err)
	}
	return b
}

// ReadUntilDone reads a session's events from after until its log is finished, blocking on
// new events (this is how a test waits for an asynchronous close without sleeping).
func ReadUntilDone(t *testing.T, r live.View, id string, after uint64) []*live.Event {
	t.Helper()
	ctx := testCtx(t)
	var out []*live.Event
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

// Describe renders an event compactly for sequence comparisons: "data:<output>",
// "status:<state>/<session status>", "close:<reason>/<status>[/exit=N]", "error:<code>", ...
func Describe(e *live.Event) string {
	switch p := e.Payload.(type) {
	case live.Output:
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

// DescribeAll describes each event.
func DescribeAll(es []*live.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = Describe(e)
	}
	return out
}

// withoutMetadata drops the metadata events (kinds publish them at will) from a description list.
func withoutMetadata(ds []string) []string {
	out := ds[:0:0]
	for _, d := range ds {
		if d != "metadata" {
			out = append(out, d)
		}
	}
	return out
}

func wantEvents(t *testing.T, got []*live.Event, want ...string) {
	t.Helper()
	g := withoutMetadata(DescribeAll(got))
	if strings.Join(g, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n got  %v\n want %v", g, want)
	}
}

// tail returns the last n described events (metadata excluded).
func tail(es []*live.Event, n int) []string {
	d := withoutMetadata(DescribeAll(es))
	if len(d) < n {
		return d
	}
	return d[len(d)-n:]
}

// MissedOf returns how many events a synthetic EVENTS_MISSED event reports, failing the test
// for any other event.
func MissedOf(t testing.TB, e *live.Event) uint64 {
	t.Helper()
	p, ok := e.Payload.(abi.ErrorPayload)
	if !ok || p.Error.Code != abi.CodeEventsMissed || e.Seq != 0 || e.Type != abi.EventError {
		t.Fatalf("event %s (seq %d) is not a synthetic EVENTS_MISSED error", Describe(e), e.Seq)
	}
	n, ok := p.Error.Details["missed"].(uint64)
	if !ok {
		t.Fatalf("missed detail is %T", p.Error.Details["missed"])
	}
	return n
}

func intp(n int) *int { return &n }

func control(r Backend, id string, cmd abi.Command) error {
	_, err := r.Control(context.Background(), id, abi.ControlRequest{Command: cmd, Width: 80, Height: 24})
	return err
}
