package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
)

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
	var opts conversation.ListOptions
	var since, format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List chats, most recently updated first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			if since != "" {
				t, err := parseSince(since, a.env.Now())
				if err != nil {
					return err
				}
				opts.Since = t
			}
			api, err := a.chats(cmd)
			if err != nil {
				return err
			}
			items, err := api.List(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if format == formatTable {
				return chatListTable(a.env.Stdout, items)
			}
			a.printJSON(map[string]any{"chats": items})
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Agent, "agent", "", "only chats of this agent id")
	fl.StringVar(&opts.Channel, "channel", "", "only chats of this channel (the key's, else lastChannel or origin.provider)")
	fl.StringVar(&since, "since", "", "only chats updated since this long ago (24h) or this time (RFC 3339)")
	fl.StringVar(&opts.Label, "label", "", "only the chat with this label")
	fl.StringVar(&opts.Search, "search", "", "only chats whose key, label, display name or session id contains this")
	fl.IntVar(&opts.Limit, "limit", 0, "at most this many chats (0: all)")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func chatListTable(w io.Writer, items []chatstore.Item) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", conversation.OneLine(it.Key, 80), conversation.OneLine(e.SessionID, 40),
			abi.FormatTime(time.UnixMilli(e.UpdatedAt)), tokens, conversation.OneLine(model, 40), conversation.OneLine(name, 60))
	}
	return flushTable(tw)
}

