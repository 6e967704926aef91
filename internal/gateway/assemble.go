package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/kinds/debugstream"
	"github.com/nexus-run/nexus/internal/kinds/metachat"
	"github.com/nexus-run/nexus/internal/kinds/netstream"
	"github.com/nexus-run/nexus/internal/kinds/terminal"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/noderpc"
	"github.com/nexus-run/nexus/internal/placement"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/project"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/roadmap"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/trigger"
	"github.com/nexus-run/nexus/internal/triggerkv"
)

// Config is everything a gateway daemon is made of, as plain values: what `nexus serve` parses
// its flags into, and what a test or a benchmark fills in to run the gateway the same way.
// Zero values take the defaults of `nexus serve`.
type Config struct {
	// StateDir is the state directory (created 0700); the daemon holds its lock while it runs.
	StateDir string
	// Listen adds a TCP listener (host:port) that requires the bearer token; AllowedHosts are
	// extra host names it answers to.
	Listen       string
	AllowedHosts []string
	// Console serves the web console on the TCP listener (it needs Listen).
	Console bool
	Version string
	Logger  *slog.Logger
	// Journal keeps the gateway's own log for debug-stream sessions on the server "gateway"
	// (nil: a journal of its own, which sees none of Logger's lines).
	Journal *process.Journal
	Now     func() time.Time
	// Getenv reads the environment of the ai-chat kind (NEXUS_HOME, API keys by variable
	// name); nil: os.Getenv.
	Getenv func(string) string
	// Owner answers for every process the daemon starts (terminals, shells, managed
	// processes); nil: each part tracks its own by process session. The caller closes it
	// after Run, which is when every group is empty or must be killed.
	Owner *reaper.Owner

	// Types are the session types served (nil: terminal, ai-chat, debug-stream,
	// network-stream and meta-chat). What a type needs is opened only when it is served.
	Types []abi.SessionType
	// MaxSessions, IdleTimeout (negative disables) and Retention bound the live sessions;
	// zero: live's defaults.
	MaxSessions int
	IdleTimeout time.Duration
	Retention   time.Duration
	// Log bounds each session's event log (zero values: live's defaults).
	Log live.LogLimits
	// Store keeps the sessions' records and events; nil: a DiskStore in StateDir/live, opened
	// once the daemon holds the state directory's lock.
	Store live.Store
	// Cluster, when set (and Store is not), keeps the live store (session records and event
	// logs) on NATS JetStream instead: docs/cluster.md.
	Cluster *ClusterConfig

	// Terminal sessions: the default shell ("": $SHELL, then bash, then sh), how long a
	// closing one gets after SIGHUP (0: 2s), its environment (nil: the gateway's), and where a
	// project id points (nil: StateDir/projects.json).
	Shell    string
	Grace    time.Duration
	ShellEnv []string
	Projects func(id string) (string, error)

	// AI chats: the model backends (nil: $NEXUS_HOME/config.toml), the logs they write (nil:
	// context.md and verbose.md) and the subagents' limits (zero: the kind's defaults).
	Backends  func() (*provider.Config, error)
	AILogs    *aichat.LogOptions
	Subagents aichat.SubagentLimits

	// MCP, when set, serves agent shells over MCP at /v1/mcp with these settings.
	MCP *agentshell.Config
	// Index, when set, keeps the history index fresh and serves it (see DaemonOptions.Index).
	Index *IndexOptions
	// MinTriggerInterval is the shortest interval a cron job may fire at (0: the default).
	MinTriggerInterval time.Duration

	// ShutdownTimeout bounds the graceful shutdown; default 15s.
	ShutdownTimeout time.Duration
	// Ready, if set, is called once the listeners accept connections, with the console's
	// authority when Console is set.
	Ready func(Info, *console.Auth)
}

// AllTypes are the session types a daemon serves by default.
var AllTypes = []abi.SessionType{abi.TypeTerminal, abi.TypeAIChat, abi.TypeDebugStream, abi.TypeNetworkStream, abi.TypeMetaChat}

