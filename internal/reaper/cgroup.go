package reaper

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the cgroup v2 hierarchy is mounted and where this process sits in it.
func cgroupSelf() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	rel := ""
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
			break
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 membership in /proc/self/cgroup")
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	defer func() { _ = mi.Close() }()
	sc := bufio.NewScanner(mi)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		root, mnt := f[3], f[4]
		if root != "/" && !strings.HasPrefix(rel, root) {
			continue
		}
		return filepath.Join(mnt, strings.TrimPrefix(rel, strings.TrimSuffix(root, "/"))), nil
	}
	return "", errors.New("no cgroup v2 hierarchy mounted")
}

// makeOwnerCgroup creates the owner's cgroup below this process's own and checks that a child
// can be started straight into a group of it (clone3 with CLONE_INTO_CGROUP). kill reports
// whether cgroup.kill exists (Linux 5.14).
func makeOwnerCgroup(id string) (dir string, kill bool, err error) {
	self, err := cgroupSelf()
	if err != nil {
		return "", false, err
	}
	dir = filepath.Join(self, "nexus-"+id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) { //nolint:gosec // G301: a cgroup directory
		return "", false, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	if err := probe(dir); err != nil {
		removeCgroupTree(dir)
		return "", false, err
	}
	_, err = os.Stat(filepath.Join(dir, "cgroup.kill"))
	return dir, err == nil, nil
}

// probe starts a short process into a throwaway group of dir.
func probe(dir string) error {
	p := filepath.Join(dir, "probe")
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) { //nolint:gosec // G301: a cgroup directory
		return fmt.Errorf("create cgroup %s: %w", p, err)
	}
	defer func() { _ = os.Remove(p) }()
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", p, err)
	}
	defer func() { _ = syscall.Close(fd) }()
	bin, err := exec.LookPath("true")
	if err != nil {
		bin = "/bin/sh"
	}
	cmd := exec.Command(bin) //nolint:noctx // exits at once
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start a process into cgroup %s: %w", p, err)
	}
	return nil
}

// validCgroupPath refuses a recorded path that is not a nexus cgroup, so a tampered record
// cannot make nexus kill another cgroup's processes.
func validCgroupPath(p string) bool {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return false
	}
	for d := p; d != "/" && d != "."; d = filepath.Dir(d) {
		if strings.HasPrefix(filepath.Base(d), "nexus-") {
			var st unix.Statfs_t
			return unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
		}
	}
	return false
}

// cgroupMembers lists the pids of dir and of every cgroup below it.
func cgroupMembers(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil //nolint:nilerr // a group removed while we walk has no members
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs")) //nolint:gosec // G304: a cgroup file
		if err != nil {
			return nil //nolint:nilerr // as above
		}
		for _, f := range bytes.Fields(b) {
			if pid, err := strconv.Atoi(string(f)); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// cgroupKill kills every process of dir and below in one step.
func cgroupKill(dir string) bool {
	return os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) == nil
}

// cgroupPopulated reads cgroup.events: whether dir or a cgroup below it has a live process.
func cgroupPopulated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events")) //nolint:gosec // G304: a cgroup file
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// removeCgroupTree removes dir and the cgroups below it, deepest first (only empty cgroups
// can be removed).
func removeCgroupTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// cgWatcher learns through inotify when a cgroup's cgroup.events changes, so that any number
// of groups can be waited for without polling each.
type cgWatcher struct {
	fd int      // for inotify_add_watch: (*os.File).Fd would make f blocking
	f  *os.File // reads go through the runtime's poller, so close unblocks them

	mu     sync.Mutex
	byPath map[string]*watched
	byWD   map[int32]*watched
}

type watched struct {
	wd      int32
	changed chan struct{} // closed and replaced at every event
}

func newCgWatcher() (*cgWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &cgWatcher{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), byPath: map[string]*watched{}, byWD: map[int32]*watched{}}
	go w.run()
	return w, nil
}

func (w *cgWatcher) run() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			w.mu.Lock()
			for _, x := range w.byWD {
				close(x.changed)
				x.changed = make(chan struct{})
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off])) //nolint:gosec // G103: the kernel's event layout
			if x := w.byWD[ev.Wd]; x != nil {
				close(x.changed)
				x.changed = make(chan struct{})
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		w.mu.Unlock()
	}
}

// wait returns once dir's cgroup.events says it is not populated.
func (w *cgWatcher) wait(ctx context.Context, dir string) error {
	events := filepath.Join(dir, "cgroup.events")
	w.mu.Lock()
	x := w.byPath[dir]
	if x == nil {
		wd, err := unix.InotifyAddWatch(w.fd, events, unix.IN_MODIFY)
		if err != nil {
			w.mu.Unlock()
			if errors.Is(err, unix.ENOENT) {
				return nil // the cgroup is gone, so it is empty
			}
			return fmt.Errorf("watch %s: %w", events, err)
		}
		x = &watched{wd: int32(wd), changed: make(chan struct{})}
		w.byPath[dir], w.byWD[x.wd] = x, x
	}
	w.mu.Unlock()
	for {
		w.mu.Lock()
		ch := x.changed
		w.mu.Unlock()
		if !cgroupPopulated(dir) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for cgroup %s to empty: %w", dir, ctx.Err())
		}
	}
}

func (w *cgWatcher) forget(dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.byPath[dir]; x != nil {
		_, _ = unix.InotifyRmWatch(w.fd, uint32(x.wd))
		delete(w.byPath, dir)
		delete(w.byWD, x.wd)
	}
}

func (w *cgWatcher) close() { _ = w.f.Close() }
