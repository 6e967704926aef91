package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// storeChat opens the store and resolves ref (a key, session id or label) in it.
func (a *app) storeChat(ref string) (*chatstore.Store, chatRef, error) {
	st, err := a.openStore()
	if err != nil {
		return nil, chatRef{}, err
	}
	t, err := lookupIn(st, ref)
	return st, t, err
}

func (a *app) writerOptions() transcript.WriterOptions {
	return transcript.WriterOptions{Now: a.env.Now}
}

// writerError gives the transcript writer's errors their ABI codes.
func writerError(t chatRef, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: t.SessionID, Message: fmt.Sprintf("chat %s has no transcript yet (%s)", t.Key, t.Path), Err: err}
	case errors.Is(err, transcript.ErrLocked):
		return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: t.SessionID, Message: "the transcript is being written by another process; try again when it is done", Err: err}
	case errors.Is(err, transcript.ErrUnknownEntry):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: t.SessionID, Message: "no such entry (see nexus chat tree)", Err: err}
	case errors.Is(err, transcript.ErrForeignFormat), errors.Is(err, transcript.ErrEmpty):
		return &abi.Error{Code: abi.CodeInvalidArgument, SessionID: t.SessionID, Message: "not a pi transcript", Err: err}
	}
	return err
}

// openChatWriter continues a chat's transcript. A v1/v2 file (adopted from upstream without
// `chat import`) is first rewritten as v3, its original archived as .bak: the store owns it.
func (a *app) openChatWriter(t chatRef) (*transcript.Writer, error) {
	w, err := transcript.OpenWriter(t.Path, a.writerOptions())
	if errors.Is(err, transcript.ErrNeedsMigration) {
		if _, err := transcript.Migrate(t.Path, a.env.Now()); err != nil {
			return nil, writerError(t, fmt.Errorf("migrate %s to v3: %w", t.Path, err))
		}
		w, err = transcript.OpenWriter(t.Path, a.writerOptions())
	}
	if err != nil {
		return nil, writerError(t, err)
	}
	return w, nil
}

// closeWriter closes w and reports its error unless an earlier one is being returned.
func closeWriter(w *transcript.Writer, err *error) {
	if cerr := w.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close transcript %s: %w", w.Path(), cerr)
	}
}

func (a *app) chatLabelCmd() *cobra.Command {
	return a.printing(&cobra.Command{
		Use:   "label KEY ENTRY [LABEL]",
		Short: "Label an entry of a chat (no LABEL clears it); pi shows labels in its tree",
		Args:  cobra.RangeArgs(2, 3),
	}, func(cmd *cobra.Command, args []string) (_ any, err error) {
		label := ""
		if len(args) == 3 {
			label = args[2]
		}
		_, t, err := a.storeChat(args[0])
		if err != nil {
			return nil, err
		}
		w, err := a.openChatWriter(t)
		if err != nil {
			return nil, err
		}
		defer closeWriter(w, &err)
		id, err := w.AppendLabel(args[1], label)
		if err != nil {
			return nil, writerError(t, err)
		}
		out := map[string]any{"key": t.Key, "sessionId": t.SessionID, "entryId": id, "targetId": args[1], "label": nil}
		if label != "" {
			out["label"] = label
		}
		return out, nil
	})
}

func (a *app) chatNameCmd() *cobra.Command {
	return a.printing(&cobra.Command{
		Use:   "name KEY NAME",
		Short: "Name a chat: a session_info entry in the transcript and displayName in sessions.json (\"\" clears)",
		Args:  cobra.ExactArgs(2),
	}, func(cmd *cobra.Command, args []string) (_ any, err error) {
		st, t, err := a.storeChat(args[0])
		if err != nil {
			return nil, err
		}
		name := args[1]
		if exists(t.Path) {
			w, err := a.openChatWriter(t)
			if err != nil {
				return nil, err
			}
			_, aerr := w.AppendSessionInfo(name)
			if cerr := w.Close(); aerr == nil {
				aerr = cerr
			}
			if aerr != nil {
				return nil, writerError(t, aerr)
			}
		}
		patch := map[string]any{"displayName": nil}
		if name != "" {
			patch["displayName"] = name
		}
		e, err := st.Patch(cmd.Context(), t.Key, patch)
		if err != nil {
			return nil, storeError(err)
		}
		return map[string]any{"key": t.Key, "entry": e}, nil
	})
}

