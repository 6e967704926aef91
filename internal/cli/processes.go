package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/project"
)

func (a *app) processCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "process",
		Short: "Managed processes: run under the gateway, output kept in rotated files, followed by debug-stream sessions",
	}
	cmd.AddCommand(a.processStartCmd(), a.processListCmd(), a.processGetCmd(),
		a.processControlCmd("stop", "Stop a process (SIGTERM to its group, SIGKILL after 5 s); it is not restarted"),
		a.processControlCmd("restart", "Stop a process if it runs and start it again under the same id"),
		a.processLogsCmd())
	return cmd
}

func (a *app) processStartCmd() *cobra.Command {
	var spec process.Spec
	var format string
	cmd := &cobra.Command{
		Use:   "start [--name N] [--project P] [--restart no|on-failure] -- CMD ARGS...",
		Short: "Run a managed process under the gateway",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Command = args
			if spec.Dir == "" && spec.Project != "" {
				p, err := project.NewStore(a.projectsPath(), a.env.Now).Get(spec.Project)
				if err != nil {
					return err
				}
				spec.Dir = p.Path
			}
			if spec.Dir == "" {
				wd, err := os.Getwd()
				if err != nil {
					return fmt.Errorf("working directory: %w", err)
				}
				spec.Dir = wd
			}
			in, err := a.client().ProcessStart(cmd.Context(), spec)
			if err != nil {
				return err
			}
			return a.print(format, in, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.Name, "name", "", "a name to refer to it by")
	f.StringVar(&spec.Project, "project", "", "run it in this project's directory")
	f.StringVar(&spec.Dir, "dir", "", "working directory (absolute; default this command's)")
	f.StringArrayVar(&spec.Env, "env", nil, "NAME=VALUE over the gateway's environment (repeatable)")
	enumFlag(cmd, &spec.Restart, "restart", process.RestartNo, "no, or on-failure (restarted with a backoff when it exits with a status other than 0)", process.RestartNo, process.RestartOnFailure)
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

func (a *app) processListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the managed processes, the newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps, err := a.client().Processes(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"processes": ps}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tPID\tEXIT\tRESTARTS\tSTARTED\tCOMMAND")
				for _, p := range ps {
					exit := "-"
					if p.ExitCode != nil {
						exit = fmt.Sprint(*p.ExitCode)
					}
					pid := "-"
					if p.PID > 0 {
						pid = fmt.Sprint(p.PID)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.ID, dash(p.Name), p.Status, pid, exit, p.Restarts,
						abi.FormatTime(time.UnixMilli(p.StartedAt)), cellText(strings.Join(p.Command, " ")))
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) processGetCmd() *cobra.Command {
	return a.printing(&cobra.Command{Use: "get ID|NAME", Short: "Show a process", Args: cobra.ExactArgs(1)},
		func(cmd *cobra.Command, args []string) (any, error) {
			return a.client().Process(cmd.Context(), args[0])
		})
}

func (a *app) processControlCmd(what, short string) *cobra.Command {
	return a.printing(&cobra.Command{Use: what + " ID|NAME", Short: short, Args: cobra.ExactArgs(1)},
		func(cmd *cobra.Command, args []string) (any, error) {
			return a.client().ProcessControl(cmd.Context(), args[0], what)
		})
}

func (a *app) processLogsCmd() *cobra.Command {
	var lines int
	var format string
	cmd := &cobra.Command{
		Use:   "logs ID|NAME [--lines N]",
		Short: "Print a process's newest lines (follow them with nexus debug log tail --process ID --follow)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ls, err := a.client().ProcessLogs(cmd.Context(), args[0], lines)
			if err != nil {
				return err
			}
			if format == formatJSON {
				a.printJSON(map[string]any{"lines": ls})
				return nil
			}
			for _, l := range ls {
				fmt.Fprintln(a.env.Stdout, logText(l.Stream, l.Level, l.Text))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&lines, "lines", 100, "how many of the newest lines")
	enumFlag(cmd, &format, "format", "text", "text, or json", "text", formatJSON)
	return cmd
}

// logText is a line as printed: stderr and status lines marked, gateway lines with their level.
func logText(stream, level, text string) string {
	switch stream {
	case process.StreamStderr:
		return "[stderr] " + text
	case process.StreamStatus:
		return "[status] " + text
	case process.StreamGateway:
		return level + " " + text
	}
	return text
}

func (a *app) serverCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Servers: listening addresses to watch (a managed process's, one nexus does not manage, or the gateway)",
	}
	cmd.AddCommand(a.serverAddCmd(), a.serverListCmd(), a.serverRemoveCmd())
	return cmd
}

func (a *app) serverAddCmd() *cobra.Command {
	var s process.Server
	cmd := &cobra.Command{
		Use:   "add NAME (--process ID | --addr HOST:PORT)",
		Short: "Record a server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s.Name = args[0]
			out, err := a.client().ServerAdd(cmd.Context(), s)
			if err != nil {
				return err
			}
			a.printJSON(out)
			return nil
		},
	}
	cmd.Flags().StringVar(&s.ProcessID, "process", "", "the managed process that serves it")
	cmd.Flags().StringVar(&s.Addr, "addr", "", "its listening address, HOST:PORT")
	return cmd
}

func (a *app) serverListCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the servers (the gateway first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := a.client().Servers(cmd.Context())
			if err != nil {
				return err
			}
			return a.print(format, map[string]any{"servers": all}, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tPROCESS\tADDR")
				for _, s := range all {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, dash(s.ProcessID), dash(s.Addr))
				}
				return tw.Flush()
			})
		},
	}
	formatFlag(cmd, &format, formatTable, formatJSON)
	return cmd
}

