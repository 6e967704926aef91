package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// chatShow is the output of `chat show`.
type chatShow struct {
	Key    string                 `json:"key,omitempty"`
	Entry  *chatEntry             `json:"entry,omitempty"`
	File   string                 `json:"file"`
	Header *chatHeader            `json:"header"`
	Stats  *chatStats             `json:"stats"`
	Turns  []transcript.Turn      `json:"turns"`
	Runs   []chatstore.RunSummary `json:"runs"`
}

func (a *app) chatShowCmd() *cobra.Command {
	var file, format string
	cmd := &cobra.Command{
		Use:   "show KEY|SESSIONID|--file PATH",
		Short: "Print a chat: its sessions.json entry, transcript statistics, turns and runs",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := a.chatTarget(cmd.Context(), args, file)
			if err != nil {
				return err
			}
			if t.Entry != nil && !exists(t.Path) {
				// A chat whose first message has not arrived has no transcript yet.
				out := chatShow{Key: t.Key, Entry: t.Entry, File: t.Path, Turns: []transcript.Turn{}, Runs: []chatstore.RunSummary{}}
				if format == formatTable {
					return showTable(a.env.Stdout, out)
				}
				a.printJSON(out)
				return nil
			}
			f, err := openTranscript(t.Path)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			st, err := statsOf(f, t.Path)
			if err != nil {
				return err
			}
			turns, err := transcript.Turns(f, "")
			if err != nil {
				return fmt.Errorf("turns of %s: %w", t.Path, err)
			}
			if turns == nil {
				turns = []transcript.Turn{}
			}
			runs, err := runsOf(f)
			if err != nil {
				return err
			}
			out := chatShow{Key: t.Key, Entry: t.Entry, File: t.Path, Header: headerOf(f), Stats: st, Turns: turns, Runs: runs}
			if format == formatTable {
				return showTable(a.env.Stdout, out)
			}
			a.printJSON(out)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read this transcript file instead of a chat of the store")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func countsString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func showTable(w io.Writer, s chatShow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	if s.Key != "" {
		row("Key", s.Key)
	}
	if s.Entry != nil {
		row("Session ID", s.Entry.SessionID)
		row("Updated", abi.FormatTime(time.UnixMilli(s.Entry.UpdatedAt)))
		if s.Entry.Label != "" {
			row("Label", oneLine(s.Entry.Label, 80))
		}
		if s.Entry.CompactionCount > 0 {
			row("Compaction count", s.Entry.CompactionCount)
		}
		if s.Entry.ForkedFromSessionID != "" {
			row("Forked from", s.Entry.ForkedFromSessionID)
		}
	}
	row("File", s.File)
	if s.Header == nil {
		row("Transcript", "none yet")
		return flushTable(tw)
	}
	if s.Entry == nil {
		row("Session ID", s.Header.ID)
	}
	row("Version", s.Header.Version)
	row("Created", s.Header.Timestamp)
	row("Cwd", s.Header.Cwd)
	if s.Header.ParentSession != "" {
		row("Parent session", s.Header.ParentSession)
	}
	st := s.Stats
	if st.Name != "" {
		row("Name", oneLine(st.Name, 80))
	}
	if st.Model != nil {
		row("Model", st.Model.Provider+"/"+st.Model.ModelID)
	}
	row("Thinking", st.ThinkingLevel)
	row("Entries", fmt.Sprintf("%d (%s)", st.Entries, countsString(st.ByType)))
	row("Messages", countsString(st.Messages))
	row("Tool calls", fmt.Sprintf("%d (results %d, errors %d)", st.ToolCalls, st.ToolResults, st.ToolErrors))
	row("Leaf", fmt.Sprintf("%s (path %d entries; %d leaves, %d branch points)", st.LeafID, st.PathLength, st.Leaves, st.Branches))
	row("Compactions", st.Compactions)
	row("Tokens", fmt.Sprintf("in %d, out %d, cache read %d, cache write %d, total %d, cost $%.4f", st.Tokens.Input, st.Tokens.Output, st.Tokens.CacheRead, st.Tokens.CacheWrite, st.Tokens.Total, st.Tokens.Cost))
	row("Context tokens", st.ContextTokens)
	row("File size", st.FileSize)
	row("Turns", len(s.Turns))
	row("Runs", len(s.Runs))
	labels := make([]string, 0, len(st.Labels))
	for id := range st.Labels {
		labels = append(labels, id)
	}
	sort.Strings(labels)
	for _, id := range labels {
		row("  label "+id, oneLine(st.Labels[id], 80))
	}
	for _, n := range st.Notes {
		row("Note", n)
	}
	return flushTable(tw)
}

func flushTable(tw *tabwriter.Writer) error {
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
