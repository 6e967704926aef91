package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatclient"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/provider"
)

// providerConfig loads $NEXUS_HOME/config.toml's backends.
func (a *app) providerConfig() (*provider.Config, error) {
	path, err := provider.ConfigPath(a.env.Getenv)
	if err != nil {
		return nil, err
	}
	return provider.LoadConfig(path)
}

func (a *app) aiCmd() *cobra.Command {
	cmd := group(&cobra.Command{Use: "ai", Short: "AI chats: talk to a model that uses tools, through the gateway"})
	msg := group(&cobra.Command{Use: "message", Short: "Send to, watch and interrupt the active ai-chat session"})
	msg.AddCommand(a.aiSendCmd(), a.aiStreamCmd(), a.aiInterruptCmd())
	cmd.AddCommand(a.aiChatCmd(), msg, a.aiConfirmCmd(), a.aiCompactCmd(), a.aiQueueCmd(), a.aiSpawnCmd())
	return cmd
}

// aiOpen are the options of opening an ai-chat session.
type aiOpen struct {
	abi.AIChatOptions
	chat        string
	roadmap     string
	temperature float64
	resume      bool
}

func (a *app) aiOpenFlags(cmd *cobra.Command, o *aiOpen) {
	f := cmd.Flags()
	f.StringVar(&o.Backend, "backend", "", "backend of config.toml (claude, codex, gemini, qwen, or one you named; default: the agent's, else the first whose API key is set)")
	f.StringVar(&o.Model, "model", "", "model (default: the backend's)")
	f.StringVar(&o.chat, "chat", "", "the conversation's session key (default: a new agent:<agent>:ai:<id>); an existing key continues it")
	f.StringVar(&o.roadmap, "roadmap", "", "link the session to a roadmap (its meta-chat sessions see its turns and subagents)")
	f.StringVar(&o.Agent, "agent", "", "agent id (default main; see nexus agent list)")
	enumFlag(cmd, &o.Level, "level", "", "permission level: yolo, trusted or sandboxed (default: the agent's, else trusted)", "yolo", "trusted", "sandboxed")
	f.StringVar(&o.Workspace, "workspace", "", "directory the tools work in (default: the agent's, else this directory)")
	f.StringVar(&o.Thinking, "thinking", "", "thinking level: off, minimal, low, medium, high, xhigh")
	f.Float64Var(&o.temperature, "temperature", -1, "sampling temperature; -1 leaves it to the model")
	f.IntVar(&o.MaxToolIterations, "max-tool-iterations", 0, "model calls per message at most (default 10)")
	enumFlag(cmd, &o.QueueMode, "queue-mode", "", "the conversation's queue mode for messages sent while a turn runs (saved in sessions.json; default followup)",
		broker.Modes...)
}

func (a *app) openAIChat(ctx context.Context, o aiOpen) (abi.Session, error) {
	if o.Workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return abi.Session{}, fmt.Errorf("workspace: %w", err)
		}
		o.Workspace = wd
	}
	if o.temperature >= 0 {
		t := o.temperature
		o.Temperature = &t
	}
	if o.resume && o.chat == "" {
		key, err := a.lastAIChat(ctx, o.Agent)
		if err != nil {
			return abi.Session{}, err
		}
		o.chat = key
	}
	opts, err := json.Marshal(o.AIChatOptions)
	if err != nil {
		return abi.Session{}, fmt.Errorf("encode options: %w", err)
	}
	s, err := a.client().Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: o.chat, RoadmapID: o.roadmap}, Options: opts})
	if err != nil {
		return s, err
	}
	return s, a.setActive(ctx, s)
}

// lastAIChat is the most recently updated conversation of the agent.
func (a *app) lastAIChat(ctx context.Context, agentID string) (string, error) {
	// Through the gateway: it is the one that holds the conversations of ai-chat sessions.
	api := chatclient.New(a.client())
	if agentID == "" {
		agentID = "main"
	}
	items, err := api.List(ctx, conversation.ListOptions{Agent: agentID, Limit: 1})
	if err != nil {
		return "", err
	}
	if len(items) == 0 {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "agent %s has no conversation to resume", agentID)
	}
	return items[0].Key, nil
}

