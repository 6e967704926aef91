// Package mcp is `nexus mcp`: agent shells (internal/shell/agentshell) served as Model Context
// Protocol tools over stdio and over Streamable HTTP (the gateway's /v1/mcp). The audit log they
// leave, and the transcript `nexus mcp watch` prints of it, are package audit's
// (internal/shell/audit).
//
// The tools are those of docs/agent-shells.md: session_create, session_exec, session_list,
// session_destroy, session_checkpoint, session_checkpoints and session_restore. Every
// tool argument is untrusted; operator settings (audit directory, SSH key directory and
// known_hosts, limits, idle timeout, operator policy) come from Config, which the command line
// fills from flags and environment variables, never from a tool call.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/audit"
	"github.com/nexus-run/nexus/internal/shell/output"
	"github.com/nexus-run/nexus/internal/shell/policy"
)

// DefaultProgressInterval is how often a running session_exec reports progress to a client
// that asked for it (a progress token on the request).
const DefaultProgressInterval = time.Second

// Config is the operator's configuration of the server.
type Config struct {
	// Session configures the session manager: audit directory, shadow directory, SSH settings,
	// cap, idle timeout, operator policy.
	Session agentshell.Config
	// Logger receives the server's log (never stdout, which carries the protocol). Nil discards.
	Logger *slog.Logger
	// Version is reported to clients as the server's version.
	Version string
	// ProgressInterval is the period of progress notifications (default 1 s).
	ProgressInterval time.Duration
}

// Server is the nexus MCP server: one session manager behind the seven tools.
type Server struct {
	cfg Config
	log *slog.Logger
	mgr *agentshell.Manager
	srv *sdk.Server

	http      httpState
	audit     *audit.Reader
	closeOnce sync.Once
}

// Instructions are sent to clients at initialization.
const Instructions = `nexus gives you persistent shells. Open one with session_create (transport local, ssh or docker), ` +
	`run commands with session_exec (state such as cd and export persists between calls; stdout, stderr, exit_code, ` +
	`cwd and duration come back separately; output is ANSI-stripped, secret-redacted and bounded, and a budget can ` +
	`grep or keep the head/tail of it), and close it with session_destroy when done. ` +
	`Sessions created with a workspace can be checkpointed and restored.`

// New builds a server and starts its session manager (and the manager's idle reaper).
func New(cfg Config) *Server {
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, mgr: agentshell.New(cfg.Session), audit: audit.NewReader(cfg.Session.AuditDir)}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "nexus", Title: "nexus agent shells", Version: cfg.Version}, &sdk.ServerOptions{
		Instructions: Instructions,
		Logger:       slog.New(quieter{log.Handler()}),
		// Declare what is served: tools (added by the SDK with the first tool) and logging
		// (logging/setLevel, then notifications/message at that level). A client such as the MCP
		// inspector will not set a log level it does not see declared.
		Capabilities: &sdk.ServerCapabilities{Logging: &sdk.LoggingCapabilities{}}, //nolint:staticcheck // SA1019: deprecated only as of protocol 2026-07-28; clients of earlier versions use it
	})
	// The SDK answers resources/*, prompts/* and completion/* with empty results whether or not
	// they are declared; nexus serves none of them, so it says so (method not found) rather
	// than answer for capabilities it never declared.
	s.srv.AddReceivingMiddleware(undeclaredMethods, s.redactToolErrors)
	s.addTools()
	return s
}

// undeclaredMethods refuses the methods of capabilities the server does not declare.
func undeclaredMethods(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		for _, p := range []string{"resources/", "prompts/", "completion/"} {
			if strings.HasPrefix(method, p) {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound,
					Message: fmt.Sprintf("method %q not found: nexus serves tools and logging only (see the initialize result's capabilities)", method)}
			}
		}
		return next(ctx, method, req)
	}
}

