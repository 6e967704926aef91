package logtail

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// dirMask is what is watched in a directory: a name appearing, going or changing files, and the
// directory itself going. IN_ATTRIB is there for a new file not yet readable: logrotate creates
// it, then sets its owner and mode.
const dirMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// fileMask is what is watched on an open file: data written (a truncation is one too).
const fileMask = unix.IN_MODIFY

// watcher is an inotify instance watching the directories and open files of a follower.
type watcher struct {
	f     *os.File
	dirs  map[int32]bool // the watch descriptors of directories
	curWd int32          // the watch descriptor of the file being read, -1 if none
	// provisional: a directory is missing and an ancestor is watched in its stead, to learn
	// when it is created; the watches are set up again after every event.
	provisional bool
	buf         []byte
}

// newWatcher watches dirs (or, for one that is missing, its nearest existing ancestor) and
// files, the one being read first. The non-blocking descriptor becomes a pollable *os.File: reads wait in the runtime's
// poller, and a read deadline ends a wait when the follower's context ends.
func newWatcher(inotifyInit func(int) (int, error), dirs []string, files []*os.File) (*watcher, error) {
	fd, err := inotifyInit(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &watcher{dirs: map[int32]bool{}, curWd: -1, buf: make([]byte, 4096)}
	for _, dir := range dirs {
		wd, provisional, err := addDir(fd, dir)
		if err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
		w.dirs[wd] = true
		w.provisional = w.provisional || provisional
	}
	for i, f := range files {
		// Through the descriptor, so that the watch is on the file held open, whatever is at its
		// name by now (deleted or renamed files included).
		wd, err := unix.InotifyAddWatch(fd, fdPath(f), fileMask)
		if err != nil {
			_ = unix.Close(fd)
			return nil, fmt.Errorf("watch %s: %w", f.Name(), err)
		}
		if i == 0 {
			w.curWd = int32(wd)
		}
	}
	w.f = os.NewFile(uintptr(fd), "inotify")
	return w, nil
}

// addDir watches dir, or its nearest existing ancestor when it is missing (provisional).
func addDir(fd int, dir string) (wd int32, provisional bool, err error) {
	for d := dir; ; d = filepath.Dir(d) {
		n, err := unix.InotifyAddWatch(fd, d, dirMask)
		if err == nil {
			return int32(n), d != dir, nil
		}
		missing := errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
		if !missing || d == filepath.Dir(d) {
			return 0, false, fmt.Errorf("watch directory %s: %w", d, err)
		}
	}
}

// events sums up what woke a watcher.
type events struct {
	// rearm: the watches must be set up again (a watched directory went, or is an ancestor
	// standing in for a missing one).
	rearm bool
	// names: something else than data written to the file being read happened (in a directory,
	// to the next file, an overflow of the queue): the path must be looked at again.
	names bool
}

// wait returns after one or more events, or with ctx's error once it ends.
func (w *watcher) wait(ctx context.Context) (events, error) {
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Unix(1, 0)) })
	n, err := w.f.Read(w.buf)
	stop()
	if ctx.Err() != nil {
		return events{}, ctx.Err() //nolint:wrapcheck // the caller's own context, told apart by Follow
	}
	if err != nil {
		return events{}, fmt.Errorf("inotify: %w", err)
	}
	ev := events{rearm: w.provisional}
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		wd := int32(binary.NativeEndian.Uint32(w.buf[off:]))
		mask := binary.NativeEndian.Uint32(w.buf[off+4:])
		nameLen := binary.NativeEndian.Uint32(w.buf[off+12:])
		if mask&unix.IN_IGNORED != 0 || (w.dirs[wd] && mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0) {
			ev.rearm = true
		}
		if wd != w.curWd || mask != unix.IN_MODIFY {
			ev.names = true
		}
		off += unix.SizeofInotifyEvent + int(nameLen)
	}
	return ev, nil
}

func (w *watcher) close() { _ = w.f.Close() }
