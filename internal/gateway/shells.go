package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/shell/audit"
)

// The events of a shell's audit stream: one per line of its audit log (docs/ABI.md).
const (
	// EventAudit is the event of an audit line.
	EventAudit abi.EventType = "audit"
	// PayloadShellAudit is its payload's type.
	PayloadShellAudit = "shell-audit"
)

// ShellAuditPayload is the payload of an audit event: the audit record as the log holds it
// (docs/agent-shells.md, "Lifecycle and audit").
type ShellAuditPayload struct {
	Type   string          `json:"type"`
	Record json.RawMessage `json:"record"`
}

// shellError maps the shells' errors to the ABI's.
func shellError(id string, err error) error {
	switch {
	case errors.Is(err, audit.ErrUnknownSession):
		return abi.Errorf(abi.CodeSessionNotFound, id, "%v", err)
	case errors.Is(err, mcp.ErrShellClosed):
		return abi.Errorf(abi.CodeSessionClosed, id, "%v", err)
	case errors.Is(err, audit.ErrBadSessionID):
		return abi.Errorf(abi.CodeInvalidArgument, id, "%v", err)
	case errors.Is(err, audit.ErrNoAudit):
		return abi.Errorf(abi.CodeCapabilityUnsupported, id, "this gateway keeps no audit log of its shells")
	}
	return abi.Errorf(abi.CodeInternal, id, "%v", err)
}

// shellList answers GET /v1/shells: the open shells, as session_list gives them; with
// ?logs=N also the newest N audit logs of the audit directory, open or closed shells (the
// console lists them; a companion shell of a terminal is one).
func (s *server) shellList(w http.ResponseWriter, r *http.Request) {
	out := struct {
		mcp.ListOutput
		Logs []audit.LogInfo `json:"logs,omitempty"`
	}{ListOutput: mcp.ListOutput{Sessions: s.opt.Shells.Manager().List()}}
	if v := r.URL.Query().Get("logs"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "logs must be a count from 0 to 1000, got %q", v), 0)
			return
		}
		out.Logs = s.opt.Shells.ShellLogs(n)
	}
	s.writeJSON(w, http.StatusOK, out)
}

// shellGet answers GET /v1/shells/{id}: an open shell as session_list describes it;
// SESSION_CLOSED for one whose audit log is all that is left.
func (s *server) shellGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	info, err := s.opt.Shells.Shell(id)
	if err != nil {
		s.fail(w, shellError(id, err), 0)
		return
	}
	s.writeJSON(w, http.StatusOK, info)
}

// auditEvent wraps one audit line in the event envelope. Its seq is the line's number in the
// log, so a reader resumes with after= as with a live session's events.
func auditEvent(id string, l audit.Line) ([]byte, error) {
	payload, err := json.Marshal(ShellAuditPayload{Type: PayloadShellAudit, Record: l.Record})
	if err != nil {
		return nil, err //nolint:wrapcheck // a record read as JSON encodes again
	}
	return json.Marshal(abi.Event{Event: EventAudit, Timestamp: l.Time, SessionID: id, Seq: l.Seq, Payload: payload}) //nolint:wrapcheck // see above
}

// shellEvents answers GET /v1/shells/{id}/events?after=N&limit=N&wait=D: a long-poll over the
// shell's audit lines, shaped as /v1/sessions/{id}/events answers.
func (s *server) shellEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := s.params(r)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	b, err := s.opt.Shells.ReadAudit(r.Context(), id, p.after, p.limit, p.wait)
	if err != nil {
		s.fail(w, shellError(id, err), 0)
		return
	}
	buf := append(make([]byte, 0, 256), `{"events":[`...)
	for i, l := range b.Lines {
		ev, err := auditEvent(id, l)
		if err != nil {
			s.fail(w, shellError(id, err), 0)
			return
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, ev...)
	}
	buf = append(buf, `],"next":`...)
	buf = strconv.AppendUint(buf, b.Next, 10)
	buf = append(buf, `,"closed":`...)
	buf = strconv.AppendBool(buf, b.Closed)
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	s.writeDeadline(w)
	_, _ = w.Write(buf) //nolint:gosec // JSON built from the audit log's own JSON lines, served as application/json
}

// shellStream serves GET /v1/shells/{id}/stream?after=N: the shell's audit lines over a
// WebSocket, one text message per event, as /v1/sessions/{id}/stream sends a session's; the
// server closes with 1000 after the close record. It takes no messages from the client.
func (s *server) shellStream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := s.params(r)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	// Refuse an unknown shell (and a plain GET) with the ABI's error before upgrading.
	if _, err := s.opt.Shells.ReadAudit(r.Context(), id, p.after, 1, 0); err != nil {
		s.fail(w, shellError(id, err), 0)
		return
	}
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, id, "%s is a WebSocket endpoint: send a WebSocket upgrade request (or poll .../events)", r.URL.Path), http.StatusUpgradeRequired)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer func() { _ = c.CloseNow() }()
	// The client sends nothing; reading notices it going away.
	ctx := c.CloseRead(r.Context())
	after := p.after
	for {
		b, err := s.opt.Shells.ReadAudit(ctx, id, after, 0, 30*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				_ = c.Close(websocket.StatusInternalError, shellError(id, err).Error())
			}
			return
		}
		for _, l := range b.Lines {
			ev, err := auditEvent(id, l)
			if err != nil {
				_ = c.Close(websocket.StatusInternalError, err.Error())
				return
			}
			wctx, cancel := context.WithTimeout(ctx, s.opt.WriteTimeout)
			err = c.Write(wctx, websocket.MessageText, ev)
			cancel()
			if err != nil {
				return
			}
		}
		after = b.Next
		if b.Closed {
			_ = c.Close(websocket.StatusNormalClosure, "shell closed")
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}
