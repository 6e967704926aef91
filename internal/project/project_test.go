package project_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/project"
)

var (
	t0 = time.Date(2024, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	t1 = t0.Add(time.Hour)
)

// clock returns a settable time source.
func clock(at time.Time) (func() time.Time, func(time.Time)) {
	var mu sync.Mutex
	return func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return at
		}, func(t time.Time) {
			mu.Lock()
			at = t
			mu.Unlock()
		}
}

// newStore returns a store at <tmp>/state/projects.json (the state directory not yet created)
// and a workspace directory to register.
func newStore(t *testing.T) (*project.Store, string, string) {
	t.Helper()
	base := t.TempDir()
	now, _ := clock(t0)
	path := filepath.Join(base, "state", "projects.json")
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return project.NewStore(path, now), path, ws
}

func wantCode(t *testing.T, err error, code abi.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", code)
	}
	if got := abi.CodeOf(err); got != code {
		t.Fatalf("error %v has code %s, want %s", err, got, code)
	}
}

func TestValidName(t *testing.T) {
	valid := []string{"a", "demo", "my-project", "my_project", "v1.2", "A9", "0abc", strings.Repeat("x", 64), "a..b"}
	for _, name := range valid {
		if err := project.ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v", name, err)
		}
	}
	invalid := []string{
		"", ".", "..", "../x", "x/..", "a/b", "/abs", `a\b`, "-flag", ".hidden", "_x",
		strings.Repeat("x", 65), "with space", "tab\t", "new\nline", "nul\x00", "ünïcode", "a:b", "a*", "~",
	}
	for _, name := range invalid {
		err := project.ValidName(name)
		wantCode(t, err, abi.CodeInvalidArgument)
	}
}

func TestAddGetListRemove(t *testing.T) {
	s, path, ws := newStore(t)
	ctx := context.Background()

	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Fatalf("List before any add = %v, %v", list, err)
	}
	p, err := s.Add(ctx, "demo", ws)
	if err != nil {
		t.Fatal(err)
	}
	want := project.Project{ID: "demo", Path: ws, CreatedAt: abi.FormatTime(t0)}
	if p != want {
		t.Errorf("Add = %+v, want %+v", p, want)
	}
	got, err := s.Get("demo")
	if err != nil || got != want {
		t.Errorf("Get = %+v, %v", got, err)
	}

	other := t.TempDir()
	if _, err := s.Add(ctx, "alpha", other); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "alpha" || list[1].ID != "demo" {
		t.Errorf("List = %+v, want alpha, demo (sorted by id)", list)
	}

	// The file on disk is the documented shape.
	var onDisk struct {
		Projects map[string]project.Project `json:"projects"`
	}
	data, err := os.ReadFile(path) //nolint:gosec // test path
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &onDisk); err != nil || onDisk.Projects["demo"] != want {
		t.Errorf("projects.json = %s (%v)", data, err)
	}

	// A fresh store on the same file sees the same projects.
	fresh := project.NewStore(path, nil)
	if got, err := fresh.Get("alpha"); err != nil || got.Path != other {
		t.Errorf("fresh store Get(alpha) = %+v, %v", got, err)
	}

	if err := s.Remove(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get("demo")
	wantCode(t, err, abi.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "nexus project add demo") {
		t.Errorf("Get of a missing project should say how to add it: %v", err)
	}
	wantCode(t, s.Remove(ctx, "demo"), abi.CodeInvalidArgument)
	if list, _ := s.List(); len(list) != 1 || list[0].ID != "alpha" {
		t.Errorf("List after remove = %+v", list)
	}
}

func TestReAddKeepsCreatedAt(t *testing.T) {
	base := t.TempDir()
	now, set := clock(t0)
	s := project.NewStore(filepath.Join(base, "projects.json"), now)
	ws1, ws2 := t.TempDir(), t.TempDir()
	ctx := context.Background()
	if _, err := s.Add(ctx, "demo", ws1); err != nil {
		t.Fatal(err)
	}
	set(t1)
	p, err := s.Add(ctx, "demo", ws2)
	if err != nil {
		t.Fatal(err)
	}
	if p.Path != ws2 || p.CreatedAt != abi.FormatTime(t0) {
		t.Errorf("re-add = %+v: path moves, createdAt stays", p)
	}
	if got, _ := s.Get("demo"); got != p {
		t.Errorf("Get = %+v, want %+v", got, p)
	}
}

