// Package metachat is the meta-chat session kind (docs/observers.md): a manager's live view
// of a roadmap. A session on a roadmap (context roadmapId) receives, in order, the roadmap's
// item changes, the sessions linked to it (created, status changes, closed), the turns that
// end in its linked ai-chat sessions and the subagents they spawn. An interrupt stops the
// updates and the session stays open for queries (its roadmap in its metadata); resume reports
// what changed meanwhile.
package metachat

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/roadmap"
)

// Kind starts meta-chat sessions. It is a live.Observer: the registry gives it its view. One
// watcher of the registry's sessions serves all its sessions (started with the first, stopped
// with the last): a change costs one snapshot, not one per meta-chat, and each session keeps
// only its roadmap's linked sessions.
type Kind struct {
	Roadmaps *roadmap.Store

	mu        sync.Mutex
	view      live.View
	metas     map[*meta]struct{}
	stopWatch context.CancelFunc
}

// register adds m to the watcher's sessions (starting the watcher) and offers it the present.
func (k *Kind) register(m *meta) {
	snap, err := k.view.WatchSessions(m.ctx, 0, 0)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.metas == nil {
		k.metas = map[*meta]struct{}{}
	}
	k.metas[m] = struct{}{}
	if err == nil {
		present := linked(snap.Sessions)[m.id]
		m.mu.Lock()
		for _, s := range present {
			m.preexisting[s.SessionID] = true
		}
		m.mu.Unlock()
		m.offer(present)
	}
	if k.stopWatch == nil {
		// The watcher serves every meta-chat, so it lives while any of them does: it takes
		// the first one's lifetime without its end (that session may close before the others)
		// and stops when the last one leaves, at its Close or when its lifetime ends without
		// one (below).
		ctx, cancel := context.WithCancel(context.WithoutCancel(m.ctx))
		k.stopWatch = cancel
		go k.watch(ctx, snap.Version)
	}
	m.unlife = context.AfterFunc(m.ctx, func() { k.unregister(m) })
}

func (k *Kind) unregister(m *meta) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m.unlife != nil {
		m.unlife()
	}
	delete(k.metas, m)
	if len(k.metas) == 0 && k.stopWatch != nil {
		k.stopWatch()
		k.stopWatch = nil
	}
}

// linked groups the sessions linked to a roadmap by roadmap. Meta-chats are the roadmap's
// viewers, not its work: they are left out (a hundred of them would each hold the others).
func linked(all []abi.Session) map[string][]abi.Session {
	out := map[string][]abi.Session{}
	for _, s := range all {
		if s.Context.RoadmapID != "" && s.Type != abi.TypeMetaChat {
			out[s.Context.RoadmapID] = append(out[s.Context.RoadmapID], s)
		}
	}
	return out
}

// watch offers each meta-chat its roadmap's sessions at every change of the registry.
func (k *Kind) watch(ctx context.Context, version uint64) {
	for {
		snap, err := k.view.WatchSessions(ctx, version, time.Minute)
		if err != nil || ctx.Err() != nil {
			return
		}
		if snap.Version == version {
			continue
		}
		version = snap.Version
		by := linked(snap.Sessions)
		k.mu.Lock()
		for m := range k.metas {
			m.offer(by[m.id])
		}
		k.mu.Unlock()
	}
}

// Attach implements live.Observer.
func (k *Kind) Attach(v live.View) {
	k.mu.Lock()
	k.view = v
	k.mu.Unlock()
}

// Type implements live.Kind.
func (k *Kind) Type() abi.SessionType { return abi.TypeMetaChat }

// Capabilities implements live.Kind: the seed's set (receive, close, stream) and interrupt,
// which its control rules give meta-chat (stop receiving updates, the session stays open).
func (k *Kind) Capabilities() abi.Capabilities {
	return abi.Capabilities{Receive: true, Interrupt: true, Close: true, Stream: true}
}

