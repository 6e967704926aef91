package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/agent/permission"
)

// Bounds of a search: glob and grep stop walking after MaxWalkEntries entries and answer at
// most MaxMatches results.
const (
	MaxWalkEntries = 100_000
	MaxMatches     = 1000
)

var errWalkLimit = errors.New("walk limit")

// MatchGlob matches a slash-separated relative path against a pattern in which ** matches
// any number of whole path segments (none included) and each other segment is a path.Match
// pattern.
func MatchGlob(pattern, name string) (bool, error) {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(pat, name []string) (bool, error) {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 1 && pat[1] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 1 {
				return true, nil
			}
			for i := 0; i <= len(name); i++ {
				if ok, err := matchSegs(pat[1:], name[i:]); ok || err != nil {
					return ok, err
				}
			}
			return false, nil
		}
		if len(name) == 0 {
			return false, nil
		}
		ok, err := path.Match(pat[0], name[0])
		if err != nil || !ok {
			return false, err //nolint:wrapcheck // path.ErrBadPattern is the message
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0, nil
}

// walk visits the regular files and directories under a decided directory (never following a
// symbolic link), calling fn with each slash-separated path relative to it.
func walk(ctx context.Context, dir permission.Path, fn func(rel string, d fs.DirEntry) error) (fs.FS, bool, error) {
	fsys, err := dir.FS()
	if err != nil {
		return nil, false, err //nolint:wrapcheck // Path's errors name the argument
	}
	n := 0
	err = fs.WalkDir(fsys, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if rel == "." {
				return err
			}
			return nil // an unreadable subdirectory is skipped, not fatal
		}
		if n++; n > MaxWalkEntries {
			return errWalkLimit
		}
		if err := ctx.Err(); err != nil {
			return err //nolint:wrapcheck // the caller reports the cancellation
		}
		if rel == "." || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		return fn(rel, d)
	})
	if errors.Is(err, errWalkLimit) {
		return fsys, true, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("search cancelled: %w", ctx.Err())
		}
		return nil, false, fmt.Errorf("walk %q: %w", dir.Arg, stripPath(err))
	}
	return fsys, false, nil
}

// stripPath drops the path an fs error carries (it may be the resolved one).
func stripPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// --- glob

type globTool struct{ perm *permission.Checker }

type globArgs struct {
	Pattern string `json:"pattern" jsonschema:"slash-separated pattern relative to path: * ? [...] within a segment, ** for any number of directories (e.g. **/*.go)"`
	Path    string `json:"path,omitempty" jsonschema:"directory to search (default the workspace)"`
}

func (t *globTool) Spec() Spec {
	return Spec{Name: "glob", Description: "Find files and directories whose path relative to path matches a pattern (** spans directories). Symbolic links are not followed.",
		Schema: schemaFor[globArgs](func(s *jsonschema.Schema) { s.Properties["pattern"].MinLength = ptr(1) }),
		Paths:  Paths{Reads: []string{"path"}, Show: []string{"path"}}}
}

