package livetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

// KindHarness describes a Kind to RunKind.
type KindHarness struct {
	// New builds the kind under test; each test gets a fresh one.
	New func(t *testing.T) live.Kind
	// Request is a create request the kind accepts.
	Request abi.CreateRequest
	// BadRequests are create requests the kind must refuse with an ABI error code of its own
	// (not a retriable one), leaving nothing behind.
	BadRequests []abi.CreateRequest
	// Print makes a session print text as its own output (a terminal: a command that prints
	// it); the suite then waits for the text in the session's data events.
	Print func(t *testing.T, r live.Backend, id, text string)
	// Input is what the suite sends to a session of a kind that declares send (default a
	// newline). Print must leave the session ready to take it.
	Input []byte
	// Exit makes a session's backend end by itself with exit code code (a shell's exit); nil
	// for a kind whose sessions never end by themselves.
	Exit func(t *testing.T, r live.Backend, id string, code int)
}

// RunKind checks a kind's part of the registry contract, through a registry that serves it:
// it describes its sessions (type, capabilities), announces a session before its output,
// honours exactly the capabilities it declares, closes cleanly and finally, reports an end of
// its own, and refuses bad requests with an ABI error.
func RunKind(t *testing.T, h KindHarness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, KindHarness)
	}{
		{"Announce", testKindAnnounce},
		{"Capabilities", testKindCapabilities},
		{"Close", testKindClose},
		{"Exit", testKindExit},
		{"Shutdown", testKindShutdown},
		{"BadRequests", testKindBadRequests},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func kindBackend(t *testing.T, h KindHarness) (*live.Registry, live.Kind) {
	t.Helper()
	k := h.New(t)
	r, err := live.New(context.Background(), live.Config{IdleTimeout: -1}, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r, k
}

// output follows one session's data events.
type output struct {
	r     live.Backend
	id    string
	after uint64
	buf   bytes.Buffer
	evs   []*live.Event
	done  bool
}

// pull reads what is there now, waiting up to wait for something new.
func (o *output) pull(t *testing.T, wait time.Duration) {
	t.Helper()
	b, err := o.r.Read(context.Background(), o.id, o.after, 0, wait)
	mustOK(t, err)
	for _, e := range b.Events {
		if e.Seq != 0 && e.Seq != o.after+1 && len(o.evs) > 0 {
			t.Fatalf("event %d follows %d", e.Seq, o.after)
		}
		o.evs = append(o.evs, e)
		payload := e.Payload
		if j, ok := payload.(live.Joined); ok {
			payload = json.RawMessage(j.AppendTo(nil))
		}
		switch p := payload.(type) {
		case live.Output:
			o.buf.Write(p)
		case abi.AIToken: // a chat's output is its reply
			o.buf.WriteString(p.Content)
		case abi.LogLine: // a debug stream's output is its lines
			o.buf.WriteString(p.Line + "\n")
		case json.RawMessage: // encoded data: a debug stream's lines, one or a batch
			var v struct {
				abi.LogLine
				Lines []abi.LogLine `json:"lines"`
			}
			if json.Unmarshal(p, &v) == nil {
				if v.Type == abi.PayloadLogLine {
					v.Lines = []abi.LogLine{v.LogLine}
				}
				for _, l := range v.Lines {
					o.buf.WriteString(l.Line + "\n")
				}
			}
		}
		if e.Seq != 0 {
			o.after = e.Seq
		}
	}
	o.after = max(o.after, b.Next)
	o.done = b.Done
}

// wait reads until the output holds text.
func (o *output) wait(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for !strings.Contains(o.buf.String(), text) {
		if o.done {
			t.Fatalf("the session ended before printing %q; it printed %q", text, tailString(o.buf.String()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session never printed %q; it printed %q", text, tailString(o.buf.String()))
		}
		o.pull(t, 200*time.Millisecond)
	}
}

// end reads until the log is finished.
func (o *output) end(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for !o.done {
		if time.Now().After(deadline) {
			t.Fatal("the session's log never ended")
		}
		o.pull(t, 200*time.Millisecond)
	}
}

func tailString(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}

func testKindAnnounce(t *testing.T, h KindHarness) {
	r, k := kindBackend(t, h)
	if k.Type() == "" {
		t.Fatal("the kind has no type")
	}
	s, err := r.Create(testCtx(t), h.Request)
	mustOK(t, err)
	if s.Type != k.Type() || s.Capabilities != k.Capabilities() || s.Status != abi.StatusActive {
		t.Errorf("session %+v; want type %s, the kind's capabilities %+v, active", s, k.Type(), k.Capabilities())
	}
	o := &output{r: r, id: s.SessionID}
	h.Print(t, r, s.SessionID, "hello from the kind contract")
	o.wait(t, "hello from the kind contract")
	d := DescribeAll(o.evs)
	if len(d) < 2 || d[0] != "status:connecting/active" {
		t.Fatalf("the log opens %v, want status:connecting/active first", d)
	}
	for i, x := range d[1:] {
		if x == "metadata" {
			continue
		}
		if x != "status:connected/active" {
			t.Fatalf("event %d is %s before the session was announced (status:connected/active): %v", i+2, x, d)
		}
		break
	}
}

func testKindCapabilities(t *testing.T, h KindHarness) {
	r, k := kindBackend(t, h)
	ctx := testCtx(t)
	caps := k.Capabilities()
	s, err := r.Create(ctx, h.Request)
	mustOK(t, err)
	o := &output{r: r, id: s.SessionID}
	h.Print(t, r, s.SessionID, "before the commands")
	o.wait(t, "before the commands")
	cmds := []abi.ControlRequest{
		{Command: abi.CommandInterrupt},
		{Command: abi.CommandResize, Width: 100, Height: 30},
		{Command: abi.CommandPause},
		{Command: abi.CommandResume},
		{Command: abi.CommandRestart},
	}
	for _, req := range cmds {
		_, err := r.Control(ctx, s.SessionID, req)
		if caps.Allows(req.Command) {
			if err != nil {
				t.Errorf("%s: the kind declares it, and it failed: %v", req.Command, err)
			}
		} else {
			WantCode(t, err, abi.CodeCapabilityUnsupported)
		}
	}
	in := h.Input
	if in == nil {
		in = []byte("\n")
	}
	before, err := r.LastSeq(ctx, s.SessionID)
	mustOK(t, err)
	res, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: in})
	if caps.Send {
		mustOK(t, err)
		// The send says where the events it causes start: no earlier than the log's end when
		// it was sent, no later than the log's end now.
		now, err := r.LastSeq(ctx, s.SessionID)
		mustOK(t, err)
		if res.AfterSeq < before || res.AfterSeq > now {
			t.Errorf("send afterSeq %d, want within [%d, %d]", res.AfterSeq, before, now)
		}
	} else {
		WantCode(t, err, abi.CodeCapabilityUnsupported)
	}
	// Whatever it did, the session still works.
	obj, err := r.Get(ctx, s.SessionID)
	mustOK(t, err)
	if obj.Status != abi.StatusActive {
		t.Fatalf("status %s after the commands", obj.Status)
	}
	h.Print(t, r, s.SessionID, "after the commands")
	o.wait(t, "after the commands")
}

func testKindClose(t *testing.T, h KindHarness) {
	r, _ := kindBackend(t, h)
	ctx := testCtx(t)
	s, err := r.Create(ctx, h.Request)
	mustOK(t, err)
	o := &output{r: r, id: s.SessionID}
	h.Print(t, r, s.SessionID, "closing soon")
	o.wait(t, "closing soon")
	got, err := r.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseRequested {
		t.Errorf("closed session %+v", got)
	}
	o.end(t)
	if tl := tail(o.evs, 2); fmt.Sprint(tl) != "[status:closed/closed close:user-requested/closed]" {
		t.Errorf("the log ends %v", tl)
	}
	_, err = r.Close(ctx, s.SessionID, abi.CloseRequested)
	WantCode(t, err, abi.CodeSessionClosed)
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount %d after close", r.LiveCount())
	}
}

func testKindExit(t *testing.T, h KindHarness) {
	if h.Exit == nil {
		t.Skip("the kind's sessions never end by themselves")
	}
	r, _ := kindBackend(t, h)
	ctx := testCtx(t)
	s, err := r.Create(ctx, h.Request)
	mustOK(t, err)
	o := &output{r: r, id: s.SessionID}
	h.Print(t, r, s.SessionID, "about to exit")
	o.wait(t, "about to exit")
	h.Exit(t, r, s.SessionID, 7)
	o.end(t)
	if tl := tail(o.evs, 2); fmt.Sprint(tl) != "[status:closed/closed close:exited/closed/exit=7]" {
		t.Errorf("the log ends %v", tl)
	}
	got, err := r.Get(ctx, s.SessionID)
	mustOK(t, err)
	if got.Status != abi.StatusClosed || got.Metadata["exitCode"] != 7 {
		t.Errorf("session after its exit: %+v", got)
	}
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount %d after the exit", r.LiveCount())
	}
}