// Start implements live.Kind.
func (k *Kind) Start(_ context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	if len(req.Options) > 0 && string(req.Options) != "{}" && string(req.Options) != "null" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "meta-chat sessions take no options")
	}
	if req.Context.RoadmapID == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "a meta-chat follows a roadmap: context roadmapId (nexus roadmap list)")
	}
	if k.Roadmaps == nil {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway keeps no roadmaps")
	}
	rm, err := k.Roadmaps.Get(req.Context.RoadmapID)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	view := k.view
	k.mu.Unlock()
	if view == nil {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, "", "meta-chat needs the registry's view")
	}
	m := &meta{sink: sink, k: k, view: view, id: rm.ID, offered: make(chan struct{}, 1),
		items: map[string]int{}, sessions: map[string]abi.Session{}, readers: map[string]context.CancelFunc{}, preexisting: map[string]bool{}}
	m.ctx, m.stop = context.WithCancel(sink.Context())
	sink.SetMetadata(map[string]any{"roadmapId": rm.ID, "title": rm.Title})
	return m, nil
}

// meta is one meta-chat session.
type meta struct {
	sink live.Sink
	k    *Kind
	view live.View
	id   string

	ctx    context.Context
	stop   context.CancelFunc
	unlife func() bool // stops the unregister at the end of ctx (Kind.register); under k.mu
	wg     sync.WaitGroup

	mu       sync.Mutex
	gate     live.Gate              // interrupt and pause hold the updates
	items    map[string]int         // item id -> version reported
	sessions map[string]abi.Session // linked session -> as reported
	readers  map[string]context.CancelFunc
	pub      sync.Mutex // one report at a time, so they stay in order
	// latest is the roadmap's linked sessions as the kind's watcher last offered them;
	// preexisting those linked when the meta-chat opened (their past is not news).
	latest      []abi.Session
	offered     chan struct{}
	preexisting map[string]bool
}

// offer gives m the roadmap's linked sessions now (the kind's watcher, never blocking).
func (m *meta) offer(list []abi.Session) {
	m.mu.Lock()
	m.latest = list
	m.mu.Unlock()
	select {
	case m.offered <- struct{}{}:
	default:
	}
}

// Begin implements live.Beginner.
func (m *meta) Begin() {
	changes, unsubscribe := m.k.Roadmaps.Subscribe(m.id)
	m.wg.Go(func() {
		defer unsubscribe()
		for m.gate.Wait(m.ctx) {
			m.reportItems()
			select {
			case <-m.ctx.Done():
				return
			case <-changes:
			case <-m.gate.Opened():
			}
		}
	})
	m.k.register(m)
	m.wg.Go(func() {
		for m.gate.Wait(m.ctx) {
			select {
			case <-m.ctx.Done():
				return
			case <-m.offered:
			}
			if !m.gate.Wait(m.ctx) { // interrupted while it waited: report after resume
				return
			}
			m.mu.Lock()
			list := m.latest
			m.mu.Unlock()
			m.reportSessions(list)
		}
	})
}

func (m *meta) publish(payload any) {
	m.pub.Lock()
	defer m.pub.Unlock()
	m.sink.Publish(abi.EventData, payload)
}

// reportItems reports the items added or changed since the last report.
func (m *meta) reportItems() {
	rm, err := m.k.Roadmaps.Get(m.id)
	if err != nil {
		return
	}
	for _, it := range rm.Items {
		m.mu.Lock()
		v, seen := m.items[it.ID]
		m.items[it.ID] = it.Version
		m.mu.Unlock()
		if seen && v == it.Version {
			continue
		}
		action := "updated"
		if !seen {
			action = "added"
		}
		m.publish(abi.RoadmapEvent{Type: abi.PayloadRoadmapItem, Action: action, RoadmapID: m.id,
			Item: &abi.RoadmapItem{ID: it.ID, Title: it.Title, Status: it.Status}})
	}
}

