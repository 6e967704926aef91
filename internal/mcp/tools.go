package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/output"
)

// Transports are the values of session_create's transport.
var Transports = []string{"local", "ssh", "docker"}

// KeepModes are the values of a budget's keep.
var KeepModes = []string{shell.KeepAll, shell.KeepHead, shell.KeepTail, shell.KeepHeadTail}

// GrepInput is a budget's grep.
type GrepInput struct {
	Pattern string `json:"pattern" jsonschema:"RE2 regular expression; only matching lines are kept (an invalid pattern fails before the command runs)"`
	Context int    `json:"context,omitempty" jsonschema:"lines of context kept before and after each match (0 to 100)"`
}

// BudgetInput is an output budget as an agent writes it.
type BudgetInput struct {
	Grep     *GrepInput `json:"grep,omitempty" jsonschema:"keep only the lines matching a regular expression, with context; applied before keep"`
	Keep     string     `json:"keep,omitempty" jsonschema:"which lines to keep: all, the first lines (head), the last lines (tail) or both ends (head_tail); elided lines are replaced by a marker"`
	Lines    int        `json:"lines,omitempty" jsonschema:"how many lines head, tail or head_tail keep"`
	MaxChars int        `json:"max_chars,omitempty" jsonschema:"cap on the characters of each stream after the other rules (default 100000)"`
}

func (b *BudgetInput) budget() *shell.Budget {
	if b == nil {
		return nil
	}
	out := &shell.Budget{Keep: b.Keep, Lines: b.Lines, MaxChars: b.MaxChars}
	if b.Grep != nil {
		out.Grep = &shell.Grep{Pattern: b.Grep.Pattern, Context: b.Grep.Context}
	}
	return out
}

// CreateInput is session_create's arguments.
type CreateInput struct {
	Transport string `json:"transport" jsonschema:"where the shell runs: local (this machine), ssh (a remote host) or docker (a running container)"`
	// ssh
	Host     string `json:"host,omitempty" jsonschema:"ssh: host name, address or ~/.ssh/config alias"`
	User     string `json:"user,omitempty" jsonschema:"ssh: user name (default from the ssh config or the current user)"`
	Port     int    `json:"port,omitempty" jsonschema:"ssh: port (default 22)"`
	Password string `json:"password,omitempty" jsonschema:"ssh: password (prefer key); redacted from output and logs"`
	Key      string `json:"key,omitempty" jsonschema:"ssh: name of a private key file in the operator's key directory (a name, not a path)"`
	// docker
	Container string `json:"container,omitempty" jsonschema:"docker: name or id of a running container"`
	// all
	Cwd          string       `json:"cwd,omitempty" jsonschema:"starting directory of the shell"`
	Workspace    string       `json:"workspace,omitempty" jsonschema:"directory to checkpoint (enables session_checkpoint, session_checkpoints and session_restore and automatic snapshots before commands that may write)"`
	Allow        []string     `json:"allow,omitempty" jsonschema:"if set, the only programs commands may run (base names such as git or npm); checked through pipelines, substitutions, bash -c and wrappers such as sudo, env and xargs"`
	Deny         []string     `json:"deny,omitempty" jsonschema:"programs commands may not run (base names such as rm or curl)"`
	OutputBudget *BudgetInput `json:"output_budget,omitempty" jsonschema:"default output budget of every session_exec of this session (a call's budget overrides it field by field)"`
}

func (in CreateInput) options() (agentshell.CreateOptions, error) {
	if in.Key != "" && (strings.ContainsAny(in.Key, "/\\") || in.Key == "." || in.Key == "..") {
		return agentshell.CreateOptions{}, fmt.Errorf("key %q is a path: give the name of a key file in the operator's key directory", in.Key)
	}
	if in.Port < 0 || in.Port > 65535 {
		return agentshell.CreateOptions{}, fmt.Errorf("port %d is out of range: use 1 to 65535, or omit it for 22", in.Port)
	}
	if in.Transport == "local" || in.Transport == "" {
		if in.Host != "" || in.User != "" || in.Port != 0 || in.Password != "" || in.Key != "" || in.Container != "" {
			return agentshell.CreateOptions{}, errors.New("host, user, port, password, key and container are for ssh and docker sessions; " +
				"drop them or set transport to ssh or docker")
		}
	}
	o := agentshell.CreateOptions{
		Transport: in.Transport, Host: in.Host, User: in.User, Port: in.Port, Password: in.Password, Key: in.Key,
		Container: in.Container, Cwd: in.Cwd, Workspace: in.Workspace, Allow: in.Allow, Deny: in.Deny,
		OutputBudget: in.OutputBudget.budget(),
	}
	if o.OutputBudget != nil {
		if err := output.ValidateBudget(*o.OutputBudget); err != nil {
			return agentshell.CreateOptions{}, fmt.Errorf("output_budget: %w", err)
		}
	}
	return o, nil
}

