// Package tools is the ai-chat agent's tools: the Tool interface, the registry that resolves a
// name (built-ins first, then MCP servers' tools as mcp_<server>_<tool>), argument checks
// (size, then the tool's JSON schema), the permission decision of each call (package
// permission) and its timeout, and the built-in tools: read_file, write_file, edit_file,
// copy_file, list_dir, glob, grep and bash (a persistent agent shell, package agentshell).
// docs/ai-chat.md ("Tools and permissions") says what is and is not promised.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/agent/permission"
)

// Paths are a tool's path semantics: the names of its top-level string arguments that are
// paths it reads, paths it writes, and which of them a confirmation request shows. Command
// names the argument holding a shell command line (the shell tool only).
type Paths struct {
	Reads   []string
	Writes  []string
	Show    []string
	Command string
}

// Spec describes a tool.
type Spec struct {
	Name        string
	Description string
	Schema      *jsonschema.Schema
	Paths       Paths
	// Timeout is the tool's own timeout; zero means permission.DefaultTimeout (30 s).
	// A configured per-tool timeout replaces it.
	Timeout time.Duration
}

// Result is what a tool call gives back to the model.
type Result struct {
	// Output is the text the model reads.
	Output string `json:"output"`
	// IsError marks a result that reports a failure the model should see (a command's exit
	// status is not one).
	IsError bool `json:"is_error,omitempty"`
}

// Tool is one tool. Run gets arguments that passed the size and schema checks and the
// permission decision; it decides each path argument again (Checker.Resolve) when it uses it.
type Tool interface {
	Spec() Spec
	Run(ctx context.Context, args json.RawMessage) (Result, error)
}

// Cwder is a shell tool that knows the directory its next command runs in (what an
// allow-exec-cwd allowance is about).
type Cwder interface {
	Cwd() string
}

// CallTimeouter is a tool whose call may ask for its own timeout (bash's timeout_secs): it
// replaces the tool's configured one for that call, up to the checker's MaxTimeout. Such a
// tool enforces its timeout itself and reports it: the call's context lasts callGrace longer.
type CallTimeouter interface {
	CallTimeout(args json.RawMessage) time.Duration
}

// callGrace is how long past its timeout a CallTimeouter's context lasts: the shell interrupts
// the command at its timeout and needs a moment to report.
const callGrace = 5 * time.Second

// MaxFieldBytes is the largest JSON string (value or key) a tool call's arguments may hold.
const MaxFieldBytes = 10 << 20

// ErrArguments marks arguments refused before the tool runs.
var ErrArguments = errors.New("invalid arguments")

func decodeArgs(args json.RawMessage, v any) error {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("%w: %w", ErrArguments, err)
	}
	return nil
}

// decidedKey carries, in a call's context, what each path argument resolved to when Prepare
// decided the call.
type decidedKey struct{}

type decided map[string]string

// resolve is how a tool decides a path argument when it uses it: Checker.Resolve again, and,
// for a call Prepare decided, the same resolution as then. A link swapped in between (by a
// parallel call, say) would otherwise take an allowed path somewhere no one confirmed.
func resolve(ctx context.Context, perm *permission.Checker, tool, arg string, acc permission.Access) (permission.Path, error) {
	p, err := perm.Resolve(tool, arg, acc)
	if err != nil {
		return permission.Path{}, err //nolint:wrapcheck // the refusal is the message
	}
	if d, ok := ctx.Value(decidedKey{}).(decided); ok {
		if abs, ok := d[arg]; ok && abs != p.Abs {
			return permission.Path{}, fmt.Errorf("%w: %s resolves elsewhere than when the call was decided (a symbolic link changed): call again", permission.ErrRefused, clipName(fmt.Sprintf("%q", arg)))
		}
	}
	return p, nil
}

// Timeouts: applied by Prepared.Run.
func runWithTimeout(ctx context.Context, t Tool, timeout, grace time.Duration, args json.RawMessage) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+grace)
	defer cancel()
	res, err := t.Run(ctx, args)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return Result{}, fmt.Errorf("%s timed out after %s: %w", t.Spec().Name, timeout, err)
	}
	return res, err
}

func ptr[T any](v T) *T { return &v }

// schemaFor infers a schema from an argument type, then lets adjust add bounds.
func schemaFor[T any](adjust func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err) // the argument types are this package's own: a failure is a bug
	}
	if adjust != nil {
		adjust(s)
	}
	return s
}
