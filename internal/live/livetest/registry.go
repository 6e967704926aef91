package livetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

func testCreateIsActive(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	kinds, ks := allKinds(t, newKind)
	r, clk := newReg(t, se, live.Config{}, ks...)
	ctx := testCtx(t)
	for _, typ := range abi.Types() {
		t.Run(string(typ), func(t *testing.T) {
			clk.Advance(time.Second)
			req := abi.CreateRequest{Type: typ, Context: abi.Context{ProjectID: "p", ChatID: "c"}}
			s := mustCreate(t, r, req)
			if s.Status != abi.StatusActive {
				t.Errorf("status = %s, want active", s.Status)
			}
			if s.Type != typ || s.Capabilities != kinds[typ].Capabilities() {
				t.Errorf("type %s capabilities %+v, want the kind's %+v", s.Type, s.Capabilities, kinds[typ].Capabilities())
			}
			if s.CreatedAt != abi.FormatTime(clk.Now()) || s.ExpiresAt != "" {
				t.Errorf("createdAt %q expiresAt %q", s.CreatedAt, s.ExpiresAt)
			}
			if s.Transport != abi.TransportWebSocket {
				t.Errorf("default transport = %q", s.Transport)
			}
			if s.Context != req.Context {
				t.Errorf("context = %+v", s.Context)
			}
			if s.Metadata == nil || s.Metadata["backend"] != "fake" {
				t.Errorf("metadata = %v (the kind's SetMetadata during Start must land)", s.Metadata)
			}
			got, err := r.Get(ctx, s.SessionID)
			mustOK(t, err)
			if fmt.Sprint(got) != fmt.Sprint(s) {
				t.Errorf("Get = %+v, Create = %+v", got, s)
			}
			mustOK(t, r.Check(ctx, s.SessionID))
			wantEvents(t, readAll(t, r, s.SessionID).Events, "status:connecting/active", "status:connected/active")
			_ = kinds[typ].Probe(t, s.SessionID)
		})
	}
	if n := len(list(t, r, false)); n != len(abi.Types()) || r.LiveCount() != n {
		t.Errorf("List(false) has %d sessions, LiveCount %d; want %d", n, r.LiveCount(), len(abi.Types()))
	}

	t.Run("ids are the injected ones", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		for i := 1; i <= 3; i++ {
			if s := mustCreate(t, r, termReq); s.SessionID != fmt.Sprintf("sess-%04d", i) {
				t.Errorf("id = %s", s.SessionID)
			}
		}
	})
	t.Run("ttl, transport, ephemeral", func(t *testing.T) {
		r, clk := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		req := termReq
		req.TTLSeconds, req.Transport, req.Ephemeral = 90, abi.TransportPolling, true
		s := mustCreate(t, r, req)
		if s.ExpiresAt != abi.FormatTime(clk.Now().Add(90*time.Second)) {
			t.Errorf("expiresAt = %q", s.ExpiresAt)
		}
		if s.Transport != abi.TransportPolling || s.Metadata["ephemeral"] != true {
			t.Errorf("transport %q metadata %v", s.Transport, s.Metadata)
		}
	})
	t.Run("snapshots are copies", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		s := mustCreate(t, r, termReq)
		s.Metadata["tampered"] = true
		got, err := r.Get(context.Background(), s.SessionID)
		mustOK(t, err)
		if _, ok := got.Metadata["tampered"]; ok {
			t.Error("a returned session object shares its metadata map with the registry")
		}
	})
}

func testCreateRefusesBadRequests(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
	tests := []struct {
		name string
		req  abi.CreateRequest
		code abi.Code
	}{
		{"unknown type", abi.CreateRequest{Type: "shell"}, abi.CodeInvalidArgument},
		{"empty type", abi.CreateRequest{}, abi.CodeInvalidArgument},
		{"type not served", abi.CreateRequest{Type: abi.TypeAIChat}, abi.CodeCapabilityUnsupported},
		{"unknown transport", abi.CreateRequest{Type: abi.TypeTerminal, Transport: "carrier-pigeon"}, abi.CodeInvalidArgument},
		{"negative ttl", abi.CreateRequest{Type: abi.TypeTerminal, TTLSeconds: -1}, abi.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Create(context.Background(), tc.req)
			WantCode(t, err, tc.code)
			if abi.CodeOf(err).Retriable() {
				t.Error("a bad request must not be retriable")
			}
			if tc.req.Type != abi.TypeTerminal && !strings.Contains(err.Error(), "serves: terminal") {
				t.Errorf("error %q does not say which types are served", err)
			}
		})
	}
	if r.LiveCount() != 0 || len(list(t, r, true)) != 0 {
		t.Errorf("refused creates left LiveCount %d, %d sessions", r.LiveCount(), len(list(t, r, true)))
	}
}