func (a *app) serverRemoveCmd() *cobra.Command {
	return a.removeCmd("remove NAME", "Forget a server (its process runs on)", func(c *client.Client) func(context.Context, string) error { return c.ServerRemove })
}

func (a *app) debugCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "debug", Short: "Debug streams: follow the logs of processes, servers, the gateway and files"}
	logCmd := &cobra.Command{Use: "log", Short: "Log lines"}
	logCmd.AddCommand(a.debugLogTailCmd())
	cmd.AddCommand(logCmd)
	return cmd
}

func (a *app) debugLogTailCmd() *cobra.Command {
	var (
		proc, srv, file, sid, grep, format string
		follow                             bool
		limit                              int
	)
	cmd := &cobra.Command{
		Use:   "tail [--process ID | --server ID | --file PATH | --session-id ID] [--follow] [--limit N] [--grep RE]",
		Short: "Print the newest lines of a process, a server (gateway: the gateway's own log) or a log file; --follow goes on live",
		Long: "Opens a debug-stream session for this command (it closes when the command ends), or reads --session-id's.\n" +
			"A file is followed by name through rename and copy-truncate rotations.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var req *abi.CreateRequest
			if sid == "" {
				if file != "" && !strings.HasPrefix(file, "/") {
					wd, err := os.Getwd()
					if err != nil {
						return fmt.Errorf("working directory: %w", err)
					}
					file = wd + "/" + file
				}
				// Batched: a flood costs a frame per batch, not per line (docs/observers.md).
				opts, err := json.Marshal(abi.DebugStreamOptions{File: file, Lines: limit, Grep: grep, Batch: true})
				if err != nil {
					return fmt.Errorf("encode options: %w", err)
				}
				req = &abi.CreateRequest{Type: abi.TypeDebugStream, Context: abi.Context{ProcessID: proc, ServerID: srv}, Options: opts}
			}
			return a.observe(cmd.Context(), sid, req, follow, func(e abi.Event) {
				switch e.Event {
				case abi.EventData:
					// One line (log-line), or a batch of them (log-lines): a session opened
					// elsewhere (--session-id) may be either.
					var v struct {
						abi.LogLine
						Lines []abi.LogLine `json:"lines"`
					}
					if json.Unmarshal(e.Payload, &v) != nil {
						return
					}
					switch v.Type {
					case abi.PayloadLogLine:
						v.Lines = []abi.LogLine{v.LogLine}
					case abi.PayloadLogLines:
					default:
						return
					}
					w := bufio.NewWriter(a.env.Stdout)
					for _, l := range v.Lines {
						if format == formatJSON {
							b, _ := marshalLine(l)
							_, _ = w.Write(append(b, '\n'))
						} else {
							_, _ = fmt.Fprintln(w, logText(l.Stream, l.Level, l.Line))
						}
					}
					_ = w.Flush()
				case abi.EventStatus:
					var st abi.StatusPayload
					if json.Unmarshal(e.Payload, &st) == nil && strings.HasPrefix(st.Message, "process ") {
						fmt.Fprintln(a.env.Stderr, "nexus: "+st.Message)
					}
				}
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&proc, "process", "", "a managed process (id or name)")
	f.StringVar(&srv, "server", "", "a server (gateway: the gateway's own log)")
	f.StringVar(&file, "file", "", "a log file")
	f.StringVar(&sid, "session-id", "", "an open debug-stream session to read")
	f.BoolVarP(&follow, "follow", "f", false, "go on with the lines as they come, until interrupted")
	f.IntVar(&limit, "limit", 0, "how many of the newest lines first (default 100)")
	f.StringVar(&grep, "grep", "", "only the lines matching this regular expression")
	enumFlag(cmd, &format, "format", "text", "text, or json (one log-line payload per line)", "text", formatJSON)
	return cmd
}

func (a *app) networkCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "network", Short: "Network streams: a server's sockets and connections, from the kernel's socket diagnostics"}
	conn := &cobra.Command{Use: "connection", Short: "Connections"}
	conn.AddCommand(a.networkMonitorCmd())
	cmd.AddCommand(conn)
	return cmd
}

