package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/procfs"
)

// Group is the processes of one session: a leader started with Prepare, and everything it
// starts.
type Group struct {
	o      *Owner
	name   string
	cg     string // cgroup directory, "" when the group is a process session
	record string // record file, "" without records

	mu       sync.Mutex
	cgfd     int // open until the leader started
	sid      int
	start    uint64
	released bool
}

// Prepare makes cmd the group's leader: a new process session, killed when this process's
// thread that starts it dies, and born inside the group's cgroup when there is one.
func (g *Group) Prepare(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Setsid = true
	attr.Setpgid = false // setsid makes a new process group already; setpgid after it fails
	attr.Pdeathsig = syscall.SIGKILL
	g.mu.Lock()
	if g.cgfd >= 0 {
		attr.UseCgroupFD = true
		attr.CgroupFD = g.cgfd
	}
	g.mu.Unlock()
	return attr
}

// Started records the leader's pid (which is the group's process session).
func (g *Group) Started(pid int) error {
	var start uint64
	if p, err := procfs.Stat(pid); err == nil {
		start = p.Start
	}
	g.mu.Lock()
	g.sid, g.start = pid, start
	g.mu.Unlock()
	g.closeFD()
	return g.writeRecord()
}

// SID is the leader's pid, 0 before Started.
func (g *Group) SID() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sid
}

func (g *Group) closeFD() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cgfd >= 0 {
		_ = syscall.Close(g.cgfd)
		g.cgfd = -1
	}
}

func (g *Group) writeRecord() error {
	if g.record == "" {
		return nil
	}
	g.mu.Lock()
	b, _ := json.Marshal(groupRecord{Cgroup: g.cg, SID: g.sid, Start: g.start})
	g.mu.Unlock()
	if err := fsutil.ReplaceFile(g.record, b); err != nil {
		return fmt.Errorf("record process group: %w", err)
	}
	return nil
}

// Members lists the group's live processes.
func (g *Group) Members() []procfs.Proc {
	if g.cg != "" {
		var out []procfs.Proc
		for _, pid := range cgroupMembers(g.cg) {
			if p, err := procfs.Stat(pid); err == nil && !p.Dead() {
				out = append(out, p)
			}
		}
		return out
	}
	g.mu.Lock()
	sid, start := g.sid, g.start
	g.mu.Unlock()
	if sid == 0 {
		return nil
	}
	return sessionMembers(procfs.All(), sid, start)
}

// Signal sends sig to every live process of the group and returns how many it found.
func (g *Group) Signal(sig syscall.Signal) int {
	ms := g.Members()
	for _, p := range ms {
		_ = syscall.Kill(p.PID, sig)
	}
	return len(ms)
}

// Kill kills every process of the group at once (cgroup.kill), or signals each with SIGKILL.
func (g *Group) Kill() {
	if g.cg != "" && g.o.kill && cgroupKill(g.cg) {
		return
	}
	g.Signal(syscall.SIGKILL)
}

// Wait returns once the group has no live process, or with ctx's error.
func (g *Group) Wait(ctx context.Context) error {
	if g.cg != "" {
		return g.o.watch.wait(ctx, g.cg)
	}
	g.mu.Lock()
	sid, start := g.sid, g.start
	g.mu.Unlock()
	if sid == 0 {
		return nil
	}
	return g.o.scan.wait(ctx, sid, start)
}

// KillWait bounds the wait for SIGKILLed processes to be gone. They go at once unless stuck in
// the kernel (uninterruptible sleep on a dead NFS server, say); past this bound they are
// reported rather than waited for.
const KillWait = 5 * time.Second

// Stop ends the group the way a closing terminal does: sig (SIGHUP, say) and SIGCONT, so
// stopped jobs wake to see it; then, after grace or as soon as ctx ends, SIGKILL for what is
// left. It returns an error naming what survived even that.
func (g *Group) Stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if g.Signal(sig) > 0 {
		g.Signal(syscall.SIGCONT)
		gctx, cancel := context.WithTimeout(ctx, grace)
		err := g.Wait(gctx)
		cancel()
		if err == nil {
			return nil
		}
	}
	g.Kill()
	return g.waitKilled(ctx)
}

// waitKilled waits up to KillWait for the group to empty after a kill. On a machine loaded far
// past its cores a killed process may take that long to be scheduled and exit; what counts then
// is whether any process of the group still lives.
func (g *Group) waitKilled(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), KillWait)
	defer cancel()
	err := g.Wait(kctx)
	if err == nil {
		return nil
	}
	left := g.Members()
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("%d processes of the session survived SIGKILL: %s: %w", len(left), describe(left), err)
}

// Release removes the group's cgroup and record; the group must be empty (Wait returned nil).
// It is idempotent.
func (g *Group) Release() {
	g.mu.Lock()
	if g.released {
		g.mu.Unlock()
		return
	}
	g.released = true
	g.mu.Unlock()
	g.closeFD()
	if g.cg != "" {
		g.o.watch.forget(g.cg)
		if err := os.Remove(g.cg); err != nil && !errors.Is(err, os.ErrNotExist) {
			// A cgroup with a live (or not yet reaped) member stays; the owner's Close or the
			// next sweep removes it.
			return
		}
	}
	if g.record != "" {
		_ = os.Remove(g.record)
	}
	g.o.forget(g)
}