func testPauseResume(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	type step struct {
		cmd    abi.Command
		code   abi.Code // "" for success
		status abi.Status
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"pause then resume", []step{{abi.CommandPause, "", abi.StatusPaused}, {abi.CommandResume, "", abi.StatusActive}}},
		{"resume an active session", []step{{abi.CommandResume, abi.CodeInvalidArgument, abi.StatusActive}}},
		{"pause twice", []step{{abi.CommandPause, "", abi.StatusPaused}, {abi.CommandPause, abi.CodeInvalidArgument, abi.StatusPaused}}},
		{"resume twice", []step{{abi.CommandPause, "", abi.StatusPaused}, {abi.CommandResume, "", abi.StatusActive}, {abi.CommandResume, abi.CodeInvalidArgument, abi.StatusActive}}},
		{"cycle", []step{{abi.CommandPause, "", abi.StatusPaused}, {abi.CommandResume, "", abi.StatusActive}, {abi.CommandPause, "", abi.StatusPaused}, {abi.CommandResume, "", abi.StatusActive}}},
		{"close while paused", []step{{abi.CommandPause, "", abi.StatusPaused}, {abi.CommandClose, "", abi.StatusClosed}, {abi.CommandResume, abi.CodeSessionClosed, abi.StatusClosed}}},
		{"pause closed", []step{{abi.CommandClose, "", abi.StatusClosed}, {abi.CommandPause, abi.CodeSessionClosed, abi.StatusClosed}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			r, _ := newReg(t, se, live.Config{}, k)
			s := mustCreate(t, r, termReq)
			var wantPaused []bool
			for i, st := range tc.steps {
				data, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: st.cmd})
				if st.code != "" {
					WantCode(t, err, st.code)
				} else {
					mustOK(t, err)
					if data.SessionID != s.SessionID || data.Command != st.cmd {
						t.Errorf("step %d: control data %+v", i, data)
					}
					if st.cmd == abi.CommandPause || st.cmd == abi.CommandResume {
						wantPaused = append(wantPaused, st.cmd == abi.CommandPause)
					}
				}
				got, err := r.Get(context.Background(), s.SessionID)
				mustOK(t, err)
				if got.Status != st.status {
					t.Fatalf("step %d (%s): status %s, want %s", i, st.cmd, got.Status, st.status)
				}
				listed := false
				for _, l := range list(t, r, false) {
					listed = listed || l.SessionID == s.SessionID
				}
				if listed == st.status.Final() {
					t.Errorf("step %d: List(false) lists it = %v with status %s", i, listed, st.status)
				}
			}
			if p := k.Probe(t, s.SessionID).Paused(); p != nil && fmt.Sprint(p) != fmt.Sprint(wantPaused) {
				t.Errorf("SetPaused calls = %v, want %v", p, wantPaused)
			}
		})
	}

	t.Run("status events", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		s := mustCreate(t, r, termReq)
		mustOK(t, control(r, s.SessionID, abi.CommandPause))
		mustOK(t, control(r, s.SessionID, abi.CommandResume))
		wantEvents(t, readAll(t, r, s.SessionID).Events,
			"status:connecting/active", "status:connected/active", "status:idle/paused", "status:connected/active")
	})
}

func testClose(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, clk := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	closedAt := clk.Advance(time.Minute)
	got, err := r.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseRequested || got.Metadata["closedAt"] != abi.FormatTime(closedAt) {
		t.Errorf("closed session = %+v", got)
	}
	if got.SessionID != s.SessionID || got.CreatedAt != s.CreatedAt || got.Capabilities != s.Capabilities {
		t.Errorf("closing changed the session's identity: %+v", got)
	}
	if n := k.Probe(t, s.SessionID).Closes(); n != 1 {
		t.Errorf("backend closed %d times", n)
	}
	b := readAll(t, r, s.SessionID)
	wantEvents(t, b.Events, "status:connecting/active", "status:connected/active", "status:closed/closed", "close:user-requested/closed")
	if !b.Done {
		t.Error("log not done after close")
	}
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount = %d after close", r.LiveCount())
	}

	t.Run("via control", func(t *testing.T) {
		s := mustCreate(t, r, termReq)
		data, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandClose})
		mustOK(t, err)
		obj, ok := data.Result.(abi.Session)
		if data.Command != abi.CommandClose || data.SessionID != s.SessionID || !ok || obj.Status != abi.StatusClosed {
			t.Errorf("control close = %+v", data)
		}
	})
}

func testClosedIsFinal(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	_, err := r.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	ops := map[string]func() error{
		"close again":       func() error { _, err := r.Close(ctx, s.SessionID, abi.CloseRequested); return err },
		"control close":     func() error { return control(r, s.SessionID, abi.CommandClose) },
		"send":              func() error { return Send(ctx, r, s.SessionID, []byte("x")) },
		"interrupt":         func() error { return control(r, s.SessionID, abi.CommandInterrupt) },
		"resize":            func() error { return control(r, s.SessionID, abi.CommandResize) },
		"restart":           func() error { return control(r, s.SessionID, abi.CommandRestart) },
		"pause":             func() error { return control(r, s.SessionID, abi.CommandPause) },
		"resume":            func() error { return control(r, s.SessionID, abi.CommandResume) },
		"check":             func() error { return r.Check(ctx, s.SessionID) },
		"hold":              func() error { _, err := r.Hold(ctx, s.SessionID); return err },
		"close as shutdown": func() error { _, err := r.Close(ctx, s.SessionID, abi.CloseShutdown); return err },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			err := op()
			WantCode(t, err, abi.CodeSessionClosed)
			if abi.CodeOf(err).Retriable() {
				t.Error("SESSION_CLOSED must not be retriable")
			}
			var e *abi.Error
			if errors.As(err, &e) && e.SessionID != s.SessionID {
				t.Errorf("error names session %q", e.SessionID)
			}
		})
	}
	p := k.Probe(t, s.SessionID)
	if p.Closes() != 1 || len(p.Sends()) != 0 || len(p.Controls()) != 0 {
		t.Errorf("backend saw closes=%d sends=%v controls=%v after close", p.Closes(), p.Sends(), p.Controls())
	}
	got, err := r.Get(ctx, s.SessionID)
	mustOK(t, err)
	if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseRequested {
		t.Errorf("status %s reason %v: a refused operation changed a final session", got.Status, got.Metadata["closeReason"])
	}
	// Watch and Read still work on a retained closed session: a late viewer sees how it ended.
	unwatch, err := r.Watch(context.Background(), s.SessionID)
	mustOK(t, err)
	unwatch()
	if b := readAll(t, r, s.SessionID); !b.Done {
		t.Error("closed session's log not done")
	}
}

