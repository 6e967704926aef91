// Package fsutil writes state files the way every nexus store must: private permissions, no
// symlink following, and atomic replacement (temp file, fsync, rename, fsync directory).
package fsutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Private permissions for state.
const (
	FileMode fs.FileMode = 0o600
	DirMode  fs.FileMode = 0o700
)

// ErrUntrusted is returned for a state directory or secret file that another local user owns or
// could have written: nexus would otherwise act on (or leak) whatever that user put there.
var ErrUntrusted = errors.New("untrusted state")

// MkdirPrivate creates dir (and parents) with mode 0700, refuses a symlink at dir itself, and
// checks that dir is trustworthy (see CheckDir). A directory that is ours and only readable by
// others is narrowed to 0700.
func MkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	return CheckDir(dir)
}

// CheckDir refuses a state directory that is a symlink, is owned by another user, or that group
// or others may write; when it is ours and merely readable by others, it narrows it to 0700.
func CheckDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("stat directory %s: %w", dir, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("%w: state directory %s is not a plain directory (a symlink or a file is there; remove it)", ErrUntrusted, dir)
	}
	if err := checkOwner(dir, fi); err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if perm&0o022 != 0 {
		return fmt.Errorf("%w: state directory %s has mode %04o, so other users could have put files in it; check its contents, then run: chmod 700 %s", ErrUntrusted, dir, perm, dir)
	}
	if perm&0o077 != 0 {
		if err := os.Chmod(dir, DirMode); err != nil { //nolint:gosec // G302: narrowing to 0700
			return fmt.Errorf("narrow %s to 0700: %w", dir, err)
		}
	}
	return nil
}

// CheckSecret refuses a secret file (a bearer token, a key) that another user owns or that group
// or others may read or write: it would be a secret that is not one, or one chosen by someone else.
func CheckSecret(path string, fi fs.FileInfo) error {
	if err := checkOwner(path, fi); err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: secret file %s has mode %04o, so other users can read or change it; delete it (a new one is made) or run: chmod 600 %s", ErrUntrusted, path, perm, path)
	}
	return nil
}

func checkOwner(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d); use a state directory of your own (--state-dir or NEXUS_HOME), or, if it is yours, run: chown -R %d %s", ErrUntrusted, path, st.Uid, uid, uid, path)
	}
	return nil
}

// Lock is an exclusive advisory lock on a lock file that is created private and never through a
// symlink.
type Lock struct{ f *os.File }

// TryLock takes the lock at path without waiting; ok is false when another holder has it.
func TryLock(path string) (l *Lock, ok bool, err error) {
	f, err := openLock(path)
	if err != nil {
		return nil, false, err
	}
	if ok, err = LockFile(f, false); !ok || err != nil {
		_ = f.Close()
		if err != nil {
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, false, nil
	}
	return &Lock{f: f}, true, nil
}

// LockWait takes the lock at path, waiting as long as another holder keeps it (the kernel drops
// a dead holder's lock).
func LockWait(path string) (*Lock, error) {
	f, err := openLock(path)
	if err != nil {
		return nil, err
	}
	if _, err := LockFile(f, true); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// LockFile takes an exclusive flock on the open file f, waiting for it when wait is set;
// without wait it reports false when another open file holds it. It is the repository's one
// flock: lock files (Lock), a transcript's writer lock and sessions.json's all take it here. It
// goes through SyscallConn, never Fd, which would switch a non-blocking file to blocking.
func LockFile(f *os.File, wait bool) (bool, error) {
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false, fmt.Errorf("flock: %w", err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lerr = unix.Flock(int(fd), how) // #nosec G115 -- a file descriptor fits an int
			if !errors.Is(lerr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return false, fmt.Errorf("flock: %w", err)
	}
	switch {
	case !wait && errors.Is(lerr, unix.EWOULDBLOCK):
		return false, nil
	case lerr != nil:
		return false, fmt.Errorf("flock: %w", lerr)
	}
	return true, nil
}

// UnlockFile releases the flock on f (LockFile's). Closing alone can leave the lock held: it
// belongs to the open file description, which a child process forked at that moment (any
// exec.Cmd of the program: a shell, a PTY, a tool) shares until it execs; LOCK_UN on the
// description releases it for every copy.
func UnlockFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	var uerr error
	if err := rc.Control(func(fd uintptr) {
		uerr = unix.Flock(int(fd), unix.LOCK_UN) // #nosec G115 -- a file descriptor fits an int
	}); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	if uerr != nil {
		return fmt.Errorf("unlock: %w", uerr)
	}
	return nil
}

// LockContext takes the lock at path, retrying every interval until ctx ends.
func LockContext(ctx context.Context, path string, interval time.Duration) (*Lock, error) {
	for {
		l, ok, err := TryLock(path)
		if err != nil || ok {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// Unlock releases the lock (closing the file releases it too, should the process die).
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	// LOCK_UN first: a child forked at this moment shares the open file, and with it the lock,
	// until it execs, so closing alone could leave the lock held a little longer.
	_ = UnlockFile(l.f)
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

func openLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, FileMode) //nolint:gosec // G304: see SyncDir
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: lock file %s is a symlink; remove it", ErrUntrusted, path)
		}
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: lock file %s is not a regular file; remove it", ErrUntrusted, path)
	}
	if err == nil {
		err = checkOwner(path, fi)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// WriteFileAtomic replaces path with data: a temp file in the same directory, fsync, rename,
// fsync of the directory. A symlink at path is replaced, never followed.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(name)
		}
	}()
	if err := tmp.Chmod(FileMode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	ok = true
	return SyncDir(dir)
}

// ReplaceFile replaces path with data through a temp file and a rename, without fsync: for
// records that must survive the death of the process that writes them (the page cache does)
// but need not survive the machine's (what they describe does not either).
func ReplaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(name, path)
	}
	if werr != nil {
		_ = os.Remove(name)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}

