package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/live"
)

// The payload is 'Z' (octal 132) so that neither the echoed command line nor the prompt contains
// it, and the marker is written split in the command so only the output contains it whole.
const doneMarker = "__NEXUS_BENCH_DONE__"

func outputCommand(n int64) string {
	return fmt.Sprintf("head -c %d /dev/zero | tr '\\0' '\\132'; echo; echo __NEXUS_BENCH\"\"_DONE__\n", n)
}

// ThroughputRow is one line of the throughput table.
type ThroughputRow struct {
	Path        string          `json:"path"`
	Subscribers int             `json:"subscribers"`
	ContentType abi.ContentType `json:"contentType,omitempty"`
	LogLimits   *LogLimits      `json:"logLimits,omitempty"`
	// ExpectedBytes is what each subscriber should receive (the command's output).
	ExpectedBytes int64 `json:"expectedBytes"`
	// Seconds is from sending the command to the last subscriber seeing the end marker.
	Seconds float64 `json:"seconds"`
	// ProducerSeconds is when the runtime had the whole output in its log (gateway rows).
	ProducerSeconds float64 `json:"producerSeconds,omitempty"`
	// Per-subscriber MB/s over received payload bytes and that subscriber's own time.
	PerSubMBps Spread `json:"perSubscriberMBps"`
	// AggregateMBps is all received payload bytes over Seconds.
	AggregateMBps float64 `json:"aggregateMBps"`
	// RatioPerSub and RatioAggregate compare with the ceiling row's MB/s.
	RatioPerSub    float64 `json:"ratioPerSubscriber"`
	RatioAggregate float64 `json:"ratioAggregate"`
	ReceivedBytes  int64   `json:"receivedBytes"` // all subscribers together
	// Complete counts subscribers that received every byte.
	Complete int `json:"complete"`
	// SubsWithMisses counts subscribers that got at least one EVENTS_MISSED error event;
	// MissedEvents sums the events those reported.
	SubsWithMisses int    `json:"subscribersWithMisses"`
	MissedEvents   uint64 `json:"missedEvents"`
	MissedReports  int    `json:"missedReports"`
	DataEvents     int64  `json:"dataEvents"` // data events received by subscriber 0
	// MaxGapSeconds is the longest wait between two data events seen by any subscriber: a
	// stall of the session shows up here.
	MaxGapSeconds float64 `json:"maxGapSeconds,omitempty"`
	// Stalled is the subscriber that stopped reading, in the stalled-follower row.
	Stalled *StalledResult `json:"stalled,omitempty"`
	Note    string         `json:"note,omitempty"`
}

// StalledResult is what a subscriber that stopped reading got once it read again.
type StalledResult struct {
	// PausedSeconds runs from sending the command until it started reading.
	PausedSeconds float64 `json:"pausedSeconds"`
	// DrainedSeconds runs from sending the command until it saw the end marker.
	DrainedSeconds float64 `json:"drainedSeconds,omitempty"`
	ReceivedBytes  int64   `json:"receivedBytes"`
	MissedEvents   uint64  `json:"missedEvents"`
	MissedReports  int     `json:"missedReports"`
	// Cut is set when the gateway had closed its connection instead.
	Cut   bool   `json:"cut,omitempty"`
	Error string `json:"error,omitempty"`
}

// LogLimits mirrors live.LogLimits for the JSON results.
type LogLimits struct {
	Events     int     `json:"events"`
	Bytes      int     `json:"bytes"`
	MaxStallMs float64 `json:"maxStallMs"`
}

func logLimits(l live.LogLimits) *LogLimits {
	return &LogLimits{Events: l.Events, Bytes: l.Bytes, MaxStallMs: float64(l.MaxStall) / float64(time.Millisecond)}
}

// Spread summarises per-subscriber figures.
type Spread struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

