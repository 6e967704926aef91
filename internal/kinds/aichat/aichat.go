// Package aichat is the ai-chat session kind (docs/ai-chat.md): a conversation with a model
// through the agent turn loop, whose messages are a pi transcript of the conversation service
// and whose turns stream as ABI events. The session is the live view; the conversation (its
// session key) outlives it, so a new session on the same key resumes the same context, also
// after a gateway restart.
package aichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat/orchestrate"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Kind starts ai-chat sessions.
type Kind struct {
	// Chats holds the conversations (state/sessions).
	Chats *conversation.Service
	// StateDir is the gateway's state directory (agents, logs).
	StateDir string
	// Config loads config.toml's backends; it is read at each session's start, so an edit
	// applies to the next session.
	Config func() (*provider.Config, error)
	// Getenv and Transport are what each session's provider is opened with (provider.Open):
	// the environment its API key is read from, and the HTTP transport (nil: the default).
	Getenv    func(string) string
	Transport http.RoundTripper
	// Shells runs the conversations' bash tools (one agent shell each).
	Shells *agentshell.Manager
	// Workspace is the default workspace (default: the gateway's working directory).
	Workspace string
	// Logs writes state/logs/<session id>/ (context.md, verbose.md, raw.jsonl); nil: none.
	Logs *LogOptions
	// Broker is the durable message queue (state/broker/queues.db, or the cluster's on
	// JetStream); nil: no queue, a message during a turn is refused.
	Broker broker.Queues
	// Collect tunes the collect mode (defaults: 500 ms, 20, old).
	Collect CollectOptions
	// Sessions is the registry serving this kind, set once it exists: subagents are ai-chat
	// sessions it creates (sessions_spawn). Runs is state/subagents/runs.json (or the
	// cluster's runs on JetStream). Without both (and Broker) the tool is not offered.
	Sessions  live.Backend
	Runs      chatstore.SubagentRuns
	Subagents SubagentLimits
	// Owner, when set, runs acp backends' agents as process groups of the gateway's (they
	// never outlive it); nil: each agent gets a process group of its own.
	Owner *reaper.Owner

	// Leases give each conversation of a cluster one owning node (docs/cluster.md); nil: a
	// single node, whose conversations are its own. Node is this node's name, LeaseRenew how
	// often its leases are renewed (default a third of their length).
	Leases     conversation.Leases
	Node       string
	LeaseRenew time.Duration

	leaseMu    sync.Mutex
	leases     map[string]*heldLease
	renewing   bool
	takingOver map[string]bool

	sweepOnce   sync.Once
	orchMu      sync.Mutex
	orch        *orchestrate.Orchestrator
	schemaOnce  sync.Once
	schemaCache *tools.SchemaCache
	// chatsMu guards the live chats and who delivers each conversation's queue (delivery.go).
	chatsMu    sync.Mutex
	live       map[*chat]struct{}
	startSeq   uint64
	delivering map[string]*chat
	opening    map[string]bool
	// continuing are the conversations whose interrupted turn goes on at their next session
	// (crash.go).
	continuing map[string]bool
	// life ends with the gateway (Resume's context): no session is opened to deliver after it.
	life   context.Context
	Now    func() time.Time
	Logger *slog.Logger
}

// Type implements live.Kind.
func (k *Kind) Type() abi.SessionType { return abi.TypeAIChat }

// Capabilities implements live.Kind: the seed's ai-chat set (no resize, no restart).
func (k *Kind) Capabilities() abi.Capabilities {
	return abi.Capabilities{Send: true, Receive: true, Interrupt: true, Close: true, Stream: true}
}

