package livetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// testRegisterLater: a kind registered after the backend was built serves at once, describes
// its own sessions, and an Observer gets its read-only view; a type cannot be registered twice.
func testRegisterLater(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
	ctx := testCtx(t)
	_, err := r.Create(ctx, abi.CreateRequest{Type: abi.TypeDebugStream})
	WantCode(t, err, abi.CodeCapabilityUnsupported)

	caps := abi.Capabilities{Receive: true, Close: true} // not the ABI's set: the kind's word counts
	k := NewFakeKind(abi.TypeDebugStream, false).WithCapabilities(caps)
	mustOK(t, r.Register(k))
	if k.View() == nil {
		t.Fatal("an Observer kind got no view when it was registered")
	}
	s := mustCreate(t, r, abi.CreateRequest{Type: abi.TypeDebugStream})
	if s.Capabilities != caps {
		t.Errorf("capabilities %+v, want the kind's %+v", s.Capabilities, caps)
	}
	WantCode(t, control(r, s.SessionID, abi.CommandPause), abi.CodeCapabilityUnsupported)
	if err := r.Register(NewFakeKind(abi.TypeDebugStream, false)); err == nil {
		t.Error("a second kind of the same type was registered")
	}
	_, err = r.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat})
	if WantCode(t, err, abi.CodeCapabilityUnsupported); !strings.Contains(err.Error(), "debug-stream, terminal") {
		t.Errorf("error %q does not list the registered types", err)
	}

	// A kind of a type the ABI does not know yet is served as any other.
	custom := NewFakeKind("build-log", false)
	mustOK(t, r.Register(custom))
	c := mustCreate(t, r, abi.CreateRequest{Type: "build-log"})
	if c.Type != "build-log" || c.Capabilities != custom.Capabilities() {
		t.Errorf("custom kind's session = %+v", c)
	}
}

