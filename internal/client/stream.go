package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
)

// Conn is one WebSocket connection to a session's stream. Use Stream for a resilient reader.
type Conn struct {
	ws *websocket.Conn
}

// DialOptions choose where a stream starts and how output is rendered.
type DialOptions struct {
	After       uint64
	ContentType abi.ContentType
	// Hold makes this connection an owner of the session: an ephemeral session closes when its
	// last owner disconnects.
	Hold bool
}

// Dial opens a WebSocket stream of a session's events.
func (c *Client) Dial(ctx context.Context, id string, o DialOptions) (*Conn, error) {
	q := url.Values{"after": {strconv.FormatUint(o.After, 10)}}
	if o.ContentType != "" {
		q.Set("contentType", string(o.ContentType))
	}
	if o.Hold {
		q.Set("hold", "1")
	}
	u := strings.Replace(c.base, "http", "ws", 1) + abi.APIPrefix + sessionPath(id, "/stream?"+q.Encode())
	h := http.Header{}
	if c.target.Token != "" {
		h.Set("Authorization", "Bearer "+c.target.Token)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if resp != nil && resp.Body != nil {
		defer func() { _ = resp.Body.Close() }()
	}
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			var er abi.ControlResponse
			if json.NewDecoder(resp.Body).Decode(&er) == nil && er.Status == abi.ResponseError {
				return nil, abi.FromResponse(er)
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if resp != nil {
			// Something answered HTTP but would not upgrade (a proxy, say): WebSocket is not
			// available on this path, which is what hybrid falls back on.
			return nil, fmt.Errorf("%w: %s: %w", ErrUpgradeRefused, resp.Status, c.connectionLost(err))
		}
		return nil, c.connectionLost(err)
	}
	ws.SetReadLimit(64 << 20)
	return &Conn{ws: ws}, nil
}

// ErrUpgradeRefused is returned by Dial when the server answered but refused the WebSocket upgrade.
var ErrUpgradeRefused = errors.New("websocket upgrade refused")

// ErrStreamEnded is returned by Next after the server ended the stream because the session closed.
var ErrStreamEnded = errors.New("stream ended: session closed")

// Next returns the next event.
func (c *Conn) Next(ctx context.Context) (abi.Event, error) {
	_, data, err := c.ws.Read(ctx)
	if err != nil {
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			return abi.Event{}, ErrStreamEnded
		}
		return abi.Event{}, fmt.Errorf("read stream: %w", err)
	}
	var e abi.Event
	if err := json.Unmarshal(data, &e); err != nil {
		return abi.Event{}, fmt.Errorf("decode event: %w", err)
	}
	return e, nil
}

// Send writes input to the session over the stream.
func (c *Conn) Send(ctx context.Context, data []byte) error {
	r := sendRequest(data)
	return c.write(ctx, abi.ClientMessage{Op: "send", Data: r.Data, Encoding: r.Encoding})
}

// Resize sets the session's window size over the stream.
func (c *Conn) Resize(ctx context.Context, width, height int) error {
	return c.write(ctx, abi.ClientMessage{Op: "resize", Width: width, Height: height})
}

func (c *Conn) write(ctx context.Context, m abi.ClientMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write stream: %w", err)
	}
	return nil
}

// Close closes the connection normally.
func (c *Conn) Close() error { return c.ws.Close(websocket.StatusNormalClosure, "") }

// Abort drops the connection without a close handshake (tests use it to simulate a cut).
func (c *Conn) Abort() error { return c.ws.CloseNow() }

// StreamOptions configure Stream.
type StreamOptions struct {
	After       uint64
	Limit       int // stop after this many events; 0 means no limit
	Follow      bool
	Transport   abi.Transport // websocket (default), polling or hybrid
	ContentType abi.ContentType
	// PollWait is the long-poll wait (default 25s); PollInterval the pause between empty polls
	// when the gateway answers at once (default 0: rely on the long-poll).
	PollWait time.Duration
	// MaxBackoff caps the reconnect delay (default 5s); GiveUpAfter ends a run of failed
	// reconnects (default 2m).
	MaxBackoff  time.Duration
	GiveUpAfter time.Duration
	// OnReconnect, if set, is told about each reconnect attempt.
	OnReconnect func(attempt int, delay time.Duration, err error)
	// Dialed, if set, receives each new WebSocket connection: a caller sends input on it
	// (attach), tests cut it.
	Dialed func(*Conn)
	// Hold makes each WebSocket connection an owner of the session (see DialOptions.Hold).
	Hold bool
}

