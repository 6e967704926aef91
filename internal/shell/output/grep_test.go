package output

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
)

func TestRequiredLiterals(t *testing.T) {
	cases := []struct {
		pattern string
		want    []string // nil: no prefilter
	}{
		{`error`, []string{"error"}},
		{`error|FAIL`, []string{"error", "FAIL"}},
		{`^--- FAIL: (Test\w+)`, []string{"--- FAIL: "}},
		{`warning: .* deprecated`, []string{" deprecated"}},
		{`(?i)error`, nil},
		{`\d+ passed`, []string{" passed"}},
		{`a|\d`, nil},
		{`x*`, nil},
		{`(ab)+c?`, []string{"ab"}},
		{`.`, nil},
	}
	for _, tc := range cases {
		re, err := syntax.Parse(tc.pattern, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		got := requiredLiterals(re.Simplify())
		if !slices.Equal(got, tc.want) {
			t.Errorf("requiredLiterals(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestMatcherAgreesWithRegexp: the prefilter never changes a match.
func TestMatcherAgreesWithRegexp(t *testing.T) {
	patterns := []string{`error|FAIL`, `^--- FAIL: (Test\w+)`, `\d+ passed`, `(ab)+c?`, `x{2,}y`, `é+|日本`, `a.b|c$`}
	lines := []string{"", "error", "an error here", "FAIL", "--- FAIL: TestX", "--- FAIL: Test", "3 passed", "passed",
		"ababc", "xxy", "xy", "éé", "日本語", "a-b", "abc", "xc", strings.Repeat("ab", 100)}
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		m := newMatcher(re)
		for _, l := range lines {
			if m.match(l) != re.MatchString(l) {
				t.Errorf("%q on %q: matcher %v, regexp %v", p, l, m.match(l), re.MatchString(l))
			}
		}
	}
}
