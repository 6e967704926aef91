package permission

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nexus-run/nexus/internal/shell/policy"
)

// shellView is what a shell command's text shows to the decision: the allowance keys of the
// programs it runs, the files its redirections open (decided like a tool's path arguments),
// and what in it cannot be known before it runs.
type shellView struct {
	programs []string // allowance keys (see programKey)
	paths    []Path   // redirection targets that need a decision
	dynamic  []string // why part of it is only known when it runs
	refusal  string   // set when it names a blocked path
}

// viewShell inspects a shell command run from cwd. At every level, a path its text shows (a
// redirection's target, an argument word, a word's static start) under a blocked path refuses
// it; what it touches otherwise is only looked at in TRUSTED mode (full).
func (c *Checker) viewShell(tool, command, cwd string, full bool) shellView {
	var v shellView
	rep, err := policy.Inspect(command)
	var viol *policy.Violation
	switch {
	case errors.As(err, &viol):
		v.dynamic = append(v.dynamic, viol.Rule+": "+viol.Program)
	case err != nil:
		v.dynamic = append(v.dynamic, err.Error())
	}
	if cwd == "" {
		cwd = c.ws
	}
	for _, ref := range slices.Concat(rep.Redirects, rep.Args) {
		for _, p := range c.staticPaths(ref, cwd) {
			if c.isBlocked(p) {
				v.refusal = fmt.Sprintf("the command names %s, which is blocked for the agent", quote(ref.Text))
				return v
			}
		}
	}
	if !full {
		return v
	}
	for _, ref := range rep.Redirects {
		switch {
		case !ref.Static:
			v.dynamic = append(v.dynamic, fmt.Sprintf("redirection to %s: its path is only known when the shell expands it", ref.Text))
			continue
		case !filepath.IsAbs(ref.Path) && rep.ChangesDir:
			v.dynamic = append(v.dynamic, fmt.Sprintf("redirection to %s: a relative path in a command that changes directory", ref.Text))
			continue
		}
		abs := filepath.Clean(filepath.Join(cwd, ref.Path))
		if filepath.IsAbs(ref.Path) {
			abs = filepath.Clean(ref.Path)
		}
		if harmlessDevice(abs) {
			continue
		}
		acc := Read
		if ref.Write {
			acc = Write
		}
		if _, err := resolveExisting(abs); err != nil {
			// A dangling link is written through to a target this decision does not know.
			v.dynamic = append(v.dynamic, fmt.Sprintf("redirection to %s: where it leads cannot be resolved", ref.Text))
			continue
		}
		p, err := c.Resolve(tool, abs, acc)
		if err != nil {
			// Outside the tool's allowed paths (a blocked path was refused above).
			v.refusal = fmt.Sprintf("redirection to %s: %v", quote(ref.Text), err)
			return v
		}
		v.paths = append(v.paths, p)
	}
	for _, prog := range rep.Programs {
		key, ok := programKey(prog.Name, cwd, !rep.ChangesDir)
		if !ok {
			v.dynamic = append(v.dynamic, fmt.Sprintf("program %s: a relative path in a command that changes directory", quote(prog.Name)))
			continue
		}
		if !slices.Contains(v.programs, key) {
			v.programs = append(v.programs, key)
		}
	}
	return v
}

// staticPaths are the absolute paths a word of a command may name, as far as its text shows:
// the word itself when static, the value of a --name=VALUE option, the directory its static
// start names when it is not static. A leading ~ is the gateway's home (the shell's usually is).
func (c *Checker) staticPaths(ref policy.FileRef, cwd string) []string {
	var cands []string
	if ref.Static {
		cands = append(cands, ref.Path)
		if i := strings.IndexByte(ref.Path, '='); i > 0 && strings.HasPrefix(ref.Path, "-") {
			cands = append(cands, ref.Path[i+1:])
		}
	} else if i := strings.LastIndexByte(ref.Prefix, '/'); i >= 0 {
		cands = append(cands, ref.Prefix[:i+1])
	}
	out := cands[:0]
	for _, s := range cands {
		if s == "" || strings.IndexByte(s, 0) >= 0 || len(s) > MaxPathLen {
			continue
		}
		if s == "~" || strings.HasPrefix(s, "~/") {
			home, err := os.UserHomeDir()
			if err != nil {
				continue
			}
			s = home + s[1:]
		}
		if !filepath.IsAbs(s) {
			s = filepath.Join(cwd, s)
		}
		out = append(out, filepath.Clean(s))
	}
	return out
}

// isBlocked reports whether an absolute, clean path lies under a blocked path, as written or
// once its symbolic links are resolved.
func (c *Checker) isBlocked(p string) bool {
	resolved, err := resolveExisting(p)
	for _, b := range c.blocked {
		if within(p, b.lexical) || (err == nil && within(resolved, b.resolved)) {
			return true
		}
	}
	return false
}

// harmlessDevice: the files a redirection may open anywhere without a question: the null
// device, the command's own standard streams, and descriptors below the shell's own (10 up,
// where the session reads its commands from).
func harmlessDevice(p string) bool {
	switch p {
	case "/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/zero", "/dev/random", "/dev/urandom":
		return true
	}
	if n, ok := strings.CutPrefix(p, "/dev/fd/"); ok {
		fd, err := strconv.Atoi(n)
		return err == nil && fd >= 0 && fd < policy.MinShellFD
	}
	return false
}

// programKey is the allowance key of a program a command names: its path, absolute, with its
// directory's symbolic links resolved (not the final name's: a multi-call binary such as
// busybox is one file behind many names, and runs what its name says). A bare name is looked
// up in PATH (the gateway's, which the shell inherits); one PATH does not hold (a builtin, a
// function, a program not installed) is its own key. A relative path is relative to cwd;
// when the command changes directory it cannot be resolved (ok false).
func programKey(name, cwd string, cwdKnown bool) (string, bool) {
	if !strings.Contains(name, "/") {
		p, found := lookPath(name, cwd)
		if !found {
			return name, true
		}
		name = p
	}
	if !filepath.IsAbs(name) {
		if !cwdKnown || cwd == "" {
			return "", false
		}
		name = filepath.Join(cwd, name)
	}
	name = filepath.Clean(name)
	dir, base := filepath.Split(name)
	if r, err := resolveExisting(filepath.Clean(dir)); err == nil {
		return filepath.Join(r, base), true
	}
	return name, true
}

// lookPath finds a bare program name in PATH as the shell would: the first executable
// regular file of that name; an empty or relative entry is relative to cwd (skipped when cwd
// is unknown).
func lookPath(name, cwd string) (string, bool) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			if cwd == "" {
				continue
			}
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 { //nolint:gosec // G703: a lookup in PATH, as the shell does; nothing is opened
			return p, true
		}
	}
	return "", false
}
