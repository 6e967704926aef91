package netstream

// Pollers is how many shared pollers run (one per server and interval with a session on it).
func (k *Kind) Pollers() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pollers)
}
