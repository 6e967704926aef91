// Package triggerkv keeps a nexus cluster's triggers on NATS JetStream (docs/cluster.md): the
// cron jobs, heartbeats and webhooks every node knows, in the key-value bucket
// NEXUS_<cluster>_TRIGGERS, and the claims that make each firing delivered once for the
// cluster, in NEXUS_<cluster>_FIRINGS. A Store is a trigger.JobStore and a trigger.Claimer.
package triggerkv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/trigger"
)

// Options configure a Store.
type Options struct {
	// Cluster names the cluster (letters, digits, '-' and '_'; default "nexus").
	Cluster string
	// Replicas of the buckets: 1 or 3 (default 1).
	Replicas int
	// Now is the clock of the records' times (default time.Now).
	Now func() time.Time
	// ClaimsMaxAge is how long the firings bucket keeps a claim (default DefaultClaimsMaxAge).
	ClaimsMaxAge time.Duration
	// Node names this node in its claims (who delivered a firing, for an operator).
	Node string
}

// DefaultClaimsMaxAge bounds the firings bucket: a firing's claim need only outlive the moment
// the nodes all find it due (the losers move the job's schedule on), a signed webhook call's
// for as long as a replay of it is refused (trigger.BodySignatureMemory, a week); a day more.
const DefaultClaimsMaxAge = trigger.BodySignatureMemory + 24*time.Hour

// Store is a trigger.JobStore and trigger.Claimer on JetStream key-value buckets.
type Store struct {
	js      jetstream.JetStream
	defs    jetstream.KeyValue // job.<id>, hook.<id>
	claims  jetstream.KeyValue // fire.<firing>, sig.<hook>.<hash>
	bucket  string
	now     func() time.Time
	node    string
	mu      sync.Mutex
	written uint64 // the last revision this store wrote to defs: a listing waits for it
}

var (
	_ trigger.JobStore   = (*Store)(nil)
	_ trigger.Claimer    = (*Store)(nil)
	_ trigger.JobWatcher = (*Store)(nil)
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Names returns the buckets of cluster's triggers: the definitions and the claims.
func Names(cluster string) (defs, claims string) {
	return "NEXUS_" + cluster + "_TRIGGERS", "NEXUS_" + cluster + "_FIRINGS"
}

// Open opens (creating when needed) the cluster's trigger buckets on nc; the connection stays
// the caller's.
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
	if opt.ClaimsMaxAge <= 0 {
		opt.ClaimsMaxAge = DefaultClaimsMaxAge
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s := &Store{js: js, now: opt.Now, node: opt.Node}
	defs, claims := Names(opt.Cluster)
	s.bucket = defs
	if s.defs, err = openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: defs, History: 1, Storage: jetstream.FileStorage, Replicas: opt.Replicas}); err != nil {
		return nil, err
	}
	if s.claims, err = openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: claims, History: 1, Storage: jetstream.FileStorage, Replicas: opt.Replicas, TTL: opt.ClaimsMaxAge}); err != nil {
		return nil, err
	}
	return s, nil
}

// openBucket opens a bucket, creating it, with reads from its stream's leader only: a
// follower may not yet hold a write this node just made (as jetstore's session bucket).
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			err = nil // another node made it
		}
		if err == nil {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("trigger bucket %s: %w", cfg.Bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("trigger bucket %s: %w", cfg.Bucket, err)
	}
	if c := st.CachedInfo().Config; c.AllowDirect {
		c.AllowDirect = false
		if _, err := js.UpdateStream(ctx, c); err != nil {
			return nil, fmt.Errorf("trigger bucket %s: read from its leader: %w", cfg.Bucket, err)
		}
		if kv, err = js.KeyValue(ctx, cfg.Bucket); err != nil {
			return nil, fmt.Errorf("trigger bucket %s: %w", cfg.Bucket, err)
		}
	}
	return kv, nil
}

// Close implements trigger.JobStore; the connection is the caller's.
func (s *Store) Close() error { return nil }

