package jetstore

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
)

// Runs are a node's subagent run records (chatstore.SubagentRuns) in the cluster's key-value
// bucket NEXUS_<cluster>_SUBAGENTS: a run is the entry <node>.run.<runId> (both base64url),
// created by the bucket's Create and patched by an Update from the revision read. A node has
// the runs it spawned, as their child conversations are its own (its start ends those still
// running, its caps count them); another node reads them by opening Runs with that node's
// name (a takeover).
//
// PutChecked's check and write are one step, from any process, by the node's entry gen: a put
// reads gen's revision, checks the runs as of it, creates its run, then moves gen on from that
// revision; a put that loses that compare-and-set deletes its run and tries again, so two puts
// checking a cap at once never both pass it. gen's value names the run whose put it confirms:
// a run counts (for a check and for List) once gen has named it, so a run being taken back is
// never counted. List answers from this process's copy of the node's runs, kept by a watcher:
// its own writes at once, another process's a moment later.
type Runs struct {
	kv   jetstream.KeyValue
	name string
	// prefix is the node's part of the bucket, "<node>."; gen its entry gen.
	prefix, gen string
	now         func() time.Time
	stop        context.CancelFunc
	done        chan struct{}

	mu      sync.Mutex
	runs    map[string]runEntry // by runId
	seen    uint64              // the bucket's last sequence the watcher applied
	changed chan struct{}       // closed when seen moves on
	// confirmed are the runs gen has named, and those in the bucket when the watcher
	// started (its first values come before a nil entry).
	confirmed map[string]bool
	started   bool
}

type runEntry struct {
	rec     chatstore.SubagentRunRecord
	rev     uint64
	deleted bool
}

var _ chatstore.SubagentRuns = (*Runs)(nil)

// RunsOptions configure OpenRuns.
type RunsOptions struct {
	// Cluster and Replicas as in Options; Node names the node whose runs these are.
	Cluster  string
	Replicas int
	Node     string
	// Now fills a run's createdAt when it has none (nil: time.Now).
	Now func() time.Time
}

// RunsBucket is the bucket of cluster's subagent runs.
func RunsBucket(cluster string) string { return "NEXUS_" + cluster + "_SUBAGENTS" }

// Runs opens the cluster's subagent runs on the store's connection.
func (s *Store) Runs(ctx context.Context, now func() time.Time) (*Runs, error) {
	return openRuns(ctx, s.js, RunsOptions{Cluster: s.opt.Cluster, Replicas: s.opt.Replicas, Node: s.opt.Node, Now: now})
}

// OpenRuns opens (creating when needed) the cluster's subagent runs on nc.
func OpenRuns(ctx context.Context, nc *nats.Conn, opt RunsOptions) (*Runs, error) {
	js, err := clusterJS(nc, &opt.Cluster, &opt.Replicas)
	if err != nil {
		return nil, err
	}
	return openRuns(ctx, js, opt)
}

func openRuns(ctx context.Context, js jetstream.JetStream, opt RunsOptions) (*Runs, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Node == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "subagent runs: no node named")
	}
	r := &Runs{name: RunsBucket(opt.Cluster), prefix: base64.RawURLEncoding.EncodeToString([]byte(opt.Node)) + ".", now: opt.Now, runs: map[string]runEntry{}, confirmed: map[string]bool{}, changed: make(chan struct{}), done: make(chan struct{})}
	r.gen = r.prefix + "gen"
	var err error
	if r.kv, err = openLeaderBucket(ctx, js, r.name, opt.Replicas); err != nil {
		return nil, fmt.Errorf("subagent runs bucket: %w", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := r.kv.Watch(wctx, r.prefix+">")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch subagent runs bucket %s: %w", r.name, err)
	}
	r.stop = cancel
	go func() {
		defer close(r.done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-wctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					r.mu.Lock()
					r.started = true
					close(r.changed)
					r.changed = make(chan struct{})
					r.mu.Unlock()
					continue
				}
				r.apply(e)
			}
		}
	}()
	// A node lists what the bucket held when it opened it (its start sweeps the runs).
	for {
		r.mu.Lock()
		started, ch := r.started, r.changed
		r.mu.Unlock()
		if started {
			return r, nil
		}
		select {
		case <-ctx.Done():
			_ = r.Close()
			return nil, fmt.Errorf("subagent runs bucket %s: read it: %w", r.name, ctx.Err())
		case <-ch:
		}
	}
}

