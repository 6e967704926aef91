package jetstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
)

// LeaseBucket is the bucket of cluster's conversation leases.
func LeaseBucket(cluster string) string { return "NEXUS_" + cluster + "_LEASES" }

// DefaultLeaseTTL is how long a lease lasts from its last renewal unless LeaseOptions say.
const DefaultLeaseTTL = 15 * time.Second

// ErrLeaseHeld is an Acquire refused: another node holds the conversation's lease and it has
// not expired.
var ErrLeaseHeld = conversation.ErrLeaseHeld

// LeaseOptions configure OpenLeases.
type LeaseOptions struct {
	// Cluster, Replicas and Node as in Options.
	Cluster  string
	Replicas int
	Node     string
	// TTL is how long a lease lasts from its acquisition or last renewal (default
	// DefaultLeaseTTL).
	TTL time.Duration
	// Now is the clock (nil: time.Now); the nodes' clocks are compared, so they must agree
	// to well within the TTL.
	Now func() time.Time
}

// Leases are a node's side of the cluster's conversation leases: the key `lease.<key>` (key
// base64url) of the bucket holds {node, until}. A lease is taken by the bucket's Create, or by
// an Update from the revision read when the record there has expired, and renewed by an
// Update from the revision its holder wrote: of nodes that race, exactly one wins.
type Leases struct {
	kv  jetstream.KeyValue
	opt LeaseOptions
}

// leaseRecord is a lease's value.
type leaseRecord struct {
	Node  string    `json:"node"`
	Until time.Time `json:"until"`
	// Session is the conversation's current transcript (its session id), set by the holder
	// once it holds it: what a node taking the conversation over rebuilds.
	Session string `json:"session,omitempty"`
}

// Leases opens the cluster's leases on the store's connection, as this node.
func (s *Store) Leases(ctx context.Context, ttl time.Duration, now func() time.Time) (*Leases, error) {
	return openLeases(ctx, s.js, LeaseOptions{Cluster: s.opt.Cluster, Replicas: s.opt.Replicas, Node: s.opt.Node, TTL: ttl, Now: now})
}

// OpenLeases opens (creating when needed) the cluster's lease bucket on nc.
func OpenLeases(ctx context.Context, nc *nats.Conn, opt LeaseOptions) (*Leases, error) {
	js, err := clusterJS(nc, &opt.Cluster, &opt.Replicas)
	if err != nil {
		return nil, err
	}
	return openLeases(ctx, js, opt)
}

func openLeases(ctx context.Context, js jetstream.JetStream, opt LeaseOptions) (*Leases, error) {
	if opt.Node == "" {
		return nil, errors.New("leases: name the node")
	}
	if opt.TTL <= 0 {
		opt.TTL = DefaultLeaseTTL
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	kv, err := openLeaderBucket(ctx, js, LeaseBucket(opt.Cluster), opt.Replicas)
	if err != nil {
		return nil, fmt.Errorf("lease bucket: %w", err)
	}
	return &Leases{kv: kv, opt: opt}, nil
}

// TTL is how long a lease lasts from its acquisition or last renewal.
func (l *Leases) TTL() time.Duration { return l.opt.TTL }

// Owner is the node holding key's lease now: "" when none does (no record, released, or
// expired by this node's clock).
func (l *Leases) Owner(ctx context.Context, key string) (string, error) {
	e, err := try(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return l.kv.Get(ctx, leaseKey(key)) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("lease %s: %w", key, err)
	}
	var rec leaseRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return "", fmt.Errorf("lease %s: its record: %w", key, err)
	}
	if !l.opt.Now().Before(rec.Until) {
		return "", nil
	}
	return rec.Node, nil
}

// Owned is l as conversation.Leases, what the ai-chat kind takes.
func (l *Leases) Owned() conversation.Leases { return ownedLeases{l} }

type ownedLeases struct{ l *Leases }

func (o ownedLeases) Acquire(ctx context.Context, key string) (conversation.OwnedLease, error) {
	le, err := o.l.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return le, nil
}

func (o ownedLeases) TTL() time.Duration { return o.l.TTL() }

func leaseKey(key string) string { return "lease." + base64.RawURLEncoding.EncodeToString([]byte(key)) }

// Lease is this node's lease on one conversation; it implements conversation.Lease.
type Lease struct {
	l   *Leases
	key string
	ek  string

	mu      sync.Mutex
	rev     uint64
	until   time.Time
	session string
	lost    error
	prev    Holder
}

// Holder is who held a lease before: a node, and the conversation's transcript then.
type Holder = conversation.Holder

var _ conversation.Lease = (*Lease)(nil)

