package agentshell

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

// AuditRecord is one line of state/audit/<session_id>.jsonl. Everything in it is redacted.
type AuditRecord struct {
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

type auditRecord = AuditRecord

type auditLog struct {
	mu  sync.Mutex
	f   *os.File
	id  string
	now func() time.Time
}

func openAudit(dir, id string, now func() time.Time) (*auditLog, error) {
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, id+".jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, fsutil.FileMode) //nolint:gosec // id is sanitized
	if err != nil {
		return nil, fmt.Errorf("open audit log %s: %w", path, err)
	}
	return &auditLog{f: f, id: id, now: now}, nil
}

// record appends one line; one write per record, so a reader never sees half a line unless the
// process dies mid-write, and then only the last one.
func (a *auditLog) record(r AuditRecord) {
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

func (a *auditLog) close() {
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
