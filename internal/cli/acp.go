package cli

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/acpagent"
)

func (a *app) acpCmd() *cobra.Command {
	var (
		o           abi.AIChatOptions
		logLevel    string
		temperature float64
	)
	cmd := textOutput(&cobra.Command{
		Use:   "acp",
		Short: "Serve nexus ai chats to an editor (Zed, JetBrains, Neovim) over the Agent Client Protocol on stdio",
		Long: `nexus acp is an Agent Client Protocol agent on stdin/stdout, backed by the running gateway's
ai-chat sessions: an editor's chat is a nexus conversation (its ACP session id is the
conversation's key), which nexus chat, nexus ai, the console and the history index all see.

Each session opens an ai-chat session with these flags and the editor's cwd as its workspace;
the editor's session modes are the permission levels (trusted, sandboxed, yolo), and nexus's
confirmation requests are its permission requests. The sessions this command opens close when
it exits; their conversations stay (session/load opens them again). Logs go to stderr; stdout
carries only the protocol. See docs/acp.md for the editors' configuration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			if temperature >= 0 {
				o.Temperature = &temperature
			}
			logger := slog.New(slog.NewTextHandler(a.env.Stderr, &slog.HandlerOptions{Level: lvl}))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			c := a.client()
			if _, err := c.Version(ctx); err != nil {
				// Served anyway: every request answers the gateway's error, which says what to do.
				logger.Warn("nexus acp: no gateway answers (start one with nexus serve)", "target", c.Target().String(), "err", err)
			}
			if f, ok := a.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) { //nolint:gosec // G115: a file descriptor fits in an int
				fmt.Fprintln(a.env.Stderr, "nexus acp speaks the Agent Client Protocol on stdin/stdout and is meant to be started by an editor; see docs/acp.md. Press Ctrl-D to stop.")
			}
			logger.Info("nexus acp: serving on stdio", "gateway", c.Target().String(), "agent", o.Agent, "level", o.Level)
			err := acpagent.New(acpagent.Config{Client: c, Options: o, Version: a.env.Version, Logger: logger}).Serve(ctx, a.env.Stdin, a.env.Stdout)
			logger.Info("nexus acp: stopped")
			return err
		},
	})
	f := cmd.Flags()
	f.StringVar(&o.Agent, "agent", "", "agent id of the conversations (default main; see nexus agent list)")
	f.StringVar(&o.Backend, "backend", "", "backend of config.toml (default: the agent's, else the first whose API key is set)")
	f.StringVar(&o.Model, "model", "", "model (default: the backend's)")
	enumFlag(cmd, &o.Level, "level", "", "the sessions' first mode, a permission level: yolo, trusted or sandboxed (default: the agent's, else trusted)", "yolo", "trusted", "sandboxed")
	f.StringVar(&o.Thinking, "thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	f.Float64Var(&temperature, "temperature", -1, "sampling temperature; -1 leaves it to the model")
	f.IntVar(&o.MaxToolIterations, "max-tool-iterations", 0, "model calls per prompt at most (default 10)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