func (a *app) aiChatCmd() *cobra.Command {
	var o aiOpen
	var id string
	var keep bool
	cmd := textOutput(&cobra.Command{
		Use:   "chat",
		Short: "Talk with a model: a line REPL over an ai-chat session (Ctrl-C interrupts the reply, Ctrl-D leaves)",
		Long: `Talk with a model: a line REPL over an ai-chat session. Ctrl-C interrupts the reply being
written; Ctrl-D on an empty line, /exit, /quit or the end of the input leave, as do SIGINT at
the prompt and SIGTERM at any time.

The session the REPL opens closes when it leaves (the conversation stays: --resume or --chat
continue it in a new session); --keep leaves it open. A session given with --session-id was
opened by someone else and is never closed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Signals are the REPL's own (aiREPL): the command's context ends at the first
			// Ctrl-C, which must interrupt a reply, not end the conversation's client.
			// They are caught from before the session opens, so that none ends the
			// process between the opening and the REPL's close.
			ctx := context.WithoutCancel(cmd.Context())
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			if id != "" {
				return a.aiREPL(ctx, sigs, id)
			}
			s, err := a.openAIChat(ctx, o)
			if err != nil {
				return err
			}
			leave := "closes it"
			if keep {
				leave = "leaves it open"
			}
			fmt.Fprintf(a.env.Stderr, "nexus: ai-chat %s on %v (%v), chat %v; Ctrl-C interrupts a reply, Ctrl-D leaves and %s\n",
				s.SessionID, s.Metadata["backend"], s.Metadata["model"], s.Metadata["chatKey"], leave)
			err = a.aiREPL(ctx, sigs, s.SessionID)
			if keep {
				return err
			}
			if _, cerr := a.client().Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandClose}); cerr != nil && !gone(cerr) {
				return errors.Join(err, fmt.Errorf("close ai-chat %s: %w", s.SessionID, cerr))
			}
			return err
		},
	})
	a.aiOpenFlags(cmd, &o)
	cmd.Flags().BoolVar(&o.resume, "resume", false, "continue the agent's most recent conversation (in a new session)")
	cmd.Flags().StringVar(&id, "session-id", "", "talk in this ai-chat session instead of opening one (it is left open)")
	cmd.Flags().BoolVar(&keep, "keep", false, "leave the session this command opens open when it exits")
	cmd.MarkFlagsMutuallyExclusive("keep", "session-id")
	cmd.AddCommand(a.aiChatOpenCmd())
	return cmd
}

func (a *app) aiChatOpenCmd() *cobra.Command {
	var o aiOpen
	var format string
	cmd := &cobra.Command{
		Use:   "open",
		Short: "Open an ai-chat session (it becomes the active one) and print it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := a.openAIChat(cmd.Context(), o)
			if err != nil {
				return err
			}
			return a.printSession(format, s)
		},
	}
	a.aiOpenFlags(cmd, &o)
	cmd.Flags().BoolVar(&o.resume, "resume", false, "continue the agent's most recent conversation")
	formatFlag(cmd, &format, formatJSON, formatTable)
	return cmd
}

// aiSession is the session a message command uses: --session-id, else the active ai-chat.
func (a *app) aiSession(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	act, err := a.activeID(abi.TypeAIChat)
	if err != nil {
		return "", err
	}
	if act.SessionID == "" {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "no active ai-chat session: pass --session-id, or open one with nexus ai chat open")
	}
	return act.SessionID, nil
}

func (a *app) aiSendCmd() *cobra.Command {
	var id, format, mode string
	var noWait bool
	cmd := textOutput(&cobra.Command{
		Use:   "send [--session-id ID] TEXT...",
		Short: "Send a message and print the reply as it streams (tool calls and confirmations on stderr)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sid, err := a.aiSession(id)
			if err != nil {
				return err
			}
			sid = a.followMoved(cmd.Context(), sid) // a restart moved it: the conversation goes on there
			if noWait {
				sent, err := a.client().SendMessage(cmd.Context(), sid, []byte(strings.Join(args, " ")), mode)
				if err != nil {
					return err
				}
				return a.print(formatJSON, map[string]any{"status": abi.ResponseOK, "sessionId": sid, "messageId": sent.MessageID, "afterSeq": sent.AfterSeq}, nil)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.aiTurn(ctx, cmd.Context(), sid, strings.Join(args, " "), mode, format, nil)
		},
	})
	a.idFlags(cmd, &id, nil, abi.TypeAIChat)
	formatFlag(cmd, &format, eventsText, eventsRaw, eventsCompact)
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the message is queued (stored durably), printing its id, instead of printing its turn")
	enumFlag(cmd, &mode, "mode", "", "queue mode while a turn runs: "+broker.ModeNames+" (default: the conversation's)",
		broker.Modes...)
	return cmd
}

// errTurnOver ends a turn's stream.
var errTurnOver = errors.New("turn over")

// aiTurn sends text and prints the turn's events until it ends. When sigCtx ends (Ctrl-C)
// the turn is interrupted and still printed to its end. ask, when set, answers confirmation
// requests inline.
func (a *app) aiTurn(sigCtx, ctx context.Context, sid, text, mode, format string, ask func(abi.AIConfirmation) (string, error)) error {
	c := a.client()
	sent, err := c.SendMessage(ctx, sid, []byte(text), mode)
	if err != nil {
		return err
	}
	after := sent.AfterSeq
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-finished:
			return
		case <-sigCtx.Done():
		}
		select {
		case <-finished: // the caller's stop, after the turn ended: not a Ctrl-C
		default:
			if ctx.Err() == nil {
				_, _ = c.Control(context.WithoutCancel(ctx), sid, abi.ControlRequest{Command: abi.CommandInterrupt})
			}
		}
	}()
	p := &aiPrinter{out: a.env.Stdout, errOut: a.env.Stderr, format: format, ask: ask, confirm: func(id, ans string) error {
		_, err := c.Control(ctx, sid, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: id, Answer: ans})
		return err
	}}
	started := false
	err = c.Stream(ctx, sid, client.StreamOptions{After: after, Follow: true}, func(e abi.Event) error {
		// Events before this turn's start belong to earlier ones (a queued message waits for
		// the turns before it): the turn that delivers this message is the one to print.
		if !started {
			if t, ok := turnEvent(e); ok && t.Phase == abi.PhaseStarted && (sent.MessageID == "" || contains(t.MessageIDs, sent.MessageID)) {
				started = true
			} else if q, ok := queueEvent(e); ok && q.Phase != abi.QueueQueued && contains(q.MessageIDs, sent.MessageID) {
				return abi.Errorf(abi.CodeInvalidArgument, sid, "message %s was %s and will not be delivered: %s", sent.MessageID, q.Phase, q.Reason)
			} else {
				return nil
			}
		}
		return p.print(e)
	})
	if errors.Is(err, errTurnOver) {
		return p.result()
	}
	if err != nil {
		return err
	}
	return abi.Errorf(abi.CodeSessionClosed, sid, "the session closed before the turn ended")
}

func queueEvent(e abi.Event) (abi.AIQueue, bool) {
	var q abi.AIQueue
	if e.Event != abi.EventData || json.Unmarshal(e.Payload, &q) != nil || q.Type != abi.PayloadAIQueue {
		return q, false
	}
	return q, true
}

func turnEvent(e abi.Event) (abi.AITurn, bool) {
	var t abi.AITurn
	if e.Event != abi.EventData || json.Unmarshal(e.Payload, &t) != nil || t.Type != abi.PayloadAITurn {
		return t, false
	}
	return t, true
}

// aiPrinter prints a turn's events: text (the reply on stdout, the rest on stderr) or events.
type aiPrinter struct {
	out, errOut io.Writer
	format      string
	ask         func(abi.AIConfirmation) (string, error)
	confirm     func(id, answer string) error
	end         abi.AITurn
	errs        []string
	midLine     bool
}

func (p *aiPrinter) print(e abi.Event) error {
	if p.format != eventsText {
		var line []byte
		var err error
		if p.format == eventsCompact {
			line, err = compactEvent(e)
		} else {
			line, err = marshalLine(e)
		}
		if err != nil {
			return fmt.Errorf("encode event %d: %w", e.Seq, err)
		}
		if _, err := p.out.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	switch e.Event {
	case abi.EventError:
		var ep abi.ErrorPayload
		if json.Unmarshal(e.Payload, &ep) == nil {
			p.errs = append(p.errs, string(ep.Error.Code)+": "+ep.Error.Message)
		}
		return nil
	case abi.EventData:
	default:
		return nil
	}
	var head struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(e.Payload, &head) != nil {
		return nil
	}
	text := p.format == eventsText
	switch head.Type {
	case abi.PayloadAIToken:
		var t abi.AIToken
		if json.Unmarshal(e.Payload, &t) == nil && text {
			_, _ = io.WriteString(p.out, t.Content)
			if t.Content != "" {
				p.midLine = !strings.HasSuffix(t.Content, "\n")
			}
			if t.IsFinal && p.midLine {
				_, _ = io.WriteString(p.out, "\n")
				p.midLine = false
			}
		}
	case abi.PayloadAITool:
		var t abi.AITool
		if json.Unmarshal(e.Payload, &t) == nil && text {
			switch t.Phase {
			case abi.PhaseStarted:
				fmt.Fprintf(p.errOut, "→ %s %s\n", t.Name, t.ToolCallID)
			case abi.PhaseDetected:
				fmt.Fprintf(p.errOut, "· %s %s\n", t.Name, clip(string(unescapeHTML(t.Arguments)), 200))
			case abi.PhaseCompleted:
				status := "ok"
				if t.IsError {
					status = "error"
				}
				fmt.Fprintf(p.errOut, "← %s %s: %s\n", t.Name, status, clip(t.Output, 400))
			}
		}
	case abi.PayloadAIConfirmation:
		var c abi.AIConfirmation
		if err := json.Unmarshal(e.Payload, &c); err != nil {
			return nil //nolint:nilerr // a payload this client cannot read is skipped
		}
		return p.confirmation(c)
	case abi.PayloadAITurn:
		var t abi.AITurn
		if json.Unmarshal(e.Payload, &t) == nil && t.Phase == abi.PhaseEnded {
			p.end = t
			return errTurnOver
		}
	}
	return nil
}

func (p *aiPrinter) confirmation(c abi.AIConfirmation) error {
	what := c.Command
	if what == "" {
		what = strings.Join(c.Paths, ", ")
	}
	fmt.Fprintf(p.errOut, "? %s wants to %s: %s", c.Tool, verbOf(c), what)
	if len(c.Programs) > 0 {
		fmt.Fprintf(p.errOut, " (runs %s in %s)", strings.Join(c.Programs, ", "), c.Cwd)
	}
	fmt.Fprintln(p.errOut)
	if p.ask == nil {
		fmt.Fprintf(p.errOut, "  answer with: nexus ai confirm %s %s\n", c.RequestID, strings.Join(c.Options, "|"))
		return nil
	}
	ans, err := p.ask(c)
	if err != nil {
		ans = string(abi.CommandConfirm) // never sent: deny below
	}
	if !contains(c.Options, ans) {
		ans = "deny"
	}
	if err := p.confirm(c.RequestID, ans); err != nil {
		fmt.Fprintf(p.errOut, "nexus: confirm: %v\n", err)
	}
	return nil
}

func verbOf(c abi.AIConfirmation) string {
	if c.Command != "" {
		return "run"
	}
	return "touch"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// result is the command's outcome: an error when the turn failed.
func (p *aiPrinter) result() error {
	if p.midLine && p.format == eventsText {
		_, _ = io.WriteString(p.out, "\n")
	}
	switch p.end.End {
	case abi.TurnCompleted:
		return nil
	case abi.TurnCancelled:
		fmt.Fprintln(p.errOut, "nexus: the reply was interrupted")
		return nil
	case abi.TurnError:
		msg := p.end.Reason
		if len(p.errs) > 0 {
			msg = strings.Join(p.errs, "; ")
		}
		return abi.Errorf(abi.CodeResourceUnavailable, "", "the turn failed: %s", msg)
	}
	fmt.Fprintf(p.errOut, "nexus: the turn stopped: %s %s\n", p.end.End, p.end.Reason)
	return nil
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", "⏎")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (a *app) aiStreamCmd() *cobra.Command {
	var id, format string
	var follow bool
	var after uint64
	cmd := textOutput(&cobra.Command{
		Use:   "stream [--session-id ID]",
		Short: "Print an ai-chat session's events (the reply's text, or the events themselves)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sid, err := a.aiSession(id)
			if err != nil {
				return err
			}
			p := &aiPrinter{out: a.env.Stdout, errOut: a.env.Stderr, format: format}
			err = a.client().Stream(cmd.Context(), sid, client.StreamOptions{After: after, Follow: follow}, func(e abi.Event) error {
				if err := p.print(e); err != nil && !errors.Is(err, errTurnOver) {
					return err
				}
				return nil
			})
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	})
	a.idFlags(cmd, &id, nil, abi.TypeAIChat)
	formatFlag(cmd, &format, eventsText, eventsRaw, eventsCompact)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the session closes")
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this sequence number")
	return cmd
}

func (a *app) aiInterruptCmd() *cobra.Command {
	return a.aiControlCmd(&cobra.Command{
		Use:   "interrupt [--session-id ID]",
		Short: "Interrupt the running reply (what was said is kept, every tool call answered)",
		Args:  cobra.NoArgs,
	}, func([]string) abi.ControlRequest { return abi.ControlRequest{Command: abi.CommandInterrupt} })
}

func (a *app) aiConfirmCmd() *cobra.Command {
	return a.aiControlCmd(&cobra.Command{
		Use:   "confirm [--session-id ID] REQUEST_ID ANSWER",
		Short: "Answer a confirmation request: deny, allow-once, allow-file, allow-write-directory, allow-exec-cwd or allow-exec-global",
		Args:  cobra.ExactArgs(2),
	}, func(args []string) abi.ControlRequest {
		return abi.ControlRequest{Command: abi.CommandConfirm, RequestID: args[0], Answer: args[1]}
	})
}

func (a *app) aiCompactCmd() *cobra.Command {
	var id, format string
	cmd := &cobra.Command{
		Use:   "compact [--session-id ID]",
		Short: "Compact the conversation now: the model summarizes its older part, the recent part is kept",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sid, err := a.aiSession(id)
			if err != nil {
				return err
			}
			c := a.client()
			res, err := c.Control(cmd.Context(), sid, abi.ControlRequest{Command: abi.CommandCompact})
			if err != nil {
				return err
			}
			var started struct {
				AfterSeq uint64 `json:"afterSeq"`
			}
			if raw, ok := res.Data.Result.(*json.RawMessage); ok && raw != nil {
				_ = json.Unmarshal(*raw, &started)
			}
			var out *abi.AICompaction
			var failed error
			err = c.Stream(cmd.Context(), sid, client.StreamOptions{After: started.AfterSeq, Follow: true}, func(e abi.Event) error {
				switch e.Event {
				case abi.EventError:
					var ep abi.ErrorPayload
					if json.Unmarshal(e.Payload, &ep) == nil {
						failed = abi.Errorf(ep.Error.Code, sid, "%s", ep.Error.Message)
						return errTurnOver
					}
				case abi.EventData:
					var p abi.AICompaction
					if json.Unmarshal(e.Payload, &p) == nil && p.Type == abi.PayloadAICompaction && p.Phase == abi.PhaseEnded {
						out = &p
						return errTurnOver
					}
				}
				return nil
			})
			switch {
			case failed != nil:
				return failed
			case out != nil:
				return a.print(format, out, nil)
			case err != nil && !errors.Is(err, errTurnOver):
				return err
			}
			return abi.Errorf(abi.CodeSessionClosed, sid, "the session closed before the compaction ended")
		},
	}
	a.idFlags(cmd, &id, nil, abi.TypeAIChat)
	formatFlag(cmd, &format, formatJSON)
	return cmd
}

func (a *app) aiQueueCmd() *cobra.Command {
	var id, format string
	var last int
	cmd := &cobra.Command{
		Use:   "queue [--session-id ID]",
		Short: "What waits in the conversation's queue, with --last N its recent messages of every state",
		Long: `What waits in the conversation's queue, with --last N its recent messages of every state.
The gateway that owns the session reads it from its queue (state/broker/queues.db on a single
node, the cluster's NATS bucket on a node of a cluster). A session no longer open is read from
the local state/broker/queues.db, which a node of a cluster does not use.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if last < 0 {
				return abi.Errorf(abi.CodeInvalidArgument, "", "--last %d: want 0 or more", last)
			}
			sid, err := a.aiSession(id)
			if err != nil {
				return err
			}
			out, err := a.aiQueue(cmd.Context(), sid, last)
			if err != nil {
				return err
			}
			return a.print(format, out, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tMODE\tSTATE\tCREATED\tCONTENT")
				for _, m := range out.Messages {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Mode, m.State, m.Created, cellText(clip(m.Content, 60)))
				}
				return tw.Flush()
			})
		},
	}
	a.idFlags(cmd, &id, nil, abi.TypeAIChat)
	formatFlag(cmd, &format, formatTable, formatJSON)
	cmd.Flags().IntVar(&last, "last", 0, "the last N messages whatever their state (delivered, cleared, dropped) instead of the queued ones")
	return cmd
}

