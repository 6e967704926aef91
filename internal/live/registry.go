// Package live is the live-session registry: it owns every session object and its status,
// enforces the cap, expiry and idle reaping, and keeps each session's ordered event log in a
// Store (in memory, or on disk so a restarted gateway still answers for the previous run).
package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/nexus-run/nexus/internal/abi"
)

// Config tunes a Registry. Zero values take the defaults below.
type Config struct {
	// Node names this registry's node in a cluster: its sessions carry it ("": no cluster).
	Node        string
	MaxSessions int           // live (active or paused) sessions at once; default 64
	IdleTimeout time.Duration // close sessions idle this long; default 30m, negative disables
	Retention   time.Duration // keep closed sessions visible this long; default 1h
	Sweep       time.Duration // how often expiry and idleness are checked; default 1s
	// NodeLost is how long a node of a cluster may miss its heartbeats before the others
	// mark its sessions error with reason node-lost; default 10s.
	NodeLost time.Duration
	// EphemeralGrace is how long an ephemeral session may wait for its owner; default 30s.
	EphemeralGrace time.Duration
	Log            LogLimits
	// Store keeps records and event logs; nil keeps them in memory (MemoryStore).
	Store Store
	// Router carries the commands for another node's sessions to their node (a cluster's
	// request/reply); nil: another node's session is not found here.
	Router Router
	Now    func() time.Time
	NewID  func() string
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMaxSessions = 64
	DefaultIdleTimeout = 30 * time.Minute
	DefaultRetention   = time.Hour
	DefaultNodeLost    = 10 * time.Second
)

func (c *Config) fill() {
	if c.MaxSessions <= 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Retention <= 0 {
		c.Retention = DefaultRetention
	}
	if c.NodeLost <= 0 {
		c.NodeLost = DefaultNodeLost
	}
	if c.Sweep <= 0 {
		c.Sweep = time.Second
	}
	if c.EphemeralGrace <= 0 {
		c.EphemeralGrace = 30 * time.Second
	}
	if c.Log.Events <= 0 {
		c.Log.Events = 8192
	}
	if c.Log.Bytes <= 0 {
		c.Log.Bytes = 8 << 20
	}
	if c.Log.Pinned <= 0 {
		c.Log.Pinned = 1024
	}
	if c.Log.MaxStall <= 0 {
		c.Log.MaxStall = DefaultMaxStall
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = NewSessionID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Store == nil {
		c.Store = NewMemoryStore()
	}
}

// NewSessionID returns a time-ordered UUID (v7), falling back to random hex.
func NewSessionID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxTTLSeconds is the longest TTL a time.Duration can hold (about 292 years).
const maxTTLSeconds = int64(math.MaxInt64 / time.Second)

// Registry holds the live sessions of one gateway.
type Registry struct {
	cfg Config
	// base is the context of what the registry does on its own behalf (appends, closes): New's,
	// without its cancellation.
	base context.Context

	// lostMu serializes the checks of the nodes' heartbeats (Sweep may be called beside the
	// sweeper) and guards lostSeen: for each node found lost, the heartbeat whose sessions
	// this node has marked, so the sweeps after do not list the store again for it.
	lostMu   sync.Mutex
	lostSeen map[string]time.Time

	// foreignLogs are other nodes' sessions' logs this node's readers hold open (foreign);
	// owners the nodes of other nodes' sessions this node has sent commands to (route).
	foreignMu   sync.Mutex
	foreignLogs map[string]*sharedLog
	owners      map[string]string
	touched     time.Time // when the owners of foreignLogs were last told (touchRemote)

	mu       sync.Mutex
	kinds    map[abi.SessionType]Kind
	sessions map[string]*session
	live     int // active + paused + reserved
	down     bool
	version  uint64        // counts changes to the sessions (WatchSessions)
	changes  chan struct{} // closed at the next change

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	closed   sync.Once
}

// New builds a registry serving the given kinds (more may be registered later), restores the
// sessions its Store kept from an earlier registry, and starts its sweeper. A restored session
// that was still live when that registry ended (its process died with it) is closed with
// reason gateway-restart.
func New(ctx context.Context, cfg Config, kinds ...Kind) (*Registry, error) {
	cfg.fill()
	r := &Registry{cfg: cfg, base: context.WithoutCancel(ctx), kinds: map[abi.SessionType]Kind{}, sessions: map[string]*session{}, stop: make(chan struct{}), changes: make(chan struct{}), version: 1}
	for _, k := range kinds {
		if err := r.Register(k); err != nil {
			return nil, err
		}
	}
	if err := r.restore(ctx); err != nil {
		return nil, err
	}
	if lv, ok := cfg.Store.(Liveness); ok && cfg.Node != "" {
		// A node beats before it can make a session, not only on its sweeps: one gone
		// before its first sweep would have sessions no other node ever finds lost (it never
		// beat, so it is no node they know).
		if err := lv.Beat(ctx, r.now()); err != nil {
			cfg.Logger.Warn("heartbeat", "node", cfg.Node, "err", err)
		}
	}
	r.wg.Add(1)
	go r.sweeper(r.base) // ctx bounds the restore; the sweeper runs until Shutdown
	return r, nil
}

// Register adds a kind. An Observer receives its read-only view of the registry here.
func (r *Registry) Register(k Kind) error {
	r.mu.Lock()
	if _, dup := r.kinds[k.Type()]; dup {
		r.mu.Unlock()
		return fmt.Errorf("session type %q is already registered", k.Type())
	}
	r.kinds[k.Type()] = k
	r.mu.Unlock()
	if o, ok := k.(Observer); ok {
		o.Attach(view{r})
	}
	return nil
}

// View returns a read-only view of the registry.
func (r *Registry) View() View { return view{r} }

// served lists the registered session types, for errors that say what to ask for instead.
func (r *Registry) served() string {
	r.mu.Lock()
	types := make([]string, 0, len(r.kinds))
	for t := range r.kinds {
		types = append(types, string(t))
	}
	r.mu.Unlock()
	if len(types) == 0 {
		return "none"
	}
	slices.Sort(types)
	return strings.Join(types, ", ")
}

// changed records a change to the sessions and wakes WatchSessions.
func (r *Registry) changed() {
	r.mu.Lock()
	r.changedLocked()
	r.mu.Unlock()
}

func (r *Registry) changedLocked() {
	r.version++
	close(r.changes)
	r.changes = make(chan struct{})
}

func (r *Registry) now() time.Time { return r.cfg.Now() }

// Config returns the effective configuration.
func (r *Registry) Config() Config { return r.cfg }

type session struct {
	id        string
	ephemeral bool
	log       *sessionLog

	ctl sync.Mutex // serializes control commands and close

	recMu sync.Mutex // serializes writes of the session's record
	rev   uint64     // the record's revision in the store, as the registry last wrote it

	mu          sync.Mutex
	obj         abi.Session
	inst        Instance
	expires     time.Time
	lastActive  time.Time
	watchers    int
	holders     int
	everHeld    bool
	closeReason string
	closedAt    time.Time
	// life is the session's lifetime, given to its kind (Sink.Context), made on first use (a
	// terminal never asks for it, and an idle session must stay small) and cancelled once the
	// session has closed and its instance is stopped (lifeOver).
	life     context.Context
	stopLife context.CancelFunc
	lifeOver bool
}

// lifetime returns the session's lifetime context, making it on first use.
func (s *session) lifetime(base context.Context) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life == nil {
		s.life, s.stopLife = context.WithCancel(base)
		if s.lifeOver {
			s.stopLife()
		}
	}
	return s.life
}

