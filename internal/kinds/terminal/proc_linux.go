package terminal

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sessionMembers lists the pids whose session id is sid: the shell and everything it started,
// including background jobs that job control moved to their own process groups.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses; fields resume after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		// state ppid pgrp session ...
		if len(f) < 4 {
			continue
		}
		// A zombie is dead: it holds nothing and cannot be signalled; it waits for its parent
		// (init, once the shell is gone) to reap it.
		if f[0][0] == 'Z' || f[0][0] == 'X' {
			continue
		}
		if s, err := strconv.Atoi(string(f[3])); err == nil && s == sid {
			out = append(out, pid)
		}
	}
	return out
}

// signalSession sends sig to every process of the session sid; it reports how many were found.
func signalSession(sid int, sig syscall.Signal) int {
	pids := sessionMembers(sid)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	_ = syscall.Kill(-sid, sig)
	return len(pids)
}
