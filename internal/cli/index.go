package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/index/source"
)

// indexCmd is `nexus index`: the history index of every agent tool's transcripts on the
// machine (docs/history.md), in state/index.db. The commands open the database themselves,
// whether or not a gateway runs (SQLite serializes the writers).
func (a *app) indexCmd() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "index",
		Short: "The history index: sync, search and browse every agent tool's transcripts",
		Long: `The history index: the transcripts of nexus, pi, OpenClaw, Claude Code and Codex on this machine,
in one SQLite database (state/index.db) with full-text search (docs/history.md).

nexus index sync reads what is new since the last sync (--watch keeps following); search, sessions,
show and stats read the index; export writes its two ledgers as JSON Lines. A running gateway
(nexus serve) keeps the index fresh on its own.`,
	})
	cmd.AddCommand(a.indexSyncCmd(), a.indexSearchCmd(), a.indexSessionsCmd(), a.indexShowCmd(),
		a.indexStatsCmd(), a.indexExportCmd())
	return cmd
}

// openIndex opens state/index.db.
func (a *app) openIndex(ctx context.Context) (*index.Index, error) {
	resultMax, err := index.ResultMaxFromEnv(a.env.Getenv)
	if err != nil {
		return nil, err
	}
	return index.Open(ctx, filepath.Join(a.stateDir, index.FileName), index.Options{Now: a.env.Now, ResultMax: resultMax})
}

// withIndex runs fn on the open index and closes it.
func (a *app) withIndex(ctx context.Context, fn func(ix *index.Index) error) (err error) {
	ix, err := a.openIndex(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := ix.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return fn(ix)
}

// parseIndexRoots turns --root SOURCE=DIR values into the roots of a sync (several values may
// name one source); an unknown source is INVALID_ARGUMENT listing the known ones.
func parseIndexRoots(flag string, values []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, v := range values {
		name, dir, ok := strings.Cut(v, "=")
		if !ok || name == "" || dir == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "--%s %q: want SOURCE=DIR", flag, v)
		}
		if _, err := index.Sources([]string{name}); err != nil {
			var ae *abi.Error
			if errors.As(err, &ae) {
				return nil, abi.Errorf(ae.Code, "", "--%s %s: %s", flag, v, ae.Message)
			}
			return nil, err
		}
		out[name] = append(out[name], dir)
	}
	return out, nil
}

// indexSyncOptions are what a sync reads: the sources named (all when none), the roots given,
// and for the others the tools' default directories under $HOME, nexus's conversations being
// those of the CLI's state directory.
func (a *app) indexSyncOptions(sources []string, roots map[string][]string) (index.SyncOptions, error) {
	if _, err := index.Sources(sources); err != nil {
		return index.SyncOptions{}, err
	}
	home := a.env.Getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return index.SyncOptions{}, fmt.Errorf("find home directory: %w", err)
		}
		home = h
	}
	if roots == nil {
		roots = map[string][]string{}
	}
	if _, ok := roots["nexus"]; !ok {
		roots["nexus"] = []string{conversation.SessionsDir(a.stateDir)}
	}
	return index.SyncOptions{Sources: sources, Roots: roots, Env: &source.Env{Home: home, Getenv: a.env.Getenv}}, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) //nolint:gosec // G115: a file descriptor fits in an int
}

