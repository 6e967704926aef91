package livetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// The restart tests run on a harness with a durable Store. A "crash" closes the first backend's
// store under it, so nothing the backend does afterwards reaches the files: what is left is
// what a kill -9 leaves.

func restartTests() []namedTest {
	return []namedTest{
		{"AfterKill", testRestartAfterKill},
		{"AfterShutdown", testRestartAfterShutdown},
		{"Twice", testRestartTwice},
		{"Retention", testRestartRetention},
		{"Purged", testRestartPurged},
		{"WireUnchanged", testRestartWireUnchanged},
		{"LongLog", testRestartLongLog},
	}
}

// restarter builds backends on one store directory and one clock, as consecutive gateways on a
// state directory.
type restarter struct {
	h   Harness
	dir string
	clk *FakeClock
}

func newRestarter(t *testing.T, se *suiteEnv) *restarter {
	return &restarter{h: se.h, dir: t.TempDir(), clk: NewFakeClock()}
}

func (rs *restarter) start(t *testing.T, cfg live.Config, kinds ...live.Kind) (Backend, live.Store) {
	t.Helper()
	st := rs.h.Store(t, rs.dir)
	cfg.Store = st
	return build(t, rs.h, rs.clk, cfg, kinds...), st
}

// crash leaves the store as a killed gateway leaves it.
func crash(t *testing.T, st live.Store) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatalf("close the store: %v", err)
	}
}

// wireOf is every event of a session in the ABI's JSON, as a poller would get it.
func wireOf(t *testing.T, r live.View, id string, ct abi.ContentType) []string {
	t.Helper()
	var out []string
	for _, e := range readAll(t, r, id).Events {
		out = append(out, string(e.JSON(ct)))
	}
	return out
}

func testRestartAfterKill(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	rs := newRestarter(t, se)
	k1 := newKind(t, abi.TypeTerminal)
	r1, st1 := rs.start(t, live.Config{IdleTimeout: -1}, k1)
	ctx := testCtx(t)

	closed := mustCreate(t, r1, termReq)
	k1.Probe(t, closed.SessionID).Emit([]byte("bye\r\n"))
	_, err := r1.Close(ctx, closed.SessionID, abi.CloseRequested)
	mustOK(t, err)

	running := mustCreate(t, r1, termReq)
	p := k1.Probe(t, running.SessionID)
	p.Emit([]byte("one\r\n"))
	p.SetMetadata(map[string]any{"cwd": "/srv/app", "cols": 132})
	p.Emit([]byte("two\r\n"))

	paused := mustCreate(t, r1, termReq)
	mustOK(t, control(r1, paused.SessionID, abi.CommandPause))

	before := map[string][]string{}
	last := map[string]uint64{}
	for _, id := range []string{closed.SessionID, running.SessionID, paused.SessionID} {
		before[id] = wireOf(t, r1, id, abi.ContentRaw)
		last[id] = lastSeq(t, r1, id)
	}
	crash(t, st1)
	restartAt := rs.clk.Advance(time.Minute)

	r2, _ := rs.start(t, live.Config{IdleTimeout: -1}, newKind(t, abi.TypeTerminal))
	if n := r2.LiveCount(); n != 0 {
		t.Errorf("LiveCount = %d after a restart: nothing of the previous run is live", n)
	}
	if got := list(t, r2, false); len(got) != 0 {
		t.Errorf("List(false) = %+v", got)
	}
	all := list(t, r2, true)
	if len(all) != 3 {
		t.Fatalf("List(true) = %+v, want the 3 sessions of the previous run", all)
	}
	want := map[string]string{closed.SessionID: abi.CloseRequested, running.SessionID: abi.CloseGatewayRestart, paused.SessionID: abi.CloseGatewayRestart}
	for _, s := range all {
		if s.Status != abi.StatusClosed || s.Metadata["closeReason"] != want[s.SessionID] {
			t.Errorf("%s: status %s reason %v, want closed/%s", s.SessionID, s.Status, s.Metadata["closeReason"], want[s.SessionID])
		}
	}
	got, err := r2.Get(ctx, running.SessionID)
	mustOK(t, err)
	if got.Metadata["cwd"] != "/srv/app" || fmt.Sprint(got.Metadata["cols"]) != "132" || got.Metadata["backend"] != "fake" {
		t.Errorf("metadata after restart = %v: what the session published must be kept", got.Metadata)
	}
	if got.Metadata["closedAt"] != abi.FormatTime(restartAt) || got.CreatedAt != running.CreatedAt || got.Context != running.Context {
		t.Errorf("session after restart = %+v", got)
	}

	// The closed session reads exactly as before; the two that died get the closing events,
	// numbered on from where their logs stood.
	if after := wireOf(t, r2, closed.SessionID, abi.ContentRaw); fmt.Sprint(after) != fmt.Sprint(before[closed.SessionID]) {
		t.Errorf("closed session's events changed across the restart:\n before %v\n after  %v", before[closed.SessionID], after)
	}
	for _, id := range []string{running.SessionID, paused.SessionID} {
		after := wireOf(t, r2, id, abi.ContentRaw)
		if n := len(before[id]); len(after) != n+2 || fmt.Sprint(after[:n]) != fmt.Sprint(before[id]) {
			t.Fatalf("%s: events across the restart:\n before %v\n after  %v", id, before[id], after)
		}
		b := readAll(t, r2, id)
		tl := b.Events[len(b.Events)-2:]
		if fmt.Sprint(DescribeAll(tl)) != "[status:closed/closed close:gateway-restart/closed]" || !b.Done {
			t.Errorf("%s: closing events %v done %v", id, DescribeAll(tl), b.Done)
		}
		if tl[0].Seq != last[id]+1 || tl[1].Seq != last[id]+2 || lastSeq(t, r2, id) != last[id]+2 {
			t.Errorf("%s: closing events numbered %d, %d after %d: sequence numbers must continue", id, tl[0].Seq, tl[1].Seq, last[id])
		}
		if !tl[1].Time.Equal(restartAt) {
			t.Errorf("%s: close stamped %v, want the restart's %v", id, tl[1].Time, restartAt)
		}
		WantCode(t, Send(ctx, r2, id, []byte("x")), abi.CodeSessionClosed)
		WantCode(t, control(r2, id, abi.CommandInterrupt), abi.CodeSessionClosed)
	}
	// Watchers and pollers of a restored session: it is finished.
	b, err := r2.Read(ctx, running.SessionID, last[running.SessionID]+2, 0, time.Hour)
	mustOK(t, err)
	if !b.Done || len(b.Events) != 0 {
		t.Errorf("read at the end of a restored log: %+v", b)
	}
	unwatch, err := r2.Watch(ctx, running.SessionID)
	mustOK(t, err)
	unwatch()

	// New sessions never take an old id.
	fresh := mustCreate(t, r2, termReq)
	if _, ok := want[fresh.SessionID]; ok {
		t.Fatalf("new session reuses id %s", fresh.SessionID)
	}
	if n := r2.LiveCount(); n != 1 {
		t.Errorf("LiveCount = %d", n)
	}
}

