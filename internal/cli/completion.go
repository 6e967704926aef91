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
	"github.com/nexus-run/nexus/internal/chatstore"
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

// completeChats offers the session keys of sessions.json for the first positional argument
// (the chat a command works on), described by display name or label and session id.
func (a *app) completeChats(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || a.resolveState() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	st, err := chatstore.Open(a.sessionsDir(), chatstore.Options{Now: a.env.Now})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	items, err := st.List(chatstore.Filter{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, it := range items {
		if !strings.HasPrefix(it.Key, toComplete) {
			continue
		}
		desc := it.Entry.SessionID
		if n := strings.TrimSpace(it.Entry.Label + " " + it.Entry.DisplayName); n != "" {
			desc = oneLine(n, 40) + " " + desc
		}
		out = append(out, cobra.CompletionWithDesc(it.Key, desc))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
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

// completeEntries offers the entry ids of the chat named by the first argument (or --file),
// each described by its type and preview, for --at and --branch.
func (a *app) completeEntries(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if a.resolveState() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	file := ""
	if f := cmd.Flag("file"); f != nil {
		file = f.Value.String()
	}
	if len(args) == 0 && file == "" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	t, err := a.chatTarget(cmd.Context(), args[:min(len(args), 1)], file)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	f, err := openTranscript(t.Path)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer func() { _ = f.Close() }()
	tree, err := buildTree(f)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range tree.Entries {
		if !strings.HasPrefix(n.ID, toComplete) {
			continue
		}
		typ := n.Type
		if n.Role != "" {
			typ += "/" + n.Role
		}
		out = append(out, cobra.CompletionWithDesc(n.ID, oneLine(typ+" "+n.Preview, 60)))
	}
	// Keep the tree's order (the conversation's), not an alphabetical one.
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
}

// completeLabelArgs completes `chat label KEY ENTRY`: the chat, then one of its entries.
func (a *app) completeLabelArgs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return a.completeChats(cmd, args, toComplete)
	case 1:
		return a.completeEntries(cmd, args, toComplete)
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}