func spread(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Spread{Min: s[0], Mean: sum / float64(len(s)), Max: s[len(s)-1]}
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// throughputCeiling reads the command's output straight from a PTY in this process.
func throughputCeiling(ctx context.Context, cfg config) (ThroughputRow, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-pty-")
	if err != nil {
		return ThroughputRow{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := startPTYShell(cfg.shell, dir, shellEnv(dir))
	if err != nil {
		return ThroughputRow{}, err
	}
	defer p.close()
	if err := p.readQuiet(150*time.Millisecond, 10*time.Second); err != nil {
		return ThroughputRow{}, err
	}
	sc := newScanner(doneMarker)
	buf := make([]byte, 32<<10) // PTY reads return a few KiB at most, so the size (the kind uses 16 KiB) does not matter
	stop := p.watchdog(ctx, cfg.timeout)
	start := time.Now()
	if _, err := p.f.Write([]byte(outputCommand(cfg.bytes))); err != nil {
		stop()
		return ThroughputRow{}, err
	}
	for !sc.found {
		n, err := p.f.Read(buf)
		sc.feed(buf[:n])
		if err != nil && !sc.found {
			stop()
			return ThroughputRow{}, fmt.Errorf("read pty: %w", err)
		}
	}
	d := time.Since(start)
	if stop() {
		return ThroughputRow{}, fmt.Errorf("ceiling run exceeded %s", cfg.timeout)
	}
	m := mbps(sc.z, d)
	return ThroughputRow{
		Path: "PTY read directly in-process (ceiling)", Subscribers: 1, ExpectedBytes: cfg.bytes,
		Seconds: d.Seconds(), PerSubMBps: Spread{m, m, m}, AggregateMBps: m, RatioPerSub: 1, RatioAggregate: 1,
		ReceivedBytes: sc.z, Complete: b2i(sc.z == cfg.bytes),
	}, nil
}

// ceilingMedian runs the ceiling n times and keeps the median run: the PTY's own rate moves by
// tens of percent from one run to the next on a small VM, and every ratio divides by it.
func ceilingMedian(ctx context.Context, cfg config, n int) (ThroughputRow, error) {
	var rows []ThroughputRow
	for range n {
		r, err := throughputCeiling(ctx, cfg)
		if err != nil {
			return r, err
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].AggregateMBps < rows[j].AggregateMBps })
	row := rows[len(rows)/2]
	runs := make([]string, len(rows))
	for i, r := range rows {
		runs[i] = fmt.Sprintf("%.1f", r.AggregateMBps)
	}
	row.Note = fmt.Sprintf("median of %d runs (MB/s: %s)", n, strings.Join(runs, ", "))
	return row, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// producerWatch reads the session's log in-process (no encoding) and reports when the runtime
// holds the end marker, i.e. when the PTY side finished. It also counts what it saw.
func producerWatch(ctx context.Context, reg *live.Registry, id string, after uint64) (sc *scanner, missed uint64, reports int, at time.Time, err error) {
	sc = newScanner(doneMarker)
	for !sc.found {
		b, err := reg.Read(ctx, id, after, 512, time.Second)
		if err != nil {
			return sc, missed, reports, at, err
		}
		for _, e := range b.Events {
			switch e.Type {
			case abi.EventData:
				if out, ok := e.Payload.(live.Output); ok {
					sc.feed(out)
				}
			case abi.EventError:
				if n := missedCount(e.Payload); n > 0 {
					missed += n
					reports++
				}
			}
		}
		after = b.Next
		if b.Done && !sc.found {
			return sc, missed, reports, at, errors.New("session ended before the end marker")
		}
	}
	return sc, missed, reports, time.Now(), nil
}

func missedCount(p any) uint64 {
	ep, ok := p.(abi.ErrorPayload)
	if !ok || ep.Error.Code != abi.CodeEventsMissed {
		return 0
	}
	switch v := ep.Error.Details["missed"].(type) {
	case uint64:
		return v
	case float64:
		return uint64(v)
	case int:
		return uint64(v)
	}
	return 1
}

// throughputRuntime is the registry alone: PTY -> terminal kind -> event log -> one in-process
// reader, no encoding and no socket.
func throughputRuntime(ctx context.Context, cfg config) (ThroughputRow, error) {
	h, err := startHarness(ctx, live.Config{IdleTimeout: -1}, cfg)
	if err != nil {
		return ThroughputRow{}, err
	}
	defer h.stop()
	s, err := h.openTerminal(ctx)
	if err != nil {
		return ThroughputRow{}, err
	}
	defer func() { _ = h.closeSession(context.WithoutCancel(ctx), s.SessionID) }()
	after, _ := h.reg.LastSeq(ctx, s.SessionID)
	rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	if _, err := h.reg.Send(rctx, s.SessionID, live.SendRequest{Data: []byte(outputCommand(cfg.bytes))}); err != nil {
		return ThroughputRow{}, err
	}
	sc, missed, reports, at, err := producerWatch(rctx, h.reg, s.SessionID, after)
	if err != nil {
		return ThroughputRow{}, err
	}
	d := at.Sub(start)
	m := mbps(sc.z, d)
	lim := h.reg.Config().Log
	return ThroughputRow{
		Path: "runtime event log, in-process reader (no encoding, no socket)", Subscribers: 1, ExpectedBytes: cfg.bytes,
		LogLimits: logLimits(lim), Seconds: d.Seconds(), ProducerSeconds: d.Seconds(),
		PerSubMBps: Spread{m, m, m}, AggregateMBps: m, ReceivedBytes: sc.z, Complete: b2i(sc.z == cfg.bytes),
		SubsWithMisses: b2i(missed > 0), MissedEvents: missed, MissedReports: reports,
	}, nil
}

type subResult struct {
	z       int64
	events  int64
	missed  uint64
	reports int
	maxGap  time.Duration // longest wait between two data events
	end     time.Time
	err     error
}

// gapTimer tracks the longest interval between data events.
type gapTimer struct {
	last time.Time
	max  time.Duration
}

func (g *gapTimer) tick() {
	now := time.Now()
	if !g.last.IsZero() {
		g.max = max(g.max, now.Sub(g.last))
	}
	g.last = now
}

// consumer is how a subscriber reads its stream.
type consumer int

const (
	// viaClient decodes every event with internal/client and every payload with encoding/json,
	// as a Go program using the client does.
	viaClient consumer = iota
	// framesOnly reads the WebSocket frames and finds the content without decoding JSON: what is
	// left is the gateway's own cost (and the socket's).
	framesOnly
)

// wsRun is one gateway with one terminal session, the subscribers dialled from its current
// sequence, and an in-process watcher that notes when the runtime holds the whole output.
type wsRun struct {
	h       *harness
	id      string
	after   uint64
	ctx     context.Context //nolint:containedctx // the run's deadline, shared by its readers
	cancel  context.CancelFunc
	closers []func()

	pmu  sync.Mutex
	pEnd time.Time
	pwg  sync.WaitGroup
}

func startWSRun(ctx context.Context, cfg config, limits live.LogLimits) (*wsRun, error) {
	h, err := startHarness(ctx, live.Config{IdleTimeout: -1, Log: limits}, cfg)
	if err != nil {
		return nil, err
	}
	s, err := h.openTerminal(ctx)
	if err != nil {
		h.stop()
		return nil, err
	}
	r := &wsRun{h: h, id: s.SessionID}
	r.after, _ = h.reg.LastSeq(ctx, r.id)
	r.ctx, r.cancel = context.WithTimeout(ctx, cfg.timeout)
	return r, nil
}

// stop closes every subscriber, the session and the gateway.
func (r *wsRun) stop(ctx context.Context) {
	r.cancel()
	r.pwg.Wait()
	for _, c := range r.closers {
		c()
	}
	_ = r.h.closeSession(context.WithoutCancel(ctx), r.id)
	r.h.stop()
}

// dial opens one subscriber and returns the function that reads its stream to the end marker.
func (r *wsRun) dial(cfg config, mode consumer) (func() subResult, error) {
	switch mode {
	case framesOnly:
		c, err := dialFrames(r.ctx, r.h.sock, r.id, r.after, cfg.contentType)
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, func() { _ = c.CloseNow() })
		return func() subResult { return consumeFrames(r.ctx, c, cfg.contentType) }, nil
	default:
		c, err := r.h.cl.Dial(r.ctx, r.id, client.DialOptions{After: r.after, ContentType: cfg.contentType})
		if err != nil {
			return nil, err
		}
		r.closers = append(r.closers, func() { _ = c.Abort() })
		return func() subResult { return consume(r.ctx, c) }, nil
	}
}

// send starts the in-process watcher and types the command; it returns when the command was sent.
func (r *wsRun) send(cfg config) (time.Time, error) {
	r.pwg.Add(1)
	go func() {
		defer r.pwg.Done()
		_, _, _, at, err := producerWatch(r.ctx, r.h.reg, r.id, r.after)
		if err == nil {
			r.pmu.Lock()
			r.pEnd = at
			r.pmu.Unlock()
		}
	}()
	start := time.Now()
	return start, r.h.cl.Send(r.ctx, r.id, []byte(outputCommand(cfg.bytes)))
}

// row summarises the subscribers' results.
func (r *wsRun) row(cfg config, label string, start time.Time, results []subResult) (ThroughputRow, error) {
	row := ThroughputRow{Path: label, Subscribers: len(results), ContentType: cfg.contentType, ExpectedBytes: cfg.bytes}
	row.LogLimits = logLimits(r.h.reg.Config().Log)
	r.pwg.Wait()
	if !r.pEnd.IsZero() {
		row.ProducerSeconds = r.pEnd.Sub(start).Seconds()
	}
	var last time.Time
	per := make([]float64, 0, len(results))
	var firstErr error
	for i, res := range results {
		if res.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("subscriber %d: %w", i, res.err)
		}
		if res.end.After(last) {
			last = res.end
		}
		per = append(per, mbps(res.z, res.end.Sub(start)))
		row.ReceivedBytes += res.z
		if res.z == cfg.bytes {
			row.Complete++
		}
		if res.missed > 0 || res.reports > 0 {
			row.SubsWithMisses++
		}
		row.MissedEvents += res.missed
		row.MissedReports += res.reports
		row.MaxGapSeconds = max(row.MaxGapSeconds, res.maxGap.Seconds())
	}
	if firstErr != nil {
		return row, firstErr
	}
	row.DataEvents = results[0].events
	row.Seconds = last.Sub(start).Seconds()
	row.PerSubMBps = spread(per)
	row.AggregateMBps = mbps(row.ReceivedBytes, last.Sub(start))
	return row, nil
}

// throughputWS streams the command's output to subs WebSocket subscribers through the gateway.
func throughputWS(ctx context.Context, cfg config, subs int, limits live.LogLimits, mode consumer, label string) (ThroughputRow, error) {
	r, err := startWSRun(ctx, cfg, limits)
	if err != nil {
		return ThroughputRow{}, err
	}
	defer r.stop(ctx)
	readers := make([]func() subResult, subs)
	for i := range readers {
		if readers[i], err = r.dial(cfg, mode); err != nil {
			return ThroughputRow{}, fmt.Errorf("dial subscriber %d: %w", i, err)
		}
	}
	results := make([]subResult, subs)
	var wg sync.WaitGroup
	for i, read := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = read()
		}()
	}
	start, err := r.send(cfg)
	if err != nil {
		r.cancel()
		wg.Wait()
		return ThroughputRow{}, err
	}
	wg.Wait()
	return r.row(cfg, label, start, results)
}

