// Package acpagent is `nexus acp`: nexus as an Agent Client Protocol agent on stdio, backed by
// the gateway's ai-chat sessions (docs/acp.md). An ACP session is a nexus conversation: its
// session id is the conversation's key, so the editor's chat is one the CLI, the console, the
// queue, triggers and the history index all see, and session/load opens any of them again.
// Each ACP session holds one ai-chat live session of the gateway while this process runs.
package acpagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatclient"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/conversation"
)

// Config is what `nexus acp` is started with.
type Config struct {
	// Client reaches the gateway.
	Client *client.Client
	// Options open every ai-chat session (agent, backend, model, level, thinking...); the
	// workspace is the editor's cwd, the level the session's mode.
	Options abi.AIChatOptions
	Version string
	Logger  *slog.Logger
}

// Agent serves one editor connection.
type Agent struct {
	cfg  Config
	log  *slog.Logger
	conn *acp.AgentSideConnection

	mu       sync.Mutex
	caps     acp.ClientCapabilities
	sessions map[string]*session // by conversation key
}

// session is one ACP session: a conversation and the ai-chat live session open on it.
type session struct {
	key string

	mu        sync.Mutex
	sid       string // the live session
	level     string
	workspace string
	mcp       []abi.AIMCPServer // the editor's MCP servers, started with each live session
	prompts   int               // prompts running
	// cancels end the running prompts (session/cancel), by a number of their own.
	cancels map[uint64]context.CancelFunc
	next    uint64
}

func (s *session) live() (sid, workspace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sid, s.workspace
}

func (s *session) workspaceNow() string {
	_, ws := s.live()
	return ws
}

// modes is the session's mode state, with its live session's id.
func (s *session) modes() (*acp.SessionModeState, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return modeState(s.level), s.sid
}

var (
	_ acp.Agent       = (*Agent)(nil)
	_ acp.AgentLoader = (*Agent)(nil)
)

// New returns an agent for one connection.
func New(cfg Config) *Agent {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, log: log, sessions: map[string]*session{}}
}

// Serve speaks ACP on in and out until in ends or ctx does, then closes the live sessions it
// opened (their conversations stay).
func (a *Agent) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	w := &lockedWriter{w: out}
	g := newGuard(in, w, ctx.Done(), a.log)
	g.notify = a.notification
	a.conn = acp.NewAgentSideConnection(a, w, g)
	a.conn.SetLogger(a.log)
	close(g.start)
	select {
	case <-a.conn.Done():
	case <-ctx.Done():
	}
	return a.closeAll(context.WithoutCancel(ctx))
}

