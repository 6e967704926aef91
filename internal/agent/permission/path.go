package permission

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Access is what a tool does with a path.
type Access int

// The accesses.
const (
	Read Access = iota
	Write
)

func (a Access) String() string {
	if a == Write {
		return "write"
	}
	return "read"
}

// MaxPathLen bounds a path argument (PATH_MAX on Linux).
const MaxPathLen = 4096

// ErrRefused marks a path the checker refuses; its text is safe to show to the model.
var ErrRefused = errors.New("path refused")

// Path is a path argument decided by Resolve. Its file operations go through the sandbox's
// os.Root in SANDBOXED mode (no symlink leads out of the workspace, even one swapped in after
// the decision) and refuse a symlink in the final component otherwise. Their errors name the
// path as the model wrote it, never what it resolved to.
type Path struct {
	// Arg is the path as the model gave it.
	Arg string
	// Abs is the path made absolute against the workspace, with its symlinks resolved.
	Abs string
	// Access is what the tool will do with it.
	Access Access
	// Inside reports whether Abs is in the workspace.
	Inside bool
	rel    string // Abs relative to the workspace, when Inside
	root   *os.Root
	// oneLink refuses a regular file with more than one hard link (SANDBOXED mode).
	oneLink bool
}

// Shown is the path as a confirmation request shows it to the user: relative to the workspace
// when inside it, else absolute.
func (p Path) Shown() string {
	if p.Inside {
		return p.rel
	}
	return p.Abs
}

// Resolve is the one path decision function: every path argument of every tool goes through
// it, before the call (for the confirmation decision) and again when the tool uses it. It
// refuses empty, over-long and NUL-carrying paths; makes the path absolute against the
// workspace; resolves its symlinks (the longest existing prefix; a dangling symlink is
// refused); refuses it when it or its resolution lies under a blocked path (blocked wins over
// every allowed path); when the tool has allowed paths, refuses it outside them; in SANDBOXED
// mode refuses it outside the workspace. The error says why without naming any path outside
// the workspace: "outside the workspace", never the resolved target.
func (c *Checker) Resolve(tool, arg string, acc Access) (Path, error) {
	shown := quote(arg)
	switch {
	case arg == "":
		return Path{}, fmt.Errorf("%w: empty path", ErrRefused)
	case strings.IndexByte(arg, 0) >= 0:
		return Path{}, fmt.Errorf("%w: the path contains a NUL byte", ErrRefused)
	case len(arg) > MaxPathLen:
		return Path{}, fmt.Errorf("%w: the path is longer than %d bytes", ErrRefused, MaxPathLen)
	}
	lexical := arg
	if !filepath.IsAbs(lexical) {
		lexical = filepath.Join(c.ws, lexical)
	}
	lexical = filepath.Clean(lexical)
	resolved, err := resolveExisting(lexical)
	if err != nil {
		if errors.Is(err, errDangling) {
			return Path{}, fmt.Errorf("%w: %s is a symbolic link whose target does not exist", ErrRefused, shown)
		}
		return Path{}, fmt.Errorf("%w: %s cannot be resolved", ErrRefused, shown)
	}
	for _, b := range c.blocked {
		if within(lexical, b.lexical) || within(resolved, b.resolved) {
			return Path{}, fmt.Errorf("%w: %s is blocked for the agent", ErrRefused, shown)
		}
	}
	p := Path{Arg: arg, Abs: resolved, Access: acc, Inside: within(resolved, c.ws)}
	if p.Inside {
		p.rel, _ = filepath.Rel(c.ws, resolved)
	}
	if tr := c.tools[tool]; len(tr.allowed) > 0 && !withinAny(resolved, tr.allowed) {
		return Path{}, fmt.Errorf("%w: %s is outside the paths tool %s may use", ErrRefused, shown, tool)
	}
	if c.level == Sandboxed {
		if !p.Inside {
			if within(lexical, c.ws) {
				return Path{}, fmt.Errorf("%w: %s leads outside the workspace (through a symbolic link)", ErrRefused, shown)
			}
			return Path{}, fmt.Errorf("%w: %s is outside the workspace", ErrRefused, shown)
		}
		p.root, p.oneLink = c.root, c.oneLink
	}
	return p, nil
}

var errDangling = errors.New("dangling symlink")

// resolveExisting resolves the symlinks of the longest existing prefix of an absolute, clean
// path and appends the rest (which does not exist, so holds no link).
func resolveExisting(p string) (string, error) {
	rest := ""
	for cur := p; ; {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err //nolint:wrapcheck // the caller words the refusal
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			return "", errDangling // cur exists but its target does not
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", err //nolint:wrapcheck // the caller words the refusal
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func withinAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if within(p, d) {
			return true
		}
	}
	return false
}

