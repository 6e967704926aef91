package testkit

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from Addr to a server, for a test that cuts a client off
// from it (a node of a cluster from its NATS server) and lets it back: Cut closes every
// connection and refuses new ones (the listener goes), Restore listens again on Addr.
type Proxy struct {
	Addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// StartProxy listens on a free loopback address and forwards what it accepts to target,
// until the test ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p := &Proxy{Addr: FreeAddr(tb), target: target}
	p.Restore(tb)
	tb.Cleanup(p.Cut)
	return p
}

// Restore listens on Addr again (after Cut) and forwards new connections.
func (p *Proxy) Restore(tb testing.TB) {
	tb.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", p.Addr)
	if err != nil {
		tb.Fatalf("proxy: listen on %s: %v", p.Addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // cut meanwhile
				p.mu.Unlock()
				_ = c.Close()
				_ = s.Close()
				return
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go pipe(c, s)
			go pipe(s, c)
		}
	}()
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// Cut closes every forwarded connection and stops listening: the client sees its connection
// drop and every reconnection refused until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
