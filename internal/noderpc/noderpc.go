// Package noderpc carries a command for a session to the node of a nexus cluster that owns it,
// by NATS request/reply on the subject nexus.<cluster>.node.<node>.rpc (docs/cluster.md). A
// Client is the live.Router a node's registry forwards with; a Server answers on the node's
// subject for the node's own sessions (live.Local). Requests and replies are JSON.
package noderpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// Defaults.
const (
	// DefaultTimeout bounds how long a node waits for another's answer to a send, a control
	// command or a close.
	DefaultTimeout = 5 * time.Second
	// DefaultRunWait is what a run without its own timeout may take on the owner (the agent
	// shells' default), on top of the timeout.
	DefaultRunWait = 120 * time.Second
	// DefaultLongWait bounds the control commands that do a turn's worth of work on the owner
	// (ai-chat's compact and spawn).
	DefaultLongWait = 10 * time.Minute
)

// Ops of a Request.
const (
	OpSend    = "send"
	OpControl = "control"
	OpRun     = "run"
	OpClose   = "close"
	OpTouch   = "touch"
)

// Request is one command for a session, sent to its node.
type Request struct {
	Op        string `json:"op"`
	SessionID string `json:"sessionId"`
	// TimeoutMs is how long the requester waits for the answer: the owner gives up then too.
	TimeoutMs int64               `json:"timeoutMs"`
	Send      *SendBody           `json:"send,omitempty"`
	Control   *abi.ControlRequest `json:"control,omitempty"`
	Run       *abi.RunRequest     `json:"run,omitempty"`
	Reason    string              `json:"reason,omitempty"` // close's
	// SessionIDs are touch's: sessions another node's readers follow.
	SessionIDs []string `json:"sessionIds,omitempty"`
}

// SendBody is live.SendRequest on the wire.
type SendBody struct {
	Data   []byte     `json:"data"`
	Mode   string     `json:"mode,omitempty"`
	Origin abi.Origin `json:"origin"`
}

// Response is the owner's answer: one of the results, or an error.
type Response struct {
	Send    *SendReply       `json:"send,omitempty"`
	Control *abi.ControlData `json:"control,omitempty"`
	Run     json.RawMessage  `json:"run,omitempty"`
	Session *abi.Session     `json:"session,omitempty"`
	Touched bool             `json:"touched,omitempty"`
	Error   *ErrorReply      `json:"error,omitempty"`
}

// SendReply is live.SendResult on the wire.
type SendReply struct {
	AfterSeq  uint64 `json:"afterSeq"`
	MessageID string `json:"messageId,omitempty"`
}

// ErrorReply is an *abi.Error on the wire: its code survives the hop.
type ErrorReply struct {
	Code      abi.Code `json:"code"`
	Message   string   `json:"message"`
	SessionID string   `json:"sessionId,omitempty"`
}

func errorReply(err error) *ErrorReply {
	var e *abi.Error
	if !errors.As(err, &e) {
		return &ErrorReply{Code: abi.CodeInternal, Message: err.Error()}
	}
	msg := e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return &ErrorReply{Code: e.Code, Message: msg, SessionID: e.SessionID}
}

func (e *ErrorReply) err() error {
	return &abi.Error{Code: e.Code, Message: e.Message, SessionID: e.SessionID}
}

