package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/shell"
)

func (a *app) agentCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "agent", Short: "Agents (personas of ai chats) and agent-facing sessions"})
	cmd.AddCommand(a.agentAddCmd(), a.agentListCmd(), a.agentShowCmd(), a.agentEditCmd(), a.agentRunsCmd())
	tc := group(&cobra.Command{Use: "terminal", Short: "Terminal sessions: a PTY running your shell in a project"})
	tc.AddCommand(a.terminalOpenCmd(), a.terminalSendCmd(), a.terminalAttachCmd(), a.terminalRunCmd())
	cmd.AddCommand(tc)
	return cmd
}

type openOptions struct {
	project    string
	roadmap    string
	ttl        time.Duration
	shell      string
	cols, rows int
	transport  string
	ephemeral  bool
	node       string
}

func (a *app) openFlags(cmd *cobra.Command, o *openOptions, full bool) {
	f := cmd.Flags()
	f.StringVar(&o.project, "project", "", "project to open the terminal in (see nexus project add)")
	_ = cmd.RegisterFlagCompletionFunc("project", a.completeProjects)
	if !full {
		return
	}
	f.StringVar(&o.roadmap, "roadmap", "", "link the session to a roadmap (its meta-chat sessions see it)")
	f.DurationVar(&o.ttl, "ttl", 0, "close the session after this long, a Go duration such as 90m (sets expiresAt; 0: no expiry)")
	f.StringVar(&o.shell, "shell", "", "shell to run (default the gateway's)")
	sizeFlags(cmd, &o.cols, &o.rows, "cols", "rows", " (default 80x24, or this terminal's with --ephemeral)")
	enumFlag(cmd, &o.transport, "transport", string(abi.TransportWebSocket), "how clients will stream it: websocket, polling or hybrid",
		string(abi.TransportWebSocket), string(abi.TransportPolling), string(abi.TransportHybrid))
	f.BoolVar(&o.ephemeral, "ephemeral", false, "the session lives only as long as this command")
	f.StringVar(&o.node, "node", "", "in a cluster: the node to open the terminal on (default: as the cluster's --placement says)")
}

