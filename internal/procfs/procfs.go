// Package procfs reads process identities from Linux's /proc: enough to find every process of a
// terminal session (including background jobs in their own process groups) and to check that
// none is left after a close.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Proc is what /proc/PID/stat says of one process.
type Proc struct {
	PID, PPID, PGID, SID int
	// TPGID is the foreground process group of the process's controlling terminal.
	TPGID int
	// State is the one-letter state: R, S, D, T, Z (zombie), X (dead), ...
	State byte
	Comm  string
	// Start is when the process started, in clock ticks since boot: with PID it names one
	// process for good, since a PID is reused but never with the same start time.
	Start uint64
}

// Dead reports whether the process has exited (a zombie waiting for its parent, or gone).
func (p Proc) Dead() bool { return p.State == 'Z' || p.State == 'X' }

// Stat reads one process.
func Stat(pid int) (Proc, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	return parse(pid, b)
}

func parse(pid int, b []byte) (Proc, error) {
	// "pid (comm) state ppid pgrp session tty_nr tpgid ..."; comm may hold spaces and
	// parentheses, so the fields resume after the last ')'.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Proc{}, fmt.Errorf("malformed stat of %d", pid)
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 6 || len(f[0]) == 0 {
		return Proc{}, fmt.Errorf("malformed stat of %d", pid)
	}
	p := Proc{PID: pid, Comm: string(b[open+1 : end]), State: f[0][0]}
	p.PPID, _ = strconv.Atoi(string(f[1]))
	p.PGID, _ = strconv.Atoi(string(f[2]))
	p.SID, _ = strconv.Atoi(string(f[3]))
	p.TPGID, _ = strconv.Atoi(string(f[5]))
	if len(f) > 19 {
		p.Start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	}
	return p, nil
}

// BootID identifies the running kernel boot: process ids and start times mean nothing across
// a reboot.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// All lists every process that could be read (processes exit while we look: they are skipped).
func All() []Proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]Proc, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := Stat(pid); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Session lists the live (not dead) processes whose session id is sid.
func Session(sid int) []Proc {
	var out []Proc
	for _, p := range Members(sid) {
		if !p.Dead() {
			out = append(out, p)
		}
	}
	return out
}

// Members lists every process whose session id is sid, zombies included.
func Members(sid int) []Proc {
	var out []Proc
	for _, p := range All() {
		if p.SID == sid {
			out = append(out, p)
		}
	}
	return out
}
