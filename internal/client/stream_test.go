package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// publish emits numbered terminal output events from..to (inclusive).
func publish(s live.Sink, from, to int) {
	for i := from; i <= to; i++ {
		s.Output([]byte(strconv.Itoa(i) + "\n"))
	}
}

// ---------------------------------------------------------------------------------------------
// Gateway fixture.

type fixture struct {
	kind *livetest.FakeKind
	reg  *live.Registry
	srv  *httptest.Server
	// direct talks to the gateway without any proxy.
	direct *client.Client
}

func newFixture(t *testing.T, limits live.LogLimits, wrap func(http.Handler) http.Handler) *fixture {
	t.Helper()
	// Sessions publish whatever the test tells their sink to.
	k := livetest.NewFakeKind(abi.TypeTerminal, false)
	reg, err := live.New(context.Background(), live.Config{Log: limits, IdleTimeout: -1}, k)
	if err != nil {
		t.Fatal(err)
	}
	h := gateway.Handler(gateway.Options{Registry: reg, Version: "test"})
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.Start()
	f := &fixture{kind: k, reg: reg, srv: srv, direct: client.New(client.Target{URL: srv.URL})}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("registry shutdown: %v", err)
		}
		srv.CloseClientConnections()
		srv.Close()
	})
	return f
}

func (f *fixture) create(t *testing.T) (string, live.Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	obj, err := f.direct.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	inst := f.kind.Instance(obj.SessionID)
	if inst == nil {
		t.Fatalf("no sink for %s", obj.SessionID)
	}
	return obj.SessionID, inst.Sink()
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy that cuts connections.

type cutProxy struct {
	ln     net.Listener
	target string
	// minCut..maxCut bound how many server->client bytes a connection carries before it is cut;
	// maxCut 0 never cuts.
	minCut, maxCut int64
	refuse         atomic.Bool
	cuts           atomic.Int64
	accepted       atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string, minCut, maxCut int64) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, minCut: minCut, maxCut: maxCut, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if p.refuse.Load() {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *cutProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *cutProxy) limit() int64 {
	if p.maxCut <= 0 {
		return 0
	}
	return p.minCut + rand.Int64N(p.maxCut-p.minCut+1)
}

func (p *cutProxy) handle(c net.Conn) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c, s) {
		_ = c.Close()
		_ = s.Close()
		return
	}
	var once sync.Once
	cut := func() {
		once.Do(func() {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // an abrupt reset, like a dropped network
			}
			_ = c.Close()
			_ = s.Close()
			p.untrack(c, s)
		})
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_, _ = io.Copy(s, c)
		cut()
	}()
	limit := p.limit()
	var n int64
	buf := make([]byte, 32<<10)
	for {
		k, err := s.Read(buf)
		if k > 0 {
			if limit > 0 && n+int64(k) >= limit {
				_, _ = c.Write(buf[:limit-n])
				p.cuts.Add(1)
				cut()
				return
			}
			n += int64(k)
			if _, werr := c.Write(buf[:k]); werr != nil {
				cut()
				return
			}
		}
		if err != nil {
			cut()
			return
		}
	}
}

// cutAll drops every open connection.
func (p *cutProxy) cutAll() {
	p.mu.Lock()
	cs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	p.cutAll()
	p.wg.Wait()
}

// ---------------------------------------------------------------------------------------------
// Checking what a stream delivered.

type record struct {
	mu     sync.Mutex
	events []abi.Event
	nums   []int // the numbers carried by data events, in delivery order
}

func (r *record) add(t *testing.T, e abi.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if e.Event == abi.EventData {
		var out abi.TerminalOutput
		if err := json.Unmarshal(e.Payload, &out); err != nil {
			return fmt.Errorf("data payload: %w", err)
		}
		b, err := out.Bytes()
		if err != nil {
			return fmt.Errorf("data bytes (%s): %w", out.ContentType, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("data content %q (%s): %w", b, out.ContentType, err)
		}
		r.nums = append(r.nums, n)
	}
	return nil
}

func (r *record) snapshot() ([]abi.Event, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]abi.Event(nil), r.events...), append([]int(nil), r.nums...)
}