func (a *app) networkMonitorCmd() *cobra.Command {
	var (
		srv, sid, format string
		follow           bool
		interval         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "monitor --server ID [--session-id ID] [--follow] [--interval D]",
		Short: "Print a server's listening sockets and connections (--follow: then each open, update and close, until interrupted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var req *abi.CreateRequest
			if sid == "" {
				if srv == "" {
					return abi.Errorf(abi.CodeInvalidArgument, "", "name the server: --server ID (nexus server list; gateway is the gateway)")
				}
				opts, err := json.Marshal(abi.NetworkStreamOptions{IntervalMs: int(interval.Milliseconds())})
				if err != nil {
					return fmt.Errorf("encode options: %w", err)
				}
				req = &abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: srv}, Options: opts}
			}
			if format != formatJSON {
				fmt.Fprintf(a.env.Stdout, "%-7s %-12s %-22s %-22s %10s %10s %8s\n", "ACTION", "STATE", "LOCAL", "REMOTE", "SENT", "RECEIVED", "RTT(ms)")
			}
			return a.observe(cmd.Context(), sid, req, follow, func(e abi.Event) {
				var cn abi.Connection
				if e.Event != abi.EventData || json.Unmarshal(e.Payload, &cn) != nil || cn.Type != abi.PayloadConnection {
					return
				}
				if format == formatJSON {
					b, _ := marshalLine(cn)
					fmt.Fprintf(a.env.Stdout, "%s\n", b)
				} else {
					fmt.Fprintf(a.env.Stdout, "%-7s %-12s %-22s %-22s %10d %10d %8.3f\n", cn.Action, cn.State, cn.Local, cn.Remote, cn.BytesSent, cn.BytesReceived, cn.RTTMs)
				}
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&srv, "server", "", "the server (gateway: the gateway itself)")
	f.StringVar(&sid, "session-id", "", "an open network-stream session to read")
	f.BoolVarP(&follow, "follow", "f", false, "go on with the changes, until interrupted")
	f.DurationVar(&interval, "interval", 0, "how often the sockets are listed (default 1s)")
	enumFlag(cmd, &format, "format", "text", "text, or json (one connection payload per line)", "text", formatJSON)
	return cmd
}

// observe streams an observer session to show: session sid, or a session created from req for
// this command (ephemeral: it closes when the command ends). Without follow it stops once the
// session says it has caught up (metadata caughtUp). Error events go to stderr.
func (a *app) observe(ctx context.Context, sid string, req *abi.CreateRequest, follow bool, show func(abi.Event)) error {
	c := a.client()
	id, hold := sid, false
	if id == "" {
		req.Ephemeral = true
		s, err := c.Create(ctx, *req)
		if err != nil {
			return err
		}
		id, hold = s.SessionID, true
		if !follow {
			defer func() {
				_, _ = c.Control(context.WithoutCancel(ctx), id, abi.ControlRequest{Command: abi.CommandClose})
			}()
		}
	}
	errDone := errors.New("caught up")
	err := c.Stream(ctx, id, client.StreamOptions{Follow: true, Hold: hold}, func(e abi.Event) error {
		switch e.Event {
		case abi.EventMetadata:
			var md abi.MetadataPayload
			if !follow && json.Unmarshal(e.Payload, &md) == nil && md.Metadata["caughtUp"] == true {
				return errDone
			}
		case abi.EventError:
			var ep abi.ErrorPayload
			if json.Unmarshal(e.Payload, &ep) == nil {
				fmt.Fprintln(a.env.Stderr, "nexus: "+ep.Error.Message)
			}
		default:
			show(e)
		}
		return nil
	})
	if errors.Is(err, errDone) || (err != nil && errors.Is(err, ctx.Err())) {
		return nil
	}
	return err
}