func (t *globTool) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a globArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	pattern := strings.TrimPrefix(path.Clean(a.Pattern), "./")
	if path.IsAbs(pattern) || pattern == ".." || strings.HasPrefix(pattern, "../") {
		return Result{}, fmt.Errorf("%w: the pattern must be relative to path and stay under it (set path to search elsewhere)", ErrArguments)
	}
	if _, err := MatchGlob(pattern, "x"); err != nil {
		return Result{}, fmt.Errorf("%w: pattern: %w", ErrArguments, err)
	}
	dir, err := resolve(ctx, t.perm, "glob", a.Path, permission.Read)
	if err != nil {
		return Result{}, err //nolint:wrapcheck // the refusal is the message
	}
	var out []string
	more := false
	_, limited, err := walk(ctx, dir, func(rel string, d fs.DirEntry) error {
		if ok, _ := MatchGlob(pattern, rel); ok {
			if !t.visible(dir, rel) {
				return nil
			}
			if len(out) == MaxMatches {
				more = true
				return errWalkLimit
			}
			if d.IsDir() {
				rel += "/"
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	if len(out) == 0 {
		return Result{Output: "(no matches)"}, nil
	}
	s := strings.Join(out, "\n") + "\n"
	if more || limited {
		s += "(search stopped early: narrow the pattern or path for more)\n"
	}
	return Result{Output: s}, nil
}

// visible decides an entry found by a walk with the same function as every path argument, so
// a blocked path inside the searched tree is neither listed nor read.
func visible(perm *permission.Checker, tool string, dir permission.Path, rel string) bool {
	_, err := perm.Resolve(tool, filepath.Join(dir.Arg, filepath.FromSlash(rel)), permission.Read)
	return err == nil
}

func (t *globTool) visible(dir permission.Path, rel string) bool {
	return visible(t.perm, "glob", dir, rel)
}

// --- grep

type grepTool struct{ perm *permission.Checker }

type grepArgs struct {
	Pattern         string `json:"pattern" jsonschema:"RE2 regular expression matched against each line"`
	Path            string `json:"path,omitempty" jsonschema:"file or directory to search (default the workspace)"`
	Include         string `json:"include,omitempty" jsonschema:"only search files whose relative path matches this glob (e.g. **/*.go)"`
	CaseInsensitive bool   `json:"case_insensitive,omitempty" jsonschema:"match regardless of case"`
	MaxResults      int    `json:"max_results,omitempty" jsonschema:"most matching lines to return (default 200, at most 1000)"`
}

func (t *grepTool) Spec() Spec {
	return Spec{Name: "grep", Description: "Search files for lines matching a regular expression; answers path:line:text. Binary files and symbolic links are skipped.",
		Schema: schemaFor[grepArgs](func(s *jsonschema.Schema) {
			s.Properties["pattern"].MinLength = ptr(1)
			s.Properties["pattern"].MaxLength = ptr(4096)
			m := s.Properties["max_results"]
			m.Minimum, m.Maximum = ptr(1.0), ptr(float64(MaxMatches))
		}),
		Paths: Paths{Reads: []string{"path"}, Show: []string{"path"}}}
}

func (t *grepTool) Run(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a grepArgs
	if err := decodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	if a.MaxResults <= 0 || a.MaxResults > MaxMatches {
		a.MaxResults = 200
	}
	expr := a.Pattern
	if a.CaseInsensitive {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return Result{}, fmt.Errorf("%w: pattern: %w", ErrArguments, err)
	}
	if a.Include != "" {
		if _, err := MatchGlob(a.Include, "x"); err != nil {
			return Result{}, fmt.Errorf("%w: include: %w", ErrArguments, err)
		}
	}
	p, err := resolve(ctx, t.perm, "grep", a.Path, permission.Read)
	if err != nil {
		return Result{}, err //nolint:wrapcheck // the refusal is the message
	}
	g := &grepper{re: re, max: a.MaxResults}
	fi, err := p.Stat()
	if err != nil {
		return Result{}, err //nolint:wrapcheck // Path's errors name the argument
	}
	limited := false
	if fi.Mode().IsRegular() {
		f, err := p.Open()
		if err != nil {
			return Result{}, err //nolint:wrapcheck // Path's errors name the argument
		}
		g.file(a.Path, f)
		_ = f.Close()
	} else {
		var fsys fs.FS
		fsys, limited, err = walk(ctx, p, func(rel string, d fs.DirEntry) error {
			if !d.Type().IsRegular() {
				return nil
			}
			if a.Include != "" {
				if ok, _ := MatchGlob(a.Include, rel); !ok {
					return nil
				}
			}
			if !visible(t.perm, "grep", p, rel) {
				return nil
			}
			return g.pending(rel)
		})
		if err != nil {
			return Result{}, err
		}
		for _, rel := range g.files {
			if g.full() || ctx.Err() != nil {
				break
			}
			f, err := fsys.Open(rel)
			if err != nil {
				continue
			}
			g.file(rel, f)
			_ = f.Close()
		}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("search cancelled: %w", err)
	}
	if g.n == 0 {
		return Result{Output: "(no matches)"}, nil
	}
	if g.full() || limited {
		g.b.WriteString("(search stopped early: narrow the pattern, path or include for more)\n")
	}
	return Result{Output: g.b.String()}, nil
}

type grepper struct {
	re    *regexp.Regexp
	max   int
	n     int
	b     strings.Builder
	files []string
}

func (g *grepper) full() bool { return g.n >= g.max || g.b.Len() >= MaxOutputBytes }

func (g *grepper) pending(rel string) error {
	g.files = append(g.files, rel)
	return nil
}

// file searches one open file, skipping a binary one (a NUL in its first 8 KiB) and stopping
// at MaxReadBytes.
func (g *grepper) file(name string, f io.Reader) {
	br := bufio.NewReaderSize(io.LimitReader(f, MaxReadBytes), 64<<10)
	if head, _ := br.Peek(8 << 10); bytes.IndexByte(head, 0) >= 0 {
		return
	}
	for line := 1; !g.full(); line++ {
		s, err := br.ReadString('\n')
		if s == "" && err != nil {
			return
		}
		s = strings.TrimRight(s, "\r\n")
		if g.re.MatchString(s) {
			g.n++
			fmt.Fprintf(&g.b, "%s:%d:%s\n", name, line, clipLine(s))
		}
		if err != nil {
			return
		}
	}
}
