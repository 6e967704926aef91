// Package project is the registry of projects (name -> workspace directory) kept in
// state/projects.json. Terminal sessions start in their project's directory.
package project

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// Project is one registered workspace.
type Project struct {
	ID        string `json:"id"`
	Path      string `json:"path"`
	CreatedAt string `json:"createdAt"`
}

type file struct {
	Projects map[string]Project `json:"projects"`
}

// Store reads and writes projects.json. Writers take a file lock so the CLI and the gateway can
// both edit it.
type Store struct {
	path string
	now  func() time.Time
}

// NewStore returns the store at path (state/projects.json).
func NewStore(path string, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{path: path, now: now}
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName reports whether name is a usable project id: letters, digits, '.', '_' and '-', no
// path separators, at most 64 characters.
func ValidName(name string) error {
	if !nameRE.MatchString(name) || name == "." || name == ".." {
		return abi.Errorf(abi.CodeInvalidArgument, "", "invalid project name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

func (s *Store) load() (file, error) {
	f := file{Projects: map[string]Project{}}
	data, err := fsutil.ReadFileNoFollow(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read projects %s: %w", s.path, err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("parse projects %s: %w", s.path, err)
	}
	if f.Projects == nil {
		f.Projects = map[string]Project{}
	}
	return f, nil
}

func (s *Store) update(ctx context.Context, fn func(*file) error) error {
	if err := fsutil.MkdirPrivate(filepath.Dir(s.path)); err != nil {
		return err
	}
	lk, err := fsutil.LockContext(ctx, s.path+".lock", 20*time.Millisecond)
	if err != nil {
		return fmt.Errorf("lock projects %s: %w", s.path, err)
	}
	defer func() { _ = lk.Unlock() }()
	f, err := s.load()
	if err != nil {
		return err
	}
	if err := fn(&f); err != nil {
		return err
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encode projects: %w", err)
	}
	return fsutil.WriteFileAtomic(s.path, append(data, '\n'))
}

// Add registers name at dir (made absolute; it must be an existing directory).
func (s *Store) Add(ctx context.Context, name, dir string) (Project, error) {
	if err := ValidName(name); err != nil {
		return Project{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Project{}, fmt.Errorf("resolve %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil || !fi.IsDir() {
		return Project{}, abi.Errorf(abi.CodeInvalidArgument, "", "project path %s is not an existing directory", abs)
	}
	p := Project{ID: name, Path: abs, CreatedAt: abi.FormatTime(s.now())}
	err = s.update(ctx, func(f *file) error {
		if old, ok := f.Projects[name]; ok {
			p.CreatedAt = old.CreatedAt
		}
		f.Projects[name] = p
		return nil
	})
	return p, err
}

// Remove forgets a project.
func (s *Store) Remove(ctx context.Context, name string) error {
	return s.update(ctx, func(f *file) error {
		if _, ok := f.Projects[name]; !ok {
			return abi.Errorf(abi.CodeInvalidArgument, "", "no project %q", name)
		}
		delete(f.Projects, name)
		return nil
	})
}

// List returns the projects sorted by id.
func (s *Store) List() ([]Project, error) {
	f, err := s.load()
	if err != nil {
		return nil, err
	}
	out := make([]Project, 0, len(f.Projects))
	for _, p := range f.Projects {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Get returns one project, or INVALID_ARGUMENT naming the missing project.
func (s *Store) Get(name string) (Project, error) {
	f, err := s.load()
	if err != nil {
		return Project{}, err
	}
	p, ok := f.Projects[name]
	if !ok {
		return Project{}, abi.Errorf(abi.CodeInvalidArgument, "", "project %q does not exist; add it with: nexus project add %s --path DIR", name, name)
	}
	return p, nil
}
