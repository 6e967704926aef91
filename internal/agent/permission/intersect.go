package permission

import (
	"path/filepath"
	"slices"
)

// Intersecting policies: a conversation started by another (a subagent, a conversation a
// message opened) gets at most the powers of the one that started it, whatever its own agent
// allows (docs/ai-chat.md, Subagents).

// rank orders levels by what they allow.
func rank(l Level) int {
	switch l {
	case YOLO:
		return 2
	case Trusted:
		return 1
	}
	return 0
}

// Allows reports whether level l allows everything other does.
func (l Level) Allows(other Level) bool { return rank(l) >= rank(other) }

// Stricter is the level of a and b that allows less.
func Stricter(a, b Level) Level {
	if rank(b) < rank(a) {
		return b
	}
	return a
}

// IntersectPaths is the set of paths (files or directory trees) within both a and b: for
// each pair where one holds the other, the inner one. Relative entries are relative to ws, and
// the symbolic links of each entry's existing part are resolved first, as New resolves them,
// so a link inside one entry cannot widen the result past what both allow.
func IntersectPaths(ws string, a, b []string) []string {
	ra, rb := resolveAll(ws, a), resolveAll(ws, b)
	var out []string
	for _, x := range ra {
		for _, y := range rb {
			switch {
			case pathWithin(x, y):
				out = appendNew(out, x)
			case pathWithin(y, x):
				out = appendNew(out, y)
			}
		}
	}
	return out
}

// UnionPaths is a's entries and b's, absolute (relative ones against ws), each once. They are
// kept as written: New blocks both an entry and what it resolves to.
func UnionPaths(ws string, a, b []string) []string {
	var out []string
	for _, p := range slices.Concat(a, b) {
		out = appendNew(out, absAgainst(ws, p))
	}
	return out
}

func resolveAll(ws string, ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		abs := absAgainst(ws, p)
		if r, err := resolveExisting(abs); err == nil {
			abs = r
		}
		out = append(out, abs)
	}
	return out
}

func absAgainst(ws, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(ws, p)
}

// pathWithin reports whether p is dir or lies under it (both absolute and clean).
func pathWithin(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != ".."+string(filepath.Separator))
}

func appendNew(list []string, p string) []string {
	if slices.Contains(list, p) {
		return list
	}
	return append(list, p)
}