// ExecInput is session_exec's arguments.
type ExecInput struct {
	SessionID   string       `json:"session_id" jsonschema:"the session_id returned by session_create"`
	Command     string       `json:"command" jsonschema:"shell command to run in the session's shell (it runs in the current shell, so cd and export persist)"`
	Budget      *BudgetInput `json:"budget,omitempty" jsonschema:"output budget of this call, overriding the session's output_budget field by field"`
	TimeoutSecs int          `json:"timeout_secs,omitempty" jsonschema:"seconds before the command is interrupted (exit_code 124, timed_out true; the session stays usable)"`
}

// SessionIDInput is the arguments of the tools that take only a session.
type SessionIDInput struct {
	SessionID string `json:"session_id" jsonschema:"the session_id returned by session_create"`
}

// CheckpointInput is session_checkpoint's arguments.
type CheckpointInput struct {
	SessionID string `json:"session_id" jsonschema:"the session_id returned by session_create (created with a workspace)"`
	Label     string `json:"label,omitempty" jsonschema:"a short description of the checkpoint"`
}

// RestoreInput is session_restore's arguments.
type RestoreInput struct {
	SessionID    string `json:"session_id" jsonschema:"the session_id returned by session_create (created with a workspace)"`
	CheckpointID string `json:"checkpoint_id" jsonschema:"checkpoint id from session_checkpoint or session_checkpoints (7 to 40 hex digits)"`
}

// The tools' input schemas: inferred from the input types, plus enums, bounds and defaults.
// Each server gets its own copies.

func createSchema() *jsonschema.Schema {
	return schemaFor[CreateInput](func(s *jsonschema.Schema) {
		s.Properties["transport"].Enum = enum(Transports)
		port := s.Properties["port"]
		port.Minimum, port.Maximum = ptr(1.0), ptr(65535.0)
		budgetSchema(s.Properties["output_budget"])
	})
}

func execSchema() *jsonschema.Schema {
	return schemaFor[ExecInput](func(s *jsonschema.Schema) {
		s.Properties["command"].MinLength = ptr(1)
		t := s.Properties["timeout_secs"]
		t.Minimum, t.Maximum = ptr(1.0), ptr(agentshell.MaxTimeout.Seconds())
		t.Default = json.RawMessage(fmt.Sprint(int(agentshell.DefaultTimeout.Seconds())))
		budgetSchema(s.Properties["budget"])
	})
}

func checkpointSchema() *jsonschema.Schema { return schemaFor[CheckpointInput](nil) }

func restoreSchema() *jsonschema.Schema {
	return schemaFor[RestoreInput](func(s *jsonschema.Schema) {
		s.Properties["checkpoint_id"].Pattern = "^[0-9a-f]{7,40}$"
	})
}

func emptySchema() *jsonschema.Schema     { return schemaFor[struct{}](nil) }
func sessionIDSchema() *jsonschema.Schema { return schemaFor[SessionIDInput](nil) }

func budgetSchema(b *jsonschema.Schema) {
	b.Properties["keep"].Enum = enum(KeepModes)
	lines := b.Properties["lines"]
	lines.Minimum = ptr(0.0)
	mc := b.Properties["max_chars"]
	mc.Minimum, mc.Maximum = ptr(0.0), ptr(float64(output.MaxMaxChars))
	g := b.Properties["grep"]
	g.Properties["pattern"].MaxLength = ptr(output.MaxPatternLen)
	c := g.Properties["context"]
	c.Minimum, c.Maximum = ptr(0.0), ptr(float64(output.MaxContext))
}

func schemaFor[T any](adjust func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err)
	}
	if adjust != nil {
		adjust(s)
	}
	return s
}

func enum(vals []string) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }
