package fsutil_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/fsutil"
)

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func writeFile(t *testing.T, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // test path
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMkdirPrivate(t *testing.T) {
	base := t.TempDir()
	t.Run("creates nested 0700", func(t *testing.T) {
		dir := filepath.Join(base, "a", "b", "state")
		if err := fsutil.MkdirPrivate(dir); err != nil {
			t.Fatal(err)
		}
		if p := perm(t, dir); p != 0o700 {
			t.Errorf("mode %v, want 0700", p)
		}
		if err := fsutil.MkdirPrivate(dir); err != nil { // idempotent
			t.Fatal(err)
		}
	})
	t.Run("refuses a symlink", func(t *testing.T) {
		target := filepath.Join(base, "real")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(base, "link")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := fsutil.MkdirPrivate(link); err == nil {
			t.Error("MkdirPrivate accepted a symlink to a directory")
		}
	})
	t.Run("refuses a file", func(t *testing.T) {
		f := filepath.Join(base, "file")
		writeFile(t, f, "x", 0o600)
		if err := fsutil.MkdirPrivate(f); err == nil {
			t.Error("MkdirPrivate accepted a regular file")
		}
	})
}

func TestWriteFileAtomic(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, path string)
	}{
		{"new file", func(*testing.T, string, string) {}},
		{"replaces a file", func(t *testing.T, _, path string) { writeFile(t, path, "old content that is longer", 0o644) }},
		{"replaces a world-readable file with a private one", func(t *testing.T, _, path string) {
			writeFile(t, path, "old", 0o666)
			if err := os.Chmod(path, 0o666); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			tc.setup(t, dir, path)
			if err := fsutil.WriteFileAtomic(path, []byte(`{"v":1}`)); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, path); got != `{"v":1}` {
				t.Errorf("content = %q", got)
			}
			if p := perm(t, path); p != 0o600 {
				t.Errorf("mode %v, want 0600", p)
			}
			assertNoTemp(t, dir, "state.json")
		})
	}
}

func assertNoTemp(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("directory holds %v, want %v (no temp files left behind)", names, want)
	}
}

// TestWriteFileAtomicReplacesSymlink: a symlink planted at a state path is replaced by a regular
// file; its target is never written through.
func TestWriteFileAtomicReplacesSymlink(t *testing.T) {
	for _, dangling := range []bool{false, true} {
		name := "to existing file"
		if dangling {
			name = "dangling"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			victimDir := t.TempDir()
			target := filepath.Join(victimDir, "victim")
			if !dangling {
				writeFile(t, target, "precious", 0o644)
			}
			path := filepath.Join(dir, "gateway.token")
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			if err := fsutil.WriteFileAtomic(path, []byte("secret")); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() {
				t.Fatalf("path is still %v", fi.Mode())
			}
			if got := readFile(t, path); got != "secret" {
				t.Errorf("content = %q", got)
			}
			if dangling {
				if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the dangling symlink's target was created: %v", err)
				}
			} else if got := readFile(t, target); got != "precious" {
				t.Errorf("symlink target changed to %q", got)
			}
			assertNoTemp(t, dir, "gateway.token")
		})
	}
}

func TestWriteFileAtomicFailures(t *testing.T) {
	dir := t.TempDir()
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Error("write into a missing directory succeeded")
	}
	// A directory at the path cannot be replaced by a file; the temp file is cleaned up.
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, "sub"), []byte("x")); err == nil {
		t.Error("replacing a directory succeeded")
	}
	assertNoTemp(t, dir, "sub")
}

func TestSyncDir(t *testing.T) {
	if err := fsutil.SyncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	if err := fsutil.SyncDir(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("SyncDir of a missing directory succeeded")
	}
}

func TestCreateExclusive(t *testing.T) {
	dir := t.TempDir()
	t.Run("creates a private file", func(t *testing.T) {
		path := filepath.Join(dir, "new")
		f, err := fsutil.CreateExclusive(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("hello"); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if p := perm(t, path); p != 0o600 {
			t.Errorf("mode %v, want 0600", p)
		}
		if got := readFile(t, path); got != "hello" {
			t.Errorf("content %q", got)
		}
	})
	t.Run("fails on an existing file", func(t *testing.T) {
		path := filepath.Join(dir, "exists")
		writeFile(t, path, "keep", 0o600)
		f, err := fsutil.CreateExclusive(path)
		if err == nil {
			_ = f.Close()
			t.Fatal("CreateExclusive succeeded on an existing file")
		}
		if !errors.Is(err, fs.ErrExist) {
			t.Errorf("error %v is not ErrExist", err)
		}
		if got := readFile(t, path); got != "keep" {
			t.Errorf("existing file changed to %q", got)
		}
	})
	for _, dangling := range []bool{false, true} {
		t.Run("fails on a symlink, dangling="+map[bool]string{false: "no", true: "yes"}[dangling], func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "target")
			if !dangling {
				writeFile(t, target, "keep", 0o644)
			}
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			f, err := fsutil.CreateExclusive(link)
			if err == nil {
				_ = f.Close()
				t.Fatal("CreateExclusive succeeded on a symlink")
			}
			if dangling {
				if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("the symlink's target was created: %v", err)
				}
			} else if got := readFile(t, target); got != "keep" {
				t.Errorf("target changed to %q", got)
			}
		})
	}
}

