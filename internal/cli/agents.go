package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// agentEdit are the flags that set an agent's files.
type agentEdit struct {
	settings         profile.Settings
	identity, soul   string
	identityF, soulF string
	disabled         []string
	clearDisabled    bool
}

func agentEditFlags(cmd *cobra.Command, e *agentEdit) {
	f := cmd.Flags()
	f.StringVar(&e.settings.Backend, "backend", "", "backend of config.toml the agent talks to")
	f.StringVar(&e.settings.Model, "model", "", "model")
	f.StringVar(&e.settings.Level, "level", "", "permission level: yolo, trusted or sandboxed")
	f.StringVar(&e.settings.Workspace, "workspace", "", "default workspace (absolute)")
	f.StringVar(&e.settings.Thinking, "thinking", "", "thinking level")
	f.StringVar(&e.settings.Description, "description", "", "what the agent is for (one line, also in its prompt)")
	f.StringVar(&e.identity, "identity", "", "IDENTITY.md's text")
	f.StringVar(&e.identityF, "identity-file", "", "read IDENTITY.md from this file")
	f.StringVar(&e.soul, "soul", "", "SOUL.md's text")
	f.StringVar(&e.soulF, "soul-file", "", "read SOUL.md from this file")
	f.StringSliceVar(&e.disabled, "disable-tool", nil, "a tool the agent may not use (repeatable)")
	f.BoolVar(&e.clearDisabled, "enable-all-tools", false, "clear the disabled tools")
}

// apply sets the flags given on cmd onto p.
func (e *agentEdit) apply(cmd *cobra.Command, p *profile.Profile) error {
	ch := cmd.Flags().Changed
	set := func(name string, dst *string, v string) {
		if ch(name) {
			*dst = v
		}
	}
	set("backend", &p.Backend, e.settings.Backend)
	set("model", &p.Model, e.settings.Model)
	set("level", &p.Level, e.settings.Level)
	set("workspace", &p.Workspace, e.settings.Workspace)
	set("thinking", &p.Thinking, e.settings.Thinking)
	set("description", &p.Description, e.settings.Description)
	set("identity", &p.Identity, e.identity)
	set("soul", &p.Soul, e.soul)
	for _, f := range []struct {
		path string
		dst  *string
	}{{e.identityF, &p.Identity}, {e.soulF, &p.Soul}} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path) //nolint:gosec // G304: a file the user names
		if err != nil {
			return fmt.Errorf("read %s: %w", f.path, err)
		}
		*f.dst = string(b)
	}
	if e.clearDisabled {
		p.DisabledTools = nil
	}
	p.DisabledTools = append(p.DisabledTools, e.disabled...)
	if p.Level != "" {
		if _, err := permission.ParseLevel(p.Level); err != nil {
			return abi.Errorf(abi.CodeInvalidArgument, "", "%v", err)
		}
	}
	return nil
}

