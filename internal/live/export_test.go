package live

// Hooks for live_test's flow-control tests: whether output is waiting for a follower, and
// whether a follower has been left behind.

// FlowWaiting reports whether the output of f's session is waiting for a follower.
func FlowWaiting(f Follower) bool { return f.(*follower).flow.waiting.Load() }

// FlowReleased reports whether f was left behind after MaxStall.
func FlowReleased(f Follower) bool { return f.(*follower).released.Load() }

// HeldEventLogs counts the event logs whose events a disk store holds in memory: the open
// ones, and the finished one it keeps from its last read (0 or 1).
func HeldEventLogs(s *DiskStore) (open, recent int) { return s.heldLogs() }

// DecodedLogs is how many times a disk store decoded a log from its files.
func DecodedLogs(s *DiskStore) int { return s.decodedLogs() }