// reportSessions reports the linked sessions created, changed and closed since the last
// report, and follows the events of linked ai-chat sessions (those there before the meta-chat
// opened from their present: their past is not news).
func (m *meta) reportSessions(all []abi.Session) {
	self := m.sink.SessionID()
	for _, s := range all {
		if s.SessionID == self {
			continue
		}
		m.mu.Lock()
		old, seen := m.sessions[s.SessionID]
		m.sessions[s.SessionID] = s
		m.mu.Unlock()
		var action string
		switch {
		case !seen && s.Status.Final():
			action = "closed"
		case !seen:
			action = "created"
		case old.Status != s.Status && s.Status.Final():
			action = "closed"
		case old.Status != s.Status:
			action = "status"
		default:
			continue
		}
		ev := abi.RoadmapEvent{Type: abi.PayloadRoadmapSession, Action: action, RoadmapID: m.id, SessionID: s.SessionID,
			SessionType: string(s.Type), Status: string(s.Status)}
		if k, ok := s.Metadata["chatKey"].(string); ok {
			ev.ChatKey = k
		}
		m.publish(ev)
		if action == "created" && s.Type == abi.TypeAIChat {
			m.mu.Lock()
			old := m.preexisting[s.SessionID]
			m.mu.Unlock()
			m.follow(s.SessionID, ev.ChatKey, old)
		}
	}
}

// follow forwards a linked ai-chat session's turn ends and subagent spawns.
func (m *meta) follow(id, chatKey string, fromNow bool) {
	ctx, cancel := context.WithCancel(m.ctx)
	m.mu.Lock()
	m.readers[id] = cancel
	m.mu.Unlock()
	m.wg.Go(func() {
		defer cancel()
		var after uint64
		if fromNow {
			var err error
			if after, err = m.view.LastSeq(ctx, id); err != nil {
				return
			}
		}
		for m.gate.Wait(m.ctx) {
			b, err := m.view.Read(ctx, id, after, 0, time.Minute)
			if err != nil || !m.gate.Wait(m.ctx) {
				return
			}
			for _, e := range b.Events {
				after = e.Seq
				switch p := e.Payload.(type) {
				case abi.AITurn:
					if p.Phase == abi.PhaseEnded {
						m.publish(abi.RoadmapEvent{Type: abi.PayloadRoadmapTurn, RoadmapID: m.id, SessionID: id, ChatKey: chatKey,
							RunID: p.RunID, End: p.End, Iterations: p.Iterations})
					}
				case abi.AISubagent:
					m.publish(abi.RoadmapEvent{Type: abi.PayloadRoadmapSubagent, Action: "spawned", RoadmapID: m.id, SessionID: id, ChatKey: chatKey,
						RunID: p.RunID, ChildSessionKey: p.ChildSessionKey, Label: p.Label, Task: p.Task})
				}
			}
			if b.Done {
				return
			}
		}
	})
}

// Send implements live.Instance.
func (m *meta) Send(context.Context, live.SendRequest) (live.SendResult, error) {
	return live.SendResult{}, abi.Errorf(abi.CodeCapabilityUnsupported, m.sink.SessionID(), "meta-chat sessions take no input")
}

// Control implements live.Instance: interrupt stops the updates; the session stays open.
func (m *meta) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	if req.Command != abi.CommandInterrupt {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, m.sink.SessionID(), "meta-chat sessions do not support %s", req.Command)
	}
	m.gate.Interrupt()
	return map[string]any{"updating": false, "note": "resume reports what changed meanwhile"}, nil
}

// Resume implements live.Resumer.
func (m *meta) Resume(context.Context) (any, error) {
	return map[string]any{"updating": m.gate.Resume()}, nil
}

// SetPaused implements live.Pauser.
func (m *meta) SetPaused(paused bool) { m.gate.SetPaused(paused) }

// Close implements live.Instance.
func (m *meta) Close(ctx context.Context) error {
	m.k.unregister(m)
	m.stop()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.New("meta-chat: its readers did not stop in time")
	}
	return nil
}