func (a *app) indexSyncCmd() *cobra.Command {
	var (
		sources, rootFlags []string
		watch              bool
		format             string
	)
	cmd := &cobra.Command{
		Use:   "sync",
		Short: "Read what is new in the transcripts into the index (--watch: and keep following them)",
		Long: `Reads every source's transcripts into the index: new files whole, appended files from where the
last sync stopped, rewritten files again; files gone from a source's directories are marked
deleted (their sessions stay searchable). Prints what it did (the summary).

--root SOURCE=DIR replaces a source's directories (repeatable). --watch syncs, then follows the
directories and syncs each file as it changes, printing one summary per sync on its own line,
until interrupted. On a terminal a progress line is drawn on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			roots, err := parseIndexRoots("root", rootFlags)
			if err != nil {
				return err
			}
			opts, err := a.indexSyncOptions(sources, roots)
			if err != nil {
				return err
			}
			var bar *progressBar
			if isTerminal(a.env.Stderr) {
				bar = &progressBar{w: a.env.Stderr, now: a.env.Now}
				opts.Progress = bar.update
			}
			return a.withIndex(cmd.Context(), func(ix *index.Index) error {
				if watch {
					return a.watchIndex(cmd.Context(), ix, opts, bar, format)
				}
				sum, err := ix.Sync(cmd.Context(), opts)
				bar.clear()
				if err != nil {
					return err
				}
				return a.print(format, sum, func(w io.Writer) error { return syncTable(w, sum) })
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&sources, "source", nil, "sync only this source (repeatable): nexus, pi, openclaw, claude-code, codex, opencode, qwen-code, gemini or crush")
	f.StringArrayVar(&rootFlags, "root", nil, "read SOURCE's transcripts from DIR instead of its default directories (SOURCE=DIR, repeatable)")
	f.BoolVar(&watch, "watch", false, "keep following the transcripts, syncing each change, until interrupted")
	completeSources(cmd, "source")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// watchIndex runs index.Watch until SIGINT or SIGTERM, printing each sync's summary on a line
// of its own (compact JSON, or the short human line).
func (a *app) watchIndex(ctx context.Context, ix *index.Index, opts index.SyncOptions, bar *progressBar, format string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := ix.Watch(ctx, index.WatchOptions{SyncOptions: opts, OnSync: func(sum *index.Summary, err error) {
		bar.clear()
		if err != nil {
			if ctx.Err() == nil {
				a.warnf("index sync: %v", err)
			}
			return
		}
		if format == formatTable {
			fmt.Fprintln(a.env.Stdout, summaryLine(sum))
			return
		}
		b, merr := marshalLine(sum)
		if merr != nil {
			a.warnf("encode summary: %v", merr)
			return
		}
		_, _ = a.env.Stdout.Write(append(b, '\n'))
	}})
	bar.clear()
	return err
}

// progressBar draws a sync's progress on one terminal line, redrawn in place at most every
// progressEvery (and at the last file).
type progressBar struct {
	w     io.Writer
	now   func() time.Time
	last  time.Time
	shown bool
}

const (
	progressEvery = 100 * time.Millisecond
	progressWidth = 24
)

func (p *progressBar) update(pr index.Progress) {
	now := p.now()
	if pr.Files < pr.FilesTotal && now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	fmt.Fprintf(p.w, "\r\x1b[K%s", progressLine(pr))
	p.shown = true
}

// clear erases the progress line, if one is drawn. A nil bar draws nothing.
func (p *progressBar) clear() {
	if p == nil || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K")
	p.shown = false
}

// progressLine is the text of the progress line: a bar, the files done and the megabytes read.
func progressLine(pr index.Progress) string {
	done := progressWidth
	if pr.FilesTotal > 0 {
		done = min(progressWidth, pr.Files*progressWidth/pr.FilesTotal)
	}
	return fmt.Sprintf("[%s%s] %d/%d files, %.1f MB", strings.Repeat("#", done), strings.Repeat(" ", progressWidth-done),
		pr.Files, pr.FilesTotal, float64(pr.Bytes)/1e6)
}

// summaryLine is a sync's summary in one line.
func summaryLine(s *index.Summary) string {
	line := fmt.Sprintf("synced %d files (%d new, %d appended, %d rewritten, %d deleted, %d unchanged): %d bytes, %d sessions, %d messages, %d tool calls in %d ms",
		s.Files, s.New, s.Appended, s.Rewritten, s.Deleted, s.Unchanged, s.Bytes, s.Sessions, s.Messages, s.ToolCalls, s.DurationMS)
	if len(s.Errors) > 0 {
		line += fmt.Sprintf("; %d files not read", len(s.Errors))
	}
	return line
}

func syncTable(w io.Writer, s *index.Summary) error {
	fmt.Fprintln(w, summaryLine(s))
	for _, k := range sortedKeys(s.Skipped) {
		fmt.Fprintf(w, "skipped %d lines: %s\n", s.Skipped[k], k)
	}
	if s.Cut > 0 {
		fmt.Fprintf(w, "cut %d lines to their bound\n", s.Cut)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(w, "not read: %s %s: %s\n", e.Source, e.Path, conversation.OneLine(e.Error, 200))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// completeSources offers the source names for a flag.
func completeSources(cmd *cobra.Command, flag string) {
	var names []string
	for _, s := range source.All() {
		names = append(names, s.Name())
	}
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
}

// hintIfEmpty tells on stderr that the index was never synced, so an empty answer is not taken
// for "nothing matches".
func (a *app) hintIfEmpty(ctx context.Context, ix *index.Index) error {
	gen, err := ix.Gen(ctx)
	if err != nil {
		return err
	}
	if gen == 0 {
		a.warnf("the index is empty: run `nexus index sync`")
	}
	return nil
}

// relativeSince matches a number of days or weeks back from now (7d, 2w).
var relativeSince = regexp.MustCompile(`^(\d+)([dw])$`)

// parseIndexSince reads --since: a duration back from now (Go's, 90m or 24h, or days and weeks,
// 7d or 2w), a date (midnight, local time) or an RFC 3339 time.
func parseIndexSince(s string, now time.Time) (time.Time, error) {
	if m := relativeSince.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err == nil && n <= 100*365 {
			days := n
			if m[2] == "w" {
				days *= 7
			}
			return now.AddDate(0, 0, -days), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, abi.Errorf(abi.CodeInvalidArgument, "", "bad --since %q: want a duration back from now (24h, 7d, 2w), a date (2026-01-02) or an RFC 3339 time", s)
}

func (a *app) indexSearchCmd() *cobra.Command {
	var (
		opts   index.SearchOptions
		since  string
		format string
	)
	cmd := &cobra.Command{
		Use:   "search QUERY...",
		Short: "Search the index: the best matching messages and tool calls, best first",
		Long: `Searches messages and tool calls for the words of QUERY (the arguments, joined by spaces), best
matches first (BM25). "double quotes" make a phrase, a trailing * a prefix, OR between two words
means either, and -word or NOT word excludes (write -- before a query that starts with -).
Punctuation separates words; nothing typed is a syntax error.

Each hit names the command that shows it in its session (show) and, when its tool has one, the
command that resumes the session (resume).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			if since != "" {
				t, err := parseIndexSince(since, a.env.Now())
				if err != nil {
					return err
				}
				opts.Since = t
			}
			opts.Query = strings.Join(args, " ")
			return a.withIndex(cmd.Context(), func(ix *index.Index) error {
				hits, err := ix.Search(cmd.Context(), opts)
				if err != nil {
					return err
				}
				if err := a.hintIfEmpty(cmd.Context(), ix); err != nil {
					return err
				}
				if hits == nil {
					hits = []index.Hit{}
				}
				return a.print(format, hits, func(w io.Writer) error {
					return hitsTable(w, hits, isTerminal(a.env.Stdout))
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&opts.Sources, "source", nil, "only this source (repeatable): nexus, pi, openclaw, claude-code, codex, opencode, qwen-code, gemini or crush")
	f.StringVar(&opts.Project, "project", "", "only sessions whose project (working directory) contains this")
	f.StringVar(&opts.Role, "role", "", "only messages of this role (user, assistant, ...); tool: only tool calls")
	f.StringVar(&since, "since", "", "only since this long ago (24h, 7d, 2w), this date (2026-01-02) or this time (RFC 3339)")
	f.StringVar(&opts.Tool, "tool", "", "only the calls of this tool (by name), no messages")
	f.StringVar(&opts.Origin, "origin", "", "only turns whose message came from this origin (nexus conversations): a kind (cli, console,\n"+
		"webhook, cron, heartbeat, agent, subagent), kind:id (webhook:ci) or a channel a webhook named (telegram)")
	f.IntVar(&opts.Limit, "limit", index.DefaultLimit, fmt.Sprintf("at most this many hits (at most %d)", index.MaxLimit))
	completeSources(cmd, "source")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// snippetWidth bounds a snippet in the hits table.
const snippetWidth = 160

// hitsTable prints one row per hit (rank, time, source, session, role, snippet) and under it
// the commands that show and resume it. bold renders the snippet's match markers as ANSI bold
// (for a terminal); otherwise they stay as they are.
func hitsTable(w io.Writer, hits []index.Hit, bold bool) error {
	if len(hits) == 0 {
		fmt.Fprintln(w, "no matches")
		return nil
	}
	rows := make([][5]string, len(hits))
	var width [5]int
	for i, h := range hits {
		role := h.Role
		if h.Kind == "tool_call" {
			role = "tool " + conversation.OneLine(h.Tool, 30)
		}
		ts := h.Timestamp
		if ts == "" {
			ts = "-"
		}
		rows[i] = [5]string{strconv.Itoa(i + 1), oneLine(ts), oneLine(h.Source), shortID(oneLine(h.Session)), role}
		for j, c := range rows[i] {
			width[j] = max(width[j], utf8.RuneCountInString(c))
		}
	}
	indent := strings.Repeat(" ", width[0]+2)
	for i, h := range hits {
		r := rows[i]
		fmt.Fprintf(w, "%*s  %-*s  %-*s  %-*s  %-*s  %s\n", width[0], r[0], width[1], r[1], width[2], r[2], width[3], r[3], width[4], r[4],
			renderMarks(conversation.OneLine(h.Snippet, snippetWidth), bold))
		fmt.Fprintf(w, "%sshow:   %s\n", indent, oneLine(h.Show))
		if h.Resume != "" {
			fmt.Fprintf(w, "%sresume: %s\n", indent, oneLine(h.Resume))
		}
		if h.ResumeNote != "" {
			fmt.Fprintf(w, "%s(%s)\n", indent, oneLine(h.ResumeNote))
		}
		if h.ResultCut {
			fmt.Fprintf(w, "%s(the result is searched up to its cut: it was %d bytes)\n", indent, h.ResultBytes)
		}
		if h.Deleted {
			fmt.Fprintf(w, "%s(its transcript is deleted)\n", indent)
		}
	}
	return nil
}

// shortIDLen is how much of a session id the tables show; the show command names it whole.
const shortIDLen = 13

func shortID(id string) string {
	if utf8.RuneCountInString(id) <= shortIDLen {
		return id
	}
	return string([]rune(id)[:shortIDLen-1]) + "…"
}

// renderMarks renders the snippet's match markers: ANSI bold when bold is set, else **.
func renderMarks(s string, bold bool) string {
	if !bold {
		return plainMarks.Replace(s)
	}
	open := strings.Count(s, index.MarkOpen) > strings.Count(s, index.MarkClose)
	s = boldMarks.Replace(s)
	if open {
		s += "\x1b[22m" // a snippet cut inside a match still ends the bold
	}
	return s
}

var (
	plainMarks = strings.NewReplacer(index.MarkOpen, "**", index.MarkClose, "**")            //nolint:gochecknoglobals // immutable
	boldMarks  = strings.NewReplacer(index.MarkOpen, "\x1b[1m", index.MarkClose, "\x1b[22m") //nolint:gochecknoglobals // immutable
)

func (a *app) indexSessionsCmd() *cobra.Command {
	var (
		opts   index.SessionsOptions
		format string
	)
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List the indexed sessions, most recently updated first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			return a.withIndex(cmd.Context(), func(ix *index.Index) error {
				list, err := ix.Sessions(cmd.Context(), opts)
				if err != nil {
					return err
				}
				if err := a.hintIfEmpty(cmd.Context(), ix); err != nil {
					return err
				}
				if list == nil {
					list = []index.SessionInfo{}
				}
				return a.print(format, list, func(w io.Writer) error { return sessionsTable(w, list) })
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&opts.Sources, "source", nil, "only this source (repeatable): nexus, pi, openclaw, claude-code, codex, opencode, qwen-code, gemini or crush")
	f.StringVar(&opts.Project, "project", "", "only sessions whose project (working directory) contains this")
	f.IntVar(&opts.Limit, "limit", index.DefaultLimit, fmt.Sprintf("at most this many sessions (at most %d)", index.MaxLimit))
	completeSources(cmd, "source")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func sessionsTable(w io.Writer, list []index.SessionInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPDATED\tSOURCE\tSESSION\tMESSAGES\tTOKENS\tPROJECT\tTITLE")
	for _, s := range list {
		title := conversation.OneLine(s.Title, 60)
		if s.Deleted {
			title = "(deleted) " + title
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\n", dash(s.Updated), oneLine(s.Source), conversation.OneLine(s.ID, 60), s.Messages,
			s.Tokens.Total, dash(conversation.OneLine(s.Project, 50)), dash(title))
	}
	return flushTable(tw)
}

// oneLine keeps a value that comes from a transcript (an id, a path, a command naming them) on
// one line and away from the terminal's control: conversation.OneLine, without cutting it.
func oneLine(s string) string { return conversation.OneLine(s, len(s)+1) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) indexShowCmd() *cobra.Command {
	var (
		opts   index.ShowOptions
		format string
	)
	cmd := &cobra.Command{
		Use:   "show SESSION",
		Short: "Print an indexed session: its messages and tool calls",
		Long: `Prints an indexed session (named by its id or a unique prefix of it, --source when two tools
share an id) with its messages and their tool calls; --around MSG keeps the --context messages
on each side of one message (the show command of a search hit).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Context < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--context must not be negative")
			}
			if opts.Source != "" {
				if _, err := index.Sources([]string{opts.Source}); err != nil {
					return err
				}
			}
			opts.Session = args[0]
			return a.withIndex(cmd.Context(), func(ix *index.Index) error {
				d, err := ix.Show(cmd.Context(), opts)
				if err != nil {
					return err
				}
				return a.print(format, d, func(w io.Writer) error { return showTranscript(w, d, opts.Around) })
			})
		},
		ValidArgsFunction: a.completeIndexSessions,
	}
	f := cmd.Flags()
	f.StringVar(&opts.Source, "source", "", "the session's source, when two tools share an id")
	f.StringVar(&opts.Around, "around", "", "show only the messages around this message id")
	f.IntVar(&opts.Context, "context", index.DefaultContext, "with --around, how many messages on each side")
	completeSources(cmd, "source")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// completeIndexSessions offers the most recent indexed sessions, without creating an index.
func (a *app) completeIndexSessions(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || a.resolveState() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	if _, err := os.Lstat(filepath.Join(a.stateDir, index.FileName)); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionWait)
	defer cancel()
	var out []cobra.Completion
	_ = a.withIndex(ctx, func(ix *index.Index) error {
		list, err := ix.Sessions(ctx, index.SessionsOptions{Limit: 200})
		for _, s := range list {
			if strings.HasPrefix(s.ID, toComplete) {
				out = append(out, cobra.CompletionWithDesc(s.ID, s.Source+" "+conversation.OneLine(s.Title, 50)))
			}
		}
		return err
	})
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
}

// resultLines bounds the lines of a tool result the transcript shows.
const resultLines = 8

// showTranscript prints a session for a person: its facts, then each message with its role,
// time and id, its text, and its tool calls with their status and the start of their result.
func showTranscript(w io.Writer, d *index.SessionDetail, around string) error {
	s := d.Session
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, oneLine(v))
		}
	}
	row("Session", s.ID+" ("+s.Source+")")
	row("Title", conversation.OneLine(s.Title, 100))
	row("Project", conversation.OneLine(s.Project, 200))
	row("Model", conversation.OneLine(s.Model, 100))
	row("Created", s.Created)
	row("Updated", s.Updated)
	row("Messages", fmt.Sprintf("%d in %d turns", s.Messages, s.Turns))
	t := s.Tokens
	row("Tokens", fmt.Sprintf("in %d, out %d, cache read %d, cache write %d, total %d", t.Input, t.Output, t.CacheRead, t.CacheWrite, t.Total))
	if s.ParentSession != "" {
		row("Parent", conversation.OneLine(s.ParentSession, 100))
	}
	if s.Task != "" {
		row("Task", conversation.OneLine(s.Task, 100)+" ("+s.TaskStatus+")")
	}
	if s.ForkOrigin != "" {
		row("Forked from", conversation.OneLine(s.ForkOrigin, 100))
	}
	if len(d.Children) > 0 {
		row("Subagents", conversation.OneLine(strings.Join(d.Children, ", "), 200))
	}
	if s.Deleted {
		row("Deleted", "its transcript is gone; the index keeps what it read")
	}
	row("File", s.Path)
	row("Resume", s.Resume)
	if err := flushTable(tw); err != nil {
		return err
	}
	for _, m := range d.Messages {
		mark := "--"
		if around != "" && m.ID == around {
			mark = ">>"
		}
		head := []string{conversation.OneLine(m.Role, 30)}
		if m.Timestamp != "" {
			head = append(head, m.Timestamp)
		}
		head = append(head, conversation.OneLine(m.ID, 60))
		if m.Model != "" {
			head = append(head, conversation.OneLine(m.Model, 60))
		}
		if m.Tokens != nil {
			head = append(head, fmt.Sprintf("%d tokens", m.Tokens.Total))
		}
		fmt.Fprintf(w, "\n%s %s\n", mark, strings.Join(head, "  "))
		if txt := strings.TrimRight(printable(m.Text), "\n "); txt != "" {
			fmt.Fprintln(w, txt)
		}
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(w, "  -> %s %s  [%s]\n", conversation.OneLine(dash(tc.Name), 60), conversation.OneLine(tc.Params, 200), oneLine(tc.Status))
			if tc.ChildSession != "" {
				fmt.Fprintf(w, "     subagent %s\n", conversation.OneLine(tc.ChildSession, 100))
			}
			lines := strings.Split(strings.TrimRight(printable(tc.Result), "\n "), "\n")
			if len(lines) == 1 && lines[0] == "" {
				continue
			}
			for i, l := range lines {
				if i == resultLines {
					fmt.Fprintf(w, "     … %d more lines\n", len(lines)-resultLines)
					break
				}
				fmt.Fprintf(w, "     %s\n", l)
			}
		}
	}
	return nil
}

// printable keeps a transcript's text from driving the terminal: control and format characters
// other than newline and tab are shown escaped (\x1b, \u202e), never sent as they are.
func printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexFunc(s, hidden) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !hidden(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func hidden(r rune) bool {
	return r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r))
}

func (a *app) indexStatsCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count the index: sessions, messages, tool calls and tokens by source, model, project and day",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withIndex(cmd.Context(), func(ix *index.Index) error {
				st, err := ix.Stats(cmd.Context())
				if err != nil {
					return err
				}
				return a.print(format, st, func(w io.Writer) error { return statsTable(w, st) })
			})
		},
	}
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func statsTable(w io.Writer, st *index.Stats) error {
	t := st.Tokens
	fmt.Fprintf(w, "%d sessions (%d deleted), %d messages, %d tool calls, %d files\n", st.Sessions, st.Deleted, st.Messages, st.ToolCalls, st.Files)
	fmt.Fprintf(w, "tokens: in %d, out %d, cache read %d, cache write %d, reasoning %d, total %d\n",
		t.Input, t.Output, t.CacheRead, t.CacheWrite, t.Reasoning, t.Total)
	for _, k := range sortedKeys(st.SkippedLines) {
		fmt.Fprintf(w, "skipped %d lines: %s\n", st.SkippedLines[k], k)
	}
	if st.CutLines > 0 {
		fmt.Fprintf(w, "cut %d lines to their bound\n", st.CutLines)
	}
	for _, e := range st.FailedFiles {
		fmt.Fprintf(w, "failed, skipped until it changes: %s %s: %s\n", e.Source, e.Path, conversation.OneLine(e.Error, 200))
	}
	for _, g := range []struct {
		name string
		rows []index.StatsRow
	}{{"SOURCE", st.BySource}, {"MODEL", st.ByModel}, {"PROJECT", st.ByProject}, {"DAY", st.ByDay}} {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "%s\tSESSIONS\tMESSAGES\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE\tTOTAL\n", g.name)
		for _, r := range g.rows {
			t := r.Tokens
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", dash(conversation.OneLine(r.Key, 60)), r.Sessions, r.Messages,
				t.Input, t.Output, t.CacheRead, t.CacheWrite, t.Total)
		}
		if err := flushTable(tw); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) indexExportCmd() *cobra.Command {
	var opts index.ExportOptions
	cmd := &cobra.Command{
		Use:   "export --ledger events|agents [--cursor N]",
		Short: "Write a ledger of the index as JSON Lines: every turn (events) or every record (agents)",
		Long: `Writes the records of a ledger as JSON Lines on stdout, in cursor order: events has one record per
turn (the user's query and the final response), agents every session, message, tool call and turn.
--cursor N continues after a previous export: only what later syncs wrote or changed follows (a
changed record comes again, whole; upsert it by its key). The cursor to continue from is printed
on stderr as "cursor: N".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Cursor < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--cursor must not be negative")
			}
			return a.withIndex(cmd.Context(), func(ix *index.Index) error {
				out := bufio.NewWriterSize(a.env.Stdout, 256<<10)
				cur, err := ix.Export(cmd.Context(), out, opts)
				if ferr := out.Flush(); ferr != nil && err == nil {
					err = fmt.Errorf("write export: %w", ferr)
				}
				if err == nil || cur > opts.Cursor {
					fmt.Fprintf(a.env.Stderr, "cursor: %d\n", cur)
				}
				return err
			})
		},
	}
	enumFlag(cmd, &opts.Ledger, "ledger", "", "the ledger: events (one record per turn) or agents (every record)", index.LedgerEvents, index.LedgerAgents)
	_ = cmd.MarkFlagRequired("ledger")
	cmd.Flags().Int64Var(&opts.Cursor, "cursor", 0, "continue after this cursor (printed by the previous export)")
	return cmd
}
