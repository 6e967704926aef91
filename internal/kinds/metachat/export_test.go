package metachat

// Watching says whether the watcher of the registry's sessions runs.
func (k *Kind) Watching() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stopWatch != nil
}
