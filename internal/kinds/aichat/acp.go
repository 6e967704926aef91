package aichat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/acpengine"
	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/shell/output"
)

// ACPSessionField is the sessions.json field that keeps an acp backend's agent session
// ({"backend", "id", "agent"}), so the conversation goes on in the same agent session after
// a restart (session/load) where the agent can load sessions.
const ACPSessionField = "acpSession"

// acpSession is ACPSessionField's value.
type acpSession struct {
	Backend string `json:"backend"`
	ID      string `json:"id"`
	Agent   string `json:"agent,omitempty"`
}

// acpBackend is a session's external agent (docs/acp-backends.md): the engine in place of
// the provider and the turn loop, and the file its stderr goes to.
type acpBackend struct {
	engine *acpengine.Engine
	stderr *os.File
}

// openACP sets up an acp backend's agent; it starts at the session's first message.
func (c *chat) openACP() error {
	if err := c.backend.Validate(); err != nil {
		return err
	}
	a := c.backend.Agent
	var env []string
	for _, v := range append([]string{"PATH", "HOME", "LANG", "USER", "TMPDIR"}, a.EnvVars...) {
		if val := c.k.getenv(v); val != "" {
			env = append(env, v+"="+val)
		}
	}
	keys := make([]string, 0, len(a.Env))
	for k := range a.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+a.Env[k])
	}
	b := &acpBackend{}
	var stderr io.Writer
	if c.k.Logs != nil {
		dir := filepath.Join(c.k.StateDir, "logs", c.sink.SessionID())
		if err := fsutil.MkdirPrivate(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		if err := fsutil.MkdirPrivate(dir); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		f, err := fsutil.CreateExclusive(filepath.Join(dir, "agent-stderr.log"))
		if err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		b.stderr = f
		stderr = &redacting{w: f, red: output.NewRedactor()}
	}
	b.engine = acpengine.New(acpengine.Config{
		Name: c.backend.Name, Command: a.Command, Args: a.Args, Env: env, Dir: c.workspace,
		Stderr: stderr, Owner: c.k.Owner, Logger: c.k.logger(), Meta: a.SessionMeta,
	})
	c.acp = b
	return nil
}

// close stops the agent.
func (b *acpBackend) close() {
	_ = b.engine.Close(context.Background())
	if b.stderr != nil {
		_ = b.stderr.Close()
	}
}

// runAgent runs a turn: nexus's loop on the provider, or the acp backend's agent on the
// turn's user message (its own context is the agent session's, which it keeps).
func (c *chat) runAgent(ctx context.Context, h *conversation.Held, ts *agent.Toolset, req provider.Request, opts agent.Options) (*agent.Result, error) {
	if c.acp == nil {
		return agent.Run(ctx, c.p, ts, req, opts)
	}
	saved := acpSessionOf(h.Entry, c.backend.Name)
	e := c.acp.engine
	res, err := e.Run(ctx, acpengine.Turn{Prompt: lastUserText(req.Messages), Resume: saved, Options: opts,
		Confirm: c.acpConfirm, Provider: c.backend.Name, Model: c.backend.Model,
		History: func() string { return historyText(req.Messages) }})
	if id := e.SessionID(); id != "" && id != saved {
		rec := acpSession{Backend: c.backend.Name, ID: id, Agent: e.Agent()}
		if perr := h.Patch(context.WithoutCancel(c.base), map[string]any{ACPSessionField: rec}); perr != nil && err == nil {
			err = perr
		}
		c.sink.SetMetadata(map[string]any{ACPSessionField: rec})
	}
	return res, err
}

// acpConfirm answers the agent's permission requests by the session's level: yolo allows
// once, sandboxed rejects (the agent's own tools are not confined by nexus: rejecting is all
// the level can do), trusted asks the user (confirmation-request, nexus ai confirm).
func (c *chat) acpConfirm(ctx context.Context, call provider.ToolCall, req *permission.Request) (permission.Answer, error) {
	switch c.level {
	case permission.YOLO:
		c.logs.verbosef("acp permission %s allowed once (level yolo)", call.ID)
		return permission.AllowOnce, nil
	case permission.Sandboxed:
		c.logs.verbosef("acp permission %s rejected (level sandboxed)", call.ID)
		return permission.Deny, nil
	}
	if req.Cwd == "" {
		req.Cwd = c.workspace
	}
	return c.confirm(ctx, call, req)
}

// acpCompactError: an agent keeps its own context, nexus has no model to summarize with.
func (c *chat) acpCompactError() error {
	return abi.Errorf(abi.CodeCapabilityUnsupported, c.sink.SessionID(), "backend %s is an ACP agent, which keeps its own context: nexus does not compact it", c.backend.Name)
}

// acpSessionOf is the agent session recorded for backend, "" when none (or another
// backend's: its ids mean nothing to this agent).
func acpSessionOf(e chatstore.SessionEntry, backend string) string {
	raw, ok := e.Extra[ACPSessionField]
	if !ok {
		return ""
	}
	var s acpSession
	if json.Unmarshal(raw, &s) != nil || s.Backend != backend {
		return ""
	}
	return s.ID
}

// lastUserText is the text of the context's last user message: the prompt.
func lastUserText(msgs []provider.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			var parts []string
			for _, b := range msgs[i].Content {
				if b.Type == provider.BlockText {
					parts = append(parts, b.Text)
				}
			}
			return strings.Join(parts, "\n")
		}
	}
	return ""
}

// maxHistory bounds the conversation sent to an agent session that is new (the newest kept).
const maxHistory = 64 << 10

// historyText is the conversation before its last user message, as text for an agent whose
// session is new: what the users and the assistants said, and which tools were called.
func historyText(msgs []provider.Message) string {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleUser {
			last = i
			break
		}
	}
	if last <= 0 {
		return ""
	}
	var b strings.Builder
	for _, m := range msgs[:last] {
		switch m.Role {
		case provider.RoleUser:
			fmt.Fprintf(&b, "User: %s\n", m.TextContent())
		case provider.RoleAssistant:
			if t := m.TextContent(); t != "" {
				fmt.Fprintf(&b, "Assistant: %s\n", t)
			}
			for _, call := range m.ToolCalls() {
				fmt.Fprintf(&b, "(the assistant called %s)\n", call.Name)
			}
		}
	}
	h := b.String()
	if len(h) > maxHistory {
		h = "...\n" + h[len(h)-maxHistory:]
	}
	return "This conversation began before this session; what was said so far:\n\n" + h + "\nThe new message follows.\n\n"
}

// redacting passes what the agent writes on stderr through the shells' redactor.
type redacting struct {
	w   io.Writer
	red *output.Redactor
}

func (r *redacting) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, r.red.Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
