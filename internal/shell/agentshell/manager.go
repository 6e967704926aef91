// Package agentshell manages agent shells: self-identifying ids, the session cap, idle reaping,
// per-session policy, redaction and output budgets, automatic checkpoints and the audit log.
// It is what `nexus mcp` and terminal sessions' `run` stand on.
package agentshell

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/audit"
	"github.com/nexus-run/nexus/internal/shell/output"
	"github.com/nexus-run/nexus/internal/shell/policy"
)

// Defaults of Config.
const (
	DefaultMaxSessions = 64
	DefaultIdleTimeout = 30 * time.Minute
	DefaultTimeout     = 120 * time.Second
	MaxTimeout         = 3600 * time.Second
)

// Config is operator configuration: none of it can come from a tool argument.
type Config struct {
	MaxSessions int
	// IdleTimeout closes sessions unused this long; negative disables.
	IdleTimeout time.Duration
	// AuditDir receives <session_id>.jsonl; empty disables the audit log.
	AuditDir string
	// ShadowDir holds the shadow repositories of local checkpoints.
	ShadowDir string
	// Operator is the operator policy (deny lists and patterns the agent cannot change).
	Operator policy.Operator
	// SSH holds the operator's SSH settings (key directory, known_hosts, ssh config).
	SSH SSHConfig
	// DockerBinary is the docker client to run (default "docker").
	DockerBinary string
	// Env is added to every shell's environment.
	Env []string
	Now func() time.Time
	// RunPrefix makes ids unique across servers; default random.
	RunPrefix string
	// Transport builds a transport; nil means the built-in local, ssh and docker ones.
	Transport func(o CreateOptions) (shell.Transport, error)
	// Owner answers for the processes of local shells (see package reaper); nil means each
	// shell tracks its own process session.
	Owner *reaper.Owner
}

// SSHConfig are the operator's SSH settings.
type SSHConfig struct {
	KeyDir     string
	KnownHosts string
	// HostKeyFingerprint pins the host key ("SHA256:...") of every SSH session.
	HostKeyFingerprint string
	ConfigFile         string
	ConnectTimeout     time.Duration
	// StartTimeout bounds the wait for a new SSH or Docker shell's handshake (zero:
	// shell.DefaultStartTimeout); over SSH it includes the user's startup files.
	StartTimeout time.Duration
}

// CreateOptions are an agent's choices for a new session.
type CreateOptions struct {
	Transport string `json:"transport"`
	// ssh
	Host     string `json:"host,omitempty"`
	User     string `json:"user,omitempty"`
	Port     int    `json:"port,omitempty"`
	Password string `json:"password,omitempty"`
	Key      string `json:"key,omitempty"`
	// docker
	Container string `json:"container,omitempty"`
	// Cwd is the starting directory (local sessions).
	Cwd string `json:"cwd,omitempty"`
	// Workspace enables checkpoints of that directory (where the shell runs).
	Workspace    string        `json:"workspace,omitempty"`
	Allow        []string      `json:"allow,omitempty"`
	Deny         []string      `json:"deny,omitempty"`
	OutputBudget *shell.Budget `json:"output_budget,omitempty"`
}

// Errors a caller can tell apart.
var (
	ErrNotFound = errors.New("no such session")
	ErrLimit    = errors.New("session limit reached")
	ErrInvalid  = errors.New("invalid argument")
	ErrBlocked  = errors.New("blocked by policy")
	ErrClosed   = errors.New("session closed")
)

// Manager holds the agent shells of one process.
type Manager struct {
	cfg   Config
	fixed *output.Redactor // the fixed rules only (it never learns), for text about no session

	mu       sync.Mutex
	sessions map[string]*sess
	reserved int
	counter  int
	closed   bool

	stop chan struct{}
	wg   sync.WaitGroup
}

type sess struct {
	id        string
	transport string
	sh        *shell.Shell
	pol       *policy.Policy
	red       *output.Redactor
	budget    *shell.Budget
	ckpt      *shell.Checkpointer
	workspace string
	created   time.Time
	audit     *audit.Log

	mu       sync.Mutex
	lastUsed time.Time
	busy     int
	execs    int
}

