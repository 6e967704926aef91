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

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/kinds/debugstream"
	"github.com/nexus-run/nexus/internal/kinds/metachat"
	"github.com/nexus-run/nexus/internal/kinds/netstream"
	"github.com/nexus-run/nexus/internal/kinds/terminal"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/project"
	"github.com/nexus-run/nexus/internal/roadmap"
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
			owner, err := a.openOwner(cmd.Context(), "gateway", logger)
			if err != nil {
				return err
			}
			// The terminals' run shells and the agents' shells (/v1/mcp) are two managers: an
			// agent must not see, run in or destroy a terminal's companion shell, and the
			// agents' shells have the operator's policy, cap and idle timeout. Both write the
			// audit directory, so their ids must differ; both belong to the gateway's owner.
			prefixes := runPrefixes(3)
			var agents *mcp.Server
			if serveMCP {
				shellCfg.Owner, shellCfg.RunPrefix = owner, prefixes[1]
				agents = mcp.New(mcp.Config{Session: shellCfg, Logger: logger, Version: a.env.Version})
			}
			projects := project.NewStore(a.projectsPath(), a.env.Now)
			shells := agentshell.New(agentshell.Config{
				MaxSessions: maxSessions,
				IdleTimeout: -1, // a run shell lives as long as its terminal
				RunPrefix:   prefixes[0],
				AuditDir:    filepath.Join(a.stateDir, "audit"),
				Now:         a.env.Now,
				Owner:       owner,
			})
			kind := &terminal.Kind{
				Shell:  shell,
				Grace:  grace,
				Shells: shells,
				Owner:  owner,
				Projects: func(id string) (string, error) {
					p, err := projects.Get(id)
					return p.Path, err
				},
			}
			chats := conversation.New(conversation.Options{Dir: conversation.SessionsDir(a.stateDir), Now: a.env.Now, Logger: logger})
			// ai-chat sessions: one bash agent shell per conversation, from the agents' manager
			// settings (policy, budgets) but never listed with the MCP agents' shells.
			aiShells := agentshell.New(agentshell.Config{
				MaxSessions: maxSessions,
				IdleTimeout: -1,
				RunPrefix:   prefixes[2],
				AuditDir:    filepath.Join(a.stateDir, "audit"),
				Now:         a.env.Now,
				Owner:       owner,
			})
			defer aiShells.Close()
			// ai-chat messages are queued durably (state/broker/queues.db) before they are
			// acknowledged, and delivered by their queue mode.
			queues, err := broker.Open(cmd.Context(), broker.Path(a.stateDir), broker.Options{Now: a.env.Now})
			if err != nil {
				return err
			}
			defer func() { _ = queues.Close() }()
			runs, err := chatstore.OpenSubagents(filepath.Join(a.stateDir, "subagents"), a.env.Now)
			if err != nil {
				return err
			}
			aiKind := &aichat.Kind{
				Broker:   queues,
				Runs:     runs,
				Chats:    chats,
				StateDir: a.stateDir,
				Config:   a.providerConfig,
				Getenv:   a.env.Getenv,
				Shells:   aiShells,
				Owner:    owner, // acp backends' agents die with the gateway
				Logs:     &aichat.LogOptions{Context: !noAILogs, Verbose: !noAILogs, Raw: !noAILogs && aiRawLog},
				Now:      a.env.Now,
				Logger:   logger,
			}
			// Cron jobs, heartbeats and webhooks (state/triggers/triggers.db) deliver into
			// conversations through the kind, which opens a session where none is open.
			triggerStore, err := trigger.OpenStore(cmd.Context(), trigger.Path(a.stateDir), a.env.Now)
			if err != nil {
				return err
			}
			defer func() { _ = triggerStore.Close() }()
			triggers := &trigger.Service{Store: triggerStore, Now: a.env.Now, Logger: logger, MinInterval: minTrigger,
				Deliver: func(ctx context.Context, d trigger.Delivery) (string, string, error) {
					t := d.Target
					out, err := aiKind.Deliver(ctx, aichat.Delivery{Key: d.Key, Text: d.Text, Mode: d.Mode, ID: d.ID, From: d.From, Origin: d.Origin,
						Options: abi.AIChatOptions{Agent: t.Agent, Backend: t.Backend, Model: t.Model, Level: t.Level, Workspace: t.Workspace}})
					return out.MessageID, out.Key, err
				}}
			// Managed processes run in groups of the gateway's owner: none outlives it.
			procs, err := process.Open(process.Dir(a.stateDir), process.Options{Owner: owner, Now: a.env.Now, Logger: logger})
			if err != nil {
				return err
			}
			procs.SetGatewayAddr(listen)
			debugKind := &debugstream.Kind{Processes: procs, Journal: journal}
			netKind := &netstream.Kind{Processes: procs}
			roadmaps, err := roadmap.Open(filepath.Join(a.stateDir, "roadmaps.json"), a.env.Now)
			if err != nil {
				return err
			}
			metaKind := &metachat.Kind{Roadmaps: roadmaps}
			// Sessions and their events live in state/live, so the next gateway still answers
			// for them (docs/live-sessions.md).
			openRegistry := func(ctx context.Context) (live.Backend, error) {
				store, err := live.OpenDiskStore(filepath.Join(a.stateDir, "live"), live.DiskOptions{Logger: logger})
				if err != nil {
					return nil, err
				}
				reg, err := live.New(ctx, live.Config{
					MaxSessions: maxSessions,
					IdleTimeout: idle,
					Retention:   retention,
					Store:       store,
					Now:         a.env.Now,
					Logger:      logger,
				}, kind, aiKind, debugKind, netKind, metaKind)
				if err != nil {
					_ = store.Close()
					return nil, err
				}
				aiKind.Sessions = reg // subagents are sessions of this registry
				// What a stopped gateway left queued is delivered without waiting for someone
				// to open its conversation.
				go aiKind.Resume(ctx)
				go triggers.Run(ctx)
				return reg, nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			var consoleAuth *console.Auth
			if listen != "" {
				consoleAuth = console.NewAuth(console.Options{Now: a.env.Now})
			}
			serveErr := gateway.Serve(ctx, gateway.DaemonOptions{
				Console:      consoleAuth,
				StateDir:     a.stateDir,
				Listen:       listen,
				AllowedHosts: allowHosts,
				Shells:       agents,
				Open:         openRegistry,
				Chats:        chats,
				Index:        historyIndex,
				Triggers:     triggers,
				Processes:    procs,
				Roadmaps:     roadmaps,
				Version:      a.env.Version,
				Logger:       logger,
				Ready: func(in gateway.Info) {
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
			})
			// Sessions are closed; the companion run shells go next, then whatever is left of
			// any group is killed. A gateway that could not reap everything says so and fails.
			if agents != nil {
				agents.Close() // Serve closed it, unless it failed before serving
			}
			shells.Close()
			procs.Close(context.WithoutCancel(ctx))
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
	return cmd
}

// projectsPath is state/projects.json.
func (a *app) projectsPath() string { return filepath.Join(a.stateDir, "projects.json") }
