package terminal

import (
	"syscall"

	"github.com/nexus-run/nexus/internal/procfs"
)

// signalSession sends sig to every live process of the session sid (the shell and everything it
// started, including background jobs that job control moved to their own process groups; zombies
// are dead already) and reports how many it found.
func signalSession(sid int, sig syscall.Signal) int {
	members := procfs.Session(sid)
	for _, p := range members {
		_ = syscall.Kill(p.PID, sig)
	}
	_ = syscall.Kill(-sid, sig)
	return len(members)
}

// sessionMembers counts the live processes of session sid.
func sessionMembers(sid int) int { return len(procfs.Session(sid)) }