// redactToolErrors redacts the text of every tool error, with what the session named in the
// call has learned: an error may quote an argument or a command, the SDK's own argument
// checks included, and clients log what they receive.
func (s *Server) redactToolErrors(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*sdk.CallToolResult)
		if method != "tools/call" || !ok || r == nil || !r.IsError {
			return res, err
		}
		var args struct {
			SessionID string `json:"session_id"`
		}
		if p, ok := req.GetParams().(*sdk.CallToolParamsRaw); ok && len(p.Arguments) > 0 {
			_ = json.Unmarshal(p.Arguments, &args)
		}
		for _, c := range r.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				tc.Text = s.mgr.Redact(args.SessionID, tc.Text)
			}
		}
		return res, err
	}
}

// note logs to the operator's log and, when the client set a log level (logging/setLevel) it
// reaches, to the client as notifications/message. args must already be redacted.
func (s *Server) note(ctx context.Context, req *sdk.CallToolRequest, level slog.Level, msg string, args ...any) {
	s.log.Log(ctx, level, msg, args...)
	if req == nil || req.Session == nil {
		return
	}
	h := sdk.NewLoggingHandler(req.Session, &sdk.LoggingHandlerOptions{LoggerName: "nexus"}) //nolint:staticcheck // SA1019: see the Logging capability in New
	slog.New(h).Log(ctx, level, msg, args...)
}

// Run serves one client over t (stdio for `nexus mcp`) until it disconnects or ctx ends, then
// closes every session.
func (s *Server) Run(ctx context.Context, t sdk.Transport) error {
	defer s.Close()
	err := s.srv.Run(ctx, t)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Close destroys every session (each gets its audit "close" line), stops the reaper and
// ends every MCP session still connected (over HTTP, their open streams). The shells go
// first: ending an MCP session waits for its calls in flight, and a command may run for an hour.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mgr.Close()
		var wg sync.WaitGroup
		for ss := range s.srv.Sessions() {
			wg.Go(func() { _ = ss.Close() })
		}
		wg.Wait()
	})
}

// Manager is the server's session manager (for tests and embedding).
func (s *Server) Manager() *agentshell.Manager { return s.mgr }

func boolPtr(b bool) *bool { return &b }

// quieter passes the SDK's own log on at warning and above only, unless debug logging is on:
// its connection chatter is noise in an operator's log.
type quieter struct{ h slog.Handler }

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	if l < slog.LevelWarn && !q.h.Enabled(ctx, slog.LevelDebug) {
		return false
	}
	return q.h.Enabled(ctx, l)
}

func (q quieter) Handle(ctx context.Context, r slog.Record) error { return q.h.Handle(ctx, r) }
func (q quieter) WithAttrs(as []slog.Attr) slog.Handler           { return quieter{q.h.WithAttrs(as)} }
func (q quieter) WithGroup(name string) slog.Handler              { return quieter{q.h.WithGroup(name)} }

