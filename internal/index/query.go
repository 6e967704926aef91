package index

import (
	"strings"
	"unicode"
)

// MatchQuery turns what a user typed into an FTS5 query that cannot be a syntax error.
//
// Words are matched as words: everything that is not a letter or a digit separates them, and
// a word the tokenizer would split (foo_bar, src/index.go, 1.2.3) is matched as the phrase of
// its parts. "double quotes" make a phrase; a trailing * makes a prefix; OR between two terms
// means either; a leading - or a NOT before a term excludes it. Every other character, FTS5
// operator or column filter is treated as a separator. It returns "" when nothing searchable
// is left.
func MatchQuery(q string) string {
	type term struct {
		expr string
		neg  bool
		or   bool // joined to the previous term with OR
	}
	var terms []term
	neg, or := false, false
	add := func(words []string, prefix bool) {
		if len(words) == 0 {
			return
		}
		e := `"` + strings.Join(words, " ") + `"`
		if prefix {
			e += "*"
		}
		terms = append(terms, term{expr: e, neg: neg, or: or && len(terms) > 0 && !neg})
		neg, or = false, false
	}
	for i := 0; i < len(q); {
		switch q[i] {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			end := strings.IndexByte(q[i+1:], '"')
			var body string
			if end < 0 {
				body, i = q[i+1:], len(q)
			} else {
				body, i = q[i+1:i+1+end], i+2+end
			}
			prefix := i < len(q) && q[i] == '*'
			if prefix {
				i++
			}
			add(words(body), prefix)
		default:
			j := i
			for j < len(q) && !strings.ContainsRune(" \t\n\r\"", rune(q[j])) {
				j++
			}
			w := q[i:j]
			i = j
			switch w {
			case "OR", "|", "||":
				or = len(terms) > 0
				continue
			case "AND", "&&", "&":
				continue
			case "NOT":
				neg = true
				continue
			}
			if strings.HasPrefix(w, "-") && len(w) > 1 {
				neg, w = true, w[1:]
			}
			prefix := strings.HasSuffix(w, "*")
			ws := words(w)
			if len(ws) == 0 {
				neg = false
				continue
			}
			add(ws, prefix)
		}
	}
	// Group: runs joined by OR, then AND between groups, then the exclusions.
	var groups [][]string
	var nots []string
	for _, t := range terms {
		switch {
		case t.neg:
			nots = append(nots, t.expr)
		case t.or && len(groups) > 0:
			groups[len(groups)-1] = append(groups[len(groups)-1], t.expr)
		default:
			groups = append(groups, []string{t.expr})
		}
	}
	if len(groups) == 0 {
		return "" // FTS5 has no "everything except": exclusions alone match nothing useful
	}
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		if len(g) == 1 {
			parts = append(parts, g[0])
		} else {
			parts = append(parts, "("+strings.Join(g, " OR ")+")")
		}
	}
	out := strings.Join(parts, " AND ")
	if len(nots) > 0 {
		out = "(" + out + ") NOT (" + strings.Join(nots, " OR ") + ")"
	}
	return out
}

// words splits s into the runs the tokenizer indexes: letters, numbers and private-use
// characters (unicode61's token categories); the rest separates.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r) && !unicode.Is(unicode.Co, r)
	})
}