// aiQueueOut is nexus ai queue's answer.
type aiQueueOut struct {
	Key      string           `json:"key"`
	Messages []broker.Message `json:"messages"`
}

// aiQueue reads session sid's queue through the gateway (the queue command, answered by the
// node that owns the session from its broker: on a node of a cluster, the cluster's). A
// session that is not open cannot answer it: a single node's queue is then read from the
// state directory's file; a cluster node's is in NATS, which this process does not reach.
func (a *app) aiQueue(ctx context.Context, sid string, last int) (aiQueueOut, error) {
	c := a.client()
	res, err := c.Control(ctx, sid, abi.ControlRequest{Command: abi.CommandQueue, Last: last})
	if err == nil {
		var out aiQueueOut
		raw, _ := res.Data.Result.(*json.RawMessage)
		if raw == nil {
			return out, abi.Errorf(abi.CodeInternal, sid, "the queue command answered no result")
		}
		if err := json.Unmarshal(*raw, &out); err != nil {
			return out, fmt.Errorf("session %s: read its queue: %w", sid, err)
		}
		if out.Messages == nil {
			out.Messages = []broker.Message{}
		}
		return out, nil
	}
	if abi.CodeOf(err) != abi.CodeSessionClosed {
		return aiQueueOut{}, err
	}
	s, gerr := c.Get(ctx, sid)
	if gerr != nil {
		return aiQueueOut{}, gerr
	}
	if s.Node != "" {
		return aiQueueOut{}, abi.Errorf(abi.CodeSessionClosed, sid,
			"session %s is closed and its queue is the cluster's, in NATS (node %s): open the conversation again to read it", sid, s.Node)
	}
	key, _ := s.Metadata["chatKey"].(string)
	if key == "" {
		return aiQueueOut{}, abi.Errorf(abi.CodeInvalidArgument, sid, "session %s has no conversation key", sid)
	}
	st, err := broker.Open(ctx, broker.Path(a.stateDir), broker.Options{Now: a.env.Now})
	if err != nil {
		return aiQueueOut{}, err
	}
	defer func() { _ = st.Close() }()
	out := aiQueueOut{Key: key}
	if last > 0 {
		out.Messages, err = st.History(ctx, key, last)
	} else {
		out.Messages, err = st.Queued(ctx, key)
	}
	if out.Messages == nil {
		out.Messages = []broker.Message{}
	}
	return out, err
}

