package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/agent/tools"
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
			cfg, err := a.providerConfig()
			if err != nil {
				return err
			}
			eff, err := profile.Resolve(cfg.Defaults, p.Policy)
			if err != nil {
				return fmt.Errorf("agent %s: %w", p.ID, err)
			}
			rows := policyRows(eff)
			out := map[string]any{"agent": p, "systemPrompt": prompt, "systemPromptReport": rep, "policy": rows}
			return a.print(format, out, func(w io.Writer) error {
				delete(out, "policy")
				if err := kvTable(w, out); err != nil {
					return err
				}
				fmt.Fprintln(w, "\npolicy (what the agent may do; a session's --level replaces the level):")
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, r := range rows {
					fmt.Fprintf(tw, "  %s\t%s\t(%s)\n", r.Key, r.Value, r.Source)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "workspace whose AGENTS.md and NEXUS.md go into the prompt (default: the agent's, else this directory)")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// policyRow is one key of an agent's effective policy, its value and where it came from.
type policyRow struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// policyRows are the effective policy's keys in agent.toml's order, the per-tool timeouts the
// tools have without configuration included.
func policyRows(e *profile.Effective) []policyRow {
	list := func(v []string) string {
		if len(v) == 0 {
			return "(none)"
		}
		return strings.Join(v, ", ")
	}
	src := func(key string) string {
		if s := e.Sources[key]; s != "" {
			return s
		}
		return profile.SourceBuiltin
	}
	confirm := "as long as the session"
	if e.ConfirmTimeout > 0 {
		confirm = e.ConfirmTimeout.String()
	}
	rows := []policyRow{
		{"level", string(e.Level), src("level")},
		{"disabled_tools", list(e.DisabledTools), src("disabled_tools")},
		{"allowed_paths", list(e.AllowedPaths), src("allowed_paths")},
		{"blocked_paths", list(e.BlockedPaths) + " (and always the gateway's state directory and config.toml)", src("blocked_paths")},
		{"allowed_targets", list(e.AllowedTargets), src("allowed_targets")},
		{"allow_hard_links", fmt.Sprint(e.AllowHardLinks), src("allow_hard_links")},
		{"max_timeout", e.MaxTimeout.String(), src("max_timeout")},
		{"confirm_timeout", confirm, src("confirm_timeout")},
		{"max_concurrent_tools", fmt.Sprint(e.MaxConcurrentTools), src("max_concurrent_tools")},
		{"progress_interval", e.ProgressInterval.String(), src("progress_interval")},
	}
	names := slices.Sorted(maps.Keys(e.Tools))
	if _, ok := e.Tools["bash"]; !ok || e.Tools["bash"].Timeout == 0 {
		rows = append(rows, policyRow{"tools.bash.timeout", tools.BashTimeout.String(), profile.SourceBuiltin})
	}
	for _, name := range names {
		t := e.Tools[name]
		if t.Timeout > 0 {
			rows = append(rows, policyRow{"tools." + name + ".timeout", t.Timeout.String(), src("tools." + name + ".timeout")})
		}
		if len(t.AllowedPaths) > 0 {
			rows = append(rows, policyRow{"tools." + name + ".allowed_paths", list(t.AllowedPaths), src("tools." + name + ".allowed_paths")})
		}
	}
	rows = append(rows,
		policyRow{"tools.mcp_*.timeout", tools.MCPTimeout.String() + " (each MCP tool not configured)", profile.SourceBuiltin},
		policyRow{"tools.*.timeout", permission.DefaultTimeout.String() + " (every other tool not configured)", profile.SourceBuiltin})
	return rows
}

func (a *app) agentRunsCmd() *cobra.Command {
	var format, requester string
	var active, follow bool
	cmd := &cobra.Command{
		Use:   "runs [--requester KEY] [--active] [--follow]",
		Short: "The subagent runs (state/subagents/runs.json) as a tree: who spawned what, running or how it ended",
		Long: "The subagent runs, from state/subagents/runs.json, as a tree: each conversation that spawned subagents,\n" +
			"then its runs indented under it, each run's own subagents indented under the run, with the status, label,\n" +
			"duration and task (with --format json: runs, and tree with the same nodes). With --requester, the\n" +
			"conversation's runs and their subagents at every depth. With --follow the command stays, printing each run\n" +
			"again as it starts and ends (with --format json, one JSON object per line), until interrupted.",
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
			// The tree needs every run: a child's subagents name the child, not requester.
			runs, err := g.List(chatstore.SubagentFilter{Active: active})
			if err != nil {
				return err
			}
			tree := runTree(runs, requester, a.env.Now())
			if requester != "" {
				runs = flatten(tree)
			}
			return a.print(format, map[string]any{"runs": runs, "tree": tree}, func(w io.Writer) error {
				return printRunTree(w, tree)
			})
		},
	}
	cmd.Flags().StringVar(&requester, "requester", "", "only the runs this conversation spawned, and theirs")
	cmd.Flags().BoolVar(&active, "active", false, "only the runs still going (with --follow: at the start)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stay and print each run as it starts and ends")
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

const runsHeader = "RUN\tLABEL\tSTATUS\tREQUESTER\tTASK"

const treeHeader = "RUN\tLABEL\tSTATUS\tDURATION\tTASK"

// runRoot is a conversation that spawned subagents and is not itself one of the runs shown.
type runRoot struct {
	Key      string     `json:"requesterSessionKey"`
	Children []*runNode `json:"children"`
}

// runNode is one run of the tree, with the runs its child conversation spawned.
type runNode struct {
	RunID           string     `json:"runId"`
	ChildSessionKey string     `json:"childSessionKey"`
	Label           string     `json:"label,omitempty"`
	Status          string     `json:"status"`
	DurationMs      int64      `json:"durationMs"`
	Task            string     `json:"task"`
	Children        []*runNode `json:"children,omitempty"`

	rec chatstore.SubagentRunRecord
}

func (n *runNode) rows(out [][]string, depth int) [][]string {
	out = append(out, []string{strings.Repeat("  ", depth) + n.RunID, dash(n.Label), n.Status, runDuration(n.DurationMs), cellText(clip(n.Task, 80))})
	for _, c := range n.Children {
		out = c.rows(out, depth+1)
	}
	return out
}

// printRunTree prints each root's key on a line of its own and its runs below it, in
// columns aligned across the whole table (a tabwriter would align each root's block apart).
func printRunTree(w io.Writer, tree []*runRoot) error {
	rows := [][]string{strings.Split(treeHeader, "\t")}
	for _, root := range tree {
		rows = append(rows, []string{root.Key})
		for _, n := range root.Children {
			rows = n.rows(rows, 1)
		}
	}
	var width [5]int
	for _, r := range rows {
		if len(r) > 1 {
			for i, c := range r {
				width[i] = max(width[i], len([]rune(c)))
			}
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err //nolint:wrapcheck // the caller's writer
}

// runDuration prints a duration to a tenth of a second, past a minute to the second.
func runDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// runStatus is running until the run ends, then its outcome (ok, error, timeout).
func runStatus(r chatstore.SubagentRunRecord) string {
	if r.Outcome != nil {
		return string(r.Outcome.Status)
	}
	return "running"
}

// runTree arranges runs under the conversations that spawned them: a run's children are the
// runs its child conversation spawned. The roots are the requesters that are no run's child
// (with only, only that conversation). Runs come in the order they started; a running run's
// duration is up to now. A cycle in the records (they are files) cannot loop: a run is
// placed once.
func runTree(runs []chatstore.SubagentRunRecord, only string, now time.Time) []*runRoot {
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b chatstore.SubagentRunRecord) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	byRequester := map[string][]chatstore.SubagentRunRecord{}
	isChild := map[string]bool{}
	for _, r := range sorted {
		byRequester[r.RequesterSessionKey] = append(byRequester[r.RequesterSessionKey], r)
		isChild[r.ChildSessionKey] = true
	}
	placed := map[string]bool{}
	var build func(key string) []*runNode
	build = func(key string) []*runNode {
		var out []*runNode
		for _, r := range byRequester[key] {
			if placed[r.RunID] {
				continue
			}
			placed[r.RunID] = true
			start := r.StartedAt
			if start == 0 {
				start = r.CreatedAt
			}
			end := r.EndedAt
			if end == 0 {
				end = now.UnixMilli()
			}
			n := &runNode{RunID: r.RunID, ChildSessionKey: r.ChildSessionKey, Label: r.Label, Status: runStatus(r),
				DurationMs: max(end-start, 0), Task: r.Task, rec: r}
			n.Children = build(r.ChildSessionKey)
			out = append(out, n)
		}
		return out
	}
	var roots []*runRoot
	if only != "" {
		if kids := build(only); len(kids) > 0 {
			roots = append(roots, &runRoot{Key: only, Children: kids})
		}
		return roots
	}
	for _, r := range sorted {
		if isChild[r.RequesterSessionKey] {
			continue // placed under its requester's run
		}
		if kids := build(r.RequesterSessionKey); len(kids) > 0 {
			roots = append(roots, &runRoot{Key: r.RequesterSessionKey, Children: kids})
		}
	}
	// Runs under a requester that is a child of no run placed (a cycle) are roots of their own.
	for _, r := range sorted {
		if !placed[r.RunID] {
			if kids := build(r.RequesterSessionKey); len(kids) > 0 {
				roots = append(roots, &runRoot{Key: r.RequesterSessionKey, Children: kids})
			}
		}
	}
	return roots
}

// flatten is the tree's runs, depth first.
func flatten(roots []*runRoot) []chatstore.SubagentRunRecord {
	out := []chatstore.SubagentRunRecord{}
	var walk func(ns []*runNode)
	walk = func(ns []*runNode) {
		for _, n := range ns {
			out = append(out, n.rec)
			walk(n.Children)
		}
	}
	for _, r := range roots {
		walk(r.Children)
	}
	return out
}

func runRow(w io.Writer, r chatstore.SubagentRunRecord) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.RunID, dash(r.Label), runStatus(r), r.RequesterSessionKey, cellText(r.Task))
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