// endLife cancels the session's lifetime, now and for whoever asks for it later.
func (s *session) endLife() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lifeOver = true
	if s.stopLife != nil {
		s.stopLife()
	}
}

func (s *session) publish(now time.Time, typ abi.EventType, payload any) {
	s.mu.Lock()
	s.lastActive = now
	s.mu.Unlock()
	s.log.append(&Event{Type: typ, Time: now, SessionID: s.id, Payload: payload})
}

func (s *session) publishAll(now time.Time, typ abi.EventType, payloads []any) {
	s.mu.Lock()
	s.lastActive = now
	s.mu.Unlock()
	events := make([]*Event, len(payloads))
	all := make([]Event, len(payloads)) // one allocation for the step
	for i, p := range payloads {
		all[i] = Event{Type: typ, Time: now, SessionID: s.id, Payload: p}
		events[i] = &all[i]
	}
	s.log.appendAll(events...)
}

// instance is the session's backend, or the error of a session closed since it was looked up
// (a closed session has none).
func (s *session) instance() (Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return nil, finalError(s)
	}
	return s.inst, nil
}

func (s *session) snapshot() abi.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.obj
	if !s.lastActive.IsZero() && out.Status == abi.StatusActive {
		out.LastActivityAt = abi.FormatTime(s.lastActive)
	}
	out.Metadata = make(map[string]any, len(s.obj.Metadata))
	for k, v := range s.obj.Metadata {
		out.Metadata[k] = v
	}
	return out
}

