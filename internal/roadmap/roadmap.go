// Package roadmap keeps roadmaps (docs/observers.md): small durable plans of items (todo,
// doing, done, blocked) that sessions and conversations are linked to (context roadmapId), in
// state/roadmaps.json, with change notifications for the meta-chat sessions that follow them.
package roadmap

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// Item statuses.
const (
	Todo    = "todo"
	Doing   = "doing"
	Done    = "done"
	Blocked = "blocked"
)

// Item is one step of a roadmap (the wire type of /v1/roadmaps, as Roadmap is).
type Item = abi.RoadmapStep

// Roadmap is a plan.
type Roadmap = abi.Roadmap

// Store is state/roadmaps.json, written atomically; one writer (the gateway).
type Store struct {
	path string
	now  func() time.Time

	mu   sync.Mutex
	maps map[string]*Roadmap
	subs map[string]map[chan struct{}]struct{}
}

// Open reads (or starts) the store at path.
func Open(path string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	s := &Store{path: path, now: now, maps: map[string]*Roadmap{}, subs: map[string]map[chan struct{}]struct{}{}}
	data, err := fsutil.ReadFileNoFollow(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("roadmaps: %w", err)
	default:
		var list []*Roadmap
		if err := json.Unmarshal(data, &list); err != nil {
			return nil, fmt.Errorf("roadmaps: %s: %w", path, err)
		}
		for _, r := range list {
			s.maps[r.ID] = r
		}
	}
	return s, nil
}

func newID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// saveLocked writes every roadmap and wakes the subscribers of id.
func (s *Store) saveLocked(id string) error {
	list := make([]*Roadmap, 0, len(s.maps))
	for _, r := range s.maps {
		list = append(list, r)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return fmt.Errorf("roadmaps: %w", err)
	}
	if err := fsutil.WriteFileAtomic(s.path, b); err != nil {
		return fmt.Errorf("roadmaps: %w", err)
	}
	for ch := range s.subs[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

func checkTitle(t string) (string, error) {
	t = strings.TrimSpace(t)
	if t == "" || len(t) > 500 || strings.ContainsAny(t, "\n\r") {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "a title is one line of 1 to 500 bytes")
	}
	return t, nil
}

func checkStatus(st string) error {
	switch st {
	case Todo, Doing, Done, Blocked:
		return nil
	}
	return abi.Errorf(abi.CodeInvalidArgument, "", "status %q: want todo, doing, done or blocked", st)
}

// Create makes a roadmap.
func (s *Store) Create(title string) (Roadmap, error) {
	title, err := checkTitle(title)
	if err != nil {
		return Roadmap{}, err
	}
	r := &Roadmap{ID: newID("rm"), Title: title, CreatedAt: s.now().UnixMilli(), Items: []Item{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maps[r.ID] = r
	if err := s.saveLocked(r.ID); err != nil {
		delete(s.maps, r.ID)
		return Roadmap{}, err
	}
	return clone(r), nil
}

func clone(r *Roadmap) Roadmap {
	c := *r
	c.Items = append([]Item{}, r.Items...)
	return c
}

// List returns the roadmaps, oldest first.
func (s *Store) List() []Roadmap {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Roadmap, 0, len(s.maps))
	for _, r := range s.maps {
		out = append(out, clone(r))
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].CreatedAt < out[j].CreatedAt || (out[i].CreatedAt == out[j].CreatedAt && out[i].ID < out[j].ID)
	})
	return out
}

// Get returns a roadmap.
func (s *Store) Get(id string) (Roadmap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.maps[id]
	if !ok {
		return Roadmap{}, abi.Errorf(abi.CodeInvalidArgument, "", "no roadmap %q (nexus roadmap list)", id)
	}
	return clone(r), nil
}

// AddItem appends an item (status default todo).
func (s *Store) AddItem(id, title, status string) (Item, error) {
	title, err := checkTitle(title)
	if err != nil {
		return Item{}, err
	}
	if status == "" {
		status = Todo
	}
	if err := checkStatus(status); err != nil {
		return Item{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.maps[id]
	if !ok {
		return Item{}, abi.Errorf(abi.CodeInvalidArgument, "", "no roadmap %q (nexus roadmap list)", id)
	}
	it := Item{ID: newID("it"), Title: title, Status: status, Version: 1, UpdatedAt: s.now().UnixMilli()}
	r.Items = append(r.Items, it)
	if err := s.saveLocked(id); err != nil {
		r.Items = r.Items[:len(r.Items)-1]
		return Item{}, err
	}
	return it, nil
}

// UpdateItem changes an item's status and/or title.
func (s *Store) UpdateItem(id, itemID, title, status string) (Item, error) {
	if status != "" {
		if err := checkStatus(status); err != nil {
			return Item{}, err
		}
	}
	if title != "" {
		var err error
		if title, err = checkTitle(title); err != nil {
			return Item{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.maps[id]
	if !ok {
		return Item{}, abi.Errorf(abi.CodeInvalidArgument, "", "no roadmap %q (nexus roadmap list)", id)
	}
	for i := range r.Items {
		it := &r.Items[i]
		if it.ID != itemID {
			continue
		}
		old := *it
		if title != "" {
			it.Title = title
		}
		if status != "" {
			it.Status = status
		}
		if *it == old {
			return *it, nil
		}
		it.Version++
		it.UpdatedAt = s.now().UnixMilli()
		if err := s.saveLocked(id); err != nil {
			*it = old
			return Item{}, err
		}
		return *it, nil
	}
	return Item{}, abi.Errorf(abi.CodeInvalidArgument, "", "roadmap %s has no item %q", id, itemID)
}

// Subscribe returns a channel that receives (coalesced) when roadmap id changes, and the
// function that stops it.
func (s *Store) Subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.subs[id] == nil {
		s.subs[id] = map[chan struct{}]struct{}{}
	}
	s.subs[id][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs[id], ch)
		s.mu.Unlock()
	}
}