func testErrorIsFinal(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	p.FailControl(errors.New("exec /bin/bash: no such file"))
	last, err := r.LastSeq(context.Background(), s.SessionID)
	mustOK(t, err)

	// A failed restart leaves no backend behind: the session moves to error.
	err = control(r, s.SessionID, abi.CommandRestart)
	WantCode(t, err, abi.CodeResourceUnavailable)
	evs := ReadUntilDone(t, r, s.SessionID, last)
	wantEvents(t, evs, "status:connecting/active", "status:closed/error", "close:error/error")

	got, err := r.Get(ctx, s.SessionID)
	mustOK(t, err)
	if got.Status != abi.StatusError {
		t.Fatalf("status = %s, want error", got.Status)
	}
	for _, cmd := range []abi.Command{abi.CommandPause, abi.CommandResume, abi.CommandInterrupt, abi.CommandClose} {
		WantCode(t, control(r, s.SessionID, cmd), abi.CodeSessionClosed)
	}
	WantCode(t, Send(ctx, r, s.SessionID, []byte("x")), abi.CodeSessionClosed)
	if got, _ := r.Get(ctx, s.SessionID); got.Status != abi.StatusError {
		t.Errorf("status moved out of error to %s", got.Status)
	}
	if p.Closes() != 1 {
		t.Errorf("backend closed %d times", p.Closes())
	}
	if len(list(t, r, false)) != 0 || len(list(t, r, true)) != 1 {
		t.Errorf("List(false)=%d List(true)=%d", len(list(t, r, false)), len(list(t, r, true)))
	}
}

func testBackendEnded(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)
	p.Emit([]byte("bye\r\n"))
	p.End(abi.CloseExited, intp(3))
	evs := ReadUntilDone(t, r, s.SessionID, 0)
	wantEvents(t, evs, "status:connecting/active", "status:connected/active", "data:bye\r\n", "status:closed/closed", "close:exited/closed/exit=3")
	got, err := r.Get(ctx, s.SessionID)
	mustOK(t, err)
	if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseExited || got.Metadata["exitCode"] != 3 {
		t.Errorf("session after exit = %+v", got)
	}
	WantCode(t, Send(ctx, r, s.SessionID, []byte("x")), abi.CodeSessionClosed)
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount = %d", r.LiveCount())
	}
	// A second report (the reaper racing the close) changes nothing.
	p.End(abi.CloseExited, intp(9))
	if _, err := r.Close(ctx, s.SessionID, abi.CloseRequested); abi.CodeOf(err) != abi.CodeSessionClosed {
		t.Errorf("close after exit: %v", err)
	}
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount = %d after a second End", r.LiveCount())
	}
}

func testCloseErrorStillCloses(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	s := mustCreate(t, r, termReq)
	k.Probe(t, s.SessionID).FailClose(errors.New("kill: operation not permitted"))
	got, err := r.Close(context.Background(), s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	if got.Status != abi.StatusClosed {
		t.Errorf("status = %s", got.Status)
	}
	if tl := tail(readAll(t, r, s.SessionID).Events, 3); fmt.Sprint(tl) != "[error:RESOURCE_UNAVAILABLE status:closed/closed close:user-requested/closed]" {
		t.Errorf("closing events = %v", tl)
	}
}

func testSendAndControl(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)

	mustOK(t, Send(ctx, r, s.SessionID, []byte("echo hi\n")))
	mustOK(t, Send(ctx, r, s.SessionID, []byte{0x03}))
	if got := p.Sends(); fmt.Sprintf("%q", got) != `["echo hi\n" "\x03"]` {
		t.Errorf("sends = %q", got)
	}

	data, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt})
	mustOK(t, err)
	if res, _ := data.Result.(map[string]any); res["done"] != "interrupt" {
		t.Errorf("interrupt result = %+v (the backend's result must be passed through)", data.Result)
	}
	_, err = r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandResize, Width: 132, Height: 43})
	mustOK(t, err)
	_, err = r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandRestart})
	mustOK(t, err)

	for _, bad := range [][2]int{{0, 24}, {80, 0}, {-1, 24}, {80, -5}, {10001, 24}, {80, 10001}} {
		_, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandResize, Width: bad[0], Height: bad[1]})
		WantCode(t, err, abi.CodeInvalidArgument)
	}
	for _, bad := range []abi.Command{"", "explode", "CLOSE"} {
		_, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: bad})
		WantCode(t, err, abi.CodeInvalidArgument)
	}

	want := []abi.ControlRequest{{Command: abi.CommandInterrupt}, {Command: abi.CommandResize, Width: 132, Height: 43}, {Command: abi.CommandRestart}}
	if got := p.Controls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backend controls = %+v, want %+v (invalid requests must not reach it)", got, want)
	}
	wantEvents(t, readAll(t, r, s.SessionID).Events,
		"status:connecting/active", "status:connected/active",
		"interrupt:user-requested",
		"status:connecting/active", "status:connected/active")
	if got, _ := r.Get(ctx, s.SessionID); got.Status != abi.StatusActive {
		t.Errorf("status = %s", got.Status)
	}
}