// Create validates req, reserves a slot under the cap, starts the kind and returns the session.
func (r *Registry) Create(ctx context.Context, req abi.CreateRequest) (abi.Session, error) {
	r.mu.Lock()
	kind, ok := r.kinds[req.Type]
	r.mu.Unlock()
	if !ok {
		if !req.Type.Valid() {
			return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "unknown session type %q (this gateway serves: %s)", req.Type, r.served())
		}
		return abi.Session{}, abi.Errorf(abi.CodeCapabilityUnsupported, "", "session type %q is not served by this gateway (it serves: %s)", req.Type, r.served())
	}
	if req.Transport == "" {
		req.Transport = abi.TransportWebSocket
	}
	if !req.Transport.Valid() {
		return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "unknown transport %q (want websocket, polling, hybrid or local)", req.Transport)
	}
	if req.TTLSeconds < 0 {
		return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "ttlSeconds must not be negative")
	}
	if req.TTLSeconds > maxTTLSeconds { // beyond this, seconds*time.Second overflows into the past
		return abi.Session{}, abi.Errorf(abi.CodeInvalidArgument, "", "ttlSeconds must be at most %d", maxTTLSeconds)
	}

	r.mu.Lock()
	if r.down {
		r.mu.Unlock()
		return abi.Session{}, abi.Errorf(abi.CodeResourceUnavailable, "", "gateway is shutting down")
	}
	if r.live >= r.cfg.MaxSessions {
		r.mu.Unlock()
		return abi.Session{}, abi.Errorf(abi.CodeLimitExceeded, "", "session limit reached (%d live sessions); close one or raise --max-sessions", r.cfg.MaxSessions)
	}
	r.live++ // reserved before the (slow) start so concurrent creates cannot overshoot
	r.mu.Unlock()

	now := r.now()
	s := &session{
		id:         r.newID(),
		ephemeral:  req.Ephemeral,
		lastActive: now,
		obj: abi.Session{
			Type:         req.Type,
			CreatedAt:    abi.FormatTime(now),
			Context:      req.Context,
			Transport:    req.Transport,
			Status:       abi.StatusActive,
			Capabilities: kind.Capabilities(),
			Metadata:     map[string]any{},
			Node:         r.cfg.Node,
		},
	}
	s.obj.SessionID = s.id
	if req.TTLSeconds > 0 {
		s.expires = now.Add(time.Duration(req.TTLSeconds) * time.Second)
		s.obj.ExpiresAt = abi.FormatTime(s.expires)
	}
	if req.Ephemeral {
		s.obj.Metadata["ephemeral"] = true
	}
	limits := r.cfg.Log
	if dk, ok := kind.(DataKeeper); ok && dk.DataKeptElsewhere() {
		limits.VolatileData = true
	}
	var err error
	s.rev, err = r.cfg.Store.Put(ctx, s.snapshot(), 0)
	for try := 0; errors.Is(err, ErrConflict) && try < 10; try++ {
		// A session the store keeps but could not restore holds the id: take another.
		s.id = r.newID()
		s.obj.SessionID = s.id
		s.rev, err = r.cfg.Store.Put(ctx, s.snapshot(), 0)
	}
	var elog EventLog
	if err == nil {
		if elog, err = r.cfg.Store.CreateLog(ctx, s.id, limits); err != nil {
			if rerr := r.cfg.Store.Remove(context.WithoutCancel(ctx), s.id); rerr != nil {
				r.cfg.Logger.Warn("forget a session whose log could not be created", "id", s.id, "err", rerr)
			}
		}
	}
	if err != nil {
		r.mu.Lock()
		r.live--
		r.mu.Unlock()
		return abi.Session{}, &abi.Error{Code: abi.CodeResourceUnavailable, Message: "record the new session", Err: err}
	}
	s.log = r.newLog(s.id, elog)
	sink := &regSink{r: r, s: s}
	s.publish(now, abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnecting, Message: "starting " + string(req.Type) + " session", SessionStatus: abi.StatusActive})

	inst, err := kind.Start(ctx, sink, req)
	if err != nil {
		s.endLife()
		r.mu.Lock()
		r.live--
		r.mu.Unlock()
		s.log.finish()
		if rerr := r.cfg.Store.Remove(context.WithoutCancel(ctx), s.id); rerr != nil {
			r.cfg.Logger.Warn("forget a session that did not start", "id", s.id, "err", rerr)
		}
		if abi.CodeOf(err) == abi.CodeInternal {
			return abi.Session{}, &abi.Error{Code: abi.CodeResourceUnavailable, Message: "start " + string(req.Type) + " session", Err: err}
		}
		return abi.Session{}, err
	}
	s.mu.Lock()
	s.inst = inst
	s.mu.Unlock()
	r.mu.Lock()
	r.sessions[s.id] = s
	down := r.down
	r.changedLocked()
	r.mu.Unlock()
	if down { // Shutdown began while we were starting: it did not see this session
		r.finish(ctx, s, abi.CloseShutdown, nil)
		return abi.Session{}, abi.Errorf(abi.CodeResourceUnavailable, "", "gateway is shutting down")
	}
	if r.cfg.Node != "" {
		// The record holds what the kind's start set (an ai-chat's backend, model, key):
		// another node lists the session from it, and takes a conversation over with it.
		if err := r.putRecord(context.WithoutCancel(ctx), s); err != nil {
			r.cfg.Logger.Warn("record a started session's metadata", "id", s.id, "err", err)
		}
	}
	s.publish(r.now(), abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected, Message: "session active", SessionStatus: abi.StatusActive})
	if b, ok := inst.(Beginner); ok {
		b.Begin()
	}
	r.cfg.Logger.Info("session created", "id", s.id, "type", req.Type)
	return s.snapshot(), nil
}

// newID returns an id no session of the registry has (a restored session keeps its id, and a
// test's id source starts again from the same first id).
func (r *Registry) newID() string {
	for {
		id := r.cfg.NewID()
		r.mu.Lock()
		_, taken := r.sessions[id]
		r.mu.Unlock()
		if !taken {
			return id
		}
	}
}

func (r *Registry) newLog(id string, l EventLog) *sessionLog {
	return newSessionLog(r.base, l, r.cfg.Log, func(err error) {
		r.cfg.Logger.Warn("session event log", "id", id, "err", err)
	})
}

func (r *Registry) lookup(id string) (*session, error) {
	r.mu.Lock()
	s, ok := r.sessions[id]
	r.mu.Unlock()
	if !ok {
		return nil, abi.Errorf(abi.CodeSessionNotFound, id, "no session %q", id)
	}
	return s, nil
}

// usable returns a session that may be used: it detects expiry on first use, as docs/ABI.md promises.
func (r *Registry) usable(ctx context.Context, id string) (*session, error) {
	s, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	now := r.expireIfDue(ctx, s)
	s.mu.Lock()
	if s.obj.Status.Final() {
		s.mu.Unlock()
		r.movedElsewhere(ctx, s)
		s.mu.Lock()
		defer s.mu.Unlock()
		return nil, finalError(s)
	}
	defer s.mu.Unlock()
	s.lastActive = now
	return s, nil
}

// movedElsewhere takes into s, a closed session of this node of a cluster, the movedTo another
// node wrote on its record since (the node that took its conversation over while this one was
// cut off): this node's answers for it then name where it went, as the other nodes' do, and a
// client following it (nexus ai send) goes there instead of stopping at "closed".
func (r *Registry) movedElsewhere(ctx context.Context, s *session) {
	if r.cfg.Node == "" {
		return
	}
	s.mu.Lock()
	_, has := s.obj.Metadata[MovedToField]
	final := s.obj.Status.Final()
	s.mu.Unlock()
	if !final || has {
		return
	}
	rec, err := r.cfg.Store.Get(ctx, s.id)
	if err != nil {
		return // answered from memory, as a node alone would
	}
	if to, _ := rec.Session.Metadata[MovedToField].(string); to != "" {
		s.mu.Lock()
		s.obj.Metadata[MovedToField] = to
		s.mu.Unlock()
	}
}

