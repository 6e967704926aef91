package mcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/shell/audit"
)

// ReadAudit reads shell id's audit log in the server's audit directory (see audit.Reader.Read);
// audit.ErrNoAudit when the server keeps none.
func (s *Server) ReadAudit(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (audit.Batch, error) {
	return s.audit.Read(ctx, id, after, limit, wait) //nolint:wrapcheck // the reader names the log
}

// ErrShellClosed is returned by Shell for a shell that is no longer open but whose audit log
// is still there.
var ErrShellClosed = errors.New("shell closed")

// ShellLogs returns the shells whose audit logs the server's audit directory holds (open or
// not), newest first, at most limit; none without an audit log.
func (s *Server) ShellLogs(limit int) []audit.LogInfo {
	if s.audit == nil {
		return nil
	}
	return s.audit.Logs(limit)
}

// Shell describes the open shell id as session_list does. For a shell that is not open it
// returns ErrShellClosed when its audit log exists (with the reason of its close record when
// it has one), else audit.ErrUnknownSession.
func (s *Server) Shell(id string) (abi.Shell, error) {
	for _, in := range s.mgr.List() {
		if in.SessionID == id {
			return in, nil
		}
	}
	rec, err := s.audit.Last(id)
	if err != nil {
		return abi.Shell{}, err //nolint:wrapcheck // the reader names the log
	}
	if rec.Event == "close" {
		return abi.Shell{}, fmt.Errorf("%w: shell %q was closed (%s) at %s; its audit log is still readable", ErrShellClosed, id, rec.Reason, rec.Time)
	}
	return abi.Shell{}, fmt.Errorf("%w: shell %q is not open here (its audit log has no close record: another server's shell, or one whose server died); its audit log is still readable", ErrShellClosed, id)
}
