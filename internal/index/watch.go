package index

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/index/source"
)

// WatchOptions configures Watch.
type WatchOptions struct {
	SyncOptions
	// Debounce is how long after a change the changed files are synced, so a burst of
	// appends is read once (default 100ms).
	Debounce time.Duration
	// OnSync, if set, is called after each sync, the first full one included.
	OnSync func(*Summary, error)
}

// DefaultDebounce is Watch's default debounce.
const DefaultDebounce = 100 * time.Millisecond

// watchMask is what a watched directory reports: files written, created, moved or removed,
// and directories appearing in it.
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO |
	unix.IN_MOVED_FROM | unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// Watch syncs once, then follows the sources' directories with inotify and syncs each changed
// file as it changes, until ctx ends. It uses no CPU while nothing changes: it blocks on the
// inotify descriptor, with no timer or poll. A directory created later (a new day of Codex
// sessions, a new Claude Code project, a root that did not exist yet) is watched as it appears.
func (ix *Index) Watch(ctx context.Context, o WatchOptions) error {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	srcs, err := Sources(o.Sources)
	if err != nil {
		return err
	}
	roots, err := o.roots(srcs)
	if err != nil {
		return err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("index: watch: inotify: %w", err)
	}
	// A non-blocking descriptor in an os.File waits in the runtime's poller, and Close wakes
	// the reader when ctx ends.
	f := os.NewFile(uintptr(fd), "inotify")
	w := &watcher{ix: ix, opts: o, fd: fd, dirs: map[int]string{}, wds: map[string]int{}, roots: map[string]source.Source{}}
	for _, s := range srcs {
		for _, r := range roots[s.Name()] {
			w.roots[filepath.Clean(r)] = s
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	defer stop()
	defer func() { _ = f.Close() }()
	for r := range w.roots {
		w.watchRoot(r)
	}
	// Watches first, then the sync: a file written in between is seen by one or the other.
	w.report(ix.Sync(ctx, o.SyncOptions))

	events := make(chan []byte)
	readErr := make(chan error, 1)
	readerDone := make(chan struct{})
	// Watch returns only once its reader has: closing the descriptor (the deferred Close, or
	// ctx's AfterFunc) ends its Read.
	defer func() { _ = f.Close(); <-readerDone }()
	go func() {
		defer close(readerDone)
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				readErr <- err
				close(events)
				return
			}
			b := make([]byte, n)
			copy(b, buf[:n])
			select {
			case events <- b:
			case <-ctx.Done():
				close(events)
				return
			}
		}
	}()
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case b, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("index: watch: %w", <-readErr)
			}
			w.handle(b)
			if fire == nil && (len(w.dirty) > 0 || w.full) {
				timer = time.NewTimer(o.Debounce)
				fire = timer.C
			}
		case <-fire:
			fire = nil
			w.flush(ctx)
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
	}
}

type watcher struct {
	ix    *Index
	opts  WatchOptions
	fd    int
	dirs  map[int]string // watch descriptor -> directory
	wds   map[string]int
	roots map[string]source.Source
	// pending are the roots that do not exist yet, by the ancestor watched for them.
	pending map[string][]string
	dirty   map[string]source.Source
	full    bool // a full sync is due (queue overflow, a new directory)
}

func (w *watcher) report(sum *Summary, err error) {
	if w.opts.OnSync != nil {
		w.opts.OnSync(sum, err)
	}
}

// watchRoot watches a root and every directory under it, or, while it does not exist, its
// nearest existing ancestor.
func (w *watcher) watchRoot(root string) {
	if _, err := os.Lstat(root); err == nil {
		w.watchTree(root)
		return
	}
	for dir := filepath.Dir(root); ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			if w.addMask(dir, ancestorMask) {
				if w.pending == nil {
					w.pending = map[string][]string{}
				}
				w.pending[dir] = append(w.pending[dir], root)
			}
			return
		}
		if dir == filepath.Dir(dir) {
			return
		}
	}
}

func (w *watcher) watchTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // an unreadable directory is left out, the rest watched
		}
		if d.IsDir() {
			w.add(p)
		}
		return nil
	})
}

func (w *watcher) add(dir string) bool { return w.addMask(dir, watchMask) }

// ancestorMask is what a directory watched only for a root to appear in it reports: entries
// created or moved in, not the writes to its files ($HOME's own files change all day).
const ancestorMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

func (w *watcher) addMask(dir string, mask uint32) bool {
	if _, ok := w.wds[dir]; ok {
		return true
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, mask)
	if err != nil {
		w.report(nil, fmt.Errorf("index: watch %s: %w", dir, err))
		return false
	}
	w.dirs[wd], w.wds[dir] = dir, wd
	return true
}

// sourceOf is the source whose root holds p.
func (w *watcher) sourceOf(p string) (source.Source, bool) {
	best := ""
	var src source.Source
	for r, s := range w.roots {
		if (p == r || strings.HasPrefix(p, r+string(filepath.Separator))) && len(r) > len(best) {
			best, src = r, s
		}
	}
	return src, src != nil
}

func (w *watcher) handle(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0])) //nolint:gosec // the kernel's record layout
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			w.full = true
			continue
		}
		dir, ok := w.dirs[int(ev.Wd)]
		if !ok {
			continue
		}
		if ev.Mask&unix.IN_IGNORED != 0 || ev.Mask&unix.IN_DELETE_SELF != 0 {
			delete(w.dirs, int(ev.Wd))
			delete(w.wds, dir)
			if w.isRoot(dir) {
				w.full = true // its files are gone: mark them
			}
			continue
		}
		p := filepath.Join(dir, name)
		if roots, ok := w.pending[dir]; ok && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			// Something appeared where a root is awaited: look again at each.
			delete(w.pending, dir)
			for _, r := range roots {
				w.watchRoot(r)
				if _, err := os.Lstat(r); err == nil {
					w.full = true
				}
			}
		}
		if ev.Mask&unix.IN_ISDIR != 0 {
			if ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
				if _, ok := w.sourceOf(p); ok {
					w.watchTree(p)
					w.full = true // files may have been written before the watch
				}
			}
			if ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 {
				w.full = true
			}
			continue
		}
		if !strings.Contains(name, ".jsonl") && !strings.HasSuffix(name, ".db") &&
			(!strings.HasPrefix(name, "session-") || !strings.HasSuffix(name, ".json")) {
			continue // sessions.json, locks, temporary files, a database's WAL
		}
		src, ok := w.sourceOf(p)
		if !ok {
			continue
		}
		if w.dirty == nil {
			w.dirty = map[string]source.Source{}
		}
		w.dirty[p] = src
	}
}

func (w *watcher) isRoot(dir string) bool {
	_, ok := w.roots[dir]
	return ok
}

func (w *watcher) flush(ctx context.Context) {
	if w.full {
		w.full, w.dirty = false, nil
		for r := range w.roots {
			if _, ok := w.wds[r]; !ok {
				w.watchRoot(r) // a root removed and made again
			}
		}
		w.report(w.ix.Sync(ctx, w.opts.SyncOptions))
		return
	}
	dirty := w.dirty
	w.dirty = nil
	if len(dirty) == 0 {
		return
	}
	sum, err := w.ix.SyncPaths(ctx, dirty, w.opts.SyncOptions)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return
	}
	w.report(sum, err)
}