func (k *Kind) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func (k *Kind) logger() *slog.Logger {
	if k.Logger != nil {
		return k.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (k *Kind) getenv(name string) string {
	if k.Getenv != nil {
		return k.Getenv(name)
	}
	return os.Getenv(name)
}

// defaultBackends are tried, in order, when neither the request nor the agent names one.
var defaultBackends = []string{"claude", "codex", "gemini", "qwen"}

// Start implements live.Kind.
func (k *Kind) Start(ctx context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	var opts abi.AIChatOptions
	if len(req.Options) > 0 {
		if err := abi.DecodeStrict(req.Options, &opts); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: %v", err)
		}
	}
	if err := checkClientMCP(opts.MCPServers); err != nil {
		return nil, err
	}
	key := req.Context.ChatID
	agentID := opts.Agent
	if a := orchestrate.AgentOfKey(key); a != "" {
		if agentID != "" && agentID != a {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "chat %s belongs to agent %s, not %s", key, a, agentID)
		}
		agentID = a
	}
	if agentID == "" {
		agentID = profile.Main
	}
	prof, err := profile.Load(k.StateDir, agentID)
	if err != nil {
		return nil, err
	}
	if key == "" {
		key = "agent:" + agentID + ":ai:" + shortID(sink.SessionID())
	}
	var c *chat
	started := false
	var lease conversation.OwnedLease
	var leaseKey string
	if k.Leases != nil {
		// Only the node holding the conversation's lease opens a session on it (checked
		// first: a start refused here costs nothing more); one taking it from another node
		// first rebuilds the transcript that node wrote.
		var err error
		if lease, leaseKey, err = k.takeLease(ctx, key); err != nil {
			return nil, err
		}
		defer func() {
			switch {
			case started:
			case c != nil:
				c.dropLease()
			default: // the start failed before the session held it
				k.releaseLease(leaseKey, lease)
			}
		}()
	}
	cfg, err := k.Config()
	if err != nil {
		return nil, err
	}
	backend, err := k.backend(cfg, firstOf(opts.Backend, prof.Backend))
	if err != nil {
		return nil, err
	}
	if m := firstOf(opts.Model, prof.Model); m != "" {
		backend.Model = m
	}
	if backend.Model == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "backend %s has no model: set model in config.toml or pass --model", backend.Name)
	}
	// A conversation another started (a subagent, one a message opened) is bounded by the
	// powers recorded for it, whatever this session asks for; its workspace is theirs.
	bounds, err := k.orchestrator().BoundsOf(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, b := range bounds {
		if b.Workspace != "" {
			opts.Workspace = b.Workspace
		}
	}
	ws, err := k.workspace(firstOf(opts.Workspace, prof.Workspace))
	if err != nil {
		return nil, err
	}
	// What the agent may do: agent.toml over config.toml's [defaults] over the built-ins.
	policy, err := profile.Resolve(cfg.Defaults, prof.Policy)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", agentID, err)
	}
	levelName := firstOf(opts.Level, string(policy.Level))
	level, err := permission.ParseLevel(levelName)
	if err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "%v", err)
	}
	effective := *prof
	effective.Policy = policy.Policy()
	powers := orchestrate.OwnPowers(&effective, level, ws)
	for _, b := range bounds {
		powers = powers.Bound(b)
	}
	level = powers.Level
	thinking := firstOf(opts.Thinking, prof.Thinking)
	c = &chat{
		k: k, sink: sink, key: key, lease: lease, leaseKey: leaseKey, prof: prof, backend: backend, workspace: ws, level: level, powers: powers, policy: policy,
		thinking: thinking, temperature: opts.Temperature, maxIter: opts.MaxToolIterations,
		pending: map[string]chan permission.Answer{}, idle: make(chan struct{}), background: opts.Background,
		roadmap: req.Context.RoadmapID,
	}
	close(c.idle)
	c.compaction = cfg.Compaction
	c.subagents = cfg.Subagents
	// The session's turns, its queue's pump and its background work live as long as the
	// session (its sink's lifetime), or until Close stops them first; Start's ctx bounds the
	// start only.
	c.base, c.stop = context.WithCancel(sink.Context())
	if k.Logs != nil {
		c.logs, err = openLogs(filepath.Join(k.StateDir, "logs", sink.SessionID()), *k.Logs, k.now)
		if err != nil {
			return nil, err
		}
	}
	if backend.Kind == provider.KindACP {
		err = c.openACP() // an external agent instead of the loop (acp.go)
	} else {
		c.p, err = provider.Open(backend, provider.Options{Getenv: k.Getenv, Transport: k.Transport, RawLog: c.logs.rawLog()})
	}
	if err != nil {
		c.release()
		return nil, err
	}
	if err := c.openTools(); err != nil {
		c.release()
		return nil, err
	}
	mcpStatus := c.connectMCP(ctx, cfg.MCPServers)
	for name, st := range c.connectClientMCP(ctx, opts.MCPServers, cfg.MCPServers) {
		mcpStatus[name] = st
	}
	c.options = abi.AIChatOptions{Backend: backend.Name, Model: backend.Model, Agent: agentID, Level: string(level), Workspace: ws,
		Thinking: thinking, Temperature: opts.Temperature, MaxToolIterations: opts.MaxToolIterations}
	if err := c.attach(ctx, key, opts.QueueMode); err != nil {
		c.release()
		return nil, err
	}
	c.nameTranscript(ctx, c.chatSession)
	sink.SetMetadata(map[string]any{
		"backend":       backend.Name,
		"model":         backend.Model,
		"workspacePath": ws,
		"agent":         agentID,
		"chatKey":       c.key,
		"chatSessionId": c.chatSession,
		"transcript":    c.transcript,
		"level":         string(level),
		"contextWindow": backend.ContextWindow,
		"streamingMode": true,
		// The seed's allowChallenge: whether the agent may ask the user (level trusted).
		"allowChallenge": level == permission.Trusted,
		"state":          StateIdle,
		"mcpServers":     mcpStatus,
		"queueMode":      string(c.queueMode),
		"background":     c.background,
	})
	// The sampling options too: a node taking the conversation over reopens it with them
	// (optionsOf), as a restart does from sessions.json, which stays on this node.
	sampling := map[string]any{"thinking": thinking}
	if opts.Temperature != nil {
		sampling["temperature"] = *opts.Temperature
	}
	if opts.MaxToolIterations > 0 {
		sampling["maxToolIterations"] = opts.MaxToolIterations
	}
	sink.SetMetadata(sampling)
	if opts.Replaces != "" {
		sink.SetMetadata(map[string]any{"replaces": opts.Replaces})
	}
	k.chatsMu.Lock()
	if k.live == nil {
		k.live = map[*chat]struct{}{}
	}
	k.startSeq++
	c.seq = k.startSeq
	k.live[c] = struct{}{}
	k.chatsMu.Unlock()
	// What a previous gateway left of subagent runs is finished before anything spawns.
	k.sweepOnce.Do(func() { k.orchestrator().SweepRuns(context.WithoutCancel(ctx)) })
	if k.Broker != nil {
		c.recheck.Store(true)
		c.wakeCh = make(chan struct{}, 1)
		go c.pump()
		c.wake() // messages queued before a restart
	}
	started = true
	return c, nil
}