// checkExact asserts the data numbers are exactly 1..n in order, every sequence number from 1 on
// arrived exactly once and in order, and the close event came last.
func checkExact(t *testing.T, r *record, n int) {
	t.Helper()
	events, nums := r.snapshot()
	if len(nums) != n {
		t.Errorf("received %d data events, want %d", len(nums), n)
	}
	for i, v := range nums {
		if v != i+1 {
			t.Fatalf("data event %d carries %d, want %d (gap or duplicate); around: %v", i, v, i+1, nums[max(0, i-3):min(len(nums), i+3)])
		}
	}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d, want %d (%s)", i, e.Seq, i+1, e.Event)
		}
	}
	if len(events) == 0 || events[len(events)-1].Event != abi.EventClose {
		t.Fatalf("the last event is not close: %+v", events[len(events)-1:])
	}
}

// ---------------------------------------------------------------------------------------------
// The cut test: a fast stream through a proxy that keeps dropping connections.

func TestStreamSurvivesCuts(t *testing.T) {
	cases := []struct {
		transport abi.Transport
		ct        abi.ContentType
		n         int // numbered output events
	}{
		{abi.TransportWebSocket, abi.ContentRaw, 20000},
		{abi.TransportPolling, abi.ContentANSI, 10000},
		{abi.TransportHybrid, abi.ContentText, 10000},
	}
	for _, tc := range cases {
		t.Run(string(tc.transport), func(t *testing.T) {
			t.Parallel()
			n := tc.n
			f := newFixture(t, live.LogLimits{Events: 2 * n, Bytes: 64 << 20}, nil)
			px := newCutProxy(t, f.srv.Listener.Addr().String(), 8<<10, 384<<10)
			id, sink := f.create(t)

			var started sync.Once
			var producer sync.WaitGroup
			start := func() {
				started.Do(func() {
					producer.Add(1)
					go func() {
						defer producer.Done()
						publish(sink, 1, n)
						sink.Ended(abi.CloseExited, nil)
					}()
				})
			}
			var reconnects, dials atomic.Int64
			rec := &record{}
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
			defer cancel()
			c := client.New(client.Target{URL: px.url()})
			err := c.Stream(ctx, id, client.StreamOptions{
				Follow:      true,
				Transport:   tc.transport,
				ContentType: tc.ct,
				PollWait:    time.Second,
				MaxBackoff:  5 * time.Millisecond,
				OnReconnect: func(int, time.Duration, error) { reconnects.Add(1) },
				Dialed:      func(*client.Conn) { dials.Add(1) },
			}, func(e abi.Event) error {
				start() // the burst begins once the client is connected, so it is cut mid-stream
				return rec.add(t, e)
			})
			producer.Wait()
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			checkExact(t, rec, n)
			if reconnects.Load() == 0 {
				t.Errorf("no reconnect happened (proxy cut %d connections)", px.cuts.Load())
			}
			if tc.transport != abi.TransportPolling && dials.Load() == 0 {
				t.Errorf("%s never used a WebSocket", tc.transport)
			}
			t.Logf("%s: %d reconnects, %d cuts, %d dials", tc.transport, reconnects.Load(), px.cuts.Load(), dials.Load())
		})
	}
}

// Hybrid falls back to polling when something in the way refuses the WebSocket upgrade.
func TestHybridFallsBackWhenUpgradeRefused(t *testing.T) {
	var upgrades atomic.Int64
	refuse := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
				upgrades.Add(1)
				http.Error(w, "upgrades are not allowed here", http.StatusBadRequest)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	const n = 2000
	f := newFixture(t, live.LogLimits{}, refuse)
	id, sink := f.create(t)
	publish(sink, 1, n)
	sink.Ended(abi.CloseExited, nil)

	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	rec := &record{}
	var dials atomic.Int64
	err := f.direct.Stream(ctx, id, client.StreamOptions{
		Follow: true, Transport: abi.TransportHybrid, PollWait: time.Second, MaxBackoff: 5 * time.Millisecond,
		Dialed: func(*client.Conn) { dials.Add(1) },
	}, func(e abi.Event) error { return rec.add(t, e) })
	if err != nil {
		t.Fatalf("hybrid stream: %v", err)
	}
	checkExact(t, rec, n)
	if upgrades.Load() == 0 || dials.Load() != 0 {
		t.Errorf("upgrade attempts %d (want > 0), successful dials %d (want 0)", upgrades.Load(), dials.Load())
	}

	// WebSocket alone keeps trying, and gives up after GiveUpAfter. How many attempts fit in
	// GiveUpAfter depends on the machine's speed; what does not is that the first failure is
	// retried (the give-up clock starts at that failure), so there are at least two upgrades.
	var reconnects atomic.Int64
	before := upgrades.Load()
	err = f.direct.Stream(ctx, id, client.StreamOptions{
		Follow: true, Transport: abi.TransportWebSocket, MaxBackoff: 5 * time.Millisecond, GiveUpAfter: 200 * time.Millisecond,
		OnReconnect: func(int, time.Duration, error) { reconnects.Add(1) },
	}, func(abi.Event) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("websocket stream against a refusing server: %v, want a give-up error", err)
	}
	if tries := upgrades.Load() - before; reconnects.Load() < 1 || tries < 2 {
		t.Errorf("%d reconnects and %d upgrade attempts, want the failure retried before giving up", reconnects.Load(), tries)
	}
}