func (a *Agent) closeAll(ctx context.Context) error {
	a.mu.Lock()
	all := make([]*session, 0, len(a.sessions))
	for _, s := range a.sessions {
		all = append(all, s)
	}
	a.sessions = map[string]*session{}
	a.mu.Unlock()
	var errs []error
	for _, s := range all {
		if err := a.closeLive(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (a *Agent) closeLive(ctx context.Context, s *session) error {
	sid, _ := s.live()
	if sid == "" {
		return nil
	}
	_, err := a.cfg.Client.Control(ctx, sid, abi.ControlRequest{Command: abi.CommandClose})
	if err != nil && !gone(err) {
		return fmt.Errorf("close ai-chat %s: %w", sid, err)
	}
	return nil
}

// Initialize answers with ACP version 1 (the only one there is) and what nexus offers.
func (a *Agent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	a.mu.Lock()
	a.caps = p.ClientCapabilities
	a.mu.Unlock()
	return acp.InitializeResponse{
		ProtocolVersion: acp.ProtocolVersionNumber,
		AgentInfo:       &acp.Implementation{Name: "nexus", Title: acp.Ptr("nexus"), Version: a.cfg.Version},
		AgentCapabilities: acp.AgentCapabilities{
			LoadSession:        true,
			PromptCapabilities: acp.PromptCapabilities{EmbeddedContext: true},
			// Stdio (the baseline), Streamable HTTP and SSE MCP servers: see clientMCP.
			McpCapabilities: acp.McpCapabilities{Http: true, Sse: true},
			SessionCapabilities: acp.SessionCapabilities{
				List:   &acp.SessionListCapabilities{},
				Resume: &acp.SessionResumeCapabilities{},
				Close:  &acp.SessionCloseCapabilities{},
			},
		},
		// The gateway's own socket (or NEXUS_TOKEN for a TCP gateway) is the authentication.
		AuthMethods: []acp.AuthMethod{},
	}, nil
}

// Authenticate is never needed: no method is offered.
func (a *Agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}

// clientMCP turns the editor's MCP servers into the session's own: the gateway starts the
// stdio ones for the session and dials the HTTP and SSE ones with their headers. ACP-transport
// ones (unstable) are reported as not connected.
func (a *Agent) clientMCP(servers []acp.McpServer) ([]abi.AIMCPServer, map[string]any) {
	var out []abi.AIMCPServer
	var skipped []string
	headers := func(hs []acp.HttpHeader) map[string]string {
		if len(hs) == 0 {
			return nil
		}
		m := map[string]string{}
		for _, h := range hs {
			m[h.Name] = h.Value
		}
		return m
	}
	for _, m := range servers {
		switch {
		case m.Stdio != nil:
			env := map[string]string{}
			for _, e := range m.Stdio.Env {
				env[e.Name] = e.Value
			}
			out = append(out, abi.AIMCPServer{Name: m.Stdio.Name, Command: m.Stdio.Command, Args: m.Stdio.Args, Env: env})
		case m.Http != nil:
			out = append(out, abi.AIMCPServer{Name: m.Http.Name, Type: abi.MCPHTTP, URL: m.Http.Url, Headers: headers(m.Http.Headers)})
		case m.Sse != nil:
			out = append(out, abi.AIMCPServer{Name: m.Sse.Name, Type: abi.MCPSSE, URL: m.Sse.Url, Headers: headers(m.Sse.Headers)})
		case m.Acp != nil:
			skipped = append(skipped, m.Acp.Name)
		}
	}
	if len(skipped) == 0 {
		return out, nil
	}
	msg := "not connected: nexus connects an editor's stdio, http and sse MCP servers (not acp)"
	a.log.Warn("some of the editor's MCP servers are not connected", "servers", skipped, "why", msg)
	return out, map[string]any{"notConnected": skipped, "why": msg}
}

func meta(sid string, mcp map[string]any) map[string]any {
	n := map[string]any{"liveSessionId": sid}
	if mcp != nil {
		n["mcpServers"] = mcp
	}
	return map[string]any{"nexus": n}
}

// NewSession opens a new conversation with the editor's cwd as its workspace.
func (a *Agent) NewSession(ctx context.Context, p acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	mcp, notice := a.clientMCP(p.McpServers)
	s, err := a.open(ctx, "", p.Cwd, "", mcp)
	if err != nil {
		return acp.NewSessionResponse{}, requestError(err)
	}
	modes, sid := s.modes()
	return acp.NewSessionResponse{SessionId: acp.SessionId(s.key), Modes: modes, Meta: meta(sid, notice)}, nil
}

// open opens an ai-chat session on key ("" for a new conversation) in cwd at level ("" for the
// configured one) and makes it the ACP session of its key, closing one this connection had
// open on it.
func (a *Agent) open(ctx context.Context, key, cwd, level string, mcp []abi.AIMCPServer) (*session, error) {
	if cwd == "" || !strings.HasPrefix(cwd, "/") {
		return nil, invalidParams("cwd must be an absolute path (the workspace), not %q", cwd)
	}
	o := a.cfg.Options
	o.Workspace = cwd
	o.MCPServers = mcp
	if key != "" {
		o.Agent = "" // the key names its agent: a conversation of another agent opens as its own
	}
	if level != "" {
		o.Level = level
	}
	opts, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encode options: %w", err)
	}
	live, err := a.cfg.Client.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
	if err != nil {
		return nil, err
	}
	k, _ := live.Metadata["chatKey"].(string)
	lvl, _ := live.Metadata["level"].(string)
	ws, _ := live.Metadata["workspacePath"].(string)
	if ws == "" {
		ws = cwd
	}
	a.mu.Lock()
	s := a.sessions[k]
	if s == nil {
		s = &session{key: k}
		a.sessions[k] = s
	}
	a.mu.Unlock()
	s.mu.Lock()
	old := s.sid
	s.sid, s.level, s.workspace, s.mcp = live.SessionID, lvl, ws, mcp
	s.mu.Unlock()
	if old != "" && old != live.SessionID {
		if _, err := a.cfg.Client.Control(context.WithoutCancel(ctx), old, abi.ControlRequest{Command: abi.CommandClose}); err != nil && !gone(err) {
			a.log.Warn("close the earlier ai-chat session", "session", old, "err", err)
		}
	}
	return s, nil
}

// gone reports an error of a live session that has ended.
func gone(err error) bool {
	return client.IsCode(err, abi.CodeSessionClosed) || client.IsCode(err, abi.CodeSessionExpired) || client.IsCode(err, abi.CodeSessionNotFound)
}

// reopen opens a new live session on s's conversation, in its workspace at its level.
func (a *Agent) reopen(ctx context.Context, s *session) (string, error) {
	s.mu.Lock()
	ws, level, old, mcp := s.workspace, s.level, s.sid, s.mcp
	s.mu.Unlock()
	a.log.Info("the ai-chat session ended: opening another on the conversation", "conversation", s.key, "ended", old)
	if _, err := a.open(ctx, s.key, ws, level, mcp); err != nil {
		return "", err
	}
	sid, _ := s.live()
	return sid, nil
}

func (a *Agent) lookup(id acp.SessionId) (*session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[string(id)]; s != nil {
		return s, nil
	}
	return nil, &acp.RequestError{Code: codeResourceNotFound, Message: fmt.Sprintf(
		"session %q is not open on this connection: open it with session/new, session/load or session/resume", id)}
}

// exists fails with a not-found error for a key no conversation has.
func (a *Agent) exists(ctx context.Context, key string) error {
	if key == "" {
		return invalidParams("sessionId is required")
	}
	if _, err := chatclient.New(a.cfg.Client).Show(ctx, key); err != nil {
		if client.IsCode(err, abi.CodeSessionNotFound) {
			return &acp.RequestError{Code: codeResourceNotFound, Message: fmt.Sprintf("no nexus conversation has the key %q", key)}
		}
		return err
	}
	return nil
}

// LoadSession opens the conversation key again and replays its history (the context the model
// gets: after a compaction, its summary and what follows) as session/update notifications.
func (a *Agent) LoadSession(ctx context.Context, p acp.LoadSessionRequest) (acp.LoadSessionResponse, error) {
	key := string(p.SessionId)
	if err := a.exists(ctx, key); err != nil {
		return acp.LoadSessionResponse{}, requestError(err)
	}
	mcp, notice := a.clientMCP(p.McpServers)
	s, err := a.open(ctx, key, p.Cwd, "", mcp)
	if err != nil {
		return acp.LoadSessionResponse{}, requestError(err)
	}
	if err := a.replay(ctx, s); err != nil {
		return acp.LoadSessionResponse{}, requestError(err)
	}
	modes, sid := s.modes()
	return acp.LoadSessionResponse{Modes: modes, Meta: meta(sid, notice)}, nil
}

func (a *Agent) replay(ctx context.Context, s *session) error {
	h, err := chatclient.New(a.cfg.Client).History(ctx, s.key, conversation.HistoryOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = h.Close() }()
	_, ws := s.live()
	m := newMapper(ws)
	for raw, err := range h.Messages {
		if err != nil {
			return fmt.Errorf("read the history of %s: %w", s.key, err)
		}
		for _, u := range m.history(raw) {
			if err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: acp.SessionId(s.key), Update: u}); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
		}
	}
	return nil
}

