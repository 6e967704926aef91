package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/noderpc"
	"github.com/nexus-run/nexus/internal/placement"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/trigger"
)

func (a *app) serveCmd() *cobra.Command {
	var (
		listen      string
		idle        time.Duration
		maxSessions int
		retention   time.Duration
		shell       string
		grace       time.Duration
		logLevel    string
		allowHosts  []string
		serveMCP    bool
		noIndex     bool
		noAILogs    bool
		aiRawLog    bool
		indexRoots  []string
		minTrigger  time.Duration
		agentShells = shellFlags{prefix: "mcp-"}
		cluster     clusterFlags
	)
	// Its stdout stays empty (logs go to stderr): errors are reported on stderr only.
	cmd := textOutput(&cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: live sessions over a unix socket (and TCP with --listen)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.applyFlagEnv(cmd.Flags(), agentShells.prefix); err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--log-level: %v", err)
			}
			for _, d := range []struct {
				name string
				v    time.Duration
			}{{"idle-timeout", idle}, {"retention", retention}, {"grace", grace}} {
				if d.v < 0 {
					return abi.Errorf(abi.CodeInvalidArgument, "", "--%s %s must not be negative (0 disables --idle-timeout)", d.name, d.v)
				}
			}
			if minTrigger <= 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--min-trigger-interval %s: it must be positive", minTrigger)
			}
			if maxSessions < 1 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--max-sessions %d: it must be at least 1", maxSessions)
			}
			clusterCfg, err := cluster.config(cmd.Flags())
			if err != nil {
				return err
			}
			// The history index the gateway keeps fresh and serves (/v1/index), unless --no-index.
			var historyIndex *gateway.IndexOptions
			if !noIndex {
				roots, err := parseIndexRoots("index-root", indexRoots)
				if err != nil {
					return err
				}
				syncOpts, err := a.indexSyncOptions(nil, roots)
				if err != nil {
					return err
				}
				historyIndex = &gateway.IndexOptions{Sync: syncOpts}
			} else if len(indexRoots) > 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--index-root with --no-index: there is no index to read into")
			}
			// The gateway's own log is also kept in a journal: debug-stream sessions on the
			// built-in server "gateway" follow it.
			journal := process.NewJournal(0, a.env.Now)
			logger := slog.New(journal.Handler(slog.NewTextHandler(a.env.Stderr, &slog.HandlerOptions{Level: lvl})))
			if idle == 0 {
				idle = -1 // runtime: negative disables
			}
			if err := fsutil.MkdirPrivate(a.stateDir); err != nil {
				return err
			}
			shellCfg, err := a.shellConfig(&agentShells)
			if err != nil {
				return err
			}
			var mcpCfg *agentshell.Config
			if serveMCP {
				mcpCfg = &shellCfg
			}
			owner, err := a.openOwner(cmd.Context(), "gateway", logger)
			if err != nil {
				return err
			}
			cfg := gateway.Config{
				StateDir:           a.stateDir,
				Listen:             listen,
				AllowedHosts:       allowHosts,
				Console:            listen != "",
				Version:            a.env.Version,
				Logger:             logger,
				Journal:            journal,
				Now:                a.env.Now,
				Getenv:             a.env.Getenv,
				Owner:              owner,
				MaxSessions:        maxSessions,
				IdleTimeout:        idle,
				Retention:          retention,
				Shell:              shell,
				Grace:              grace,
				Backends:           a.providerConfig,
				AILogs:             &aichat.LogOptions{Context: !noAILogs, Verbose: !noAILogs, Raw: !noAILogs && aiRawLog},
				MCP:                mcpCfg,
				Index:              historyIndex,
				MinTriggerInterval: minTrigger,
				Cluster:            clusterCfg,
				Ready: func(in gateway.Info, consoleAuth *console.Auth) {
					msg := fmt.Sprintf("nexus: gateway pid %d listening on %s", in.PID, in.Socket)
					if in.Listen != "" {
						msg += " and http://" + in.Listen + " (bearer token in " + a.stateDir + "/" + gateway.TokenFile + ")"
					}
					fmt.Fprintln(a.env.Stderr, msg)
					// The sign-in link goes to the terminal that started the gateway, never to
					// its log; it works once.
					if consoleAuth != nil {
						if _, url, _, err := consoleAuth.NewCode(); err == nil {
							fmt.Fprintf(a.env.Stderr, "nexus: console: %s (one-time sign-in link; nexus console makes another)\n", url)
						}
					}
				},
			}
			d, err := gateway.Assemble(cmd.Context(), cfg)
			if err != nil {
				_ = closeOwner(context.WithoutCancel(cmd.Context()), owner, logger)
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			serveErr := d.Run(ctx)
			// Sessions are closed, and the shells and processes with them; whatever is left of
			// any group is killed. A gateway that could not reap everything says so and fails.
			if err := closeOwner(context.WithoutCancel(ctx), owner, logger); err != nil && serveErr == nil {
				serveErr = err
			}
			return serveErr
		},
	})
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "also listen on TCP host:port (requires the bearer token in state/gateway.token)")
	f.DurationVar(&idle, "idle-timeout", live.DefaultIdleTimeout, "close sessions idle this long (0 disables)")
	f.IntVar(&maxSessions, "max-sessions", live.DefaultMaxSessions, "most live sessions at once")
	f.DurationVar(&retention, "retention", live.DefaultRetention, "how long closed sessions stay visible to session list --all")
	f.StringVar(&shell, "shell", "", "default shell of terminal sessions (default $SHELL, then bash, then sh)")
	f.DurationVar(&grace, "grace", 2*time.Second, "how long a closing shell gets after SIGHUP before it is killed")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringSliceVar(&allowHosts, "allow-host", nil, "a host name the TCP listener answers to besides IP addresses and localhost (repeatable; guards against DNS rebinding)")
	f.BoolVar(&serveMCP, "mcp", true, "serve agent shells over MCP (Streamable HTTP) at /v1/mcp, listed under /v1/shells; the --mcp-* flags are those of nexus mcp")
	f.BoolVar(&noAILogs, "no-ai-logs", false, "write no ai-chat logs (state/logs/<session>/context.md and verbose.md)")
	f.BoolVar(&aiRawLog, "ai-raw-log", false, "also write each ai-chat's HTTP exchanges with the model to state/logs/<session>/raw.jsonl (redacted)")
	f.BoolVar(&noIndex, "no-index", false, "do not keep the history index (state/index.db) fresh nor serve it under /v1/index")
	f.StringArrayVar(&indexRoots, "index-root", nil, "read SOURCE's transcripts into the index from DIR instead of its default directories (SOURCE=DIR, repeatable)")
	f.DurationVar(&minTrigger, "min-trigger-interval", trigger.DefaultMinInterval, "the shortest interval a cron job or heartbeat may fire at (an @every duration, a heartbeat's --every, the gap between two firings of a cron expression)")
	agentShells.bind(f, f)
	cluster.bind(f)
	return cmd
}

