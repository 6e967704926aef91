package aichat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/shell/output"
)

// LogOptions switch a conversation's logs (state/logs/<session id>/) on and off.
type LogOptions struct {
	// Context is context.md: the conversation as the model sees it (system prompt, messages,
	// tool calls and results).
	Context bool
	// Verbose is verbose.md: every turn event with its time, thinking, token counts.
	Verbose bool
	// Raw is raw.jsonl: each HTTP request, response and stream chunk exchanged with the provider.
	Raw bool
}

// logs are one session's log files. Every method is a no-op on a nil *logs. Everything
// written passes the shells' redactor, and HTTP headers that carry credentials are dropped.
type logs struct {
	mu      sync.Mutex
	now     func() time.Time
	red     *output.Redactor
	ctx     *os.File
	verbose *os.File
	raw     *os.File
	start   time.Time
}

func openLogs(dir string, o LogOptions, now func() time.Time) (*logs, error) {
	if !o.Context && !o.Verbose && !o.Raw {
		return nil, nil
	}
	if err := fsutil.MkdirPrivate(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	l := &logs{now: now, red: output.NewRedactor(), start: now()}
	open := func(on bool, name string) (*os.File, error) {
		if !on {
			return nil, nil
		}
		f, err := fsutil.CreateExclusive(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("logs: %w", err)
		}
		return f, nil
	}
	var err error
	if l.ctx, err = open(o.Context, "context.md"); err == nil {
		if l.verbose, err = open(o.Verbose, "verbose.md"); err == nil {
			l.raw, err = open(o.Raw, "raw.jsonl")
		}
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *logs) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range []*os.File{l.ctx, l.verbose, l.raw} {
		if f != nil {
			_ = f.Close()
		}
	}
	l.ctx, l.verbose, l.raw = nil, nil, nil
}

func (l *logs) write(f *os.File, s string) {
	if f == nil {
		return
	}
	_, _ = f.WriteString(l.red.Redact(s))
}

func (l *logs) system(prompt string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(l.ctx, "## system\n\n"+prompt+"\n\n")
}

func (l *logs) message(m provider.Message) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		return
	}
	var b strings.Builder
	switch m.Role {
	case provider.RoleToolResult:
		status := "ok"
		if m.IsError {
			status = "error"
		}
		fmt.Fprintf(&b, "## tool result: %s (%s, %s)\n\n", m.ToolName, m.ToolCallID, status)
	default:
		fmt.Fprintf(&b, "## %s\n\n", m.Role)
	}
	for _, c := range m.Content {
		switch c.Type {
		case provider.BlockText:
			b.WriteString(c.Text + "\n\n")
		case provider.BlockThinking:
			b.WriteString("> (thinking) " + strings.ReplaceAll(c.Thinking, "\n", "\n> ") + "\n\n")
		case provider.BlockToolCall:
			fmt.Fprintf(&b, "→ %s(%s) [%s]\n\n", c.Name, c.Arguments, c.ID)
		}
	}
	if m.Role == provider.RoleAssistant && m.StopReason != provider.StopEndTurn && m.StopReason != provider.StopToolUse {
		fmt.Fprintf(&b, "(stopped: %s %s)\n\n", m.StopReason, m.ErrorMessage)
	}
	l.write(l.ctx, b.String())
}

func (l *logs) event(ev agent.Event) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.verbose == nil {
		return
	}
	at := l.now().Sub(l.start).Seconds()
	var line string
	switch ev.Type {
	case agent.EventToken:
		return // the text is in context.md; verbose.md would double it per token
	case agent.EventStatus:
		line = "status " + ev.Status
	case agent.EventReasoning:
		line = "thinking: " + ev.Content
	case agent.EventUsage:
		u := ev.Usage
		line = fmt.Sprintf("usage input %d output %d cache-read %d cache-write %d reasoning %d", u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Reasoning)
	case agent.EventToolDetected, agent.EventToolStarted:
		line = fmt.Sprintf("%s %s %s", ev.Type, ev.Call.Name, ev.Call.ID)
	case agent.EventToolCompleted:
		line = fmt.Sprintf("%s %s %s error=%v (%d bytes)", ev.Type, ev.Call.Name, ev.Call.ID, ev.IsError, len(ev.Output))
	case agent.EventBatchStarted:
		line = fmt.Sprintf("batch of %d, parallel=%v", ev.Calls, ev.Parallel)
	case agent.EventIterationCompleted:
		line = fmt.Sprintf("iteration %d done, continue=%v", ev.Iteration, ev.WillContinue)
	default:
		line = string(ev.Type) + " " + ev.Reason
	}
	l.write(l.verbose, fmt.Sprintf("- `+%.3fs` %s\n", at, line))
}

func (l *logs) turnEnded(p abi.AITurn) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, _ := json.Marshal(p)
	l.write(l.verbose, fmt.Sprintf("- `+%.3fs` turn ended %s\n", l.now().Sub(l.start).Seconds(), b))
}

func (l *logs) verbosef(format string, args ...any) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.write(l.verbose, fmt.Sprintf("- `+%.3fs` ", l.now().Sub(l.start).Seconds())+fmt.Sprintf(format, args...)+"\n")
}

// rawLog is where the provider records its HTTP exchanges (raw.jsonl), nil when it is off:
// the provider owns the requests and so logs them; the session only says where, and redacts
// as in its other logs.
func (l *logs) rawLog() *provider.RawLog {
	if l == nil || l.raw == nil {
		return nil
	}
	return provider.NewRawLog(l.raw, l.now, l.red.Redact)
}
