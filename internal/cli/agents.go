package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/chatstore"
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
	var active bool
	cmd := &cobra.Command{
		Use:   "runs [--requester KEY] [--active]",
		Short: "The subagent runs (state/subagents/runs.json): who spawned what, running or how it ended",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g, err := chatstore.OpenSubagents(filepath.Join(a.stateDir, "subagents"), a.env.Now)
			if err != nil {
				return err
			}
			runs, err := g.List(chatstore.SubagentFilter{RequesterSessionKey: requester, Active: active})
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"runs": runs}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tLABEL\tSTATUS\tREQUESTER\tTASK")
				for _, r := range runs {
					status := "running"
					if r.Outcome != nil {
						status = string(r.Outcome.Status)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.RunID, dash(r.Label), status, r.RequesterSessionKey, cellText(r.Task))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&requester, "requester", "", "only the runs this conversation spawned")
	cmd.Flags().BoolVar(&active, "active", false, "only the runs still going")
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}
