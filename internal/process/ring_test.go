package process

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestRingHeldCursor: the capture waits for a cursor too far behind. One that is not held is
// let go after maxStall without progress; one that is held (its session is at work, under a
// flow control of its own) is waited for without a clock, and gets its maxStall only once it
// is let go. In a synctest bubble: virtual time.
func TestRingHeldCursor(t *testing.T) {
	const maxStall = time.Second
	synctest.Test(t, func(t *testing.T) {
		r := newRing(8, maxStall) // half a ring: 4 lines
		held, idle := r.cursor(0), r.cursor(0)
		held.Hold(true)
		done := make(chan struct{})
		go func() { // the capture
			defer close(done)
			for range 20 {
				r.waitRoom()
				r.add(StreamStdout, "x", 2, time.Now())
			}
		}()
		state := func() (next uint64, heldGone, idleGone bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.next, held.released, idle.released
		}
		synctest.Wait()
		if next, _, _ := state(); next != 6 {
			t.Fatalf("the capture added %d lines before waiting, want 5", next-1)
		}
		time.Sleep(maxStall - time.Millisecond)
		synctest.Wait()
		if _, h, i := state(); h || i {
			t.Fatalf("released before maxStall: held %v, idle %v", h, i)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if next, h, i := state(); !i || h || next != 6 {
			t.Fatalf("an hour on: idle released %v (want it), held released %v, %d lines (want the capture still waiting at 5)", i, h, next-1)
		}
		held.Hold(false)
		time.Sleep(maxStall - time.Millisecond)
		synctest.Wait()
		if _, h, _ := state(); h {
			t.Fatal("a cursor let go was released before its own maxStall")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		<-done
		if next, h, _ := state(); !h || next != 21 {
			t.Fatalf("held released %v, %d lines", h, next-1)
		}
	})
}