func (a *app) aiSpawnCmd() *cobra.Command {
	var sp abi.SpawnRequest
	cmd := a.aiControlCmd(&cobra.Command{
		Use:   "spawn [--session-id ID] TASK...",
		Short: "Start a subagent of the conversation on TASK; its answer comes back into the conversation as a message (a turn)",
		Args:  cobra.MinimumNArgs(1),
	}, func(args []string) abi.ControlRequest {
		sp.Task = strings.Join(args, " ")
		return abi.ControlRequest{Command: abi.CommandSpawn, Spawn: &sp}
	})
	f := cmd.Flags()
	f.StringVar(&sp.Label, "label", "", "a short name for the run")
	enumFlag(cmd, &sp.Cleanup, "cleanup", "", "delete (default): archive the subagent's conversation once announced; keep: leave it", "delete", "keep")
	f.StringVar(&sp.Agent, "agent", "", "the agent it runs as (default: the conversation's)")
	enumFlag(cmd, &sp.Level, "level", "", "its permission level, no higher than the conversation's", "yolo", "trusted", "sandboxed")
	return cmd
}

// aiControlCmd is a command that sends one control request to the ai-chat session.
func (a *app) aiControlCmd(cmd *cobra.Command, req func(args []string) abi.ControlRequest) *cobra.Command {
	var id, format string
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		sid, err := a.aiSession(id)
		if err != nil {
			return err
		}
		res, err := a.client().Control(cmd.Context(), sid, req(args))
		if err != nil {
			return err
		}
		return a.print(format, res, nil)
	}
	a.idFlags(cmd, &id, nil, abi.TypeAIChat)
	formatFlag(cmd, &format, formatJSON)
	return cmd
}