func (a *app) chatForkCmd() *cobra.Command {
	var at, newKey string
	cmd := a.printing(&cobra.Command{
		Use:   "fork KEY --at ENTRY [--key NEWKEY]",
		Short: "Start a new chat holding the path of KEY up to ENTRY (default key <KEY>:fork:<id>)",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string) (any, error) {
		if at == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "fork needs --at ENTRY (an entry id; see nexus chat tree)")
		}
		st, src, err := a.storeChat(args[0])
		if err != nil {
			return nil, err
		}
		return a.fork(cmd.Context(), st, src, at, newKey)
	})
	cmd.Flags().StringVar(&at, "at", "", "the entry the new chat ends at (its leaf)")
	_ = cmd.RegisterFlagCompletionFunc("at", a.completeEntries)
	cmd.Flags().StringVar(&newKey, "key", "", "session key of the new chat")
	return cmd
}

func (a *app) fork(ctx context.Context, st *chatstore.Store, src chatRef, at, newKey string) (map[string]any, error) {
	f, err := openTranscript(src.Path)
	if err != nil {
		return nil, err
	}
	if f.Entry(at) == nil {
		_ = f.Close()
		return nil, abi.Errorf(abi.CodeInvalidArgument, src.SessionID, "no entry %q in chat %s (see nexus chat tree)", at, src.Key)
	}
	turns, err := transcript.Turns(f, at)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("turns of %s: %w", src.Path, err)
	}
	id := chatstore.NewUUIDv7()
	if newKey == "" {
		// The tail of a v7 uuid is random; its head is the clock, equal for forks made together.
		newKey = src.Key + ":fork:" + id[len(id)-8:]
	}
	k, err := chatstore.ParseKey(newKey)
	if err != nil {
		return nil, storeError(err)
	}
	newKey = k.String()
	if _, err := st.Get(newKey); err == nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "chat %s already exists", newKey)
	}
	dst := st.TranscriptPath(id)
	opts := a.writerOptions()
	opts.NewSessionID = func() string { return id }
	w, err := transcript.Fork(src.Path, at, dst, opts)
	if err != nil {
		return nil, writerError(src, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("close fork %s: %w", dst, err)
	}
	fields := map[string]any{
		"sessionId":           id,
		"sessionFile":         dst,
		"forkedFromSessionId": src.SessionID,
		"forkedFromEntryId":   at,
	}
	// The turn forked from is the last answered one on the path (a fork at a new question has
	// an open turn without an id after it).
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].ID != "" {
			fields["forkedFromTurnId"] = turns[i].ID
			break
		}
	}
	if e := src.Entry; e != nil {
		for k, v := range map[string]string{"model": e.Model, "modelProvider": e.ModelProvider, "thinkingLevel": e.ThinkingLevel, "project": e.Project, "chatType": e.ChatType} {
			if v != "" {
				fields[k] = v
			}
		}
	}
	ne, err := st.Create(ctx, newKey, fields)
	if err != nil {
		// The new transcript belongs to no chat: archive it rather than leave it unindexed.
		if _, aerr := chatstore.Archive(dst, "deleted", a.env.Now()); aerr != nil {
			a.warnf("fork %s left unindexed: %v", dst, aerr)
		}
		return nil, storeError(err)
	}
	se, err := st.Patch(ctx, src.Key, map[string]any{"hasChildren": true})
	if err != nil {
		return nil, storeError(err)
	}
	return map[string]any{
		"key": newKey, "entry": ne, "file": dst,
		"forkedFrom": map[string]any{"key": src.Key, "sessionId": src.SessionID, "entryId": at, "entry": se},
	}, nil
}

func (a *app) chatCompactCmd() *cobra.Command {
	var maxLines, keepTokens int
	var summaryFile string
	cmd := a.printing(&cobra.Command{
		Use:   "compact KEY (--max-lines N | --summary-file F [--keep-tokens N])",
		Short: "Compact a chat: keep the last N lines (original archived as .bak) or append a summary compaction",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string) (any, error) {
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
		var summary string
		if !lines {
			b, err := a.readSummary(summaryFile)
			if err != nil {
				return nil, err
			}
			summary = b
		}
		st, t, err := a.storeChat(args[0])
		if err != nil {
			return nil, err
		}
		if lines {
			return a.compactLines(cmd.Context(), st, t, maxLines)
		}
		return a.compactSummary(cmd.Context(), st, t, summary, keepTokens)
	})
	cmd.Flags().IntVar(&maxLines, "max-lines", 400, "keep the header and the last N entries")
	cmd.Flags().StringVar(&summaryFile, "summary-file", "", "append a compaction entry with this summary (- for standard input)")
	cmd.Flags().IntVar(&keepTokens, "keep-tokens", transcript.DefaultKeepRecentTokens, "with --summary-file: estimated tokens of recent context to keep")
	return cmd
}

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
	// The context wraps the summary in its own lines; a file's final newline would double them.
	summary := strings.TrimSpace(string(b))
	if summary == "" {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "summary %s is empty", name)
	}
	return summary, nil
}