// Close stops the watcher; the connection is the caller's.
func (r *Runs) Close() error {
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop = nil
	}
	return nil
}

// runValue is a run's entry: a token of the write, a newline, the record (a write tried again
// after its acknowledgement was lost knows its own by the token).
func runValue(rec chatstore.SubagentRunRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode subagent run %s: %w", rec.RunID, err)
	}
	return append([]byte(token()+"\n"), b...), nil
}

func decodeRun(v []byte, rec *chatstore.SubagentRunRecord) error {
	_, b, ok := bytes.Cut(v, []byte{'\n'})
	if !ok {
		return errors.New("a subagent run entry without its token")
	}
	return json.Unmarshal(b, rec)
}

func (r *Runs) runKey(runID string) string {
	return r.prefix + "run." + base64.RawURLEncoding.EncodeToString([]byte(runID))
}

// apply puts an entry the watcher delivered into this node's copy.
func (r *Runs) apply(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Revision() > r.seen {
		r.seen = e.Revision()
		close(r.changed)
		r.changed = make(chan struct{})
	}
	k := strings.TrimPrefix(e.Key(), r.prefix)
	if k == "gen" {
		if _, id, ok := bytes.Cut(e.Value(), []byte{'\n'}); ok && e.Operation() == jetstream.KeyValuePut {
			r.confirmed[string(id)] = true
		}
		return
	}
	id, ok := strings.CutPrefix(k, "run.")
	if !ok {
		return
	}
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return
	}
	if e.Operation() != jetstream.KeyValuePut {
		r.putLocked(string(b), runEntry{rev: e.Revision(), deleted: true})
		return
	}
	var rec chatstore.SubagentRunRecord
	if decodeRun(e.Value(), &rec) != nil {
		return // a record that does not decode is skipped, as runs.json's are
	}
	if !r.started {
		r.confirmed[string(b)] = true
	}
	r.putLocked(string(b), runEntry{rec: rec, rev: e.Revision()})
}

// putLocked keeps the newer of what it has and e (the watcher may deliver a write after this
// node applied its own later one).
func (r *Runs) putLocked(runID string, e runEntry) {
	if cur, ok := r.runs[runID]; ok && cur.rev >= e.rev {
		return
	}
	r.runs[runID] = e
}

// waitSeen waits until the watcher has applied the bucket's sequence rev.
func (r *Runs) waitSeen(ctx context.Context, rev uint64) error {
	for {
		r.mu.Lock()
		seen, ch := r.seen, r.changed
		r.mu.Unlock()
		if seen >= rev {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("subagent runs: wait for the bucket's sequence %d: %w", rev, ctx.Err())
		case <-ch:
		}
	}
}

func (r *Runs) snapshot() []chatstore.SubagentRunRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]chatstore.SubagentRunRecord, 0, len(r.runs))
	for id, e := range r.runs {
		if !e.deleted && r.confirmed[id] {
			out = append(out, e.rec)
		}
	}
	return out
}

// List implements chatstore.SubagentRuns.
func (r *Runs) List(f chatstore.SubagentFilter) ([]chatstore.SubagentRunRecord, error) {
	return chatstore.FilterRuns(r.snapshot(), f), nil
}

