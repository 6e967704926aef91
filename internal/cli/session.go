package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
)

func (a *app) sessionCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "session", Short: "List, inspect, control and watch live sessions"})
	cmd.AddCommand(a.sessionListCmd(), a.sessionGetCmd(), a.sessionUseCmd(), a.sessionEventsCmd())
	for _, c := range []abi.Command{abi.CommandClose, abi.CommandInterrupt, abi.CommandResize, abi.CommandRestart, abi.CommandPause, abi.CommandResume} {
		cmd.AddCommand(a.controlCmd(c))
	}
	return cmd
}

// idFlags defines --session-id (also spelled --id, the ABI's original flag), completed with the
// gateway's live sessions (of type only, when given), plus --type to pick the active session of
// a type when typ is not nil.
func (a *app) idFlags(cmd *cobra.Command, id *string, typ *string, only abi.SessionType) {
	cmd.Flags().StringVar(id, "session-id", "", "session id, also --id (default: the active session of the CLI context)")
	flagAliases(cmd, map[string]string{"id": "session-id"})
	_ = cmd.RegisterFlagCompletionFunc("session-id", a.completeSessions(only))
	if typ != nil {
		a.typeFlag(cmd, typ, "use the active session of this type")
	}
}

// typeFlag defines --type, a session type (empty: any).
func (a *app) typeFlag(cmd *cobra.Command, typ *string, usage string) {
	cmd.Flags().StringVar(typ, "type", "", usage)
	_ = cmd.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(sessionTypes(), cobra.ShellCompDirectiveNoFileComp))
}

func sessionTypes() []string {
	return []string{string(abi.TypeTerminal), string(abi.TypeAIChat), string(abi.TypeMetaChat), string(abi.TypeDebugStream), string(abi.TypeNetworkStream)}
}

func (a *app) sessionListCmd() *cobra.Command {
	var all bool
	var typ, format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List active and paused sessions (--all adds recently closed ones)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ss, err := a.client().List(cmd.Context(), all, abi.SessionType(typ))
			if err != nil {
				return err
			}
			return a.print(format, abi.ListResponse{Sessions: ss}, func(w io.Writer) error { return sessionTable(w, ss) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include closed sessions still retained")
	a.typeFlag(cmd, &typ, "only sessions of this type")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) sessionGetCmd() *cobra.Command {
	var id, typ, format string
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Print a session object",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sid, err := a.resolveAny(id, abi.SessionType(typ))
			if err != nil {
				return err
			}
			s, err := a.client().Get(cmd.Context(), sid)
			if err != nil {
				return err
			}
			return a.printSession(format, s)
		},
	}
	a.idFlags(cmd, &id, &typ, "")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) sessionUseCmd() *cobra.Command {
	var id, format string
	cmd := &cobra.Command{
		Use:   "use",
		Short: "Make a session the active one of its type in the CLI context",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "session use needs --session-id (see nexus session list)")
			}
			s, err := a.client().Get(cmd.Context(), id)
			if err != nil {
				return err
			}
			if s.Status.Final() {
				code := abi.CodeSessionClosed
				if s.Metadata["closeReason"] == abi.CloseTimeout || s.Metadata["closeReason"] == abi.CloseIdle {
					code = abi.CodeSessionExpired
				}
				return abi.Errorf(code, id, "session %s is %s and cannot become active", id, s.Status)
			}
			if err := a.setActive(cmd.Context(), s); err != nil {
				return err
			}
			return a.printSession(format, s)
		},
	}
	a.idFlags(cmd, &id, nil, "")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) controlCmd(c abi.Command) *cobra.Command {
	var id, typ, format string
	var width, height int
	short := map[abi.Command]string{
		abi.CommandClose:     "Close a session; prints the control response with the final session object",
		abi.CommandInterrupt: "Interrupt a session (terminal: Ctrl-C to the foreground process group)",
		abi.CommandResize:    "Resize a terminal session's window",
		abi.CommandRestart:   "Restart a session's backend under the same id (terminal: a fresh shell)",
		abi.CommandPause:     "Pause a session's output (it becomes paused)",
		abi.CommandResume:    "Resume a paused session",
	}[c]
	cmd := &cobra.Command{
		Use:   string(c),
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sid, err := a.resolveAny(id, abi.SessionType(typ))
			if err != nil {
				return err
			}
			resp, err := a.client().Control(cmd.Context(), sid, abi.ControlRequest{Command: c, Width: width, Height: height})
			if err != nil {
				return err
			}
			return a.print(format, resp, nil)
		},
	}
	a.idFlags(cmd, &id, &typ, "")
	formatFlag(cmd, &format, formatJSON, formatTable)
	if c == abi.CommandResize {
		sizeFlags(cmd, &width, &height, "width", "height", "")
		_ = cmd.MarkFlagRequired("width")
		_ = cmd.MarkFlagRequired("height")
	}
	return cmd
}

// sizeFlags defines a terminal size as two int flags named wName and hName, the other spelling
// (--cols/--rows or --width/--height) being an alias: open and resize accept both.
func sizeFlags(cmd *cobra.Command, w, h *int, wName, hName, note string) {
	other := map[string]string{"cols": "width", "rows": "height", "width": "cols", "height": "rows"}
	cmd.Flags().IntVar(w, wName, 0, fmt.Sprintf("columns, also --%s%s", other[wName], note))
	cmd.Flags().IntVar(h, hName, 0, fmt.Sprintf("rows, also --%s%s", other[hName], note))
	flagAliases(cmd, map[string]string{other[wName]: wName, other[hName]: hName})
}

