package orchestrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/provider"
)

// Relations a target may have to the calling conversation (allowed_targets).
const (
	RelParent   = "parent"
	RelChildren = "children"
	RelFamily   = "family" // parent and children
)

// relation says how target relates to the conversation: parent, child, or "" (none).
func (c *caller) relation(target string) (string, error) {
	if target == c.Key {
		return "", errors.New("that is this conversation")
	}
	if c.SpawnedBy != "" && target == c.SpawnedBy {
		return RelParent, nil
	}
	runs, err := c.k.Runs.List(chatstore.SubagentFilter{RequesterSessionKey: c.Key, ChildSessionKey: target})
	if err != nil {
		return "", fmt.Errorf("subagents: %w", err)
	}
	if len(runs) > 0 {
		return "child", nil
	}
	return "", nil
}

// isAgentTarget reports whether an allowed_targets entry names a whole agent (agent:<id>):
// every conversation of that agent may be reached.
func isAgentTarget(a string) bool {
	id, ok := strings.CutPrefix(a, "agent:")
	return ok && id != "" && !strings.Contains(id, ":")
}

// familyTool is one of the inter-session tools.
type familyTool struct {
	b    *binding
	name string
}

func familyTools(b *binding) []tools.Tool {
	names := []string{"sessions_list", "sessions_history", "sessions_send", "nexus_status", "nexus_cancel", "nexus_destroy", "agents_list"}
	out := make([]tools.Tool, 0, len(names)+1)
	for _, name := range names {
		out = append(out, familyTool{b, name})
	}
	return out
}

func (t familyTool) Spec() tools.Spec {
	str := func(desc string) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Description: desc} }
	key := str("the conversation's session key (from sessions_list)")
	key.MinLength = ptrInt(1)
	obj := func(req []string, props map[string]*jsonschema.Schema) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "object", Required: req, Properties: props, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	}
	switch t.name {
	case "sessions_list":
		return tools.Spec{Name: t.name, Description: "List the conversations you may reach: your parent (the one that spawned you) and the subagents you spawned, with their state.",
			Schema: obj(nil, map[string]*jsonschema.Schema{})}
	case "sessions_history":
		limit := &jsonschema.Schema{Type: "integer", Description: "the last N messages (default 20, at most 200)"}
		return tools.Spec{Name: t.name, Description: "Read the last messages of a conversation you may reach.",
			Schema: obj([]string{"key"}, map[string]*jsonschema.Schema{"key": key, "limit": limit})}
	case "sessions_send":
		msg := str("the message")
		msg.MinLength = ptrInt(1)
		mode := str("its queue mode there: followup (default), steer, collect, queue, interrupt, steer-backlog, reject (refused while a turn runs there), rollback")
		mode.Enum = []any{"followup", "steer", "collect", "queue", "interrupt", "steer-backlog", "reject", "rollback"}
		agentID := str("instead of key: an agent (agents_list) to message; it gets it in its conversation agent:<agent>:main, or in conversation")
		conv := str("with agent: the rest of a conversation key of that agent (agent:<agent>:<conversation>), default main")
		return tools.Spec{Name: t.name, Description: "Send a message to a conversation you may reach, by its key, or to another agent (it is queued durably and delivered as a turn there, saying it is from you).",
			Schema: obj([]string{"message"}, map[string]*jsonschema.Schema{"key": str("the conversation's session key (from sessions_list)"), "agent": agentID, "conversation": conv, "message": msg, "mode": mode})}
	case "agents_list":
		return tools.Spec{Name: t.name, Description: "List the configured agents (the workers you can spawn with sessions_spawn's agent, or message with sessions_send's agent), with what each is for.",
			Schema: obj(nil, map[string]*jsonschema.Schema{})}
	case "nexus_status":
		return tools.Spec{Name: t.name, Description: "The state of a subagent run you started, or of a conversation you may reach.",
			Schema: obj([]string{"key"}, map[string]*jsonschema.Schema{"key": key})}
	case "nexus_destroy":
		return tools.Spec{Name: t.name, Description: "End a subagent you spawned: its session closes and its conversation is archived (its run is recorded as ended).",
			Schema: obj([]string{"key"}, map[string]*jsonschema.Schema{"key": key})}
	default: // nexus_cancel
		return tools.Spec{Name: t.name, Description: "Stop the running turn of a conversation you may reach (a subagent you spawned).",
			Schema: obj([]string{"key"}, map[string]*jsonschema.Schema{"key": key})}
	}
}

