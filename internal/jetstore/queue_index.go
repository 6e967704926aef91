package jetstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/broker"
)

// index is a Queues instance's copy of the messages still queued, kept by one watcher on the
// whole bucket: reads of what waits (Queued, Keys, a reject's check, an interrupt's clearing)
// answer from it instead of reading the bucket through a consumer made for the read, which
// cost milliseconds and grew with a conversation's history. It keeps only queued messages,
// and per conversation its last interrupt while anything of it is queued: a message leaving
// the queued state leaves the copy, so it does not grow with what was delivered.
type index struct {
	mu      sync.Mutex
	keys    map[string]*keyIndex // by conversation key, only those with queued messages
	byID    map[string]idRef     // queued message id -> where its entry is
	seen    uint64               // the bucket's last sequence the watcher applied
	started bool                 // the watcher gave what the bucket held when it began
	dead    error                // the watcher ended (its connection closed)
	changed chan struct{}        // closed when seen, started or dead move
	// onQueued is told the conversation of each message the watcher sees queued after its
	// start (OnQueued), outside mu.
	onQueued func(key string)
}

// keyIndex is one conversation's queued messages (by bucket key) and its last interrupt's
// first revision and id: a message queued before that interrupt reads as cleared even when
// the interrupt's node died before it wrote so.
type keyIndex struct {
	queued      map[string]entry
	interrupt   uint64
	interruptID string
}

// idRef names a queued message's entry: its conversation and bucket key.
type idRef struct{ key, ek string }

func newIndex() *index {
	return &index{keys: map[string]*keyIndex{}, byID: map[string]idRef{}, changed: make(chan struct{})}
}

// signalLocked wakes the readers waiting for the copy.
func (x *index) signalLocked() {
	close(x.changed)
	x.changed = make(chan struct{})
}

// watch starts the bucket's watcher; Close stops it.
func (q *Queues) watch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// Every entry, chunks too: a read waits for the bucket's last sequence, which may be a
	// chunk's.
	w, err := q.kv.WatchAll(wctx)
	if err != nil {
		cancel()
		return fmt.Errorf("watch queue bucket %s: %w", q.bucket, err)
	}
	q.stop, q.done = cancel, make(chan struct{})
	go func() {
		defer close(q.done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-wctx.Done():
				q.idx.end(errors.New("the queues are closed"))
				return
			case e, ok := <-w.Updates():
				if !ok {
					q.idx.end(errors.New("the bucket's watcher ended"))
					return
				}
				if key := q.idx.apply(q.prefix, e); key != "" {
					q.idx.mu.Lock()
					fn := q.idx.onQueued
					q.idx.mu.Unlock()
					if fn != nil {
						fn(key)
					}
				}
			}
		}
	}()
	return nil
}

func (x *index) end(err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.dead = err
	x.signalLocked()
}

// apply puts an update the watcher gave into the copy (nil: the bucket's content as of the
// watcher's start is all given). The watcher gives the bucket's updates in its stream's order:
// a queued entry (never updated, so its first revision is its revision) comes before any
// interrupt stored after it. It returns the conversation of a message newly queued once the
// watcher has given the bucket's content ("" for any other update).
func (x *index) apply(prefix string, kve jetstream.KeyValueEntry) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if kve == nil {
		x.started = true
		x.signalLocked()
		return ""
	}
	if kve.Revision() > x.seen {
		x.seen = kve.Revision()
		if x.started {
			x.signalLocked()
		}
	}
	ek := kve.Key()
	if strings.Count(ek, ".") != 1 {
		return "" // a chunk
	}
	if kve.Operation() != jetstream.KeyValuePut {
		x.removeLocked(ek, "")
		return ""
	}
	e, err := decodeEntry(ek, kve.Revision(), kve.Value())
	if err != nil {
		return "" // an entry that does not decode is not a message any read can give
	}
	k := x.keys[e.h.Key]
	if k == nil {
		if e.h.State != broker.StateQueued {
			return "" // nothing of its conversation waits: an interrupt clears nothing
		}
		k = &keyIndex{queued: map[string]entry{}}
		x.keys[e.h.Key] = k
	}
	if broker.Mode(e.h.Mode) == broker.Interrupt && e.seq() > k.interrupt {
		k.interrupt, k.interruptID = e.seq(), e.h.ID
	}
	if e.h.State != broker.StateQueued {
		x.removeLocked(ek, e.h.Key)
		return ""
	}
	_, had := k.queued[ek]
	k.queued[ek] = e
	x.byID[e.h.ID] = idRef{key: e.h.Key, ek: ek}
	if had || !x.started {
		return ""
	}
	return e.h.Key
}