// ResumeSession opens the conversation key again without replaying it.
func (a *Agent) ResumeSession(ctx context.Context, p acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	key := string(p.SessionId)
	if err := a.exists(ctx, key); err != nil {
		return acp.ResumeSessionResponse{}, requestError(err)
	}
	mcp, notice := a.clientMCP(p.McpServers)
	s, err := a.open(ctx, key, p.Cwd, "", mcp)
	if err != nil {
		return acp.ResumeSessionResponse{}, requestError(err)
	}
	modes, sid := s.modes()
	return acp.ResumeSessionResponse{Modes: modes, Meta: meta(sid, notice)}, nil
}

// CloseSession closes the live session (interrupting its turn); the conversation stays.
func (a *Agent) CloseSession(ctx context.Context, p acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	s, err := a.lookup(p.SessionId)
	if err != nil {
		return acp.CloseSessionResponse{}, err
	}
	a.mu.Lock()
	delete(a.sessions, s.key)
	a.mu.Unlock()
	if err := a.closeLive(ctx, s); err != nil {
		return acp.CloseSessionResponse{}, requestError(err)
	}
	return acp.CloseSessionResponse{}, nil
}

// listPage is how many conversations one session/list answer holds.
const listPage = 100

// ListSessions lists the agent's conversations, most recently updated first (subagents'
// left out), those whose last workspace is cwd when it is given.
func (a *Agent) ListSessions(ctx context.Context, p acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	agent := a.cfg.Options.Agent
	if agent == "" {
		agent = "main"
	}
	start := 0
	if p.Cursor != nil {
		n, err := strconv.Atoi(*p.Cursor)
		if err != nil || n < 0 {
			return acp.ListSessionsResponse{}, invalidParams("cursor %q is not one this agent gave", *p.Cursor)
		}
		start = n
	}
	items, err := chatclient.New(a.cfg.Client).List(ctx, conversation.ListOptions{Agent: agent})
	if err != nil {
		return acp.ListSessionsResponse{}, requestError(err)
	}
	out := acp.ListSessionsResponse{Sessions: []acp.SessionInfo{}}
	n := 0
	for _, it := range items {
		if it.Entry.IsSubagent || strings.Contains(it.Key, ":subagent:") {
			continue
		}
		var rec struct {
			Workspace string `json:"workspace"`
		}
		if raw, ok := it.Entry.Extra["nexusChat"]; ok {
			_ = json.Unmarshal(raw, &rec) // a record of another shape: no workspace known
		}
		if p.Cwd != nil && *p.Cwd != rec.Workspace {
			continue
		}
		n++
		if n <= start {
			continue
		}
		if len(out.Sessions) == listPage {
			out.NextCursor = acp.Ptr(strconv.Itoa(start + listPage))
			break
		}
		info := acp.SessionInfo{SessionId: acp.SessionId(it.Key), Cwd: rec.Workspace}
		if t := cmpOr(it.Entry.Label, it.Entry.DisplayName); t != "" {
			info.Title = acp.Ptr(t)
		}
		if it.Entry.UpdatedAt > 0 {
			info.UpdatedAt = acp.Ptr(time.UnixMilli(it.Entry.UpdatedAt).UTC().Format(time.RFC3339Nano))
		}
		out.Sessions = append(out.Sessions, info)
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// SetSessionMode changes the permission level: the conversation's live session is closed and
// another opened on it at the new level (a session's level is fixed when it opens); the
// conversation, its allowances and its queue stay.
func (a *Agent) SetSessionMode(ctx context.Context, p acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	s, err := a.lookup(p.SessionId)
	if err != nil {
		return acp.SetSessionModeResponse{}, err
	}
	mode := string(p.ModeId)
	if !validMode(mode) {
		return acp.SetSessionModeResponse{}, invalidParams("unknown mode %q: the modes are trusted, sandboxed and yolo", mode)
	}
	s.mu.Lock()
	busy, ws, cur, mcp := s.prompts > 0, s.workspace, s.level, s.mcp
	s.mu.Unlock()
	if busy {
		return acp.SetSessionModeResponse{}, &acp.RequestError{Code: -32603, Message: "a prompt is running in this session: change the mode once it ends", Data: map[string]any{"code": string(abi.CodeBusy), "retriable": true}}
	}
	if mode == cur {
		return acp.SetSessionModeResponse{}, nil
	}
	if _, err := a.open(ctx, s.key, ws, mode, mcp); err != nil {
		return acp.SetSessionModeResponse{}, requestError(err)
	}
	s.mu.Lock()
	got := s.level
	s.mu.Unlock()
	if got != mode {
		return acp.SetSessionModeResponse{}, &acp.RequestError{Code: -32603, Message: fmt.Sprintf(
			"the conversation is held to level %s (it was started by another conversation, whose powers bound it): mode %s was not taken", got, mode)}
	}
	return acp.SetSessionModeResponse{}, nil
}

// SetSessionConfigOption answers method-not-found: nexus offers no configuration options.
func (a *Agent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, acp.NewMethodNotFound(acp.AgentMethodSessionSetConfigOption)
}

// Cancel is session/cancel, which the frame guard hands to cancel (see notification).
func (a *Agent) Cancel(_ context.Context, p acp.CancelNotification) error {
	a.cancel(p.SessionId)
	return nil
}

// cancel ends the session's running prompts: each interrupts its turn (what was said is kept,
// every tool call answered) and ends with stop reason cancelled once the turn's last updates
// are sent. A session with no prompt running has nothing to cancel (interrupting here could
// end a turn another client started).
func (a *Agent) cancel(id acp.SessionId) {
	a.mu.Lock()
	s := a.sessions[string(id)]
	a.mu.Unlock()
	if s == nil {
		a.log.Debug("session/cancel for a session not open here", "session", id)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cancels {
		c()
	}
}

// notification handles a notification from the client. Notifications never reach the SDK:
// it queues them (1024 at most) and ends the connection when the queue is full, so a client
// that floods them would lose its sessions. session/cancel is all nexus takes; the rest
// (document and NES notifications, extensions) are dropped, as ACP lets an agent do.
func (a *Agent) notification(method string, params json.RawMessage) {
	if method != acp.AgentMethodSessionCancel {
		a.log.Debug("ignored a notification", "method", method)
		return
	}
	var p acp.CancelNotification
	if err := json.Unmarshal(params, &p); err != nil || p.SessionId == "" {
		a.log.Warn("session/cancel without a sessionId", "err", err)
		return
	}
	a.cancel(p.SessionId)
}

// errTurnOver ends a turn's stream.
var errTurnOver = errors.New("turn over")

// Prompt runs one turn: the prompt becomes a message of the conversation's queue, and the
// turn that delivers it is relayed as session/update notifications until it ends.
func (a *Agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	s, err := a.lookup(p.SessionId)
	if err != nil {
		return acp.PromptResponse{}, err
	}
	text, err := a.promptText(ctx, p)
	if err != nil {
		return acp.PromptResponse{}, requestError(err)
	}
	// pctx ends at session/cancel, and as the SDK ends ctx at $/cancel_request or a newer
	// prompt on the session: the turn is then interrupted, and relayed on to its end, so that
	// the editor gets the calls' last updates before the stop reason. Only the connection's
	// end stops the relay.
	pctx, cancelPrompt := context.WithCancel(ctx)
	defer cancelPrompt()
	s.mu.Lock()
	s.prompts++
	s.next++
	me := s.next
	if s.cancels == nil {
		s.cancels = map[uint64]context.CancelFunc{}
	}
	s.cancels[me] = cancelPrompt
	sid, ws := s.sid, s.workspace
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.prompts--
		delete(s.cancels, me)
		s.mu.Unlock()
	}()
	c := a.cfg.Client
	sent, err := c.SendMessage(pctx, sid, []byte(text), "")
	if gone(err) {
		// The live session ended under the editor (a gateway restart, a close from the CLI):
		// the conversation goes on in a new one, as session/load would open it.
		if sid, err = a.reopen(pctx, s); err == nil {
			ws = s.workspaceNow()
			sent, err = c.SendMessage(pctx, sid, []byte(text), "")
		}
	}
	if err != nil {
		if pctx.Err() != nil {
			return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
		}
		return acp.PromptResponse{}, requestError(err)
	}
	var cancelled atomic.Bool
	turn, stopTurn := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTurn()
	go func() {
		select {
		case <-turn.Done():
		case <-a.conn.Done():
			stopTurn()
		case <-pctx.Done():
			cancelled.Store(true)
			if _, err := c.Control(turn, sid, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil && turn.Err() == nil {
				a.log.Warn("interrupt the cancelled prompt's turn", "session", sid, "err", err)
			}
		}
	}()
	// Permission requests are asked aside (the editor may take its time; the events go on) and
	// withdrawn when the turn ends.
	asks, stopAsks := context.WithCancel(turn)
	var wg sync.WaitGroup
	defer func() {
		stopAsks()
		wg.Wait()
	}()
	m := newMapper(ws)
	var end *abi.AITurn
	var errs []string
	started := false
	err = c.Stream(turn, sid, client.StreamOptions{After: sent.AfterSeq, Follow: true}, func(e abi.Event) error {
		// Events before this turn's start belong to earlier turns (a queued message waits for
		// the turns before it).
		if !started {
			if t, ok := payloadOf[abi.AITurn](e, abi.PayloadAITurn); ok && t.Phase == abi.PhaseStarted && (sent.MessageID == "" || slices.Contains(t.MessageIDs, sent.MessageID)) {
				started = true
			} else if q, ok := payloadOf[abi.AIQueue](e, abi.PayloadAIQueue); ok && q.Phase != abi.QueueQueued && slices.Contains(q.MessageIDs, sent.MessageID) {
				return abi.Errorf(abi.CodeInvalidArgument, sid, "the prompt was %s and will not be answered: %s", q.Phase, q.Reason)
			}
			return nil
		}
		out := m.event(e)
		for _, u := range out.updates {
			if err := a.conn.SessionUpdate(turn, acp.SessionNotification{SessionId: p.SessionId, Update: u}); err != nil {
				return fmt.Errorf("session/update: %w", err)
			}
		}
		if out.err != "" {
			errs = append(errs, out.err)
		}
		if out.confirm != nil {
			conf := *out.confirm
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.ask(asks, s, m.locations(conf), conf)
			}()
		}
		if out.end != nil {
			end = out.end
			return errTurnOver
		}
		return nil
	})
	if turn.Err() != nil {
		// The editor went away: the turn must not go on unseen.
		if _, ierr := c.Control(context.WithoutCancel(ctx), sid, abi.ControlRequest{Command: abi.CommandInterrupt}); ierr != nil {
			a.log.Warn("interrupt after the editor left", "session", sid, "err", ierr)
		}
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	}
	if !errors.Is(err, errTurnOver) {
		if err == nil {
			err = abi.Errorf(abi.CodeSessionClosed, sid, "the ai-chat session closed before the turn ended")
		}
		return acp.PromptResponse{}, requestError(err)
	}
	if cancelled.Load() {
		return acp.PromptResponse{StopReason: acp.StopReasonCancelled}, nil
	}
	last := ""
	if end.End == abi.TurnCompleted {
		last = a.lastStop(turn, s.key)
	}
	reason, ok := stopReason(*end, errs, last)
	if !ok {
		msg := cmpOr(strings.Join(errs, "; "), end.Reason)
		return acp.PromptResponse{}, &acp.RequestError{Code: -32603, Message: "the turn failed: " + msg, Data: map[string]any{"end": end.End}}
	}
	return acp.PromptResponse{StopReason: reason, Usage: usageOf(end.Usage)}, nil
}

// lastStop is the stop reason of the conversation's last message ("" when unknown).
func (a *Agent) lastStop(ctx context.Context, key string) string {
	h, err := chatclient.New(a.cfg.Client).History(ctx, key, conversation.HistoryOptions{Limit: 1})
	if err != nil {
		return ""
	}
	defer func() { _ = h.Close() }()
	for raw, err := range h.Messages {
		if err != nil {
			return ""
		}
		var m struct {
			StopReason string `json:"stopReason"`
		}
		_ = json.Unmarshal(raw, &m)
		return m.StopReason
	}
	return ""
}

func payloadOf[T any](e abi.Event, typ string) (T, bool) {
	var v T
	if e.Event != abi.EventData {
		return v, false
	}
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(e.Payload, &head) != nil || head.Type != typ || json.Unmarshal(e.Payload, &v) != nil {
		return v, false
	}
	return v, true
}

// locations are the paths a confirmation request names, absolute, else those of its call.
func (m *mapper) locations(c abi.AIConfirmation) []acp.ToolCallLocation {
	var out []acp.ToolCallLocation
	for _, p := range c.Paths {
		out = append(out, acp.ToolCallLocation{Path: abs(m.workspace, p)})
	}
	if len(out) == 0 {
		if cl := m.calls[c.ToolCallID]; cl != nil {
			out = toolLocations(cl.name, cl.args, m.workspace)
		}
	}
	return out
}

// ask puts a confirmation request to the editor (session/request_permission) and gives its
// answer to the gateway, as `nexus ai confirm` would.
func (a *Agent) ask(ctx context.Context, s *session, locs []acp.ToolCallLocation, c abi.AIConfirmation) {
	var raw any
	if json.Unmarshal(c.Arguments, &raw) != nil {
		raw = nil
	}
	title := toolTitle(c.Tool, parseArgs(c.Arguments))
	if c.Reason != "" {
		title += " (" + c.Reason + ")"
	}
	sid, _ := s.live()
	res, err := a.conn.RequestPermission(ctx, acp.RequestPermissionRequest{
		SessionId: acp.SessionId(s.key),
		ToolCall: acp.ToolCallUpdate{
			ToolCallId: acp.ToolCallId(c.ToolCallID),
			Title:      acp.Ptr(title),
			Kind:       acp.Ptr(toolKind(c.Tool)),
			Status:     acp.Ptr(acp.ToolCallStatusPending),
			Locations:  locs,
			RawInput:   raw,
		},
		Options: permissionOptions(c),
	})
	if ctx.Err() != nil {
		return // the turn ended first: the gateway settled the request
	}
	answer := "deny"
	if err != nil {
		a.log.Warn("the editor did not answer a permission request: denied", "request", c.RequestID, "err", err)
	} else {
		answer = answerOf(res.Outcome, c)
	}
	if _, err := a.cfg.Client.Control(ctx, sid, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: answer}); err != nil && ctx.Err() == nil {
		a.log.Warn("confirm", "request", c.RequestID, "answer", answer, "err", err)
	}
}

// maxFileBytes bounds one file read through the editor into a prompt (the gateway takes
// messages of up to 1 MiB).
const maxFileBytes = 512 << 10

// promptText is the prompt as the message the conversation gets: text as it is, a resource
// link as the file's contents read through the editor (fs/read_text_file: its unsaved buffer)
// when the editor offers that, else as a reference the model can read with its tools, and an
// embedded text resource as its contents.
func (a *Agent) promptText(ctx context.Context, p acp.PromptRequest) (string, error) {
	a.mu.Lock()
	canRead := a.caps.Fs.ReadTextFile
	a.mu.Unlock()
	var b strings.Builder
	for i, blk := range p.Prompt {
		if i > 0 && b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		switch {
		case blk.Text != nil:
			b.WriteString(blk.Text.Text)
		case blk.ResourceLink != nil:
			l := blk.ResourceLink
			path := filePath(l.Uri)
			if path != "" && canRead {
				res, err := a.conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: p.SessionId, Path: path})
				if err == nil && len(res.Content) <= maxFileBytes {
					fmt.Fprintf(&b, "<file path=%q>\n%s\n</file>", path, res.Content)
					continue
				}
				if err != nil {
					a.log.Warn("fs/read_text_file", "path", path, "err", err)
				}
			}
			if path != "" {
				fmt.Fprintf(&b, "[file: %s]", path)
			} else {
				fmt.Fprintf(&b, "[%s: %s]", l.Name, l.Uri)
			}
		case blk.Resource != nil:
			r := blk.Resource.Resource
			switch {
			case r.TextResourceContents != nil:
				fmt.Fprintf(&b, "<file uri=%q>\n%s\n</file>", r.TextResourceContents.Uri, r.TextResourceContents.Text)
			case r.BlobResourceContents != nil:
				fmt.Fprintf(&b, "[binary resource %s, not included]", r.BlobResourceContents.Uri)
			}
		case blk.Image != nil, blk.Audio != nil:
			return "", invalidParams("prompt block %d: nexus takes text, resource links and embedded text resources (promptCapabilities: image and audio are false)", i)
		}
	}
	if strings.TrimSpace(b.String()) == "" {
		return "", invalidParams("the prompt has no text")
	}
	return b.String(), nil
}

// filePath is the path of a file: URI ("" for another scheme).
func filePath(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || !strings.HasPrefix(u.Path, "/") {
		return ""
	}
	return u.Path
}