// throughputStalled is the stalled-follower row: two WebSocket subscribers with the default log,
// one read through internal/client as in the ws-1 row and one that reads nothing until the first
// has seen the end marker. Flow control waits at most MaxStall for the stalled one, then leaves
// it behind; the row reports the reading subscriber's rate and longest pause, and what the
// stalled one got when it resumed (EVENTS_MISSED, or a closed connection).
func throughputStalled(ctx context.Context, cfg config, label string) (ThroughputRow, error) {
	r, err := startWSRun(ctx, cfg, live.LogLimits{})
	if err != nil {
		return ThroughputRow{}, err
	}
	defer r.stop(ctx)
	stalled, err := dialFrames(r.ctx, r.h.sock, r.id, r.after, cfg.contentType)
	if err != nil {
		return ThroughputRow{}, fmt.Errorf("dial the stalled subscriber: %w", err)
	}
	r.closers = append(r.closers, func() { _ = stalled.CloseNow() })
	read, err := r.dial(cfg, viaClient)
	if err != nil {
		return ThroughputRow{}, fmt.Errorf("dial the reading subscriber: %w", err)
	}
	done := make(chan subResult, 1)
	go func() { done <- read() }()
	start, err := r.send(cfg)
	if err != nil {
		r.cancel()
		<-done
		return ThroughputRow{}, err
	}
	res := <-done
	row, err := r.row(cfg, label, start, []subResult{res})
	if err != nil {
		return row, err
	}
	// Only now does the stalled subscriber read: what the gateway had buffered in its socket,
	// then an EVENTS_MISSED for the range the ring dropped, then the rest.
	st := &StalledResult{PausedSeconds: time.Since(start).Seconds()}
	sres := consumeFrames(r.ctx, stalled, cfg.contentType)
	st.ReceivedBytes, st.MissedEvents, st.MissedReports = sres.z, sres.missed, sres.reports
	if sres.err != nil {
		st.Error = sres.err.Error()
		st.Cut = websocket.CloseStatus(sres.err) != -1 || errors.Is(sres.err, io.EOF)
		if !st.Cut {
			return row, fmt.Errorf("stalled subscriber: %w", sres.err)
		}
	} else {
		st.DrainedSeconds = sres.end.Sub(start).Seconds()
	}
	row.Stalled = st
	return row, nil
}

