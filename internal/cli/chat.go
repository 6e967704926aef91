package cli

import (
	"context"
	"errors"
	"github.com/nexus-run/nexus/internal/chatclient"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/gateway"
)

// Chat transports (nexus chat --transport, NEXUS_CHAT_TRANSPORT).
const (
	// chatAuto goes through the gateway when one answers (on --gateway / NEXUS_GATEWAY when
	// given, else on the state directory's socket), else works on the files.
	chatAuto = "auto"
	// chatLocal works on the files directly: the ABI's local transport.
	chatLocal = "local"
	// chatGateway always goes through the gateway, failing with CONNECTION_LOST without one.
	chatGateway = "gateway"
)

// gatewayProbe bounds the check that the state directory's gateway answers: a socket that
// accepts nothing in that time belongs to a gateway that is stuck, not absent.
const gatewayProbe = 5 * time.Second

// chatCmd is `nexus chat`: durable conversations (pi v3 transcripts indexed by session key in
// state/sessions/sessions.json). The operations are conversation.API's; this file only picks
// the implementation: the running gateway's, else the files'.
func (a *app) chatCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "chat",
		Short: "Durable conversations: list, inspect, fork, label, compact, reset, import and export chats",
		Long: `Durable conversations: pi transcripts indexed by session key in state/sessions/sessions.json.

When a gateway runs (nexus serve), chat commands go through it, so that it is the one writer of
the store; without one they work on the files directly. --transport (or NEXUS_CHAT_TRANSPORT)
makes the choice explicit: auto (the default), local (the files, even while a gateway runs: the
store's locks keep them consistent) or gateway (fail rather than touch the files). --file PATH is
always read where the command runs.`,
	})
	cmd.PersistentFlags().String("transport", "", "auto, local (the files) or gateway (default auto; env NEXUS_CHAT_TRANSPORT)")
	_ = cmd.RegisterFlagCompletionFunc("transport", cobra.FixedCompletions([]string{chatAuto, chatLocal, chatGateway}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(
		a.chatListCmd(), a.chatShowCmd(), a.chatHistoryCmd(), a.chatTreeCmd(),
		a.chatForkCmd(), a.chatLabelCmd(), a.chatNameCmd(), a.chatCompactCmd(),
		a.chatResetCmd(), a.chatArchiveCmd(), a.chatImportCmd(), a.chatExportCmd(),
		a.chatResolveCmd(), a.chatRecoverCmd(),
	)
	// Every command but list, import and recover names a chat first: complete it from
	// sessions.json (label completes the entry after it).
	for _, c := range cmd.Commands() {
		switch c.Name() {
		case "list", "import", "recover":
		case "label":
			c.ValidArgsFunction = a.completeLabelArgs
		default:
			c.ValidArgsFunction = a.completeChats
		}
	}
	return cmd
}

// chats is the conversation API the chat command cmd uses (see chatAuto).
func (a *app) chats(cmd *cobra.Command) (conversation.API, error) {
	mode := ""
	if f := cmd.Flag("transport"); f != nil {
		mode = f.Value.String()
	}
	if mode == "" {
		mode = a.env.Getenv("NEXUS_CHAT_TRANSPORT")
	}
	switch mode {
	case chatLocal:
		return a.localChats(), nil
	case chatGateway:
		return chatclient.New(a.client()), nil
	case chatAuto, "":
	default:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown chat transport %q (want auto, local or gateway)", mode)
	}
	if a.gateway != "" {
		// A gateway named on purpose is the one to use; falling back to local files could write
		// a store the user did not mean.
		return chatclient.New(a.client()), nil
	}
	sock := filepath.Join(a.stateDir, gateway.SocketFile)
	up, err := gatewayAnswers(cmd.Context(), sock)
	if err != nil {
		return nil, err
	}
	if up {
		return chatclient.New(a.client()), nil
	}
	return a.localChats(), nil
}

func (a *app) localChats() *conversation.Service {
	return conversation.New(conversation.Options{Dir: conversation.SessionsDir(a.stateDir), Now: a.env.Now})
}

// gatewayAnswers reports whether a gateway accepts connections on sock: no socket, or one
// nothing listens on (a gateway that died), is no gateway.
func gatewayAnswers(ctx context.Context, sock string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, gatewayProbe)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err == nil {
		_ = conn.Close()
		return true, nil
	}
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return false, nil
	}
	return false, &abi.Error{Code: abi.CodeConnectionLost, Message: "the gateway at " + sock +
		" does not answer; nexus chat --transport local works on the files without it", Err: err}
}

// chatReader is what the read-only commands read: the chat named by the positional
// KEY|SESSIONID, or the file named by --file (read here, never by a gateway).
func (a *app) chatReader(cmd *cobra.Command, args []string, file string) (conversation.Reader, string, error) {
	switch {
	case file != "" && len(args) > 0:
		return nil, "", abi.Errorf(abi.CodeInvalidArgument, "", "give a chat KEY or --file, not both")
	case file != "":
		return conversation.Files{}, file, nil
	case len(args) == 0:
		return nil, "", abi.Errorf(abi.CodeInvalidArgument, "", "name a chat (KEY or SESSIONID; see nexus chat list) or give --file PATH")
	}
	api, err := a.chats(cmd)
	if err != nil {
		return nil, "", err
	}
	return api, args[0], nil
}

// completeChats offers the session keys of sessions.json for the first positional argument
// (the chat a command works on), described by display name or label and session id.
func (a *app) completeChats(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || a.resolveState() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionWait)
	defer cancel()
	api, err := a.chats(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	items, err := api.List(ctx, conversation.ListOptions{})
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
			desc = conversation.OneLine(n, 40) + " " + desc
		}
		out = append(out, cobra.CompletionWithDesc(it.Key, desc))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
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
	ctx, cancel := context.WithTimeout(cmd.Context(), completionWait)
	defer cancel()
	r, name, err := a.chatReader(cmd, args[:min(len(args), 1)], file)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	tree, err := r.Tree(ctx, name)
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
		out = append(out, cobra.CompletionWithDesc(n.ID, conversation.OneLine(typ+" "+n.Preview, 60)))
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