func (s *Server) addTools() {
	sdk.AddTool(s.srv, &sdk.Tool{
		Name:  "session_create",
		Title: "Open a persistent shell",
		Description: "Open a persistent shell session and return its session_id. transport is local (this machine), " +
			"ssh (host, user, port, and password or key: the name of a key file in the operator's key directory) " +
			"or docker (container: a running container's name). allow/deny restrict which programs commands may run; " +
			"output_budget is the default budget of every session_exec; workspace (a directory) enables checkpoints. " +
			"Ids read <n>_local, <n>_ssh_<user>@<host>[:port] or <n>_docker_<container>. Idle sessions are closed " +
			"after a while; call session_destroy when done.",
		InputSchema: createSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "Open a persistent shell", ReadOnlyHint: false, DestructiveHint: boolPtr(false), OpenWorldHint: boolPtr(true)},
	}, s.create)

	sdk.AddTool(s.srv, &sdk.Tool{
		Name:  "session_exec",
		Title: "Run a command in a shell session",
		Description: "Run a shell command in a session and return {stdout, stderr, exit_code, duration_ms, cwd, truncated, " +
			"timed_out, budget}. State persists between calls (cd, export, functions). stdin is /dev/null. Output is " +
			"ANSI-stripped, secret-redacted and capped (100,000 characters per stream by default); budget overrides " +
			"the session's output_budget for this call: grep {pattern, context}, keep head|tail|head_tail with lines, " +
			"max_chars. timeout_secs (default 120, max 3600): on timeout the command is interrupted, exit_code is 124, " +
			"timed_out is true and the session stays usable.",
		InputSchema: execSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "Run a command", DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(true)},
	}, s.exec)

	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "session_list",
		Title:       "List open shell sessions",
		Description: "List the open sessions: id, transport, cwd, workspace, created and last used times, number of commands, allow/deny lists.",
		InputSchema: emptySchema(),
		Annotations: &sdk.ToolAnnotations{Title: "List sessions", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, s.list)

	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "session_destroy",
		Title:       "Close a shell session",
		Description: "Close a session: its shell and every process it started are ended. Returns {destroyed: true}.",
		InputSchema: sessionIDSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "Close a session", DestructiveHint: boolPtr(true), IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, s.destroy)

	sdk.AddTool(s.srv, &sdk.Tool{
		Name:  "session_checkpoint",
		Title: "Checkpoint a session's workspace",
		Description: "Snapshot the session's workspace (the directory given as workspace to session_create) into a shadow " +
			"git repository (never the project's own .git) and return the checkpoint. Snapshots are also taken " +
			"automatically before commands that are not provably read-only.",
		InputSchema: checkpointSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "Checkpoint the workspace", DestructiveHint: boolPtr(false), OpenWorldHint: boolPtr(false)},
	}, s.checkpoint)

	sdk.AddTool(s.srv, &sdk.Tool{
		Name:        "session_checkpoints",
		Title:       "List a session's checkpoints",
		Description: "List the session's workspace checkpoints, newest first (manual and automatic).",
		InputSchema: sessionIDSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "List checkpoints", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, s.checkpoints)

	sdk.AddTool(s.srv, &sdk.Tool{
		Name:  "session_restore",
		Title: "Restore a session's workspace",
		Description: "Bring the session's workspace back to a checkpoint: files changed or deleted since are written " +
			"back, files added since are removed. The workspace is checkpointed first (backup_checkpoint_id), so a " +
			"restore can be undone. Side effects outside the workspace files are not undone.",
		InputSchema: restoreSchema(),
		Annotations: &sdk.ToolAnnotations{Title: "Restore the workspace", DestructiveHint: boolPtr(true), OpenWorldHint: boolPtr(false)},
	}, s.restore)
}

func (s *Server) create(ctx context.Context, req *sdk.CallToolRequest, in CreateInput) (*sdk.CallToolResult, abi.Shell, error) {
	o, err := in.options()
	if err != nil {
		return nil, abi.Shell{}, err
	}
	info, err := s.mgr.Create(ctx, o)
	if err != nil {
		err = toolError("session_create", "", err)
		s.note(ctx, req, slog.LevelWarn, "session_create failed", "transport", s.mgr.Redact("", o.Transport), "err", s.mgr.Redact("", err.Error()))
		return nil, abi.Shell{}, err
	}
	s.note(ctx, req, slog.LevelInfo, "session created", "session_id", info.SessionID, "transport", info.Transport)
	return nil, info, nil
}

