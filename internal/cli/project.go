package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/project"
)

func (a *app) projectCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Manage projects (name -> workspace directory) that terminal sessions run in"}
	store := func() *project.Store { return project.NewStore(a.projectsPath(), a.env.Now) }

	var path string
	add := &cobra.Command{
		Use:   "add NAME --path DIR",
		Short: "Register a project",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := store().Add(cmd.Context(), args[0], path)
			if err != nil {
				return err
			}
			a.printJSON(p)
			return nil
		},
	}
	add.Flags().StringVar(&path, "path", ".", "the project's directory")

	var format string
	list := &cobra.Command{
		Use:   "list",
		Short: "List projects",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			ps, err := store().List()
			if err != nil {
				return err
			}
			if format == formatTable {
				tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PROJECT\tPATH\tCREATED")
				for _, p := range ps {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", p.ID, p.Path, p.CreatedAt)
				}
				return tw.Flush()
			}
			a.printJSON(map[string]any{"projects": ps})
			return nil
		},
	}
	list.Flags().StringVar(&format, "format", formatJSON, "output format: json or table")

	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Forget a project (its directory is left alone)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := store().Remove(cmd.Context(), args[0]); err != nil {
				return err
			}
			a.printJSON(map[string]any{"status": "ok", "removed": args[0]})
			return nil
		},
	}
	cmd.AddCommand(add, list, remove)
	return cmd
}
