package fsutil_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/fsutil"
)

// TestLockFile: the one flock of the repository. Two open files of one path exclude each
// other (as two processes would); without wait the second is told so, with wait it gets the
// lock once the first lets go; and TryLock, LockWait and Unlock are the same lock.
func TestLockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	a, b := open(), open()
	if ok, err := fsutil.LockFile(a, false); !ok || err != nil {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if ok, err := fsutil.LockFile(b, false); ok || err != nil {
		t.Fatalf("second lock without wait: %v %v, want false", ok, err)
	}
	if _, ok, err := fsutil.TryLock(path); ok || err != nil {
		t.Fatalf("TryLock while held: %v %v", ok, err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := fsutil.LockFile(b, true)
		got <- err
	}()
	if err := fsutil.UnlockFile(a); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting lock: %v", err)
	}
	mustUnlock := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustUnlock(fsutil.UnlockFile(b))
	l, err := fsutil.LockWait(path)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := fsutil.LockFile(a, false); ok || err != nil {
		t.Fatalf("LockFile while LockWait holds it: %v %v", ok, err)
	}
	mustUnlock(l.Unlock())
	l2, ok, err := fsutil.TryLock(path)
	if !ok || err != nil {
		t.Fatalf("TryLock after Unlock: %v %v", ok, err)
	}
	mustUnlock(l2.Unlock())
}
