package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// chatEntry is a sessions.json entry (unknown fields kept when printed).
type chatEntry = chatstore.SessionEntry

// openStore opens state/sessions/sessions.json with the invocation's clock.
func (a *app) openStore() (*chatstore.Store, error) {
	return a.openStoreWith(chatstore.Options{Now: a.env.Now})
}

func (a *app) openStoreWith(opts chatstore.Options) (*chatstore.Store, error) {
	st, err := chatstore.Open(a.sessionsDir(), opts)
	if err != nil {
		return nil, storeError(fmt.Errorf("open session store %s: %w", a.sessionsDir(), err))
	}
	return st, nil
}

// storeError gives the store's errors their ABI codes.
func storeError(err error) error {
	var ae *abi.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case errors.Is(err, chatstore.ErrNotFound):
		return &abi.Error{Code: abi.CodeSessionNotFound, Message: "no such chat (see nexus chat list)", Err: err}
	case errors.Is(err, chatstore.ErrKey), errors.Is(err, chatstore.ErrInvalid), errors.Is(err, chatstore.ErrExists),
		errors.Is(err, chatstore.ErrLabelConflict), errors.Is(err, chatstore.ErrTooLarge):
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "session store refused", Err: err}
	case errors.Is(err, chatstore.ErrCorrupt):
		// The file is the user's, not nexus's bug: say what to do about it.
		return &abi.Error{Code: abi.CodeInvalidArgument, Message: "sessions.json is damaged and nexus left it as it is; " +
			"\"nexus chat recover\" archives it and restores its previous version (sessions.json.bak), or repair it by hand", Err: err}
	}
	return err
}

// transcriptPath is where an entry's transcript lives: its sessionFile (relative to the
// sessions directory when not absolute, as upstream sometimes writes it), else
// <dir>/<sessionId>.jsonl. Values come from sessions.json, never from the command line.
func transcriptPath(st *chatstore.Store, e chatstore.SessionEntry) string {
	if f := e.SessionFile; f != "" {
		if filepath.IsAbs(f) {
			return f
		}
		return filepath.Join(st.Dir(), f)
	}
	return st.TranscriptPath(e.SessionID)
}

// lookupChat resolves a KEY, SESSIONID or label through sessions.json.
func (a *app) lookupChat(_ context.Context, ref string) (chatRef, error) {
	st, err := a.openStore()
	if err != nil {
		return chatRef{}, err
	}
	return lookupIn(st, ref)
}

func lookupIn(st *chatstore.Store, ref string) (chatRef, error) {
	key, e, err := st.Lookup(ref)
	if err != nil {
		if errors.Is(err, chatstore.ErrNotFound) || errors.Is(err, chatstore.ErrKey) {
			return chatRef{}, &abi.Error{Code: abi.CodeSessionNotFound, Message: fmt.Sprintf("no chat %q (see nexus chat list)", ref), Err: err}
		}
		return chatRef{}, storeError(err)
	}
	return chatRef{Key: key, SessionID: e.SessionID, Path: transcriptPath(st, e), Entry: &e}, nil
}

// runsOf reads the run records (custom entries) of a transcript.
func runsOf(f *transcript.File) ([]chatstore.RunSummary, error) {
	runs, err := chatstore.RunsFromFile(f)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	if runs == nil {
		runs = []chatstore.RunSummary{}
	}
	return runs, nil
}

// parseSince accepts a duration back from now (24h, 90m) or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "", "bad --since %q: want a duration (24h) or an RFC 3339 time", s)
}

func (a *app) chatListCmd() *cobra.Command {
	var agent, channel, since, label, search, format string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List chats, most recently updated first",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			f := chatstore.Filter{Channel: channel, Search: search}
			if agent != "" {
				f.Agent = chatstore.NormalizeAgentID(agent)
			}
			if since != "" {
				t, err := parseSince(since, a.env.Now())
				if err != nil {
					return err
				}
				f.Since = t
			}
			// The label filter is exact, so the cap applies after it.
			if label == "" {
				f.Limit = limit
			}
			st, err := a.openStore()
			if err != nil {
				return err
			}
			items, err := st.List(f)
			if err != nil {
				return storeError(err)
			}
			if label != "" {
				kept := items[:0]
				for _, it := range items {
					if it.Entry.Label == label {
						kept = append(kept, it)
					}
				}
				items = kept
				if limit > 0 && len(items) > limit {
					items = items[:limit]
				}
			}
			if items == nil {
				items = []chatstore.Item{}
			}
			if format == formatTable {
				return chatListTable(a, items)
			}
			a.printJSON(map[string]any{"chats": items})
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&agent, "agent", "", "only chats of this agent id")
	fl.StringVar(&channel, "channel", "", "only chats of this channel (the key's, else lastChannel or origin.provider)")
	fl.StringVar(&since, "since", "", "only chats updated since this long ago (24h) or this time (RFC 3339)")
	fl.StringVar(&label, "label", "", "only the chat with this label")
	fl.StringVar(&search, "search", "", "only chats whose key, label, display name or session id contains this")
	fl.IntVar(&limit, "limit", 0, "at most this many chats (0: all)")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func chatListTable(a *app, items []chatstore.Item) error {
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSESSION\tUPDATED\tTOKENS\tMODEL\tNAME")
	for _, it := range items {
		e := it.Entry
		name := e.DisplayName
		if e.Label != "" {
			name = strings.TrimSpace(e.Label + " " + name)
		}
		if name == "" {
			name = "-"
		}
		model := e.Model
		if model == "" {
			model = "-"
		}
		tokens := "-"
		if e.TotalTokens > 0 {
			tokens = fmt.Sprint(e.TotalTokens)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(it.Key, 80), oneLine(e.SessionID, 40),
			abi.FormatTime(time.UnixMilli(e.UpdatedAt)), tokens, oneLine(model, 40), oneLine(name, 60))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// exists reports whether path names a file; other errors count as existing so callers fail
// on them later with the real error.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
