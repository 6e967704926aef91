package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/shell/audit"
)

// mcpEnv maps each operator flag of `nexus mcp` to the environment variable that sets it when
// the flag is not given.
var mcpEnv = []struct{ flag, env string }{
	{"audit-dir", "NEXUS_MCP_AUDIT_DIR"},
	{"key-dir", "NEXUS_MCP_KEY_DIR"},
	{"known-hosts", "NEXUS_MCP_KNOWN_HOSTS"},
	{"host-key-fingerprint", "NEXUS_MCP_HOST_KEY_FINGERPRINT"},
	{"ssh-config", "NEXUS_MCP_SSH_CONFIG"},
	{"connect-timeout", "NEXUS_MCP_CONNECT_TIMEOUT"},
	{"start-timeout", "NEXUS_MCP_START_TIMEOUT"},
	{"max-sessions", "NEXUS_MCP_MAX_SESSIONS"},
	{"idle-timeout", "NEXUS_MCP_IDLE_TIMEOUT"},
	{"policy", "NEXUS_MCP_POLICY"},
	{"shadow-dir", "NEXUS_MCP_SHADOW_DIR"},
	{"log-level", "NEXUS_MCP_LOG_LEVEL"},
}

// applyFlagEnv sets every flag of fs that was not given on the command line from its
// environment variable, if that is set; prefix is what the command puts before the names of
// mcpEnv ("mcp-" for `nexus serve`).
func (a *app) applyFlagEnv(fs *pflag.FlagSet, prefix string) error {
	for _, p := range mcpEnv {
		f := fs.Lookup(prefix + p.flag)
		if f == nil || f.Changed {
			continue
		}
		if v := a.env.Getenv(p.env); v != "" {
			if err := fs.Set(prefix+p.flag, v); err != nil {
				return fmt.Errorf("%s=%q: %w", p.env, v, err)
			}
		}
	}
	return nil
}

func (a *app) mcpCmd() *cobra.Command {
	var (
		sf       shellFlags
		logLevel string
	)
	cmd := textOutput(&cobra.Command{
		Use:   "mcp",
		Short: "Serve agent shells to an MCP client (Claude Code, Cursor, Codex) over stdio",
		Long: `nexus mcp is a Model Context Protocol server on stdin/stdout. It gives an agent persistent
shells: session_create, session_exec, session_list, session_destroy, session_checkpoint,
session_checkpoints and session_restore.

Everything here is operator configuration, which no tool call can change. Each flag can also be
set by its environment variable (NEXUS_MCP_AUDIT_DIR, NEXUS_MCP_KEY_DIR, NEXUS_MCP_KNOWN_HOSTS,
NEXUS_MCP_HOST_KEY_FINGERPRINT, NEXUS_MCP_SSH_CONFIG, NEXUS_MCP_CONNECT_TIMEOUT, NEXUS_MCP_START_TIMEOUT, NEXUS_MCP_MAX_SESSIONS, NEXUS_MCP_IDLE_TIMEOUT,
NEXUS_MCP_POLICY, NEXUS_MCP_SHADOW_DIR, NEXUS_MCP_LOG_LEVEL); a flag wins over its variable.
Logs go to stderr; stdout carries only the protocol.

Every open, command, refusal and close is appended to <audit-dir>/<session_id>.jsonl; watch
them with "nexus mcp watch --follow". "nexus mcp setup claude|cursor|codex" prints the client
configuration.`,
		Args: noArgsOrSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.applyFlagEnv(cmd.Flags(), ""); err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			logger := slog.New(slog.NewTextHandler(a.env.Stderr, &slog.HandlerOptions{Level: lvl}))
			cfg, err := a.shellConfig(&sf)
			if err != nil {
				return err
			}
			if err := fsutil.MkdirPrivate(a.stateDir); err != nil {
				return err
			}
			owner, err := a.openOwner(cmd.Context(), "mcp", logger)
			if err != nil {
				return err
			}
			cfg.Owner = owner
			if a.env.Getenv("GOGC") == "" {
				// The MCP SDK allocates about half a megabyte per tool call decoding JSON (a fresh
				// decoder buffer per message). With the default GOGC and the server's small heap
				// that is a collection every few calls, which doubles a call's round trip; 400
				// keeps the heap small (tens of MB) and the round trip of session_exec "true"
				// under a millisecond.
				debug.SetGCPercent(400)
			}
			srv := mcp.New(mcp.Config{Session: cfg, Logger: logger, Version: a.env.Version})
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			logger.Info("nexus mcp: serving on stdio", "audit_dir", cfg.AuditDir, "max_sessions", cfg.MaxSessions,
				"idle_timeout", idleString(cfg.IdleTimeout), "policy", sf.policyFile)
			if f, ok := a.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) { //nolint:gosec // G115: a file descriptor fits in an int
				fmt.Fprintln(a.env.Stderr, "nexus mcp speaks the Model Context Protocol on stdin/stdout and is meant to be started by an MCP client; "+
					"see \"nexus mcp setup --help\". Press Ctrl-D to stop.")
			}
			err = srv.ServeStdio(ctx, a.env.Stdin, a.env.Stdout)
			if cerr := closeOwner(context.WithoutCancel(ctx), owner, logger); cerr != nil && err == nil {
				err = cerr
			}
			logger.Info("nexus mcp: stopped")
			return err
		},
	})
	f := cmd.Flags()
	sf.bind(f, cmd.PersistentFlags())
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.AddCommand(a.mcpSetupCmd(), a.mcpWatchCmd(&sf.auditDir))
	return cmd
}

