package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/trigger"
)

// targetFlags are where a trigger's messages go and how a new conversation opens.
func targetFlags(cmd *cobra.Command, t *trigger.Target) {
	f := cmd.Flags()
	f.StringVar(&t.SessionKey, "session", "", "the conversation (session key) the messages go to")
	f.StringVar(&t.Mode, "mode", "", "queue mode of the messages there: steer, followup, collect, steer-backlog, queue, interrupt, reject or rollback")
	f.StringVar(&t.Agent, "agent", "", "agent of a new conversation (default main)")
	f.StringVar(&t.Backend, "backend", "", "backend of a new conversation (config.toml)")
	f.StringVar(&t.Model, "model", "", "model of a new conversation")
	f.StringVar(&t.Level, "level", "", "permission level of a new conversation: yolo, trusted or sandboxed")
	f.StringVar(&t.Workspace, "workspace", "", "workspace of a new conversation (absolute)")
}

func (a *app) cronCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cron",
		Short: "Cron jobs and heartbeats: messages the gateway sends into conversations on a schedule",
		Long: "A cron job sends its message on a cron schedule (five fields, @hourly, @daily..., CRON_TZ=Zone first for another time\n" +
			"zone than the gateway's) into its own conversation agent:<agent>:cron:<id>, or into --session. A heartbeat (--every)\n" +
			"wakes a session every interval. Runs missed while no gateway ran are fired once when it is back (--missed once),\n" +
			"or skipped (--missed skip). See docs/triggers.md.",
	}
	cmd.AddCommand(a.cronAddCmd(), a.cronListCmd(), a.cronRemoveCmd(), a.cronRunCmd())
	return cmd
}

func (a *app) cronAddCmd() *cobra.Command {
	var j trigger.Job
	var every time.Duration
	var format string
	cmd := &cobra.Command{
		Use:   "add (--schedule EXPR | --every DURATION --session KEY) [--id ID] MESSAGE",
		Short: "Add a cron job (--schedule) or a heartbeat (--every)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j.Message = args[0]
			j.EveryMs = every.Milliseconds()
			out, err := a.client().CronAdd(cmd.Context(), j)
			if err != nil {
				return err
			}
			return a.print(format, out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s %s: next run %s\n", out.Kind, out.ID, abi.FormatTime(time.UnixMilli(out.NextRunAt)))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&j.ID, "id", "", "the job's id (default generated)")
	f.StringVar(&j.Schedule, "schedule", "", "cron expression, e.g. '0 9 * * 1-5' or @daily")
	f.DurationVar(&every, "every", 0, "a heartbeat's interval (at least the gateway's --min-trigger-interval, 1m by default), e.g. 30m")
	f.StringVar(&j.Missed, "missed", trigger.MissedOnce, "runs missed while no gateway ran: once (one catch-up run) or skip")
	targetFlags(cmd, &j.TriggerTarget)
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) cronListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the cron jobs and heartbeats, with their next and last runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			jobs, err := a.client().CronJobs(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"jobs": jobs}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tKIND\tSCHEDULE\tSESSION\tNEXT\tLAST\tRUNS\tMESSAGE")
				for _, j := range jobs {
					sched := j.Schedule
					if j.EveryMs > 0 {
						sched = "every " + (time.Duration(j.EveryMs) * time.Millisecond).String()
					}
					last := "-"
					if j.LastRunAt > 0 {
						last = abi.FormatTime(time.UnixMilli(j.LastRunAt))
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", j.ID, j.Kind, sched, dash(j.SessionKey), abi.FormatTime(time.UnixMilli(j.NextRunAt)), last, j.Runs, cellText(j.Message))
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) cronRemoveCmd() *cobra.Command {
	return a.removeCmd("remove ID", "Remove a cron job or heartbeat", func(c *client.Client) func(context.Context, string) error { return c.CronRemove })
}

// removeCmd is a command that removes the thing its one argument names and says so.
func (a *app) removeCmd(use, short string, remove func(*client.Client) func(context.Context, string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := remove(a.client())(cmd.Context(), args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(a.env.Stdout, "removed %s\n", args[0])
			return err
		},
	}
}

func (a *app) cronRunCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "run ID",
		Short: "Fire a job now, outside its schedule",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := a.client().CronRun(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if out.Warning != "" {
				fmt.Fprintln(a.env.Stderr, "nexus: "+out.Warning)
			}
			return a.print(format, out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "queued %s in %s\n", out.MessageID, out.SessionKey)
				return err
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) hookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "Webhooks: POST /v1/hooks/ID with the hook's secret sends the body into a conversation",
		Long: "A webhook call is authenticated by its hook's secret (Authorization: Bearer SECRET, X-Nexus-Hook-Secret: SECRET,\n" +
			"or a GitHub-style X-Hub-Signature-256 HMAC of the body), not by the gateway's token. The body (or the \"message\" of\n" +
			"a JSON body) becomes a message of a new conversation hook:<uuid>, or of --session. A JSON body naming the chat it\n" +
			"relays (channel, peer, chatType direct or group) is routed like a channel's message: DMs by --dm-scope, groups\n" +
			"each to its own conversation. See docs/triggers.md.",
	}
	cmd.AddCommand(a.hookAddCmd(), a.hookListCmd(), a.hookRemoveCmd())
	return cmd
}

func (a *app) hookAddCmd() *cobra.Command {
	var h trigger.Hook
	var format string
	cmd := &cobra.Command{
		Use:   "add [--id ID] [--session KEY]",
		Short: "Add a webhook; its secret is printed once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := a.client().HookAdd(cmd.Context(), h)
			if err != nil {
				return err
			}
			return a.print(format, out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "hook %s\nPOST %s/hooks/%s\nsecret %s (shown once: keep it)\n", out.ID, abi.APIPrefix, out.ID, out.Secret)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&h.ID, "id", "", "the hook's id (default generated)")
	cmd.Flags().StringVar(&h.DMScope, "dm-scope", "", "where a call naming a channel and a direct-message peer goes: main (default: every channel's DMs in\n"+
		"agent:<agent>:main), per-peer (agent:<agent>:dm:<peer>) or per-channel-peer (agent:<agent>:<channel>:dm:<peer>)")
	targetFlags(cmd, &h.TriggerTarget)
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) hookListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the webhooks (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			hooks, err := a.client().Hooks(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"hooks": hooks}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSESSION\tAGENT\tCALLS\tLAST CALLED")
				for _, h := range hooks {
					last := "-"
					if h.LastCalledAt > 0 {
						last = abi.FormatTime(time.UnixMilli(h.LastCalledAt))
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", h.ID, firstNonEmpty(h.SessionKey, "hook:<uuid> per call"), dash(h.Agent), h.Calls, last)
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) hookRemoveCmd() *cobra.Command {
	return a.removeCmd("remove ID", "Remove a webhook: its secret stops working at once", func(c *client.Client) func(context.Context, string) error { return c.HookRemove })
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
