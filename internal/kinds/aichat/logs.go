package aichat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

// rawRecord is one line of raw.jsonl.
type rawRecord struct {
	Time    string            `json:"time"`
	Dir     string            `json:"dir"` // request, response, chunk, error
	Method  string            `json:"method,omitempty"`
	URL     string            `json:"url,omitempty"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

func (l *logs) rawLine(r rawRecord) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.raw == nil {
		return
	}
	r.Time = abi.FormatTime(l.now())
	r.Body = l.red.Redact(r.Body)
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	_, _ = l.raw.Write(append(b, '\n'))
}

// credentialHeader reports headers that carry keys: they are left out of raw.jsonl.
func credentialHeader(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "auth") || strings.Contains(n, "key") || strings.Contains(n, "token") || strings.Contains(n, "cookie") || strings.Contains(n, "secret")
}

func headers(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if credentialHeader(k) {
			out[k] = "[REDACTED]"
			continue
		}
		out[k] = strings.Join(v, ", ")
	}
	return out
}

// maxRawBody bounds a request body copied into raw.jsonl.
const maxRawBody = 1 << 20

// rawTransport records each exchange with the provider in raw.jsonl.
type rawTransport struct {
	next http.RoundTripper
	logs *logs
}

func (t *rawTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	rec := rawRecord{Dir: "request", Method: req.Method, URL: redactURL(req), Headers: headers(req.Header)}
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxRawBody))
			_ = body.Close()
			rec.Body = string(b)
		}
	}
	t.logs.rawLine(rec)
	resp, err := next.RoundTrip(req)
	if err != nil {
		t.logs.rawLine(rawRecord{Dir: "error", Body: err.Error()})
		return nil, err //nolint:wrapcheck // a transport passes its errors through
	}
	t.logs.rawLine(rawRecord{Dir: "response", Status: resp.StatusCode, Headers: headers(resp.Header)})
	resp.Body = &rawBody{rc: resp.Body, logs: t.logs}
	return resp, nil
}

func redactURL(req *http.Request) string {
	u := *req.URL
	u.User = nil
	q := u.Query()
	for k := range q {
		if credentialHeader(k) {
			q.Set(k, "[REDACTED]")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// rawBody logs a response body line by line as the SDK reads it (a stream's chunks).
type rawBody struct {
	rc      io.ReadCloser
	logs    *logs
	pending bytes.Buffer
}

func (b *rawBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.pending.Write(p[:n])
	for {
		line, rerr := b.pending.ReadBytes('\n')
		if rerr != nil {
			// An incomplete line waits for the rest (at most 1 MiB of it).
			if b.pending.Len() == 0 && len(line) < maxRawBody {
				b.pending.Write(line)
			} else if len(line) > 0 {
				b.logs.rawLine(rawRecord{Dir: "chunk", Body: string(line)})
			}
			break
		}
		if s := strings.TrimRight(string(line), "\r\n"); s != "" {
			b.logs.rawLine(rawRecord{Dir: "chunk", Body: s})
		}
	}
	if err != nil && b.pending.Len() > 0 {
		b.logs.rawLine(rawRecord{Dir: "chunk", Body: b.pending.String()})
		b.pending.Reset()
	}
	return n, err //nolint:wrapcheck // a body passes its reader's errors through
}

func (b *rawBody) Close() error { return b.rc.Close() } //nolint:wrapcheck // passed through