// attach finds (or creates) the conversation, so the session object names it and its
// allowances are back before the first message. A conversation another session of this kind
// has open is read without holding it: that session's turn may hold it for long.
func (c *chat) attach(ctx context.Context, key, queueMode string) error {
	k := c.k
	var entry chatstore.SessionEntry
	if other := k.liveOn(key); other != nil {
		sh, err := k.Chats.Show(ctx, other.key)
		if err != nil {
			return err
		}
		if sh.Entry != nil {
			entry = *sh.Entry
		}
		c.key, c.chatSession, c.transcript = sh.Key, entry.SessionID, sh.File
		if sh.Header != nil {
			f, err := transcript.Open(sh.File)
			if err != nil {
				return fmt.Errorf("read transcript: %w", err)
			}
			c.allow, err = allowancesOf(f)
			if err != nil {
				return err
			}
		} else {
			c.allow = &permission.Allowances{}
		}
	} else {
		h, err := k.Chats.Hold(ctx, key, conversation.HoldOptions{Cwd: c.workspace, Fields: map[string]any{"project": c.workspace, "isAgentic": true}, Lease: c.heldLease()})
		if err != nil {
			return err
		}
		c.key, c.chatSession, c.transcript, entry = h.Key, h.SessionID, h.Path(), h.Entry
		// No session of this gateway is on the conversation, so a run its transcript has open
		// was a killed gateway's: it is closed here if the gateway's start has not yet.
		r, err := k.recoverHeld(ctx, h, func() *interruption {
			if s, ok := k.restartedOn(ctx)[h.Key]; ok {
				return k.readInterruption(ctx, s.SessionID)
			}
			return nil
		})
		if err != nil {
			_ = h.Close()
			return fmt.Errorf("close the turn a restart interrupted: %w", err)
		}
		if r != nil && r.unanswered && k.Broker != nil && !isSubagentKey(r.key) && k.continueTurns() {
			k.markContinue(r.key)
		}
		c.allow, err = allowancesOf(h.File())
		if cerr := h.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	c.spawnedBy = entry.SpawnedBy
	if p := entry.SpawnedBy; p != "" {
		if sh, serr := k.Chats.Show(ctx, p); serr == nil {
			c.parentSession = sh.File
		}
	}
	var err error
	if c.queueMode, err = broker.ParseMode(firstOf(queueMode, entry.QueueMode)); err != nil {
		return err
	}
	// What the session was started with goes into sessions.json at its turns, so the gateway
	// can open the conversation again, the same way, to deliver a message no session is there
	// for (delivery.go).
	c.setQueueMode = queueMode != ""
	return nil
}

// liveOn is a live chat of the kind on key (any spelling of it), or nil.
func (k *Kind) liveOn(key string) *chat {
	if pk, err := chatstore.ParseKey(key); err == nil {
		key = pk.String()
	}
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	for c := range k.live {
		if c.key == key {
			return c
		}
	}
	return nil
}

// backend resolves a backend name (or the first default whose key is set).
func (k *Kind) backend(cfg *provider.Config, name string) (provider.Backend, error) {
	if name == "" {
		for _, n := range defaultBackends {
			if b, ok := cfg.Backends[n]; ok && b.APIKeyEnv != "" && k.getenv(b.APIKeyEnv) != "" {
				name = n
				break
			}
		}
		if name == "" {
			return provider.Backend{}, abi.Errorf(abi.CodeInvalidArgument, "", "no backend named and no API key set for %s: pass --backend NAME (a backend of config.toml)", strings.Join(defaultBackends, ", "))
		}
	}
	b, ok := cfg.Backends[name]
	if !ok {
		return provider.Backend{}, abi.Errorf(abi.CodeInvalidArgument, "", "no backend %q in config.toml (have %s)", name, strings.Join(backendNames(cfg), ", "))
	}
	b.Name = name
	return b, nil
}

func backendNames(cfg *provider.Config) []string {
	out := make([]string, 0, len(cfg.Backends))
	for n := range cfg.Backends {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (k *Kind) workspace(dir string) (string, error) {
	if dir == "" {
		dir = k.Workspace
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("workspace: %w", err)
		}
		dir = wd
	}
	if !filepath.IsAbs(dir) {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "workspace %q must be an absolute path", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "workspace %s is not a directory", dir)
	}
	return filepath.Clean(dir), nil
}

// chat is one ai-chat session.
type chat struct {
	k         *Kind
	sink      live.Sink
	prof      *profile.Profile
	backend   provider.Backend
	p         provider.Provider
	acp       *acpBackend // an acp backend's agent, in place of p (acp.go)
	workspace string
	level     permission.Level
	// powers are what the model may do: the agent's and the options', bounded by what
	// started the conversation (powers.go); level and workspace are theirs.
	powers Powers
	// policy is the agent's effective policy: per-tool settings, timeouts, the concurrency
	// limit (its level, paths and targets are in powers, bounded).
	policy      *profile.Effective
	thinking    string
	temperature *float64
	maxIter     int
	logs        *logs

	key, chatSession, transcript string
	// lease is this node's lease on the conversation (a cluster's), under leaseKey; the
	// session's hold on it is given back once (dropped).
	lease    conversation.OwnedLease
	leaseKey string
	dropped  atomic.Bool
	// parentSession is a subagent's parent transcript (its header's parentSession), spawnedBy
	// its parent's key.
	parentSession, spawnedBy string

	perm *permission.Checker
	reg  *tools.Registry
	bash *tools.Bash
	mcp  []*tools.MCPClient

	base context.Context
	stop context.CancelFunc

	mu      sync.Mutex
	allow   *permission.Allowances
	running bool
	cancel  context.CancelFunc
	idle    chan struct{} // closed while no turn runs
	closed  bool
	pending map[string]chan permission.Answer
	reqSeq  int
	paused  bool

	// The queue's pump (queue.go): woken when a message is stored or a turn ends. recheck:
	// the queue's head must be looked for in the transcript before it is delivered (after a
	// start, or a failed delivery record), since only then can it be there already.
	queueMode broker.Mode
	wakeCh    chan struct{}
	recheck   atomic.Bool
	// background: opened by the gateway to deliver (AIChatOptions.Background); seq orders the
	// starts of the kind's sessions (the newest foreground one delivers its conversation's queue).
	background bool
	seq        uint64
	// roadmap is the roadmap the session is linked to; its subagents are linked too.
	roadmap string
	// options are what the session was started with, recorded in sessions.json at each turn's
	// start, with the queue mode when the start asked for one (setQueueMode).
	options      abi.AIChatOptions
	setQueueMode bool

	// turnIDs are the queued messages the pump's last turn delivers (a rollback names one).
	turnIDs []string
	// origin is where the newest delivered message came from: a subagent spawned in its
	// turn records it as its requester's origin.
	origin abi.Origin
	// compaction is config.toml's [compaction]; nothingToCut: a threshold compaction found
	// nothing to cut and said so (once, until one compacts again). Used by the running
	// activity only.
	compaction provider.Compaction
	// subagents is config.toml's [subagents]: the limits the kind's own do not set.
	subagents    provider.Subagents
	nothingToCut bool
}

func (c *chat) openTools() error {
	settings := c.policy.ToolSettings()
	for _, t := range c.powers.DisabledTools {
		s := settings[t]
		s.Disabled = true
		settings[t] = s
	}
	perm, err := permission.New(permission.Config{Level: c.level, Workspace: c.workspace, Tools: settings,
		AllowedPaths: c.powers.AllowedPaths, BlockedPaths: append(c.k.gatewayPaths(), c.powers.BlockedPaths...),
		AllowHardLinks: c.powers.AllowHardLinks, MaxTimeout: c.policy.MaxTimeout})
	if err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "", "permissions: %v", err)
	}
	c.perm = perm
	c.reg = tools.NewRegistry(perm)
	// The tools' schemas are resolved once for all of this kind's conversations.
	c.k.schemaOnce.Do(func() { c.k.schemaCache = tools.NewSchemaCache() })
	c.reg.UseSchemaCache(c.k.schemaCache)
	for _, t := range tools.Builtins(perm) {
		if err := c.reg.Add(t); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
	}
	if c.k.Shells != nil {
		c.bash = tools.NewBash(c.k.Shells, c.workspace, agentshell.CreateOptions{})
		if err := c.reg.Add(c.bash); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
	}
	if c.k.Sessions != nil && c.k.Runs != nil && c.k.Broker != nil {
		for _, t := range c.k.orchestrator().Tools(c.self) {
			if err := c.reg.Add(t); err != nil {
				return fmt.Errorf("tools: %w", err)
			}
		}
	}
	return nil
}