// Daemon is a gateway assembled from a Config: run it once.
type Daemon struct {
	cfg   Config
	opts  DaemonOptions
	kinds []live.Kind
	// What Assemble opened is closed once the gateway has stopped, in order: first what runs
	// processes (the shells, the managed processes), then the stores.
	stopFirst, stopLast []func(context.Context)

	// What Assemble opened, for the caller that drives the daemon in process (a benchmark
	// enqueues into the broker; a test reads the registry).
	// Broker is set once Run has opened the cluster when the node is one (the cluster's queues
	// on JetStream); else by Assemble (state/broker/queues.db).
	Broker broker.Queues
	AIChat *aichat.Kind
	// Registry is the live-session registry, set once Run has opened it (before Ready).
	Registry *live.Registry
}

// Assemble builds the daemon cfg describes: the session kinds and the stores and services they
// need. Nothing is served, and no session restored, until Run. Close releases what Assemble
// opened if Run is never called.
func Assemble(ctx context.Context, cfg Config) (d *Daemon, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Types == nil {
		cfg.Types = AllTypes
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * time.Second
	}
	if cfg.MinTriggerInterval <= 0 {
		cfg.MinTriggerInterval = trigger.DefaultMinInterval
	}
	if cfg.Console && cfg.Listen == "" {
		return nil, errors.New("the web console is served on the TCP listener: it needs Listen")
	}
	if cfg.Cluster != nil {
		if err := placement.CheckPolicy(cfg.Cluster.Placement); err != nil {
			return nil, err
		}
	}
	if err := fsutil.MkdirPrivate(cfg.StateDir); err != nil {
		return nil, err
	}
	d = &Daemon{cfg: cfg}
	defer func() {
		if err != nil {
			d.Close()
			d = nil
		}
	}()
	serves := func(t abi.SessionType) bool { return slices.Contains(cfg.Types, t) }
	logger := cfg.Logger
	o := &d.opts
	*o = DaemonOptions{
		StateDir: cfg.StateDir, Listen: cfg.Listen, AllowedHosts: cfg.AllowedHosts, Version: cfg.Version,
		Logger: logger, Index: cfg.Index, ShutdownTimeout: cfg.ShutdownTimeout,
	}
	// The terminals' run shells, the agents' shells (/v1/mcp) and the ai chats' shells are
	// three managers: an agent must not see, run in or destroy another's shell, and the
	// agents' shells have the operator's policy, cap and idle timeout. All write the audit
	// directory, so their ids must differ; all belong to the gateway's owner.
	prefixes := runPrefixes(3)
	audit := filepath.Join(cfg.StateDir, "audit")
	maxShells := cfg.MaxSessions
	if maxShells <= 0 {
		maxShells = live.DefaultMaxSessions
	}
	if cfg.MCP != nil {
		sc := *cfg.MCP
		sc.Owner, sc.RunPrefix = cfg.Owner, prefixes[1]
		agents := mcp.New(mcp.Config{Session: sc, Logger: logger, Version: cfg.Version})
		o.Shells = agents
		d.stopFirst = append(d.stopFirst, func(context.Context) { agents.Close() }) // Serve closed it, unless it failed before serving
	}
	chats := conversation.New(conversation.Options{Dir: conversation.SessionsDir(cfg.StateDir), Now: cfg.Now, Logger: logger})
	o.Chats = chats

	if serves(abi.TypeTerminal) {
		shells := agentshell.New(agentshell.Config{
			MaxSessions: maxShells, IdleTimeout: -1, // a run shell lives as long as its terminal
			RunPrefix: prefixes[0], AuditDir: audit, Now: cfg.Now, Owner: cfg.Owner,
		})
		d.stopFirst = append(d.stopFirst, func(context.Context) { shells.Close() })
		projects := cfg.Projects
		if projects == nil {
			store := project.NewStore(filepath.Join(cfg.StateDir, "projects.json"), cfg.Now)
			projects = func(id string) (string, error) {
				p, err := store.Get(id)
				return p.Path, err
			}
		}
		d.kinds = append(d.kinds, &terminal.Kind{Shell: cfg.Shell, Grace: cfg.Grace, Env: cfg.ShellEnv, Shells: shells, Owner: cfg.Owner, Projects: projects})
	}
	if serves(abi.TypeAIChat) {
		if err := d.assembleAIChat(ctx, chats, maxShells, prefixes[2], audit); err != nil {
			return nil, err
		}
	}
	if serves(abi.TypeDebugStream) || serves(abi.TypeNetworkStream) {
		// Managed processes run in groups of the gateway's owner: none outlives it.
		procs, err := process.Open(process.Dir(cfg.StateDir), process.Options{Owner: cfg.Owner, Now: cfg.Now, Logger: logger})
		if err != nil {
			return nil, err
		}
		d.stopFirst = append(d.stopFirst, func(ctx context.Context) { procs.Close(ctx) })
		procs.SetGatewayAddr(cfg.Listen)
		o.Processes = procs
		if serves(abi.TypeDebugStream) {
			journal := cfg.Journal
			if journal == nil {
				journal = process.NewJournal(0, cfg.Now)
			}
			d.kinds = append(d.kinds, &debugstream.Kind{Processes: procs, Journal: journal})
		}
		if serves(abi.TypeNetworkStream) {
			d.kinds = append(d.kinds, &netstream.Kind{Processes: procs})
		}
	}
	if serves(abi.TypeMetaChat) {
		roadmaps, err := roadmap.Open(filepath.Join(cfg.StateDir, "roadmaps.json"), cfg.Now)
		if err != nil {
			return nil, err
		}
		o.Roadmaps = roadmaps
		d.kinds = append(d.kinds, &metachat.Kind{Roadmaps: roadmaps})
	}
	if cfg.Console {
		o.Console = console.NewAuth(console.Options{Now: cfg.Now})
	}
	return d, nil
}