func TestAddMakesPathAbsolute(t *testing.T) {
	s, _, ws := newStore(t)
	t.Chdir(filepath.Dir(ws))
	p, err := s.Add(context.Background(), "rel", "ws")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(p.Path) || filepath.Base(p.Path) != "ws" {
		t.Errorf("path = %q, want absolute", p.Path)
	}
	p, err = s.Add(context.Background(), "dotted", "./ws/../ws")
	if err != nil || p.Path != filepath.Clean(p.Path) {
		t.Errorf("path = %q (%v), want cleaned", p.Path, err)
	}
}

func TestAddRefuses(t *testing.T) {
	s, path, ws := newStore(t)
	file := filepath.Join(filepath.Dir(ws), "afile")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id, dir string
	}{
		{"path traversal", "../x", ws},
		{"separator", "a/b", ws},
		{"empty name", "", ws},
		{"65 characters", strings.Repeat("p", 65), ws},
		{"dot", ".", ws},
		{"dot dot", "..", ws},
		{"path is a file", "demo", file},
		{"path missing", "demo", filepath.Join(ws, "nope")},
		{"bad name with empty path", "a b", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Add(context.Background(), tc.id, tc.dir)
			wantCode(t, err, abi.CodeInvalidArgument)
		})
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused add wrote projects.json: %v", err)
	}
	if _, err := s.Add(context.Background(), strings.Repeat("p", 64), ws); err != nil {
		t.Errorf("64-character name refused: %v", err)
	}
}

func TestFileModes(t *testing.T) {
	s, path, ws := newStore(t)
	if _, err := s.Add(context.Background(), "demo", ws); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode %v, want %v", p, got, want)
		}
	}
	if err := s.Remove(context.Background(), "demo"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("after rewrite: %v %v", fi.Mode(), err)
	}
}

func TestSymlinkedFileRefused(t *testing.T) {
	s, path, ws := newStore(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "planted.json")
	if err := os.WriteFile(elsewhere, []byte(`{"projects":{"evil":{"id":"evil","path":"/"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, path); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(); err == nil {
		t.Error("List read projects through a symlink")
	}
	if _, err := s.Get("evil"); err == nil {
		t.Error("Get read projects through a symlink")
	}
	if _, err := s.Add(context.Background(), "demo", ws); err == nil {
		t.Error("Add read projects through a symlink")
	}
	if got, _ := os.ReadFile(elsewhere); !strings.Contains(string(got), "evil") { //nolint:gosec // test path
		t.Errorf("symlink target changed: %s", got)
	}
}

func TestCorruptFile(t *testing.T) {
	s, path, ws := newStore(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(); err == nil || !strings.Contains(err.Error(), "parse projects") {
		t.Errorf("List of corrupt file = %v", err)
	}
	if _, err := s.Add(context.Background(), "demo", ws); err == nil {
		t.Error("Add over a corrupt file succeeded (and would have dropped its contents)")
	}
	// An empty object or a null projects map reads as no projects.
	for _, body := range []string{`{}`, `{"projects":null}`} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if list, err := s.List(); err != nil || len(list) != 0 {
			t.Errorf("List(%s) = %v, %v", body, list, err)
		}
		if _, err := s.Add(context.Background(), "demo", ws); err != nil {
			t.Errorf("Add over %s: %v", body, err)
		}
	}
}

// TestConcurrentAdds: writers in separate stores (as the CLI and the gateway would be) serialize
// on the file lock, so every add lands.
func TestConcurrentAdds(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "state", "projects.json")
	ws := t.TempDir()
	const n = 16
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := project.NewStore(path, nil)
			<-start
			_, err := s.Add(context.Background(), fmt.Sprintf("p%02d", i), ws)
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	list, err := project.NewStore(path, nil).List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("%d of %d concurrent adds landed: %+v", len(list), n, list)
	}
	for i, p := range list {
		if p.ID != fmt.Sprintf("p%02d", i) {
			t.Errorf("list[%d] = %s", i, p.ID)
		}
	}
}

// TestAddWaitsForTheLock: while another writer holds the file lock, Add waits; a context that
// ends first makes it fail without writing.
func TestAddWaitsForTheLock(t *testing.T) {
	s, path, ws := newStore(t)
	if _, err := s.Add(context.Background(), "first", ws); err != nil {
		t.Fatal(err)
	}
	other, err := fsutil.LockWait(path + ".lock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Add(ctx, "second", ws)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Add under a held lock with a canceled context = %v", err)
	}
	if err := s.Remove(ctx, "first"); !errors.Is(err, context.Canceled) {
		t.Errorf("Remove under a held lock with a canceled context = %v", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := s.Add(context.Background(), "third", ws)
		done <- err
	}()
	if err := other.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "first" || list[1].ID != "third" {
		t.Errorf("List = %+v, want first and third", list)
	}
}