// ---------------------------------------------------------------------------------------------
// EVENTS_MISSED: a reader stalled past the retained window is told so, never left with a gap.

func TestStalledReaderGetsEventsMissed(t *testing.T) {
	for _, tr := range []abi.Transport{abi.TransportWebSocket, abi.TransportPolling, abi.TransportHybrid} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, live.LogLimits{Events: 16, Bytes: 1 << 20, Pinned: 8}, nil)
			id, sink := f.create(t)
			publish(sink, 1, 5)

			var mu sync.Mutex
			var conn *client.Conn
			stalled := make(chan struct{})
			resume := make(chan struct{})
			rec := &record{}
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				errc <- f.direct.Stream(ctx, id, client.StreamOptions{
					Follow: true, Transport: tr, PollWait: time.Second, MaxBackoff: 5 * time.Millisecond,
					Dialed: func(c *client.Conn) { mu.Lock(); conn = c; mu.Unlock() },
				}, func(e abi.Event) error {
					if err := rec.add(t, e); err != nil {
						return err
					}
					if _, nums := rec.snapshot(); e.Event == abi.EventData && len(nums) == 5 {
						close(stalled)
						<-resume // the reader stalls here while the log moves on
					}
					return nil
				})
			}()
			select {
			case <-stalled:
			case err := <-errc:
				t.Fatalf("stream ended early: %v", err)
			case <-ctx.Done():
				t.Fatal("the reader never reached event 5")
			}
			mu.Lock()
			if conn != nil {
				_ = conn.Abort() // a WebSocket reader resumes from its sequence on a new connection
			}
			mu.Unlock()
			publish(sink, 6, 105)
			close(resume)
			// Whatever the reader got so far, the rest arrives once it is current.
			testkit.Eventually(t, "the reader to get event 105", func() bool { _, nums := rec.snapshot(); return len(nums) > 0 && nums[len(nums)-1] == 105 })
			publish(sink, 106, 110)
			sink.Ended(abi.CloseExited, nil)
			if err := <-errc; err != nil {
				t.Fatalf("stream: %v", err)
			}
			checkGapsAnnounced(t, rec, 110)
		})
	}
}

