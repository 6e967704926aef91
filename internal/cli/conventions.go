package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nexus-run/nexus/internal/abi"
)

// Conventions every command follows (docs/live-sessions.md, "Command-line conventions"):
//   - a group (`nexus session`, `nexus chat`, ...) prints its help when called alone and refuses
//     an unknown subcommand, with suggestions, exiting 1;
//   - a usage error (unknown flag, bad flag value, missing required flag, wrong arguments) is an
//     ABI error with INVALID_ARGUMENT: a command whose output is JSON prints it as the error
//     response on stdout, like every other error, and all commands print one line on stderr;
//   - enumerated flag values (--format, --content-type, ...) are checked before the command runs
//     and offered by shell completion.

const (
	// annotOutput marks a command whose standard output is not JSON (a protocol, a shell script,
	// a human transcript): its errors go to stderr only.
	annotOutput = "nexus:output"
	outputText  = "text"
	// annotValues on a flag lists the values it accepts.
	annotValues = "nexus:values"
)

// textOutput marks cmd as printing something other than JSON on stdout.
func textOutput(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotOutput] = outputText
	return cmd
}

// jsonOutput reports whether cmd's standard output is JSON, so an error response belongs there.
func jsonOutput(cmd *cobra.Command) bool {
	if cmd == nil || !cmd.Runnable() || cmd.Annotations[annotOutput] == outputText {
		return false
	}
	// cobra's own commands: help and the hidden completion request.
	n := cmd.Name()
	return n != "help" && !strings.HasPrefix(n, "__complete")
}

// group makes cmd a command group: alone it prints its help; with an argument that names none
// of its subcommands it fails, suggesting the closest ones (cobra would print the help and exit
// 0, hiding the typo from scripts).
func group(cmd *cobra.Command) *cobra.Command {
	textOutput(cmd)
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return unknownCommand(c, args[0])
		}
		return c.Help()
	}
	return cmd
}

// noArgsOrSubcommand is the argument rule of a runnable command that also has subcommands
// (`nexus mcp`): an argument can only be a mistyped subcommand.
func noArgsOrSubcommand(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return unknownCommand(c, args[0])
	}
	return nil
}

func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's default, which it sets only on its own path
	}
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	msg += fmt.Sprintf("\n\nRun '%s --help' for usage.", c.CommandPath())
	return &abi.Error{Code: abi.CodeInvalidArgument, Message: msg}
}

// usageError turns cobra's and pflag's complaints about the command line into INVALID_ARGUMENT.
func usageError(c *cobra.Command, err error) error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		return err
	}
	return &abi.Error{Code: abi.CodeInvalidArgument, Message: fmt.Sprintf("%v (usage: %s)", err, c.UseLine())}
}

// installConventions applies the usage-error rules to the whole command tree under root.
func installConventions(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// `nexus session lst --all`: the unknown flag is the second mistake; report the first.
		if c.Annotations[annotOutput] == outputText && c.HasSubCommands() {
			if args := c.Flags().Args(); len(args) > 0 {
				return unknownCommand(c, args[0])
			}
		}
		return usageError(c, err)
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if v := c.Args; v != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := v(cmd, args); err != nil {
					return usageError(cmd, err)
				}
				return nil
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// checkFlags validates what cobra would validate only after the root's pre-run (required flags,
// flag groups) and the enumerated values, so all of it is a usage error.
func checkFlags(c *cobra.Command) error {
	if err := c.ValidateRequiredFlags(); err != nil {
		return usageError(c, err)
	}
	if err := c.ValidateFlagGroups(); err != nil {
		return usageError(c, err)
	}
	var bad error
	c.Flags().VisitAll(func(f *pflag.Flag) {
		values := f.Annotations[annotValues]
		if bad != nil || len(values) == 0 || f.Value.String() == f.DefValue {
			return
		}
		for _, v := range values {
			if f.Value.String() == v {
				return
			}
		}
		bad = usageError(c, fmt.Errorf("unknown --%s %q (want %s)", f.Name, f.Value.String(), orList(values)))
	})
	return bad
}

// orList is "a, b or c".
func orList(vs []string) string {
	if len(vs) < 2 {
		return strings.Join(vs, "")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// enumFlag defines a string flag that accepts only values (checked by checkFlags, offered by
// completion).
func enumFlag(cmd *cobra.Command, p *string, name, def, usage string, values ...string) {
	cmd.Flags().StringVar(p, name, def, usage)
	_ = cmd.Flags().SetAnnotation(name, annotValues, values)
	_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// formatFlag defines --format; the first value is the default.
func formatFlag(cmd *cobra.Command, p *string, values ...string) {
	enumFlag(cmd, p, "format", values[0], "output format: "+orList(values), values...)
}

// flagAliases makes each alias (a flag name without dashes) another spelling of a flag of cmd:
// `--id X` is `--session-id X` everywhere, with one value, one Changed and one required check.
func flagAliases(cmd *cobra.Command, aliases map[string]string) {
	fs := cmd.Flags()
	prev := fs.GetNormalizeFunc()
	fs.SetNormalizeFunc(func(f *pflag.FlagSet, name string) pflag.NormalizedName {
		if to, ok := aliases[name]; ok {
			name = to
		}
		return prev(f, name)
	})
}