// consume reads one subscriber's stream until the end marker, as a client program would: every
// event decoded by internal/client, every data payload decoded, its bytes counted.
func consume(ctx context.Context, c *client.Conn) (r subResult) {
	sc := newScanner(doneMarker)
	var gap gapTimer
	defer func() { r.z, r.maxGap = sc.z, gap.max }()
	for !sc.found {
		e, err := c.Next(ctx)
		if err != nil {
			r.err = err
			return r
		}
		switch e.Event {
		case abi.EventData:
			var out abi.TerminalOutput
			if err := json.Unmarshal(e.Payload, &out); err != nil {
				r.err = fmt.Errorf("decode data payload: %w", err)
				return r
			}
			r.events++
			gap.tick()
			if out.ContentType == abi.ContentRaw {
				b, err := out.Bytes()
				if err != nil {
					r.err = err
					return r
				}
				sc.feed(b)
			} else {
				sc.feedString(out.Content)
			}
		case abi.EventError:
			var ep struct {
				Error struct {
					Code    abi.Code `json:"code"`
					Details struct {
						Missed uint64 `json:"missed"`
					} `json:"details"`
				} `json:"error"`
			}
			if json.Unmarshal(e.Payload, &ep) == nil && ep.Error.Code == abi.CodeEventsMissed {
				r.missed += ep.Error.Details.Missed
				r.reports++
			}
		case abi.EventClose:
			r.err = errors.New("session closed before the end marker")
			return r
		}
	}
	r.end = time.Now()
	return r
}

