package cli

import (
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/transcript"
)

// chatPrinting is a.printing for a command that calls the conversation API.
func (a *app) chatPrinting(cmd *cobra.Command, run func(cmd *cobra.Command, api conversation.API, args []string) (any, error)) *cobra.Command {
	return a.printing(cmd, func(cmd *cobra.Command, args []string) (any, error) {
		api, err := a.chats(cmd)
		if err != nil {
			return nil, err
		}
		return run(cmd, api, args)
	})
}

func (a *app) chatLabelCmd() *cobra.Command {
	return a.chatPrinting(&cobra.Command{
		Use:   "label KEY ENTRY [LABEL]",
		Short: "Label an entry of a chat (no LABEL clears it); pi shows labels in its tree",
		Args:  cobra.RangeArgs(2, 3),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		req := conversation.LabelRequest{EntryID: args[1]}
		if len(args) == 3 {
			req.Label = args[2]
		}
		return api.Label(cmd.Context(), args[0], req)
	})
}

func (a *app) chatNameCmd() *cobra.Command {
	return a.chatPrinting(&cobra.Command{
		Use:   "name KEY NAME",
		Short: "Name a chat: a session_info entry in the transcript and displayName in sessions.json (\"\" clears)",
		Args:  cobra.ExactArgs(2),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		return api.Name(cmd.Context(), args[0], conversation.NameRequest{Name: args[1]})
	})
}

func (a *app) chatForkCmd() *cobra.Command {
	var req conversation.ForkRequest
	cmd := a.chatPrinting(&cobra.Command{
		Use:   "fork KEY --at ENTRY [--key NEWKEY]",
		Short: "Start a new chat holding the path of KEY up to ENTRY (default key <KEY>:fork:<id>)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		if req.At == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "fork needs --at ENTRY (an entry id; see nexus chat tree)")
		}
		return api.Fork(cmd.Context(), args[0], req)
	})
	cmd.Flags().StringVar(&req.At, "at", "", "the entry the new chat ends at (its leaf)")
	_ = cmd.RegisterFlagCompletionFunc("at", a.completeEntries)
	cmd.Flags().StringVar(&req.Key, "key", "", "session key of the new chat")
	return cmd
}

func (a *app) chatCompactCmd() *cobra.Command {
	var maxLines, keepTokens int
	var summaryFile string
	cmd := a.chatPrinting(&cobra.Command{
		Use:   "compact KEY (--max-lines N | --summary-file F [--keep-tokens N])",
		Short: "Compact a chat: keep the last N lines (original archived as .bak) or append a summary compaction",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		lines := cmd.Flags().Changed("max-lines")
		switch {
		case lines == (summaryFile != ""):
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "give exactly one of --max-lines N and --summary-file F")
		case lines && maxLines < 1:
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--max-lines must be at least 1")
		case keepTokens < 0:
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--keep-tokens must not be negative")
		case lines && cmd.Flags().Changed("keep-tokens"):
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--keep-tokens goes with --summary-file")
		}
		if lines {
			return api.Compact(cmd.Context(), args[0], conversation.CompactRequest{MaxLines: maxLines})
		}
		summary, err := a.readSummary(summaryFile)
		if err != nil {
			return nil, err
		}
		return api.Compact(cmd.Context(), args[0], conversation.CompactRequest{Summary: summary, KeepTokens: &keepTokens})
	})
	cmd.Flags().IntVar(&maxLines, "max-lines", 400, "keep the header and the last N entries")
	cmd.Flags().StringVar(&summaryFile, "summary-file", "", "append a compaction entry with this summary (- for standard input)")
	cmd.Flags().IntVar(&keepTokens, "keep-tokens", transcript.DefaultKeepRecentTokens, "with --summary-file: estimated tokens of recent context to keep")
	return cmd
}

// readSummary reads the summary file (- for standard input).
func (a *app) readSummary(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(a.env.Stdin)
	} else {
		b, err = os.ReadFile(name) // #nosec G304 -- the user names the summary file
	}
	if err != nil {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "read summary %s: %v", name, err)
	}
	return string(b), nil
}

