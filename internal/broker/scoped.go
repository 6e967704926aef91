package broker

import (
	"context"
	"strings"
)

// Scoped returns q with every conversation key under scope: a key k is stored as scope/k, and
// Keys lists only the scope's. Message ids stay global (a once-only id is once for every
// scope). A node of a cluster queues in its own scope while conversations are per node (two
// nodes each have an agent:main:main, which must not deliver each other's messages); a node
// taking a conversation over reads the old node's scope.
func Scoped(q Queues, scope string) Queues { return scoped{q: q, prefix: scope + "/"} }

// ScopedKey is the key Scoped(q, scope) stores key under.
func ScopedKey(scope, key string) string { return scope + "/" + key }

type scoped struct {
	q      Queues
	prefix string
}

func (s scoped) strip(m Message) Message {
	m.Key = strings.TrimPrefix(m.Key, s.prefix)
	return m
}

func (s scoped) strips(ms []Message, err error) ([]Message, error) {
	for i := range ms {
		ms[i] = s.strip(ms[i])
	}
	return ms, err
}

func (s scoped) Enqueue(ctx context.Context, key string, mode Mode, content, from string) (Message, error) {
	return s.EnqueueWith(ctx, key, mode, content, from, EnqueueOptions{})
}

func (s scoped) EnqueueWith(ctx context.Context, key string, mode Mode, content, from string, o EnqueueOptions) (Message, error) {
	if key == "" { // refused as the store refuses it, not stored under the bare scope
		return s.q.EnqueueWith(ctx, key, mode, content, from, o)
	}
	m, err := s.q.EnqueueWith(ctx, s.prefix+key, mode, content, from, o)
	return s.strip(m), err
}

func (s scoped) EnqueueOnce(ctx context.Context, id, key string, mode Mode, content, from string) (bool, error) {
	if key == "" {
		return s.q.EnqueueOnce(ctx, id, key, mode, content, from)
	}
	return s.q.EnqueueOnce(ctx, id, s.prefix+key, mode, content, from)
}

func (s scoped) Announce(ctx context.Context, id, key, content, from, runID string) (bool, error) {
	if key == "" {
		return s.q.Announce(ctx, id, key, content, from, runID)
	}
	return s.q.Announce(ctx, id, s.prefix+key, content, from, runID)
}

func (s scoped) Has(ctx context.Context, id string) (bool, error) { return s.q.Has(ctx, id) }

func (s scoped) Get(ctx context.Context, ids []string) ([]Message, error) {
	return s.strips(s.q.Get(ctx, ids))
}

func (s scoped) Queued(ctx context.Context, key string) ([]Message, error) {
	return s.strips(s.q.Queued(ctx, s.prefix+key))
}

func (s scoped) History(ctx context.Context, key string, n int) ([]Message, error) {
	return s.strips(s.q.History(ctx, s.prefix+key, n))
}

func (s scoped) Keys(ctx context.Context) ([]string, error) {
	keys, err := s.q.Keys(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		if rest, ok := strings.CutPrefix(k, s.prefix); ok {
			out = append(out, rest)
		}
	}
	return out, nil
}

func (s scoped) Deliver(ctx context.Context, ids []string, entryID string) ([]string, error) {
	return s.q.Deliver(ctx, ids, entryID)
}

func (s scoped) Delivered(ctx context.Context, ids []string, entryID string) error {
	return s.q.Delivered(ctx, ids, entryID)
}

func (s scoped) Refuse(ctx context.Context, id, reason string) (bool, error) {
	return s.q.Refuse(ctx, id, reason)
}

func (s scoped) Drop(ctx context.Context, ids []string, reason string) error {
	return s.q.Drop(ctx, ids, reason)
}

func (s scoped) Close() error { return s.q.Close() }