// orState is dir made absolute, or <state>/name when dir is empty.
func (a *app) orState(dir, name string) string {
	if dir == "" {
		return filepath.Join(a.stateDir, name)
	}
	return absPath(dir)
}

// absPath makes an operator's path absolute, expanding a leading ~/ (a value from an
// environment variable or a client's configuration file never went through a shell). Empty and
// "none" stay as they are.
func absPath(p string) string {
	if p == "" || strings.EqualFold(p, "none") {
		return p
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = home + p[1:]
		}
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// knownHostsFile is the --known-hosts value: the given file, none, or ~/.ssh/known_hosts when
// that exists (the operator's own trust in hosts; unknown hosts are still refused).
func knownHostsFile(p string) string {
	switch {
	case strings.EqualFold(p, "none"):
		return ""
	case p != "":
		return absPath(p)
	}
	def := absPath("~/.ssh/known_hosts")
	if fi, err := os.Stat(def); err == nil && fi.Mode().IsRegular() {
		return def
	}
	return ""
}

func idleString(d time.Duration) string {
	if d < 0 {
		return "off"
	}
	return d.String()
}

func (a *app) mcpSetupCmd() *cobra.Command {
	var (
		overHTTP bool
		baseURL  string
	)
	cmd := textOutput(&cobra.Command{
		Use:   "setup claude|cursor|codex",
		Short: "Print the configuration that adds nexus to an MCP client",
		Long: `Print what to paste into an MCP client's configuration so it starts this nexus binary as
"nexus mcp": a "claude mcp add" command line and the .mcp.json entry for Claude Code, the
~/.cursor/mcp.json entry for Cursor, the ~/.codex/config.toml table for Codex. The configuration
goes to stdout, the explanations to stderr.

The configuration names the installed binary by its absolute path (the nexus on PATH when that is
this binary), and refuses a temporary "go run" build, which is deleted when it exits. It carries
what this invocation would use and an MCP client would not otherwise know: --state-dir and
--audit-dir when given, NEXUS_HOME when it moves the state directory away from ~/nexus/state, and
every NEXUS_MCP_* variable set now (paths made absolute), as the client's "env" for the server.
Codex starts servers with a reduced environment, so for Codex that table is the only way they
arrive.

With --http it prints instead the configuration that reaches the running gateway's MCP endpoint
(/v1/mcp on its --listen address, or --url) with the bearer token of the state directory: the
agent's shells are then the gateway's (listed by GET /v1/shells). The token is not printed:
Claude Code's command line reads it from the token file, Cursor and Codex from NEXUS_TOKEN.`,
		Args:              cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs:         []string{"claude", "cursor", "codex"},
		ValidArgsFunction: cobra.FixedCompletions([]string{"claude", "cursor", "codex"}, cobra.ShellCompDirectiveNoFileComp),
		RunE: func(cmd *cobra.Command, args []string) error {
			if overHTTP || baseURL != "" {
				u, err := a.gatewayMCPURL(baseURL)
				if err != nil {
					return err
				}
				return writeMCPHTTPSetup(a.env.Stdout, a.env.Stderr, args[0], mcpHTTPSetup{url: u, tokenFile: filepath.Join(a.stateDir, gateway.TokenFile)})
			}
			l, notes, err := a.mcpLaunch(cmd)
			if err != nil {
				return err
			}
			out, note := a.env.Stdout, a.env.Stderr
			for _, n := range notes {
				fmt.Fprintln(note, "# "+n)
			}
			switch args[0] {
			case "claude":
				fmt.Fprintln(note, "# Claude Code: run this (add --scope user to use nexus in every project):")
				line := "claude mcp add nexus"
				for _, e := range l.env {
					line += " -e " + shellQuote(e[0]+"="+e[1])
				}
				line += " -- " + shellQuote(l.exe)
				for _, arg := range l.args {
					line += " " + shellQuote(arg)
				}
				fmt.Fprintln(out, line)
				fmt.Fprintln(note, "# or put this in .mcp.json at the root of your project:")
				_, err = out.Write(mcpServersJSON(l))
			case "cursor":
				fmt.Fprintln(note, `# Cursor: put this in ~/.cursor/mcp.json (or .cursor/mcp.json in a project); merge it into "mcpServers" if the file exists:`)
				_, err = out.Write(mcpServersJSON(l))
			case "codex":
				fmt.Fprintln(note, "# Codex: add this to ~/.codex/config.toml:")
				fmt.Fprintln(note, codexApprovalNote)
				_, err = io.WriteString(out, codexTOML(l))
			}
			return err
		},
	})
	cmd.Flags().BoolVar(&overHTTP, "http", false, "configure the client for the running gateway's /v1/mcp (Streamable HTTP, bearer token) instead of starting nexus mcp")
	cmd.Flags().StringVar(&baseURL, "url", "", "with --http: the gateway's address, http://HOST:PORT (default: the --listen address of the gateway running for the state directory)")
	return cmd
}

// mcpLaunchConfig is how an MCP client starts `nexus mcp`: the binary, its arguments and the
// environment variables it must be given.
type mcpLaunchConfig struct {
	exe  string
	args []string
	// env is sorted by name.
	env [][2]string
}

// mcpPathVars are the NEXUS_MCP_* variables that hold paths: relative ones would be resolved
// against the client's working directory, so the configuration gets them absolute.
var mcpPathVars = map[string]bool{
	"NEXUS_MCP_AUDIT_DIR": true, "NEXUS_MCP_KEY_DIR": true, "NEXUS_MCP_KNOWN_HOSTS": true,
	"NEXUS_MCP_SSH_CONFIG": true, "NEXUS_MCP_POLICY": true, "NEXUS_MCP_SHADOW_DIR": true,
}

// mcpLaunch builds the launch configuration for the state this invocation uses, with a note for
// each setting it carries over.
func (a *app) mcpLaunch(cmd *cobra.Command) (mcpLaunchConfig, []string, error) {
	exe, err := installedBinary()
	if err != nil {
		return mcpLaunchConfig{}, nil, err
	}
	l := mcpLaunchConfig{exe: exe, args: []string{"mcp"}}
	var notes []string
	given := func(name string) bool { f := cmd.Flag(name); return f != nil && f.Changed }
	def := ""
	if home, err := os.UserHomeDir(); err == nil {
		def = filepath.Join(home, "nexus", "state")
	}
	if a.stateDir != def {
		if given("state-dir") {
			l.args = append(l.args, "--state-dir", a.stateDir)
			notes = append(notes, "state directory "+a.stateDir+" (--state-dir)")
		} else if h := a.env.Getenv("NEXUS_HOME"); h != "" {
			l.env = append(l.env, [2]string{"NEXUS_HOME", absPath(h)})
			notes = append(notes, "state directory "+a.stateDir+" (NEXUS_HOME)")
		}
	}
	if given("audit-dir") {
		dir := absPath(cmd.Flag("audit-dir").Value.String())
		l.args = append(l.args, "--audit-dir", dir)
		notes = append(notes, "audit directory "+dir+" (--audit-dir)")
	}
	for _, p := range mcpEnv {
		v := a.env.Getenv(p.env)
		if v == "" || (p.flag == "audit-dir" && given("audit-dir")) {
			continue
		}
		if mcpPathVars[p.env] {
			v = absPath(v)
		}
		l.env = append(l.env, [2]string{p.env, v})
		notes = append(notes, p.env+" from the environment")
	}
	sort.Slice(l.env, func(i, j int) bool { return l.env[i][0] < l.env[j][0] })
	return l, notes, nil
}

// installedBinary is the absolute path of this nexus binary as an MCP client should start it:
// the nexus found on PATH when it is this very file (its path is the one that survives an
// upgrade through a symlink), else the executable itself. A `go run` build is refused: it lives
// in a temporary directory that is deleted when it exits.
func installedBinary() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.Abs(exe)
	}
	if err != nil {
		return "", fmt.Errorf("find the nexus binary: %w", err)
	}
	if goRunBuild(exe) {
		return "", fmt.Errorf("this nexus is a temporary build of \"go run\" (%s), deleted when it exits, so an MCP client could not start it; "+
			"install nexus (make install, or go install ./cmd/nexus) and run \"nexus mcp setup\" with the installed binary", exe)
	}
	if p, err := exec.LookPath("nexus"); err == nil {
		if abs, err := filepath.Abs(p); err == nil && sameFile(abs, exe) {
			return abs, nil
		}
	}
	return exe, nil
}

