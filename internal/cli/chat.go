package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/transcript"
)

// chatCmd is `nexus chat`: durable conversations (pi v3 transcripts indexed by session key in
// state/sessions/sessions.json). Everything here works on files; no gateway is needed.
func (a *app) chatCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "chat",
		Short: "Durable conversations: list, inspect, fork, label, compact, reset, import and export chats",
	})
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

// sessionsDir is state/sessions: sessions.json and the transcripts.
func (a *app) sessionsDir() string { return filepath.Join(a.stateDir, "sessions") }

// chatRef is the chat a command works on: a store entry (Key set) or a file named by --file.
type chatRef struct {
	Key       string
	SessionID string
	Path      string
	// Entry is the sessions.json entry, nil for --file.
	Entry *chatEntry
}

// chatTarget resolves the positional KEY|SESSIONID or --file PATH of the read-only commands.
func (a *app) chatTarget(ctx context.Context, args []string, file string) (chatRef, error) {
	switch {
	case file != "" && len(args) > 0:
		return chatRef{}, abi.Errorf(abi.CodeInvalidArgument, "", "give a chat KEY or --file, not both")
	case file != "":
		abs, err := filepath.Abs(file)
		if err != nil {
			return chatRef{}, fmt.Errorf("resolve %s: %w", file, err)
		}
		return chatRef{Path: abs}, nil
	case len(args) == 0:
		return chatRef{}, abi.Errorf(abi.CodeInvalidArgument, "", "name a chat (KEY or SESSIONID; see nexus chat list) or give --file PATH")
	}
	return a.lookupChat(ctx, args[0])
}

// openTranscript opens a transcript for reading; what makes it unreadable for the user's reasons
// (missing, not a pi file, empty) is INVALID_ARGUMENT.
func openTranscript(path string) (*transcript.File, error) {
	f, err := transcript.Open(path)
	if err == nil {
		return f, nil
	}
	return nil, transcriptError(path, err)
}

func transcriptError(path string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "no transcript at " + path, Err: err}
	case errors.Is(err, transcript.ErrForeignFormat), errors.Is(err, transcript.ErrEmpty):
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "not a pi transcript", Err: err}
	}
	return fmt.Errorf("open transcript %s: %w", path, err)
}

// checkHeader reads only the header line: enough to know a file is a pi transcript.
func checkHeader(path string) error {
	fh, err := os.Open(path) // #nosec G304 -- the transcript of a chat, or a file the user named
	if err != nil {
		return transcriptError(path, err)
	}
	defer func() { _ = fh.Close() }()
	if _, err := transcript.NewReader(fh); err != nil {
		return transcriptError(path, err)
	}
	return nil
}
