package live

import (
	"context"
	"sync"
)

// Gate holds back the delivery of an observer session (a debug, network or meta-chat stream),
// whose interrupt stops its updates while the session stays open: closed by Interrupt or by
// the registry's pause, opened by Resume (the Resumer seam) or by the registry's resume. The
// zero Gate is open.
type Gate struct {
	mu          sync.Mutex
	interrupted bool
	paused      bool
	opened      chan struct{} // non-nil while closed; closed when the gate opens
}

func (g *Gate) setLocked(interrupted, paused bool) {
	wasOpen := !g.interrupted && !g.paused
	g.interrupted, g.paused = interrupted, paused
	isOpen := !interrupted && !paused
	switch {
	case wasOpen && !isOpen:
		g.opened = make(chan struct{})
	case !wasOpen && isOpen:
		close(g.opened)
		g.opened = nil
	}
}

// Interrupt stops the delivery until Resume.
func (g *Gate) Interrupt() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setLocked(true, g.paused)
}

// Resume ends an interrupt; it reports whether delivery goes on (not while paused).
func (g *Gate) Resume() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setLocked(false, g.paused)
	return !g.paused
}

// SetPaused follows the registry's pause; its resume also ends an interrupt.
func (g *Gate) SetPaused(paused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	interrupted := g.interrupted
	if !paused {
		interrupted = false
	}
	g.setLocked(interrupted, paused)
}

// Opened is nil while the gate is open, else a channel closed when it opens.
func (g *Gate) Opened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opened
}

// Wait blocks while the gate is closed; false when ctx ends first.
func (g *Gate) Wait(ctx context.Context) bool {
	for {
		ch := g.Opened()
		if ch == nil {
			return ctx.Err() == nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