func (a *app) compactLines(ctx context.Context, st *chatstore.Store, t chatRef, maxLines int) (map[string]any, error) {
	archived, err := transcript.CompactLines(t.Path, maxLines, a.env.Now())
	if err != nil {
		return nil, writerError(t, err)
	}
	out := map[string]any{"key": t.Key, "sessionId": t.SessionID, "compacted": archived != ""}
	if archived == "" {
		out["entry"] = t.Entry
		return out, nil
	}
	// Token counts described the old file; the next run recounts them.
	e, err := st.PatchFunc(ctx, t.Key, func(cur chatstore.SessionEntry) (any, error) {
		return map[string]any{
			"inputTokens": nil, "outputTokens": nil, "totalTokens": nil,
			"compactionCount": cur.CompactionCount + 1,
		}, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	out["archived"] = archived
	out["entry"] = e
	return out, nil
}

func (a *app) compactSummary(ctx context.Context, st *chatstore.Store, t chatRef, summary string, keep int) (_ map[string]any, err error) {
	w, err := a.openChatWriter(t)
	if err != nil {
		return nil, err
	}
	defer closeWriter(w, &err)
	id, err := transcript.Compact(w, summary, keep, nil)
	switch {
	case errors.Is(err, transcript.ErrToolCallPending):
		return nil, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: t.SessionID, Message: "a tool call of the last assistant message is unanswered; compact after its result is in", Err: err}
	case errors.Is(err, transcript.ErrNothingToCompact), errors.Is(err, transcript.ErrAlreadyCompacted):
		return nil, &abi.Error{Code: abi.CodeInvalidArgument, SessionID: t.SessionID, Message: fmt.Sprintf("nothing to compact with --keep-tokens %d", keep), Err: err}
	case err != nil:
		return nil, writerError(t, err)
	}
	c := w.File().Entry(id)
	e, err := st.PatchFunc(ctx, t.Key, func(cur chatstore.SessionEntry) (any, error) {
		return map[string]any{"compactionCount": cur.CompactionCount + 1}, nil
	})
	if err != nil {
		return nil, storeError(err)
	}
	out := map[string]any{"key": t.Key, "sessionId": t.SessionID, "compactionId": id, "entry": e}
	if c != nil {
		out["firstKeptEntryId"] = c.FirstKeptEntryID()
		if full, ferr := w.File().Full(c); ferr == nil {
			out["tokensBefore"] = full.TokensBefore()
		}
	}
	return out, nil
}

func (a *app) chatResetCmd() *cobra.Command {
	return a.printing(&cobra.Command{
		Use:   "reset KEY",
		Short: "Start a new session for KEY (new sessionId); the old transcript is archived as .reset.<ts>",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string) (any, error) {
		st, t, err := a.storeChat(args[0])
		if err != nil {
			return nil, err
		}
		r, err := st.Reset(cmd.Context(), t.Key, chatstore.ReasonReset)
		if err != nil {
			return nil, storeError(err)
		}
		out := map[string]any{"key": t.Key, "entry": r.Entry, "previousSessionId": r.PreviousSessionID, "reason": r.Reason}
		// A chat whose first message never arrived had no transcript to archive.
		if r.Archived != "" {
			out["archived"] = r.Archived
		}
		return out, nil
	})
}

func (a *app) chatArchiveCmd() *cobra.Command {
	return a.printing(&cobra.Command{
		Use:   "archive KEY",
		Short: "Remove a chat from sessions.json; its transcript is archived as .deleted.<ts>, never deleted",
		Args:  cobra.ExactArgs(1),
	}, func(cmd *cobra.Command, args []string) (any, error) {
		st, t, err := a.storeChat(args[0])
		if err != nil {
			return nil, err
		}
		archived, err := st.Delete(cmd.Context(), t.Key)
		if err != nil {
			return nil, storeError(err)
		}
		out := map[string]any{"key": t.Key, "sessionId": t.SessionID}
		if archived != "" {
			out["archived"] = archived
		}
		return out, nil
	})
}

func (a *app) chatRecoverCmd() *cobra.Command {
	return a.printing(&cobra.Command{
		Use:   "recover",
		Short: "Repair a damaged sessions.json: archive it and restore its previous version (sessions.json.bak)",
		Long: `When sessions.json does not parse, every chat command refuses to touch it (INVALID_ARGUMENT,
naming the file). recover moves the damaged file aside as sessions.json.corrupt.<ts> (kept for
inspection) and restores sessions.json.bak, the version before the last write, when that parses;
otherwise the index starts empty, and the transcripts (never touched) can be imported again.
A sessions.json that parses is left alone. Prints {"damaged","archived","from","entries"}.`,
		Args: cobra.NoArgs,
	}, func(cmd *cobra.Command, _ []string) (any, error) {
		st, err := a.openStore()
		if err != nil {
			return nil, err
		}
		return st.Recover(cmd.Context())
	})
}