func testKindErrors(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r, termReq)
	p := k.Probe(t, s.SessionID)

	p.FailSend(errors.New("write /dev/ptmx: EIO"))
	err := Send(ctx, r, s.SessionID, []byte("x"))
	WantCode(t, err, abi.CodeResourceUnavailable)
	if !abi.CodeOf(err).Retriable() {
		t.Error("a backend failure is retriable")
	}
	p.FailSend(abi.Errorf(abi.CodeInvalidArgument, s.SessionID, "bad input"))
	WantCode(t, Send(ctx, r, s.SessionID, []byte("x")), abi.CodeInvalidArgument)

	p.FailControl(errors.New("kill: ESRCH"))
	WantCode(t, control(r, s.SessionID, abi.CommandInterrupt), abi.CodeResourceUnavailable)
	p.FailControl(abi.Errorf(abi.CodeConnectionLost, s.SessionID, "gone"))
	WantCode(t, control(r, s.SessionID, abi.CommandResize), abi.CodeConnectionLost)

	// Failed interrupts and resizes leave the session usable (only a failed restart ends it).
	p.FailControl(nil)
	p.FailSend(nil)
	mustOK(t, r.Check(ctx, s.SessionID))
	mustOK(t, Send(ctx, r, s.SessionID, []byte("ok")))
}

func testCapabilities(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	kinds, ks := allKinds(t, newKind)
	r, _ := newReg(t, se, live.Config{}, ks...)
	ctx := testCtx(t)
	for _, typ := range abi.Types() {
		caps := kinds[typ].Capabilities()
		for _, cmd := range []abi.Command{abi.CommandInterrupt, abi.CommandResize, abi.CommandRestart, abi.CommandPause, abi.CommandResume, abi.CommandClose} {
			t.Run(string(typ)+"/"+string(cmd), func(t *testing.T) {
				s := mustCreate(t, r, abi.CreateRequest{Type: typ})
				if cmd == abi.CommandResume {
					mustOK(t, control(r, s.SessionID, abi.CommandPause))
				}
				err := control(r, s.SessionID, cmd)
				if caps.Allows(cmd) {
					mustOK(t, err)
				} else {
					WantCode(t, err, abi.CodeCapabilityUnsupported)
					if got := kinds[typ].Probe(t, s.SessionID).Controls(); len(got) != 0 {
						t.Errorf("unsupported %s reached the backend: %+v", cmd, got)
					}
				}
			})
		}
		t.Run(string(typ)+"/send", func(t *testing.T) {
			s := mustCreate(t, r, abi.CreateRequest{Type: typ})
			before, err := r.LastSeq(ctx, s.SessionID)
			mustOK(t, err)
			req := live.SendRequest{Data: []byte("x"), Mode: "followup", Origin: abi.Origin{Kind: abi.OriginConsole}}
			res, err := r.Send(ctx, s.SessionID, req)
			if caps.Send {
				mustOK(t, err)
				// What the kind reported comes back, the registry's afterSeq with it, and the
				// request reaches the instance whole.
				want := live.SendResult{AfterSeq: before}
				if typ == abi.TypeAIChat {
					want.MessageID = "fake-1"
				}
				if res != want {
					t.Errorf("send result %+v, want %+v", res, want)
				}
				if got := kinds[typ].Probe(t, s.SessionID).Requests(); len(got) != 1 || got[0].Mode != req.Mode || got[0].Origin != req.Origin || string(got[0].Data) != "x" {
					t.Errorf("the instance got %+v, want one %+v", got, req)
				}
			} else {
				WantCode(t, err, abi.CodeCapabilityUnsupported)
				if got := kinds[typ].Probe(t, s.SessionID).Sends(); len(got) != 0 {
					t.Errorf("input reached a %s backend: %q", typ, got)
				}
			}
		})
	}
}

func testUnknownID(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
	ctx := testCtx(t)
	mustCreate(t, r, termReq)
	const id = "no-such-session"
	ops := map[string]func() error{
		"get":           func() error { _, err := r.Get(ctx, id); return err },
		"check":         func() error { return r.Check(ctx, id) },
		"send":          func() error { return Send(ctx, r, id, []byte("x")) },
		"interrupt":     func() error { return control(r, id, abi.CommandInterrupt) },
		"control close": func() error { return control(r, id, abi.CommandClose) },
		"close":         func() error { _, err := r.Close(ctx, id, abi.CloseRequested); return err },
		"hold":          func() error { _, err := r.Hold(ctx, id); return err },
		"watch":         func() error { _, err := r.Watch(context.Background(), id); return err },
		"read":          func() error { _, err := r.Read(ctx, id, 0, 0, 0); return err },
		"lastseq":       func() error { _, err := r.LastSeq(context.Background(), id); return err },
		"empty id":      func() error { _, err := r.Get(ctx, ""); return err },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			err := op()
			WantCode(t, err, abi.CodeSessionNotFound)
			if abi.CodeOf(err).Retriable() {
				t.Error("SESSION_NOT_FOUND must not be retriable")
			}
		})
	}
}