func testRestartAfterShutdown(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	rs := newRestarter(t, se)
	k := newKind(t, abi.TypeTerminal)
	r1, _ := rs.start(t, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r1, termReq)
	k.Probe(t, s.SessionID).Emit([]byte("hello"))
	mustOK(t, r1.Shutdown(ctx))
	before := wireOf(t, r1, s.SessionID, abi.ContentANSI)
	rs.clk.Advance(time.Second)

	r2, _ := rs.start(t, live.Config{}, newKind(t, abi.TypeTerminal))
	got, err := r2.Get(ctx, s.SessionID)
	mustOK(t, err)
	if got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseShutdown || got.Metadata["backend"] != "fake" {
		t.Errorf("after a clean restart: %+v", got)
	}
	if after := wireOf(t, r2, s.SessionID, abi.ContentANSI); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("events changed across a clean restart:\n before %v\n after  %v", before, after)
	}
}

func testRestartTwice(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	rs := newRestarter(t, se)
	k := newKind(t, abi.TypeTerminal)
	r1, st1 := rs.start(t, live.Config{}, k)
	s := mustCreate(t, r1, termReq)
	k.Probe(t, s.SessionID).Emit([]byte("x"))
	crash(t, st1)

	r2, st2 := rs.start(t, live.Config{}, newKind(t, abi.TypeTerminal))
	afterFirst := wireOf(t, r2, s.SessionID, abi.ContentRaw)
	s2 := mustCreate(t, r2, termReq)
	crash(t, st2)

	r3, _ := rs.start(t, live.Config{}, newKind(t, abi.TypeTerminal))
	if got := wireOf(t, r3, s.SessionID, abi.ContentRaw); fmt.Sprint(got) != fmt.Sprint(afterFirst) {
		t.Errorf("a session closed by the first restart changed in the second:\n %v\n %v", afterFirst, got)
	}
	evs := readAll(t, r3, s2.SessionID).Events
	if tl := tail(evs, 1); fmt.Sprint(tl) != "[close:gateway-restart/closed]" {
		t.Errorf("second run's session ends %v", tl)
	}
	if len(list(t, r3, true)) != 2 {
		t.Errorf("List(true) = %+v", list(t, r3, true))
	}
}