func finalError(s *session) error {
	switch s.closeReason {
	case abi.CloseTimeout, abi.CloseIdle:
		return abi.Errorf(abi.CodeSessionExpired, s.id, "session %s expired (%s) at %s", s.id, s.closeReason, abi.FormatTime(s.closedAt))
	}
	if s.obj.Status == abi.StatusError {
		return abi.Errorf(abi.CodeSessionClosed, s.id, "session %s failed and was closed at %s", s.id, abi.FormatTime(s.closedAt))
	}
	if to, _ := s.obj.Metadata[MovedToField].(string); to != "" {
		return abi.Errorf(abi.CodeSessionClosed, s.id, "session %s was closed (%s) at %s; it moved to session %s", s.id, s.closeReason, abi.FormatTime(s.closedAt), to)
	}
	return abi.Errorf(abi.CodeSessionClosed, s.id, "session %s was closed (%s) at %s", s.id, s.closeReason, abi.FormatTime(s.closedAt))
}

// MovedToField is the metadata field of a session a gateway restart closed that names the
// session the next gateway opened in its place (same type, same conversation).
const MovedToField = "movedTo"

// Moved records on the closed session id that to took its place: its object's metadata
// (movedTo, kept in the store) and the SESSION_CLOSED error it answers with name to.
func (r *Registry) Moved(ctx context.Context, id, to string) error {
	s, err := r.lookup(id)
	if err != nil && r.cfg.Node != "" {
		// Another node's session (a lost node's, taken over here): its record, by
		// compare-and-set.
		return r.movedForeign(ctx, id, to, err)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	if !s.obj.Status.Final() {
		s.mu.Unlock()
		return abi.Errorf(abi.CodeInvalidArgument, id, "session %s is still %s: only a closed session moves", id, s.obj.Status)
	}
	s.obj.Metadata[MovedToField] = to
	s.mu.Unlock()
	r.changed()
	if err := r.putRecord(context.WithoutCancel(ctx), s); err != nil {
		return fmt.Errorf("record where session %s moved: %w", id, err)
	}
	return nil
}

func (r *Registry) movedForeign(ctx context.Context, id, to string, lerr error) error {
	for attempt := 0; ; attempt++ {
		rec, err := r.cfg.Store.Get(ctx, id)
		if err != nil {
			return foreignErr(id, lerr, err)
		}
		obj := rec.Session
		if !obj.Status.Final() {
			return abi.Errorf(abi.CodeInvalidArgument, id, "session %s is still %s: only a closed session moves", id, obj.Status)
		}
		md := make(map[string]any, len(obj.Metadata)+1)
		maps.Copy(md, obj.Metadata)
		md[MovedToField] = to
		obj.Metadata = md
		_, err = r.cfg.Store.Put(ctx, obj, rec.Revision)
		if errors.Is(err, ErrConflict) && attempt < 5 {
			continue // written since it was read: read again
		}
		if err != nil {
			return fmt.Errorf("record where session %s moved: %w", id, err)
		}
		r.changed()
		return nil
	}
}

// Get returns the session object, whatever its status (closed sessions stay visible for the
// retention period). An expired session is closed first. A node of a cluster answers for the
// other nodes' sessions too, from their records.
func (r *Registry) Get(ctx context.Context, id string) (abi.Session, error) {
	s, err := r.lookup(id)
	if err != nil && r.cfg.Node != "" {
		// Another node's session, as its record in the cluster's store says.
		rec, rerr := r.cfg.Store.Get(ctx, id)
		if rerr == nil && rec.Session.Node != "" {
			return rec.Session, nil // another node's, or one of this node's another node wrote last
		}
		if rerr != nil {
			return abi.Session{}, foreignErr(id, err, rerr)
		}
	}
	if err != nil {
		return abi.Session{}, err
	}
	// Detect expiry as usable does, but reading a session is not using it: it must not reset
	// the idle timer, or anything that watches `session get` would keep sessions alive forever.
	r.expireIfDue(ctx, s)
	r.movedElsewhere(ctx, s)
	return s.snapshot(), nil
}

// expireIfDue closes s with reason timeout when its TTL has passed, and returns the time it
// checked against.
func (r *Registry) expireIfDue(ctx context.Context, s *session) time.Time {
	now := r.now()
	s.mu.Lock()
	expired := !s.expires.IsZero() && !now.Before(s.expires) && !s.obj.Status.Final()
	s.mu.Unlock()
	if expired {
		r.finish(ctx, s, abi.CloseTimeout, nil)
	}
	return now
}

// Check returns nil when the session is usable, or the error a command using it would get.
func (r *Registry) Check(ctx context.Context, id string) error {
	_, err := r.usable(ctx, id)
	return err
}

// List returns live sessions (active, paused), and with all also the retained closed ones,
// oldest first. A registry that is a node of a cluster (Config.Node) lists the other nodes'
// sessions too, from the records they keep in the shared store, each with its node.
func (r *Registry) List(ctx context.Context, all bool) ([]abi.Session, error) {
	out := r.list(all)
	if r.cfg.Node == "" {
		return out, nil
	}
	recs, err := r.cfg.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the cluster's sessions: %w", err)
	}
	return r.withRecords(out, recs, all), nil
}

// withRecords adds to out, this registry's sessions, the other nodes' sessions of recs.
func (r *Registry) withRecords(out []abi.Session, recs []Record, all bool) []abi.Session {
	r.mu.Lock()
	for _, rec := range recs {
		o := rec.Session
		// The registry's sessions are its objects, fresher than their records. A record of this
		// node's that the registry does not hold was written last by another node (its session
		// marked node-lost while this node was gone): it is listed from the record.
		if _, mine := r.sessions[o.SessionID]; mine || o.Node == "" {
			continue
		}
		if all || !o.Status.Final() {
			out = append(out, o)
		}
	}
	r.mu.Unlock()
	sortSessions(out)
	return out
}