// gatewayPaths are blocked for the agent's tools at every level: the gateway's state
// directory (its token, the conversations, the triggers' secrets, the audit logs) and
// config.toml (which says where API keys are sent).
func (k *Kind) gatewayPaths() []string {
	var paths []string
	if k.StateDir != "" {
		if abs, err := filepath.Abs(k.StateDir); err == nil {
			paths = append(paths, abs)
		}
	}
	if cfg, err := provider.ConfigPath(k.getenv); err == nil {
		if abs, err := filepath.Abs(cfg); err == nil {
			paths = append(paths, abs)
		}
	}
	return paths
}

// connectMCP starts (or dials) the configured MCP servers and offers their tools; a server
// that fails is reported in the session's metadata and left out, the chat goes on without it.
// At level sandboxed none is started: their tools are not offered there.
func (c *chat) connectMCP(ctx context.Context, servers map[string]provider.MCPServer) map[string]any {
	status := map[string]any{}
	if c.level == permission.Sandboxed {
		for name := range servers {
			status[name] = map[string]any{"skipped": "MCP tools are not offered at level sandboxed"}
		}
		return status
	}
	for name, m := range servers {
		env := []string{}
		for _, v := range append([]string{"PATH", "HOME", "LANG"}, m.EnvVars...) {
			if val := c.k.getenv(v); val != "" {
				env = append(env, v+"="+val)
			}
		}
		dir := m.Cwd
		if dir == "" {
			dir = c.workspace
		}
		status[name] = c.addMCP(ctx, name, tools.MCPConnect{Command: m.Command, Args: m.Args, Env: env, Dir: dir, URL: m.URL})
	}
	return status
}