// assembleAIChat opens what ai-chat sessions need: their shells, the durable queue, the
// subagent runs, and the triggers that deliver into conversations through the kind.
func (d *Daemon) assembleAIChat(ctx context.Context, chats *conversation.Service, maxShells int, prefix, audit string) error {
	cfg := d.cfg
	// One bash agent shell per conversation, never listed with the MCP agents' shells.
	shells := agentshell.New(agentshell.Config{
		MaxSessions: maxShells, IdleTimeout: -1, RunPrefix: prefix, AuditDir: audit, Now: cfg.Now, Owner: cfg.Owner,
	})
	// Messages are queued durably (state/broker/queues.db) before they are acknowledged; a
	// node of a cluster queues them in the cluster (Run sets the kind's Broker once it has
	// opened it), so any node delivers what another acknowledged.
	var queues broker.Queues
	if cfg.Cluster == nil || cfg.Store != nil {
		st, err := broker.Open(ctx, broker.Path(cfg.StateDir), broker.Options{Now: cfg.Now})
		if err != nil {
			return err
		}
		queues = st
		d.stopLast = append(d.stopLast, func(context.Context) { _ = st.Close() })
	}
	d.stopLast = append(d.stopLast, func(context.Context) { shells.Close() })
	// Subagent runs likewise: state/subagents/runs.json, or the cluster's (set by Run).
	var runs chatstore.SubagentRuns
	if cfg.Cluster == nil || cfg.Store != nil {
		g, err := chatstore.OpenSubagents(filepath.Join(cfg.StateDir, "subagents"), cfg.Now)
		if err != nil {
			return err
		}
		runs = g
	}
	backends := cfg.Backends
	if backends == nil {
		backends = func() (*provider.Config, error) {
			path, err := provider.ConfigPath(cfg.Getenv)
			if err != nil {
				return nil, err
			}
			return provider.LoadConfig(path)
		}
	}
	logs := cfg.AILogs
	if logs == nil {
		logs = &aichat.LogOptions{Context: true, Verbose: true}
	}
	kind := &aichat.Kind{
		Broker: queues, Runs: runs, Chats: chats, StateDir: cfg.StateDir, Config: backends,
		Getenv: cfg.Getenv, Shells: shells, Logs: logs, Subagents: cfg.Subagents, Now: cfg.Now, Logger: cfg.Logger,
		Owner: cfg.Owner, // acp backends' agents die with the gateway
	}
	// Cron jobs, heartbeats and webhooks (state/triggers/triggers.db) deliver into
	// conversations through the kind, which opens a session where none is open.
	triggerStore, err := trigger.OpenStore(ctx, trigger.Path(cfg.StateDir), cfg.Now)
	if err != nil {
		return err
	}
	d.stopLast = append([]func(context.Context){func(context.Context) { _ = triggerStore.Close() }}, d.stopLast...)
	d.opts.Triggers = &trigger.Service{Store: triggerStore, Now: cfg.Now, Logger: cfg.Logger, MinInterval: cfg.MinTriggerInterval,
		Deliver: func(ctx context.Context, del trigger.Delivery) (string, string, error) {
			t := del.Target
			out, err := kind.Deliver(ctx, aichat.Delivery{Key: del.Key, Text: del.Text, Mode: del.Mode, ID: del.ID, From: del.From, Origin: del.Origin,
				Options: abi.AIChatOptions{Agent: t.Agent, Backend: t.Backend, Model: t.Model, Level: t.Level, Workspace: t.Workspace}})
			return out.MessageID, out.Key, err
		}}
	d.Broker, d.AIChat = queues, kind
	d.kinds = append(d.kinds, kind)
	return nil
}