func (r *Registry) list(all bool) []abi.Session {
	r.mu.Lock()
	ss := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		ss = append(ss, s)
	}
	r.mu.Unlock()
	out := make([]abi.Session, 0, len(ss))
	for _, s := range ss {
		o := s.snapshot()
		if all || !o.Status.Final() {
			out = append(out, o)
		}
	}
	sortSessions(out)
	return out
}

// sortSessions orders sessions oldest first.
func sortSessions(out []abi.Session) {
	slices.SortFunc(out, func(a, b abi.Session) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt < b.CreatedAt {
				return -1
			}
			return 1
		}
		if a.SessionID < b.SessionID {
			return -1
		}
		return 1
	})
}

// Send delivers input to a session and returns what it did (see SendResult). Another node's
// session's input goes to its node (Config.Router).
func (r *Registry) Send(ctx context.Context, id string, req SendRequest) (SendResult, error) {
	if res, handled, err := remote(ctx, r, id, func(rt Router, node string) (SendResult, error) { return rt.Send(ctx, node, id, req) }); handled {
		return res, err
	}
	return r.sendLocal(ctx, id, req)
}

func (r *Registry) sendLocal(ctx context.Context, id string, req SendRequest) (SendResult, error) {
	s, err := r.usable(ctx, id)
	if err != nil {
		return SendResult{}, err
	}
	if !s.obj.Capabilities.Send {
		return SendResult{}, abi.Errorf(abi.CodeCapabilityUnsupported, id, "%s sessions do not accept input", s.obj.Type)
	}
	inst, err := s.instance()
	if err != nil {
		return SendResult{}, err
	}
	// Read before the instance sees the input, so every event the input causes is after it.
	after, err := s.log.lastSeq(ctx)
	if err != nil {
		return SendResult{}, &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: "read the last sequence number", Err: err}
	}
	res, err := inst.Send(ctx, req)
	if err != nil {
		return SendResult{}, wrapKindErr(id, "send", err)
	}
	res.AfterSeq = after
	return res, nil
}

// Run runs one command in a session that supports it and returns its structured result, on
// the session's node.
func (r *Registry) Run(ctx context.Context, id string, req abi.RunRequest) (any, error) {
	if res, handled, err := remote(ctx, r, id, func(rt Router, node string) (any, error) { return rt.Run(ctx, node, id, req) }); handled {
		return res, err
	}
	return r.runLocal(ctx, id, req)
}

func (r *Registry) runLocal(ctx context.Context, id string, req abi.RunRequest) (any, error) {
	s, err := r.usable(ctx, id)
	if err != nil {
		return nil, err
	}
	inst, err := s.instance()
	if err != nil {
		return nil, err
	}
	rn, ok := inst.(Runner)
	if !ok || !s.obj.Capabilities.Send {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, id, "%s sessions cannot run commands", s.obj.Type)
	}
	if req.Command == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, id, "run needs a command")
	}
	res, err := rn.Run(ctx, req)
	if err != nil {
		return nil, wrapKindErr(id, "run", err)
	}
	s.mu.Lock()
	s.lastActive = r.now()
	s.mu.Unlock()
	return res, nil
}

func wrapKindErr(id, op string, err error) error {
	if abi.CodeOf(err) != abi.CodeInternal {
		return err
	}
	return &abi.Error{Code: abi.CodeResourceUnavailable, SessionID: id, Message: op, Err: err}
}

// Control runs a control command and returns the ABI's control response data, on the
// session's node.
func (r *Registry) Control(ctx context.Context, id string, req abi.ControlRequest) (*abi.ControlData, error) {
	if !req.Command.Valid() {
		return nil, abi.Errorf(abi.CodeInvalidArgument, id, "unknown command %q (want interrupt, close, resize, restart, pause, resume, confirm, compact, spawn or queue)", req.Command)
	}
	if res, handled, err := remote(ctx, r, id, func(rt Router, node string) (*abi.ControlData, error) { return rt.Control(ctx, node, id, req) }); handled {
		return res, err
	}
	return r.controlLocal(ctx, id, req)
}

func (r *Registry) controlLocal(ctx context.Context, id string, req abi.ControlRequest) (*abi.ControlData, error) {
	if !req.Command.Valid() {
		return nil, abi.Errorf(abi.CodeInvalidArgument, id, "unknown command %q (want interrupt, close, resize, restart, pause, resume, confirm, compact, spawn or queue)", req.Command)
	}
	if req.Command == abi.CommandClose {
		obj, err := r.closeLocal(ctx, id, abi.CloseRequested)
		if err != nil {
			return nil, err
		}
		return &abi.ControlData{SessionID: id, Command: req.Command, Result: obj}, nil
	}
	s, err := r.usable(ctx, id)
	if err != nil {
		return nil, err
	}
	if !s.obj.Capabilities.Allows(req.Command) {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, id, "%s sessions do not support %s", s.obj.Type, req.Command)
	}
	s.ctl.Lock()
	defer s.ctl.Unlock()
	s.mu.Lock()
	inst, status := s.inst, s.obj.Status
	s.mu.Unlock()
	if status.Final() {
		return nil, finalError(s)
	}
	switch req.Command {
	case abi.CommandPause, abi.CommandResume:
		if rs, ok := inst.(Resumer); ok && req.Command == abi.CommandResume && status == abi.StatusActive {
			res, err := rs.Resume(ctx)
			if err != nil {
				return nil, wrapKindErr(id, string(req.Command), err)
			}
			return &abi.ControlData{SessionID: id, Command: req.Command, Result: res}, nil
		}
		to := abi.StatusPaused
		if req.Command == abi.CommandResume {
			to = abi.StatusActive
		}
		if err := r.transition(s, to); err != nil {
			return nil, err
		}
		if p, ok := inst.(Pauser); ok {
			p.SetPaused(to == abi.StatusPaused)
		}
		return &abi.ControlData{SessionID: id, Command: req.Command, Result: map[string]any{"status": to}}, nil
	case abi.CommandResize:
		if req.Width <= 0 || req.Height <= 0 || req.Width > 10000 || req.Height > 10000 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, id, "resize needs width and height between 1 and 10000 (got %dx%d)", req.Width, req.Height)
		}
	case abi.CommandRestart:
		s.publish(r.now(), abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnecting, Message: "restarting", SessionStatus: status})
	}
	res, err := inst.Control(ctx, req)
	if err != nil {
		if req.Command == abi.CommandRestart {
			go r.finish(context.WithoutCancel(ctx), s, abi.CloseError, nil)
		}
		return nil, wrapKindErr(id, string(req.Command), err)
	}
	switch req.Command {
	case abi.CommandInterrupt:
		s.publish(r.now(), abi.EventInterrupt, abi.InterruptPayload{Type: abi.PayloadInterrupt, Reason: abi.ReasonUserRequested})
	case abi.CommandRestart:
		s.publish(r.now(), abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected, Message: "restarted", SessionStatus: status})
	}
	return &abi.ControlData{SessionID: id, Command: req.Command, Result: res}, nil
}