// Subject is the subject node of cluster answers on. A byte of the node's name that a
// subject's token cannot hold (anything but letters, digits, '-' and '_': a host name's dots)
// is written %XX.
func Subject(cluster, node string) string {
	var b strings.Builder
	for i := 0; i < len(node); i++ {
		c := node[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return "nexus." + cluster + ".node." + b.String() + ".rpc"
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Cluster names the cluster (default "nexus").
	Cluster string
	// Timeout bounds the wait for an answer (default DefaultTimeout); a run waits for its own
	// timeout (or DefaultRunWait) on top, compact and spawn DefaultLongWait.
	Timeout time.Duration
}

// Client forwards commands to their sessions' nodes: a live.Router.
type Client struct {
	nc  *nats.Conn
	opt ClientOptions
}

var _ live.Router = (*Client)(nil)

// NewClient returns a Client on nc.
func NewClient(nc *nats.Conn, opt ClientOptions) *Client {
	if opt.Cluster == "" {
		opt.Cluster = "nexus"
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	return &Client{nc: nc, opt: opt}
}

// Send implements live.Router.
func (c *Client) Send(ctx context.Context, node, id string, req live.SendRequest) (live.SendResult, error) {
	res, err := c.call(ctx, node, c.opt.Timeout, Request{Op: OpSend, SessionID: id, Send: &SendBody{Data: req.Data, Mode: req.Mode, Origin: req.Origin}})
	if err != nil {
		return live.SendResult{}, err
	}
	if res.Send == nil {
		return live.SendResult{}, bad(node, id, OpSend)
	}
	return live.SendResult{AfterSeq: res.Send.AfterSeq, MessageID: res.Send.MessageID}, nil
}

// Control implements live.Router.
func (c *Client) Control(ctx context.Context, node, id string, req abi.ControlRequest) (*abi.ControlData, error) {
	wait := c.opt.Timeout
	if req.Command == abi.CommandCompact || req.Command == abi.CommandSpawn {
		wait = DefaultLongWait
	}
	res, err := c.call(ctx, node, wait, Request{Op: OpControl, SessionID: id, Control: &req})
	if err != nil {
		return nil, err
	}
	if res.Control == nil {
		return nil, bad(node, id, OpControl)
	}
	return res.Control, nil
}

// Run implements live.Router. The result is the owner's JSON, as it is.
func (c *Client) Run(ctx context.Context, node, id string, req abi.RunRequest) (any, error) {
	wait := DefaultRunWait
	if req.TimeoutSecs > 0 {
		wait = time.Duration(req.TimeoutSecs) * time.Second
	}
	res, err := c.call(ctx, node, c.opt.Timeout+wait, Request{Op: OpRun, SessionID: id, Run: &req})
	if err != nil {
		return nil, err
	}
	if res.Run == nil {
		return nil, bad(node, id, OpRun)
	}
	return res.Run, nil
}

// Close implements live.Router.
func (c *Client) Close(ctx context.Context, node, id, reason string) (abi.Session, error) {
	res, err := c.call(ctx, node, c.opt.Timeout, Request{Op: OpClose, SessionID: id, Reason: reason})
	if err != nil {
		return abi.Session{}, err
	}
	if res.Session == nil {
		return abi.Session{}, bad(node, id, OpClose)
	}
	return *res.Session, nil
}

// Touch implements live.Router.
func (c *Client) Touch(ctx context.Context, node string, ids []string) error {
	res, err := c.call(ctx, node, c.opt.Timeout, Request{Op: OpTouch, SessionIDs: ids})
	if err == nil && !res.Touched {
		err = bad(node, "", OpTouch)
	}
	return err
}

// whose names node for a message, with the session it was asked about.
func whose(id, node string) string {
	if id == "" {
		return "node " + node
	}
	return "session " + id + "'s node " + node
}

func bad(node, id, op string) error {
	return abi.Errorf(abi.CodeInternal, id, "node %s answered %s with no result", node, op)
}

// call asks node and waits up to wait (and ctx) for its answer. No node answering on the
// subject, or none within wait, is RESOURCE_UNAVAILABLE naming the node; this node's own
// connection to NATS being down is CONNECTION_LOST.
func (c *Client) call(ctx context.Context, node string, wait time.Duration, req Request) (Response, error) {
	id := req.SessionID
	req.TimeoutMs = wait.Milliseconds()
	data, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("encode the %s for node %s: %w", req.Op, node, err)
	}
	if max := c.nc.MaxPayload(); int64(len(data)) > max {
		return Response{}, abi.Errorf(abi.CodeInvalidArgument, id, "the %s for session %s on node %s is %d bytes, over the cluster's NATS max payload (%d bytes)", req.Op, id, node, len(data), max)
	}
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, Subject(c.opt.Cluster, node), data)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return Response{}, ctx.Err() // the caller went away
		case errors.Is(err, nats.ErrNoResponders):
			return Response{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id,
				Message: fmt.Sprintf("%s does not answer (it is stopped or cut off from NATS)", whose(id, node))}
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
			return Response{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id,
				Message: fmt.Sprintf("%s did not answer the %s within %s", whose(id, node), req.Op, wait)}
		case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
			return Response{}, &abi.Error{Code: abi.CodeConnectionLost, SessionID: id,
				Message: fmt.Sprintf("this node's connection to NATS is down: cannot reach %s", whose(id, node)), Err: err}
		}
		return Response{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "reach node " + node, Err: err}
	}
	var res Response
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		return Response{}, abi.Errorf(abi.CodeInternal, id, "node %s's answer to %s: %v", node, req.Op, err)
	}
	if res.Error != nil {
		return Response{}, res.Error.err()
	}
	return res, nil
}

// ServerOptions configure a Server.
type ServerOptions struct {
	Cluster, Node string
	// Local answers for the node's own sessions.
	Local live.Local
	// Concurrency bounds the requests answered at once (default 256); more wait their turn.
	Concurrency int
	Logger      *slog.Logger
}

