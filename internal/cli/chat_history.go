package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/transcript"
)

func (a *app) chatHistoryCmd() *cobra.Command {
	var file, branch, format string
	var limit int
	var count bool
	cmd := &cobra.Command{
		Use:   "history KEY|SESSIONID|--file PATH",
		Short: "Print the context the model sees at the active leaf (or --branch LEAF)",
		Long: "Prints {\"leafId\",\"model\",\"thinkingLevel\",\"messages\"}: the agent messages exactly as pi's\n" +
			"context builder yields them (the path to the leaf, the last compaction's summary first),\n" +
			"each message verbatim as it is stored in the transcript.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			t, err := a.chatTarget(cmd.Context(), args, file)
			if err != nil {
				return err
			}
			f, err := openTranscript(t.Path)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			if branch != "" && f.Entry(branch) == nil {
				return abi.Errorf(abi.CodeInvalidArgument, t.SessionID, "no entry %q in %s (see nexus chat tree)", branch, t.Path)
			}
			// Streamed: a context without compaction can be as large as the file, and
			// nothing needs more than the last --limit messages at once.
			c, seq := f.ContextMessages(branch)
			switch {
			case count:
				n := 0
				for _, err := range seq {
					if err != nil {
						return fmt.Errorf("build context of %s: %w", t.Path, err)
					}
					n++
				}
				if limit > 0 {
					n = min(n, limit)
				}
				_, err := fmt.Fprintln(a.env.Stdout, n)
				return err
			case limit > 0:
				ring := make([]json.RawMessage, 0, min(limit, 1024))
				for m, err := range seq {
					if err != nil {
						return fmt.Errorf("build context of %s: %w", t.Path, err)
					}
					if len(ring) == limit {
						copy(ring, ring[1:])
						ring = ring[:limit-1]
					}
					ring = append(ring, bytes.Clone(m)) // m is valid only until the next batch
				}
				seq = func(yield func(json.RawMessage, error) bool) {
					for _, m := range ring {
						if !yield(m, nil) {
							return
						}
					}
				}
			}
			if format == formatTable {
				return historyTable(a.env.Stdout, seq)
			}
			return writeHistory(a.env.Stdout, c, seq)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "read this transcript file instead of a chat of the store")
	cmd.Flags().StringVar(&branch, "branch", "", "build the context for this leaf entry id (default: the last entry)")
	_ = cmd.RegisterFlagCompletionFunc("branch", a.completeEntries)
	formatFlag(cmd, &format, formatJSON, formatTable)
	cmd.Flags().IntVar(&limit, "limit", 0, "keep only the last N messages (0: all)")
	cmd.Flags().BoolVar(&count, "count", false, "print only the number of messages")
	return cmd
}

// writeHistory prints the context with its messages spliced in verbatim, one per line, through a
// buffer: a long history is mostly bytes already encoded, so nothing is re-encoded.
func writeHistory(out io.Writer, c *transcript.Context, msgs iter.Seq2[json.RawMessage, error]) error {
	w := bufio.NewWriterSize(out, 256<<10)
	model := []byte("null")
	if c.Model != nil {
		var err error
		if model, err = json.Marshal(c.Model); err != nil {
			return fmt.Errorf("encode model: %w", err)
		}
	}
	leaf := []byte("null")
	if c.LeafID != "" {
		leaf, _ = json.Marshal(c.LeafID)
	}
	level, _ := json.Marshal(c.ThinkingLevel)
	fmt.Fprintf(w, `{"leafId":%s,"model":%s,"thinkingLevel":%s,"messages":[`, leaf, model, level)
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
		role, pv := "?", ""
		if info, err := transcript.ParseMessageInfo(m); err == nil {
			role, pv = info.Role, messagePreview(info)
		}
		fmt.Fprintf(tw, "%s\t%s\n", role, oneLine(pv, previewLen))
	}
	return flushTable(tw)
}