// Stream delivers a session's events to fn in order, starting after opt.After. It reconnects
// with exponential backoff and jitter when the connection drops and resumes after the last
// sequence it delivered, so fn sees no gap and no duplicate. Without Follow it returns once the
// retained events are delivered; with Follow it returns when the session closes, ctx ends, or fn
// returns an error.
func (c *Client) Stream(ctx context.Context, id string, opt StreamOptions, fn func(abi.Event) error) error {
	if opt.Transport == "" {
		opt.Transport = abi.TransportWebSocket
	}
	if opt.PollWait <= 0 {
		opt.PollWait = 25 * time.Second
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 5 * time.Second
	}
	if opt.GiveUpAfter <= 0 {
		opt.GiveUpAfter = 2 * time.Minute
	}
	st := &streamState{after: opt.After, limit: opt.Limit, fn: fn}
	if !opt.Follow {
		return unwrapCallback(c.pollOnce(ctx, id, opt, st))
	}
	mode := opt.Transport
	attempt := 0
	var failingSince time.Time
	for {
		var err error
		delivered := st.count
		switch mode {
		case abi.TransportPolling:
			err = c.pollLoop(ctx, id, opt, st)
		default:
			err = c.wsLoop(ctx, id, opt, st)
			if mode == abi.TransportHybrid && errors.Is(err, ErrUpgradeRefused) {
				mode = abi.TransportPolling // WebSocket unavailable here: fall back to polling
				continue
			}
		}
		if err == nil || errors.Is(err, errDone) {
			return nil
		}
		var ce callbackError
		if errors.As(err, &ce) {
			return ce.err // fn's own error ends the stream; it is not a dropped connection
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !retriable(err) {
			return err
		}
		if st.count > delivered {
			attempt, failingSince = 0, time.Time{}
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		} else if time.Since(failingSince) > opt.GiveUpAfter {
			return fmt.Errorf("gave up reconnecting after %s: %w", opt.GiveUpAfter, err)
		}
		delay := backoff(attempt, opt.MaxBackoff)
		attempt++
		if opt.OnReconnect != nil {
			opt.OnReconnect(attempt, delay, err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// backoff is exponential from 50ms with full jitter, capped.
func backoff(attempt int, maxDelay time.Duration) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 16)
	if d > maxDelay || d <= 0 {
		d = maxDelay
	}
	return d/2 + rand.N(d/2+1) //nolint:gosec // jitter needs no cryptographic randomness
}

var (
	errDone = errors.New("stream done")
)

func retriable(err error) bool {
	var e *abi.Error
	if errors.As(err, &e) {
		return e.Code.Retriable()
	}
	return true // transport errors: the connection dropped
}

// callbackError marks an error returned by Stream's fn, so it is returned rather than retried.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }
func (e callbackError) Unwrap() error { return e.err }

func unwrapCallback(err error) error {
	var ce callbackError
	if errors.As(err, &ce) {
		return ce.err
	}
	return err
}

type streamState struct {
	after uint64
	count int
	limit int
	fn    func(abi.Event) error
}

// deliver passes e to fn unless it was already delivered; it returns errDone at the limit.
func (s *streamState) deliver(e abi.Event) error {
	if e.Seq != 0 && e.Seq <= s.after {
		return nil // a resumed connection may repeat what we already have
	}
	if err := s.fn(e); err != nil {
		return callbackError{err}
	}
	if e.Seq != 0 {
		s.after = e.Seq
	}
	s.count++
	if s.limit > 0 && s.count >= s.limit {
		return errDone
	}
	if e.Event == abi.EventClose {
		return errDone
	}
	return nil
}

func (c *Client) wsLoop(ctx context.Context, id string, opt StreamOptions, st *streamState) error {
	conn, err := c.Dial(ctx, id, DialOptions{After: st.after, ContentType: opt.ContentType, Hold: opt.Hold})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Abort() }()
	if opt.Dialed != nil {
		opt.Dialed(conn)
	}
	for {
		e, err := conn.Next(ctx)
		if err != nil {
			if errors.Is(err, ErrStreamEnded) {
				return errDone
			}
			return err
		}
		if err := st.deliver(e); err != nil {
			return err
		}
	}
}

// pollBatch bounds the events of one long-poll answer in a following stream.
const pollBatch = 512

func (c *Client) pollLoop(ctx context.Context, id string, opt StreamOptions, st *streamState) error {
	for {
		// Bounded batches: a dropped connection then costs one batch, and a large backlog cannot
		// make every poll fail on a flaky link (which would never advance st.after).
		resp, err := c.Poll(ctx, id, st.after, pollBatch, opt.PollWait, opt.ContentType)
		if err != nil {
			return err
		}
		for _, e := range resp.Events {
			if err := st.deliver(e); err != nil {
				return err
			}
		}
		st.after = max(st.after, resp.Next)
		if resp.Closed {
			return errDone
		}
	}
}

func (c *Client) pollOnce(ctx context.Context, id string, opt StreamOptions, st *streamState) error {
	resp, err := c.Poll(ctx, id, st.after, opt.Limit, 0, opt.ContentType)
	if err != nil {
		return err
	}
	for _, e := range resp.Events {
		if err := st.deliver(e); err != nil {
			if errors.Is(err, errDone) {
				return nil
			}
			return err
		}
	}
	return nil
}
