// Package audit is the agent shells' audit log: one JSON line per event of a shell, in
// <dir>/<session_id>.jsonl. The agent-shell manager writes it (Open, Log); the MCP server and
// the gateway read it line by line (Reader), and `nexus mcp watch` prints it as a transcript
// (Watch). Everything in it is redacted before it is written.
package audit

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// Record is one line of state/audit/<session_id>.jsonl. Everything in it is redacted.
type Record struct {
	Time       string   `json:"ts"`
	SessionID  string   `json:"session_id"`
	Event      string   `json:"event"` // open, exec, block, checkpoint, restore, close
	Transport  string   `json:"transport,omitempty"`
	Cwd        string   `json:"cwd,omitempty"`
	Command    string   `json:"command,omitempty"`
	ExitCode   *int     `json:"exit_code,omitempty"`
	DurationMS int64    `json:"duration_ms,omitempty"`
	Stdout     string   `json:"stdout,omitempty"`
	Stderr     string   `json:"stderr,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Truncated  bool     `json:"truncated,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Workspace  string   `json:"workspace,omitempty"`
	Checkpoint string   `json:"checkpoint_id,omitempty"`
	Allow      []string `json:"allow,omitempty"`
	Deny       []string `json:"deny,omitempty"`
}

// Log appends the records of one shell to its file. A nil *Log (the audit log is off) takes
// records and drops them.
type Log struct {
	mu  sync.Mutex
	f   *os.File
	id  string
	now func() time.Time
}

// Open creates or appends to dir/<id>.jsonl (the directory private, the file 0600, neither
// through a symbolic link). The caller vouches for id: it names a file in dir. now stamps
// each record.
func Open(dir, id string, now func() time.Time) (*Log, error) {
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, id+".jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, fsutil.FileMode) //nolint:gosec // id is sanitized
	if err != nil {
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	return &Log{f: f, id: id, now: now}, nil
}

// Append writes r as one line, stamped with the time and the shell's id; one write per record,
// so a reader never sees half a line unless the process dies mid-write, and then only the last
// one. A record that cannot be written is dropped: the shell's work goes on.
func (a *Log) Append(r Record) {
	if a == nil {
		return
	}
	r.Time = a.now().UTC().Format("2006-01-02T15:04:05.000Z")
	r.SessionID = a.id
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		_, _ = a.f.Write(append(b, '\n'))
	}
}

// Close closes the file; later records are dropped.
func (a *Log) Close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		_ = a.f.Close()
		a.f = nil
	}
}
