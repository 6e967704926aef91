package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// DefaultMaxUnauthenticated is how many connections one peer address may hold on the TCP
// listener before one of its requests has passed authentication.
const DefaultMaxUnauthenticated = 32

// Refusing a connection over the cap: it is answered, not dropped, within bounds of its own.
const (
	// maxRefusing bounds the connections being refused at once (a goroutine and a small buffer
	// each); past it, a connection over the cap is closed without an answer.
	maxRefusing = 1024
	// refuseWait bounds how long a refused connection has to send its request's headers, and
	// then to take the answer; a connection that sends nothing is closed after it.
	refuseWait = 5 * time.Second
	// refuseRead bounds what is read of a refused connection: its headers, and the body it
	// may have sent after them (read and dropped so that closing does not reset the
	// connection before the answer has been read).
	refuseRead = 64 << 10
	refuseBody = abi.MaxRequestBody
	// RetryAfter is what a refused request is told to wait, in seconds.
	RetryAfter = 1
)

// connKey carries the accepted connection in a request's context, so auth can mark it.
type connKey struct{}

// connContext is http.Server.ConnContext for a guarded listener.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// guardedListener bounds the connections a peer holds without having authenticated: beyond
// the limit, a new connection from that address is not served; its request is answered with
// 429 LIMIT_EXCEEDED and Retry-After, and the connection closed (refuse). A connection stops
// counting once a request on it passes auth, or when it closes.
type guardedListener struct {
	net.Listener
	max int

	mu      sync.Mutex
	pending map[string]int

	refusing chan struct{} // a slot per connection being refused
	wg       sync.WaitGroup
	refused  map[net.Conn]struct{} // being refused, under mu
	closed   bool                  // under mu
}

func guard(l net.Listener, max int) *guardedListener {
	if max <= 0 {
		max = DefaultMaxUnauthenticated
	}
	return &guardedListener{Listener: l, max: max, pending: map[string]int{}, refusing: make(chan struct{}, maxRefusing),
		refused: map[net.Conn]struct{}{}}
}

// Close implements net.Listener: the refusals under way end at once (their deadlines pass),
// and Close returns once they have.
func (l *guardedListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.refused {
		_ = c.SetDeadline(time.Unix(1, 0))
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err //nolint:wrapcheck // net/http inspects the listener's own errors
}

// Accept implements net.Listener.
func (l *guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err //nolint:wrapcheck // net/http inspects the listener's own errors
		}
		peer := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(peer); err == nil {
			peer = h
		}
		l.mu.Lock()
		if l.pending[peer] >= l.max {
			select {
			case l.refusing <- struct{}{}:
				if l.closed {
					<-l.refusing
					_ = c.Close()
					break
				}
				l.refused[c] = struct{}{}
				l.wg.Add(1)
				go func() {
					defer l.refusedDone(c)
					refuse(c, peer, l.max)
				}()
			default: // refusing too many already: no answer
				_ = c.Close()
			}
			l.mu.Unlock()
			continue
		}
		l.pending[peer]++
		l.mu.Unlock()
		return &guardedConn{Conn: c, l: l, peer: peer}, nil
	}
}

func (l *guardedListener) refusedDone(c net.Conn) {
	l.mu.Lock()
	delete(l.refused, c)
	l.mu.Unlock()
	<-l.refusing
	l.wg.Done()
}

func (l *guardedListener) release(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[peer]--; l.pending[peer] <= 0 {
		delete(l.pending, peer)
	}
}

// Pending is the number of unauthenticated connections peer holds.
func (l *guardedListener) Pending(peer string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending[peer]
}

type guardedConn struct {
	net.Conn
	l    *guardedListener
	peer string
	once sync.Once
}

func (c *guardedConn) authenticated() { c.once.Do(func() { c.l.release(c.peer) }) }

// Close implements net.Conn.
func (c *guardedConn) Close() error {
	c.authenticated()
	return c.Conn.Close() //nolint:wrapcheck // net/http's own connection
}

// refuse answers the request of a connection over its peer's cap with 429 LIMIT_EXCEEDED and
// Retry-After, then closes it. Its headers are read first and what follows them (a body) is
// drained after the answer, within bounds, so that the client reads the answer rather than a
// reset; a connection that sends no request within refuseWait is closed without one.
func refuse(c net.Conn, peer string, max int) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(refuseWait))
	br := bufio.NewReader(io.LimitReader(c, refuseRead))
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = req.Body.Close()
	e := abi.Errorf(abi.CodeLimitExceeded, "", "%s holds %d connections that have not authenticated, the most one address may: retry in %ds, or reuse a connection that has", peer, max, RetryAfter)
	body, _ := json.Marshal(abi.ErrorResponse(e, time.Now()))
	body = append(body, '\n')
	if _, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nRetry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		http.StatusTooManyRequests, http.StatusText(http.StatusTooManyRequests), RetryAfter, len(body), body); err != nil {
		return
	}
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, refuseBody))
}