// Event stream formats besides json (which is json-raw).
const (
	eventsRaw     = "json-raw"
	eventsCompact = "json-compact"
	eventsText    = "text"
)

// eventWriter prints events in one of the event formats, one event per line (text: the terminal
// output itself). Data events that carry no content (output that was only escape sequences,
// read as text) print nothing: they say nothing to a reader of the stream.
type eventWriter struct {
	out    io.Writer
	format string
	ct     abi.ContentType
	buf    bytes.Buffer
	// cr: the text so far ended in a \r held back, in case the next chunk starts with \n.
	cr bool
}

func (w *eventWriter) write(e abi.Event) error {
	if e.Event == abi.EventData {
		var p abi.TerminalOutput
		if json.Unmarshal(e.Payload, &p) == nil && p.Type == abi.PayloadTerminalOutput {
			if p.Content == "" {
				return nil
			}
			if w.format == eventsText {
				b, err := p.Bytes()
				if err != nil {
					return fmt.Errorf("decode event %d: %w", e.Seq, err)
				}
				if w.ct == abi.ContentText {
					b = w.lines(b)
				}
				_, err = w.out.Write(b)
				return err
			}
		}
	}
	if w.format == eventsText {
		return nil
	}
	w.buf.Reset()
	var line []byte
	var err error
	if w.format == eventsCompact {
		line, err = compactEvent(e)
	} else {
		line, err = marshalLine(e)
	}
	if err != nil {
		return fmt.Errorf("encode event %d: %w", e.Seq, err)
	}
	w.buf.Write(line)
	w.buf.WriteByte('\n')
	_, err = w.out.Write(w.buf.Bytes())
	return err
}

// lines turns the terminal's line ends into \n: \r\n (also when a chunk ends between the two)
// and a lone \r, which a terminal uses to rewrite its line (progress bars, readline) and which
// a reader of text wants as a line of its own.
func (w *eventWriter) lines(b []byte) []byte {
	if w.cr {
		w.cr = false
		if len(b) == 0 || b[0] != '\n' {
			b = append([]byte{'\n'}, b...)
		}
	}
	if bytes.HasSuffix(b, []byte("\r")) {
		w.cr = true
		b = b[:len(b)-1]
	}
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	return bytes.ReplaceAll(b, []byte("\r"), []byte("\n"))
}

// flush writes what lines held back.
func (w *eventWriter) flush() error {
	if w.cr {
		w.cr = false
		_, err := w.out.Write([]byte{'\n'})
		return err
	}
	return nil
}

// contentTypeFlag defines --content-type.
func contentTypeFlag(cmd *cobra.Command, p *string, usage string) {
	enumFlag(cmd, p, "content-type", string(abi.ContentANSI), usage, string(abi.ContentANSI), string(abi.ContentText), string(abi.ContentRaw))
}

func (a *app) sessionEventsCmd() *cobra.Command {
	var (
		id, typ, format, transport, contentType string
		follow                                  bool
		limit                                   int
		after                                   uint64
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print a session's events as JSON lines, or its terminal output as text (--follow streams until the session closes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			ct := abi.ContentType(contentType)
			if format == eventsText && !cmd.Flags().Changed("content-type") {
				ct = abi.ContentText
			}
			sid, err := a.resolveAny(id, abi.SessionType(typ))
			if err != nil {
				return err
			}
			w := &eventWriter{out: a.env.Stdout, format: format, ct: ct}
			err = a.client().Stream(cmd.Context(), sid, client.StreamOptions{
				After: after, Limit: limit, Follow: follow, Transport: abi.Transport(transport), ContentType: ct,
				OnReconnect: func(attempt int, delay time.Duration, err error) {
					a.warnf("stream dropped (%v); reconnecting in %s (attempt %d)", err, delay, attempt)
				},
			}, w.write)
			if ferr := w.flush(); err == nil {
				err = ferr
			}
			if err != nil && errors.Is(err, cmd.Context().Err()) {
				return nil // interrupted by the user: a normal end of --follow
			}
			return err
		},
	}
	a.idFlags(cmd, &id, &typ, "")
	f := cmd.Flags()
	f.BoolVar(&follow, "follow", false, "keep streaming until the session closes or you stop it")
	f.IntVar(&limit, "limit", 0, "stop after this many events (0: no limit)")
	f.Uint64Var(&after, "after", 0, "start after this sequence number")
	enumFlag(cmd, &format, "format", eventsRaw, "json-raw or json (the ABI envelope), json-compact (one flat line per event) or text (the terminal output only, as text unless --content-type says otherwise)",
		eventsRaw, formatJSON, eventsCompact, eventsText)
	enumFlag(cmd, &transport, "transport", string(abi.TransportWebSocket), "websocket, polling or hybrid",
		string(abi.TransportWebSocket), string(abi.TransportPolling), string(abi.TransportHybrid))
	contentTypeFlag(cmd, &contentType, "terminal output as ansi, text (escapes stripped) or raw (base64 bytes)")
	return cmd
}
