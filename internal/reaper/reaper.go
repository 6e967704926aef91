// Package reaper keeps nexus's promise that no process started for a session outlives its owner
// (a gateway, a `nexus mcp`), whether the owner closes the session, shuts down, or is killed.
//
// Each session's processes form a Group. Where this process may create cgroups (cgroup v2,
// as root or in a delegated subtree), a group is a cgroup: every descendant is a member, even
// one that called setsid or double-forked, it is signalled and killed as one (cgroup.kill),
// and its emptiness is watched with inotify. Elsewhere a group is the process session its
// leader starts (setsid): background jobs, nohup and disowned jobs stay in it, a program that
// starts a session of its own leaves it. Leaders get PR_SET_PDEATHSIG, so a shell dies with
// the owner's thread that started it.
//
// Before it starts anything, a group is recorded under the owner's directory (state/owners/
// <boot>-<pid>-<start>/), and each owner may run a watchdog: a small process that waits for
// the owner's end on a pipe and then kills whatever the records name. An owner that could
// not be cleaned up by its watchdog (both killed) is cleaned up by the next owner that opens
// the same directory.
package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/procfs"
)

// Options configure an Owner.
type Options struct {
	// Dir holds the records of every owner (state/owners). Empty means no records: nothing a
	// crash leaves is found by the next start (for tests of other packages).
	Dir string
	// Kind names the owner in records and logs ("gateway", "mcp").
	Kind string
	// NoCgroup tracks groups by process session even where cgroups are available.
	NoCgroup bool
	// Watchdog, if set, returns the command of a watchdog for the owner record dir (a hidden
	// command of the nexus binary that calls RunWatchdog). It is started with a pipe on its
	// stdin whose other end only this process holds.
	Watchdog func(recordDir string) *exec.Cmd
	Logger   *slog.Logger
}

// Owner starts process groups and answers for them.
type Owner struct {
	opt  Options
	id   string
	dir  string // the owner's record directory; "" without records
	cg   string // the owner's cgroup directory; "" when groups are process sessions
	kill bool   // cgroup.kill is available

	scan  *scanner
	watch *cgWatcher

	mu     sync.Mutex
	groups map[*Group]struct{}
	seq    int
	closed bool

	wd     *exec.Cmd
	wdPipe *os.File
}

// ownerRecord is owner.json in an owner's record directory.
type ownerRecord struct {
	Kind   string `json:"kind"`
	PID    int    `json:"pid"`
	Cgroup string `json:"cgroup,omitempty"`
}