// testView: the view an Observer gets lists and reads every session, and WatchSessions wakes
// on each change, so a meta-chat session can follow the others without polling.
func testView(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	meta := NewFakeKind(abi.TypeMetaChat, false)
	r, _ := newReg(t, se, live.Config{}, k, meta)
	ctx := testCtx(t)
	v := meta.View()
	if v == nil {
		t.Fatal("the observer kind got no view")
	}
	if _, ok := v.(live.Backend); ok {
		t.Fatal("the view is the whole backend: an observer could create and close sessions")
	}
	snap, err := v.WatchSessions(ctx, 0, time.Hour)
	mustOK(t, err)
	if len(snap.Sessions) != 0 || snap.Version == 0 {
		t.Fatalf("first snapshot %+v (version 0 must answer at once with a version to wait on)", snap)
	}

	// until watches for changes until the sessions satisfy ok, as a meta-chat session would;
	// start begins the first watch before the change is made.
	type result struct {
		snap live.Snapshot
		err  error
	}
	watch := func(after uint64) <-chan result {
		ch := make(chan result, 1)
		go func() {
			s, err := v.WatchSessions(ctx, after, time.Hour)
			ch <- result{s, err}
		}()
		return ch
	}
	until := func(what string, ch <-chan result, ok func([]abi.Session) bool) {
		t.Helper()
		for {
			res := <-ch
			mustOK(t, res.err)
			if res.snap.Version == snap.Version {
				t.Fatalf("WatchSessions returned version %d it was asked to wait past", res.snap.Version)
			}
			snap = res.snap
			if ok(snap.Sessions) {
				return
			}
			if snap.Version > 1000 {
				t.Fatalf("never saw %s: %+v", what, snap.Sessions)
			}
			ch = watch(snap.Version)
		}
	}

	ch := watch(snap.Version)
	s := mustCreate(t, r, termReq)
	until("the new session", ch, func(ss []abi.Session) bool { return hasSession(ss, s.SessionID, abi.StatusActive) })
	ch = watch(snap.Version)
	mustOK(t, control(r, s.SessionID, abi.CommandPause))
	until("the pause", ch, func(ss []abi.Session) bool { return hasSession(ss, s.SessionID, abi.StatusPaused) })
	ch = watch(snap.Version)
	_, err = r.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	until("the close", ch, func(ss []abi.Session) bool { return hasSession(ss, s.SessionID, abi.StatusClosed) })

	ls, err := v.List(ctx, true)
	mustOK(t, err)
	if len(ls) != 1 || ls[0].SessionID != s.SessionID {
		t.Errorf("view lists %+v", ls)
	}
	obj, err := v.Get(ctx, s.SessionID)
	mustOK(t, err)
	if obj.Status != abi.StatusClosed {
		t.Errorf("view gets %+v", obj)
	}
	b := readAll(t, v, s.SessionID)
	if tl := tail(b.Events, 1); fmt.Sprint(tl) != "[close:user-requested/closed]" || !b.Done {
		t.Errorf("view reads %v", DescribeAll(b.Events))
	}
	if n, err := v.LastSeq(ctx, s.SessionID); err != nil || n != b.Next {
		t.Errorf("view LastSeq = %d, %v; want %d", n, err, b.Next)
	}
	_, err = v.Get(ctx, "nope")
	WantCode(t, err, abi.CodeSessionNotFound)

	// A wait that elapses returns the unchanged snapshot; a cancelled one says so.
	same, err := v.WatchSessions(ctx, snap.Version, time.Millisecond)
	mustOK(t, err)
	if same.Version != snap.Version {
		t.Errorf("elapsed watch moved the version %d -> %d", snap.Version, same.Version)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := v.WatchSessions(cctx, snap.Version, time.Hour); err == nil {
		t.Error("a cancelled watch returned no error")
	}
}

func hasSession(ss []abi.Session, id string, status abi.Status) bool {
	for _, s := range ss {
		if s.SessionID == id && s.Status == status {
			return true
		}
	}
	return false
}

// testConcurrent drives many sessions at once — output, input, control, readers, followers,
// closes — so the race detector sees every lock of the backend and its store, and checks that
// every reader got each session's events once, in order, ending with the close.
func testConcurrent(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{Log: live.LogLimits{Events: 64, Bytes: 1 << 20, Pinned: 64, MaxStall: time.Hour}}, k)
	ctx := testCtx(t)
	const sessions, chunks, readers = 4, 300, 3
	var wg sync.WaitGroup
	errs := make(chan error, sessions*(readers+2))
	for range sessions {
		s := mustCreate(t, r, termReq)
		p := k.Probe(t, s.SessionID)
		// The follower registers before any output: from then on, output waits for it.
		f, err := r.Follow(ctx, s.SessionID, 0)
		mustOK(t, err)
		for i := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 0 {
					defer f.Close()
					errs <- readInOrder(ctx, r, s.SessionID, f)
					return
				}
				errs <- readInOrder(ctx, r, s.SessionID, nil)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range chunks {
				p.Emit(fmt.Appendf(nil, "%d ", i))
				if i%50 == 0 {
					if err := Send(ctx, r, s.SessionID, []byte("x")); err != nil {
						errs <- err
						return
					}
					if _, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
						errs <- err
						return
					}
				}
			}
			_, err := r.Close(ctx, s.SessionID, abi.CloseRequested)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// readInOrder reads a session to its end, as a follower that acknowledges what it read (and so
// must miss nothing: output waits for it) or as a plain reader, and checks that sequence
// numbers only increase and the close event comes last.
func readInOrder(ctx context.Context, r Backend, id string, f live.Follower) error {
	var after, missed uint64
	closed := false
	for {
		b, err := r.Read(ctx, id, after, 17, time.Minute)
		if err != nil {
			return err
		}
		for _, e := range b.Events {
			if e.Seq == 0 {
				p, _ := e.Payload.(abi.ErrorPayload)
				n, _ := p.Error.Details["missed"].(uint64)
				missed += n
				continue
			}
			if e.Seq <= after {
				return fmt.Errorf("%s: seq %d after %d", id, e.Seq, after)
			}
			after = e.Seq
			closed = e.Type == abi.EventClose
			if f != nil {
				f.Ack(after)
			}
		}
		after = max(after, b.Next)
		if b.Done {
			if !closed {
				return fmt.Errorf("%s: the log ended without a close event last", id)
			}
			if f != nil && missed > 0 {
				return fmt.Errorf("%s: a follower missed %d events", id, missed)
			}
			return nil
		}
	}
}
