package jetstore

import "time"

// StopAfterStore makes q store an interrupt and not clear what it clears, as a node that
// died in between.
func (q *Queues) StopAfterStore() { q.stopAfterStore = true }

// Indexed is how many messages q's local copy holds, and of how many conversations.
func (q *Queues) Indexed() (messages, conversations int) {
	q.idx.mu.Lock()
	defer q.idx.mu.Unlock()
	return len(q.idx.byID), len(q.idx.keys)
}

// StallFollower stops l's consumer, as one that stopped delivering, and has a wait for it
// give up after stall.
func (l *Log) StallFollower(stall time.Duration) {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	l.cc.Stop()
	l.stall = stall
}