// transition moves a live session between active and paused.
func (r *Registry) transition(s *session, to abi.Status) error {
	s.mu.Lock()
	from := s.obj.Status
	if !validTransition(from, to) {
		s.mu.Unlock()
		return abi.Errorf(abi.CodeInvalidArgument, s.id, "session %s is %s; cannot become %s", s.id, from, to)
	}
	s.obj.Status = to
	s.mu.Unlock()
	r.changed()
	state := abi.StateConnected
	if to == abi.StatusPaused {
		state = abi.StateIdle
	}
	s.publish(r.now(), abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: state, Message: "session " + string(to), SessionStatus: to})
	return nil
}

// validTransition is the status machine: active <-> paused, and either to a final status.
func validTransition(from, to abi.Status) bool {
	switch from {
	case abi.StatusActive:
		return to == abi.StatusPaused || to.Final()
	case abi.StatusPaused:
		return to == abi.StatusActive || to.Final()
	}
	return false
}

// Close closes a session on request and returns the session object with its final status.
// Another node's session is closed by its node.
func (r *Registry) Close(ctx context.Context, id string, reason string) (abi.Session, error) {
	if res, handled, err := remote(ctx, r, id, func(rt Router, node string) (abi.Session, error) { return rt.Close(ctx, node, id, reason) }); handled {
		return res, err
	}
	return r.closeLocal(ctx, id, reason)
}

func (r *Registry) closeLocal(ctx context.Context, id string, reason string) (abi.Session, error) {
	s, err := r.usable(ctx, id)
	if err != nil {
		return abi.Session{}, err
	}
	if !r.finish(ctx, s, reason, nil) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return abi.Session{}, finalError(s)
	}
	return s.snapshot(), nil
}

// finish moves s to its final status, stops its backend and publishes the closing events. It
// reports false when s was already final.
func (r *Registry) finish(ctx context.Context, s *session, reason string, exitCode *int) bool {
	s.ctl.Lock()
	defer s.ctl.Unlock()
	s.mu.Lock()
	if s.obj.Status.Final() {
		s.mu.Unlock()
		return false
	}
	to := abi.StatusClosed
	if reason == abi.CloseError {
		to = abi.StatusError
	}
	s.closeReason = reason
	inst := s.inst
	s.mu.Unlock()
	s.log.flow().Stop() // the backend's output must not wait on followers while it is stopped

	if reason == abi.CloseTimeout || reason == abi.CloseIdle {
		s.publish(r.now(), abi.EventInterrupt, abi.InterruptPayload{Type: abi.PayloadInterrupt, Reason: abi.ReasonTimeout})
	}
	var closeErr error
	if inst != nil {
		closeErr = inst.Close(context.WithoutCancel(ctx))
	}
	if closeErr != nil {
		r.cfg.Logger.Warn("session close", "id", s.id, "err", closeErr)
		s.publish(r.now(), abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeResourceUnavailable, Message: closeErr.Error()}})
	}
	now := r.now()
	s.mu.Lock()
	s.obj.Status = to
	// The backend is stopped: the registry lets go of it (an AI chat's conversation, a
	// terminal's buffers), so what a closed session costs is its record.
	s.inst = nil
	s.closedAt = now
	s.obj.Metadata["closedAt"] = abi.FormatTime(now)
	s.obj.Metadata["closeReason"] = reason
	if exitCode != nil {
		s.obj.Metadata["exitCode"] = *exitCode
	}
	s.lastActive = now
	s.mu.Unlock()
	r.mu.Lock()
	r.live--
	r.changedLocked()
	r.mu.Unlock()
	r.closeLog(ctx, s, now, reason, to, exitCode)
	s.endLife() // the instance is stopped and the log ended: what the kind started from its lifetime ends too
	r.cfg.Logger.Info("session closed", "id", s.id, "reason", reason)
	return true
}

// closeLog records s's final object and appends its closing events: the log ends.
func (r *Registry) closeLog(ctx context.Context, s *session, now time.Time, reason string, to abi.Status, exitCode *int) {
	if err := r.putRecord(context.WithoutCancel(ctx), s); err != nil {
		r.cfg.Logger.Warn("record a closed session", "id", s.id, "err", err)
	}
	s.log.appendAll(
		&Event{Type: abi.EventStatus, Time: now, SessionID: s.id, Payload: abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateClosed, Message: "session closed: " + reason, SessionStatus: to}},
		&Event{Type: abi.EventClose, Time: now, SessionID: s.id, Payload: abi.ClosePayload{Type: abi.PayloadClose, Reason: reason, Status: to, ExitCode: exitCode}},
	)
	s.log.finish()
}