type familyArgs struct {
	Key          string `json:"key"`
	Agent        string `json:"agent"`
	Conversation string `json:"conversation"`
	Limit        int    `json:"limit"`
	Message      string `json:"message"`
	Mode         string `json:"mode"`
}

func (t familyTool) Run(ctx context.Context, raw json.RawMessage) (tools.Result, error) {
	var a familyArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return tools.Result{}, fmt.Errorf("arguments: %w", err)
	}
	out, err := t.run(ctx, a)
	if err != nil {
		return tools.Result{Output: err.Error(), IsError: true}, nil //nolint:nilerr // the model reads why
	}
	b, _ := json.Marshal(out)
	return tools.Result{Output: string(b)}, nil
}

func (t familyTool) run(ctx context.Context, a familyArgs) (any, error) {
	c := t.b.caller()
	switch t.name {
	case "sessions_list":
		return c.family(ctx)
	case "agents_list":
		return c.k.agents()
	case "sessions_send":
		if a.Agent != "" {
			if a.Key != "" {
				return nil, errors.New("give key or agent, not both")
			}
			if err := profile.CheckID(a.Agent); err != nil {
				return nil, err //nolint:wrapcheck // the text names the agent
			}
			a.Key = "agent:" + a.Agent + ":" + firstOf(a.Conversation, "main")
		}
		if a.Key == "" {
			return nil, errors.New("give the conversation's key, or an agent")
		}
	}
	if err := c.reach(a.Key); err != nil {
		return nil, err
	}
	switch t.name {
	case "sessions_history":
		return c.k.recentMessages(ctx, a.Key, a.Limit)
	case "sessions_send":
		return c.sendTo(ctx, a.Key, a.Mode, a.Message)
	case "nexus_status":
		return c.k.status(ctx, a.Key)
	case "nexus_destroy":
		if rel, err := c.relation(a.Key); err != nil || rel != "child" {
			return nil, fmt.Errorf("refused: only a subagent this conversation spawned can be destroyed")
		}
		return c.k.destroy(ctx, a.Key)
	default:
		n := c.k.Host.Interrupt(a.Key)
		return map[string]any{"key": a.Key, "interrupted": n}, nil
	}
}

// AgentMessage is what sessions_send delivers (seed 003's AgentMessage): from the sending
// conversation's agent to the target's, with the content and the sending conversation, kept
// as the queued message's sender and said in its first line, so the receiving model knows
// who speaks.
func (c *caller) sendTo(ctx context.Context, key, mode, text string) (any, error) {
	to := AgentOfKey(key)
	// A conversation that never ran opens with this one's powers, bounded by its agent's (as a
	// subagent would be): its level is the stricter of this one's and the agent's own.
	opts := abi.AIChatOptions{Agent: to, Workspace: c.Workspace, Level: string(c.Level)}
	if p, err := profile.Load(c.k.StateDir, firstOf(to, profile.Main)); err == nil {
		if p.Backend == "" {
			// A new conversation of an agent without a backend of its own talks to the sender's.
			opts.Backend, opts.Model = c.Backend, c.Model
		}
		if l, err := levelOf(p); err == nil && l != "" {
			opts.Level = string(permission.Stricter(c.Level, l))
		}
	}
	bounds := c.Powers.inherited(c.Key)
	body := fmt.Sprintf("[message from agent %s (%s)]\n\n%s", c.Agent, c.Key, text)
	d, err := c.k.Deliver(ctx, Delivery{Key: key, Text: body, Mode: mode, From: c.Key, Origin: abi.Origin{Kind: abi.OriginAgent, ID: c.Key}, Options: opts, Powers: &bounds})
	if d.MessageID == "" {
		return nil, err
	}
	out := map[string]any{"messageId": d.MessageID, "to": d.Key, "status": "queued"}
	if err != nil {
		out["warning"] = err.Error()
	}
	return out, nil
}