func (s *Store) wrote(rev uint64) {
	s.mu.Lock()
	s.written = max(s.written, rev)
	s.mu.Unlock()
}

// keys lists the bucket's keys under prefix (deleted ones too: a Get tells) from its stream's
// leader, once it holds what this store wrote: ListKeys reads through a consumer that may sit
// on a follower behind this node's write.
func (s *Store) keys(ctx context.Context, prefix string) ([]string, error) {
	st, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		return nil, fmt.Errorf("trigger bucket %s: %w", s.bucket, err)
	}
	s.mu.Lock()
	atLeast := s.written
	s.mu.Unlock()
	subj := "$KV." + s.bucket + "." + prefix
	for {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj+">"))
		if err != nil {
			return nil, fmt.Errorf("trigger bucket %s: list: %w", s.bucket, err)
		}
		if info.State.LastSeq >= atLeast {
			out := make([]string, 0, len(info.State.Subjects))
			for k := range info.State.Subjects {
				out = append(out, strings.TrimPrefix(k, "$KV."+s.bucket+"."))
			}
			return out, nil
		}
		select { // a leader elected a moment ago catches up on its own; nothing says when
		case <-ctx.Done():
			return nil, fmt.Errorf("trigger bucket %s: list: %w", s.bucket, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// list decodes every live entry under prefix, by key.
func list[T any](ctx context.Context, s *Store, prefix string, decode func([]byte) (T, error)) ([]T, error) {
	keys, err := s.keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	// Subjects come unordered; ids sort as their keys do.
	slices.Sort(keys)
	var out []T
	for _, k := range keys {
		e, err := s.defs.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted
		}
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", k, err)
		}
		v, err := decode(e.Value())
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", k, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func decodeJob(b []byte) (trigger.Job, error) {
	var j trigger.Job
	err := json.Unmarshal(b, &j)
	return j, err
}

// hookDoc is a hook as the bucket holds it: the hook and its secret.
type hookDoc struct {
	Hook   trigger.Hook `json:"hook"`
	Secret string       `json:"secret"`
}

func decodeHook(b []byte) (hookDoc, error) {
	var d hookDoc
	err := json.Unmarshal(b, &d)
	return d, err
}

// AddJob implements trigger.JobStore.
func (s *Store) AddJob(ctx context.Context, j trigger.Job, floor time.Duration) (trigger.Job, error) {
	j, err := trigger.PrepareJob(j, floor, s.now())
	if err != nil {
		return trigger.Job{}, err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return trigger.Job{}, fmt.Errorf("triggers: %w", err)
	}
	rev, err := s.defs.Create(ctx, "job."+j.ID, b)
	if conflict(err) {
		return trigger.Job{}, trigger.JobExists(j.ID)
	}
	if err != nil {
		return trigger.Job{}, fmt.Errorf("triggers: add job %s: %w", j.ID, err)
	}
	s.wrote(rev)
	return j, nil
}

// Jobs implements trigger.JobStore.
func (s *Store) Jobs(ctx context.Context) ([]trigger.Job, error) {
	return list(ctx, s, "job.", decodeJob)
}

// Job implements trigger.JobStore.
func (s *Store) Job(ctx context.Context, id string) (trigger.Job, error) {
	j, _, err := s.job(ctx, id)
	return j, err
}

func (s *Store) job(ctx context.Context, id string) (trigger.Job, uint64, error) {
	if !validID(id) {
		return trigger.Job{}, 0, trigger.NoJob(id)
	}
	e, err := s.defs.Get(ctx, "job."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return trigger.Job{}, 0, trigger.NoJob(id)
	}
	if err != nil {
		return trigger.Job{}, 0, fmt.Errorf("triggers: job %s: %w", id, err)
	}
	j, err := decodeJob(e.Value())
	if err != nil {
		return trigger.Job{}, 0, fmt.Errorf("triggers: job %s: %w", id, err)
	}
	return j, e.Revision(), nil
}

// validID says id can be a key token (an id that cannot names nothing stored).
func validID(id string) bool { return id != "" && nameRE.MatchString(id) }

// WatchJobs implements trigger.JobWatcher: the bucket's watcher on the jobs' keys, every
// node's writes (runs recorded included: a wake finds nothing due and sleeps again).
func (s *Store) WatchJobs(ctx context.Context, changed func()) error {
	w, err := s.defs.Watch(ctx, "job.>", jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("triggers: watch the jobs: %w", err)
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					changed()
				}
			}
		}
	}()
	return nil
}