func TestReadFileNoFollow(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "regular")
	writeFile(t, regular, "data", 0o600)
	got, err := fsutil.ReadFileNoFollow(regular)
	if err != nil || string(got) != "data" {
		t.Errorf("ReadFileNoFollow(regular) = %q, %v", got, err)
	}

	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, "", 0o600)
	if got, err := fsutil.ReadFileNoFollow(empty); err != nil || len(got) != 0 {
		t.Errorf("ReadFileNoFollow(empty) = %q, %v", got, err)
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	if got, err := fsutil.ReadFileNoFollow(link); err == nil {
		t.Errorf("ReadFileNoFollow followed a symlink and read %q", got)
	}

	if _, err := fsutil.ReadFileNoFollow(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	if _, err := fsutil.ReadFileNoFollow(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v, want a not-a-regular-file error", err)
	}
}

func TestCheckDirTrust(t *testing.T) {
	t.Run("group or world writable is refused", func(t *testing.T) {
		for _, mode := range []fs.FileMode{0o777, 0o770, 0o702, 0o720} {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			err := fsutil.MkdirPrivate(dir)
			if !errors.Is(err, fsutil.ErrUntrusted) || !strings.Contains(err.Error(), "chmod 700") {
				t.Errorf("mode %04o: err %v, want ErrUntrusted saying how to fix it", mode, err)
			}
			if p := perm(t, dir); p != mode {
				t.Errorf("mode %04o changed to %04o: an untrusted directory must be left for the user to inspect", mode, p)
			}
		}
	})
	t.Run("readable by others is narrowed to 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fsutil.CheckDir(dir); err != nil {
			t.Fatal(err)
		}
		if p := perm(t, dir); p != 0o700 {
			t.Errorf("mode %04o, want 0700", p)
		}
	})
	t.Run("owned by another user is refused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		chownOther(t, dir)
		err := fsutil.MkdirPrivate(dir)
		if !errors.Is(err, fsutil.ErrUntrusted) || !strings.Contains(err.Error(), "owned by uid") {
			t.Fatalf("err %v, want ErrUntrusted naming the owner", err)
		}
	})
}

// chownOther gives path to another user; only root can, so the test skips visibly otherwise.
func chownOther(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
}

func TestReadSecretNoFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	writeFile(t, path, "secret", 0o600)
	if b, err := fsutil.ReadSecretNoFollow(path); err != nil || string(b) != "secret" {
		t.Fatalf("private token: %q, %v", b, err)
	}
	for _, mode := range []fs.FileMode{0o644, 0o640, 0o604, 0o660, 0o606} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := fsutil.ReadSecretNoFollow(path); !errors.Is(err, fsutil.ErrUntrusted) {
			t.Errorf("mode %04o: err %v, want ErrUntrusted", mode, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	chownOther(t, path)
	if _, err := fsutil.ReadSecretNoFollow(path); !errors.Is(err, fsutil.ErrUntrusted) {
		t.Errorf("token of another user: err %v, want ErrUntrusted", err)
	}
}

func TestLockNeverFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "planted")
	lock := filepath.Join(dir, "gateway.lock")
	if err := os.Symlink(outside, lock); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fsutil.TryLock(lock); !errors.Is(err, fsutil.ErrUntrusted) {
		t.Fatalf("TryLock through a symlink: err %v, want ErrUntrusted", err)
	}
	if _, err := fsutil.LockContext(t.Context(), lock, time.Millisecond); !errors.Is(err, fsutil.ErrUntrusted) {
		t.Fatalf("LockContext through a symlink: err %v, want ErrUntrusted", err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the symlink's target was created: %v", err)
	}
}

func TestLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, ok, err := fsutil.TryLock(path)
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if p := perm(t, path); p != 0o600 {
		t.Errorf("lock file mode %04o, want 0600", p)
	}
	if _, ok, err := fsutil.TryLock(path); err != nil || ok {
		t.Fatalf("second lock taken while the first is held: %v %v", ok, err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	l2, ok, err := fsutil.TryLock(path)
	if err != nil || !ok {
		t.Fatalf("lock after unlock: %v %v", ok, err)
	}
	_ = l2.Unlock()
}

// TestDirWatchEndedContext: a Wait entered with its context already ended returns at once,
// every time (nexus agent runs --follow hung when its context ended between two waits: the
// deadline ctx set from AfterFunc's goroutine could be cleared after it was set), and a Wait
// after a change returns.
func TestDirWatchEndedContext(t *testing.T) {
	dir := t.TempDir()
	w, err := fsutil.WatchDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(context.Background()); err != nil {
		t.Fatalf("wait after a change: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 2000 {
		if err := w.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait with an ended context: %v", err)
		}
	}
}
