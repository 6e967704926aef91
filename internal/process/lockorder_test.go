package process

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// TestEndedLockOrder: a run's end must not wait for the manager's lock while it holds its
// own: a save holds the manager's lock and reads every process under theirs, so the two waited
// for each other (nexus process logs hung under parallel tests). The clock a run's end reads
// under its own lock starts a save and returns once the save holds the manager's lock.
func TestEndedLockOrder(t *testing.T) {
	var m *Manager
	saving := make(chan struct{})
	now := func() time.Time {
		if saving != nil {
			s := saving
			saving = nil // only the first reading, in ended
			go func() { m.save(); close(s) }()
			for m.mu.TryLock() { // the save has not taken it yet
				m.mu.Unlock()
				runtime.Gosched()
			}
		}
		return time.Now()
	}
	m, err := Open(t.TempDir(), Options{Now: now, Backoff: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{m: m, info: Info{ID: "p", ProcessSpec: Spec{Command: []string{"false"}, Restart: RestartOnFailure}, Status: StatusRunning},
		ring: newRing(1<<10, 0)}
	m.procs["p"] = p
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.ended(errors.New("exit status 1"))
	}()
	select {
	case <-done:
	case <-time.After(testkit.Patience()):
		t.Fatal("a run's end and a save wait for each other: lock order inversion")
	}
	p.stop(t.Context(), StatusStopped) // the restart it scheduled
}