func (a *app) agentAddCmd() *cobra.Command {
	var e agentEdit
	var format string
	cmd := &cobra.Command{
		Use:   "add ID",
		Short: "Add an agent: a persona under state/agents/ID (IDENTITY.md, SOUL.md, agent.toml)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := &profile.Profile{ID: args[0]}
			if err := e.apply(cmd, p); err != nil {
				return err
			}
			if err := profile.Save(a.stateDir, p, true); err != nil {
				return err
			}
			return a.print(format, p, nil)
		},
	}
	agentEditFlags(cmd, &e)
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) agentEditCmd() *cobra.Command {
	var e agentEdit
	var format string
	cmd := &cobra.Command{
		Use:   "edit ID",
		Short: "Change an agent's settings or files (main is created on its first edit)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := profile.Load(a.stateDir, args[0])
			if err != nil {
				return err
			}
			if err := e.apply(cmd, p); err != nil {
				return err
			}
			if err := profile.Save(a.stateDir, p, false); err != nil {
				return err
			}
			return a.print(format, p, nil)
		},
	}
	agentEditFlags(cmd, &e)
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) agentListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the agents (main always exists)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := profile.List(a.stateDir)
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"agents": ps}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tBACKEND\tMODEL\tLEVEL\tDESCRIPTION")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, dash(p.Backend), dash(p.Model), dash(p.Level), cellText(p.Description))
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) agentShowCmd() *cobra.Command {
	var format, workspace string
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show an agent and the system prompt it would get in a workspace (with its report)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := profile.Load(a.stateDir, args[0])
			if err != nil {
				return err
			}
			ws := workspace
			if ws == "" {
				ws = p.Workspace
			}
			if ws == "" {
				if ws, err = os.Getwd(); err != nil {
					return fmt.Errorf("workspace: %w", err)
				}
			}
			prompt, rep, err := p.SystemPrompt(ws)
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"agent": p, "systemPrompt": prompt, "systemPromptReport": rep}, nil)
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "workspace whose AGENTS.md and NEXUS.md go into the prompt (default: the agent's, else this directory)")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) agentRunsCmd() *cobra.Command {
	var format, requester string
	var active, follow bool
	cmd := &cobra.Command{
		Use:   "runs [--requester KEY] [--active] [--follow]",
		Short: "The subagent runs (state/subagents/runs.json): who spawned what, running or how it ended",
		Long: "The subagent runs, from state/subagents/runs.json. With --follow the command stays, printing each run again\n" +
			"as it starts and ends (with --format json, one JSON object per line), until interrupted.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir := filepath.Join(a.stateDir, "subagents")
			g, err := chatstore.OpenSubagents(dir, a.env.Now)
			if err != nil {
				return err
			}
			filter := chatstore.SubagentFilter{RequesterSessionKey: requester, Active: active}
			if follow {
				return a.followRuns(cmd.Context(), g, dir, filter, format)
			}
			runs, err := g.List(filter)
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"runs": runs}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, runsHeader)
				for _, r := range runs {
					runRow(tw, r)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&requester, "requester", "", "only the runs this conversation spawned")
	cmd.Flags().BoolVar(&active, "active", false, "only the runs still going (with --follow: at the start)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stay and print each run as it starts and ends")
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

const runsHeader = "RUN\tLABEL\tSTATUS\tREQUESTER\tTASK"

func runRow(w io.Writer, r chatstore.SubagentRunRecord) {
	status := "running"
	if r.Outcome != nil {
		status = string(r.Outcome.Status)
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.RunID, dash(r.Label), status, r.RequesterSessionKey, cellText(r.Task))
}

// followRuns prints the runs, then each run again whenever its record changes (it starts,
// ends, is archived), until ctx ends. The directory is watched (runs.json is replaced by
// rename at each write), so nothing is polled.
func (a *app) followRuns(ctx context.Context, g *chatstore.Subagents, dir string, filter chatstore.SubagentFilter, format string) error {
	w, err := fsutil.WatchDir(dir)
	if err != nil {
		return err
	}
	defer func() { _ = w.Close() }()
	out := a.env.Stdout
	if format == formatTable {
		fmt.Fprintln(out, strings.ReplaceAll(runsHeader, "\t", "  "))
	}
	seen := map[string]string{}
	for first := true; ; first = false {
		f := filter
		if !first {
			f.Active = false // a run that ends is shown ending
		}
		runs, err := g.List(f)
		if err != nil {
			return err
		}
		for _, r := range runs {
			b, err := marshalLine(r)
			if err != nil {
				return fmt.Errorf("encode run: %w", err)
			}
			if seen[r.RunID] == string(b) {
				continue
			}
			seen[r.RunID] = string(b)
			if format == formatTable {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				runRow(tw, r)
				_ = tw.Flush()
			} else {
				fmt.Fprintf(out, "%s\n", b)
			}
		}
		if err := w.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}