// goRunBuild reports whether exe is where `go run` puts its build: <tmp>/go-build<N>/b<N>/exe/<name>.
func goRunBuild(exe string) bool {
	dir := filepath.Dir(exe)
	if filepath.Base(dir) != "exe" {
		return false
	}
	for d := filepath.Dir(dir); d != filepath.Dir(d); d = filepath.Dir(d) {
		if strings.HasPrefix(filepath.Base(d), "go-build") {
			return true
		}
	}
	return false
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// mcpServersJSON is the {"mcpServers": {"nexus": ...}} document of Claude Code and Cursor.
func mcpServersJSON(l mcpLaunchConfig) []byte {
	type server struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env,omitempty"`
	}
	srv := server{Command: l.exe, Args: l.args}
	if len(l.env) > 0 {
		srv.Env = map[string]string{}
		for _, e := range l.env {
			srv.Env[e[0]] = e[1]
		}
	}
	doc := map[string]map[string]server{"mcpServers": {"nexus": srv}}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(doc)
	return b.Bytes()
}

// codexApprovalNote: Codex asks before each MCP tool call, and run without a person to answer
// (codex exec) it refuses them all unless the server's table approves them.
const codexApprovalNote = `# non-interactive Codex (codex exec) cannot ask before a tool call and refuses nexus's tools: add default_tools_approval_mode = "approve" to the table to run them unasked`

