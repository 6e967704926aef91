package acpengine

import (
	"context"

	acp "github.com/coder/acp-go-sdk"
)

// client is nexus's side of the connection: updates go to the running turn, permission
// requests to its Confirm; fs and terminal methods are not offered (see the package comment)
// and are refused if called.
type client struct{ e *Engine }

var _ acp.Client = (*client)(nil)

// current is the running turn of session sid, nil when none.
func (c *client) current(sid acp.SessionId) *turn {
	c.e.turnMu.Lock()
	defer c.e.turnMu.Unlock()
	if t := c.e.turn; t != nil && t.sid == sid {
		return t
	}
	return nil
}

func (c *client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	// Updates between turns (a session/load's replay) are already in the transcript.
	if t := c.current(n.SessionId); t != nil {
		t.update(n.Update)
	}
	return nil
}

func (c *client) RequestPermission(_ context.Context, req acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	t := c.current(req.SessionId)
	if t == nil {
		return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}, nil
	}
	// The turn's context, not the request's: an interrupt answers the request cancelled,
	// as the protocol asks of a client that cancels.
	return acp.RequestPermissionResponse{Outcome: t.permission(t.ctx, req)}, nil
}

func (c *client) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}

func (c *client) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}

func (c *client) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}