// aiREPL reads messages line by line and prints each reply as it streams. On a terminal the
// line has editing and history (up and down arrows, x/term's line editor; Ctrl-C clears the
// line, Ctrl-D on an empty one leaves); during a reply Ctrl-C (SIGINT) interrupts it. /history
// lists the lines sent, /quit or /exit leave, as do the end of the input, SIGINT at the prompt
// and SIGTERM, which arrive on sigs. ctx must not end at a signal: the REPL handles them.
func (a *app) aiREPL(ctx context.Context, sigs <-chan os.Signal, sid string) error {
	lr := a.lineReader()
	defer lr.Restore()
	var history []string
	ask := func(c abi.AIConfirmation) (string, error) {
		line, err := lr.ReadLine(fmt.Sprintf("  answer [%s]: ", strings.Join(c.Options, ", ")))
		return strings.TrimSpace(line), err
	}
	type read struct {
		line string
		err  error
	}
	for {
		// The line is read aside, so that a signal at the prompt is seen while the read
		// blocks (a read of a pipe or a terminal cannot be cancelled; the process leaves).
		got := make(chan read, 1)
		go func() {
			line, err := lr.ReadLine("> ")
			got <- read{line, err}
		}()
		var r read
		select {
		case r = <-got:
		case <-sigs:
			fmt.Fprintln(a.env.Stderr)
			return nil
		}
		text := strings.TrimSpace(r.line)
		if text == "/quit" || text == "/exit" {
			return nil
		}
		if text == "/history" {
			for i, h := range history {
				fmt.Fprintf(a.env.Stdout, "%d  %s\n", i+1, h)
			}
			text = ""
		}
		if text != "" {
			history = append(history, text)
			leave, terr := a.aiREPLTurn(ctx, sigs, sid, text, ask)
			if leave {
				return nil
			}
			if terr != nil {
				if gone(terr) {
					return terr
				}
				a.warnf("%v", terr)
			}
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read: %w", r.err)
		}
	}
}

