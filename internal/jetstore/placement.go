package jetstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
)

// Load is a node's heartbeat as the node bucket holds it: when the node was alive, and how
// many live sessions it owned then (what the least-sessions placement compares).
type Load struct {
	At       time.Time `json:"at"`
	Sessions int       `json:"sessions"`
}

// owned is the set of this node's live sessions, as its writes to the bucket say: a record
// this node puts that is not final is counted, a final one, a delete or a remove is not.
type owned struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (o *owned) put(rec abi.Session) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ids == nil {
		o.ids = map[string]bool{}
	}
	if rec.Status.Final() {
		delete(o.ids, rec.SessionID)
	} else {
		o.ids[rec.SessionID] = true
	}
}

func (o *owned) drop(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.ids, id)
}

func (o *owned) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ids)
}

// encodeBeat is this node's heartbeat record at at.
func (s *Store) encodeBeat(at time.Time) ([]byte, error) {
	return json.Marshal(Load{At: at.UTC(), Sessions: s.own.count()})
}

// decodeBeat reads a heartbeat record: a Load, or (from a node before the session counts)
// the bare time.
func decodeBeat(b []byte) (Load, error) {
	if len(b) > 0 && b[0] == '{' {
		var l Load
		err := json.Unmarshal(b, &l)
		return l, err
	}
	at, err := time.Parse(time.RFC3339Nano, string(b))
	return Load{At: at}, err
}

// Loads returns every node's last heartbeat with its count of live sessions.
func (s *Store) Loads(ctx context.Context) (map[string]Load, error) {
	keys, err := s.keys(ctx, s.nodes.Bucket(), 0)
	if err != nil {
		return nil, fmt.Errorf("list node heartbeats: %w", err)
	}
	out := map[string]Load{}
	for _, k := range keys {
		e, err := s.nodes.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("node %s: read its heartbeat: %w", k, err)
		}
		l, err := decodeBeat(e.Value())
		if err != nil {
			return nil, fmt.Errorf("node %s: heartbeat %q: %w", k, e.Value(), err)
		}
		out[k] = l
	}
	return out, nil
}

// Node is the name of this store's node.
func (s *Store) Node() string { return s.opt.Node }
