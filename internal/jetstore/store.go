// Package jetstore keeps a nexus cluster's live store on NATS JetStream: the session records in
// a key-value bucket (compare-and-set on the entry's revision) and every session's events on a
// stream, a subject per session. Subjects, streams and buckets are named after the cluster, so
// two clusters on one NATS deployment never see each other's sessions.
package jetstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// Options configure a Store.
type Options struct {
	// Cluster names the cluster: letters, digits, '-' and '_' (default "nexus").
	Cluster string
	// Node names this node: the sessions it restores are those whose record it wrote.
	Node string
	// Replicas of the stream and the bucket: 1 or 3 (default 1). A stream that exists keeps
	// the replicas it was made with unless they differ: then opening fails.
	Replicas int
	// MaxMsgsPerSubject bounds the messages (appends) the stream keeps per session, the
	// stream's counterpart of the disk log's pruning (default 10000); MaxAge bounds their age
	// (0: no bound).
	MaxMsgsPerSubject int64
	MaxAge            time.Duration
	Logger            *slog.Logger
}

// Store is a live.Store on JetStream.
type Store struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	nodes   jetstream.KeyValue // each node's last heartbeat
	opt     Options
	stream  string
	subject string // the events' subject prefix, without the trailing '.'
	bucket  string

	// mu guards version and changes: the bucket's version (its stream's last sequence, plus
	// one so it is never 0), moved on by this node's writes and by the bucket's watcher.
	mu      sync.Mutex
	version uint64
	changes chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
	own     owned // this node's live sessions, counted in its heartbeat
}

var _ live.Store = (*Store)(nil)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Names returns the stream, event subject prefix and bucket of cluster.
func Names(cluster string) (stream, subject, bucket string) {
	return "NEXUS_" + cluster + "_EVENTS", "nexus." + cluster + ".events", "NEXUS_" + cluster + "_SESSIONS"
}

// Open opens (creating when needed) the cluster's event stream and session bucket on nc.
func Open(ctx context.Context, nc *nats.Conn, opt Options) (*Store, error) {
	if opt.Cluster == "" {
		opt.Cluster = "nexus"
	}
	if !nameRE.MatchString(opt.Cluster) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "cluster name %q: use letters, digits, '-' and '_'", opt.Cluster)
	}
	if opt.Replicas == 0 {
		opt.Replicas = 1
	}
	if opt.Replicas != 1 && opt.Replicas != 3 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "replicas %d: want 1 or 3", opt.Replicas)
	}
	if opt.MaxMsgsPerSubject == 0 {
		opt.MaxMsgsPerSubject = 10000
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s := &Store{nc: nc, js: js, opt: opt, changes: make(chan struct{}), done: make(chan struct{})}
	s.stream, s.subject, s.bucket = Names(opt.Cluster)
	// Reads go to the stream leader (no direct gets from followers, which may lag a write
	// this node just made).
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              s.stream,
		Subjects:          []string{s.subject + ".>"},
		Storage:           jetstream.FileStorage,
		Replicas:          opt.Replicas,
		MaxMsgsPerSubject: opt.MaxMsgsPerSubject,
		MaxAge:            opt.MaxAge,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       false,
	}); err != nil {
		return nil, fmt.Errorf("event stream %s: %w", s.stream, err)
	}
	if s.kv, err = s.openBucket(ctx); err != nil {
		return nil, err
	}
	if s.nodes, err = s.openNodes(ctx); err != nil {
		return nil, err
	}
	if err := s.startWatch(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// openBucket opens the session bucket, creating it with leader-only reads.
func (s *Store) openBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := openLeaderBucket(ctx, s.js, s.bucket, s.opt.Replicas)
	if err != nil {
		return nil, fmt.Errorf("session bucket: %w", err)
	}
	return kv, nil
}

// openLeaderBucket opens the bucket name, creating it (history 1, replicas as asked), with
// reads from its stream's leader only: direct gets from followers may lag a write this node
// just made.
func openLeaderBucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1, Storage: jetstream.FileStorage, Replicas: replicas})
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil // another node made it
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		kv, err = js.KeyValue(ctx, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	st, err := js.Stream(ctx, "KV_"+name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if cfg := st.CachedInfo().Config; cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("%s: read from its leader: %w", name, err)
		}
		if kv, err = js.KeyValue(ctx, name); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return kv, nil
}

// openNodes opens the bucket of node heartbeats, NEXUS_<cluster>_NODES, creating it.
func (s *Store) openNodes(ctx context.Context) (jetstream.KeyValue, error) {
	name := s.bucket + "_NODES"
	kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1, Storage: jetstream.FileStorage, Replicas: s.opt.Replicas})
	if err != nil {
		return nil, fmt.Errorf("node bucket %s: %w", name, err)
	}
	return kv, nil
}