// Run serves the gateway until ctx ends (gateway.Serve: the state directory's lock, the
// listeners, the registry restored from its store), then closes every session and what
// Assemble opened. Run once.
func (d *Daemon) Run(ctx context.Context) error {
	cfg := d.cfg
	o := d.opts
	o.Open = func(ctx context.Context) (live.Backend, error) {
		store := cfg.Store
		var node string
		var nodeLost time.Duration
		var nc *nats.Conn
		if cfg.Cluster != nil {
			nodeLost = cfg.Cluster.NodeLost
			c := *cfg.Cluster
			if c.Node == "" {
				host, err := os.Hostname()
				if err != nil {
					return nil, fmt.Errorf("--node: the host name: %w", err)
				}
				c.Node = host
			}
			node, cfg.Cluster = c.Node, &c
		}
		var place placement.Config // a gateway alone refuses a create that names another node
		var owners placement.Owners
		if store == nil && cfg.Cluster != nil {
			st, conn, stop, err := openCluster(ctx, cfg)
			if err != nil {
				return nil, err
			}
			if d.AIChat != nil {
				// The ai-chat queues and subagent runs of the cluster (docs/cluster.md),
				// before any session or trigger uses them.
				q, err := st.Queues(ctx, cfg.Now)
				var runs *jetstore.Runs
				if err == nil {
					runs, err = st.Runs(ctx, cfg.Now)
				}
				if err != nil {
					if q != nil {
						_ = q.Close() // its watcher
					}
					_ = st.Close()
					stop(ctx)
					return nil, fmt.Errorf("cluster ai-chat stores: %w", err)
				}
				d.stopLast = append(d.stopLast, func(context.Context) { _ = runs.Close(); _ = q.Close() })
				// A conversation is the cluster's, owned by one node at a time (its lease):
				// its queue is keyed by the conversation alone, and the owner's session
				// delivers it, whichever node stored a message.
				d.AIChat.Broker, d.Broker, d.AIChat.Runs = q, q, runs
				// A lease lasts as long as a node may go silent before it is lost: a lost
				// node's conversations are free to take over as its sessions are marked.
				leaseTTL := nodeLost
				if leaseTTL <= 0 {
					leaseTTL = live.DefaultNodeLost
				}
				leases, err := st.Leases(ctx, leaseTTL, cfg.Now)
				if err != nil {
					_ = st.Close()
					stop(ctx)
					return nil, fmt.Errorf("cluster conversation leases: %w", err)
				}
				d.AIChat.Leases, d.AIChat.Node, owners = leases.Owned(), node, leases
				// Every transcript entry a turn writes is on the cluster's stream before the
				// turn goes on from it (docs/cluster.md, conversations).
				tr, err := st.Transcripts(ctx)
				if err != nil {
					_ = st.Close()
					stop(ctx)
					return nil, fmt.Errorf("cluster transcripts: %w", err)
				}
				d.AIChat.Chats.UseReplica(tr)
			}
			d.stopLast = append(d.stopLast, stop)
			store, nc = st, conn
			name := cfg.Cluster.Name
			if name == "" {
				name = "nexus" // jetstore's default
			}
			place = placement.Config{Conn: conn, Cluster: name, Node: node, Loads: st,
				Policy: cfg.Cluster.Placement, NodeLost: nodeLost, Now: cfg.Now, Owners: owners}
			if o.Triggers != nil {
				// The cluster's jobs and hooks, shared by every node, and each firing claimed
				// by one node (docs/cluster.md); state/triggers/triggers.db is not read.
				tk, err := triggerkv.Open(ctx, conn, triggerkv.Options{Cluster: cfg.Cluster.Name, Replicas: cfg.Cluster.Replicas, Now: cfg.Now, Node: node})
				if err != nil {
					_ = st.Close()
					return nil, fmt.Errorf("cluster triggers: %w", err)
				}
				o.Triggers.Store, o.Triggers.Claims = tk, tk
			}
		}
		if store == nil {
			// Sessions and their events live in state/live, so the next gateway still answers
			// for them (docs/live-sessions.md).
			st, err := live.OpenDiskStore(filepath.Join(cfg.StateDir, "live"), live.DiskOptions{Logger: cfg.Logger})
			if err != nil {
				return nil, err
			}
			store = st
		}
		var router live.Router
		if nc != nil {
			// Send, control, run and close of another node's session go to its node.
			router = noderpc.NewClient(nc, noderpc.ClientOptions{Cluster: cfg.Cluster.Name, Timeout: cfg.Cluster.RPCTimeout})
		}
		reg, err := live.New(ctx, live.Config{
			MaxSessions: cfg.MaxSessions, IdleTimeout: cfg.IdleTimeout, Retention: cfg.Retention,
			Log: cfg.Log, Store: store, Now: cfg.Now, Logger: cfg.Logger, Node: node, NodeLost: nodeLost,
			Router: router,
		}, d.kinds...)
		if err != nil {
			_ = store.Close()
			return nil, err
		}
		if nc != nil {
			srv, err := noderpc.Serve(nc, noderpc.ServerOptions{Cluster: cfg.Cluster.Name, Node: node, Local: reg.Local(), Logger: cfg.Logger})
			if err != nil {
				_ = reg.Shutdown(context.WithoutCancel(ctx))
				return nil, err
			}
			// It stops answering before the connection it answers on is closed.
			d.stopLast = append([]func(context.Context){func(context.Context) { srv.Close() }}, d.stopLast...)
		}
		d.Registry = reg
		// A create goes where the placement says: here, or forwarded to the node chosen,
		// which answers the creates forwarded to it (docs/cluster.md).
		placed, err := placement.New(reg, place)
		if err != nil {
			_ = reg.Shutdown(ctx)
			return nil, err
		}
		if place.Conn != nil {
			stop, err := placement.ServeCreates(ctx, place.Conn, place.Cluster, node, reg, cfg.Logger)
			if err != nil {
				_ = reg.Shutdown(ctx)
				return nil, err
			}
			d.stopFirst = append(d.stopFirst, func(context.Context) { stop() })
		}
		if d.AIChat != nil {
			d.AIChat.Sessions = reg // subagents are sessions of this registry
			// What a stopped gateway left queued is delivered without waiting for someone
			// to open its conversation.
			go d.AIChat.Resume(ctx)
		}
		if o.Triggers != nil {
			go o.Triggers.Run(ctx)
		}
		return placed, nil
	}
	if cfg.Ready != nil {
		o.Ready = func(in Info) { cfg.Ready(in, o.Console) }
	}
	err := Serve(ctx, o)
	// Sessions are closed; the shells go next, then the processes and the stores.
	d.Close()
	return err
}