// Acquire takes key's lease for this node: when no node holds it, when its holder let it
// expire, or when this node holds it already (a restart). Else ErrLeaseHeld, naming the
// holder and until when.
func (l *Leases) Acquire(ctx context.Context, key string) (*Lease, error) {
	ek := leaseKey(key)
	until := l.opt.Now().Add(l.opt.TTL)
	val, err := json.Marshal(leaseRecord{Node: l.opt.Node, Until: until})
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	rev, err := try(ctx, func(ctx context.Context) (uint64, error) { return l.kv.Create(ctx, ek, val) })
	if err == nil {
		return &Lease{l: l, key: key, ek: ek, rev: rev, until: until}, nil
	}
	if !conflict(err) {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	cur, err := getCreated(ctx, l.kv, ek)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	var rec leaseRecord
	if err := json.Unmarshal(cur.Value(), &rec); err != nil {
		return nil, fmt.Errorf("lease %s: its record: %w", key, err)
	}
	if rec.Node != l.opt.Node && l.opt.Now().Before(rec.Until) {
		return nil, held(key, rec)
	}
	// The conversation's transcript goes on with the lease.
	if val, err = json.Marshal(leaseRecord{Node: l.opt.Node, Until: until, Session: rec.Session}); err != nil {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	rev, err = updateFrom(ctx, l.kv, ek, val, cur.Revision())
	if conflict(err) {
		// Another node took it from the same expired record first.
		if cur, gerr := l.kv.Get(ctx, ek); gerr == nil && json.Unmarshal(cur.Value(), &rec) == nil {
			return nil, held(key, rec)
		}
		return nil, held(key, leaseRecord{})
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", key, err)
	}
	return &Lease{l: l, key: key, ek: ek, rev: rev, until: until, session: rec.Session, prev: Holder{Node: rec.Node, Session: rec.Session}}, nil
}

// Previous is who held the lease before this node took it from an expired record (zero when
// it was free or released): the node whose queue and transcript a takeover goes on from.
func (le *Lease) Previous() Holder { return le.prev }

// Session is the conversation's transcript as the lease record names it ("" for none yet).
func (le *Lease) Session() string {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.session
}

// updateFrom writes val over the revision rev. A refusal is taken for a conflict only once
// the record is seen changed: at R3 the leader may refuse an update against a write it has
// not applied yet (TestLease/R3 lost a lease no other node had written, about once in 20
// runs), so an update refused while the record is still at rev is tried again. (One whose
// answer was lost but which was stored reads as changed: the lease is then given up, the
// safe way.)
func updateFrom(ctx context.Context, kv jetstream.KeyValue, ek string, val []byte, rev uint64) (uint64, error) {
	for attempt := 1; ; attempt++ {
		n, err := try(ctx, func(ctx context.Context) (uint64, error) { return kv.Update(ctx, ek, val, rev) })
		if err == nil || !conflict(err) {
			return n, err
		}
		cur, gerr := try(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.Get(ctx, ek) })
		switch {
		case gerr != nil, cur.Revision() != rev, attempt == maxAttempts:
			return 0, err
		}
	}
}

func held(key string, rec leaseRecord) error {
	he := &conversation.HeldError{Key: key, Node: rec.Node, Until: rec.Until}
	return &abi.Error{Code: abi.CodeResourceUnavailable, Message: he.Error(), Err: he}
}

// Valid implements conversation.Lease: nil until the lease expires by this node's clock, is
// released, or a renewal finds another node's record.
func (le *Lease) Valid() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.lost != nil {
		return le.lost
	}
	if now := le.l.opt.Now(); !now.Before(le.until) {
		return fmt.Errorf("conversation %s: the lease expired at %s: %w", le.key, le.until.UTC().Format(time.RFC3339Nano), conversation.ErrLeaseLost)
	}
	return nil
}

// Renew moves the lease's end TTL on from now, by an Update from the revision this node
// wrote. A record changed by another node (the lease expired and was taken) loses the lease
// for good; another failure leaves it to expire unless a later Renew succeeds.
func (le *Lease) Renew(ctx context.Context) error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.renewLocked(ctx, le.session)
}

// SetSession names the conversation's current transcript in the lease record (a renewal),
// so that a node taking the conversation over knows which one to rebuild.
func (le *Lease) SetSession(ctx context.Context, session string) error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.renewLocked(ctx, session)
}

func (le *Lease) renewLocked(ctx context.Context, session string) error {
	if le.lost != nil {
		return le.lost
	}
	until := le.l.opt.Now().Add(le.l.opt.TTL)
	val, err := json.Marshal(leaseRecord{Node: le.l.opt.Node, Until: until, Session: session})
	if err != nil {
		return fmt.Errorf("lease %s: %w", le.key, err)
	}
	rev, err := updateFrom(ctx, le.l.kv, le.ek, val, le.rev)
	if conflict(err) {
		le.lost = fmt.Errorf("conversation %s: the lease was taken by another node: %w", le.key, conversation.ErrLeaseLost)
		return le.lost
	}
	if err != nil {
		return fmt.Errorf("renew the lease of %s: %w", le.key, err)
	}
	le.rev, le.until, le.session = rev, until, session
	return nil
}

// Release gives the lease up: its record is written expired (if still this node's), keeping
// the transcript it names for the next holder, and Valid fails from now on.
func (le *Lease) Release(ctx context.Context) error {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.lost != nil {
		return nil
	}
	le.lost = fmt.Errorf("conversation %s: the lease was released: %w", le.key, conversation.ErrLeaseLost)
	val, err := json.Marshal(leaseRecord{Node: le.l.opt.Node, Session: le.session})
	if err != nil {
		return fmt.Errorf("release the lease of %s: %w", le.key, err)
	}
	_, err = try(ctx, func(ctx context.Context) (uint64, error) { return le.l.kv.Update(ctx, le.ek, val, le.rev) })
	if err != nil && !conflict(err) {
		return fmt.Errorf("release the lease of %s: %w", le.key, err)
	}
	return nil
}
