// Package process runs managed processes under the gateway (docs/observers.md): each in its
// own process group of the gateway's reaper owner (nothing outlives the gateway), its stdout
// and stderr captured line by line into size-rotated files under state/processes/<id>/ and
// into a ring of recent lines that debug-stream sessions follow, its exit status kept, and
// restarted on failure when asked.
package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/reaper"
)

// Restart policies.
const (
	RestartNo        = "no"
	RestartOnFailure = "on-failure"
)

// Statuses of a process.
const (
	StatusRunning    = "running"
	StatusExited     = "exited"     // ended with status 0
	StatusFailed     = "failed"     // ended otherwise, not restarted
	StatusStopped    = "stopped"    // stopped by request
	StatusRestarting = "restarting" // failed, waiting for its restart
)

// Spec is what to run (the wire type of /v1/processes).
type Spec = abi.ProcessSpec

// Info is a managed process as listed (the wire type of /v1/processes).
type Info = abi.ProcessInfo

// Options configure a Manager.
type Options struct {
	// Owner starts the process groups (the gateway's reaper owner).
	Owner *reaper.Owner
	// MaxLogBytes rotates a stream's file past this size (default 10 MiB); Keep is how many
	// rotated files stay (default 3: stdout.log.1 to .3).
	MaxLogBytes int64
	Keep        int
	// Ring is how many recent lines per process followers can read (default 65,536).
	Ring int
	// MaxStall is how long a process's capture waits for a follower's cursor that makes no
	// progress (default MaxStall, 1 s).
	MaxStall time.Duration
	// Backoff is the wait before the n-th restart in a row (default 1 s doubling to 30 s).
	Backoff func(n int) time.Duration
	// Grace is how long a stopping process gets after SIGTERM (default 5 s).
	Grace  time.Duration
	Now    func() time.Time
	Logger *slog.Logger
}

// Manager holds the managed processes of a state directory.
type Manager struct {
	dir string
	opt Options

	mu          sync.Mutex
	procs       map[string]*proc
	closed      bool
	gatewayAddr string
}

// Dir is state/processes.
func Dir(stateDir string) string { return filepath.Join(stateDir, "processes") }

// Open loads the records of dir (state/processes); a process a previous gateway ran is
// recorded as ended with it (it died with its group).
func Open(dir string, opt Options) (*Manager, error) {
	if opt.MaxLogBytes <= 0 {
		opt.MaxLogBytes = 10 << 20
	}
	if opt.Keep <= 0 {
		opt.Keep = 3
	}
	if opt.Ring <= 0 {
		opt.Ring = 1 << 16
	}
	if opt.Backoff == nil {
		opt.Backoff = func(n int) time.Duration { return min(time.Second<<min(n, 5), 30*time.Second) }
	}
	if opt.Grace <= 0 {
		opt.Grace = 5 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, fmt.Errorf("processes: %w", err)
	}
	m := &Manager{dir: dir, opt: opt, procs: map[string]*proc{}}
	data, err := fsutil.ReadFileNoFollow(m.recordPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("processes: %w", err)
	default:
		var infos []Info
		if err := json.Unmarshal(data, &infos); err != nil {
			return nil, fmt.Errorf("processes: %s: %w", m.recordPath(), err)
		}
		for _, in := range infos {
			if in.Status == StatusRunning || in.Status == StatusRestarting {
				in.Status, in.Reason, in.PID = StatusFailed, "the gateway stopped while it ran", 0
			}
			m.procs[in.ID] = &proc{m: m, info: in, ring: newRing(opt.Ring, opt.MaxStall)}
		}
	}
	return m, nil
}

func (m *Manager) recordPath() string { return filepath.Join(m.dir, "processes.json") }

// save writes every record; m.mu is held.
func (m *Manager) saveLocked() {
	infos := make([]Info, 0, len(m.procs))
	for _, p := range m.procs {
		infos = append(infos, p.snapshot())
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ID < infos[j].ID })
	b, err := json.MarshalIndent(infos, "", "  ")
	if err == nil {
		err = fsutil.WriteFileAtomic(m.recordPath(), b)
	}
	if err != nil {
		m.opt.Logger.Warn("processes: record", "err", err)
	}
}