func (s *Server) exec(ctx context.Context, req *sdk.CallToolRequest, in ExecInput) (*sdk.CallToolResult, shell.ExecResult, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, shell.ExecResult{}, errors.New("command is empty: pass the shell command to run in command")
	}
	timeout := agentshell.DefaultTimeout
	if in.TimeoutSecs != 0 {
		if in.TimeoutSecs < 1 || in.TimeoutSecs > int(agentshell.MaxTimeout/time.Second) {
			return nil, shell.ExecResult{}, fmt.Errorf("timeout_secs is %d; it must be between 1 and %d (default %d)",
				in.TimeoutSecs, int(agentshell.MaxTimeout/time.Second), int(agentshell.DefaultTimeout/time.Second))
		}
		timeout = time.Duration(in.TimeoutSecs) * time.Second
	}
	opts := agentshell.ExecOptions{Budget: in.Budget.budget(), Timeout: timeout}

	var stop func()
	if req != nil && req.Params != nil && req.Session != nil {
		if token := req.Params.GetProgressToken(); token != nil {
			p := &progress{start: time.Now()}
			opts.OnOutput = p.onOutput
			stop = p.run(ctx, s.cfg.ProgressInterval, func(ctx context.Context, n *sdk.ProgressNotificationParams) error {
				n.ProgressToken = token
				return req.Session.NotifyProgress(ctx, n)
			})
		}
	}
	res, err := s.mgr.Exec(ctx, in.SessionID, in.Command, opts)
	if stop != nil {
		stop()
	}
	if err != nil {
		blocked := errors.Is(err, agentshell.ErrBlocked)
		err = toolError("session_exec", in.SessionID, err)
		if blocked {
			s.note(ctx, req, slog.LevelWarn, "command refused by policy", "session_id", in.SessionID, "err", s.mgr.Redact(in.SessionID, err.Error()))
		}
		return nil, shell.ExecResult{}, err
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: FormatExecResult(res)}}}, res, nil
}

// ListOutput is session_list's result.
type ListOutput struct {
	Sessions []abi.Shell `json:"sessions" jsonschema:"the open sessions, oldest first"`
}

func (s *Server) list(_ context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, ListOutput, error) {
	ss := s.mgr.List()
	if ss == nil {
		ss = []abi.Shell{}
	}
	return nil, ListOutput{Sessions: ss}, nil
}

// DestroyOutput is session_destroy's result.
type DestroyOutput struct {
	Destroyed bool `json:"destroyed" jsonschema:"true once the session and its processes are gone"`
}

func (s *Server) destroy(ctx context.Context, req *sdk.CallToolRequest, in SessionIDInput) (*sdk.CallToolResult, DestroyOutput, error) {
	if err := s.mgr.Destroy(ctx, in.SessionID); err != nil {
		return nil, DestroyOutput{}, toolError("session_destroy", in.SessionID, err)
	}
	s.note(ctx, req, slog.LevelInfo, "session destroyed", "session_id", in.SessionID)
	return nil, DestroyOutput{Destroyed: true}, nil
}

func (s *Server) checkpoint(ctx context.Context, _ *sdk.CallToolRequest, in CheckpointInput) (*sdk.CallToolResult, shell.Checkpoint, error) {
	c, err := s.mgr.Checkpoint(ctx, in.SessionID, in.Label)
	if err != nil {
		return nil, shell.Checkpoint{}, toolError("session_checkpoint", in.SessionID, err)
	}
	return nil, c, nil
}

// CheckpointsOutput is session_checkpoints' result.
type CheckpointsOutput struct {
	Checkpoints []shell.Checkpoint `json:"checkpoints" jsonschema:"the session's checkpoints, newest first"`
}

func (s *Server) checkpoints(ctx context.Context, _ *sdk.CallToolRequest, in SessionIDInput) (*sdk.CallToolResult, CheckpointsOutput, error) {
	cs, err := s.mgr.Checkpoints(ctx, in.SessionID)
	if err != nil {
		return nil, CheckpointsOutput{}, toolError("session_checkpoints", in.SessionID, err)
	}
	if cs == nil {
		cs = []shell.Checkpoint{}
	}
	return nil, CheckpointsOutput{Checkpoints: cs}, nil
}