func testExpiryLazy(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	ops := []struct {
		name string
		use  func(r Backend, id string) error
	}{
		{"send", func(r Backend, id string) error { return Send(context.Background(), r, id, []byte("x")) }},
		{"interrupt", func(r Backend, id string) error { return control(r, id, abi.CommandInterrupt) }},
		{"pause", func(r Backend, id string) error { return control(r, id, abi.CommandPause) }},
		{"close", func(r Backend, id string) error {
			_, err := r.Close(context.Background(), id, abi.CloseRequested)
			return err
		}},
		{"check", func(r Backend, id string) error { return r.Check(context.Background(), id) }},
		{"hold", func(r Backend, id string) error { _, err := r.Hold(context.Background(), id); return err }},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			r, clk := newReg(t, se, live.Config{IdleTimeout: -1}, k)
			req := termReq
			req.TTLSeconds = 10
			s := mustCreate(t, r, req)

			clk.Advance(10*time.Second - time.Millisecond)
			mustOK(t, r.Check(context.Background(), s.SessionID))
			clk.Advance(time.Millisecond) // exactly expiresAt: expired

			// Nothing noticed yet: invalidity is detected on first use.
			if got := list(t, r, false); len(got) != 1 || got[0].Status != abi.StatusActive {
				t.Fatalf("before first use: %+v", got)
			}
			err := op.use(r, s.SessionID)
			WantCode(t, err, abi.CodeSessionExpired)
			if abi.CodeOf(err).Retriable() {
				t.Error("SESSION_EXPIRED must not be retriable")
			}
			// Stays expired on every later use; the backend was stopped once.
			WantCode(t, Send(context.Background(), r, s.SessionID, []byte("x")), abi.CodeSessionExpired)
			p := k.Probe(t, s.SessionID)
			if p.Closes() != 1 || len(p.Sends()) != 0 || len(p.Controls()) != 0 {
				t.Errorf("backend: closes=%d sends=%q controls=%v", p.Closes(), p.Sends(), p.Controls())
			}
			got, err := r.Get(context.Background(), s.SessionID)
			mustOK(t, err)
			if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseTimeout {
				t.Errorf("session = %+v", got)
			}
			if len(list(t, r, false)) != 0 || len(list(t, r, true)) != 1 || r.LiveCount() != 0 {
				t.Errorf("List(false)=%d List(true)=%d live=%d", len(list(t, r, false)), len(list(t, r, true)), r.LiveCount())
			}
			b := readAll(t, r, s.SessionID)
			if tl := tail(b.Events, 3); fmt.Sprint(tl) != "[interrupt:timeout status:closed/closed close:timeout/closed]" || !b.Done {
				t.Errorf("closing events %v done %v", tl, b.Done)
			}
		})
	}
	t.Run("get closes and returns the closed object", func(t *testing.T) {
		r, clk := newReg(t, se, live.Config{IdleTimeout: -1}, newKind(t, abi.TypeTerminal))
		req := termReq
		req.TTLSeconds = 1
		s := mustCreate(t, r, req)
		clk.Advance(time.Hour)
		got, err := r.Get(context.Background(), s.SessionID)
		mustOK(t, err)
		if got.Status != abi.StatusClosed {
			t.Errorf("status = %s", got.Status)
		}
	})
}

func testExpiryBySweep(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{IdleTimeout: -1}, k)
	ctx := testCtx(t)
	req := termReq
	req.TTLSeconds = 60
	s := mustCreate(t, r, req)
	keep := mustCreate(t, r, termReq) // no TTL
	expires, err := abi.ParseTime(s.ExpiresAt)
	mustOK(t, err)
	if !expires.Equal(T0.Add(time.Minute)) {
		t.Fatalf("expiresAt = %v", expires)
	}
	last, _ := r.LastSeq(context.Background(), s.SessionID)

	r.Sweep(ctx, expires.Add(-time.Nanosecond))
	if got, _ := r.Get(ctx, s.SessionID); got.Status != abi.StatusActive {
		t.Fatalf("swept before expiry: %s", got.Status)
	}
	r.Sweep(ctx, expires)
	evs := ReadUntilDone(t, r, s.SessionID, last)
	wantEvents(t, evs, "interrupt:timeout", "status:closed/closed", "close:timeout/closed")
	if k.Probe(t, s.SessionID).Closes() != 1 {
		t.Error("backend not closed")
	}
	WantCode(t, r.Check(ctx, s.SessionID), abi.CodeSessionExpired)
	if got := list(t, r, false); len(got) != 1 || got[0].SessionID != keep.SessionID {
		t.Errorf("List(false) = %+v", got)
	}
	r.Sweep(ctx, expires.Add(time.Hour-time.Nanosecond))
	mustOK(t, r.Check(ctx, keep.SessionID))
}