// putRecord writes s's record over the revision the registry last wrote: a record another
// writer changed meanwhile (another node, in a shared store) is not overwritten, and the write
// reports ErrConflict.
func (r *Registry) putRecord(ctx context.Context, s *session) error {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	rev, err := r.cfg.Store.Put(ctx, s.snapshot(), s.rev)
	if err != nil {
		return err
	}
	s.rev = rev
	return nil
}

// Hold marks the caller as an owner of s. For an ephemeral session, the release of its last
// holder closes it: docs/ABI.md's "sessions close automatically when the parent command exits".
func (r *Registry) Hold(ctx context.Context, id string) (release func(), err error) {
	s, err := r.usable(ctx, id)
	if err != nil {
		if rec, ferr := r.otherNodes(ctx, id); ferr == nil {
			// Holders are counted by the owner, which cannot see this node's connections
			// end: another node's ephemeral session is held on its own node only.
			if ep, _ := rec.Session.Metadata["ephemeral"].(bool); ep {
				return nil, abi.Errorf(abi.CodeCapabilityUnsupported, id, "session %s is ephemeral and on node %s: hold it there", id, rec.Session.Node)
			}
			if rec.Session.Status.Final() {
				return nil, recordFinalError(rec.Session)
			}
			return func() {}, nil // holding a session that is not ephemeral changes nothing
		}
		return nil, err
	}
	s.mu.Lock()
	s.holders++
	s.everHeld = true
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.holders--
			last := s.holders == 0 && s.ephemeral
			s.mu.Unlock()
			if last {
				r.finish(context.Background(), s, abi.CloseEphemeral, nil)
			}
		})
	}, nil
}

// Follow registers a reader positioned after seq whose progress (Follower.Ack) the session's
// output waits for, within the log's MaxStall. A followed session is never idle. Close the
// follower when the reader goes.
//
// Another node's session is followed from its log in the cluster's store, held open until the
// follower closes; its output does not wait for this node's readers.
func (r *Registry) Follow(ctx context.Context, id string, after uint64) (Follower, error) {
	s, err := r.lookup(id)
	if err != nil {
		if _, release, ferr := r.foreign(ctx, id); ferr == nil {
			return remoteFollower{release: release}, nil
		} else if abi.CodeOf(ferr) != abi.CodeInternal {
			return nil, ferr
		}
		return nil, err
	}
	unwatch, err := r.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.log.flow().Follow(after, unwatch), nil
}

// Watch registers a subscriber; a watched session is never idle. Another node's session's log
// is held open for this node's reads until unwatch, and its owner told it is watched (on the
// sweeps: touchRemote).
func (r *Registry) Watch(ctx context.Context, id string) (unwatch func(), err error) {
	s, err := r.lookup(id)
	if err != nil {
		if _, release, ferr := r.foreign(ctx, id); ferr == nil {
			return release, nil
		} else if abi.CodeOf(ferr) != abi.CodeInternal {
			return nil, ferr
		}
		return nil, err
	}
	s.mu.Lock()
	s.watchers++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.watchers--
			s.lastActive = r.now()
			s.mu.Unlock()
		})
	}, nil
}

// Sweep closes expired, idle and abandoned ephemeral sessions and forgets closed sessions past
// retention. The sweeper calls it on a timer; tests call it with a chosen time.
func (r *Registry) Sweep(ctx context.Context, now time.Time) {
	r.checkNodes(ctx, now)
	r.touchRemote(ctx, now)
	r.mu.Lock()
	ss := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		ss = append(ss, s)
	}
	r.mu.Unlock()
	for _, s := range ss {
		s.mu.Lock()
		final := s.obj.Status.Final()
		closedAt := s.closedAt
		created, _ := abi.ParseTime(s.obj.CreatedAt)
		expired := !s.expires.IsZero() && !now.Before(s.expires)
		idle := r.cfg.IdleTimeout > 0 && s.watchers == 0 && s.holders == 0 && now.Sub(s.lastActive) >= r.cfg.IdleTimeout
		abandoned := s.ephemeral && !s.everHeld && now.Sub(created) >= r.cfg.EphemeralGrace
		s.mu.Unlock()
		switch {
		case final:
			if now.Sub(closedAt) >= r.cfg.Retention {
				r.forget(ctx, s.id)
			}
		case expired:
			r.finish(ctx, s, abi.CloseTimeout, nil)
		case idle:
			r.finish(ctx, s, abi.CloseIdle, nil)
		case abandoned:
			r.finish(ctx, s, abi.CloseEphemeral, nil)
		}
	}
}

// forget removes a session past its retention, from memory and from the store.
func (r *Registry) forget(ctx context.Context, id string) {
	r.mu.Lock()
	delete(r.sessions, id)
	r.changedLocked()
	r.mu.Unlock()
	if err := r.cfg.Store.Remove(ctx, id); err != nil {
		r.cfg.Logger.Warn("forget a session", "id", id, "err", err)
	}
}

// Liveness is a cluster's store that keeps each node's heartbeat.
type Liveness interface {
	// Beat records that this node was alive at at.
	Beat(ctx context.Context, at time.Time) error
	// Beats returns every node's last heartbeat.
	Beats(ctx context.Context) (map[string]time.Time, error)
}

// CloseNodeLost is the close reason of a session whose node stopped heartbeating.
const CloseNodeLost = "node-lost"

