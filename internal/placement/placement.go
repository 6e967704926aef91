// Package placement decides which node of a nexus cluster a new session is created on
// (docs/cluster.md): the node that got the request, unless the request names a node
// (abi.CreateRequest.Node) or the cluster's policy is least-sessions (the node whose heartbeat
// counts the fewest live sessions). A create for another node is forwarded to it by
// request/reply on nexus.<cluster>.node.<node>.create (create_rpc.go), kept apart so that a
// general forwarding of requests to a session's node can take it over.
package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/live"
)

// Policies.
const (
	// Local creates a session on the node that got the request (the default).
	Local = "local"
	// LeastSessions creates it on the live node with the fewest live sessions.
	LeastSessions = "least-sessions"
)

// CheckPolicy refuses an unknown policy.
func CheckPolicy(p string) error {
	if p != "" && p != Local && p != LeastSessions {
		return abi.Errorf(abi.CodeInvalidArgument, "", "placement %q: want local or least-sessions", p)
	}
	return nil
}

// Loads reads every node's last heartbeat and count of live sessions (jetstore.Store).
type Loads interface {
	Loads(ctx context.Context) (map[string]jetstore.Load, error)
}

// Config configures a Backend.
type Config struct {
	// Conn, Cluster and Node: this node's NATS connection, its cluster's name and its own;
	// without a Conn the gateway is no cluster's node and a request naming another node is
	// refused.
	Conn          *nats.Conn
	Cluster, Node string
	Loads         Loads
	// Policy is Local (or "") or LeastSessions.
	Policy string
	// NodeLost is how old a node's heartbeat may be before the node is taken for lost
	// (default live.DefaultNodeLost).
	NodeLost time.Duration
	Now      func() time.Time
	// Timeout bounds a forwarded create (default 30s).
	Timeout time.Duration
	// Owners, when set, name the node owning a conversation (jetstore.Leases): an ai-chat
	// create on a conversation another node owns goes to that node, whatever the policy.
	Owners Owners
}

// Owners name the node holding a conversation's lease ("" for none).
type Owners interface {
	Owner(ctx context.Context, key string) (string, error)
}

// Backend is a live.Backend whose Create places the session: here, or forwarded to the node
// chosen. Everything else goes to the local backend.
type Backend struct {
	live.Backend
	cfg Config

	mu sync.Mutex
	// placed are the times this node placed sessions on each node: those after the node's
	// last heartbeat are not in its count yet, so parallel creates do not all pick one node.
	placed map[string][]time.Time
}

// New wraps local.
func New(local live.Backend, cfg Config) (*Backend, error) {
	if err := CheckPolicy(cfg.Policy); err != nil {
		return nil, err
	}
	if cfg.Policy == LeastSessions && (cfg.Conn == nil || cfg.Loads == nil) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "placement least-sessions needs a cluster (--nats or --nats-embedded)")
	}
	if cfg.NodeLost <= 0 {
		cfg.NodeLost = live.DefaultNodeLost
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	return &Backend{Backend: local, cfg: cfg, placed: map[string][]time.Time{}}, nil
}

// Create implements live.Backend: the session is created on the node chosen.
func (b *Backend) Create(ctx context.Context, req abi.CreateRequest) (abi.Session, error) {
	node, err := b.choose(ctx, req)
	if err != nil {
		return abi.Session{}, err
	}
	req.Node = ""
	if node == b.cfg.Node {
		return b.Backend.Create(ctx, req)
	}
	return b.forward(ctx, node, req)
}

// choose is the node req is created on.
func (b *Backend) choose(ctx context.Context, req abi.CreateRequest) (string, error) {
	switch {
	case req.Node != "" && req.Node == b.cfg.Node:
		return b.cfg.Node, nil
	case req.Node != "":
		if b.cfg.Conn == nil || b.cfg.Loads == nil {
			return "", abi.Errorf(abi.CodeInvalidArgument, "", "node %q: this gateway is not a node of a cluster", req.Node)
		}
		if req.Ephemeral {
			return "", abi.Errorf(abi.CodeInvalidArgument, "", "an ephemeral session lives on the node of the connection that owns it, not on node %q", req.Node)
		}
		loads, err := b.cfg.Loads.Loads(ctx)
		if err != nil {
			return "", abi.Errorf(abi.CodeResourceUnavailable, "", "node %q: read the cluster's nodes: %v", req.Node, err)
		}
		l, ok := loads[req.Node]
		if !ok {
			return "", abi.Errorf(abi.CodeInvalidArgument, "", "no node %q in cluster %s (nodes: %s)", req.Node, b.cfg.Cluster, strings.Join(names(loads), ", "))
		}
		if age := b.cfg.Now().Sub(l.At); age > b.cfg.NodeLost {
			return "", abi.Errorf(abi.CodeResourceUnavailable, "", "node %q is lost: its last heartbeat was %s ago (at %s)", req.Node, age.Round(time.Second), abi.FormatTime(l.At))
		}
		return req.Node, nil
	}
	if owner := b.owner(ctx, req); owner != "" {
		return owner, nil
	}
	if b.cfg.Policy != LeastSessions || req.Ephemeral {
		return b.cfg.Node, nil
	}
	loads, err := b.cfg.Loads.Loads(ctx)
	if err != nil {
		return "", abi.Errorf(abi.CodeResourceUnavailable, "", "placement: read the cluster's nodes: %v", err)
	}
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	best, bestN := b.cfg.Node, -1
	if _, ok := loads[b.cfg.Node]; !ok {
		loads[b.cfg.Node] = jetstore.Load{At: now} // before this node's first heartbeat
	}
	for _, node := range names(loads) {
		l := loads[node]
		if now.Sub(l.At) > b.cfg.NodeLost {
			continue // lost: nothing is placed there
		}
		n := l.Sessions + b.pending(node, l.At, now)
		// Ties go to this node (no forwarding), then by name.
		if bestN < 0 || n < bestN || n == bestN && node == b.cfg.Node {
			best, bestN = node, n
		}
	}
	b.placed[best] = append(b.placed[best], now)
	return best, nil
}

// owner is the node owning the conversation an ai-chat create names, when another node
// does: only there can a session open on it (its lease). "" to place as usual (a failed read
// too: the create then says who owns it, if anyone does).
func (b *Backend) owner(ctx context.Context, req abi.CreateRequest) string {
	if b.cfg.Owners == nil || req.Type != abi.TypeAIChat || req.Context.ChatID == "" || req.Ephemeral {
		return ""
	}
	key := req.Context.ChatID
	if pk, err := chatstore.ParseKey(key); err == nil {
		key = pk.String()
	}
	node, err := b.cfg.Owners.Owner(ctx, key)
	if err != nil || node == b.cfg.Node {
		return ""
	}
	return node
}

// pending counts the sessions placed on node since its heartbeat at (b.mu held), forgetting
// older placements.
func (b *Backend) pending(node string, at, now time.Time) int {
	keep := b.placed[node][:0]
	for _, t := range b.placed[node] {
		if !t.Before(at) && now.Sub(t) <= b.cfg.NodeLost {
			keep = append(keep, t)
		}
	}
	b.placed[node] = keep
	return len(keep)
}

func names(loads map[string]jetstore.Load) []string {
	out := make([]string, 0, len(loads))
	for k := range loads {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// String names the backend's node and policy (for logs).
func (b *Backend) String() string {
	return fmt.Sprintf("placement %s on node %s", firstOf(b.cfg.Policy, Local), b.cfg.Node)
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