func testIdleReaping(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	const idle = 5 * time.Minute
	tests := []struct {
		name string
		cfg  live.Config
		// act runs after Create with the clock at T0; it returns the time idleness counts from
		// (the zero time when the session must never be reaped).
		act func(t *testing.T, r Backend, clk *FakeClock, p Probe, id string) time.Time
	}{
		{"untouched", live.Config{IdleTimeout: idle}, func(*testing.T, Backend, *FakeClock, Probe, string) time.Time { return T0 }},
		{"send is activity", live.Config{IdleTimeout: idle}, func(t *testing.T, r Backend, clk *FakeClock, _ Probe, id string) time.Time {
			at := clk.Advance(4 * time.Minute)
			mustOK(t, Send(context.Background(), r, id, []byte("x")))
			return at
		}},
		{"output is activity", live.Config{IdleTimeout: idle}, func(_ *testing.T, _ Backend, clk *FakeClock, p Probe, _ string) time.Time {
			at := clk.Advance(3 * time.Minute)
			p.Emit([]byte("tick"))
			return at
		}},
		{"control is activity", live.Config{IdleTimeout: idle}, func(t *testing.T, r Backend, clk *FakeClock, _ Probe, id string) time.Time {
			at := clk.Advance(2 * time.Minute)
			mustOK(t, control(r, id, abi.CommandInterrupt))
			return at
		}},
		{"watch suppresses, idleness counts from unwatch", live.Config{IdleTimeout: idle}, func(t *testing.T, r Backend, clk *FakeClock, _ Probe, id string) time.Time {
			unwatch, err := r.Watch(context.Background(), id)
			mustOK(t, err)
			r.Sweep(context.Background(), T0.Add(1000*time.Hour))
			mustOK(t, r.Check(context.Background(), id))
			at := clk.Advance(1000 * time.Hour)
			unwatch()
			unwatch() // idempotent: the count must not go negative
			return at
		}},
		{"two watchers", live.Config{IdleTimeout: idle}, func(t *testing.T, r Backend, clk *FakeClock, _ Probe, id string) time.Time {
			u1, err := r.Watch(context.Background(), id)
			mustOK(t, err)
			u2, err := r.Watch(context.Background(), id)
			mustOK(t, err)
			clk.Advance(time.Hour)
			u1()
			r.Sweep(context.Background(), clk.Now().Add(time.Hour))
			mustOK(t, r.Check(context.Background(), id)) // the second watcher still holds it
			at := clk.Advance(2 * time.Hour)
			u2()
			return at
		}},
		{"hold suppresses", live.Config{IdleTimeout: idle}, func(t *testing.T, r Backend, clk *FakeClock, _ Probe, id string) time.Time {
			release, err := r.Hold(context.Background(), id)
			mustOK(t, err)
			r.Sweep(context.Background(), T0.Add(1000*time.Hour))
			mustOK(t, r.Check(context.Background(), id))
			release() // not ephemeral: releasing does not close
			// Check, not the release, is the last use.
			return clk.Now()
		}},
		{"negative disables", live.Config{IdleTimeout: -1}, func(*testing.T, Backend, *FakeClock, Probe, string) time.Time { return time.Time{} }},
		{"zero is the 30m default", live.Config{}, func(t *testing.T, r Backend, _ *FakeClock, _ Probe, _ string) time.Time {
			if r.Config().IdleTimeout != live.DefaultIdleTimeout {
				t.Fatalf("IdleTimeout = %v", r.Config().IdleTimeout)
			}
			return T0
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKind(t, abi.TypeTerminal)
			r, clk := newReg(t, se, tc.cfg, k)
			ctx := context.Background()
			s := mustCreate(t, r, termReq)
			from := tc.act(t, r, clk, k.Probe(t, s.SessionID), s.SessionID)
			if from.IsZero() {
				r.Sweep(ctx, T0.Add(100_000*time.Hour))
				mustOK(t, r.Check(ctx, s.SessionID))
				return
			}
			timeout := r.Config().IdleTimeout
			last, _ := r.LastSeq(context.Background(), s.SessionID)
			r.Sweep(ctx, from.Add(timeout-time.Nanosecond))
			if got, _ := r.Get(ctx, s.SessionID); got.Status != abi.StatusActive {
				t.Fatalf("reaped before idle timeout: %s", got.Status)
			}
			r.Sweep(ctx, from.Add(timeout))
			wantEvents(t, ReadUntilDone(t, r, s.SessionID, last), "interrupt:timeout", "status:closed/closed", "close:idle/closed")
			// Checked without moving the clock past anything: the error comes from the close.
			err := r.Check(ctx, s.SessionID)
			WantCode(t, err, abi.CodeSessionExpired)
			if k.Probe(t, s.SessionID).Closes() != 1 {
				t.Error("backend not closed")
			}
		})
	}
}

func testEphemeral(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	eph := termReq
	eph.Ephemeral = true
	ctx := context.Background()

	t.Run("last release closes", func(t *testing.T) {
		k := newKind(t, abi.TypeTerminal)
		r, _ := newReg(t, se, live.Config{}, k)
		s := mustCreate(t, r, eph)
		rel1, err := r.Hold(ctx, s.SessionID)
		mustOK(t, err)
		rel2, err := r.Hold(ctx, s.SessionID)
		mustOK(t, err)
		rel1()
		rel1() // a second call of the same release is a no-op
		mustOK(t, r.Check(ctx, s.SessionID))
		rel2()
		got, err := r.Get(ctx, s.SessionID)
		mustOK(t, err)
		if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseEphemeral {
			t.Errorf("after last release: %+v", got)
		}
		if tl := tail(readAll(t, r, s.SessionID).Events, 1); fmt.Sprint(tl) != "[close:ephemeral/closed]" {
			t.Errorf("last event %v", tl)
		}
		WantCode(t, r.Check(ctx, s.SessionID), abi.CodeSessionClosed)
		if k.Probe(t, s.SessionID).Closes() != 1 {
			t.Error("backend not closed exactly once")
		}
	})
	t.Run("never held past grace", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{EphemeralGrace: 30 * time.Second}, newKind(t, abi.TypeTerminal))
		s := mustCreate(t, r, eph)
		plain := mustCreate(t, r, termReq)
		r.Sweep(ctx, T0.Add(30*time.Second-time.Nanosecond))
		mustOK(t, r.Check(ctx, s.SessionID))
		r.Sweep(ctx, T0.Add(30*time.Second))
		WantCode(t, r.Check(ctx, s.SessionID), abi.CodeSessionClosed)
		if got, _ := r.Get(ctx, s.SessionID); got.Metadata["closeReason"] != abi.CloseEphemeral {
			t.Errorf("close reason %v", got.Metadata["closeReason"])
		}
		mustOK(t, r.Check(ctx, plain.SessionID)) // grace applies to ephemeral sessions only
	})
	t.Run("held past grace stays", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{EphemeralGrace: 30 * time.Second}, newKind(t, abi.TypeTerminal))
		s := mustCreate(t, r, eph)
		release, err := r.Hold(ctx, s.SessionID)
		mustOK(t, err)
		r.Sweep(ctx, T0.Add(24*time.Hour))
		mustOK(t, r.Check(ctx, s.SessionID))
		release()
		WantCode(t, r.Check(ctx, s.SessionID), abi.CodeSessionClosed)
	})
	t.Run("default grace", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		if r.Config().EphemeralGrace != 30*time.Second {
			t.Errorf("EphemeralGrace = %v", r.Config().EphemeralGrace)
		}
	})
	t.Run("non-ephemeral release keeps", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		s := mustCreate(t, r, termReq)
		release, err := r.Hold(ctx, s.SessionID)
		mustOK(t, err)
		release()
		mustOK(t, r.Check(ctx, s.SessionID))
	})
	t.Run("release after explicit close", func(t *testing.T) {
		r, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
		s := mustCreate(t, r, eph)
		release, err := r.Hold(ctx, s.SessionID)
		mustOK(t, err)
		_, err = r.Close(ctx, s.SessionID, abi.CloseRequested)
		mustOK(t, err)
		release()
		if got, _ := r.Get(ctx, s.SessionID); got.Metadata["closeReason"] != abi.CloseRequested {
			t.Errorf("close reason rewritten to %v", got.Metadata["closeReason"])
		}
	})
}