func testRestartRetention(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	rs := newRestarter(t, se)
	k := newKind(t, abi.TypeTerminal)
	cfg := live.Config{Retention: time.Hour, IdleTimeout: -1}
	r1, st1 := rs.start(t, cfg, k)
	ctx := testCtx(t)
	old := mustCreate(t, r1, termReq)
	_, err := r1.Close(ctx, old.SessionID, abi.CloseRequested)
	mustOK(t, err)
	swept := mustCreate(t, r1, termReq)
	_, err = r1.Close(ctx, swept.SessionID, abi.CloseRequested)
	mustOK(t, err)
	rs.clk.Advance(30 * time.Minute)
	recent := mustCreate(t, r1, termReq)
	_, err = r1.Close(ctx, recent.SessionID, abi.CloseRequested)
	mustOK(t, err)
	r1.Sweep(ctx, T0.Add(time.Hour)) // forgets old and swept: past retention
	crash(t, st1)

	rs.clk.Set(T0.Add(time.Hour)) // old and swept are due, recent is not
	r2, st2 := rs.start(t, cfg, newKind(t, abi.TypeTerminal))
	for _, id := range []string{old.SessionID, swept.SessionID} {
		_, err := r2.Get(ctx, id)
		WantCode(t, err, abi.CodeSessionNotFound)
	}
	_, err = r2.Get(ctx, recent.SessionID)
	mustOK(t, err)
	crash(t, st2)

	rs.clk.Advance(31 * time.Minute) // recent is past retention at the restart itself
	r3, _ := rs.start(t, cfg, newKind(t, abi.TypeTerminal))
	_, err = r3.Get(ctx, recent.SessionID)
	WantCode(t, err, abi.CodeSessionNotFound)
	if got := list(t, r3, true); len(got) != 0 {
		t.Errorf("List(true) = %+v", got)
	}
}

// testRestartPurged: what the bounded log had dropped before the restart is still reported as
// missed after it, and the pinned events are still there.
func testRestartPurged(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	for _, lim := range []live.LogLimits{
		{Events: 4, Bytes: 1 << 20, Pinned: 1000},
		{Events: 4, Bytes: 1 << 20, Pinned: 2},
		{Events: 1000, Bytes: 5 * 256, Pinned: 1000},
	} {
		t.Run(fmt.Sprintf("%+v", lim), func(t *testing.T) {
			rs := newRestarter(t, se)
			k := newKind(t, abi.TypeTerminal)
			r1, st1 := rs.start(t, live.Config{Log: lim}, k)
			s := mustCreate(t, r1, termReq)
			hist := history(t, r1, k.Probe(t, s.SessionID), s.SessionID)
			beforeAll := readAll(t, r1, s.SessionID)
			crash(t, st1)

			r2, _ := rs.start(t, live.Config{Log: lim}, newKind(t, abi.TypeTerminal))
			afterAll := readAll(t, r2, s.SessionID)
			if MissedOf(t, afterAll.Events[0]) != MissedOf(t, beforeAll.Events[0]) {
				t.Errorf("missed %d after the restart, %d before", MissedOf(t, afterAll.Events[0]), MissedOf(t, beforeAll.Events[0]))
			}
			if got, want := seqs(afterAll.Events[1:]), seqs(beforeAll.Events[1:]); got != want {
				t.Errorf("late reader after the restart got %s, before %s", got, want)
			}
			if !afterAll.Done || afterAll.Next != uint64(len(hist)) {
				t.Errorf("after restart: done %v next %d, want %d", afterAll.Done, afterAll.Next, len(hist))
			}
			// Paging from each sequence number gives what it gave before.
			for after := uint64(0); after <= uint64(len(hist)); after++ {
				b1, err := r1.Read(context.Background(), s.SessionID, after, 2, 0)
				mustOK(t, err)
				b2, err := r2.Read(context.Background(), s.SessionID, after, 2, 0)
				mustOK(t, err)
				if DescribeAll(b1.Events) == nil && DescribeAll(b2.Events) == nil {
					continue
				}
				if fmt.Sprint(DescribeAll(b1.Events), seqs(b1.Events), b1.Next) != fmt.Sprint(DescribeAll(b2.Events), seqs(b2.Events), b2.Next) {
					t.Errorf("Read(after %d, 2): before %v %s next %d, after %v %s next %d", after,
						DescribeAll(b1.Events), seqs(b1.Events), b1.Next, DescribeAll(b2.Events), seqs(b2.Events), b2.Next)
				}
			}
		})
	}
}

func seqs(es []*live.Event) string {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return fmt.Sprint(out)
}