// RemoveJob implements trigger.JobStore.
func (s *Store) RemoveJob(ctx context.Context, id string) error {
	return s.remove(ctx, "job."+id, validID(id), trigger.NoJob(id))
}

// remove deletes key from the revision read (a write in between: read again).
func (s *Store) remove(ctx context.Context, key string, valid bool, none error) error {
	if !valid {
		return none
	}
	for {
		e, err := s.defs.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return none
		}
		if err != nil {
			return fmt.Errorf("triggers: remove %s: %w", key, err)
		}
		err = s.defs.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		if conflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("triggers: remove %s: %w", key, err)
		}
		s.wrote(e.Revision() + 1)
		return nil
	}
}

// update rewrites key's value with change, from the revision it read: two nodes' updates at
// once are both applied, one after the other. found is false when there is no key.
func (s *Store) update(ctx context.Context, key string, change func([]byte) ([]byte, error)) (found bool, err error) {
	for {
		e, err := s.defs.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return true, fmt.Errorf("triggers: read %s: %w", key, err)
		}
		b, err := change(e.Value())
		if err != nil {
			return true, err
		}
		rev, err := s.defs.Update(ctx, key, b, e.Revision())
		if conflict(err) {
			continue
		}
		if err != nil {
			return true, fmt.Errorf("triggers: write %s: %w", key, err)
		}
		s.wrote(rev)
		return true, nil
	}
}

// RecordRun implements trigger.JobStore.
func (s *Store) RecordRun(ctx context.Context, id string, r trigger.Run) error {
	if !validID(id) {
		return trigger.NoJob(id)
	}
	found, err := s.update(ctx, "job."+id, func(b []byte) ([]byte, error) {
		j, err := decodeJob(b)
		if err != nil {
			return nil, fmt.Errorf("triggers: job %s: %w", id, err)
		}
		return json.Marshal(r.Apply(j, s.now()))
	})
	if err == nil && !found {
		return trigger.NoJob(id)
	}
	return err
}

// AddHook implements trigger.JobStore.
func (s *Store) AddHook(ctx context.Context, h trigger.Hook) (trigger.Hook, error) {
	h, secret, err := trigger.PrepareHook(h, s.now())
	if err != nil {
		return trigger.Hook{}, err
	}
	b, err := json.Marshal(hookDoc{Hook: h, Secret: secret}) //nolint:gosec // the bucket is where the secret is kept (as triggers.db's secret column); Hooks never answers it
	if err != nil {
		return trigger.Hook{}, fmt.Errorf("triggers: %w", err)
	}
	rev, err := s.defs.Create(ctx, "hook."+h.ID, b)
	if conflict(err) {
		return trigger.Hook{}, trigger.HookExists(h.ID)
	}
	if err != nil {
		return trigger.Hook{}, fmt.Errorf("triggers: add hook %s: %w", h.ID, err)
	}
	s.wrote(rev)
	h.Secret = secret
	return h, nil
}

// Hooks implements trigger.JobStore: the hooks without their secrets.
func (s *Store) Hooks(ctx context.Context) ([]trigger.Hook, error) {
	return list(ctx, s, "hook.", func(b []byte) (trigger.Hook, error) {
		d, err := decodeHook(b)
		return d.Hook, err
	})
}

