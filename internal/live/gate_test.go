package live_test

import (
	"context"
	"testing"

	"github.com/nexus-run/nexus/internal/live"
)

// TestGate: an interrupt and a pause close the gate; Resume ends an interrupt but not a pause
// (and says so); the registry's resume ends both; Wait returns false when its context ends
// while closed, and Opened's channel is closed when the gate opens.
func TestGate(t *testing.T) {
	var g live.Gate
	ctx := context.Background()
	if !g.Wait(ctx) || g.Opened() != nil {
		t.Fatal("the zero gate is not open")
	}
	g.Interrupt()
	ch := g.Opened()
	if ch == nil {
		t.Fatal("open after an interrupt")
	}
	g.SetPaused(true)
	if g.Resume() {
		t.Fatal("Resume says delivering while paused")
	}
	if g.Opened() == nil {
		t.Fatal("open while paused")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if g.Wait(cctx) {
		t.Fatal("Wait went through a closed gate")
	}
	g.Interrupt()
	g.SetPaused(false) // the registry's resume ends the interrupt too
	select {
	case <-ch:
	default:
		t.Fatal("Opened's channel not closed when the gate opened")
	}
	if !g.Wait(ctx) {
		t.Fatal("closed after the registry's resume")
	}
	g.Interrupt()
	if !g.Resume() || g.Opened() != nil {
		t.Fatal("Resume did not open an interrupted gate")
	}
}