// New starts a manager and its idle reaper.
func New(cfg Config) *Manager {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RunPrefix == "" {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		cfg.RunPrefix = hex.EncodeToString(b)
	}
	if cfg.Transport == nil {
		cfg.Transport = cfg.builtinTransport
	}
	m := &Manager{cfg: cfg, sessions: map[string]*sess{}, stop: make(chan struct{}), fixed: output.NewRedactor()}
	if cfg.IdleTimeout > 0 {
		m.wg.Add(1)
		go m.reaper()
	}
	return m
}

var safeRE = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Sanitize makes an agent-supplied name safe for an id and a file name: [A-Za-z0-9._-], at
// most 40 characters, never "." or "..".
func Sanitize(s string) string {
	s = safeRE.ReplaceAllString(s, "_")
	if len(s) > 40 {
		s = s[:40]
	}
	if s == "" || s == "." || s == ".." {
		s = "_"
	}
	return s
}

func (c Config) builtinTransport(o CreateOptions) (shell.Transport, error) {
	switch o.Transport {
	case "", "local":
		return &shell.Local{Dir: o.Cwd, Owner: c.Owner}, nil
	case "ssh":
		return newSSH(c, o)
	case "docker":
		if o.Container == "" {
			return nil, fmt.Errorf("%w: docker sessions need container", ErrInvalid)
		}
		return newDocker(c, o)
	}
	return nil, fmt.Errorf("%w: unknown transport %q (want local, ssh or docker)", ErrInvalid, o.Transport)
}

// Create opens a session. The slot is reserved before connecting, so concurrent creates never
// exceed the cap, and released if the connection fails. An error's text is redacted (it may
// quote an argument); errors.Is and errors.As still see what it wraps.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (abi.Shell, error) {
	red := output.NewRedactor()
	if o.Password != "" {
		red.LearnLiteral(o.Password)
	}
	info, err := m.create(ctx, o, red)
	return info, redactErr(red, err)
}

func (m *Manager) create(ctx context.Context, o CreateOptions, red *output.Redactor) (abi.Shell, error) {
	if o.Transport == "" {
		o.Transport = "local"
	}
	pol, err := policy.New(o.Allow, o.Deny, m.cfg.Operator)
	if err != nil {
		return abi.Shell{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if o.OutputBudget != nil {
		if err := output.ValidateBudget(*o.OutputBudget); err != nil {
			return abi.Shell{}, fmt.Errorf("%w: output_budget: %w", ErrInvalid, err)
		}
	}
	if o.Cwd != "" && o.Transport == "local" {
		if fi, err := os.Stat(o.Cwd); err != nil || !fi.IsDir() {
			return abi.Shell{}, fmt.Errorf("%w: cwd %q is not a directory", ErrInvalid, o.Cwd)
		}
	}
	tr, err := m.cfg.Transport(o)
	if err != nil {
		return abi.Shell{}, err
	}

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return abi.Shell{}, ErrClosed
	}
	if len(m.sessions)+m.reserved >= m.cfg.MaxSessions {
		m.mu.Unlock()
		return abi.Shell{}, fmt.Errorf("%w: %d sessions open; destroy one with session_destroy", ErrLimit, m.cfg.MaxSessions)
	}
	m.reserved++
	m.counter++
	part := tr.IDPart()
	if r := red.Redact(part); r != part {
		part = Sanitize(r) // a container or host named like a token: the id is in every result and log
	}
	id := m.cfg.RunPrefix + "-" + strconv.Itoa(m.counter) + "_" + part
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		m.reserved--
		m.mu.Unlock()
	}

	env := append(append([]string{}, m.cfg.Env...), "NEXUS_SHELL_SESSION="+id)
	sh, err := shell.Start(ctx, tr, env)
	if err != nil {
		release()
		return abi.Shell{}, fmt.Errorf("open %s session: %w", o.Transport, err)
	}
	now := m.cfg.Now()
	s := &sess{id: id, transport: o.Transport, sh: sh, pol: pol, red: red, budget: o.OutputBudget, created: now, lastUsed: now}
	if o.Workspace != "" {
		s.workspace = red.Redact(o.Workspace) // as shown; the checkpointer has the real path
		gitDir := filepath.Join(m.cfg.ShadowDir, id)
		if o.Transport != "local" || m.cfg.ShadowDir == "" {
			gitDir = "~/.cache/nexus/shadow/" + id
		}
		ck, err := shell.NewCheckpointer(sh.Proc(), o.Workspace, gitDir)
		if err != nil {
			_ = sh.Close()
			release()
			return abi.Shell{}, fmt.Errorf("%w: workspace: %w", ErrInvalid, err)
		}
		s.ckpt = ck
	}
	if m.cfg.AuditDir != "" {
		a, err := audit.Open(m.cfg.AuditDir, id, m.cfg.Now)
		if err != nil {
			_ = sh.Close()
			release()
			return abi.Shell{}, err
		}
		s.audit = a
	}
	m.mu.Lock()
	m.reserved--
	m.sessions[id] = s
	m.mu.Unlock()
	s.audit.Append(audit.Record{Event: "open", Transport: o.Transport, Cwd: red.Redact(sh.Cwd()), Allow: redactAll(red, pol.Allow()),
		Deny: redactAll(red, pol.Deny()), Workspace: s.workspace})
	return s.info(), nil
}

