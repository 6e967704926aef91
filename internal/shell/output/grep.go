package output

import (
	"regexp"
	"regexp/syntax"
	"strings"
)

// matcher is a grep pattern with a literal prefilter: when every match of the pattern must
// contain one of lits, lines containing none of them are rejected without running the
// regular expression (Go's regexp is slow on unanchored alternations such as error|FAIL).
type matcher struct {
	re   *regexp.Regexp
	lits []string
}

func newMatcher(re *regexp.Regexp) *matcher {
	m := &matcher{re: re}
	if t, err := syntax.Parse(re.String(), syntax.Perl); err == nil {
		m.lits = requiredLiterals(t.Simplify())
	}
	return m
}

func (m *matcher) match(s string) bool {
	if m.lits != nil {
		found := false
		for _, l := range m.lits {
			if strings.Contains(s, l) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return m.re.MatchString(s)
}

// maxLits bounds the prefilter's set of literals.
const maxLits = 16

// requiredLiterals returns literals of which every match of t contains at least one, or nil
// when it cannot tell.
func requiredLiterals(t *syntax.Regexp) []string {
	switch t.Op {
	case syntax.OpLiteral:
		if t.Flags&syntax.FoldCase != 0 || len(t.Rune) == 0 {
			return nil
		}
		return []string{string(t.Rune)}
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiterals(t.Sub[0])
	case syntax.OpRepeat:
		if t.Min >= 1 {
			return requiredLiterals(t.Sub[0])
		}
	case syntax.OpConcat:
		// Any child's set will do; take the one whose shortest literal is longest.
		var best []string
		bestLen := 0
		for _, sub := range t.Sub {
			ls := requiredLiterals(sub)
			if ls == nil {
				continue
			}
			if n := shortest(ls); n > bestLen {
				best, bestLen = ls, n
			}
		}
		return best
	case syntax.OpAlternate:
		var all []string
		for _, sub := range t.Sub {
			ls := requiredLiterals(sub)
			if ls == nil {
				return nil
			}
			all = append(all, ls...)
		}
		if len(all) > maxLits {
			return nil
		}
		return all
	}
	return nil
}

func shortest(ls []string) int {
	n := len(ls[0])
	for _, l := range ls[1:] {
		n = min(n, len(l))
	}
	return n
}
