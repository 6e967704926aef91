package policy

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// literal returns the value of w after quote removal when the value is known
// statically: only unquoted literals, single quotes (and $'...' without
// escapes) and double quotes holding only literal text. Anything the shell
// would expand at run time (parameters, command substitutions, arithmetic,
// globs, brace expansion, extended globs, $"..." translation) makes ok false.
func literal(w *syntax.Word) (string, bool) {
	if w == nil || len(w.Parts) == 0 {
		return "", false
	}
	if len(w.Parts) == 1 {
		// Fast path for the common single unquoted literal without
		// any special character.
		if l, ok := w.Parts[0].(*syntax.Lit); ok && plainLit(l.Value) {
			return l.Value, true
		}
	}
	var b strings.Builder
	// A glob bracket or a brace expansion may span parts ([ "x" ]), so
	// remember unquoted openers and look for closers in later parts. A
	// brace expansion needs an unquoted , or .. inside: {} is literal.
	var openBracket, openBrace, braceSep bool
	prev := byte(0)
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			v := p.Value
			for i := 0; i < len(v); i++ {
				c := v[i]
				switch c {
				case '\\':
					prev = 0
					if i+1 < len(v) {
						i++
						b.WriteByte(v[i])
					} else {
						b.WriteByte(c)
					}
					continue
				case '*', '?':
					return "", false
				case '[':
					openBracket = true
				case ']':
					if openBracket {
						return "", false
					}
				case '{':
					openBrace = true
				case ',':
					braceSep = braceSep || openBrace
				case '.':
					braceSep = braceSep || (openBrace && prev == '.')
				case '}':
					if openBrace && braceSep {
						return "", false
					}
				}
				prev = c
				b.WriteByte(c)
			}
		case *syntax.SglQuoted:
			if p.Dollar && strings.ContainsRune(p.Value, '\\') {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false
			}
			for _, dp := range p.Parts {
				l, ok := dp.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(unescapeDouble(l.Value))
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}

// plainLit reports whether an unquoted literal needs no quote removal and
// holds no glob or brace character.
func plainLit(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\', '*', '?', '[', ']', '{', '}':
			return false
		}
	}
	return true
}

// unescapeDouble applies the backslash rules of double quotes: a backslash
// only escapes $, `, ", \ and newline.
func unescapeDouble(s string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unescapeHeredoc applies the backslash rules of an unquoted here-document
// body: a backslash only escapes $, `, \ and newline.
func unescapeHeredoc(s string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// hasSubst reports whether w contains a command or process substitution,
// i.e. whether its value is produced by running commands.
func hasSubst(w *syntax.Word) bool {
	if w == nil {
		return false
	}
	return partsHaveSubst(w.Parts)
}

func partsHaveSubst(parts []syntax.WordPart) bool {
	for _, part := range parts {
		switch p := part.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			return true
		case *syntax.DblQuoted:
			if partsHaveSubst(p.Parts) {
				return true
			}
		}
	}
	return false
}

// baseName returns the last element of a slash-separated path, the way a
// program name is matched (/bin/rm and ./rm are both rm).
func baseName(name string) string {
	name = strings.TrimRight(name, "/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// isFDPath reports whether a script path names standard input or another
// open file descriptor (as produced by process substitution).
func isFDPath(p string) bool {
	return p == "/dev/stdin" || strings.HasPrefix(p, "/dev/fd/") ||
		(strings.HasPrefix(p, "/proc/") && strings.Contains(p, "/fd/"))
}

// isAssignment reports whether an argument of env or sudo is NAME=VALUE.
func isAssignment(s string) bool {
	i := strings.IndexByte(s, '=')
	return i > 0
}

// wordFromString builds a synthetic literal word, used to analyze an
// implicit program (xargs without a command runs echo).
func wordFromString(s string) *syntax.Word {
	return &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: s}}}
}

// Literal is the value of w after quote removal, when the shell would not expand anything in
// it: no parameter, substitution, arithmetic, glob or brace expansion.
func Literal(w *syntax.Word) (string, bool) { return literal(w) }