// clientMCPName is the form of a client's MCP server name (its tools are mcp_<name>_<tool>).
var clientMCPName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// headerName is an HTTP header's name (RFC 9110's token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// checkClientMCP refuses a client's MCP servers that cannot be started as named.
func checkClientMCP(servers []abi.AIMCPServer) error {
	seen := map[string]bool{}
	for _, m := range servers {
		switch {
		case !clientMCPName.MatchString(m.Name):
			return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: MCP server name %q: use letters, digits, '.', '_' and '-' (at most 64)", m.Name)
		case seen[m.Name]:
			return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: two MCP servers are named %s", m.Name)
		}
		switch m.Type {
		case "", abi.MCPStdio:
			if m.Command == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: MCP server %s has no command", m.Name)
			}
		case abi.MCPHTTP, abi.MCPSSE:
			if u, err := url.Parse(m.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: MCP server %s: url %q is not an http(s) URL", m.Name, m.URL)
			}
			for k, v := range m.Headers {
				if !headerName.MatchString(k) || strings.ContainsAny(v, "\r\n\x00") {
					return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: MCP server %s: %q is not a valid header", m.Name, k)
				}
			}
		default:
			return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: MCP server %s: type %q (use stdio, http or sse)", m.Name, m.Type)
		}
		seen[m.Name] = true
		for k := range m.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return abi.Errorf(abi.CodeInvalidArgument, "", "ai-chat options: MCP server %s: %q is not a variable name", m.Name, k)
			}
		}
	}
	return nil
}