// checkGapsAnnounced asserts sequences only skip right after an EVENTS_MISSED error event (seq 0)
// whose details account for every missing sequence, that there was such an event, and that data
// after it is contiguous up to last.
func checkGapsAnnounced(t *testing.T, r *record, last int) {
	t.Helper()
	events, nums := r.snapshot()
	var prev uint64
	gaps := 0
	var pending *abi.ErrorDetail
	for i, e := range events {
		if e.Seq == 0 {
			var p abi.ErrorPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil || e.Event != abi.EventError || p.Error.Code != abi.CodeEventsMissed {
				t.Fatalf("event %d has seq 0 but is not an EVENTS_MISSED error: %s %s", i, e.Event, e.Payload)
			}
			d := p.Error
			pending = &d
			gaps++
			continue
		}
		if e.Seq <= prev {
			t.Fatalf("event %d: seq %d after %d (duplicate or reorder)", i, e.Seq, prev)
		}
		if e.Seq != prev+1 {
			if pending == nil {
				t.Fatalf("silent gap: seq %d follows %d with no EVENTS_MISSED", e.Seq, prev)
			}
			missed, _ := pending.Details["missed"].(float64)
			from, _ := pending.Details["fromSeq"].(float64)
			to, _ := pending.Details["toSeq"].(float64)
			if uint64(from) != prev+1 || uint64(to) < e.Seq-1 || uint64(missed) > uint64(to-from+1) || missed <= 0 {
				t.Fatalf("gap %d..%d announced as missed=%v from=%v to=%v", prev+1, e.Seq-1, missed, from, to)
			}
			if uint64(to) == e.Seq-1 && uint64(missed) != e.Seq-1-prev {
				t.Fatalf("gap of %d announced as %v missed", e.Seq-1-prev, missed)
			}
		}
		pending = nil
		prev = e.Seq
	}
	if gaps == 0 {
		t.Fatalf("no EVENTS_MISSED event although the reader fell %d events behind a 16-event window", 100)
	}
	if events[len(events)-1].Event != abi.EventClose {
		t.Fatalf("last event is %s, want close", events[len(events)-1].Event)
	}
	// After the gap, data is contiguous up to the end.
	for i := 1; i < len(nums); i++ {
		if nums[i] <= nums[i-1] {
			t.Fatalf("data %d after %d", nums[i], nums[i-1])
		}
	}
	if nums[len(nums)-1] != last {
		t.Fatalf("last data %d, want %d", nums[len(nums)-1], last)
	}
	for i := 0; i < 5; i++ {
		if nums[i] != i+1 {
			t.Fatalf("first data events %v, want 1..5", nums[:5])
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Smaller behaviours of Stream, Poll and Conn.

func TestStreamUnknownSessionIsNotRetried(t *testing.T) {
	f := newFixture(t, live.LogLimits{}, nil)
	for _, tr := range []abi.Transport{abi.TransportWebSocket, abi.TransportPolling, abi.TransportHybrid} {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		var reconnects atomic.Int64
		err := f.direct.Stream(ctx, "no-such-session", client.StreamOptions{
			Follow: true, Transport: tr, MaxBackoff: time.Millisecond,
			OnReconnect: func(int, time.Duration, error) { reconnects.Add(1) },
		}, func(abi.Event) error { return nil })
		cancel()
		if !client.IsCode(err, abi.CodeSessionNotFound) {
			t.Errorf("%s: err = %v, want SESSION_NOT_FOUND", tr, err)
		}
		if reconnects.Load() != 0 {
			t.Errorf("%s: %d reconnects for a permanent error", tr, reconnects.Load())
		}
	}
}

func TestStreamWithoutFollowAndLimit(t *testing.T) {
	f := newFixture(t, live.LogLimits{}, nil)
	id, sink := f.create(t)
	publish(sink, 1, 10)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()

	// Without follow: the retained events (2 status, the kind's metadata, 10 data), then return.
	var got []abi.Event
	if err := f.direct.Stream(ctx, id, client.StreamOptions{}, func(e abi.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 13 || got[0].Seq != 1 || got[12].Seq != 13 {
		t.Fatalf("got %d events (first %v), want seq 1..13", len(got), got)
	}
	// After and Limit.
	got = nil
	if err := f.direct.Stream(ctx, id, client.StreamOptions{After: 4, Limit: 3}, func(e abi.Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Seq != 5 || got[2].Seq != 7 {
		t.Fatalf("after 4 limit 3: %+v", got)
	}
	// Limit with follow stops without the session closing, on every transport.
	for _, tr := range []abi.Transport{abi.TransportWebSocket, abi.TransportPolling, abi.TransportHybrid} {
		got = nil
		err := f.direct.Stream(ctx, id, client.StreamOptions{Follow: true, Transport: tr, After: 2, Limit: 4, PollWait: time.Second},
			func(e abi.Event) error { got = append(got, e); return nil })
		if err != nil || len(got) != 4 || got[0].Seq != 3 || got[3].Seq != 6 {
			t.Fatalf("%s follow limit 4: err %v, %d events", tr, err, len(got))
		}
	}
	// fn's error ends the stream and comes back unchanged: it is not a dropped connection.
	boom := errors.New("boom")
	for _, tr := range []abi.Transport{abi.TransportWebSocket, abi.TransportPolling, abi.TransportHybrid} {
		for _, follow := range []bool{true, false} {
			var reconnects atomic.Int64
			calls := 0
			err := f.direct.Stream(ctx, id, client.StreamOptions{Follow: follow, Transport: tr, MaxBackoff: time.Millisecond,
				OnReconnect: func(int, time.Duration, error) { reconnects.Add(1) }},
				func(abi.Event) error { calls++; return boom })
			if err != boom || calls != 1 || reconnects.Load() != 0 { //nolint:errorlint // exactly fn's error
				t.Fatalf("%s follow=%v: fn error came back as %v after %d calls and %d reconnects", tr, follow, err, calls, reconnects.Load())
			}
		}
	}
}

func TestStreamOfClosedSessionReplaysAndEnds(t *testing.T) {
	f := newFixture(t, live.LogLimits{}, nil)
	id, sink := f.create(t)
	publish(sink, 1, 50)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	if _, err := f.direct.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []abi.Transport{abi.TransportWebSocket, abi.TransportPolling, abi.TransportHybrid} {
		rec := &record{}
		if err := f.direct.Stream(ctx, id, client.StreamOptions{Follow: true, Transport: tr, PollWait: time.Second},
			func(e abi.Event) error { return rec.add(t, e) }); err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		checkExact(t, rec, 50)
		events, _ := rec.snapshot()
		var cp abi.ClosePayload
		if err := json.Unmarshal(events[len(events)-1].Payload, &cp); err != nil || cp.Reason != abi.CloseRequested || cp.Status != abi.StatusClosed {
			t.Fatalf("%s: close payload %s", tr, events[len(events)-1].Payload)
		}
	}
	// Using the closed session answers SESSION_CLOSED, not retriable.
	err := f.direct.Send(ctx, id, []byte("x"))
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeSessionClosed || ae.Code.Retriable() || ae.SessionID != id {
		t.Fatalf("send to closed session: %v", err)
	}
}

func TestConnSendAndResize(t *testing.T) {
	f := newFixture(t, live.LogLimits{}, nil)
	id, _ := f.create(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	conn, err := f.direct.Dial(ctx, id, client.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.Send(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := conn.Send(ctx, []byte{0xff, 0x00, 0xfe}); err != nil { // not UTF-8: goes as base64
		t.Fatal(err)
	}
	if err := conn.Resize(ctx, 0, 0); err != nil { // refused: comes back as a seq 0 error event
		t.Fatal(err)
	}
	if err := conn.Resize(ctx, 120, 40); err != nil {
		t.Fatal(err)
	}
	sawResizeError := false
	for !sawResizeError {
		e, err := conn.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if e.Seq == 0 && e.Event == abi.EventError {
			var p abi.ErrorPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil || p.Error.Code != abi.CodeInvalidArgument {
				t.Fatalf("error event %s", e.Payload)
			}
			sawResizeError = true
		}
	}
	testkit.Eventually(t, "the kind to receive both sends", func() bool { return len(f.kind.Instance(id).Sends()) == 2 })
	got := f.kind.Instance(id).Sends()
	if string(got[0]) != "hello" || string(got[1]) != "\xff\x00\xfe" {
		t.Fatalf("received %q", got)
	}
	// A second resize, valid this time, changes nothing observable here but must not error;
	// Dial of an unknown session answers the ABI error.
	if _, err := f.direct.Dial(ctx, "nope", client.DialOptions{}); !client.IsCode(err, abi.CodeSessionNotFound) {
		t.Fatalf("dial unknown: %v", err)
	}
	// The gateway ends the stream with a normal closure after the close event.
	if _, err := f.direct.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := conn.Next(ctx)
		if errors.Is(err, client.ErrStreamEnded) {
			break
		}
		if err != nil {
			t.Fatalf("next after close: %v", err)
		}
		_ = e
	}
}

func TestUnreachableGatewayIsConnectionLost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c := client.New(client.Target{URL: "http://" + addr})
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	_, err = c.Version(ctx)
	if !client.IsCode(err, abi.CodeConnectionLost) {
		t.Fatalf("version against nothing: %v", err)
	}
	err = c.Stream(ctx, "x", client.StreamOptions{Follow: true, MaxBackoff: time.Millisecond, GiveUpAfter: 50 * time.Millisecond}, func(abi.Event) error { return nil })
	if err == nil || !client.IsCode(err, abi.CodeConnectionLost) {
		t.Fatalf("stream against nothing: %v", err)
	}
}