// Server answers the requests for a node's sessions on its subject.
type Server struct {
	nc     *nats.Conn
	opt    ServerOptions
	sub    *nats.Subscription
	base   context.Context
	cancel context.CancelFunc
	slots  chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Serve subscribes to the node's subject (no queue group: each node has its own) and answers
// each request in a goroutine of its own, so a long run does not hold up another session's
// keystrokes. Close stops it.
func Serve(nc *nats.Conn, opt ServerOptions) (*Server, error) {
	if opt.Cluster == "" {
		opt.Cluster = "nexus"
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = 256
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{nc: nc, opt: opt, slots: make(chan struct{}, opt.Concurrency)}
	s.base, s.cancel = context.WithCancel(context.Background())
	subject := Subject(opt.Cluster, opt.Node)
	sub, err := nc.Subscribe(subject, s.receive)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("serve node %s's requests on %s: %w", opt.Node, subject, err)
	}
	// The subscription is known to the server before a peer is told this node is up.
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		s.cancel()
		return nil, fmt.Errorf("serve node %s's requests on %s: %w", opt.Node, subject, err)
	}
	s.sub = sub
	return s, nil
}

// Close stops answering, cancels the requests being answered and waits for them.
func (s *Server) Close() {
	s.once.Do(func() {
		_ = s.sub.Unsubscribe()
		s.cancel()
		s.wg.Wait()
	})
}

func (s *Server) receive(m *nats.Msg) {
	select {
	case s.slots <- struct{}{}:
	case <-s.base.Done():
		return
	}
	s.wg.Add(1)
	go func() {
		defer func() { <-s.slots; s.wg.Done() }()
		s.answer(m)
	}()
}

func (s *Server) answer(m *nats.Msg) {
	var req Request
	var res Response
	if err := json.Unmarshal(m.Data, &req); err != nil {
		res.Error = errorReply(abi.Errorf(abi.CodeInvalidArgument, "", "node %s: undecodable request: %v", s.opt.Node, err))
	} else {
		res = s.do(req)
	}
	out, err := json.Marshal(res)
	if err == nil && int64(len(out)) > s.nc.MaxPayload() {
		err = abi.Errorf(abi.CodeInvalidArgument, req.SessionID, "node %s's answer to %s is %d bytes, over the cluster's NATS max payload (%d bytes)", s.opt.Node, req.Op, len(out), s.nc.MaxPayload())
	}
	if err != nil {
		out, _ = json.Marshal(Response{Error: errorReply(err)})
	}
	if err := m.Respond(out); err != nil {
		s.opt.Logger.Warn("answer a request for a session", "node", s.opt.Node, "op", req.Op, "id", req.SessionID, "err", err)
	}
}

// do runs req under the requester's wait: what it no longer waits for is stopped.
func (s *Server) do(req Request) (res Response) {
	wait := time.Duration(req.TimeoutMs) * time.Millisecond
	if wait <= 0 {
		wait = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(s.base, wait)
	defer cancel()
	id, l := req.SessionID, s.opt.Local
	var err error
	switch {
	case req.Op == OpSend && req.Send != nil:
		var r live.SendResult
		if r, err = l.Send(ctx, id, live.SendRequest{Data: req.Send.Data, Mode: req.Send.Mode, Origin: req.Send.Origin}); err == nil {
			res.Send = &SendReply{AfterSeq: r.AfterSeq, MessageID: r.MessageID}
		}
	case req.Op == OpControl && req.Control != nil:
		res.Control, err = l.Control(ctx, id, *req.Control)
	case req.Op == OpRun && req.Run != nil:
		var out any
		if out, err = l.Run(ctx, id, *req.Run); err == nil {
			res.Run, err = json.Marshal(out)
		}
	case req.Op == OpClose:
		var obj abi.Session
		if obj, err = l.Close(ctx, id, req.Reason); err == nil {
			res.Session = &obj
		}
	case req.Op == OpTouch:
		if err = l.Touch(ctx, req.SessionIDs); err == nil {
			res.Touched = true
		}
	default:
		err = abi.Errorf(abi.CodeInvalidArgument, id, "node %s: unknown request %q", s.opt.Node, req.Op)
	}
	if err != nil && ctx.Err() != nil && abi.CodeOf(err) == abi.CodeInternal {
		// The requester stops waiting now too: say so as the requester would.
		err = &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id,
			Message: fmt.Sprintf("%s did not finish the %s within %s", whose(id, s.opt.Node), req.Op, wait), Err: err}
	}
	if err != nil {
		return Response{Error: errorReply(err)}
	}
	return res
}
