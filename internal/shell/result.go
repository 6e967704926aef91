// Package shell is the persistent shell engine for agents (docs/agent-shells.md): one long-lived shell per
// session over a transport (local, ssh, docker), commands framed so state persists and results
// are structured, output cleaned, redacted and budgeted, commands checked against policy, and
// the workspace checkpointed.
package shell

// ExecResult is the structured result of one command.
type ExecResult struct {
	// Command is the command as run, redacted.
	Command    string `json:"command"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	DurationMS int64  `json:"duration_ms"`
	// Cwd is $PWD after the command.
	Cwd string `json:"cwd"`
	// Truncated is true when a budget or the character cap dropped output.
	Truncated bool `json:"truncated"`
	// TimedOut is true when the command hit its timeout (exit_code is then 124).
	TimedOut bool `json:"timed_out"`
	// ShellExited is true when the command ended the shell (exit); the session is closed.
	ShellExited bool `json:"shell_exited,omitempty"`
	// Budget reports how a budget shaped each stream, when one did.
	Budget *BudgetReport `json:"budget,omitempty"`
}

// BudgetReport says what the budget kept of each stream.
type BudgetReport struct {
	Stdout StreamReport `json:"stdout"`
	Stderr StreamReport `json:"stderr"`
}

// StreamReport is the budget's account of one stream: lines_total counts every line the command
// printed, even when the middle was never held in memory.
type StreamReport struct {
	Mode       string `json:"mode"`
	LinesTotal int    `json:"lines_total"`
	LinesKept  int    `json:"lines_kept"`
}

// Keep modes of a budget.
const (
	KeepAll      = "all"
	KeepHead     = "head"
	KeepTail     = "tail"
	KeepHeadTail = "head_tail"
	// ModeGrep is the report's mode when a grep budget selected the lines.
	ModeGrep = "grep"
)

// DefaultMaxChars caps each stream of a result.
const DefaultMaxChars = 100_000

// Budget shapes a command's output before it reaches the agent.
type Budget struct {
	// Grep keeps only matching lines (with context); applied before Keep.
	Grep *Grep `json:"grep,omitempty"`
	// Keep is all, head, tail or head_tail; Lines is N for the last three.
	Keep  string `json:"keep,omitempty"`
	Lines int    `json:"lines,omitempty"`
	// MaxChars caps each stream (default 100,000).
	MaxChars int `json:"max_chars,omitempty"`
}

// Grep selects lines by regular expression (RE2 syntax), with Context lines around each match.
type Grep struct {
	Pattern string `json:"pattern"`
	Context int    `json:"context,omitempty"`
}