// Beat implements live.Liveness: this node's heartbeat, the time it was at and its count of
// live sessions (placement.go).
func (s *Store) Beat(ctx context.Context, at time.Time) error {
	b, err := s.encodeBeat(at)
	if err != nil {
		return fmt.Errorf("node %s: heartbeat: %w", s.opt.Node, err)
	}
	if _, err := s.nodes.Put(ctx, s.opt.Node, b); err != nil {
		return fmt.Errorf("node %s: heartbeat: %w", s.opt.Node, err)
	}
	return nil
}

// keys are the keys of bucket (deleted ones too: a Get tells), from its stream's leader (the
// stream's subjects), not from ListKeys: that reads through an ephemeral consumer, which on a
// replicated bucket may sit on a follower that has not yet seen a write this node made (an R3
// List missed a record just put).
//
// With atLeast > 0 it waits until the leader holds the bucket's sequence atLeast: a leader
// elected a moment ago may answer before it has applied every write the old one acknowledged,
// and this node has seen writes up to there (its own, or the watcher's): a List after an
// update read the record as it was before (TestContracts/R3/StateStore/Watch, under load).
func (s *Store) keys(ctx context.Context, bucket string, atLeast uint64) ([]string, error) {
	st, err := s.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + bucket + "."
	var info *jetstream.StreamInfo
	for {
		info, err = st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
		if err != nil {
			return nil, err
		}
		if info.State.LastSeq >= atLeast {
			break
		}
		select { // the leader catches up on its own; nothing here is told when
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	out := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		out = append(out, strings.TrimPrefix(subj, prefix))
	}
	return out, nil
}

// Beats implements live.Liveness: every node's last heartbeat.
func (s *Store) Beats(ctx context.Context) (map[string]time.Time, error) {
	loads, err := s.Loads(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(loads))
	for k, l := range loads {
		out[k] = l.At
	}
	return out, nil
}

// startWatch follows the bucket's changes, which move the store's version on.
func (s *Store) startWatch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := s.kv.WatchAll(wctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		cancel()
		return fmt.Errorf("watch session bucket %s: %w", s.bucket, err)
	}
	st, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		cancel()
		_ = w.Stop()
		return fmt.Errorf("session bucket %s: %w", s.bucket, err)
	}
	s.bump(st.CachedInfo().State.LastSeq + 1)
	s.stop = cancel
	go func() {
		defer close(s.done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					s.bump(e.Revision() + 1)
				}
			case <-wctx.Done():
				return
			}
		}
	}()
	return nil
}

func (s *Store) bump(v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v > s.version {
		s.version = v
		close(s.changes)
		s.changes = make(chan struct{})
	}
}

// stored is a record as the bucket holds it: the session object and the node that wrote it.
type stored struct {
	Node    string      `json:"node"`
	Session abi.Session `json:"session"`
}

func (s *Store) decode(e jetstream.KeyValueEntry) (stored, error) {
	var st stored
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return st, fmt.Errorf("session record %s: %w", e.Key(), err)
	}
	return st, nil
}

// key checks that a session id can be a key and a subject token.
func key(id string) (string, error) {
	if !nameRE.MatchString(id) {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "session id %q cannot name a record in a cluster (letters, digits, '-' and '_')", id)
	}
	return id, nil
}

// Get implements live.StateStore.
func (s *Store) Get(ctx context.Context, id string) (live.Record, error) {
	k, err := key(id)
	if err != nil {
		return live.Record{}, err
	}
	e, err := s.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return live.Record{}, fmt.Errorf("session %s: %w", id, live.ErrNoRecord)
	}
	if err != nil {
		return live.Record{}, fmt.Errorf("session %s: read its record: %w", id, err)
	}
	st, err := s.decode(e)
	if err != nil {
		return live.Record{}, err
	}
	return live.Record{Session: st.Session, Revision: e.Revision()}, nil
}

// List implements live.StateStore.
func (s *Store) List(ctx context.Context) ([]live.Record, error) {
	out, _, err := s.list(ctx)
	return out, err
}

// list returns every record, with the node that wrote each.
func (s *Store) list(ctx context.Context) ([]live.Record, map[string]string, error) {
	s.mu.Lock()
	var seen uint64 // the bucket's last sequence this node has seen
	if s.version > 0 {
		seen = s.version - 1
	}
	s.mu.Unlock()
	keys, err := s.keys(ctx, s.bucket, seen)
	if err != nil {
		return nil, nil, fmt.Errorf("list session records: %w", err)
	}
	var out []live.Record
	nodes := map[string]string{}
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, nil, fmt.Errorf("session %s: read its record: %w", k, err)
		}
		st, err := s.decode(e)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, live.Record{Session: st.Session, Revision: e.Revision()})
		nodes[k] = st.Node
	}
	live.SortRecords(out)
	return out, nodes, nil
}