// Close releases what Assemble opened (Run does it when it returns). It is idempotent.
func (d *Daemon) Close() {
	ctx := context.Background()
	for _, stop := range append(d.stopFirst, d.stopLast...) {
		stop(ctx)
	}
	d.stopFirst, d.stopLast = nil, nil
}

// runPrefixes returns n distinct random prefixes for the agent-shell managers' run ids.
func runPrefixes(n int) []string {
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		if p := hex.EncodeToString(b); !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// ClusterConfig makes a gateway a node of a nexus cluster on NATS JetStream.
type ClusterConfig struct {
	// Name is the cluster's name, which namespaces its subjects, stream and bucket (default
	// "nexus"); Node is this node's (default: the host name).
	Name, Node string
	// URLs are the NATS servers of an existing deployment; Creds, NKey and CA the usual NATS
	// credentials and TLS authority (files).
	URLs            []string
	Creds, NKey, CA string
	// Embedded runs nats-server in this process (its store in StateDir/nats), listening for
	// clients on Listen and, with Routes, for other nodes' servers on ClusterListen.
	Embedded      bool
	Listen        string
	ClusterListen string
	Routes        []string
	// Replicas of the stream and the bucket: 1 or 3 (default 1).
	Replicas int
	// NodeLost is how long a node may miss its heartbeats before the others mark its
	// sessions node-lost (default live.DefaultNodeLost).
	NodeLost time.Duration
	// Placement is where a create that names no node is created: placement.Local (or "",
	// this node) or placement.LeastSessions.
	Placement string
	// RPCTimeout bounds the wait for another node's answer to a send, control command or
	// close of its session (default noderpc.DefaultTimeout).
	RPCTimeout time.Duration
	// StartWait is how long a node starting waits for JetStream to answer (its servers
	// electing their leader) before it fails (default DefaultStartWait).
	StartWait time.Duration
}

// DefaultStartWait bounds a starting node's wait for JetStream: servers started together
// elect a leader within seconds; one that never comes is an error naming the URLs.
const DefaultStartWait = time.Minute

// openCluster connects to NATS (starting the embedded server first when asked) and opens the
// JetStream store; stop releases all of it once the registry has closed the store.
func openCluster(ctx context.Context, cfg Config) (*jetstore.Store, *nats.Conn, func(context.Context), error) {
	c := *cfg.Cluster // its Node is set
	var stops []func()
	stop := func(context.Context) {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	var token string
	if c.Embedded {
		var err error
		if token, err = natsToken(filepath.Join(cfg.StateDir, "nats")); err != nil {
			return nil, nil, nil, err
		}
		srv, err := jetstore.StartEmbedded(ctx, jetstore.EmbeddedOptions{
			Name: c.Node, Dir: filepath.Join(cfg.StateDir, "nats"), Listen: c.Listen,
			Cluster: c.Name, ClusterListen: c.ClusterListen, Routes: c.Routes, Token: token,
		})
		if err != nil {
			return nil, nil, nil, err
		}
		stops = append(stops, func() { srv.Shutdown(); srv.WaitForShutdown() })
		c.URLs = append([]string{srv.ClientURL()}, c.URLs...)
		cfg.Logger.Info("embedded nats-server", "client", srv.ClientURL(), "routes", c.Routes)
	}
	if len(c.URLs) == 0 {
		stop(ctx)
		return nil, nil, nil, abi.Errorf(abi.CodeInvalidArgument, "", "a cluster node needs --nats URL or --nats-embedded")
	}
	nc, err := jetstore.Dial(ctx, jetstore.DialOptions{URLs: c.URLs, Creds: c.Creds, NKey: c.NKey, CA: c.CA, Name: c.Node, Token: token})
	if err != nil {
		stop(ctx)
		return nil, nil, nil, err
	}
	stops = append(stops, nc.Close)
	wait := c.StartWait
	if wait <= 0 {
		wait = DefaultStartWait
	}
	begun := time.Now()
	for logged := false; ; {
		st, err := jetstore.Open(ctx, nc, jetstore.Options{Cluster: c.Name, Node: c.Node, Replicas: c.Replicas, Logger: cfg.Logger})
		if err == nil {
			return st, nc, stop, nil
		}
		// Servers that are up but have no JetStream leader yet (started moments ago, or
		// before enough of the others for a quorum) answer nothing or "temporarily
		// unavailable": the node waits for them, as a service manager's restart would.
		if !jetStreamStarting(err) || time.Since(begun) > wait || ctx.Err() != nil {
			stop(ctx)
			return nil, nil, nil, fmt.Errorf("cluster store on NATS at %s: %w", strings.Join(c.URLs, ","), err)
		}
		if !logged {
			cfg.Logger.Warn("waiting for JetStream: its servers have no leader yet", "urls", strings.Join(c.URLs, ","), "err", err, "wait", wait)
			logged = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // its servers' election, not a condition this node sees
		}
	}
}

// jetStreamStarting says err is JetStream not answering yet: a timeout, no responders, or its
// "temporarily unavailable" (no meta leader). Not JetStream disabled, nor refused credentials.
func jetStreamStarting(err error) bool {
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		return je.APIError().ErrorCode == 10008 // JSClusterNotAvailErr
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.ErrorCode == 10008
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// NATSTokenFile (in state/nats) holds the embedded nats-server's client token: its client port
// takes no connection without it (a local user could otherwise read every session's events).
const NATSTokenFile = "token"

// natsToken returns the embedded server's client token, made on first use.
func natsToken(dir string) (string, error) {
	path := filepath.Join(dir, NATSTokenFile)
	if b, err := os.ReadFile(filepath.Clean(path)); err == nil && len(b) > 0 {
		return string(b), nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("embedded nats-server token: %w", err)
	}
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return "", err
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	if err := fsutil.WriteFileAtomic(path, []byte(tok)); err != nil {
		return "", fmt.Errorf("embedded nats-server token: %w", err)
	}
	return tok, nil
}
