package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/roadmap"
)

func (a *app) roadmapCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "roadmap",
		Short: "Roadmaps: small plans that sessions link to (--roadmap) and meta-chat sessions follow",
	}
	cmd.AddCommand(
		a.printing(&cobra.Command{Use: "create TITLE", Short: "Make a roadmap", Args: cobra.ExactArgs(1)},
			func(cmd *cobra.Command, args []string) (any, error) {
				return a.client().RoadmapCreate(cmd.Context(), args[0])
			}),
		a.roadmapListCmd(),
		a.printing(&cobra.Command{Use: "show ID", Short: "Show a roadmap with its items", Args: cobra.ExactArgs(1)},
			func(cmd *cobra.Command, args []string) (any, error) {
				return a.client().Roadmap(cmd.Context(), args[0])
			}),
		a.roadmapItemCmd())
	return cmd
}

func (a *app) roadmapListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the roadmaps",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := a.client().Roadmaps(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"roadmaps": rs}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTITLE\tITEMS\tDONE")
				for _, r := range rs {
					done := 0
					for _, it := range r.Items {
						if it.Status == roadmap.Done {
							done++
						}
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", r.ID, cellText(r.Title), len(r.Items), done)
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) roadmapItemCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "item", Short: "A roadmap's items (todo, doing, done, blocked)"}
	var status, title, format string
	add := a.printing(&cobra.Command{Use: "add ROADMAP TITLE [--status S]", Short: "Add an item", Args: cobra.ExactArgs(2)},
		func(cmd *cobra.Command, args []string) (any, error) {
			return a.client().RoadmapItem(cmd.Context(), args[0], "", args[1], status)
		})
	enumFlag(add, &status, "status", roadmap.Todo, "todo, doing, done or blocked", roadmap.Todo, roadmap.Doing, roadmap.Done, roadmap.Blocked)
	var ustatus string
	update := a.printing(&cobra.Command{Use: "update ROADMAP ITEM [--status S] [--title T]", Short: "Change an item's status or title", Args: cobra.ExactArgs(2)},
		func(cmd *cobra.Command, args []string) (any, error) {
			if ustatus == "" && title == "" {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "nothing to change: --status or --title")
			}
			return a.client().RoadmapItem(cmd.Context(), args[0], args[1], title, ustatus)
		})
	enumFlag(update, &ustatus, "status", "", "todo, doing, done or blocked", roadmap.Todo, roadmap.Doing, roadmap.Done, roadmap.Blocked)
	update.Flags().StringVar(&title, "title", "", "a new title")
	list := &cobra.Command{
		Use:   "list ROADMAP",
		Short: "List a roadmap's items",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.client().Roadmap(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"items": r.Items}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tTITLE")
				for _, it := range r.Items {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", it.ID, it.Status, cellText(it.Title))
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(list, &format, formatTable, formatJSON)
	cmd.AddCommand(add, update, list)
	return cmd
}

func (a *app) metaCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "meta", Short: "Meta-chat: a live view of everything under a roadmap"}
	chat := &cobra.Command{Use: "chat", Short: "Meta-chat sessions"}
	var roadmapID, format string
	open := &cobra.Command{
		Use:   "open --roadmap ID",
		Short: "Open a meta-chat session on a roadmap (follow it with nexus session events --follow)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if roadmapID == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "name the roadmap: --roadmap ID (nexus roadmap list)")
			}
			s, err := a.client().Create(cmd.Context(), abi.CreateRequest{Type: abi.TypeMetaChat, Context: abi.Context{RoadmapID: roadmapID}})
			if err != nil {
				return err
			}
			if err := a.setActive(cmd.Context(), s); err != nil {
				return err
			}
			return a.printSession(format, s)
		},
	}
	open.Flags().StringVar(&roadmapID, "roadmap", "", "the roadmap")
	formatFlag(open, &format, formatJSON, formatTable)
	chat.AddCommand(open)
	cmd.AddCommand(chat)
	return cmd
}