func (m *Manager) save() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saveLocked()
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Start runs a new managed process.
func (m *Manager) Start(ctx context.Context, s Spec) (Info, error) {
	switch {
	case len(s.Command) == 0 || s.Command[0] == "":
		return Info{}, abi.Errorf(abi.CodeInvalidArgument, "", "a process needs a command")
	case s.Name != "" && !namePattern.MatchString(s.Name):
		return Info{}, abi.Errorf(abi.CodeInvalidArgument, "", "process name %q: use 1 to 64 of letters, digits, '.', '_' and '-'", s.Name)
	case s.Dir != "" && !filepath.IsAbs(s.Dir):
		return Info{}, abi.Errorf(abi.CodeInvalidArgument, "", "directory %q must be absolute", s.Dir)
	}
	switch s.Restart {
	case "":
		s.Restart = RestartNo
	case RestartNo, RestartOnFailure:
	default:
		return Info{}, abi.Errorf(abi.CodeInvalidArgument, "", "restart policy %q: want no or on-failure", s.Restart)
	}
	if s.Dir != "" {
		if fi, err := os.Stat(s.Dir); err != nil || !fi.IsDir() {
			return Info{}, abi.Errorf(abi.CodeInvalidArgument, "", "directory %s is not a directory", s.Dir)
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "p" + hex.EncodeToString(b[:])
	logDir := filepath.Join(m.dir, id)
	if err := fsutil.MkdirPrivate(logDir); err != nil {
		return Info{}, fmt.Errorf("processes: %w", err)
	}
	p := &proc{m: m, info: Info{ID: id, ProcessSpec: s, LogDir: logDir}, ring: newRing(m.opt.Ring, m.opt.MaxStall)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Info{}, abi.Errorf(abi.CodeResourceUnavailable, "", "the gateway is stopping")
	}
	if s.Name != "" {
		for _, o := range m.procs {
			if o.info.Name == s.Name && o.snapshot().Status == StatusRunning {
				m.mu.Unlock()
				return Info{}, abi.Errorf(abi.CodeInvalidArgument, "", "a running process is named %s (%s)", s.Name, o.info.ID)
			}
		}
	}
	m.procs[id] = p
	m.mu.Unlock()
	if err := p.start(); err != nil {
		m.mu.Lock()
		delete(m.procs, id)
		m.mu.Unlock()
		_ = os.RemoveAll(logDir)
		return Info{}, err
	}
	m.save()
	return p.snapshot(), nil
}

// List returns every process, the newest first.
func (m *Manager) List() []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Info, 0, len(m.procs))
	for _, p := range m.procs {
		out = append(out, p.snapshot())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].StartedAt != out[j].StartedAt {
			return out[i].StartedAt > out[j].StartedAt
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (m *Manager) get(ref string) (*proc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.procs[ref]; ok {
		return p, nil
	}
	var found *proc
	for _, p := range m.procs {
		if p.info.Name == ref && (found == nil || p.snapshot().StartedAt > found.snapshot().StartedAt) {
			found = p
		}
	}
	if found == nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "no process %q (nexus process list)", ref)
	}
	return found, nil
}

// Get returns a process by id or name (the newest of that name).
func (m *Manager) Get(ref string) (Info, error) {
	p, err := m.get(ref)
	if err != nil {
		return Info{}, err
	}
	return p.snapshot(), nil
}

// Stop ends a process (SIGTERM to its group, SIGKILL after the grace) and keeps it from
// restarting.
func (m *Manager) Stop(ctx context.Context, ref string) (Info, error) {
	p, err := m.get(ref)
	if err != nil {
		return Info{}, err
	}
	p.stop(ctx, StatusStopped)
	m.save()
	return p.snapshot(), nil
}

// Restart stops a process if it runs and starts it again under the same id.
func (m *Manager) Restart(ctx context.Context, ref string) (Info, error) {
	p, err := m.get(ref)
	if err != nil {
		return Info{}, err
	}
	p.stop(ctx, StatusStopped)
	p.mu.Lock()
	p.info.Restarts++
	p.stopping = false
	p.mu.Unlock()
	if err := p.start(); err != nil {
		return Info{}, err
	}
	m.save()
	return p.snapshot(), nil
}

// Close stops every running process (the gateway is stopping).
func (m *Manager) Close(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	ps := make([]*proc, 0, len(m.procs))
	for _, p := range m.procs {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.stop(ctx, StatusStopped) })
	}
	wg.Wait()
	m.save()
}

// proc is one managed process: its record, the running command, its recent lines.
type proc struct {
	m    *Manager
	ring *ring

	mu       sync.Mutex
	info     Info
	group    *reaper.Group
	done     chan struct{} // closed when the current run has ended and its output is read
	stopping bool
	timer    *time.Timer
	runs     int // consecutive failed runs, for the backoff
	// starting counts restarts past their check of stopping, starting a run: stop waits for
	// them, so no run starts after it returned.
	starting sync.WaitGroup
}

func (p *proc) snapshot() Info {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := p.info
	in.Command = append([]string(nil), p.info.Command...)
	return in
}