// info describes the session; what an agent or a shell chose (cwd, workspace, lists) is
// redacted, as in every other sink.
func (s *sess) info() abi.Shell {
	s.mu.Lock()
	defer s.mu.Unlock()
	return abi.Shell{
		SessionID: s.id, Transport: s.transport, Cwd: s.red.Redact(s.sh.Cwd()), Workspace: s.workspace,
		Created: s.created.UTC().Format(time.RFC3339), LastUsed: s.lastUsed.UTC().Format(time.RFC3339),
		Execs: s.execs, Allow: redactAll(s.red, s.pol.Allow()), Deny: redactAll(s.red, s.pol.Deny()),
	}
}

func redactAll(r *output.Redactor, ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, x := range ss {
		out[i] = r.Redact(x)
	}
	return out
}

// redactedError is an error whose text was redacted: what it wraps is still there for
// errors.Is and errors.As, but printing it shows no secret.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func redactErr(r *output.Redactor, err error) error {
	if err == nil {
		return nil
	}
	if msg := r.Redact(err.Error()); msg != err.Error() {
		return &redactedError{msg: msg, err: err}
	}
	return err
}

// Redact redacts text with what session id has learned (assigned secrets, its SSH password),
// or with the fixed rules alone when there is no such session. For the text of errors and
// logs about a session, which may quote a command or an argument.
func (m *Manager) Redact(id, text string) string {
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if ok {
		return s.red.Redact(text)
	}
	return m.fixed.Redact(text)
}

func (m *Manager) get(id string) (*sess, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil, redactErr(m.fixed, fmt.Errorf("%w %q (see session_list; sessions close after idling or on exit)", ErrNotFound, id))
	}
	return s, nil
}

// List returns the open sessions, oldest first.
func (m *Manager) List() []abi.Shell {
	m.mu.Lock()
	ss := make([]*sess, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	out := make([]abi.Shell, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.info())
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Created < out[j].Created || (out[i].Created == out[j].Created && out[i].SessionID < out[j].SessionID)
	})
	return out
}

// ExecOptions shape one command.
type ExecOptions struct {
	Budget *shell.Budget
	// Timeout defaults to 120 s and is capped at 3600 s.
	Timeout time.Duration
	// OnOutput receives each line as it completes, cleaned and redacted, with its newline
	// (stream is "stdout" or "stderr"); for progress notifications and terminal mirroring.
	OnOutput func(stream string, p []byte)
}