// Hook implements trigger.JobStore.
func (s *Store) Hook(ctx context.Context, id string) (trigger.Hook, string, bool, error) {
	if !validID(id) {
		return trigger.Hook{}, "", false, nil
	}
	e, err := s.defs.Get(ctx, "hook."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return trigger.Hook{}, "", false, nil
	}
	if err != nil {
		return trigger.Hook{}, "", false, fmt.Errorf("triggers: hook %s: %w", id, err)
	}
	d, err := decodeHook(e.Value())
	if err != nil {
		return trigger.Hook{}, "", false, fmt.Errorf("triggers: hook %s: %w", id, err)
	}
	return d.Hook, d.Secret, true, nil
}

// HookCalled implements trigger.JobStore.
func (s *Store) HookCalled(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	_, err := s.update(ctx, "hook."+id, func(b []byte) ([]byte, error) {
		d, err := decodeHook(b)
		if err != nil {
			return nil, fmt.Errorf("triggers: hook %s: %w", id, err)
		}
		d.Hook.LastCalledAt = s.now().UnixMilli()
		d.Hook.Calls++
		return json.Marshal(d) //nolint:gosec // the stored secret, kept as it was
	})
	return err
}

// RemoveHook implements trigger.JobStore. Its signatures' claims expire with the bucket's age.
func (s *Store) RemoveHook(ctx context.Context, id string) error {
	return s.remove(ctx, "hook."+id, validID(id), trigger.NoHook(id))
}

// sigKey is a signature's claim: the signature hashed, so that any text makes a key.
func sigKey(hook, sig string) string {
	sum := sha256.Sum256([]byte(sig))
	return "sig." + hook + "." + hex.EncodeToString(sum[:16])
}

// ClaimSignature implements trigger.JobStore: the claim is created in the firings bucket with
// the time it may be forgotten; a claim found past that time is taken over by compare-and-set.
func (s *Store) ClaimSignature(ctx context.Context, hook, sig string, expires time.Time) (bool, error) {
	if !validID(hook) {
		return false, trigger.NoHook(hook)
	}
	k := sigKey(hook, sig)
	val := []byte(strconv.FormatInt(expires.UnixMilli(), 10))
	_, err := s.claims.Create(ctx, k, val)
	if err == nil {
		return true, nil
	}
	if !conflict(err) {
		return false, fmt.Errorf("triggers: claim a signature of hook %s: %w", hook, err)
	}
	e, err := s.claims.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return s.ClaimSignature(ctx, hook, sig, expires) // given back in between
	}
	if err != nil {
		return false, fmt.Errorf("triggers: claim a signature of hook %s: %w", hook, err)
	}
	if until, perr := strconv.ParseInt(string(e.Value()), 10, 64); perr == nil && until > s.now().UnixMilli() {
		return false, nil
	}
	_, err = s.claims.Update(ctx, k, val, e.Revision())
	if conflict(err) {
		return false, nil // another call took it over first
	}
	if err != nil {
		return false, fmt.Errorf("triggers: claim a signature of hook %s: %w", hook, err)
	}
	return true, nil
}

// UnclaimSignature implements trigger.JobStore.
func (s *Store) UnclaimSignature(ctx context.Context, hook, sig string) error {
	if !validID(hook) {
		return nil
	}
	if err := s.claims.Delete(ctx, sigKey(hook, sig)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("triggers: give back a signature of hook %s: %w", hook, err)
	}
	return nil
}

// Claimed is a firing's claim in the firings bucket: when, and by which node.
type Claimed struct {
	At   int64  `json:"at"`
	Node string `json:"node,omitempty"`
}

// Claim implements trigger.Claimer: the firing's key created in the firings bucket; the
// bucket's create succeeds for one writer only, whichever node it comes from.
func (s *Store) Claim(ctx context.Context, firing string) (bool, error) {
	val, err := json.Marshal(Claimed{At: s.now().UnixMilli(), Node: s.node})
	if err != nil {
		return false, fmt.Errorf("triggers: claim firing %s: %w", firing, err)
	}
	_, err = s.claims.Create(ctx, "fire."+firing, val)
	if conflict(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("triggers: claim firing %s: %w", firing, err)
	}
	return true, nil
}

// conflict says a write lost its compare-and-set: a create that finds the key, an update or
// delete from a stale revision (a replicated stream reports code 10071 or 10164).
func conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