// checkNodes heartbeats for this node and marks the live sessions of a node whose heartbeat
// is older than Config.NodeLost error with reason node-lost: by compare-and-set on each
// record, so of the nodes that notice, one marks a session and announces it on its log.
func (r *Registry) checkNodes(ctx context.Context, now time.Time) {
	lv, ok := r.cfg.Store.(Liveness)
	if r.cfg.Node == "" || !ok {
		return
	}
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	if err := lv.Beat(ctx, now); err != nil {
		r.cfg.Logger.Warn("heartbeat", "node", r.cfg.Node, "err", err)
		return
	}
	beats, err := lv.Beats(ctx)
	if err != nil {
		r.cfg.Logger.Warn("read the nodes' heartbeats", "err", err)
		return
	}
	lost := map[string]bool{}
	for node, at := range beats {
		if seen, ok := r.lostSeen[node]; node != r.cfg.Node && now.Sub(at) > r.cfg.NodeLost && (!ok || !seen.Equal(at)) {
			lost[node] = true
		}
	}
	if len(lost) == 0 {
		return
	}
	recs, err := r.cfg.Store.List(ctx)
	if err != nil {
		r.cfg.Logger.Warn("list sessions of lost nodes", "err", err)
		return
	}
	failed := map[string]bool{}
	marked := map[string]int{} // sessions this node marked
	for _, rec := range recs {
		if lost[rec.Session.Node] && !rec.Session.Status.Final() {
			// A session its node made after the heartbeat it was found lost by, within the
			// bound: the node was alive since (it came back and has not beaten yet). Looked at
			// again on the next sweep.
			if at, err := abi.ParseTime(rec.Session.CreatedAt); err == nil && at.After(beats[rec.Session.Node]) && now.Sub(at) <= r.cfg.NodeLost {
				failed[rec.Session.Node] = true
				continue
			}
			won, err := r.markLost(ctx, rec, now)
			if err != nil {
				failed[rec.Session.Node] = true
				r.cfg.Logger.Warn("mark a lost node's session", "id", rec.Session.SessionID, "node", rec.Session.Node, "err", err)
			}
			if won {
				marked[rec.Session.Node]++
			}
		}
	}
	if r.lostSeen == nil {
		r.lostSeen = map[string]time.Time{}
	}
	for node := range lost {
		if !failed[node] {
			r.lostSeen[node] = beats[node]
			r.cfg.Logger.Info("node lost: its sessions are marked", "node", node, "lastBeat", beats[node], "marked", marked[node])
		}
	}
}

// markLost writes a lost node's session as error, node-lost, and, if this node's write won,
// appends its status and close events to its log.
func (r *Registry) markLost(ctx context.Context, rec Record, now time.Time) (won bool, err error) {
	obj := rec.Session
	md := make(map[string]any, len(obj.Metadata)+1)
	maps.Copy(md, obj.Metadata)
	opener, ok := r.cfg.Store.(LogOpener)
	var log EventLog
	if ok {
		if log, err = opener.OpenEventLog(ctx, obj.SessionID, r.cfg.Log); err != nil {
			return false, err
		}
		// The record is written when a session starts and when it ends: what its node set
		// in between (an ai-chat's conversation key and options, which its takeover reopens
		// it with) is on its log, read as restore's replay reads it.
		if err := replayMetadata(ctx, md, log); err != nil {
			return false, errors.Join(err, log.Close(ctx))
		}
	}
	obj.Status = abi.StatusError
	md["closeReason"] = CloseNodeLost
	obj.Metadata = md
	if _, err := r.cfg.Store.Put(ctx, obj, rec.Revision); err != nil {
		if log != nil {
			err = errors.Join(err, log.Close(ctx))
		}
		if errors.Is(err, ErrConflict) {
			return false, nil // another node marked it, or its owner wrote since
		}
		return false, err
	}
	if log == nil {
		return true, nil
	}
	id := obj.SessionID
	_, err = log.Append(ctx,
		&Event{Type: abi.EventStatus, Time: now, SessionID: id, Payload: abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateClosed, Message: "session closed: " + CloseNodeLost, SessionStatus: abi.StatusError}},
		&Event{Type: abi.EventClose, Time: now, SessionID: id, Payload: abi.ClosePayload{Type: abi.PayloadClose, Reason: CloseNodeLost, Status: abi.StatusError}},
	)
	err = errors.Join(err, log.Close(ctx))
	r.mu.Lock()
	k := r.kinds[obj.Type]
	r.mu.Unlock()
	if t, ok := k.(TakeOverer); ok {
		// This node marked it, so this node takes it over: one node per lost session. The
		// kind stops it with the gateway (it may wait a lease's length).
		go t.TakeOver(r.base, obj)
	}
	return true, err
}

// TakeOverer is a kind whose sessions outlive their node (the ai-chat kind's conversations):
// once this node marked a lost node's session of the kind node-lost, TakeOver is called with
// it, on a goroutine of its own; the kind ends it when the gateway stops.
type TakeOverer interface {
	TakeOver(ctx context.Context, lost abi.Session)
}

func (r *Registry) sweeper(ctx context.Context) {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.Sweep)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.Sweep(ctx, r.now())
		}
	}
}

// Shutdown refuses new sessions, closes every live one with reason shutdown (reaping its
// processes) and stops the sweeper.
func (r *Registry) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.down = true
	ss := make([]*session, 0, len(r.sessions))
	for _, s := range r.sessions {
		ss = append(ss, s)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.finish(ctx, s, abi.CloseShutdown, nil)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	r.stopOnce.Do(func() { close(r.stop) })
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("shutdown: %w", ctx.Err())
	}
	r.wg.Wait()
	var err error
	r.closed.Do(func() {
		if cerr := r.cfg.Store.Close(); cerr != nil {
			err = fmt.Errorf("shutdown: close the session store: %w", cerr)
		}
	})
	return err
}

// LiveCount is the number of live (active, paused or starting) sessions.
func (r *Registry) LiveCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live
}
