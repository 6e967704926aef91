package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/project"
)

func (a *app) projectCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "project", Short: "Manage projects (name -> workspace directory) that terminal sessions run in"})
	store := func() *project.Store { return project.NewStore(a.projectsPath(), a.env.Now) }

	var path, addFormat string
	var create bool
	add := &cobra.Command{
		Use:   "add NAME --path DIR [--create]",
		Short: "Register a project (--create makes its directory if it does not exist)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := ensureDir(path, create); err != nil {
				return err
			}
			p, err := store().Add(cmd.Context(), args[0], path)
			if err != nil {
				return err
			}
			return a.print(addFormat, p, nil)
		},
	}
	add.Flags().StringVar(&path, "path", ".", "the project's directory")
	add.Flags().BoolVar(&create, "create", false, "create the directory (and its parents) if it does not exist")
	_ = add.MarkFlagDirname("path")
	formatFlag(add, &addFormat, formatJSON, formatTable)

	var format string
	list := &cobra.Command{
		Use:   "list",
		Short: "List projects",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
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
	formatFlag(list, &format, formatJSON, formatTable)

	var removeFormat string
	remove := &cobra.Command{
		Use:               "remove NAME",
		Short:             "Forget a project (its directory is left alone)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeProjectArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := store().Remove(cmd.Context(), args[0]); err != nil {
				return err
			}
			return a.print(removeFormat, map[string]any{"status": "ok", "removed": args[0]}, nil)
		},
	}
	formatFlag(remove, &removeFormat, formatJSON, formatTable)
	cmd.AddCommand(add, list, remove)
	return cmd
}

// ensureDir checks that a project directory exists, creating it (0700, parents included) when
// create is set; a missing one is a usage error that says how to fix it.
func ensureDir(dir string, create bool) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", dir, err)
	}
	if _, err := os.Stat(abs); !errors.Is(err, os.ErrNotExist) {
		return nil // the project store reports anything else (a file, no permission)
	}
	if !create {
		return abi.Errorf(abi.CodeInvalidArgument, "", "project directory %s does not exist: create it (mkdir -p %s) or pass --create", abs, shellQuote(abs))
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "", "create project directory %s: %v", abs, err)
	}
	return nil
}
