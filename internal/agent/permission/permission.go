// Package permission decides what an ai-chat agent's tool call may touch: the permission level
// (YOLO, TRUSTED, SANDBOXED), per-tool settings, the one path decision function every path
// argument of every tool goes through (Checker.Resolve), the file operations on a decided path
// (through os.Root in SANDBOXED mode), and the confirmation decisions of TRUSTED mode with the
// allowances a user's answers leave (serializable, so a conversation can persist them).
// docs/ai-chat.md ("Tools and permissions") says what is and is not promised.
package permission

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Level is a conversation's permission level.
type Level string

// The levels.
const (
	// YOLO runs every call without asking; blocked paths and disabled tools still hold.
	YOLO Level = "yolo"
	// Trusted asks the user before a write outside the workspace, a read outside the workspace
	// and the allowed paths, and every shell command whose programs no allowance covers.
	Trusted Level = "trusted"
	// Sandboxed confines every path to the workspace (through os.Root) and refuses the shell.
	Sandboxed Level = "sandboxed"
)

// ParseLevel accepts a level's name in any case.
func ParseLevel(s string) (Level, error) {
	switch l := Level(strings.ToLower(strings.TrimSpace(s))); l {
	case YOLO, Trusted, Sandboxed:
		return l, nil
	}
	return "", fmt.Errorf("unknown permission level %q (want yolo, trusted or sandboxed)", s)
}

// DefaultTimeout is a tool call's timeout when neither the tool nor its settings give one.
const DefaultTimeout = 30 * time.Second

// DefaultMaxTimeout bounds the timeout a call may ask for itself (bash's timeout_secs) when
// Config.MaxTimeout does not; it is also the most any configured timeout may be.
const DefaultMaxTimeout = time.Hour

// ToolSettings are the operator's settings of one tool.
type ToolSettings struct {
	// Disabled refuses every call of the tool.
	Disabled bool `json:"disabled,omitempty"`
	// AllowedPaths, when set, are the only paths (files or directory trees) the tool may touch,
	// whatever the level; relative entries are relative to the workspace.
	AllowedPaths []string `json:"allowed_paths,omitempty"`
	// Timeout overrides the tool's own timeout.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// Config is a conversation's permission configuration (from the operator or the agent's
// config, never from the model).
type Config struct {
	Level Level
	// Workspace is the directory relative paths resolve against, and the sandbox.
	Workspace string
	// AllowedPaths are read without confirmation in TRUSTED mode, besides the workspace.
	AllowedPaths []string
	// BlockedPaths are never read or written, at any level; they win over every allowed path.
	BlockedPaths []string
	// Tools holds per-tool settings by tool name.
	Tools map[string]ToolSettings
	// AllowHardLinks lets SANDBOXED mode read and write regular files that have more than one
	// hard link. By default it does not: os.Root keeps every name inside the workspace, but a
	// hard link planted there is the same file as a name outside it, and which names a file
	// has elsewhere cannot be known cheaply. An operator whose workspaces hold hard links on
	// purpose (pnpm's node_modules, say) sets it.
	AllowHardLinks bool
	// MaxTimeout bounds the timeout a call asks for itself (default DefaultMaxTimeout).
	MaxTimeout time.Duration
}

// Checker applies one Config. It holds the sandbox's os.Root in SANDBOXED mode: Close it.
type Checker struct {
	level   Level
	ws      string // the workspace, absolute and with its symlinks resolved
	allowed []string
	blocked []blockedPath
	tools   map[string]toolRules
	root    *os.Root
	// oneLink: the sandbox refuses files with more than one hard link (Config.AllowHardLinks).
	oneLink    bool
	maxTimeout time.Duration
}

type blockedPath struct{ lexical, resolved string }

type toolRules struct {
	ToolSettings
	allowed []string // resolved
}

// New checks cfg and opens the sandbox when the level asks for one.
func New(cfg Config) (*Checker, error) {
	if _, err := ParseLevel(string(cfg.Level)); err != nil {
		return nil, err
	}
	if cfg.Workspace == "" {
		return nil, errors.New("permission: a workspace directory is required")
	}
	wsAbs, err := filepath.Abs(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("permission: workspace: %w", err)
	}
	ws, err := filepath.EvalSymlinks(wsAbs)
	if err != nil {
		return nil, fmt.Errorf("permission: workspace: %w", err)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("permission: workspace %q is not a directory", cfg.Workspace)
	}
	c := &Checker{level: Level(strings.ToLower(string(cfg.Level))), ws: ws, tools: map[string]toolRules{}, maxTimeout: cfg.MaxTimeout}
	if c.maxTimeout <= 0 {
		c.maxTimeout = DefaultMaxTimeout
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(ws, p)
	}
	// An allowed or blocked path that does not exist yet is kept as written: it may appear later.
	resolve := func(p string) string {
		if r, err := resolveExisting(abs(p)); err == nil {
			return r
		}
		return abs(p)
	}
	for _, p := range cfg.AllowedPaths {
		c.allowed = append(c.allowed, resolve(p))
	}
	for _, p := range cfg.BlockedPaths {
		c.blocked = append(c.blocked, blockedPath{lexical: abs(p), resolved: resolve(p)})
	}
	for name, ts := range cfg.Tools {
		tr := toolRules{ToolSettings: ts}
		for _, p := range ts.AllowedPaths {
			tr.allowed = append(tr.allowed, resolve(p))
		}
		c.tools[name] = tr
	}
	if c.level == Sandboxed {
		r, err := os.OpenRoot(ws)
		if err != nil {
			return nil, fmt.Errorf("permission: open the sandbox: %w", err)
		}
		c.root = r
		c.oneLink = !cfg.AllowHardLinks
	}
	return c, nil
}

// Close releases the sandbox.
func (c *Checker) Close() error {
	if c.root == nil {
		return nil
	}
	return c.root.Close() //nolint:wrapcheck // closing a directory handle has nothing to add
}

// Level is the checker's level.
func (c *Checker) Level() Level { return c.level }

// Workspace is the workspace directory, absolute with its symlinks resolved.
func (c *Checker) Workspace() string { return c.ws }

// ToolEnabled reports whether calls of tool may run at all. An unconfined tool (the shell, an
// MCP server's tool: what they touch is not given by path arguments) is never enabled in
// SANDBOXED mode, since the sandbox could not hold it.
func (c *Checker) ToolEnabled(tool string, unconfined bool) error {
	if c.tools[tool].Disabled {
		return fmt.Errorf("tool %s is disabled in this conversation", tool)
	}
	if unconfined && c.level == Sandboxed {
		return fmt.Errorf("tool %s is not available at permission level sandboxed: what it touches cannot be confined to the workspace", tool)
	}
	return nil
}

// Timeout is tool's timeout: its setting, else def, else DefaultTimeout.
func (c *Checker) Timeout(tool string, def time.Duration) time.Duration {
	if t := c.tools[tool].Timeout; t > 0 {
		return t
	}
	if def > 0 {
		return def
	}
	return DefaultTimeout
}

// MaxTimeout is the longest timeout a call may ask for itself.
func (c *Checker) MaxTimeout() time.Duration { return c.maxTimeout }
