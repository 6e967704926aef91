package jetstore

// StopAfterStore makes q store an interrupt and not clear what it clears, as a node that
// died in between.
func (q *Queues) StopAfterStore() { q.stopAfterStore = true }

// Indexed is how many messages q's local copy holds, and of how many conversations.
func (q *Queues) Indexed() (messages, conversations int) {
	q.idx.mu.Lock()
	defer q.idx.mu.Unlock()
	return len(q.idx.byID), len(q.idx.keys)
}