// codexTOML is the [mcp_servers.nexus] table of ~/.codex/config.toml, with its env table.
func codexTOML(l mcpLaunchConfig) string {
	var b strings.Builder
	b.WriteString("[mcp_servers.nexus]\ncommand = " + tomlString(l.exe) + "\nargs = [")
	for i, arg := range l.args {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tomlString(arg))
	}
	b.WriteString("]\n")
	if len(l.env) > 0 {
		b.WriteString("\n[mcp_servers.nexus.env]\n")
		for _, e := range l.env {
			b.WriteString(tomlString(e[0]) + " = " + tomlString(e[1]) + "\n")
		}
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@%=", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !safe(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func (a *app) mcpWatchCmd(auditDir *string) *cobra.Command {
	var (
		follow bool
		sid    string
	)
	cmd := textOutput(&cobra.Command{
		Use:   "watch [--follow] [--session-id ID]",
		Short: "Print a readable transcript of every agent shell from the audit log",
		Long: `Print what agents did in their shells, from the audit log of "nexus mcp" (<state>/audit, or
--audit-dir / NEXUS_MCP_AUDIT_DIR): for each command a "[session] cwd $ command" line, its output
(stderr lines marked [stderr]) and "→ exit CODE (N ms)", plus opens, refusals and closes, in time
order across sessions. With --follow, keep printing new records as they are written until
interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.applyFlagEnv(cmd.Flags(), ""); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return audit.Watch(ctx, audit.WatchOptions{
				Dir: a.orState(*auditDir, "audit"), Session: sid, Follow: follow, Out: a.env.Stdout, Err: a.env.Stderr,
			})
		},
	})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep watching for new commands and new sessions")
	cmd.Flags().StringVar(&sid, "session-id", "", "show only this agent shell (session_id; --session is the same flag)")
	flagAliases(cmd, map[string]string{"session": "session-id"})
	_ = cmd.RegisterFlagCompletionFunc("session-id", a.completeAuditSessions(auditDir))
	return cmd
}