// start runs the command once.
func (p *proc) start() error {
	m := p.m
	p.mu.Lock()
	spec := p.info.ProcessSpec
	p.mu.Unlock()
	if m.opt.Owner == nil {
		return errors.New("processes: no process owner")
	}
	g, err := m.opt.Owner.NewGroup()
	if err != nil {
		return fmt.Errorf("start %s: %w", spec.Command[0], err)
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...) //nolint:gosec,noctx // the operator's own command; it lives until stopped
	cmd.Dir = spec.Dir
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.SysProcAttr = g.Prepare(nil)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		g.Release()
		return fmt.Errorf("start %s: %w", spec.Command[0], err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		g.Release()
		return fmt.Errorf("start %s: %w", spec.Command[0], err)
	}
	growPipe(stdout)
	growPipe(stderr)
	outLog, err := openRotating(filepath.Join(p.info.LogDir, "stdout.log"), m.opt.MaxLogBytes, m.opt.Keep)
	if err != nil {
		g.Release()
		return err
	}
	errLog, err := openRotating(filepath.Join(p.info.LogDir, "stderr.log"), m.opt.MaxLogBytes, m.opt.Keep)
	if err != nil {
		_ = outLog.close()
		g.Release()
		return err
	}
	if err := cmd.Start(); err != nil {
		_ = outLog.close()
		_ = errLog.close()
		g.Release()
		return abi.Errorf(abi.CodeInvalidArgument, "", "start %s: %v", spec.Command[0], err)
	}
	if err := g.Started(cmd.Process.Pid); err != nil {
		g.Kill()
		_ = cmd.Wait()
		_ = outLog.close()
		_ = errLog.close()
		return fmt.Errorf("start %s: %w", spec.Command[0], err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.group, p.done = g, done
	p.info.Status, p.info.PID, p.info.StartedAt = StatusRunning, cmd.Process.Pid, m.opt.Now().UnixMilli()
	p.info.EndedAt, p.info.ExitCode, p.info.Signal, p.info.Reason = 0, nil, "", ""
	// A stop that came while this run started (a restart racing a stop) ends it at once.
	stopNow := p.stopping
	p.mu.Unlock()
	defer func() {
		if stopNow {
			go p.stop(context.Background(), StatusStopped)
		}
	}()
	p.ring.status(fmt.Sprintf("started pid %d", cmd.Process.Pid), m.opt.Now())
	var readers sync.WaitGroup
	readers.Go(func() { p.capture(stdout, StreamStdout, outLog) })
	readers.Go(func() { p.capture(stderr, StreamStderr, errLog) })
	go func() {
		readers.Wait() // the pipes end when the process (and what inherited them) is gone
		err := cmd.Wait()
		_ = outLog.close()
		_ = errLog.close()
		p.ended(err)
		// The group's other members die with it: nothing the process started outlives it.
		g.Kill()
		g.Release()
		close(done)
	}()
	return nil
}

// ended records how the run ended and restarts it when the policy says so.
func (p *proc) ended(err error) {
	m := p.m
	code, sig := 0, ""
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig = ws.Signal().String()
			code = 128 + int(ws.Signal())
		} else {
			code = ee.ExitCode()
		}
	} else if err != nil {
		code = -1
	}
	// Asked before p.mu is taken: the manager's lock comes first (save holds it while it reads
	// every process), so asking under p.mu could deadlock with a save. A Close after this
	// answer stops the process (stopping), which the restart checks again.
	closed := m.isClosed()
	p.mu.Lock()
	p.info.EndedAt = m.opt.Now().UnixMilli()
	p.info.ExitCode, p.info.Signal, p.info.PID = &code, sig, 0
	restart := false
	switch {
	case p.stopping:
		p.info.Status = StatusStopped
	case code == 0:
		p.info.Status, p.runs = StatusExited, 0
	case p.info.Restart == RestartOnFailure && !closed:
		p.info.Status, restart = StatusRestarting, true
		p.runs++
	default:
		p.info.Status = StatusFailed
	}
	status, runs := p.info.Status, p.runs
	p.mu.Unlock()
	what := fmt.Sprintf("exited with status %d", code)
	if sig != "" {
		what = "killed by " + sig
	}
	p.ring.status(what+" ("+status+")", m.opt.Now())
	m.save()
	if restart {
		wait := m.opt.Backoff(runs - 1)
		p.mu.Lock()
		p.timer = time.AfterFunc(wait, func() {
			p.mu.Lock()
			if p.stopping || p.info.Status != StatusRestarting {
				p.mu.Unlock()
				return
			}
			p.info.Restarts++
			p.starting.Add(1)
			p.mu.Unlock()
			defer p.starting.Done()
			if err := p.start(); err != nil {
				p.mu.Lock()
				p.info.Status, p.info.Reason = StatusFailed, "restart: "+err.Error()
				p.mu.Unlock()
			}
			m.save()
		})
		p.mu.Unlock()
	}
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// stop ends the current run, if any, and any pending restart.
func (p *proc) stop(ctx context.Context, status string) {
	p.mu.Lock()
	p.stopping = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.info.Status == StatusRestarting {
		p.info.Status = status
	}
	p.mu.Unlock()
	// A restart already starting a run: once it has, that run is the one to stop (a Close that
	// returned before it started left it running, writing into a removed directory).
	p.starting.Wait()
	p.mu.Lock()
	g, done := p.group, p.done
	p.mu.Unlock()
	if g == nil || done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = g.Stop(ctx, syscall.SIGTERM, p.m.opt.Grace)
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// PIDs are the processes of a managed process's group now (none when it does not run).
func (m *Manager) PIDs(ref string) ([]int, error) {
	p, err := m.get(ref)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	g, running := p.group, p.info.Status == StatusRunning
	p.mu.Unlock()
	if g == nil || !running {
		return nil, nil
	}
	var out []int
	for _, pr := range g.Members() {
		out = append(out, pr.PID)
	}
	return out, nil
}