// Exec runs a command in a session. Commands on one session run one at a time. Everything
// the result and the audit log say is redacted, an error's text too.
func (m *Manager) Exec(ctx context.Context, id, command string, o ExecOptions) (shell.ExecResult, error) {
	s, err := m.get(id)
	if err != nil {
		return shell.ExecResult{}, err
	}
	res, err := m.exec(ctx, s, command, o)
	return res, redactErr(s.red, err)
}

func (m *Manager) exec(ctx context.Context, s *sess, command string, o ExecOptions) (shell.ExecResult, error) {
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if timeout < 0 || timeout > MaxTimeout {
		return shell.ExecResult{}, fmt.Errorf("%w: timeout_secs must be between 1 and %d", ErrInvalid, int(MaxTimeout/time.Second))
	}
	budget := output.MergeBudget(s.budget, o.Budget)
	outC, err := output.NewCollector(budget, s.red)
	if err != nil {
		return shell.ExecResult{}, fmt.Errorf("%w: budget: %w", ErrInvalid, err) // the error names the field, this the argument
	}
	errC, err := output.NewCollector(budget, s.red)
	if err != nil {
		return shell.ExecResult{}, fmt.Errorf("%w: budget: %w", ErrInvalid, err)
	}
	if err := s.pol.Check(command); err != nil {
		// The refusal quotes the command: redact it with what this session has learned too.
		var v *policy.Violation
		if errors.As(err, &v) {
			rv := *v
			rv.Command, rv.Program, rv.Detail = s.red.Redact(rv.Command), s.red.Redact(rv.Program), s.red.Redact(rv.Detail)
			err = &rv
		}
		s.audit.Append(audit.Record{Event: "block", Command: s.red.Redact(command), Reason: s.red.Redact(err.Error())})
		return shell.ExecResult{}, fmt.Errorf("%w: %w", ErrBlocked, err)
	}
	s.red.Learn(command)
	s.mu.Lock()
	s.busy++
	s.lastUsed = m.cfg.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy--
		s.execs++
		s.lastUsed = m.cfg.Now()
		s.mu.Unlock()
	}()

	redacted := s.red.Redact(command)
	if s.ckpt != nil && !policy.ReadOnly(command) {
		if _, err := s.ckpt.Snapshot(ctx, "", true, redacted); err != nil {
			s.audit.Append(audit.Record{Event: "checkpoint-error", Command: redacted, Reason: s.red.Redact(err.Error())})
		}
	}
	if o.OnOutput != nil {
		// Watchers get each line cleaned and redacted, never the raw bytes.
		outC.Tap(func(line string) { o.OnOutput("stdout", []byte(line+"\n")) })
		errC.Tap(func(line string) { o.OnOutput("stderr", []byte(line+"\n")) })
	}
	rr, err := s.sh.Run(ctx, command, timeout, outC, errC)
	if err != nil && !errors.Is(err, shell.ErrShellExited) {
		return shell.ExecResult{}, fmt.Errorf("run: %w", err)
	}
	res := shell.ExecResult{Command: redacted, ExitCode: rr.ExitCode, DurationMS: rr.Duration.Milliseconds(), Cwd: s.red.Redact(rr.Cwd),
		TimedOut: rr.TimedOut, ShellExited: rr.ShellExited}
	var outRep, errRep shell.StreamReport
	var t1, t2 bool
	res.Stdout, outRep, t1 = outC.Finish()
	res.Stderr, errRep, t2 = errC.Finish()
	res.Truncated = t1 || t2
	if o.Budget != nil || s.budget != nil || res.Truncated {
		res.Budget = &shell.BudgetReport{Stdout: outRep, Stderr: errRep}
	}
	s.audit.Append(audit.Record{Event: "exec", Command: redacted, Cwd: res.Cwd, ExitCode: &res.ExitCode, DurationMS: res.DurationMS,
		Stdout: clip(res.Stdout), Stderr: clip(res.Stderr), TimedOut: res.TimedOut, Truncated: res.Truncated})
	if rr.ShellExited {
		m.drop(s, "shell exited")
	}
	return res, nil
}

