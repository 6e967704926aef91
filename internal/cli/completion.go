package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/project"
)

// completionWait bounds how long a completion asks the gateway: a shell waits for the answer
// before it shows anything, and a gateway that is not running must not freeze the prompt.
const completionWait = 2 * time.Second

// completeSessions offers the gateway's live sessions (of type only, when given), each with its
// type, status and context as the description. Without a gateway it offers nothing.
func (a *app) completeSessions(only abi.SessionType) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if a.resolveState() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionWait)
		defer cancel()
		ss, err := a.client().List(ctx, false, only)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, s := range ss {
			if strings.HasPrefix(s.SessionID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(s.SessionID, fmt.Sprintf("%s %s %s", s.Type, s.Status, contextString(s.Context))))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeProjects offers the registered project names with their directories.
func (a *app) completeProjects(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if a.resolveState() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ps, err := project.NewStore(a.projectsPath(), a.env.Now).List()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, p := range ps {
		if strings.HasPrefix(p.ID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(p.ID, p.Path))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeProjectArg completes the first positional argument with a project name.
func (a *app) completeProjectArg(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeProjects(cmd, args, toComplete)
}

// completeAuditSessions offers the agent shells of the audit directory (one <id>.jsonl each).
func (a *app) completeAuditSessions(auditDir *string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if a.resolveState() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		dir := *auditDir
		if dir == "" {
			dir = a.env.Getenv("NEXUS_MCP_AUDIT_DIR")
		}
		names, err := filepath.Glob(filepath.Join(a.orState(dir, "audit"), "*.jsonl"))
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, n := range names {
			id := strings.TrimSuffix(filepath.Base(n), ".jsonl")
			if strings.HasPrefix(id, toComplete) {
				out = append(out, id)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// bashFallbacks lets cobra's bash completion run without the bash-completion package, which
// provides _get_comp_words_by_ref (always called) and _filedir (for file names). Each is
// defined only when bash-completion has not defined it. The words are the line up to the cursor
// split at blanks only, which is what bash-completion's `-n =:` asks for: a chat key
// (agent:main:main) or --flag=value stays one word. Quotes are not interpreted.
const bashFallbacks = `
# Without the bash-completion package (https://github.com/scop/bash-completion), nexus brings the
# two functions its completion needs; bash-completion's own are used when it is loaded.
if ! declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
_get_comp_words_by_ref()
{
    local line=${COMP_LINE:0:COMP_POINT}
    read -r -a words <<<"$line"
    if [[ -z $line || $line == *[[:blank:]] ]]; then
        words+=("")
    fi
    cword=$((${#words[@]} - 1))
    cur=${words[cword]}
    prev=${words[cword - 1]-}
}
fi
if ! declare -F _filedir >/dev/null 2>&1; then
_filedir()
{
    local IFS=$'\n'
    if [[ ${1-} == -d ]]; then
        COMPREPLY+=($(compgen -d -- "${cur-}"))
    else
        COMPREPLY+=($(compgen -f -- "${cur-}"))
    fi
}
fi
`

// completionCmd replaces cobra's default `completion` command: its bash script works without
// the bash-completion package.
func (a *app) completionCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "completion",
		Short: "Print the shell completion script for bash, zsh, fish or powershell",
		Long: `Print a completion script. Besides commands and flags it completes live session ids (from
the running gateway), project names and chat keys.

  bash:        source <(nexus completion bash)        (in ~/.bashrc; needs no bash-completion package)
  zsh:         source <(nexus completion zsh)         (in ~/.zshrc, after compinit)
  fish:        nexus completion fish > ~/.config/fish/completions/nexus.fish
  powershell:  nexus completion powershell | Out-String | Invoke-Expression`,
	})
	shells := []struct {
		name string
		gen  func(root *cobra.Command, w io.Writer) error
	}{
		{"bash", func(root *cobra.Command, w io.Writer) error {
			if _, err := io.WriteString(w, bashFallbacks); err != nil {
				return err
			}
			return root.GenBashCompletionV2(w, true)
		}},
		{"zsh", func(root *cobra.Command, w io.Writer) error { return root.GenZshCompletion(w) }},
		{"fish", func(root *cobra.Command, w io.Writer) error { return root.GenFishCompletion(w, true) }},
		{"powershell", func(root *cobra.Command, w io.Writer) error { return root.GenPowerShellCompletionWithDesc(w) }},
	}
	for _, sh := range shells {
		cmd.AddCommand(textOutput(&cobra.Command{
			Use:   sh.name,
			Short: "Print the " + sh.name + " completion script",
			Args:  cobra.NoArgs,
			RunE: func(c *cobra.Command, _ []string) error {
				if err := sh.gen(c.Root(), a.env.Stdout); err != nil {
					return fmt.Errorf("write %s completion: %w", sh.name, err)
				}
				return nil
			},
		}))
	}
	return cmd
}