// agents is the worker catalogue: the configured agents and what each is for.
func (k *Orchestrator) agents() (any, error) {
	ps, err := profile.List(k.StateDir)
	if err != nil {
		return nil, err //nolint:wrapcheck // the text says what failed
	}
	out := make([]map[string]any, 0, len(ps))
	for _, p := range ps {
		out = append(out, map[string]any{"id": p.ID, "description": p.Description, "level": firstOf(p.Level, "trusted"), "backend": p.Backend})
	}
	return map[string]any{"agents": out}, nil
}

// family is what sessions_list answers: the parent and the children.
func (c *caller) family(ctx context.Context) (any, error) {
	var out []map[string]any
	if c.SpawnedBy != "" {
		out = append(out, map[string]any{"key": c.SpawnedBy, "relation": RelParent})
	}
	runs, err := c.k.Runs.List(chatstore.SubagentFilter{RequesterSessionKey: c.Key})
	if err != nil {
		return nil, fmt.Errorf("subagents: %w", err)
	}
	for _, r := range runs {
		st, _ := c.k.status(ctx, r.ChildSessionKey)
		out = append(out, map[string]any{"key": r.ChildSessionKey, "relation": "child", "label": r.Label, "task": r.Task, "status": st})
	}
	if out == nil {
		out = []map[string]any{}
	}
	return map[string]any{"self": c.Key, "sessions": out}, nil
}

// status is a conversation's run state: its subagent run's outcome if it is one, and whether a
// live session works on it.
func (k *Orchestrator) status(_ context.Context, key string) (map[string]any, error) {
	st := map[string]any{"key": key, "live": false, "running": false}
	st["live"], st["running"] = k.Host.Live(key)
	runs, err := k.Runs.List(chatstore.SubagentFilter{ChildSessionKey: key})
	if err != nil {
		return nil, fmt.Errorf("subagents: %w", err)
	}
	if len(runs) > 0 {
		r := runs[0]
		st["runId"], st["label"] = r.RunID, r.Label
		switch {
		case r.Outcome == nil:
			st["run"] = "running"
		case r.Outcome.Status == chatstore.OutcomeOK:
			st["run"] = "completed"
		default:
			st["run"], st["error"] = "failed", r.Outcome.Error
		}
	}
	return st, nil
}

// destroy closes the live sessions on a child's key and archives its conversation; the run is
// ended (and announced) by its watcher, or here when nothing watches it any more.
func (k *Orchestrator) destroy(ctx context.Context, key string) (any, error) {
	closed := 0
	for _, id := range k.Host.SessionIDs(key) {
		if _, err := k.Sessions.Close(ctx, id, abi.CloseRequested); err == nil {
			closed++
		}
	}
	runs, err := k.Runs.List(chatstore.SubagentFilter{ChildSessionKey: key})
	if err != nil {
		return nil, fmt.Errorf("subagents: %w", err)
	}
	for _, r := range runs {
		if r.EndedAt == 0 && closed == 0 {
			k.endRun(ctx, r, chatstore.OutcomeError, "destroyed", "")
		}
	}
	archived := false
	if _, err := k.Chats.Archive(ctx, key); err == nil {
		archived = true
	}
	return map[string]any{"key": key, "sessionsClosed": closed, "archived": archived}, nil
}

// recentMessages are the last limit messages of key's context, as role and text.
func (k *Orchestrator) recentMessages(ctx context.Context, key string, limit int) (any, error) {
	if limit <= 0 {
		limit = 20
	}
	limit = min(limit, 200)
	h, err := k.Chats.History(ctx, key, conversation.HistoryOptions{Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", key, err)
	}
	defer func() { _ = h.Close() }()
	var out []map[string]string
	for raw, err := range h.Messages {
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", key, err)
		}
		msgs, err := provider.FromContext([]json.RawMessage{raw})
		if err != nil || len(msgs) == 0 {
			continue
		}
		m := msgs[0]
		var b strings.Builder
		for _, blk := range m.Content {
			switch blk.Type {
			case provider.BlockText:
				b.WriteString(blk.Text)
			case provider.BlockToolCall:
				fmt.Fprintf(&b, "[calls %s]", blk.Name)
			}
		}
		role := m.Role
		if role == provider.RoleToolResult {
			role = "tool " + m.ToolName
		}
		out = append(out, map[string]string{"role": role, "text": Clip(b.String(), 4000)})
	}
	if out == nil {
		out = []map[string]string{}
	}
	return map[string]any{"key": key, "messages": out}, nil
}
