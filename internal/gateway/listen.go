package gateway

import (
	"context"
	"net"
	"sync"
)

// DefaultMaxUnauthenticated is how many connections one peer address may hold on the TCP
// listener before one of its requests has passed authentication.
const DefaultMaxUnauthenticated = 32

// connKey carries the accepted connection in a request's context, so auth can mark it.
type connKey struct{}

// connContext is http.Server.ConnContext for a guarded listener.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// guardedListener bounds the connections a peer holds without having authenticated: beyond
// the limit, new connections from that address are closed as soon as they are accepted. A
// connection stops counting once a request on it passes auth, or when it closes.
type guardedListener struct {
	net.Listener
	max int

	mu      sync.Mutex
	pending map[string]int
}

func guard(l net.Listener, max int) *guardedListener {
	if max <= 0 {
		max = DefaultMaxUnauthenticated
	}
	return &guardedListener{Listener: l, max: max, pending: map[string]int{}}
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
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.pending[peer]++
		l.mu.Unlock()
		return &guardedConn{Conn: c, l: l, peer: peer}, nil
	}
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
