// Package acptest is a small ACP agent built on the protocol's Go SDK (the agent side of the
// connection nexus's engine is the client side of), for tests: a real peer over stdio, in a
// process of its own, whose turns are scripted by the prompt's first word. A test binary
// becomes the agent when its TestMain calls Main first (the variable EnvAgent set).
//
// Prompts: hello (a thought, then "Hello, world"), tool (a read call that completes), perm
// (an execute call that asks for permission, then says what was chosen), wait (a chunk, then
// nothing until session/cancel), crash (exits with status 3 mid-turn, "boom" on stderr),
// whoami (the session id, whether it was loaded, the process id); anything else is echoed.
// Sessions are files in EnvDir, so a new process can load one (session/load).
package acptest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	acp "github.com/coder/acp-go-sdk"
)

// Environment of the agent process.
const (
	// EnvAgent set to 1 makes Main serve the agent on stdio and exit.
	EnvAgent = "NEXUS_ACPTEST_AGENT"
	// EnvDir is where sessions are kept (required).
	EnvDir = "NEXUS_ACPTEST_DIR"
	// EnvNoLoad set to 1: the agent does not offer session/load.
	EnvNoLoad = "NEXUS_ACPTEST_NOLOAD"
)

// Main serves the agent on stdin/stdout and exits when EnvAgent is 1; otherwise it returns.
func Main() {
	if os.Getenv(EnvAgent) == "1" {
		Serve()
	}
}

// Serve serves the agent on stdin/stdout until the client goes, then exits.
func Serve() {
	a := &agent{dir: os.Getenv(EnvDir), loaded: map[acp.SessionId]bool{}}
	// SetLogger races with the connection's reader (an SDK bug): the reader waits for it.
	gate := make(chan struct{})
	conn := acp.NewAgentSideConnection(a, os.Stdout, gated{r: os.Stdin, open: gate})
	conn.SetLogger(slog.New(slog.DiscardHandler))
	close(gate)
	a.conn = conn
	<-conn.Done()
	os.Exit(0)
}

type agent struct {
	conn *acp.AgentSideConnection
	dir  string
	seq  atomic.Int64

	mu     sync.Mutex
	loaded map[acp.SessionId]bool
}

var _ acp.AgentLoader = (*agent)(nil)

func (a *agent) Initialize(context.Context, acp.InitializeRequest) (acp.InitializeResponse, error) {
	return acp.InitializeResponse{
		ProtocolVersion:   acp.ProtocolVersionNumber,
		AgentCapabilities: acp.AgentCapabilities{LoadSession: os.Getenv(EnvNoLoad) != "1"},
		AgentInfo:         &acp.Implementation{Name: "acptest", Version: "1"},
		AuthMethods:       []acp.AuthMethod{},
	}, nil
}

func (a *agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

func (a *agent) NewSession(_ context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	id := acp.SessionId(fmt.Sprintf("s-%d-%d", os.Getpid(), a.seq.Add(1)))
	if err := os.WriteFile(filepath.Join(a.dir, string(id)), []byte(p.Cwd), 0o600); err != nil {
		return acp.NewSessionResponse{}, err
	}
	return acp.NewSessionResponse{SessionId: id}, nil
}

func (a *agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	if _, err := os.Stat(filepath.Join(a.dir, filepath.Base(string(p.SessionId)))); err != nil {
		return acp.LoadSessionResponse{}, acp.NewInvalidParams(map[string]any{"error": "no session " + string(p.SessionId)})
	}
	a.mu.Lock()
	a.loaded[p.SessionId] = true
	a.mu.Unlock()
	// The history is replayed, as the protocol asks: the client must not take it for a turn.
	for _, u := range []acp.SessionUpdate{acp.UpdateUserMessageText("earlier question"), acp.UpdateAgentMessageText("REPLAYED earlier answer")} {
		if err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
			return acp.LoadSessionResponse{}, err
		}
	}
	return acp.LoadSessionResponse{}, nil
}

func (a *agent) Cancel(context.Context, acp.CancelNotification) error { return nil }

func (a *agent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, nil
}

func (a *agent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionList)
}

func (a *agent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionResume)
}