func testRetention(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	r, clk := newReg(t, se, live.Config{IdleTimeout: -1, Retention: time.Hour}, newKind(t, abi.TypeTerminal))
	ctx := testCtx(t)
	a := mustCreate(t, r, termReq)
	b := mustCreate(t, r, termReq)
	closedAt := clk.Advance(time.Minute)
	_, err := r.Close(ctx, a.SessionID, abi.CloseRequested)
	mustOK(t, err)

	ids := func(ss []abi.Session) string {
		out := ""
		for _, s := range ss {
			out += s.SessionID + ":" + string(s.Status) + " "
		}
		return out
	}
	if got := ids(list(t, r, false)); got != b.SessionID+":active " {
		t.Errorf("List(false) = %s", got)
	}
	if got := ids(list(t, r, true)); got != a.SessionID+":closed "+b.SessionID+":active " {
		t.Errorf("List(true) = %s", got)
	}
	r.Sweep(ctx, closedAt.Add(time.Hour-time.Nanosecond))
	if len(list(t, r, true)) != 2 {
		t.Errorf("removed before retention: %s", ids(list(t, r, true)))
	}
	_, err = r.Get(ctx, a.SessionID)
	mustOK(t, err)
	r.Sweep(ctx, closedAt.Add(time.Hour))
	if got := ids(list(t, r, true)); got != b.SessionID+":active " {
		t.Errorf("List(true) after retention = %s", got)
	}
	_, err = r.Get(ctx, a.SessionID)
	WantCode(t, err, abi.CodeSessionNotFound)
	_, err = r.Read(ctx, a.SessionID, 0, 0, 0)
	WantCode(t, err, abi.CodeSessionNotFound)
	if r.Config().Retention != time.Hour {
		t.Errorf("Retention = %v", r.Config().Retention)
	}
}

func testListOrder(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	ids := []string{"b", "c", "a"}
	var n int
	var mu sync.Mutex
	next := func() string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return ids[n-1]
	}
	r, clk := newReg(t, se, live.Config{NewID: next}, newKind(t, abi.TypeTerminal))
	clk.Set(T0.Add(time.Second))
	mustCreate(t, r, termReq) // b, later
	clk.Set(T0)
	mustCreate(t, r, termReq) // c, earlier
	mustCreate(t, r, termReq) // a, earlier, same time as c
	var got []string
	for _, s := range list(t, r, false) {
		got = append(got, s.SessionID)
	}
	if fmt.Sprint(got) != "[a c b]" {
		t.Errorf("List order = %v, want oldest first, ties by id: [a c b]", got)
	}
}

func testCap(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	const n = 4
	k := &heldStart{KindUnderTest: newKind(t, abi.TypeTerminal), gate: make(chan struct{})}
	r, _ := newReg(t, se, live.Config{MaxSessions: n}, k)
	ctx := testCtx(t)

	start := make(chan struct{})
	errs := make(chan error, 4*n)
	var wg sync.WaitGroup
	for range 4 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := r.Create(ctx, termReq)
			errs <- err
		}()
	}
	close(start)
	// Every create either answers (a refusal) or is held inside Start, reserved but not yet
	// registered: the window in which an overshoot would happen, kept open for all of them.
	testkit.Eventually(t, "every create to be refused or inside Start", func() bool {
		return int(k.starts.Load())+len(errs) == 4*n
	})
	close(k.gate)
	wg.Wait()
	close(errs)
	ok, limited := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case abi.CodeOf(err) == abi.CodeLimitExceeded:
			limited++
			if !abi.CodeOf(err).Retriable() {
				t.Error("LIMIT_EXCEEDED must be retriable")
			}
		default:
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ok != n || limited != 3*n {
		t.Fatalf("%d created, %d LIMIT_EXCEEDED; want %d and %d", ok, limited, n, 3*n)
	}
	if got := k.starts.Load(); got != n {
		t.Errorf("kind started %d times; refused creates must not reach the kind", got)
	}
	if r.LiveCount() != n || len(list(t, r, false)) != n {
		t.Errorf("LiveCount %d, listed %d", r.LiveCount(), len(list(t, r, false)))
	}
	_, err := r.Create(ctx, termReq)
	WantCode(t, err, abi.CodeLimitExceeded)

	// Paused sessions count; closing one frees a slot, exactly one.
	running := list(t, r, false)
	mustOK(t, control(r, running[0].SessionID, abi.CommandPause))
	_, err = r.Create(ctx, termReq)
	WantCode(t, err, abi.CodeLimitExceeded)
	_, err = r.Close(ctx, running[1].SessionID, abi.CloseRequested)
	mustOK(t, err)
	mustCreate(t, r, termReq)
	_, err = r.Create(ctx, termReq)
	WantCode(t, err, abi.CodeLimitExceeded)
	if r.LiveCount() != n {
		t.Errorf("LiveCount = %d", r.LiveCount())
	}
	// Closed sessions kept for retention do not count.
	if len(list(t, r, true)) != n+1 {
		t.Errorf("List(true) = %d", len(list(t, r, true)))
	}
	if r.Config().MaxSessions != n {
		t.Errorf("MaxSessions = %d", r.Config().MaxSessions)
	}
	r2, _ := newReg(t, se, live.Config{}, newKind(t, abi.TypeTerminal))
	if r2.Config().MaxSessions != live.DefaultMaxSessions {
		t.Errorf("default MaxSessions = %d", r2.Config().MaxSessions)
	}
}