// testRestartWireUnchanged: every kind of event reads the same on the wire, in every content
// type, before and after a restart — timestamps, odd bytes and numbers included.
func testRestartWireUnchanged(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	rs := newRestarter(t, se)
	k := newKind(t, abi.TypeTerminal)
	r1, st1 := rs.start(t, live.Config{}, k)
	ctx := testCtx(t)
	s := mustCreate(t, r1, termReq)
	p := k.Probe(t, s.SessionID)
	rs.clk.Advance(1234567 * time.Microsecond)
	p.Emit([]byte("\x1b[31mred\x1b[0m <b>&\"\\ \xff\xfe \u2028 é\r\n"))
	p.Emit(nil)
	p.SetMetadata(map[string]any{"pid": 4242, "ratio": 0.25, "list": []any{"a", 1}, "nested": map[string]any{"k": "v"}})
	mustOK(t, control(r1, s.SessionID, abi.CommandInterrupt))
	p.FailClose(fmt.Errorf("kill: operation not permitted"))
	_, err := r1.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	before := map[abi.ContentType][]string{}
	for _, ct := range []abi.ContentType{abi.ContentANSI, abi.ContentText, abi.ContentRaw} {
		before[ct] = wireOf(t, r1, s.SessionID, ct)
	}
	obj1, err := r1.Get(ctx, s.SessionID)
	mustOK(t, err)
	crash(t, st1)

	r2, _ := rs.start(t, live.Config{}, newKind(t, abi.TypeTerminal))
	for ct, want := range before {
		got := wireOf(t, r2, s.SessionID, ct)
		if len(got) != len(want) {
			t.Fatalf("%s: %d events after the restart, %d before", ct, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s event %d:\n before %s\n after  %s", ct, i, want[i], got[i])
			}
		}
	}
	obj2, err := r2.Get(ctx, s.SessionID)
	mustOK(t, err)
	if a, b := fmt.Sprint(obj1), fmt.Sprint(obj2); a != b {
		// Numbers come back as JSON numbers; compare the wire forms.
		if !bytes.Equal(mustJSON(t, obj1), mustJSON(t, obj2)) {
			t.Errorf("session object across the restart:\n before %s\n after  %s", mustJSON(t, obj1), mustJSON(t, obj2))
		}
	}
}

// testRestartLongLog: a log that went through many events (far past its window, so its
// storage has been cut many times) continues its numbering after a restart.
func testRestartLongLog(t *testing.T, se *suiteEnv, newKind newKindFunc) {
	rs := newRestarter(t, se)
	k := newKind(t, abi.TypeTerminal)
	lim := live.LogLimits{Events: 64, Bytes: 16 << 10, Pinned: 8}
	r1, st1 := rs.start(t, live.Config{Log: lim}, k)
	s := mustCreate(t, r1, termReq)
	p := k.Probe(t, s.SessionID)
	chunk := bytes.Repeat([]byte("z"), 700)
	for i := range 3000 {
		p.Emit(chunk)
		if i%500 == 0 {
			p.SetMetadata(map[string]any{"i": i})
		}
	}
	last := lastSeq(t, r1, s.SessionID)
	before := readAll(t, r1, s.SessionID)
	crash(t, st1)

	r2, _ := rs.start(t, live.Config{Log: lim}, newKind(t, abi.TypeTerminal))
	if got := lastSeq(t, r2, s.SessionID); got != last+2 {
		t.Errorf("LastSeq %d after the restart, want %d (%d, then the two closing events)", got, last+2, last)
	}
	b, err := r2.Read(context.Background(), s.SessionID, last, 0, 0)
	mustOK(t, err)
	if fmt.Sprint(DescribeAll(b.Events)) != "[status:closed/closed close:gateway-restart/closed]" || seqs(b.Events) != fmt.Sprint([]uint64{last + 1, last + 2}) {
		t.Errorf("after %d: %v %s", last, DescribeAll(b.Events), seqs(b.Events))
	}
	// The window held before the restart is held after it, less what the two new events pushed out.
	after := readAll(t, r2, s.SessionID)
	if MissedOf(t, before.Events[0]) == 0 || MissedOf(t, after.Events[0]) < MissedOf(t, before.Events[0]) {
		t.Errorf("missed %d before, %d after", MissedOf(t, before.Events[0]), MissedOf(t, after.Events[0]))
	}
	kept := map[uint64]bool{}
	for _, e := range before.Events[1:] {
		kept[e.Seq] = true
	}
	for _, e := range after.Events[1:] {
		if !kept[e.Seq] && e.Seq <= last {
			t.Errorf("event %d is back after the restart though it had been dropped", e.Seq)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	mustOK(t, err)
	return b
}