func (a *agent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

func (a *agent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, nil
}

func (a *agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	var text string
	for _, b := range p.Prompt {
		if b.Text != nil {
			text += b.Text.Text
		}
	}
	sid := p.SessionId
	send := func(u acp.SessionUpdate) error {
		return a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: sid, Update: u})
	}
	done := acp.PromptResponse{StopReason: acp.StopReasonEndTurn}
	word, _, _ := strings.Cut(strings.TrimSpace(text), " ")
	switch word {
	case "hello":
		for _, u := range []acp.SessionUpdate{acp.UpdateAgentThoughtText("thinking it over"), acp.UpdateAgentMessageText("Hello"), acp.UpdateAgentMessageText(", world")} {
			if err := send(u); err != nil {
				return acp.PromptResponse{}, err
			}
		}
	case "tool":
		steps := []acp.SessionUpdate{
			acp.StartToolCall("call-1", "Read notes.txt", acp.WithStartKind(acp.ToolKindRead), acp.WithStartStatus(acp.ToolCallStatusPending),
				acp.WithStartLocations([]acp.ToolCallLocation{{Path: "/w/notes.txt"}}), acp.WithStartRawInput(map[string]any{"path": "/w/notes.txt"})),
			acp.UpdateToolCall("call-1", acp.WithUpdateStatus(acp.ToolCallStatusInProgress)),
			acp.UpdateToolCall("call-1", acp.WithUpdateStatus(acp.ToolCallStatusCompleted),
				acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock("apricot marmalade"))})),
			acp.UpdateAgentMessageText("The notes say apricot."),
		}
		for _, u := range steps {
			if err := send(u); err != nil {
				return acp.PromptResponse{}, err
			}
		}
	case "perm":
		if err := send(acp.StartToolCall("call-rm", "rm -rf build", acp.WithStartKind(acp.ToolKindExecute),
			acp.WithStartStatus(acp.ToolCallStatusPending), acp.WithStartRawInput(map[string]any{"command": "rm -rf build"}))); err != nil {
			return acp.PromptResponse{}, err
		}
		resp, err := a.conn.RequestPermission(ctx, acp.RequestPermissionRequest{
			SessionId: sid,
			ToolCall: acp.ToolCallUpdate{ToolCallId: "call-rm", Title: acp.Ptr("rm -rf build"), Kind: acp.Ptr(acp.ToolKindExecute),
				RawInput: map[string]any{"command": "rm -rf build"}},
			Options: []acp.PermissionOption{
				{Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow", OptionId: "yes"},
				{Kind: acp.PermissionOptionKindAllowAlways, Name: "Always", OptionId: "always"},
				{Kind: acp.PermissionOptionKindRejectOnce, Name: "Reject", OptionId: "no"},
			},
		})
		if err != nil {
			return acp.PromptResponse{}, err
		}
		if resp.Outcome.Cancelled != nil || ctx.Err() != nil {
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		}
		chosen := string(resp.Outcome.Selected.OptionId)
		status := acp.ToolCallStatusCompleted
		if chosen == "no" {
			status = acp.ToolCallStatusFailed
		}
		if err := send(acp.UpdateToolCall("call-rm", acp.WithUpdateStatus(status),
			acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock("option " + chosen))}))); err != nil {
			return acp.PromptResponse{}, err
		}
		if err := send(acp.UpdateAgentMessageText("chose " + chosen)); err != nil {
			return acp.PromptResponse{}, err
		}
	case "wait":
		if err := send(acp.UpdateAgentMessageText("waiting")); err != nil {
			return acp.PromptResponse{}, err
		}
		<-ctx.Done() // session/cancel cancels the prompt's context
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	case "crash":
		if err := send(acp.UpdateAgentMessageText("bye")); err != nil {
			return acp.PromptResponse{}, err
		}
		fmt.Fprintln(os.Stderr, "boom")
		os.Exit(3)
	case "whoami":
		a.mu.Lock()
		loaded := a.loaded[sid]
		a.mu.Unlock()
		if err := send(acp.UpdateAgentMessageText(fmt.Sprintf("session %s loaded=%v pid=%d", sid, loaded, os.Getpid()))); err != nil {
			return acp.PromptResponse{}, err
		}
	default:
		if err := send(acp.UpdateAgentMessageText("echo: " + text)); err != nil {
			return acp.PromptResponse{}, err
		}
	}
	return done, nil
}

type gated struct {
	r    io.Reader
	open <-chan struct{}
}

func (g gated) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