func testStartErrorReleasesSlot(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	tests := []struct {
		name string
		err  error
		code abi.Code
	}{
		{"plain error", errors.New("fork/exec: resource temporarily unavailable"), abi.CodeResourceUnavailable},
		{"abi error passes through", abi.Errorf(abi.CodeInvalidArgument, "", "project %q does not exist", "nope"), abi.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := newKind(t, abi.TypeTerminal)
			bad := &failStart{KindUnderTest: newKind(t, abi.TypeAIChat), err: tc.err}
			r, _ := newReg(t, se, live.Config{MaxSessions: 1}, good, bad)
			ctx := testCtx(t)
			for range 3 { // would exhaust a leaked reservation at once
				_, err := r.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat})
				WantCode(t, err, tc.code)
				if !errors.Is(err, tc.err) && abi.CodeOf(tc.err) == abi.CodeInternal {
					t.Errorf("cause lost: %v", err)
				}
			}
			if r.LiveCount() != 0 || len(list(t, r, true)) != 0 {
				t.Fatalf("failed start left LiveCount %d, %d sessions", r.LiveCount(), len(list(t, r, true)))
			}
			mustCreate(t, r, termReq)
		})
	}
}

func testShutdown(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	active := mustCreate(t, r, termReq)
	paused := mustCreate(t, r, termReq)
	mustOK(t, control(r, paused.SessionID, abi.CommandPause))
	closed := mustCreate(t, r, termReq)
	_, err := r.Close(ctx, closed.SessionID, abi.CloseRequested)
	mustOK(t, err)

	mustOK(t, r.Shutdown(ctx))
	for id, reason := range map[string]string{active.SessionID: abi.CloseShutdown, paused.SessionID: abi.CloseShutdown, closed.SessionID: abi.CloseRequested} {
		got, err := r.Get(ctx, id)
		mustOK(t, err)
		if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != reason {
			t.Errorf("%s: status %s reason %v, want closed/%s", id, got.Status, got.Metadata["closeReason"], reason)
		}
		if n := k.Probe(t, id).Closes(); n != 1 {
			t.Errorf("%s: backend closed %d times", id, n)
		}
		b := readAll(t, r, id)
		if tl := tail(b.Events, 2); fmt.Sprint(tl) != "[status:closed/closed close:"+reason+"/closed]" || !b.Done {
			t.Errorf("%s: final events %v done %v", id, tl, b.Done)
		}
	}
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount = %d", r.LiveCount())
	}
	_, err = r.Create(ctx, termReq)
	WantCode(t, err, abi.CodeResourceUnavailable)
	mustOK(t, r.Shutdown(ctx)) // idempotent
}

// testShutdownDuringCreate: a session whose kind is still starting when Shutdown runs must not
// survive it as a live session with a running backend.
func testShutdownDuringCreate(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	inner := newKind(t, abi.TypeTerminal)
	k := &gatedStart{KindUnderTest: inner, entered: make(chan struct{}), gate: make(chan struct{})}
	r, _ := newReg(t, se, live.Config{}, k)
	ctx := testCtx(t)
	type result struct {
		s   abi.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := r.Create(ctx, termReq)
		done <- result{s, err}
	}()
	<-k.entered
	mustOK(t, r.Shutdown(ctx))
	close(k.gate)
	res := <-done
	WantCode(t, res.err, abi.CodeResourceUnavailable)
	if r.LiveCount() != 0 || len(list(t, r, false)) != 0 {
		t.Errorf("after shutdown: LiveCount %d, live sessions %+v", r.LiveCount(), list(t, r, false))
	}
	all := list(t, r, true)
	if len(all) != 1 {
		t.Fatalf("List(true) = %+v", all)
	}
	if n := inner.Probe(t, all[0].SessionID).Closes(); n != 1 {
		t.Errorf("the backend started during shutdown was closed %d times", n)
	}
	if all[0].Metadata["closeReason"] != abi.CloseShutdown {
		t.Errorf("close reason = %v", all[0].Metadata["closeReason"])
	}
}

func testSetMetadata(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	k := newKind(t, abi.TypeTerminal)
	r, _ := newReg(t, se, live.Config{}, k)
	s := mustCreate(t, r, termReq)
	k.Probe(t, s.SessionID).SetMetadata(map[string]any{"cwd": "/tmp", "pid": 42})
	got, err := r.Get(context.Background(), s.SessionID)
	mustOK(t, err)
	if got.Metadata["cwd"] != "/tmp" || got.Metadata["pid"] != 42 || got.Metadata["backend"] != "fake" {
		t.Errorf("metadata = %v", got.Metadata)
	}
	evs := readAll(t, r, s.SessionID).Events
	lastEv := evs[len(evs)-1]
	p, ok := lastEv.Payload.(abi.MetadataPayload)
	if !ok || lastEv.Type != abi.EventMetadata || p.Metadata["pid"] != 42 {
		t.Errorf("last event = %s %+v", lastEv.Type, lastEv.Payload)
	}
}