// aiREPLTurn runs one message's turn: SIGINT interrupts the reply (which still prints to its
// end), SIGTERM stops printing and asks the REPL to leave.
func (a *app) aiREPLTurn(ctx context.Context, sigs <-chan os.Signal, sid, text string, ask func(abi.AIConfirmation) (string, error)) (leave bool, err error) {
	interrupt, stopInterrupt := context.WithCancel(ctx)
	defer stopInterrupt()
	stream, stopStream := context.WithCancel(ctx)
	defer stopStream()
	done := make(chan struct{})
	left := make(chan bool, 1)
	go func() {
		for {
			select {
			case <-done:
				left <- false
				return
			case s := <-sigs:
				if s == syscall.SIGTERM {
					stopStream()
					left <- true
					return
				}
				stopInterrupt()
			}
		}
	}()
	err = a.aiTurn(interrupt, stream, sid, text, "", eventsText, ask)
	close(done)
	return <-left, err
}

// lineReader reads the REPL's lines.
type lineReader interface {
	ReadLine(prompt string) (string, error)
	// Restore gives the terminal back its mode, even while a ReadLine still blocks (the REPL
	// leaves at a signal without waiting for the line).
	Restore()
}

// lineReader is x/term's line editor when stdin and stderr are terminals, else plain lines.
func (a *app) lineReader() lineReader {
	in, ok := a.env.Stdin.(*os.File)
	if ok && term.IsTerminal(int(in.Fd())) && isTerminal(a.env.Stderr) { //nolint:gosec // G115: a file descriptor fits an int
		t := term.NewTerminal(struct {
			io.Reader
			io.Writer
		}{ctrlCClears{in}, a.env.Stderr}, "")
		return &ttyLines{fd: int(in.Fd()), t: t, w: a.env.Stderr} //nolint:gosec // G115: as above
	}
	return &plainLines{r: bufio.NewReader(a.env.Stdin), prompt: isTerminal(a.env.Stderr), w: a.env.Stderr}
}