// Put implements live.StateStore: a create is the bucket's Create, an update its Update from
// the revision named; the bucket refuses either when the entry moved on.
func (s *Store) Put(ctx context.Context, rec abi.Session, revision uint64) (uint64, error) {
	k, err := key(rec.SessionID)
	if err != nil {
		return 0, err
	}
	b, err := json.Marshal(stored{Node: s.opt.Node, Session: rec})
	if err != nil {
		return 0, fmt.Errorf("session %s: encode its record: %w", rec.SessionID, err)
	}
	var rev uint64
	if revision == 0 {
		rev, err = s.kv.Create(ctx, k, b)
	} else {
		rev, err = s.kv.Update(ctx, k, b, revision)
	}
	if conflict(err) {
		if revision != 0 {
			if _, gerr := s.Get(ctx, rec.SessionID); errors.Is(gerr, live.ErrNoRecord) {
				return 0, gerr
			}
		}
		return 0, fmt.Errorf("session %s: %w", rec.SessionID, live.ErrConflict)
	}
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		err = fmt.Errorf("this node is not connected to NATS (it is reconnecting): %w", err)
	}
	if err != nil {
		return 0, fmt.Errorf("session %s: write its record: %w", rec.SessionID, err)
	}
	s.bump(rev + 1)
	s.own.put(rec)
	return rev, nil
}

// Delete implements live.StateStore.
func (s *Store) Delete(ctx context.Context, id string, revision uint64) error {
	if revision == 0 {
		return fmt.Errorf("session %s: %w (delete names no revision)", id, live.ErrConflict)
	}
	cur, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if cur.Revision != revision {
		return fmt.Errorf("session %s: %w (revision %d, not %d)", id, live.ErrConflict, cur.Revision, revision)
	}
	err = s.kv.Delete(ctx, id, jetstream.LastRevision(revision))
	if conflict(err) {
		return fmt.Errorf("session %s: %w", id, live.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("session %s: delete its record: %w", id, err)
	}
	s.own.drop(id)
	return nil
}

// Watch implements live.StateStore.
func (s *Store) Watch(ctx context.Context, after uint64) (live.Records, error) {
	for {
		s.mu.Lock()
		cur, ch := s.version, s.changes
		s.mu.Unlock()
		if after == 0 || cur > after {
			rs, err := s.List(ctx)
			return live.Records{Records: rs, Version: cur}, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return live.Records{}, fmt.Errorf("watch session records: %w", ctx.Err())
		}
	}
}

// CreateLog implements live.Store.
func (s *Store) CreateLog(ctx context.Context, id string, limits live.LogLimits) (live.EventLog, error) {
	return s.OpenLog(ctx, id, limits)
}

// OpenEventLog implements live.LogOpener: OpenLog as a live.EventLog, for a node that reads
// another node's session.
func (s *Store) OpenEventLog(ctx context.Context, id string, limits live.LogLimits) (live.EventLog, error) {
	return s.OpenLog(ctx, id, limits)
}

// OpenLog opens session id's log, as it stands on the stream.
func (s *Store) OpenLog(ctx context.Context, id string, limits live.LogLimits) (*Log, error) {
	k, err := key(id)
	if err != nil {
		return nil, err
	}
	return openLog(ctx, s.js, s.stream, s.subject+"."+k, id, limits, s.opt.Logger)
}

// Restore implements live.Store: the sessions this node wrote last. Another node's sessions
// are its own to restore (closing them here would close sessions that live elsewhere).
func (s *Store) Restore(ctx context.Context, limits live.LogLimits) ([]live.Restored, error) {
	recs, nodes, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []live.Restored
	for _, r := range recs {
		if nodes[r.Session.SessionID] != s.opt.Node {
			continue
		}
		l, err := s.OpenLog(ctx, r.Session.SessionID, limits)
		if err != nil {
			for _, o := range out {
				_ = o.Log.Close(ctx)
			}
			return nil, err
		}
		out = append(out, live.Restored{Session: r.Session, Revision: r.Revision, Log: l})
	}
	return out, nil
}

// Remove implements live.Store: the record and the session's subject go.
func (s *Store) Remove(ctx context.Context, id string) error {
	k, err := key(id)
	if err != nil {
		return err
	}
	if err := s.kv.Purge(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("session %s: forget its record: %w", id, err)
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return fmt.Errorf("session %s: event stream: %w", id, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(s.subject+"."+k)); err != nil {
		return fmt.Errorf("session %s: forget its events: %w", id, err)
	}
	s.own.drop(id)
	return nil
}

// Close implements live.Store: it stops watching the bucket; the connection is the caller's.
func (s *Store) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.done
		s.stop = nil
	}
	return nil
}

// conflict says a write lost its compare-and-set. A create that finds the key reports 10071;
// an update or delete from a stale revision reports ErrKeyRevisionMismatch, and a replicated
// stream code 10164.
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
