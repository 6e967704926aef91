package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// CreateSubject is the subject a node answers creates forwarded to it on.
func CreateSubject(cluster, node string) string {
	return "nexus." + cluster + ".node." + node + ".create"
}

// createReply is a forwarded create's answer: the session, or the error with its ABI code.
type createReply struct {
	Session *abi.Session `json:"session,omitempty"`
	Code    abi.Code     `json:"code,omitempty"`
	Message string       `json:"message,omitempty"`
}

// forward asks node to create req and answers what it did. No node listening, or none
// answering in time, is RESOURCE_UNAVAILABLE: the session may or may not have been created
// there (its record says, on every node).
func (b *Backend) forward(ctx context.Context, node string, req abi.CreateRequest) (abi.Session, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return abi.Session{}, fmt.Errorf("forward a create to node %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	msg, err := b.cfg.Conn.RequestWithContext(ctx, CreateSubject(b.cfg.Cluster, node), body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return abi.Session{}, abi.Errorf(abi.CodeResourceUnavailable, "", "node %s does not answer creates (it is down or not serving)", node)
	case err != nil:
		return abi.Session{}, abi.Errorf(abi.CodeResourceUnavailable, "", "forward a create to node %s: %v", node, err)
	}
	var rep createReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return abi.Session{}, fmt.Errorf("node %s's answer to a create: %w", node, err)
	}
	if rep.Code != "" {
		return abi.Session{}, &abi.Error{Code: rep.Code, Message: rep.Message}
	}
	if rep.Session == nil {
		return abi.Session{}, fmt.Errorf("node %s answered a create with no session", node)
	}
	return *rep.Session, nil
}

// ServeCreates answers the creates other nodes forward to node on nc by creating them on
// local, each in its own goroutine under ctx, until stop (or the end of ctx).
func ServeCreates(ctx context.Context, nc *nats.Conn, cluster, node string, local live.Backend, logger *slog.Logger) (stop func(), err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sub, err := nc.Subscribe(CreateSubject(cluster, node), func(m *nats.Msg) {
		go func() {
			var req abi.CreateRequest
			var rep createReply
			if err := json.Unmarshal(m.Data, &req); err != nil {
				rep.Code, rep.Message = abi.CodeInvalidArgument, "a forwarded create: "+err.Error()
			} else {
				req.Node = "" // here: never forwarded again
				s, err := local.Create(ctx, req)
				if err != nil {
					var ae *abi.Error
					if !errors.As(err, &ae) {
						ae = &abi.Error{Code: abi.CodeInternal, Message: err.Error()}
					}
					rep.Code, rep.Message = ae.Code, ae.Message
					if ae.Err != nil {
						rep.Message += ": " + ae.Err.Error()
					}
				} else {
					rep.Session = &s
				}
			}
			b, _ := json.Marshal(rep)
			if err := m.Respond(b); err != nil {
				logger.Warn("answer a forwarded create", "err", err)
			}
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("serve creates on %s: %w", CreateSubject(cluster, node), err)
	}
	// The subscription is known to the server before this node says it serves (a flush needs
	// a deadline).
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("serve creates on %s: %w", CreateSubject(cluster, node), err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
