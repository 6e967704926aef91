package reaper

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/procfs"
)

// scanner waits for process sessions to empty with one walk of /proc per tick for all of them:
// a walk per waiting session would cost N closes N walks each tick, which is what made closing
// hundreds of sessions at once take longer than any grace period.
type scanner struct {
	mu      sync.Mutex
	waiters map[sessionKey][]chan struct{}
	running bool
	done    chan struct{}
}

type sessionKey struct {
	sid   int
	start uint64
}

func newScanner() *scanner {
	return &scanner{waiters: map[sessionKey][]chan struct{}{}, done: make(chan struct{})}
}

// scanEvery is the pause between walks of /proc while someone waits.
const scanEvery = 10 * time.Millisecond

func (s *scanner) wait(ctx context.Context, sid int, start uint64) error {
	k := sessionKey{sid, start}
	if len(sessionMembers(procfs.All(), sid, start)) == 0 {
		return nil
	}
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiters[k] = append(s.waiters[k], ch)
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		ws := s.waiters[k]
		for i, c := range ws {
			if c == ch {
				s.waiters[k] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(s.waiters[k]) == 0 {
			delete(s.waiters, k)
		}
		s.mu.Unlock()
		return fmt.Errorf("wait for process session %d to end: %w", sid, ctx.Err())
	}
}

func (s *scanner) run() {
	t := time.NewTicker(scanEvery)
	defer t.Stop()
	for {
		idx := indexSessions(procfs.All())
		s.mu.Lock()
		for k, ws := range s.waiters {
			if !idx.live(k) {
				for _, c := range ws {
					close(c)
				}
				delete(s.waiters, k)
			}
		}
		if len(s.waiters) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		select {
		case <-t.C:
		case <-s.done:
			return
		}
	}
}

func (s *scanner) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
	default:
		close(s.done)
	}
}

// sessionIndex answers "does this session still have a live process?" for many sessions from
// one walk of /proc.
type sessionIndex struct {
	members map[int]int    // live processes per session id
	starts  map[int]uint64 // start time per pid
}

func indexSessions(all []procfs.Proc) sessionIndex {
	idx := sessionIndex{members: make(map[int]int, len(all)), starts: make(map[int]uint64, len(all))}
	for _, p := range all {
		idx.starts[p.PID] = p.Start
		if !p.Dead() {
			idx.members[p.SID]++
		}
	}
	return idx
}

func (x sessionIndex) live(k sessionKey) bool {
	if st, ok := x.starts[k.sid]; ok && k.start != 0 && st != k.start {
		return false // the leader's pid now names another process, so the session is gone
	}
	return x.members[k.sid] > 0
}
