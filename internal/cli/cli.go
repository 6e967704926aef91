// Package cli implements the nexus command line: commands, flags, output formats and the CLI
// context (the active session of each type).
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/gateway"
)

// Env is what a command may touch of the outside world, injected so tests control it.
type Env struct {
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Getenv  func(string) string
	Now     func() time.Time
	Version string
}

// app holds the global flags and shared helpers of one invocation.
type app struct {
	env      Env
	stateDir string
	gateway  string
	cl       *client.Client
}

// exitError carries an exit status for errors that were already reported.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs the nexus command line and returns the process exit status.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Version == "" {
		env.Version = "dev"
	}
	if len(args) == 2 && args[0] == watchdogCommand {
		return runWatchdog(ctx, env, args[1])
	}
	a := &app{env: env}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	a.reportError(cmd, err)
	return 1
}

// reportError prints a failed command's error, in the one place that decides where: the error
// response on stdout when the command's output is JSON (in the format the user chose: not with
// --format table or text), and the one line on stderr for whoever watches a pipe or a log. When
// both are terminals (a person at one screen) the response alone says it, not the message twice.
func (a *app) reportError(cmd *cobra.Command, err error) {
	var ae *abi.Error
	envelope := errors.As(err, &ae) && jsonOutput(cmd)
	if cmd != nil {
		if f := cmd.Flags().Lookup("format"); f != nil && (f.Value.String() == formatTable || f.Value.String() == eventsText) {
			envelope = false
		}
	}
	if envelope {
		a.printJSON(abi.ErrorResponse(err, a.env.Now()))
		if isTerminal(a.env.Stdout) && isTerminal(a.env.Stderr) {
			return
		}
	}
	fmt.Fprintf(a.env.Stderr, "nexus: %s\n", err)
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "nexus",
		Short:         "Durable, observable sessions for AI agents and people",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Required flags, flag groups and enumerated values are checked here rather than by
		// cobra after this hook, so that they are usage errors like the others.
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			if err := checkFlags(c); err != nil {
				return err
			}
			return a.resolveState()
		},
	}
	// The root is a group like the others, so a mistyped command answers as a mistyped
	// subcommand does (INVALID_ARGUMENT, with suggestions).
	group(root)
	root.Version = a.env.Version
	root.SetVersionTemplate("nexus {{.Version}} (ABI " + abi.Version + ")\n")
	root.PersistentFlags().StringVar(&a.stateDir, "state-dir", "", "state directory (default $NEXUS_HOME/state, NEXUS_HOME defaults to ~/nexus)")
	root.PersistentFlags().StringVar(&a.gateway, "gateway", "", "gateway address: a unix socket path or http://host:port (default the state directory's socket; env NEXUS_GATEWAY)")
	root.AddCommand(a.serveCmd(), a.versionCmd(), a.sessionCmd(), a.aiCmd(), a.agentCmd(), a.projectCmd(), a.mcpCmd(), a.acpCmd())
	root.AddCommand(a.chatCmd(), a.indexCmd(), a.cronCmd(), a.hookCmd(), a.processCmd(), a.serverCmd(), a.debugCmd(), a.networkCmd(), a.roadmapCmd(), a.metaCmd(), a.consoleCmd(), a.completionCmd())
	installConventions(root)
	return root
}

func (a *app) resolveState() error {
	if a.stateDir == "" {
		home := a.env.Getenv("NEXUS_HOME")
		if home == "" {
			uh, err := os.UserHomeDir()
			if err != nil {
				return fmt.Errorf("find home directory (set NEXUS_HOME): %w", err)
			}
			home = filepath.Join(uh, "nexus")
		}
		a.stateDir = filepath.Join(home, "state")
	}
	abs, err := filepath.Abs(a.stateDir)
	if err != nil {
		return fmt.Errorf("resolve state directory %s: %w", a.stateDir, err)
	}
	a.stateDir = abs
	// Every command trusts what it reads here (the socket it talks to, the token it sends): an
	// existing state directory that another user owns or can write is refused up front.
	if _, err := os.Lstat(abs); err == nil {
		if err := fsutil.CheckDir(abs); err != nil {
			return err
		}
	}
	if a.gateway == "" {
		a.gateway = a.env.Getenv("NEXUS_GATEWAY")
	}
	return nil
}

// client connects to the gateway named by the flags, the environment or the state directory.
func (a *app) client() *client.Client {
	if a.cl != nil {
		return a.cl
	}
	t := client.Target{Socket: filepath.Join(a.stateDir, gateway.SocketFile)}
	if g := a.gateway; g != "" {
		if strings.HasPrefix(g, "http://") || strings.HasPrefix(g, "https://") {
			t = client.Target{URL: g, Token: a.env.Getenv("NEXUS_TOKEN")}
			if t.Token == "" {
				if b, err := fsutil.ReadSecretNoFollow(filepath.Join(a.stateDir, gateway.TokenFile)); err == nil {
					t.Token = strings.TrimSpace(string(b))
				}
			}
		} else {
			t = client.Target{Socket: g}
		}
	}
	a.cl = client.New(t)
	return a.cl
}

func (a *app) printJSON(v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(a.env.Stderr, "nexus: encode output: %v\n", err)
		return
	}
	_, _ = a.env.Stdout.Write(unescapeHTML(buf.Bytes()))
}

func (a *app) warnf(format string, args ...any) {
	fmt.Fprintf(a.env.Stderr, "nexus: "+format+"\n", args...)
}

func (a *app) versionCmd() *cobra.Command {
	return a.printing(&cobra.Command{
		Use:   "version",
		Short: "Print the binary and ABI versions (and the running gateway's, if any)",
		Args:  cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string) (any, error) {
		out := map[string]any{"version": a.env.Version, "abiVersion": abi.Version}
		// A gateway that does not answer at once is reported as absent: version must not hang.
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		if v, err := a.client().Version(ctx); err == nil {
			out["gateway"] = v
		}
		return out, nil
	})
}