// connectClientMCP starts the MCP servers the session's client named, as connectMCP starts
// config.toml's (a process group of its own, stopped with the session, run in the workspace,
// nothing started at level sandboxed), with PATH, HOME, LANG and the client's variables, or
// dials its URLs with its headers. A name config.toml already has keeps config.toml's server.
func (c *chat) connectClientMCP(ctx context.Context, servers []abi.AIMCPServer, configured map[string]provider.MCPServer) map[string]any {
	status := map[string]any{}
	for _, m := range servers {
		if _, dup := configured[m.Name]; dup {
			status[m.Name+" (client)"] = map[string]any{"error": "config.toml has an MCP server of this name: its server is the one connected"}
			continue
		}
		if c.level == permission.Sandboxed {
			status[m.Name] = map[string]any{"skipped": "MCP tools are not offered at level sandboxed"}
			continue
		}
		if m.Type == abi.MCPHTTP || m.Type == abi.MCPSSE {
			status[m.Name] = c.addMCP(ctx, m.Name, tools.MCPConnect{URL: m.URL, SSE: m.Type == abi.MCPSSE, Headers: m.Headers})
			continue
		}
		env := []string{}
		for _, v := range []string{"PATH", "HOME", "LANG"} {
			if _, given := m.Env[v]; !given {
				if val := c.k.getenv(v); val != "" {
					env = append(env, v+"="+val)
				}
			}
		}
		names := slices.Sorted(maps.Keys(m.Env))
		for _, k := range names {
			env = append(env, k+"="+m.Env[k])
		}
		status[m.Name] = c.addMCP(ctx, m.Name, tools.MCPConnect{Command: m.Command, Args: m.Args, Env: env, Dir: c.workspace})
	}
	return status
}

// addMCP connects one MCP server and offers its tools: its status, connected or why not.
func (c *chat) addMCP(ctx context.Context, name string, mc tools.MCPConnect) map[string]any {
	cl, err := tools.ConnectMCP(ctx, name, "nexus", mc)
	if err == nil {
		if err = c.reg.AddMCP(ctx, cl); err != nil {
			_ = cl.Close()
		}
	}
	if err != nil {
		c.k.logger().Warn("mcp server unavailable", "server", name, "err", err)
		return map[string]any{"error": err.Error()}
	}
	c.mcp = append(c.mcp, cl)
	return map[string]any{"connected": true}
}

// release frees what Start acquired.
func (c *chat) release() {
	c.stop()
	c.k.chatsMu.Lock()
	delete(c.k.live, c)
	if c.k.delivering[c.key] == c {
		delete(c.k.delivering, c.key)
	}
	c.k.chatsMu.Unlock()
	if c.seq != 0 {
		// What is still queued goes on being delivered, by another session on the key or by
		// one the gateway opens.
		go c.k.handOver(c.key)
	}
	for _, m := range c.mcp {
		_ = m.Close()
	}
	if c.acp != nil {
		c.acp.close()
	}
	if c.bash != nil {
		_ = c.bash.Close(context.Background())
	}
	if c.perm != nil {
		_ = c.perm.Close()
	}
	if c.logs != nil {
		c.logs.close()
	}
	c.dropLease()
}

