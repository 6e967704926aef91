package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
)

func (a *app) sessionCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "session", Short: "List, inspect, control and watch live sessions"}
	cmd.AddCommand(a.sessionListCmd(), a.sessionGetCmd(), a.sessionUseCmd(), a.sessionEventsCmd())
	for _, c := range []abi.Command{abi.CommandClose, abi.CommandInterrupt, abi.CommandResize, abi.CommandRestart, abi.CommandPause, abi.CommandResume} {
		cmd.AddCommand(a.controlCmd(c))
	}
	return cmd
}

// idFlags binds --id and its alias --session-id to one variable, plus --type to pick the active
// session of a type.
func idFlags(cmd *cobra.Command, id *string, typ *string) {
	cmd.Flags().StringVar(id, "id", "", "session id (default: the active session of the CLI context)")
	cmd.Flags().StringVar(id, "session-id", "", "alias of --id")
	if typ != nil {
		cmd.Flags().StringVar(typ, "type", "", "use the active session of this type")
	}
}

func (a *app) sessionListCmd() *cobra.Command {
	var all bool
	var typ, format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List active and paused sessions (--all adds recently closed ones)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			ss, err := a.client().List(cmd.Context(), all, abi.SessionType(typ))
			if err != nil {
				return err
			}
			if format == formatTable {
				sessionTable(a.env.Stdout, ss)
				return nil
			}
			a.printJSON(abi.ListResponse{Sessions: ss})
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include closed sessions still retained")
	cmd.Flags().StringVar(&typ, "type", "", "only sessions of this type")
	cmd.Flags().StringVar(&format, "format", formatJSON, "output format: json or table")
	return cmd
}

func (a *app) sessionGetCmd() *cobra.Command {
	var id, typ, format string
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Print a session object",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			sid, err := a.resolveAny(id, abi.SessionType(typ))
			if err != nil {
				return err
			}
			s, err := a.client().Get(cmd.Context(), sid)
			if err != nil {
				return err
			}
			if format == formatTable {
				sessionDetail(a.env.Stdout, s)
				return nil
			}
			a.printJSON(s)
			return nil
		},
	}
	idFlags(cmd, &id, &typ)
	cmd.Flags().StringVar(&format, "format", formatJSON, "output format: json or table")
	return cmd
}

func (a *app) sessionUseCmd() *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   "use",
		Short: "Make a session the active one of its type in the CLI context",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				return abi.Errorf(abi.CodeInvalidArgument, "", "session use needs --id")
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
			a.printJSON(s)
			return nil
		},
	}
	idFlags(cmd, &id, nil)
	return cmd
}

func (a *app) controlCmd(c abi.Command) *cobra.Command {
	var id, typ string
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
			a.printJSON(resp)
			return nil
		},
	}
	idFlags(cmd, &id, &typ)
	if c == abi.CommandResize {
		cmd.Flags().IntVar(&width, "width", 0, "columns")
		cmd.Flags().IntVar(&height, "height", 0, "rows")
		_ = cmd.MarkFlagRequired("width")
		_ = cmd.MarkFlagRequired("height")
	}
	return cmd
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
		Short: "Print a session's events as JSON lines (--follow streams until the session closes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != eventsRaw && format != eventsCompact {
				return abi.Errorf(abi.CodeInvalidArgument, "", "unknown --format %q (want json-raw or json-compact)", format)
			}
			tr := abi.Transport(transport)
			if tr != abi.TransportWebSocket && tr != abi.TransportPolling && tr != abi.TransportHybrid {
				return abi.Errorf(abi.CodeInvalidArgument, "", "unknown --transport %q (want websocket, polling or hybrid)", transport)
			}
			ct := abi.ContentType(contentType)
			if !ct.Valid() {
				return abi.Errorf(abi.CodeInvalidArgument, "", "unknown --content-type %q (want ansi, text or raw)", contentType)
			}
			if limit < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--limit must not be negative")
			}
			sid, err := a.resolveAny(id, abi.SessionType(typ))
			if err != nil {
				return err
			}
			var buf bytes.Buffer
			err = a.client().Stream(cmd.Context(), sid, client.StreamOptions{
				After: after, Limit: limit, Follow: follow, Transport: tr, ContentType: ct,
				OnReconnect: func(attempt int, delay time.Duration, err error) {
					a.warnf("stream dropped (%v); reconnecting in %s (attempt %d)", err, delay, attempt)
				},
			}, func(e abi.Event) error {
				buf.Reset()
				var line []byte
				var err error
				if format == eventsCompact {
					line, err = compactEvent(e)
				} else {
					line, err = json.Marshal(e)
				}
				if err != nil {
					return err
				}
				buf.Write(line)
				buf.WriteByte('\n')
				_, err = a.env.Stdout.Write(buf.Bytes())
				return err
			})
			if err != nil && errors.Is(err, cmd.Context().Err()) {
				return nil // interrupted by the user: a normal end of --follow
			}
			return err
		},
	}
	idFlags(cmd, &id, &typ)
	f := cmd.Flags()
	f.BoolVar(&follow, "follow", false, "keep streaming until the session closes or you stop it")
	f.IntVar(&limit, "limit", 0, "stop after this many events (0: no limit)")
	f.Uint64Var(&after, "after", 0, "start after this sequence number")
	f.StringVar(&format, "format", eventsRaw, "json-raw (the ABI envelope) or json-compact (one flat line per event)")
	f.StringVar(&transport, "transport", string(abi.TransportWebSocket), "websocket, polling or hybrid")
	f.StringVar(&contentType, "content-type", string(abi.ContentANSI), "terminal output as ansi, text (escapes stripped) or raw (base64 bytes)")
	return cmd
}