func testKindShutdown(t *testing.T, h KindHarness) {
	r, _ := kindBackend(t, h)
	ctx := testCtx(t)
	var ids []string
	for range 3 {
		s, err := r.Create(ctx, h.Request)
		mustOK(t, err)
		ids = append(ids, s.SessionID)
	}
	mustOK(t, r.Shutdown(ctx))
	for _, id := range ids {
		o := &output{r: r, id: id}
		o.end(t)
		if tl := tail(o.evs, 1); fmt.Sprint(tl) != "[close:shutdown/closed]" {
			t.Errorf("%s ends %v", id, tl)
		}
	}
	if r.LiveCount() != 0 {
		t.Errorf("LiveCount %d after shutdown", r.LiveCount())
	}
}

func testKindBadRequests(t *testing.T, h KindHarness) {
	r, _ := kindBackend(t, h)
	for i, req := range h.BadRequests {
		_, err := r.Create(testCtx(t), req)
		if err == nil {
			t.Errorf("bad request %d (%+v) was accepted", i, req)
			continue
		}
		if c := abi.CodeOf(err); c.Retriable() {
			// A kind's own refusal carries its ABI code; a plain error reaches the client as
			// a retriable RESOURCE_UNAVAILABLE, which a bad request is not.
			t.Errorf("bad request %d: %v (%s) reads as retriable", i, err, c)
		}
	}
	if ss, err := r.List(context.Background(), true); err != nil || len(ss) != 0 || r.LiveCount() != 0 {
		t.Errorf("refused requests left %d sessions (%v), LiveCount %d", len(ss), err, r.LiveCount())
	}
}