// OnQueued has fn told, from the bucket's watcher, the conversation of every message queued
// from now on, by any node: the node owning that conversation wakes its deliverer (a message
// stored on another node).
func (q *Queues) OnQueued(fn func(key string)) {
	q.idx.mu.Lock()
	q.idx.onQueued = fn
	q.idx.mu.Unlock()
}

// removeLocked drops bucket entry ek from the copy (key: its conversation, when known), and
// its conversation once nothing of it is queued.
func (x *index) removeLocked(ek, key string) {
	if key == "" {
		for k, ki := range x.keys {
			if _, ok := ki.queued[ek]; ok {
				key = k
				break
			}
		}
	}
	k := x.keys[key]
	if k == nil {
		return
	}
	if e, ok := k.queued[ek]; ok {
		delete(k.queued, ek)
		if x.byID[e.h.ID].ek == ek {
			delete(x.byID, e.h.ID)
		}
	}
	if len(k.queued) == 0 {
		delete(x.keys, key)
	}
}

// errBehind: the copy did not reach the bucket's sequence within ackWait (its watcher
// re-made after a server went); the read goes to the bucket.
var errBehind = errors.New("the queue's local copy is behind the bucket")

// catchUp waits until the copy holds every write the bucket's leader held when it was
// called: a message another node's enqueue acknowledged before this read began is in it.
func (q *Queues) catchUp(ctx context.Context) error {
	info, err := try(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) { return q.st.Info(ctx) })
	if err != nil {
		return fmt.Errorf("queue bucket %s: %w", q.bucket, err)
	}
	return q.idx.waitSeen(ctx, info.State.LastSeq)
}

// waitSeen waits until the watcher has applied the bucket's sequence seq.
func (x *index) waitSeen(ctx context.Context, seq uint64) error {
	var behind <-chan time.Time
	for {
		x.mu.Lock()
		ok, dead, ch := x.started && x.seen >= seq, x.dead, x.changed
		x.mu.Unlock()
		switch {
		case ok:
			return nil
		case dead != nil:
			return fmt.Errorf("%w: %w", errBehind, dead)
		}
		if behind == nil {
			t := time.NewTimer(ackWait)
			defer t.Stop()
			behind = t.C
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue: wait for the bucket's sequence %d: %w", seq, ctx.Err())
		case <-behind:
			return fmt.Errorf("%w: sequence %d", errBehind, seq)
		case <-ch:
		}
	}
}

// pending are key's queued messages in the copy in store order, and the last interrupt's
// first revision and id.
func (x *index) pending(key string) ([]entry, uint64, string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := x.keys[key]
	if k == nil {
		return nil, 0, ""
	}
	out := make([]entry, 0, len(k.queued))
	for _, e := range k.queued {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(a.seq(), b.seq()) })
	return out, k.interrupt, k.interruptID
}

// conversations are the keys the copy has queued messages of.
func (x *index) conversations() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]string, 0, len(x.keys))
	for k := range x.keys {
		out = append(out, k)
	}
	return out
}

// queuedEntry is message id's entry when the copy has it queued.
func (x *index) queuedEntry(id string) (entry, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ref, ok := x.byID[id]
	if !ok {
		return entry{}, false
	}
	k := x.keys[ref.key]
	if k == nil {
		return entry{}, false
	}
	e, ok := k.queued[ref.ek]
	return e, ok
}

// waiting are key's queued messages from the copy (caught up first) in store order, those
// queued before the key's last interrupt written cleared (when its node did not) and left
// out. A copy that cannot catch up (errBehind) reads the bucket.
func (q *Queues) waiting(ctx context.Context, key string) ([]entry, error) {
	if err := q.catchUp(ctx); err != nil {
		if !errors.Is(err, errBehind) {
			return nil, err
		}
		es, err := q.keyEntries(ctx, key)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(es, func(e entry) bool { return e.h.State != broker.StateQueued }), nil
	}
	return q.fromCopy(ctx, key)
}

// fromCopy is waiting with the copy caught up.
func (q *Queues) fromCopy(ctx context.Context, key string) ([]entry, error) {
	es, interrupt, interruptID := q.idx.pending(key)
	out := es[:0]
	for _, e := range es {
		if interrupt == 0 || e.seq() >= interrupt {
			out = append(out, e)
			continue
		}
		// Whoever moves it, it is no longer queued.
		if _, err := q.move(ctx, e, broker.StateCleared, broker.ClearedBy(interruptID), ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}