// Send implements live.Instance: req.Data is the user's message. With the broker, the message
// is stored durably (its id is the result's MessageID) and delivered by req.Mode, else the
// session's queue mode (queue.go); without it one turn runs at a time and a message during a
// turn is refused.
func (c *chat) Send(ctx context.Context, req live.SendRequest) (live.SendResult, error) {
	text := strings.TrimSpace(string(req.Data))
	if text == "" {
		return live.SendResult{}, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "an empty message")
	}
	if c.k.Broker != nil {
		return c.enqueue(ctx, req)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return live.SendResult{}, abi.Errorf(abi.CodeSessionClosed, c.sink.SessionID(), "the session is closing")
	}
	if c.running {
		return live.SendResult{}, abi.Errorf(abi.CodeResourceUnavailable, c.sink.SessionID(), "a turn is running: wait for it to end or interrupt it (nexus ai message interrupt)")
	}
	c.startLocked(string(req.Data), nil)
	return live.SendResult{}, nil
}

// startLocked starts a turn on text (ids: the queued messages it delivers). c.mu is held and
// no turn runs.
func (c *chat) startLocked(text string, ids []string) { c.startTurnLocked(text, ids, false) }

// startTurnLocked is startLocked for a turn that may continue an interrupted one (cont: no
// new message; the delivery claim is released as for queued messages).
func (c *chat) startTurnLocked(text string, ids []string, cont bool) {
	c.runLocked(func(ctx context.Context) func() {
		end := c.turn(ctx, text, ids, cont)
		if len(ids) > 0 || cont {
			c.k.unclaim(c) // before c.mu is taken: the kind's lock goes first
		}
		return func() {
			c.sink.Publish(abi.EventData, end)
			c.sink.Publish(abi.EventData, abi.RunOf(end))
		}
	})
}

// runLocked runs job as the session's one activity (a turn, a compaction): while it runs,
// messages wait in the queue and interrupt cancels its context. c.mu is held and nothing runs.
// What job returns is called as the activity stops counting as running (under c.mu): a client
// that sends its next message on seeing the end is never told something runs. Then the queue
// is looked at again.
func (c *chat) runLocked(job func(ctx context.Context) (publishEnd func())) {
	ctx, cancel := context.WithCancel(c.base)
	c.running, c.cancel = true, cancel
	c.idle = make(chan struct{})
	done := c.idle
	go func() {
		defer close(done)
		defer cancel()
		publish := job(ctx)
		c.mu.Lock()
		c.running, c.cancel = false, nil
		publish()
		c.mu.Unlock()
		c.wake()
	}()
}

// Control implements live.Instance: interrupt ends the running turn (its transcript stays
// valid: the reply so far is kept as aborted, every call answered); confirm answers a
// confirmation request; queue reads the conversation's queue from this node's broker (a
// cluster's, scoped to this node, on a node of one).
func (c *chat) Control(ctx context.Context, req abi.ControlRequest) (any, error) {
	switch req.Command {
	case abi.CommandQueue:
		return c.queue(ctx, req.Last)
	case abi.CommandInterrupt:
		c.mu.Lock()
		cancel := c.cancel
		c.mu.Unlock()
		if cancel == nil {
			return map[string]any{"interrupted": false, "reason": "no turn is running"}, nil
		}
		cancel()
		return map[string]any{"interrupted": true}, nil
	case abi.CommandConfirm:
		ans, err := permission.ParseAnswer(req.Answer)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "%v", err)
		}
		c.mu.Lock()
		ch, ok := c.pending[req.RequestID]
		if ok {
			delete(c.pending, req.RequestID)
		}
		c.mu.Unlock()
		if !ok {
			return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "no pending confirmation request %q", req.RequestID)
		}
		ch <- ans
		return map[string]any{"requestId": req.RequestID, "answer": ans}, nil
	case abi.CommandCompact:
		return c.compactNow()
	case abi.CommandSpawn:
		sp := req.Spawn
		if sp == nil || strings.TrimSpace(sp.Task) == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "spawn needs a task")
		}
		if c.k.Sessions == nil || c.k.Runs == nil || c.k.Broker == nil {
			return nil, abi.Errorf(abi.CodeCapabilityUnsupported, c.sink.SessionID(), "subagents are not available in this gateway")
		}
		out, err := c.k.orchestrator().Spawn(context.WithoutCancel(c.base), c.self(), *sp)
		if ae := (*abi.Error)(nil); errors.As(err, &ae) {
			// A limit keeps its code (LIMIT_EXCEEDED: retry later).
			return nil, &abi.Error{Code: ae.Code, SessionID: c.sink.SessionID(), Message: ae.Message, Err: ae.Err}
		}
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "%v", err)
		}
		return out, nil
	}
	return nil, abi.Errorf(abi.CodeCapabilityUnsupported, c.sink.SessionID(), "ai-chat sessions do not support %s", req.Command)
}

