package project_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/project"
)

// A symlink planted as projects.json.lock must not make nexus create (or lock) its target.
func TestPlantedLockSymlinkIsRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "created-by-nexus")
	path := filepath.Join(state, "projects.json")
	if err := os.Symlink(outside, path+".lock"); err != nil {
		t.Fatal(err)
	}
	s := project.NewStore(path, time.Now)
	_, err := s.Add(t.Context(), "p", t.TempDir())
	if !errors.Is(err, fsutil.ErrUntrusted) {
		t.Fatalf("Add: %v, want ErrUntrusted", err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the lock's symlink target was created: %v", err)
	}
}