// dialFrames opens the same stream as client.Dial, with the WebSocket library directly.
func dialFrames(ctx context.Context, sock, id string, after uint64, ct abi.ContentType) (*websocket.Conn, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	q := url.Values{"after": {fmt.Sprint(after)}, "contentType": {string(ct)}}
	u := "ws://nexus" + abi.APIPrefix + "/sessions/" + url.PathEscape(id) + "/stream?" + q.Encode()
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(64 << 20)
	return c, nil
}

var (
	dataPrefix  = []byte(`{"event":"data"`)
	errorPrefix = []byte(`{"event":"error"`)
	closePrefix = []byte(`{"event":"close"`)
	contentKey  = []byte(`"content":"`)
)

// consumeFrames reads frames into one reused buffer and counts the content of data events
// without decoding the JSON (it relies on the gateway's field order: event first, content a
// JSON string without escaped quotes, which holds for this output).
func consumeFrames(ctx context.Context, c *websocket.Conn, ct abi.ContentType) (r subResult) {
	sc := newScanner(doneMarker)
	var gap gapTimer
	defer func() { r.z, r.maxGap = sc.z, gap.max }()
	var buf bytes.Buffer
	var dec []byte
	for !sc.found {
		_, rd, err := c.Reader(ctx)
		if err != nil {
			r.err = err
			return r
		}
		buf.Reset()
		if _, err := buf.ReadFrom(rd); err != nil {
			r.err = err
			return r
		}
		frame := buf.Bytes()
		switch {
		case bytes.HasPrefix(frame, dataPrefix):
			i := bytes.Index(frame, contentKey)
			if i < 0 {
				r.err = errors.New("data event without content")
				return r
			}
			content := frame[i+len(contentKey):]
			content = content[:bytes.IndexByte(content, '"')]
			r.events++
			gap.tick()
			if ct == abi.ContentRaw {
				dec = dec[:0]
				dec, err = base64.StdEncoding.AppendDecode(dec, content)
				if err != nil {
					r.err = err
					return r
				}
				content = dec
			}
			sc.feed(content)
		case bytes.HasPrefix(frame, errorPrefix):
			var ev abi.Event
			if json.Unmarshal(frame, &ev) == nil {
				var ep struct {
					Error struct {
						Code    abi.Code `json:"code"`
						Details struct {
							Missed uint64 `json:"missed"`
						} `json:"details"`
					} `json:"error"`
				}
				if json.Unmarshal(ev.Payload, &ep) == nil && ep.Error.Code == abi.CodeEventsMissed {
					r.missed += ep.Error.Details.Missed
					r.reports++
				}
			}
		case bytes.HasPrefix(frame, closePrefix):
			r.err = errors.New("session closed before the end marker")
			return r
		}
	}
	r.end = time.Now()
	return r
}

// describe says in one line what the stalled subscriber got.
func (s *StalledResult) describe(expected int64) string {
	got := fmt.Sprintf("received %.1f%% after reading nothing for %.2fs", 100*float64(s.ReceivedBytes)/float64(expected), s.PausedSeconds)
	switch {
	case s.Cut:
		return "the stalled subscriber was disconnected (" + s.Error + "); it had " + got
	case s.MissedReports > 0:
		return fmt.Sprintf("the stalled subscriber %s, with %d EVENTS_MISSED report(s) totalling %d events, and saw the end marker at %.2fs",
			got, s.MissedReports, s.MissedEvents, s.DrainedSeconds)
	default:
		return fmt.Sprintf("the stalled subscriber %s and missed nothing (flow control did not leave it behind)", got)
	}
}