// queue is what waits in the conversation's queue, or with last > 0 its last messages of
// every state.
func (c *chat) queue(ctx context.Context, last int) (any, error) {
	if last < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, c.sink.SessionID(), "last %d: want 0 or more", last)
	}
	if c.k.Broker == nil {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, c.sink.SessionID(), "this gateway has no message queue")
	}
	key := c.key // set before the session is published, never after
	var ms []broker.Message
	var err error
	if last > 0 {
		ms, err = c.k.Broker.History(ctx, key, last)
	} else {
		ms, err = c.k.Broker.Queued(ctx, key)
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: read its queue: %w", c.sink.SessionID(), err)
	}
	if ms == nil {
		ms = []broker.Message{}
	}
	return map[string]any{"key": key, "messages": ms}, nil
}

// compactNow starts a compaction between turns (nexus ai compact) and returns at once: its
// progress and result are ai-compaction events (or an error event) after afterSeq. An
// interrupt stops it.
func (c *chat) compactNow() (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, abi.Errorf(abi.CodeSessionClosed, c.sink.SessionID(), "the session is closing")
	}
	if c.running {
		return nil, abi.Errorf(abi.CodeResourceUnavailable, c.sink.SessionID(), "a turn is running: compact when it has ended")
	}
	after := c.sink.LastSeq()
	c.runLocked(func(ctx context.Context) func() {
		ev, err := c.compactHeld(ctx)
		c.sink.SetMetadata(map[string]any{"state": StateIdle})
		return func() {
			if err != nil {
				c.turnError(err)
				return
			}
			c.sink.Publish(abi.EventData, *ev)
		}
	})
	return map[string]any{"compacting": true, "afterSeq": after}, nil
}

func (c *chat) compactHeld(ctx context.Context) (*abi.AICompaction, error) {
	h, err := c.k.Chats.Hold(ctx, c.key, conversation.HoldOptions{Cwd: c.workspace, Lease: c.heldLease()})
	if err != nil {
		return nil, err
	}
	ev, err := c.compact(ctx, h, nil, CompactRequested)
	if cerr := h.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return ev, nil
}

// SetPaused implements live.Pauser: a paused session accepts no new turn start but lets a
// running one finish (its events are held by the runtime's flow control).
func (c *chat) SetPaused(paused bool) {
	c.mu.Lock()
	c.paused = paused
	c.mu.Unlock()
}

// Close implements live.Instance: the running turn is interrupted and its transcript
// completed before the session ends.
func (c *chat) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	idle := c.idle
	c.mu.Unlock()
	c.stop()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	c.release()
	return nil
}

// allowancesOf reads the conversation's last recorded allowances.
func allowancesOf(f *transcript.File) (*permission.Allowances, error) {
	for i := len(f.Entries) - 1; i >= 0; i-- {
		e := f.Entries[i]
		if e.Type != "custom" || e.CustomType != AllowancesCustomType {
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			return nil, fmt.Errorf("read allowances: %w", err)
		}
		var rec struct {
			Data permission.Allowances `json:"data"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("read allowances (line %d): %w", e.Line, err)
		}
		return &rec.Data, nil
	}
	return &permission.Allowances{}, nil
}

// AllowancesCustomType is the custom entry that records a conversation's allowances.
const AllowancesCustomType = "nexus.allowances"

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func shortID(id string) string {
	id = strings.ReplaceAll(id, "-", "")
	if len(id) > 12 {
		return id[len(id)-12:]
	}
	return id
}