// PutChecked implements chatstore.SubagentRuns.
func (r *Runs) PutChecked(ctx context.Context, rec chatstore.SubagentRunRecord, check func(runs []chatstore.SubagentRunRecord) error) error {
	rec, err := chatstore.PrepareRun(rec, r.now())
	if err != nil {
		return err
	}
	val, err := runValue(rec)
	if err != nil {
		return err
	}
	key := r.runKey(rec.RunID)
	for {
		var gen uint64
		g, err := try(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return r.kv.Get(ctx, r.gen) })
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("put subagent run %s: %w", rec.RunID, err)
		default:
			gen = g.Revision()
		}
		if err := r.waitSeen(ctx, gen); err != nil {
			return err
		}
		if check != nil {
			if err := check(r.snapshot()); err != nil {
				return err
			}
		}
		rev, err := try(ctx, func(ctx context.Context) (uint64, error) { return r.kv.Create(ctx, key, val) })
		if conflict(err) {
			// Another put of the id, or this one tried again after its acknowledgement was
			// lost: the value with this put's token is this one's.
			cur, gerr := getCreated(ctx, r.kv, key)
			if gerr != nil || !bytes.Equal(cur.Value(), val) {
				return fmt.Errorf("put subagent run %s: %w: subagent run %s", rec.RunID, chatstore.ErrExists, rec.RunID)
			}
			rev, err = cur.Revision(), nil
		}
		if err != nil {
			return fmt.Errorf("put subagent run %s: %w", rec.RunID, err)
		}
		// gen names the run after a token of this put: one tried again after its
		// acknowledgement was lost knows its own.
		stamp := []byte(token() + "\n" + rec.RunID)
		_, err = try(ctx, func(ctx context.Context) (uint64, error) {
			if gen == 0 {
				return r.kv.Create(ctx, r.gen, stamp)
			}
			return r.kv.Update(ctx, r.gen, stamp, gen)
		})
		if conflict(err) {
			if cur, gerr := try(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return r.kv.Get(ctx, r.gen) }); gerr == nil && bytes.Equal(cur.Value(), stamp) {
				err = nil
			}
		}
		if err == nil {
			r.mu.Lock()
			r.confirmed[rec.RunID] = true
			r.putLocked(rec.RunID, runEntry{rec: rec, rev: rev})
			r.mu.Unlock()
			return nil
		}
		// Another put moved gen on since this one checked: its run may be one the check
		// did not count. This run is taken back and the check made again.
		_, derr := try(ctx, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, r.kv.Delete(ctx, key, jetstream.LastRevision(rev))
		})
		if derr != nil && !conflict(derr) { // a conflict: a try before took it back
			return fmt.Errorf("put subagent run %s: take it back: %w", rec.RunID, derr)
		}
		if !conflict(err) {
			return fmt.Errorf("put subagent run %s: %w", rec.RunID, err)
		}
	}
}

// Patch implements chatstore.SubagentRuns.
func (r *Runs) Patch(ctx context.Context, runID string, patch any) (chatstore.SubagentRunRecord, error) {
	key := r.runKey(runID)
	for {
		e, err := try(ctx, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return r.kv.Get(ctx, key) })
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return chatstore.SubagentRunRecord{}, fmt.Errorf("patch subagent run %s: %w: subagent run %s", runID, chatstore.ErrNotFound, runID)
		}
		if err != nil {
			return chatstore.SubagentRunRecord{}, fmt.Errorf("patch subagent run %s: %w", runID, err)
		}
		var cur chatstore.SubagentRunRecord
		if err := decodeRun(e.Value(), &cur); err != nil {
			return chatstore.SubagentRunRecord{}, fmt.Errorf("patch subagent run %s: %w", runID, err)
		}
		out, err := chatstore.PatchRun(cur, patch)
		if err != nil {
			return chatstore.SubagentRunRecord{}, fmt.Errorf("patch subagent run %s: %w", runID, err)
		}
		val, err := runValue(out)
		if err != nil {
			return chatstore.SubagentRunRecord{}, err
		}
		rev, err := try(ctx, func(ctx context.Context) (uint64, error) { return r.kv.Update(ctx, key, val, e.Revision()) })
		if conflict(err) {
			continue // another node patched it first (or this one's try did): patch what is there
		}
		if err != nil {
			return chatstore.SubagentRunRecord{}, fmt.Errorf("patch subagent run %s: %w", runID, err)
		}
		r.mu.Lock()
		r.putLocked(runID, runEntry{rec: out, rev: rev})
		r.mu.Unlock()
		return out, nil
	}
}