// groupRecord is <n>.json in an owner's record directory.
type groupRecord struct {
	Cgroup string `json:"cgroup,omitempty"`
	// SID is the leader's pid, which is the process session of the group; Start is the
	// leader's start time, so a reused pid is never taken for it.
	SID   int    `json:"sid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// Open makes an owner: it first reaps what dead owners recorded in opt.Dir left running, then
// sets up its own cgroup (or the session fallback), records itself and starts its watchdog.
func Open(ctx context.Context, opt Options) (*Owner, error) {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Kind == "" {
		opt.Kind = "nexus"
	}
	self, err := procfs.Stat(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	o := &Owner{
		opt:    opt,
		id:     fmt.Sprintf("%s-%d-%d", bootTag(procfs.BootID()), self.PID, self.Start),
		groups: map[*Group]struct{}{},
	}
	o.scan = newScanner()
	if opt.Dir != "" {
		if err := fsutil.MkdirPrivate(opt.Dir); err != nil {
			return nil, err
		}
		if n := Sweep(ctx, opt.Dir, opt.Logger); n > 0 {
			opt.Logger.Warn("reaped processes left by an owner that did not end cleanly", "processes", n)
		}
	}
	if !opt.NoCgroup {
		if cg, kill, err := makeOwnerCgroup(o.id); err == nil {
			o.cg, o.kill = cg, kill
			if o.watch, err = newCgWatcher(); err != nil {
				_ = os.Remove(cg)
				o.cg = ""
				opt.Logger.Debug("cgroups unusable; tracking process sessions", "err", err)
			}
		} else {
			opt.Logger.Debug("cgroups unusable; tracking process sessions", "err", err)
		}
	}
	if opt.Dir != "" {
		o.dir = filepath.Join(opt.Dir, o.id)
		if err := fsutil.MkdirPrivate(o.dir); err != nil {
			o.dropCgroup()
			return nil, err
		}
		b, _ := json.Marshal(ownerRecord{Kind: opt.Kind, PID: self.PID, Cgroup: o.cg})
		if err := fsutil.ReplaceFile(filepath.Join(o.dir, ownerFile), b); err != nil {
			o.dropCgroup()
			return nil, err
		}
		if opt.Watchdog != nil {
			if err := o.startWatchdog(); err != nil {
				o.dropCgroup()
				_ = os.RemoveAll(o.dir)
				return nil, err
			}
		}
	}
	return o, nil
}

const ownerFile = "owner.json"

func bootTag(id string) string {
	id = strings.ReplaceAll(id, "-", "")
	if len(id) > 8 {
		id = id[:8]
	}
	if id == "" {
		id = "noboot"
	}
	return id
}

// Contained reports whether groups are cgroups (every descendant caught) rather than process
// sessions (a descendant that starts its own session escapes).
func (o *Owner) Contained() bool { return o.cg != "" }

func (o *Owner) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("watchdog pipe: %w", err)
	}
	cmd := o.opt.Watchdog(o.dir)
	cmd.Stdin = r
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Out of the owner's process group: a Ctrl-C at the owner's terminal must not take the
	// watchdog along before it has done its work.
	cmd.SysProcAttr.Setpgid = true
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("start watchdog: %w", err)
	}
	o.wd, o.wdPipe = cmd, w
	return nil
}

// NewGroup prepares a group for one leader process (see Prepare and Started).
func (o *Owner) NewGroup() (*Group, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, errors.New("reaper: owner is closed")
	}
	o.seq++
	n := o.seq
	o.mu.Unlock()
	g := &Group{o: o, name: strconv.Itoa(n), cgfd: -1}
	if o.cg != "" {
		g.cg = filepath.Join(o.cg, "g"+g.name)
		if err := os.Mkdir(g.cg, 0o755); err != nil && !errors.Is(err, os.ErrExist) { //nolint:gosec // G301: a cgroup directory, not a file store
			return nil, fmt.Errorf("create cgroup %s: %w", g.cg, err)
		}
		fd, err := syscall.Open(g.cg, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			_ = os.Remove(g.cg)
			return nil, fmt.Errorf("open cgroup %s: %w", g.cg, err)
		}
		g.cgfd = fd
	}
	if o.dir != "" {
		g.record = filepath.Join(o.dir, g.name+".json")
		if err := g.writeRecord(); err != nil {
			g.closeFD()
			_ = os.Remove(g.cg)
			return nil, err
		}
	}
	o.mu.Lock()
	o.groups[g] = struct{}{}
	o.mu.Unlock()
	return g, nil
}

// Close ends every group still open (SIGKILL, then waits up to KillWait for them to die), removes
// the owner's cgroup and records and stops its watchdog. It returns the processes it could not
// reap, with an error saying so.
func (o *Owner) Close(ctx context.Context) ([]procfs.Proc, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, nil
	}
	o.closed = true
	groups := make([]*Group, 0, len(o.groups))
	for g := range o.groups {
		groups = append(groups, g)
	}
	o.mu.Unlock()
	for _, g := range groups {
		g.Kill()
	}
	var left []procfs.Proc
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.waitKilled(ctx); err != nil {
				mu.Lock()
				left = append(left, g.Members()...)
				mu.Unlock()
				return
			}
			g.Release()
		}()
	}
	wg.Wait()
	if len(left) == 0 {
		o.dropCgroup()
		if o.dir != "" {
			_ = os.RemoveAll(o.dir)
		}
	}
	if o.watch != nil {
		o.watch.close()
	}
	o.scan.stop()
	if o.wdPipe != nil {
		// With the records gone the watchdog finds nothing to do; with leftovers it tries
		// once more to kill them.
		_ = o.wdPipe.Close()
		_ = o.wd.Wait()
	}
	if len(left) > 0 {
		return left, fmt.Errorf("%d processes could not be reaped: %s", len(left), describe(left))
	}
	return nil, nil
}

func describe(ps []procfs.Proc) string {
	var b strings.Builder
	for i, p := range ps {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(ps)-10)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d (%s)", p.PID, p.Comm)
	}
	return b.String()
}

func (o *Owner) dropCgroup() {
	if o.cg != "" {
		_ = os.Remove(o.cg)
	}
}

func (o *Owner) forget(g *Group) {
	o.mu.Lock()
	delete(o.groups, g)
	o.mu.Unlock()
}

// RunWatchdog is the watchdog's body: it waits until in ends (the owner closed its end of the
// pipe, or died), then kills everything recorded in recordDir and removes it. Call it from a
// process of its own, with the signals a terminal sends ignored.
func RunWatchdog(ctx context.Context, recordDir string, in io.Reader, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	_, _ = io.Copy(io.Discard, in)
	n, err := reapOwner(ctx, recordDir)
	if n > 0 {
		logger.Warn("reaped processes of an owner that ended", "processes", n, "records", recordDir)
	}
	return err
}

// Sweep reaps what every dead owner recorded under dir left running and removes their records.
// It returns how many processes it signalled.
func Sweep(ctx context.Context, dir string, logger *slog.Logger) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	boot := bootTag(procfs.BootID())
	total := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if alive(e.Name(), boot) {
			continue
		}
		n, err := reapOwner(ctx, filepath.Join(dir, e.Name()))
		if err != nil && logger != nil {
			logger.Warn("reap a dead owner's processes", "records", e.Name(), "err", err)
		}
		total += n
	}
	return total
}

// alive reports whether the owner named by a record directory ("<boot>-<pid>-<start>") runs.
func alive(name, boot string) bool {
	parts := strings.Split(name, "-")
	if len(parts) != 3 || parts[0] != boot {
		return false
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	p, err := procfs.Stat(pid)
	return err == nil && p.Start == start && !p.Dead()
}

// reapOwner kills what one owner's records name, waits (within ctx, and at most a few seconds)
// for it to die, and removes the records and cgroups.
func reapOwner(ctx context.Context, recordDir string) (int, error) {
	entries, err := os.ReadDir(recordDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("read %s: %w", recordDir, err)
	}
	boot := bootTag(procfs.BootID())
	sameBoot := strings.HasPrefix(filepath.Base(recordDir), boot+"-")
	var owner ownerRecord
	var groups []groupRecord
	for _, e := range entries {
		b, err := fsutil.ReadFileNoFollow(filepath.Join(recordDir, e.Name()))
		if err != nil || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		if e.Name() == ownerFile {
			_ = json.Unmarshal(b, &owner)
			continue
		}
		var g groupRecord
		if json.Unmarshal(b, &g) == nil {
			groups = append(groups, g)
		}
	}
	n := 0
	if sameBoot {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		// One /proc walk serves every group, for the kill and for each tick of the wait: a
		// walk per group made an owner of 1000 process sessions take 25 s to reap.
		all := procfs.All()
		for _, g := range groups {
			n += killRecorded(g, all)
		}
		waitRecorded(ctx, groups)
		for _, g := range groups {
			if g.Cgroup != "" {
				removeCgroupTree(g.Cgroup)
			}
		}
		if owner.Cgroup != "" {
			removeCgroupTree(owner.Cgroup)
		}
	}
	if err := os.RemoveAll(recordDir); err != nil {
		return n, fmt.Errorf("remove %s: %w", recordDir, err)
	}
	return n, nil
}

// killRecorded SIGKILLs what a group record names and returns how many processes it found;
// all is a walk of /proc taken before the first kill.
func killRecorded(g groupRecord, all []procfs.Proc) int {
	n := 0
	if g.Cgroup != "" && validCgroupPath(g.Cgroup) {
		pids := cgroupMembers(g.Cgroup)
		n += len(pids)
		if !cgroupKill(g.Cgroup) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if g.SID > 0 {
		for _, p := range sessionMembers(all, g.SID, g.Start) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// waitRecorded waits until no group of groups has a process left, or ctx ends, walking /proc
// once per tick for all of them.
func waitRecorded(ctx context.Context, groups []groupRecord) {
	pending := groups
	for ctx.Err() == nil {
		var all []procfs.Proc
		for _, g := range pending {
			if g.SID > 0 {
				all = procfs.All()
				break
			}
		}
		left := pending[:0:0]
		for _, g := range pending {
			if (g.Cgroup != "" && validCgroupPath(g.Cgroup) && cgroupPopulated(g.Cgroup)) ||
				(g.SID > 0 && len(sessionMembers(all, g.SID, g.Start)) > 0) {
				left = append(left, g)
			}
		}
		if pending = left; len(pending) == 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sessionMembers are the live processes of the process session sid whose leader started at
// start. Once every process of a session is gone its number may be reused; a live leader with
// another start time means exactly that, and its session is not ours.
func sessionMembers(all []procfs.Proc, sid int, start uint64) []procfs.Proc {
	var out []procfs.Proc
	for _, p := range all {
		if p.PID == sid && start != 0 && p.Start != start {
			return nil
		}
	}
	for _, p := range all {
		if p.SID == sid && !p.Dead() {
			out = append(out, p)
		}
	}
	return out
}