// quote shows a model-given path in an error, bounded.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// fail rewords a file operation's error so it names the path as the model wrote it: an
// os.PathError carries the resolved path, which may lie outside the workspace.
func (p Path) fail(op string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%s %s: a symbolic link there is not followed", op, quote(p.Arg))
	}
	if p.root != nil && strings.Contains(err.Error(), "escapes from parent") {
		return fmt.Errorf("%s %s: the path leads outside the workspace", op, quote(p.Arg))
	}
	return fmt.Errorf("%s %s: %w", op, quote(p.Arg), err)
}

// Open opens the path for reading.
func (p Path) Open() (*os.File, error) {
	var f *os.File
	var err error
	if p.root != nil {
		f, err = p.root.Open(p.rel)
	} else {
		f, err = os.OpenFile(p.Abs, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, p.fail("open", err)
	}
	if err := p.checkLinks(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// errHardLink is the sandbox's refusal of a file with other names.
var errHardLink = errors.New("the file has more than one hard link: at level sandboxed a file that may also be named outside the workspace is neither read nor written")

// checkLinks refuses, in SANDBOXED mode, an open regular file with more than one hard link:
// os.Root confines names, not inodes, and a link planted in the workspace may be a file
// outside it.
func (p Path) checkLinks(f *os.File) error {
	if !p.oneLink {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return p.fail("stat", err)
	}
	if linked(fi) {
		return fmt.Errorf("%w: %s: %w", ErrRefused, quote(p.Arg), errHardLink)
	}
	return nil
}

func linked(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && st.Nlink > 1
}

// Stat describes the path.
func (p Path) Stat() (fs.FileInfo, error) {
	var fi fs.FileInfo
	var err error
	if p.root != nil {
		fi, err = p.root.Lstat(p.rel)
	} else {
		fi, err = os.Lstat(p.Abs)
	}
	if err != nil {
		return nil, p.fail("stat", err)
	}
	return fi, nil
}

// ReadDir lists the directory.
func (p Path) ReadDir() ([]fs.DirEntry, error) {
	f, err := p.Open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	es, err := f.ReadDir(-1)
	if err != nil {
		return nil, p.fail("list", err)
	}
	return es, nil
}

// FS is the directory as a file system, for walking. In SANDBOXED mode it is the sandbox's
// view (no link leads out); otherwise callers must not follow the symlinks a walk reports.
func (p Path) FS() (fs.FS, error) {
	if p.root != nil {
		sub, err := fs.Sub(p.root.FS(), filepath.ToSlash(p.rel))
		if err != nil {
			return nil, p.fail("walk", err)
		}
		if p.oneLink {
			return oneLinkFS{sub}, nil
		}
		return sub, nil
	}
	return os.DirFS(p.Abs), nil
}

// oneLinkFS is the sandbox's file system refusing to open a regular file with more than one
// hard link (see checkLinks). Its directory listings and Stat pass through: they read no
// file's content.
type oneLinkFS struct{ fsys fs.FS }

func (o oneLinkFS) Open(name string) (fs.File, error) {
	f, err := o.fsys.Open(name)
	if err != nil {
		return nil, err //nolint:wrapcheck // an fs.FS's own error
	}
	fi, err := f.Stat()
	if err == nil && linked(fi) {
		_ = f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: errHardLink}
	}
	if err != nil {
		_ = f.Close()
		return nil, err //nolint:wrapcheck // an fs.FS's own error
	}
	return f, nil
}

func (o oneLinkFS) ReadDir(name string) ([]fs.DirEntry, error) {
	return fs.ReadDir(o.fsys, name) //nolint:wrapcheck // an fs.FS's own error
}

func (o oneLinkFS) Stat(name string) (fs.FileInfo, error) {
	return fs.Stat(o.fsys, name) //nolint:wrapcheck // an fs.FS's own error
}

// WriteFile replaces the file's content, creating it and its parent directories. An existing
// file keeps its mode; a new one gets perm.
func (p Path) WriteFile(data []byte, perm os.FileMode) error {
	if p.Access != Write {
		return fmt.Errorf("write %s: the path was decided for reading", quote(p.Arg))
	}
	var err error
	if p.root != nil {
		if dir := filepath.Dir(p.rel); dir != "." {
			if err = p.root.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // an agent's project directories are ordinary ones
				return p.fail("create the directory of", err)
			}
		}
		var f *os.File
		// Not O_TRUNC: the file's links are checked before anything of it changes.
		f, err = p.root.OpenFile(p.rel, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, perm)
		if err != nil {
			return p.fail("write", err)
		}
		if err := p.checkLinks(f); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Truncate(0); err != nil {
			_ = f.Close()
			return p.fail("write", err)
		}
		return p.finish(f, data)
	}
	if err = os.MkdirAll(filepath.Dir(p.Abs), 0o755); err != nil { //nolint:gosec // an agent's project directories are ordinary ones
		return p.fail("create the directory of", err)
	}
	f, err := os.OpenFile(p.Abs, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return p.fail("write", err)
	}
	return p.finish(f, data)
}

func (p Path) finish(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return p.fail("write", err)
	}
	if err := f.Close(); err != nil {
		return p.fail("write", err)
	}
	return nil
}