// auditClip bounds what the audit log keeps of each stream.
const auditClip = 8 << 10

func clip(s string) string {
	if len(s) <= auditClip {
		return s
	}
	return s[:auditClip/2] + "\n... [" + strconv.Itoa(len(s)-auditClip) + " bytes not logged] ...\n" + s[len(s)-auditClip/2:]
}

// Destroy closes a session and everything it started.
func (m *Manager) Destroy(_ context.Context, id string) error {
	s, err := m.get(id)
	if err != nil {
		return err
	}
	m.drop(s, "destroyed")
	return nil
}

func (m *Manager) drop(s *sess, reason string) {
	m.mu.Lock()
	if m.sessions[s.id] != s {
		m.mu.Unlock()
		return
	}
	delete(m.sessions, s.id)
	m.mu.Unlock()
	_ = s.sh.Close()
	s.audit.Append(audit.Record{Event: "close", Reason: reason})
	s.audit.Close()
}

// Checkpoint snapshots a session's workspace.
func (m *Manager) Checkpoint(ctx context.Context, id, label string) (shell.Checkpoint, error) {
	s, err := m.checkpointer(id)
	if err != nil {
		return shell.Checkpoint{}, err
	}
	c, err := s.ckpt.Snapshot(ctx, s.red.Redact(label), false, "")
	if err == nil {
		s.audit.Append(audit.Record{Event: "checkpoint", Checkpoint: c.ID, Reason: c.Label})
	}
	return c, redactErr(s.red, err)
}

// Checkpoints lists a session's checkpoints, newest first.
func (m *Manager) Checkpoints(ctx context.Context, id string) ([]shell.Checkpoint, error) {
	s, err := m.checkpointer(id)
	if err != nil {
		return nil, err
	}
	cs, err := s.ckpt.List(ctx)
	for i := range cs {
		// Written redacted; redacted again with what the session learned since.
		cs[i].Label, cs[i].Command = s.red.Redact(cs[i].Label), s.red.Redact(cs[i].Command)
	}
	return cs, redactErr(s.red, err)
}

// Restore brings a session's workspace back to a checkpoint.
func (m *Manager) Restore(ctx context.Context, id, checkpointID string) (shell.RestoreResult, error) {
	s, err := m.checkpointer(id)
	if err != nil {
		return shell.RestoreResult{}, err
	}
	r, err := s.ckpt.Restore(ctx, checkpointID)
	r.Restored, r.Removed = redactAll(s.red, r.Restored), redactAll(s.red, r.Removed) // file names
	if err != nil {
		return r, redactErr(s.red, err)
	}
	s.audit.Append(audit.Record{Event: "restore", Checkpoint: checkpointID})
	return r, nil
}

func (m *Manager) checkpointer(id string) (*sess, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	if s.ckpt == nil {
		return nil, fmt.Errorf("%w: session %s has no workspace; create it with workspace set to enable checkpoints", ErrInvalid, id)
	}
	return s, nil
}

func (m *Manager) reaper() {
	defer m.wg.Done()
	every := min(m.cfg.IdleTimeout/4, time.Minute)
	every = max(every, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Reap(m.cfg.Now())
		}
	}
}

// Reap closes sessions idle longer than the idle timeout (not while a command runs).
func (m *Manager) Reap(now time.Time) {
	if m.cfg.IdleTimeout <= 0 {
		return
	}
	m.mu.Lock()
	var idle []*sess
	for _, s := range m.sessions {
		s.mu.Lock()
		if s.busy == 0 && now.Sub(s.lastUsed) >= m.cfg.IdleTimeout {
			idle = append(idle, s)
		}
		s.mu.Unlock()
	}
	m.mu.Unlock()
	for _, s := range idle {
		m.drop(s, "idle")
	}
}

// Close destroys every session and stops the reaper.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	ss := make([]*sess, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	close(m.stop)
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() { defer wg.Done(); m.drop(s, "shutdown") }()
	}
	wg.Wait()
	m.wg.Wait()
}