type plainLines struct {
	r      *bufio.Reader
	w      io.Writer
	prompt bool
}

func (p *plainLines) Restore() {}

func (p *plainLines) ReadLine(prompt string) (string, error) {
	if p.prompt {
		fmt.Fprint(p.w, prompt)
	}
	line, err := p.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// ttyLines puts the terminal in raw mode only while a line is read: replies print, and Ctrl-C
// raises SIGINT, in the terminal's normal mode.
type ttyLines struct {
	fd int
	t  *term.Terminal
	w  io.Writer

	mu  sync.Mutex
	raw *term.State // the mode to restore while a line is read
}

func (l *ttyLines) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.raw != nil {
		_ = term.Restore(l.fd, l.raw)
		l.raw = nil
	}
}

func (l *ttyLines) ReadLine(prompt string) (string, error) {
	st, err := term.MakeRaw(l.fd)
	if err != nil {
		return "", fmt.Errorf("terminal: %w", err)
	}
	l.mu.Lock()
	l.raw = st
	l.mu.Unlock()
	defer l.Restore()
	l.t.SetPrompt(prompt)
	line, err := l.t.ReadLine()
	if err != nil {
		if errors.Is(err, io.EOF) {
			_, _ = io.WriteString(l.w, "\r\n") // Ctrl-D leaves the prompt's line, as a shell does
		}
		return line, err //nolint:wrapcheck // io.EOF is the caller's signal
	}
	return line, nil
}

// ctrlCClears turns Ctrl-C at the prompt into Ctrl-U (clear the line), as a shell does, where
// x/term's editor would end the input.
type ctrlCClears struct{ r io.Reader }

func (c ctrlCClears) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for i := range p[:n] {
		if p[i] == 0x03 {
			p[i] = 0x15
		}
	}
	return n, err //nolint:wrapcheck // a reader passes its errors through
}