// SyncDir fsyncs a directory so a rename in it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // G304: state paths are the operator's, not a client's
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// CreateExclusive creates a new private file, failing if anything (a symlink included) is there.
func CreateExclusive(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, FileMode) //nolint:gosec // G304: see SyncDir
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return f, nil
}

// ReadFileNoFollow reads a regular file, refusing symlinks.
func ReadFileNoFollow(path string) ([]byte, error) {
	return readNoFollow(path, false)
}

// ReadSecretNoFollow reads a secret file, refusing symlinks and files that fail CheckSecret.
func ReadSecretNoFollow(path string) ([]byte, error) {
	return readNoFollow(path, true)
}

func readNoFollow(path string, secret bool) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0) //nolint:gosec // G304: see SyncDir
	if err != nil {
		return nil, err //nolint:wrapcheck // callers test os.IsNotExist and add context
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if secret {
		if err := CheckSecret(path, fi); err != nil {
			return nil, err
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

// PrepareDB readies path for an SQLite database that must stay private: its directory 0700,
// the database and its -wal and -shm files regular files when they exist (a symlink or
// anything else is refused), and the database created 0600 when missing, since SQLite gives
// the WAL and shared-memory files the database file's mode.
func PrepareDB(path string) error {
	if err := MkdirPrivate(filepath.Dir(path)); err != nil {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("database %s: %w", p, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("database %s: %w", p, ErrNotRegular)
		}
	}
	f, err := CreateExclusive(path)
	if err == nil {
		return f.Close() //nolint:wrapcheck // a close error of a fresh empty file
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// ErrNotRegular is PrepareDB's refusal of a symlink or special file.
var ErrNotRegular = errors.New("not a regular file")

// DirWatch reports changes of a directory's entries (a file created, written, renamed in or
// out, deleted): what a store that replaces its file by rename looks like from outside.
type DirWatch struct{ f *os.File }

// WatchDir starts watching dir (not following a symlink).
func WatchDir(dir string) (*DirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	mask := uint32(unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE | unix.IN_DELETE | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR)
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	// Non-blocking, so the runtime's poller waits for it and a deadline can end the wait.
	return &DirWatch{f: os.NewFile(uintptr(fd), "inotify:"+dir)}, nil
}

// Wait returns once something changed in the directory since the last Wait (at once if it
// did meanwhile), or with ctx's error when ctx ends first.
func (w *DirWatch) Wait(ctx context.Context) error {
	// The deadline is cleared before ctx may set it: with ctx already done, AfterFunc sets it at
	// once from its own goroutine, and a clear after that would leave the read waiting forever.
	_ = w.f.SetReadDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 64<<10)
	if _, err := w.f.Read(buf); err != nil {
		if ctx.Err() != nil {
			return ctx.Err() //nolint:wrapcheck // the caller's own context
		}
		return fmt.Errorf("inotify: %w", err)
	}
	return nil
}

// Close stops watching.
func (w *DirWatch) Close() error { return w.f.Close() } //nolint:wrapcheck // closing an inotify descriptor
