package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// Bash is the bash tool: one persistent agent shell per conversation, opened on first use in
// the workspace through the agent-shell manager (its policy, redaction, budgets and audit log),
// kept across calls (cd and export persist) and reopened if the shell exited. Close it with
// the conversation.
type Bash struct {
	mgr       *agentshell.Manager
	workspace string
	opts      agentshell.CreateOptions

	mu  sync.Mutex
	id  string
	cwd string
}

// NewBash makes the bash tool of one conversation. opts are the shell's operator settings
// (allow/deny lists, output budget); its transport is local and its cwd the workspace.
func NewBash(mgr *agentshell.Manager, workspace string, opts agentshell.CreateOptions) *Bash {
	opts.Transport, opts.Cwd = "local", workspace
	return &Bash{mgr: mgr, workspace: workspace, opts: opts, cwd: workspace}
}

type bashArgs struct {
	Command     string `json:"command" jsonschema:"bash command line, run in this conversation's persistent shell (cd and export persist between calls)"`
	TimeoutSecs int    `json:"timeout_secs,omitempty" jsonschema:"seconds before the command is interrupted (exit code 124; the shell stays usable)"`
}

// Spec describes the tool.
func (b *Bash) Spec() Spec {
	return Spec{Name: "bash",
		Description: "Run a bash command in a persistent shell that starts in the workspace. Output is ANSI-stripped, secret-redacted and bounded; stdout, stderr and the exit code come back separately.",
		Schema: schemaFor[bashArgs](func(s *jsonschema.Schema) {
			s.Properties["command"].MinLength = ptr(1)
			// No maximum here: a call asking for more than the configured maximum runs with
			// the maximum and is told so (Registry.Prepare), rather than refused.
			s.Properties["timeout_secs"].Minimum = ptr(1.0)
		}),
		Paths:   Paths{Command: "command"},
		Timeout: BashTimeout}
}

// BashTimeout is bash's default timeout: builds, installs and test suites take minutes.
const BashTimeout = 10 * time.Minute

// CallTimeout is the call's timeout_secs (zero without it); the registry bounds it by the
// configured maximum, and the shell, not the call's context, interrupts the command then.
func (b *Bash) CallTimeout(raw json.RawMessage) time.Duration {
	var a bashArgs
	if json.Unmarshal(raw, &a) != nil || a.TimeoutSecs <= 0 {
		return 0
	}
	return time.Duration(a.TimeoutSecs) * time.Second
}

// Cwd is the directory the next command runs in: the shell's current directory.
func (b *Bash) Cwd() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cwd
}

// SessionID is the agent shell's id, empty before the first command.
func (b *Bash) SessionID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id
}

// Run runs the command. Its timeout is what the registry decided (the call's timeout_secs up
// to the maximum, else the tool's timeout): ctx's deadline less the grace the registry adds.
// Its output goes to the call's Progress as it comes.
func (b *Bash) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a bashArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock() // one command at a time, as the shell runs them
	if b.id == "" {
		info, err := b.mgr.Create(ctx, b.opts)
		if err != nil {
			return Result{}, fmt.Errorf("open the shell: %w", err)
		}
		b.id = info.SessionID
	}
	timeout := time.Duration(a.TimeoutSecs) * time.Second
	if dl, ok := ctx.Deadline(); ok {
		// Leave the shell time to interrupt the command and report before ctx ends.
		timeout = max(time.Until(dl)-callGrace, time.Second)
	}
	eo := agentshell.ExecOptions{Timeout: min(timeout, agentshell.MaxTimeout)}
	if p := ProgressOf(ctx); p != nil {
		eo.OnOutput = p.Write
	}
	res, err := b.mgr.Exec(ctx, b.id, a.Command, eo)
	if errors.Is(err, agentshell.ErrBlocked) {
		return Result{Output: err.Error(), IsError: true}, nil
	}
	if err != nil {
		if errors.Is(err, agentshell.ErrNotFound) {
			b.id, b.cwd = "", b.workspace
		}
		return Result{}, fmt.Errorf("bash: %w", err)
	}
	if res.ShellExited {
		b.id, b.cwd = "", b.workspace
	} else if res.Cwd != "" {
		b.cwd = res.Cwd
	}
	var s strings.Builder
	if res.Stdout != "" {
		s.WriteString(res.Stdout)
		if !strings.HasSuffix(res.Stdout, "\n") {
			s.WriteByte('\n')
		}
	}
	if res.Stderr != "" {
		fmt.Fprintf(&s, "[stderr]\n%s", res.Stderr)
		if !strings.HasSuffix(res.Stderr, "\n") {
			s.WriteByte('\n')
		}
	}
	fmt.Fprintf(&s, "[exit code %d]", res.ExitCode)
	if res.TimedOut {
		s.WriteString(" [timed out]")
	}
	if res.Truncated {
		s.WriteString(" [output truncated]")
	}
	if res.ShellExited {
		s.WriteString(" [the shell exited; the next command starts a new one in the workspace]")
	}
	return Result{Output: s.String()}, nil
}

// Close destroys the conversation's shell.
func (b *Bash) Close(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.id == "" {
		return nil
	}
	id := b.id
	b.id = ""
	if err := b.mgr.Destroy(ctx, id); err != nil && !errors.Is(err, agentshell.ErrNotFound) {
		return fmt.Errorf("close the shell: %w", err)
	}
	return nil
}
