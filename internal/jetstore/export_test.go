package jetstore

// StopAfterStore makes q store an interrupt and not clear what it clears, as a node that
// died in between.
func (q *Queues) StopAfterStore() { q.stopAfterStore = true }