func (a *app) openTerminal(ctx context.Context, o openOptions) (abi.Session, error) {
	if o.project == "" {
		return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "terminal sessions need --project (see nexus project list)")
	}
	if o.ttl < 0 {
		return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "--ttl must not be negative")
	}
	if o.cols < 0 || o.rows < 0 {
		return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "--cols and --rows must not be negative")
	}
	opts, err := json.Marshal(abi.TerminalOptions{Shell: o.shell, Cols: o.cols, Rows: o.rows})
	if err != nil {
		return abi.Session{}, fmt.Errorf("encode options: %w", err)
	}
	req := abi.CreateRequest{
		Type:       abi.TypeTerminal,
		Context:    abi.Context{ProjectID: o.project, RoadmapID: o.roadmap},
		Transport:  abi.Transport(o.transport),
		TTLSeconds: int64(math.Ceil(o.ttl.Seconds())),
		Ephemeral:  o.ephemeral,
		Options:    opts,
		Node:       o.node,
	}
	s, err := a.client().Create(ctx, req)
	if err != nil {
		return s, err
	}
	if !o.ephemeral {
		if err := a.setActive(ctx, s); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (a *app) terminalOpenCmd() *cobra.Command {
	var o openOptions
	var format, contentType string
	cmd := &cobra.Command{
		Use:   "open --project NAME",
		Short: "Open a terminal session and make it the active one (with --ephemeral: stream it until this command ends)",
		Long: `Open a terminal session in a project and print its session object; it becomes the active
terminal session of the CLI context.

With --ephemeral the session lives only as long as this command, which streams it: with
--format json the output is JSON lines, the session object on the first line and then one event
envelope per line; with --format table, the session's table and then its terminal output as text.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.ephemeral && o.cols == 0 {
				o.cols, o.rows = localSize()
			}
			s, err := a.openTerminal(cmd.Context(), o)
			if err != nil {
				return err
			}
			if !o.ephemeral {
				return a.printSession(format, s)
			}
			w := &eventWriter{out: a.env.Stdout, format: eventsRaw, ct: abi.ContentType(contentType)}
			if format == formatTable {
				if err := sessionDetail(a.env.Stdout, s); err != nil {
					return err
				}
				w.format = eventsText
				if !cmd.Flags().Changed("content-type") {
					w.ct = abi.ContentText
				}
			} else {
				line, err := marshalLine(s)
				if err != nil {
					return fmt.Errorf("encode session: %w", err)
				}
				if _, err := a.env.Stdout.Write(append(line, '\n')); err != nil {
					return fmt.Errorf("write session: %w", err)
				}
			}
			return a.holdAndStream(cmd.Context(), s.SessionID, w)
		},
	}
	a.openFlags(cmd, &o, true)
	formatFlag(cmd, &format, formatJSON, formatTable)
	contentTypeFlag(cmd, &contentType, "with --ephemeral: output as ansi, text or raw")
	return cmd
}

// holdAndStream owns an ephemeral session: it prints its events until the session closes or the
// command is stopped, and the session closes when this connection ends.
func (a *app) holdAndStream(ctx context.Context, id string, w *eventWriter) error {
	conn, err := a.client().Dial(ctx, id, client.DialOptions{ContentType: w.ct, Hold: true})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	for {
		e, err := conn.Next(ctx)
		if err != nil {
			if errors.Is(err, client.ErrStreamEnded) || ctx.Err() != nil {
				return w.flush()
			}
			return err
		}
		if err := w.write(e); err != nil {
			return fmt.Errorf("write event: %w", err)
		}
	}
}

// gone reports whether err means the session can no longer be used.
func gone(err error) bool {
	return client.IsCode(err, abi.CodeSessionClosed) || client.IsCode(err, abi.CodeSessionExpired) || client.IsCode(err, abi.CodeSessionNotFound)
}

// finalErr is the error a command gets for a session object that is no longer usable.
func finalErr(s abi.Session) error {
	if !s.Status.Final() {
		return nil
	}
	if r := s.Metadata["closeReason"]; r == abi.CloseTimeout || r == abi.CloseIdle {
		return abi.Errorf(abi.CodeSessionExpired, s.SessionID, "session %s expired (%v)", s.SessionID, r)
	}
	return abi.Errorf(abi.CodeSessionClosed, s.SessionID, "session %s is %s (%v)", s.SessionID, s.Status, s.Metadata["closeReason"])
}

// withTerminal runs op on the terminal session a command should use: --session-id as given
// (never recreated), else the active one. When the active one has closed or expired, or there
// is none and --project names one, it opens a fresh session and says so on stderr.
func (a *app) withTerminal(ctx context.Context, explicit string, o openOptions, op func(id string) error) error {
	if explicit != "" {
		return op(explicit)
	}
	act, err := a.activeID(abi.TypeTerminal)
	if err != nil {
		return err
	}
	if act.SessionID != "" {
		err := op(act.SessionID)
		if err == nil || !gone(err) {
			return err
		}
		if o.project == "" {
			o.project = act.ProjectID
		}
		s, cerr := a.openTerminal(ctx, o)
		if cerr != nil {
			return fmt.Errorf("active terminal session %s is unusable (%w) and opening a new one failed: %w", act.SessionID, err, cerr)
		}
		a.warnf("active terminal session %s is unusable (%s); opened new terminal session %s in project %s", act.SessionID, abi.CodeOf(err), s.SessionID, o.project)
		return op(s.SessionID)
	}
	if o.project == "" {
		return abi.Errorf(abi.CodeInvalidArgument, "", "no active terminal session: pass --session-id, or --project to open one (nexus agent terminal open --project NAME)")
	}
	s, err := a.openTerminal(ctx, o)
	if err != nil {
		return err
	}
	a.warnf("no active terminal session; opened terminal session %s in project %s", s.SessionID, o.project)
	return op(s.SessionID)
}

func (a *app) terminalSendCmd() *cobra.Command {
	var id, format string
	var o openOptions
	var noNewline bool
	cmd := &cobra.Command{
		Use:   "send [--session-id ID] TEXT...",
		Short: "Type TEXT (and Enter) into a terminal session; with no TEXT, send standard input as is",
		RunE: func(cmd *cobra.Command, args []string) error {
			var data []byte
			if len(args) == 0 {
				b, err := io.ReadAll(io.LimitReader(a.env.Stdin, abi.MaxRequestBody/2))
				if err != nil {
					return fmt.Errorf("read standard input: %w", err)
				}
				data = b
			} else {
				data = []byte(strings.Join(args, " "))
				if !noNewline {
					data = append(data, '\r')
				}
			}
			return a.withTerminal(cmd.Context(), id, o, func(sid string) error {
				if err := a.client().Send(cmd.Context(), sid, data); err != nil {
					return err
				}
				return a.print(format, map[string]any{"status": abi.ResponseOK, "sessionId": sid, "bytes": len(data)}, nil)
			})
		},
	}
	a.idFlags(cmd, &id, nil, abi.TypeTerminal)
	a.openFlags(cmd, &o, false)
	formatFlag(cmd, &format, formatJSON, formatTable)
	cmd.Flags().BoolVarP(&noNewline, "no-newline", "n", false, "do not press Enter after TEXT")
	return cmd
}

const detachKey = 0x1d // Ctrl-]

func (a *app) terminalAttachCmd() *cobra.Command {
	var id string
	var o openOptions
	// Errors before the terminal is attached are error responses like any command's.
	cmd := &cobra.Command{
		Use:   "attach [--session-id ID]",
		Short: "Attach this terminal to a terminal session (detach with Ctrl-])",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if o.ephemeral {
				if id != "" {
					return abi.Errorf(abi.CodeInvalidArgument, "", "--ephemeral opens a new session; it cannot be combined with --session-id")
				}
				o.cols, o.rows = localSize()
				s, err := a.openTerminal(ctx, o)
				if err != nil {
					return err
				}
				return a.attach(ctx, s.SessionID, true, 0)
			}
			return a.withTerminal(ctx, id, o, func(sid string) error {
				s, err := a.client().Get(ctx, sid)
				if err != nil {
					return err
				}
				if err := finalErr(s); err != nil {
					return err
				}
				// Start from now: the retained history is for `session events`.
				r, err := a.client().Poll(ctx, sid, math.MaxUint64, 1, 0, "")
				if err != nil {
					return err
				}
				return a.attach(ctx, sid, false, r.Next)
			})
		},
	}
	a.idFlags(cmd, &id, nil, abi.TypeTerminal)
	a.openFlags(cmd, &o, true)
	return cmd
}

func localSize() (int, int) {
	if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 0 && h > 0 {
		return w, h
	}
	return 0, 0
}

// attach connects the local terminal to a session: keystrokes go in, output comes out, window
// size follows, Ctrl-] detaches. Dropped connections are resumed after the last sequence seen.
func (a *app) attach(ctx context.Context, id string, hold bool, after uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdinFile, isFile := a.env.Stdin.(*os.File)
	interactive := isFile && term.IsTerminal(int(stdinFile.Fd()))
	if interactive {
		old, err := term.MakeRaw(int(stdinFile.Fd()))
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer func() { _ = term.Restore(int(stdinFile.Fd()), old) }()
		fmt.Fprintf(a.env.Stderr, "[attached to %s; detach with Ctrl-]]\r\n", id)
	}

	// The stream reconnects and resumes after the last event it delivered (client.Stream); input
	// goes on whichever connection is current.
	var conn atomic.Pointer[client.Conn]
	dialed := make(chan struct{})
	var dialOnce sync.Once
	events := make(chan abi.Event, 256)
	readErr := make(chan error, 1)
	go func() {
		readErr <- a.client().Stream(ctx, id, client.StreamOptions{
			After: after, Follow: true, Hold: hold,
			Dialed: func(c *client.Conn) {
				conn.Store(c)
				dialOnce.Do(func() { close(dialed) })
			},
		}, func(e abi.Event) error {
			select {
			case events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	select {
	case <-dialed:
	case err := <-readErr:
		if err == nil {
			return nil
		}
		return err
	}

	// Input: forward keystrokes; Ctrl-] (or the end of piped input) detaches.
	detached := make(chan struct{})
	go func() {
		defer close(detached)
		buf := make([]byte, 4096)
		for {
			n, err := a.env.Stdin.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				i := bytes.IndexByte(chunk, detachKey)
				if i >= 0 {
					chunk = chunk[:i]
				}
				if len(chunk) > 0 {
					_ = conn.Load().Send(ctx, append([]byte(nil), chunk...))
				}
				if i >= 0 {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()

	if interactive {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				if w, h, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
					_ = conn.Load().Resize(ctx, w, h)
				}
				select {
				case <-winch:
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	var quiet <-chan time.Time
	var deadline <-chan time.Time
	for {
		select {
		case e := <-events:
			switch e.Event {
			case abi.EventData:
				var out abi.TerminalOutput
				if json.Unmarshal(e.Payload, &out) == nil {
					b, _ := out.Bytes()
					_, _ = a.env.Stdout.Write(b)
				}
				if quiet != nil {
					quiet = time.After(300 * time.Millisecond)
				}
			case abi.EventClose:
				var p abi.ClosePayload
				_ = json.Unmarshal(e.Payload, &p)
				fmt.Fprintf(a.env.Stderr, "\r\n[session %s closed: %s]\r\n", id, p.Reason)
				return nil
			}
		case <-detached:
			detached = nil
			if interactive {
				fmt.Fprintf(a.env.Stderr, "\r\n[detached from %s]\r\n", id)
				return nil
			}
			// Piped input: show what it produced, then detach once output goes quiet.
			quiet = time.After(300 * time.Millisecond)
			deadline = time.After(10 * time.Second)
		case <-quiet:
			return nil
		case <-deadline:
			return nil
		case err := <-readErr:
			if err == nil || errors.Is(err, client.ErrStreamEnded) || ctx.Err() != nil {
				return nil
			}
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

func (a *app) terminalRunCmd() *cobra.Command {
	var (
		id, command, grep, keep string
		format                  string
		o                       openOptions
		timeout                 time.Duration
		lines, grepContext      int
		maxChars                int
	)
	cmd := &cobra.Command{
		Use:   "run --command CMD",
		Short: "Run a command in a terminal session's agent shell and print its structured result (stdout, stderr, exit_code, cwd)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if command == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "run needs --command")
			}
			if timeout < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--timeout must not be negative")
			}
			req := abi.RunRequest{Command: command, TimeoutSecs: int(math.Ceil(timeout.Seconds()))}
			if grep != "" || keep != "" || lines != 0 || maxChars != 0 {
				b := map[string]any{}
				if grep != "" {
					b["grep"] = map[string]any{"pattern": grep, "context": grepContext}
				}
				if keep != "" {
					b["keep"] = keep
				}
				if lines != 0 {
					b["lines"] = lines
				}
				if maxChars != 0 {
					b["max_chars"] = maxChars
				}
				raw, err := json.Marshal(b)
				if err != nil {
					return fmt.Errorf("encode budget: %w", err)
				}
				req.Budget = raw
			}
			run := func(sid string) error {
				res, err := a.client().Run(ctx, sid, req)
				if err != nil {
					return err
				}
				if format == formatTable {
					return runTable(a.env.Stdout, res)
				}
				var pretty bytes.Buffer
				if json.Indent(&pretty, res, "", "  ") == nil {
					res = pretty.Bytes()
				}
				_, err = a.env.Stdout.Write(append(res, '\n'))
				return err
			}
			act, err := a.activeID(abi.TypeTerminal)
			if err != nil {
				return err
			}
			if id != "" || act.SessionID != "" {
				return a.withTerminal(ctx, id, o, run)
			}
			// No session given and none active: a throwaway session that lives as long as this run.
			if o.project == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "no active terminal session: pass --session-id, or --project to run in a throwaway session")
			}
			o.ephemeral = true
			s, err := a.openTerminal(ctx, o)
			if err != nil {
				return err
			}
			conn, err := a.client().Dial(ctx, s.SessionID, client.DialOptions{Hold: true})
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			return run(s.SessionID)
		},
	}
	a.idFlags(cmd, &id, nil, abi.TypeTerminal)
	a.openFlags(cmd, &o, false)
	formatFlag(cmd, &format, formatJSON, formatTable)
	f := cmd.Flags()
	f.StringVar(&command, "command", "", "the command to run")
	f.DurationVar(&timeout, "timeout", 0, "stop the command after this long, a Go duration such as 10m (default 2m, at most 1h); it then exits 124")
	f.StringVar(&grep, "grep", "", "budget: keep only lines matching this regular expression")
	f.IntVar(&grepContext, "grep-context", 0, "budget: lines of context around each --grep match")
	enumFlag(cmd, &keep, "keep", "", "budget: all, head, tail or head_tail", "all", "head", "tail", "head_tail")
	f.IntVar(&lines, "lines", 0, "budget: lines kept by --keep head, tail or head_tail")
	f.IntVar(&maxChars, "max-chars", 0, "budget: characters kept per stream (default 100000)")
	return cmd
}

// runTable prints an ExecResult for a person: its facts as rows, then each non-empty stream
// under a rule of its own.
func runTable(w io.Writer, res []byte) error {
	var r shell.ExecResult
	if err := json.Unmarshal(res, &r); err != nil {
		return fmt.Errorf("decode result: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("Command", cellText(r.Command))
	row("Exit code", r.ExitCode)
	row("Duration", fmt.Sprintf("%d ms", r.DurationMS))
	row("Cwd", r.Cwd)
	if r.TimedOut {
		row("Timed out", true)
	}
	if r.ShellExited {
		row("Shell exited", true)
	}
	if b := r.Budget; b != nil {
		for _, s := range []struct {
			name string
			r    shell.StreamReport
		}{{"stdout", b.Stdout}, {"stderr", b.Stderr}} {
			if s.r.LinesTotal > 0 {
				row("Budget "+s.name, fmt.Sprintf("%s: %d of %d lines kept", s.r.Mode, s.r.LinesKept, s.r.LinesTotal))
			}
		}
	}
	if r.Truncated {
		row("Truncated", true)
	}
	if err := flushTable(tw); err != nil {
		return err
	}
	for _, s := range []struct{ name, text string }{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		if s.text == "" {
			continue
		}
		if !strings.HasSuffix(s.text, "\n") {
			s.text += "\n"
		}
		if _, err := fmt.Fprintf(w, "--- %s\n%s", s.name, s.text); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
	}
	return nil
}