func (a *app) chatResetCmd() *cobra.Command {
	return a.chatPrinting(&cobra.Command{
		Use:   "reset KEY",
		Short: "Start a new session for KEY (new sessionId); the old transcript is archived as .reset.<ts>",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		return api.Reset(cmd.Context(), args[0])
	})
}

func (a *app) chatArchiveCmd() *cobra.Command {
	return a.chatPrinting(&cobra.Command{
		Use:   "archive KEY",
		Short: "Remove a chat from sessions.json; its transcript is archived as .deleted.<ts>, never deleted",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		return api.Archive(cmd.Context(), args[0])
	})
}

func (a *app) chatRecoverCmd() *cobra.Command {
	return a.chatPrinting(&cobra.Command{
		Use:   "recover",
		Short: "Repair a damaged sessions.json: archive it and restore its previous version (sessions.json.bak)",
		Long: `When sessions.json does not parse, every chat command refuses to touch it (INVALID_ARGUMENT,
naming the file). recover moves the damaged file aside as sessions.json.corrupt.<ts> (kept for
inspection) and restores sessions.json.bak, the version before the last write, when that parses;
otherwise the index starts empty, and the transcripts (never touched) can be imported again.
A sessions.json that parses is left alone. Prints {"damaged","archived","from","entries"}.`,
		Args: cobra.NoArgs,
	}, func(cmd *cobra.Command, api conversation.API, _ []string) (any, error) {
		return api.Recover(cmd.Context())
	})
}

func (a *app) chatImportCmd() *cobra.Command {
	var key string
	cmd := a.chatPrinting(&cobra.Command{
		Use:   "import FILE [--key KEY]",
		Short: "Adopt a pi or OpenClaw transcript: copy it into the store as <header id>.jsonl and index it",
		Long: "The source file is only read. v1 and v2 files are migrated on the way (the copy is written\n" +
			"as v3); v3 files are copied byte for byte. The default key is agent:main:import:<id>.\n" +
			"Importing the same transcript again is a no-op; a different file with the same header id\n" +
			"is refused.",
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		return api.Import(cmd.Context(), conversation.ImportRequest{Source: args[0], Key: key})
	})
	cmd.Flags().StringVar(&key, "key", "", "session key of the chat (default agent:main:import:<header id>)")
	return cmd
}

// chatResolveCmd routes an interaction to its chat: the current session of KEY, a new one when
// the key has none, or a fresh one when the reset policy (daily hour, idle window) says the
// current session is over. It is what a channel adapter calls for each incoming message.
func (a *app) chatResolveCmd() *cobra.Command {
	var hour int
	var idle time.Duration
	var noAuto bool
	cmd := a.chatPrinting(&cobra.Command{
		Use:   "resolve KEY",
		Short: "The current session of a session key, created or reset by the reset policy (daily hour, idle window)",
		Long: "Prints {\"key\",\"fresh\",\"entry\"}. A key without a chat gets a new one; a chat whose\n" +
			"daily boundary (--reset-hour, local time) has passed since its last interaction, or that\n" +
			"was idle for --idle, gets a new sessionId and its transcript is archived as .reset.<ts>.\n" +
			"Records the interaction (lastInteractionAt). Use show for a read that changes nothing.",
		Args: cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, api conversation.API, args []string) (any, error) {
		if idle%time.Minute != 0 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--idle %s: the idle window is whole minutes (sessions.json counts minutes), such as 1m or 90m", idle)
		}
		minutes := int(idle / time.Minute)
		return api.Resolve(cmd.Context(), args[0], conversation.ResolveRequest{ResetHour: &hour, IdleMinutes: &minutes, NoAutoReset: noAuto})
	})
	def := chatstore.DefaultResetPolicy()
	cmd.Flags().IntVar(&hour, "reset-hour", def.DailyAtHour, "local hour (0-23) of the daily reset; -1: none")
	cmd.Flags().DurationVar(&idle, "idle", time.Duration(def.IdleMinutes)*time.Minute, "idle window after which a new session starts, a Go duration of whole minutes (90m, 2h); 0: none")
	cmd.Flags().BoolVar(&noAuto, "no-auto-reset", false, "never reset automatically (only create)")
	return cmd
}