func (s *Server) restore(ctx context.Context, _ *sdk.CallToolRequest, in RestoreInput) (*sdk.CallToolResult, shell.RestoreResult, error) {
	if err := shell.ValidateCheckpointID(in.CheckpointID); err != nil {
		return nil, shell.RestoreResult{}, err
	}
	r, err := s.mgr.Restore(ctx, in.SessionID, in.CheckpointID)
	if err != nil {
		return nil, shell.RestoreResult{}, toolError("session_restore", in.SessionID, err)
	}
	return nil, r, nil
}

// progress counts a running command's output for progress notifications. onOutput runs on
// the shell's reader goroutines and never blocks.
type progress struct {
	start          time.Time
	stdout, stderr atomic.Int64
}

func (p *progress) onOutput(stream string, b []byte) {
	if stream == "stderr" {
		p.stderr.Add(int64(len(b)))
		return
	}
	p.stdout.Add(int64(len(b)))
}

// message describes the command's progress at now.
func (p *progress) message(now time.Time) (elapsed time.Duration, msg string) {
	elapsed = now.Sub(p.start)
	return elapsed, fmt.Sprintf("running for %.0fs; output so far: stdout %d bytes, stderr %d bytes",
		elapsed.Seconds(), p.stdout.Load(), p.stderr.Load())
}

// run sends a notification every interval until the returned stop is called; stop waits for
// the sender, so no notification follows the result.
func (p *progress) run(ctx context.Context, every time.Duration, send func(context.Context, *sdk.ProgressNotificationParams) error) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				elapsed, msg := p.message(now)
				// Progress must increase: elapsed seconds (fractional) do.
				if err := send(ctx, &sdk.ProgressNotificationParams{Progress: elapsed.Seconds(), Message: msg}); err != nil {
					return
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// toolError turns a manager error into a tool error that says what to do next.
func toolError(tool, id string, err error) error {
	var v *policy.Violation
	switch {
	case errors.As(err, &v):
		return fmt.Errorf("%s; the command did not run", redactFixed(v.Error()))
	case errors.Is(err, agentshell.ErrBlocked):
		return fmt.Errorf("%s; the command did not run", redactFixed(err.Error()))
	case errors.Is(err, agentshell.ErrNotFound):
		return fmt.Errorf("no session %q: it was destroyed, its shell exited, it was closed after idling, or it never existed; "+
			"call session_list to see the open sessions or session_create to open a new one", id)
	case errors.Is(err, agentshell.ErrLimit):
		return fmt.Errorf("%w; call session_list and session_destroy a session you no longer need, then retry", err)
	case errors.Is(err, agentshell.ErrClosed):
		if id == "" {
			return errors.New("the server is shutting down; no new sessions can be opened")
		}
		return fmt.Errorf("session %q is closed (its shell exited or the server is shutting down); open a new one with session_create", id)
	case errors.Is(err, shell.ErrNoCheckpoint):
		return fmt.Errorf("%w; call session_checkpoints with session_id %q for the ids of this session's checkpoints", err, id)
	case errors.Is(err, shell.ErrKeyName):
		return fmt.Errorf("%w; call session_create with key set to the name of a key file in the operator's key directory, or without key", err)
	case errors.Is(err, shell.ErrNoHostKeyCheck), errors.Is(err, shell.ErrHostKeyUnknown), errors.Is(err, shell.ErrHostKeyMismatch):
		return fmt.Errorf("could not open the session: %w (host keys are checked against the operator's configuration, "+
			"which no tool argument can change: ask the user)", err)
	case errors.Is(err, agentshell.ErrInvalid):
		return fmt.Errorf("%w; fix the argument and call %s again", err, tool)
	}
	switch tool {
	case "session_exec":
		return fmt.Errorf("the command could not be run: %w; check the session with session_list, and if it is gone open a new one with session_create", err)
	case "session_create":
		return fmt.Errorf("could not open the session: %w", err)
	}
	return err
}

// fixedRedactor redacts the secret shapes (no learned literals) in the text of errors that
// may quote a command.
var fixedRedactor = output.NewRedactor()

func redactFixed(s string) string { return fixedRedactor.Redact(s) }
