package mcp

import (
	"fmt"
	"strings"

	"github.com/nexus-run/nexus/internal/shell"
)

// FormatExecResult is the readable text content of a session_exec result (the structured
// content carries the same fields as JSON).
func FormatExecResult(r shell.ExecResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d   duration: %d ms   cwd: %s\n", r.ExitCode, r.DurationMS, r.Cwd)
	if r.TimedOut {
		b.WriteString("timed out: the command was interrupted (exit_code 124); the session is still usable\n")
	}
	if r.ShellExited {
		b.WriteString("the shell exited: this session is closed; open a new one with session_create\n")
	}
	if r.Stdout == "" && r.Stderr == "" {
		b.WriteString("(no output)\n")
	}
	section(&b, "stdout", r.Stdout)
	section(&b, "stderr", r.Stderr)
	if r.Budget != nil {
		fmt.Fprintf(&b, "budget: stdout %s; stderr %s\n", streamReport(r.Budget.Stdout), streamReport(r.Budget.Stderr))
	}
	if r.Truncated {
		b.WriteString("truncated: part of the output was dropped; use a budget (grep, keep head/tail, max_chars) to see other parts\n")
	}
	return b.String()
}

func section(b *strings.Builder, name, text string) {
	if text == "" {
		return
	}
	fmt.Fprintf(b, "--- %s ---\n", name)
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n[no newline at end]\n")
	}
}

func streamReport(r shell.StreamReport) string {
	mode := r.Mode
	if mode == "" {
		mode = shell.KeepAll
	}
	return fmt.Sprintf("%d of %d lines kept (%s)", r.LinesKept, r.LinesTotal, mode)
}