// clusterFlags make nexus serve a node of a cluster on NATS JetStream (docs/cluster.md).
type clusterFlags struct {
	urls                  []string
	creds, nkey, ca       string
	embedded              bool
	listen, clusterListen string
	routes                []string
	replicas              int
	node, name            string
	nodeLost              time.Duration
	placement             string
	rpcTimeout            time.Duration
}

func (c *clusterFlags) bind(f *pflag.FlagSet) {
	f.StringSliceVar(&c.urls, "nats", nil, "be a node of a cluster on this NATS deployment with JetStream (URL[,URL...]; user:password@ or token@ in a URL are its credentials): session records and events live there")
	f.StringVar(&c.creds, "nats-creds", "", "NATS credentials file (JWT and seed)")
	f.StringVar(&c.nkey, "nats-nkey", "", "NATS nkey seed file")
	f.StringVar(&c.ca, "nats-ca", "", "PEM file of the certificate authority of the NATS servers' TLS certificates")
	f.BoolVar(&c.embedded, "nats-embedded", false, "be a node of a cluster whose NATS server runs in this process (its store in state/nats)")
	f.StringVar(&c.listen, "nats-listen", "", "the embedded NATS server's client address (default 127.0.0.1 on a free port)")
	f.StringVar(&c.clusterListen, "nats-cluster-listen", "", "the embedded NATS server's route address, for --nats-routes (host:port)")
	f.StringSliceVar(&c.routes, "nats-routes", nil, "the other embedded NATS servers' route URLs (nats-route://host:port,...; this server's own may be listed)")
	f.IntVar(&c.replicas, "nats-replicas", 1, "replicas of the cluster's stream and bucket: 1 or 3")
	f.StringVar(&c.node, "node", "", "this node's name in the cluster (default the host name)")
	f.DurationVar(&c.nodeLost, "node-lost", live.DefaultNodeLost, "how long a node may miss its heartbeats (one a second) before the others mark its sessions error, node-lost")
	f.DurationVar(&c.rpcTimeout, "node-timeout", noderpc.DefaultTimeout, "how long a node waits for another's answer to a send, control or close of that node's session")
	f.StringVar(&c.name, "cluster", "nexus", "the cluster's name: its subjects, stream and bucket are named after it, so clusters sharing a NATS never mix")
	f.StringVar(&c.placement, "placement", placement.Local, "where a session whose create names no node is created: local (the node that got the request) or least-sessions (the live node with the fewest live sessions)")
}

// config returns the gateway's cluster settings; nil without --nats or --nats-embedded.
func (c *clusterFlags) config(f *pflag.FlagSet) (*gateway.ClusterConfig, error) {
	if len(c.urls) == 0 && !c.embedded {
		for _, name := range []string{"nats-creds", "nats-nkey", "nats-ca", "nats-listen", "nats-cluster-listen", "nats-routes", "nats-replicas", "node", "node-lost", "node-timeout", "cluster", "placement"} {
			if f.Changed(name) {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--%s needs --nats or --nats-embedded", name)
			}
		}
		return nil, nil
	}
	if c.replicas != 1 && c.replicas != 3 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--nats-replicas %d: want 1 or 3", c.replicas)
	}
	if !c.embedded {
		for _, name := range []string{"nats-listen", "nats-cluster-listen", "nats-routes"} {
			if f.Changed(name) {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--%s needs --nats-embedded", name)
			}
		}
	}
	if err := placement.CheckPolicy(c.placement); err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--placement %q: want local or least-sessions", c.placement)
	}
	if len(c.routes) > 0 && c.clusterListen == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--nats-routes needs --nats-cluster-listen (the address the other servers route to)")
	}
	return &gateway.ClusterConfig{
		Name: c.name, Node: c.node, URLs: c.urls, Creds: c.creds, NKey: c.nkey, CA: c.ca,
		Embedded: c.embedded, Listen: c.listen, ClusterListen: c.clusterListen, Routes: c.routes,
		Replicas: c.replicas, NodeLost: c.nodeLost, Placement: c.placement, RPCTimeout: c.rpcTimeout,
	}, nil
}

// projectsPath is state/projects.json.
func (a *app) projectsPath() string { return filepath.Join(a.stateDir, "projects.json") }