func (a *app) chatShowCmd() *cobra.Command {
	var file, format string
	cmd := &cobra.Command{
		Use:   "show KEY|SESSIONID|--file PATH",
		Short: "Print a chat: its sessions.json entry, transcript statistics, turns and runs",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := a.chatReader(cmd, args, file)
			if err != nil {
				return err
			}
			s, err := r.Show(cmd.Context(), name)
			if err != nil {
				return err
			}
			return a.print(format, s, func(w io.Writer) error { return showTable(w, s) })
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

func showTable(w io.Writer, s *conversation.Show) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	if s.Key != "" {
		row("Key", s.Key)
	}
	if s.Entry != nil {
		row("Session ID", s.Entry.SessionID)
		row("Updated", abi.FormatTime(time.UnixMilli(s.Entry.UpdatedAt)))
		if s.Entry.Label != "" {
			row("Label", conversation.OneLine(s.Entry.Label, 80))
		}
		if s.Entry.CompactionCount > 0 {
			row("Compaction count", s.Entry.CompactionCount)
		}
		if s.Entry.ForkedFromSessionID != "" {
			row("Forked from", s.Entry.ForkedFromSessionID)
		}
	}
	row("File", s.File)
	if s.Header == nil || s.Stats == nil {
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
		row("Name", conversation.OneLine(st.Name, 80))
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
		row("  label "+id, conversation.OneLine(st.Labels[id], 80))
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

func (a *app) chatHistoryCmd() *cobra.Command {
	var file, format string
	var opts conversation.HistoryOptions
	cmd := &cobra.Command{
		Use:   "history KEY|SESSIONID|--file PATH",
		Short: "Print the context the model sees at the active leaf (or --branch LEAF)",
		Long: "Prints {\"leafId\",\"model\",\"thinkingLevel\",\"messages\"}: the agent messages exactly as pi's\n" +
			"context builder yields them (the path to the leaf, the last compaction's summary first),\n" +
			"each message verbatim as it is stored in the transcript.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			if opts.Limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			r, name, err := a.chatReader(cmd, args, file)
			if err != nil {
				return err
			}
			h, err := r.History(cmd.Context(), name, opts)
			if err != nil {
				return err
			}
			defer func() {
				if cerr := h.Close(); cerr != nil && err == nil {
					err = fmt.Errorf("close history: %w", cerr)
				}
			}()
			switch {
			case opts.Count:
				_, err := fmt.Fprintln(a.env.Stdout, h.Count)
				return err
			case format == formatTable:
				return historyTable(a.env.Stdout, h.Messages)
			}
			return writeHistory(a.env.Stdout, h.Header, h.Messages)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read this transcript file instead of a chat of the store")
	cmd.Flags().StringVar(&opts.Branch, "branch", "", "build the context for this leaf entry id (default: the last entry)")
	_ = cmd.RegisterFlagCompletionFunc("branch", a.completeEntries)
	formatFlag(cmd, &format, formatJSON, formatTable)
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "keep only the last N messages (0: all)")
	cmd.Flags().BoolVar(&opts.Count, "count", false, "print only the number of messages")
	return cmd
}

// writeHistory prints the context with its messages spliced in verbatim, one per line, through a
// buffer: a long history is mostly bytes already encoded, so nothing is re-encoded.
func writeHistory(out io.Writer, h conversation.HistoryHeader, msgs iter.Seq2[json.RawMessage, error]) error {
	head, err := marshalLine(h)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	w := bufio.NewWriterSize(out, 256<<10)
	// The header's members, then the messages as its last member.
	_, _ = w.Write(head[:len(head)-1])
	_, _ = w.WriteString(`,"messages":[`)
	n := 0
	for m, err := range msgs {
		if err != nil {
			// The output is cut short: say so rather than print a valid-looking prefix.
			return fmt.Errorf("build context: %w", err)
		}
		if n > 0 {
			_ = w.WriteByte(',')
		}
		_ = w.WriteByte('\n')
		_, _ = w.Write(m)
		n++
	}
	if n > 0 {
		_ = w.WriteByte('\n')
	}
	_, _ = w.WriteString("]}\n")
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	return nil
}

// historyTable prints one row per context message: its role and a one-line preview.
func historyTable(out io.Writer, msgs iter.Seq2[json.RawMessage, error]) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tPREVIEW")
	for m, err := range msgs {
		if err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		role, pv := conversation.PreviewMessage(m)
		fmt.Fprintf(tw, "%s\t%s\n", role, pv)
	}
	return flushTable(tw)
}

func (a *app) chatTreeCmd() *cobra.Command {
	var file, format string
	cmd := &cobra.Command{
		Use:   "tree KEY|SESSIONID|--file PATH",
		Short: "Print the entry tree of a chat (branches, labels, the active leaf)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := a.chatReader(cmd, args, file)
			if err != nil {
				return err
			}
			tree, err := r.Tree(cmd.Context(), name)
			if err != nil {
				return err
			}
			if format == formatTable {
				return treeTable(a.env.Stdout, tree)
			}
			return tree.WriteJSON(a.env.Stdout, true)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read this transcript file instead of a chat of the store")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// treeTable draws the tree: `*` marks the active path, `<- leaf` the active leaf.
func treeTable(w io.Writer, t *conversation.Tree) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ENTRY\tTYPE\tLABEL\tPREVIEW")
	for _, n := range t.Entries {
		mark := " "
		if n.Active {
			mark = "*"
		}
		typ := n.Type
		if n.Role != "" {
			typ += "/" + n.Role
		}
		label := n.Label
		if label == "" {
			label = "-"
		}
		pv := n.Preview
		if n.ID == t.LeafID {
			pv += "  <- leaf"
		}
		fmt.Fprintf(tw, "%s %s%s\t%s\t%s\t%s\n", mark, strings.Repeat("  ", n.Depth), n.ID, typ, conversation.OneLine(label, 40), pv)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write tree: %w", err)
	}
	return nil
}

func (a *app) chatExportCmd() *cobra.Command {
	var file, format, output string
	formats := make([]string, 0, 3)
	for _, f := range conversation.ExportFormats() {
		formats = append(formats, string(f))
	}
	cmd := &cobra.Command{
		Use:   "export KEY|SESSIONID|--file PATH --format jsonl|md|html [-o OUT]",
		Short: "Export a chat: the raw transcript (jsonl) or its active branch as Markdown or HTML",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, name, err := a.chatReader(cmd, args, file)
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				return r.Export(cmd.Context(), name, conversation.ExportFormat(format), a.env.Stdout)
			}
			// The file is created with the first byte, so a refused export leaves none.
			out := &outputFile{path: output}
			if err := r.Export(cmd.Context(), name, conversation.ExportFormat(format), out); err != nil {
				out.abandon()
				return err
			}
			return out.close()
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "export this transcript file instead of a chat of the store")
	enumFlag(cmd, &format, "format", string(conversation.ExportJSONL), "jsonl (the file's bytes), md or html (the active branch, readable)", formats...)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file (0600) instead of standard output")
	return cmd
}

// outputFile is a user-named output file, created 0600 (replaced if it exists) on the first
// write, or on close when nothing was written.
type outputFile struct {
	path string
	f    *os.File
	err  error
}

func (o *outputFile) open() error {
	if o.f == nil && o.err == nil {
		o.f, o.err = os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) // #nosec G304 -- the user names the output file
		if o.err != nil {
			o.err = abi.Errorf(abi.CodeInvalidArgument, "", "create %s: %v", o.path, o.err)
		}
	}
	return o.err
}

func (o *outputFile) Write(p []byte) (int, error) {
	if err := o.open(); err != nil {
		return 0, err
	}
	return o.f.Write(p)
}

// abandon closes the file after a failure, creating none when nothing was written.
func (o *outputFile) abandon() {
	if o.f != nil {
		_ = o.f.Close()
	}
}

// close closes the file, creating it when nothing was written.
func (o *outputFile) close() error {
	if err := o.open(); err != nil {
		return err
	}
	if err := o.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", o.path, err)
	}
	return nil
}
