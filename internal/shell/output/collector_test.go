package output

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/shell"
)

func TestValidateBudget(t *testing.T) {
	cases := []struct {
		b       shell.Budget
		wantErr string // "" for valid
	}{
		{shell.Budget{}, ""},
		{shell.Budget{Keep: "all"}, ""},
		{shell.Budget{Keep: "head", Lines: 5}, ""},
		{shell.Budget{Keep: "tail", Lines: 1}, ""},
		{shell.Budget{Keep: "head_tail", Lines: 10, MaxChars: 500}, ""},
		{shell.Budget{Lines: 3}, ""}, // lines without keep: overrides a session default's lines
		{shell.Budget{Grep: &shell.Grep{Pattern: `error|warn(ing)?`, Context: 3}}, ""},
		{shell.Budget{Grep: &shell.Grep{Pattern: ""}}, ""}, // empty pattern: no grep
		{shell.Budget{Keep: "middle"}, `keep "middle" is not a keep mode`},
		{shell.Budget{Keep: "HEAD", Lines: 3}, `keep "HEAD" is not a keep mode`},
		{shell.Budget{Keep: "head"}, `keep "head" needs lines >= 1`},
		{shell.Budget{Keep: "tail", Lines: -1}, "lines is -1; it must be between 0 and 1000000"},
		{shell.Budget{Keep: "tail", Lines: MaxLines + 1}, "lines is 1000001"},
		{shell.Budget{MaxChars: -5}, "max_chars is -5"},
		{shell.Budget{MaxChars: MaxMaxChars + 1}, "max_chars is 1000001"},
		{shell.Budget{Grep: &shell.Grep{Pattern: `(unclosed`}}, "grep.pattern is not a valid RE2 regular expression"},
		{shell.Budget{Grep: &shell.Grep{Pattern: `(?<=x)y`}}, "no backreferences or lookaround"},
		{shell.Budget{Grep: &shell.Grep{Pattern: `a`, Context: -1}}, "grep.context is -1"},
		{shell.Budget{Grep: &shell.Grep{Pattern: `a`, Context: MaxContext + 1}}, "grep.context is 101"},
		{shell.Budget{Grep: &shell.Grep{Pattern: strings.Repeat("a", MaxPatternLen+1)}}, "grep.pattern is 4097 bytes long"},
	}
	for _, tc := range cases {
		err := ValidateBudget(tc.b)
		_, cerr := NewCollector(tc.b, nil)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ValidateBudget(%+v) = %v, want nil", tc.b, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ValidateBudget(%+v) = %v, want an error containing %q", tc.b, err, tc.wantErr)
		case (err == nil) != (cerr == nil):
			t.Errorf("NewCollector(%+v) = %v, ValidateBudget = %v", tc.b, cerr, err)
		}
	}
}

func TestMergeBudget(t *testing.T) {
	def := &shell.Budget{Keep: "tail", Lines: 50, MaxChars: 2000, Grep: &shell.Grep{Pattern: "x", Context: 1}}
	cases := []struct {
		name     string
		def, per *shell.Budget
		want     shell.Budget
	}{
		{"both nil", nil, nil, shell.Budget{}},
		{"default only", def, nil, *def},
		{"call only", nil, &shell.Budget{Keep: "head", Lines: 3}, shell.Budget{Keep: "head", Lines: 3}},
		{"lines override", def, &shell.Budget{Lines: 7}, shell.Budget{Keep: "tail", Lines: 7, MaxChars: 2000, Grep: def.Grep}},
		{"keep override keeps lines", def, &shell.Budget{Keep: "head"}, shell.Budget{Keep: "head", Lines: 50, MaxChars: 2000, Grep: def.Grep}},
		{"max_chars override", def, &shell.Budget{MaxChars: 10}, shell.Budget{Keep: "tail", Lines: 50, MaxChars: 10, Grep: def.Grep}},
		{"grep replaced", def, &shell.Budget{Grep: &shell.Grep{Pattern: "y"}}, shell.Budget{Keep: "tail", Lines: 50, MaxChars: 2000, Grep: &shell.Grep{Pattern: "y"}}},
		{"grep turned off", def, &shell.Budget{Grep: &shell.Grep{}}, shell.Budget{Keep: "tail", Lines: 50, MaxChars: 2000, Grep: &shell.Grep{}}},
		{"keep all", def, &shell.Budget{Keep: "all"}, shell.Budget{Keep: "all", Lines: 50, MaxChars: 2000, Grep: def.Grep}},
	}
	for _, tc := range cases {
		got := MergeBudget(tc.def, tc.per)
		if !budgetEq(got, tc.want) {
			t.Errorf("%s: MergeBudget = %+v (grep %+v), want %+v (grep %+v)", tc.name, got, got.Grep, tc.want, tc.want.Grep)
		}
	}
	// The merge copies: changing the result leaves the default alone.
	m := MergeBudget(def, nil)
	m.Grep.Pattern = "changed"
	if def.Grep.Pattern != "x" {
		t.Error("MergeBudget aliased the default's grep")
	}
	// A call's keep without lines is completed by the default's lines.
	if _, err := NewCollector(MergeBudget(def, &shell.Budget{Keep: "head"}), nil); err != nil {
		t.Error(err)
	}
}

func budgetEq(a, b shell.Budget) bool {
	if (a.Grep == nil) != (b.Grep == nil) || (a.Grep != nil && *a.Grep != *b.Grep) {
		return false
	}
	a.Grep, b.Grep = nil, nil
	return a == b
}

// genLines is n lines "line <i> <filler>" with i from 1.
func genLines(n int, filler string) []string {
	ls := make([]string, n)
	for i := range ls {
		ls[i] = "line " + strconv.Itoa(i+1) + filler
	}
	return ls
}

// refRender is a plain, unbounded model of grep and keep (not max_chars): it returns the text
// and, for each shown stream line, its byte span in the text.
func refRender(lines []string, finalNL bool, b shell.Budget) (string, []refSpan, int) {
	type item struct {
		id  int
		sep bool
	}
	var items []item
	if b.Grep != nil && b.Grep.Pattern != "" {
		re := regexp.MustCompile(b.Grep.Pattern)
		k := b.Grep.Context
		show := make([]bool, len(lines))
		for i, l := range lines {
			if re.MatchString(l) {
				for j := max(0, i-k); j <= min(len(lines)-1, i+k); j++ {
					show[j] = true
				}
			}
		}
		last := -1
		for i := range lines {
			if show[i] {
				items = append(items, item{id: i + 1, sep: k > 0 && last >= 0 && i > last+1})
				last = i
			}
		}
	} else {
		for i := range lines {
			items = append(items, item{id: i + 1})
		}
	}
	var head, tail []item
	dropped := 0
	switch b.Keep {
	case "", "all":
		head = items
	case "head":
		head = items[:min(b.Lines, len(items))]
		dropped = len(items) - len(head)
	case "tail":
		tail = items[max(0, len(items)-b.Lines):]
		dropped = len(items) - len(tail)
	case "head_tail":
		h, t := (b.Lines+1)/2, b.Lines/2
		if h+t >= len(items) {
			head = items
		} else {
			head, tail = items[:h], items[len(items)-t:]
			dropped = len(items) - h - t
		}
	}
	var sb strings.Builder
	var spans []refSpan
	emit := func(it item, noSep bool) {
		if it.sep && !noSep && sb.Len() > 0 {
			sb.WriteString("--\n")
		}
		start := sb.Len()
		sb.WriteString(lines[it.id-1])
		if it.id < len(lines) || finalNL {
			sb.WriteByte('\n')
		}
		spans = append(spans, refSpan{start, sb.Len(), it.id})
	}
	for _, it := range head {
		emit(it, false)
	}
	marker := fmt.Sprintf("... [%d lines elided] ...\n", dropped)
	if b.Keep == "head" && dropped > 0 {
		sb.WriteString(marker)
	}
	if b.Keep == "tail" || b.Keep == "head_tail" {
		if dropped > 0 {
			sb.WriteString(marker)
		}
		for i, it := range tail {
			emit(it, i == 0 && (dropped > 0 || sb.Len() == 0))
		}
	}
	return sb.String(), spans, dropped
}

type refSpan struct{ start, end, id int }

// checkAgainstRef checks a collector's output against the reference: equal when it fits in
// max_chars, else a prefix and a suffix of it around one marker that counts what is missing.
func checkAgainstRef(t *testing.T, lines []string, finalNL bool, b shell.Budget, got string, rep shell.StreamReport, truncated bool) {
	t.Helper()
	ref, spans, dropped := refRender(lines, finalNL, b)
	maxChars := b.MaxChars
	if maxChars == 0 {
		maxChars = shell.DefaultMaxChars
	}
	if rep.LinesTotal != len(lines) {
		t.Errorf("lines_total %d, want %d", rep.LinesTotal, len(lines))
	}
	wantMode := b.Keep
	if wantMode == "" {
		wantMode = "all"
	}
	if b.Grep != nil && b.Grep.Pattern != "" {
		wantMode = "grep"
	}
	if rep.Mode != wantMode {
		t.Errorf("mode %q, want %q", rep.Mode, wantMode)
	}
	refRunes := utf8.RuneCountInString(ref)
	if refRunes <= maxChars {
		if got != ref {
			t.Fatalf("got\n%.2000q\nwant\n%.2000q", got, ref)
		}
		if rep.LinesKept != len(spans) {
			t.Errorf("lines_kept %d, want %d", rep.LinesKept, len(spans))
		}
		if truncated != (dropped > 0 || len(spans) < len(lines)) {
			t.Errorf("truncated %v with %d dropped, %d of %d lines shown", truncated, dropped, len(spans), len(lines))
		}
		return
	}
	if !truncated {
		t.Error("cut but not truncated")
	}
	m := regexp.MustCompile(`(?m)^\.\.\. \[(\d+) chars elided\] \.\.\.\n`).FindAllStringSubmatchIndex(got, -1)
	if len(m) != 1 {
		t.Fatalf("want one chars-elided marker in %.3000q", got)
	}
	head, tail := got[:m[0][0]], got[m[0][1]:]
	n, _ := strconv.Atoi(got[m[0][2]:m[0][3]])
	if !strings.HasPrefix(ref, head) {
		// The marker may follow a newline the collector added after a cut inside a line.
		h := strings.TrimSuffix(head, "\n")
		if !strings.HasPrefix(ref, h) {
			t.Fatalf("head is not a prefix of the reference: %.300q", head)
		}
		head = h
	}
	if !strings.HasSuffix(ref, tail) {
		t.Fatalf("tail is not a suffix of the reference: %.300q", tail)
	}
	hr, tr := utf8.RuneCountInString(head), utf8.RuneCountInString(tail)
	if hr+tr > maxChars {
		t.Errorf("kept %d+%d runes, max_chars %d", hr, tr, maxChars)
	}
	if hr+tr < maxChars/3 {
		t.Errorf("kept only %d+%d runes of max_chars %d", hr, tr, maxChars)
	}
	if n != refRunes-hr-tr {
		t.Errorf("marker says %d chars elided, want %d", n, refRunes-hr-tr)
	}
	kept := 0
	for _, s := range spans {
		if s.start < len(head) || s.end > len(ref)-len(tail) {
			kept++
		}
	}
	if rep.LinesKept != kept {
		t.Errorf("lines_kept %d, want %d", rep.LinesKept, kept)
	}
}

func TestBudgetModes(t *testing.T) {
	small := genLines(20, "")
	nBig := 200_000
	if raceEnabled || testing.Short() {
		nBig = 40_000
	}
	big := genLines(nBig, " some typical build output here")
	wide := genLines(3000, " "+strings.Repeat("wide ", 100))
	grepRE := &shell.Grep{Pattern: `^line \d*7$`, Context: 0}
	grepCtx := &shell.Grep{Pattern: `^line (5|6|10|15|19)$`, Context: 2}
	cases := []struct {
		name    string
		lines   []string
		finalNL bool
		b       shell.Budget
	}{
		{"all small", small, true, shell.Budget{}},
		{"all small no final newline", small, false, shell.Budget{}},
		{"all big", big, true, shell.Budget{}},
		{"all big small max", big, true, shell.Budget{MaxChars: 1000}},
		{"head", big, true, shell.Budget{Keep: "head", Lines: 10}},
		{"head fits", small, true, shell.Budget{Keep: "head", Lines: 20}},
		{"head more than all", small, false, shell.Budget{Keep: "head", Lines: 100}},
		{"head big max cut", big, true, shell.Budget{Keep: "head", Lines: 50_000}},
		{"tail", big, true, shell.Budget{Keep: "tail", Lines: 10}},
		{"tail no final newline", big, false, shell.Budget{Keep: "tail", Lines: 3}},
		{"tail fits", small, true, shell.Budget{Keep: "tail", Lines: 20}},
		{"tail big max cut", big, true, shell.Budget{Keep: "tail", Lines: 50_000}},
		{"tail wide lines pruned", wide, true, shell.Budget{Keep: "tail", Lines: 1000, MaxChars: 5000}},
		{"head_tail even", big, true, shell.Budget{Keep: "head_tail", Lines: 10}},
		{"head_tail odd", big, true, shell.Budget{Keep: "head_tail", Lines: 7}},
		{"head_tail one", big, true, shell.Budget{Keep: "head_tail", Lines: 1}},
		{"head_tail fits", small, true, shell.Budget{Keep: "head_tail", Lines: 20}},
		{"head_tail big max cut", big, true, shell.Budget{Keep: "head_tail", Lines: 100_000}},
		{"head_tail wide", wide, true, shell.Budget{Keep: "head_tail", Lines: 500, MaxChars: 3000}},
		{"grep", big, true, shell.Budget{Grep: grepRE}},
		{"grep small", small, true, shell.Budget{Grep: grepRE}},
		{"grep context", small, true, shell.Budget{Grep: grepCtx}},
		{"grep context adjacent groups merge", small, true, shell.Budget{Grep: &shell.Grep{Pattern: `^line (3|8)$`, Context: 2}}},
		{"grep context at edges", small, false, shell.Budget{Grep: &shell.Grep{Pattern: `^line (1|20)$`, Context: 3}}},
		{"grep no match", big, true, shell.Budget{Grep: &shell.Grep{Pattern: `nomatch`}}},
		{"grep head", big, true, shell.Budget{Grep: grepRE, Keep: "head", Lines: 5}},
		{"grep tail", big, true, shell.Budget{Grep: grepRE, Keep: "tail", Lines: 5}},
		{"grep context tail", small, true, shell.Budget{Grep: grepCtx, Keep: "tail", Lines: 4}},
		{"grep context head", small, true, shell.Budget{Grep: grepCtx, Keep: "head", Lines: 7}},
		{"grep context head_tail", small, true, shell.Budget{Grep: grepCtx, Keep: "head_tail", Lines: 6}},
		{"grep big context", big, true, shell.Budget{Grep: &shell.Grep{Pattern: `5555`, Context: 4}}},
		{"grep max cut", big, true, shell.Budget{Grep: &shell.Grep{Pattern: `0$`}, MaxChars: 2000}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Join(tc.lines, "\n")
			if tc.finalNL {
				in += "\n"
			}
			c, err := NewCollector(tc.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Feed in odd-sized chunks.
			for i := 0; i < len(in); i += 4093 {
				mustWrite(t, c, []byte(in[i:min(i+4093, len(in))]))
			}
			got, rep, truncated := c.Finish()
			checkAgainstRef(t, tc.lines, tc.finalNL, tc.b, got, rep, truncated)
		})
	}
}

// TestBudgetExact pins the exact text of the modes on a small input.
func TestBudgetExact(t *testing.T) {
	in := strings.Join(genLines(12, ""), "\n") + "\n"
	cases := []struct {
		b    shell.Budget
		want string
		kept int
	}{
		{shell.Budget{Keep: "head", Lines: 2}, "line 1\nline 2\n... [10 lines elided] ...\n", 2},
		{shell.Budget{Keep: "tail", Lines: 2}, "... [10 lines elided] ...\nline 11\nline 12\n", 2},
		{shell.Budget{Keep: "head_tail", Lines: 3}, "line 1\nline 2\n... [9 lines elided] ...\nline 12\n", 3},
		{shell.Budget{Grep: &shell.Grep{Pattern: `^line (2|3|9)$`, Context: 1}}, "line 1\nline 2\nline 3\nline 4\n--\nline 8\nline 9\nline 10\n", 7},
		{shell.Budget{Grep: &shell.Grep{Pattern: `^line (2|9)$`}}, "line 2\nline 9\n", 2},
		{shell.Budget{Grep: &shell.Grep{Pattern: `^line (2|9)$`, Context: 1}, Keep: "tail", Lines: 2}, "... [4 lines elided] ...\nline 9\nline 10\n", 2},
		{shell.Budget{MaxChars: 30}, "line 1\nline 2\n... [57 chars elided] ...\nline 11\nline 12\n", 4},
	}
	for _, tc := range cases {
		got, rep, truncated := collect(t, tc.b, nil, in)
		if got != tc.want || rep.LinesKept != tc.kept || rep.LinesTotal != 12 || !truncated {
			t.Errorf("%+v:\n got %q %+v %v\nwant %q kept %d", tc.b, got, rep, truncated, tc.want, tc.kept)
		}
	}
	// A PEM block is one unit of several lines, also when the tail window lets it go.
	pem := "a1\na2\na3\n-----BEGIN PRIVATE KEY-----\nMIIB\nAAAA\n-----END PRIVATE KEY-----\n" +
		"bbbbbbbbbb1\nbbbbbbbbbb2\nbbbbbbbbbb3\nbbbbbbbbbb4\n"
	cases = []struct {
		b    shell.Budget
		want string
		kept int
	}{
		{shell.Budget{Keep: "tail", Lines: 5}, "... [3 lines elided] ...\n" + Marker(KindPrivateKey) + "\nbbbbbbbbbb1\nbbbbbbbbbb2\nbbbbbbbbbb3\nbbbbbbbbbb4\n", 8},
		{shell.Budget{Keep: "tail", Lines: 3, MaxChars: 20}, "... [49 chars elided] ...\nbbbbbbbbbb4\n", 1},
		{shell.Budget{Keep: "tail", Lines: 5, MaxChars: 20}, "... [84 chars elided] ...\nbbbbbbbbbb4\n", 1},
		{shell.Budget{Keep: "head", Lines: 4}, "a1\na2\na3\n" + Marker(KindPrivateKey) + "\n... [4 lines elided] ...\n", 7},
	}
	for _, tc := range cases {
		got, rep, truncated := collect(t, tc.b, nil, pem)
		if got != tc.want || rep.LinesKept != tc.kept || rep.LinesTotal != 11 || !truncated {
			t.Errorf("%+v:\n got %q %+v %v\nwant %q kept %d", tc.b, got, rep, truncated, tc.want, tc.kept)
		}
	}
}

func TestBadRegexFailsBeforeAnything(t *testing.T) {
	_, err := NewCollector(shell.Budget{Grep: &shell.Grep{Pattern: `[a-`}}, nil)
	if err == nil || !strings.Contains(err.Error(), "grep.pattern") || !strings.Contains(err.Error(), "missing closing ]") {
		t.Fatalf("err = %v", err)
	}
}

func TestMaxCharsElision(t *testing.T) {
	// One long line (no newline anywhere): head and tail of it, marker between.
	in := strings.Repeat("abcdefghij", 1000) // 10,000 runes
	got, rep, truncated := collect(t, shell.Budget{MaxChars: 100}, nil, in)
	want := strings.Repeat("abcdefghij", 5) + "\n... [9900 chars elided] ...\n" + strings.Repeat("abcdefghij", 5)
	if got != want || !truncated || rep.LinesTotal != 1 || rep.LinesKept != 1 {
		t.Errorf("got %q %+v %v", got, rep, truncated)
	}
	// Multi-byte runes are counted as characters, and never cut in half.
	in = strings.Repeat("日本語", 1000)
	got, _, _ = collect(t, shell.Budget{MaxChars: 11}, nil, in)
	if !utf8.ValidString(got) || !strings.HasPrefix(got, "日本語日本\n... [2989 chars elided] ...\n") || !strings.HasSuffix(got, "\n日本語日本語") {
		t.Errorf("got %q", got)
	}
	// Cuts snap to line ends when near and never split a marker.
	r := NewRedactor()
	line := "x " + fakeGitHub + " y\n"
	got, _, _ = collect(t, shell.Budget{MaxChars: 200}, r, strings.Repeat(line, 100))
	if strings.Contains(got, "ghp_") || strings.Count(got, "[REDACTED:") != strings.Count(got, "[REDACTED:github-token]") {
		t.Errorf("got %q", got)
	}
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if l != strings.TrimSuffix(r.Redact(line), "\n") && !strings.Contains(l, "chars elided") {
			t.Errorf("partial line %q in %q", l, got)
		}
	}
}

// TestLongLine: a line far longer than the line cap is not held whole; what is kept of it is
// redacted, and a secret straddling a cut leaves no fragment.
func TestLongLine(t *testing.T) {
	const lineCap = 100
	for _, tc := range []struct {
		name, in string
		absent   []string
	}{
		{"token across head cut", strings.Repeat("a ", 49) + "x " + fakeGitHub + strings.Repeat(" b", 400), []string{"ghp_", "01234567"}},
		{"password across tail cut", strings.Repeat("a ", 400) + "DB_PASSWORD=hunter2hunter2hunter2hunter2hunter2hunter2hunter2hunter2" + strings.Repeat(" z", 70), []string{"hunter2"}},
		{"base64 blob", strings.Repeat("QUJD", 1000), []string{"QUJD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := newCollector(shell.Budget{MaxChars: 1000}, nil, lineCap)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(tc.in); i += 7 {
				mustWrite(t, c, []byte(tc.in[i:min(i+7, len(tc.in))]))
			}
			got, rep, truncated := c.Finish()
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("%q survived in %q", a, got)
				}
			}
			if !truncated || rep.LinesTotal != 1 || !strings.Contains(got, "chars elided") {
				t.Errorf("got %q %+v %v", got, rep, truncated)
			}
			n := 0
			if _, err := fmt.Sscanf(got[strings.Index(got, "... [")+5:], "%d", &n); err != nil {
				t.Fatal(err)
			}
			rest := regexp.MustCompile(`\n?\.\.\. \[\d+ chars elided\] \.\.\.\n`).ReplaceAllString(got, "")
			if kept := utf8.RuneCountInString(rest); kept+n != len(tc.in) {
				t.Errorf("kept %d + elided %d != %d", kept, n, len(tc.in))
			}
		})
	}
}

// TestBoundedMemory feeds 200 MB through collectors and checks the heap and the collectors'
// own buffers stay small.
func TestBoundedMemory(t *testing.T) {
	total := 200 << 20
	if testing.Short() || raceEnabled {
		total = 40 << 20
	}
	line := []byte("\x1b[32mok\x1b[0m   github.com/nexus-run/nexus/internal/pkg/some/path\t0.052s token=abc123\n")
	chunk := make([]byte, 0, 64<<10)
	for len(chunk)+len(line) <= cap(chunk) {
		chunk = append(chunk, line...)
	}
	oneLine := []byte(strings.Repeat("x", 64<<10)) // a single line with no newline at all
	cases := []struct {
		name  string
		b     shell.Budget
		chunk []byte
	}{
		{"keep all", shell.Budget{}, chunk},
		{"tail", shell.Budget{Keep: "tail", Lines: 1_000_000}, chunk},
		{"head_tail", shell.Budget{Keep: "head_tail", Lines: 1_000_000}, chunk},
		{"grep context", shell.Budget{Grep: &shell.Grep{Pattern: "ok", Context: MaxContext}}, chunk},
		{"one huge line", shell.Budget{}, oneLine},
		{"one huge line tail", shell.Budget{Keep: "tail", Lines: 10, MaxChars: MaxMaxChars}, oneLine},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCollector(tc.b, NewRedactor())
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapInuse
			var peak uint64
			fed := 0
			for fed < total {
				mustWrite(t, c, tc.chunk)
				fed += len(tc.chunk)
				if fed%(16<<20) < len(tc.chunk) {
					runtime.ReadMemStats(&ms)
					peak = max(peak, ms.HeapInuse)
					if sz := c.heldBytes(); sz > 24<<20 {
						t.Fatalf("after %d MB the collector holds %d bytes", fed>>20, sz)
					}
				}
			}
			text, rep, truncated := c.Finish()
			if peak > base+32<<20 {
				t.Errorf("heap in use grew by %d MB", (peak-base)>>20)
			}
			maxChars := tc.b.MaxChars
			if maxChars == 0 {
				maxChars = shell.DefaultMaxChars
			}
			if !truncated || utf8.RuneCountInString(text) > maxChars+200 {
				t.Errorf("text %d runes, truncated %v", utf8.RuneCountInString(text), truncated)
			}
			if tc.chunk[len(tc.chunk)-1] == '\n' && rep.LinesTotal != fed/len(line) {
				t.Errorf("lines_total %d, want %d", rep.LinesTotal, fed/len(line))
			}
			t.Logf("fed %d MB; heap in use %d MB at most (%d MB before); lines_total %d", fed>>20, peak>>20, base>>20, rep.LinesTotal)
		})
	}
}

// heldBytes approximates the bytes of text a collector holds.
func (c *Collector) heldBytes() int {
	n := cap(c.cl.buf) + len(c.cl.head)
	for _, p := range c.cs.head {
		n += len(p.s)
	}
	for _, p := range c.cs.tail[c.cs.tstart:] {
		n += len(p.s)
	}
	for _, u := range c.before {
		n += len(u.text) + len(u.tail)
	}
	n += 4 * (cap(c.prunedQ.buf) + cap(c.prunedML.buf))
	for _, u := range c.ring.items() {
		n += len(u.text) + len(u.tail)
	}
	return n
}

// chunkInputs are seeds for the chunking tests: escapes, \r frames, UTF-8, secrets, PEM.
var chunkInputs = []string{
	"plain\nlines\n",
	"\x1b[1;31mred\x1b[0m\r\nprogress 10%\rprogress 100%\n",
	"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ and \x1b]0;t\x07title\n",
	"€uro ünïcödé 日本語 🎉 \xff\xfe \xe2\x82 end",
	"token=" + fakeGitHub + " AKIAIOSFODNN7EXAMPLE\nDB_PASSWORD=hunter2x\n",
	"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nHw==\n-----END RSA PRIVATE KEY-----\nafter\n",
	"N\bNA\bA\ttab\x00nul\x07bel\n",
	strings.Repeat("long line without newline ", 40),
	strings.Join(genLines(60, " x"), "\n"),
}

var chunkBudgets = []shell.Budget{
	{},
	{MaxChars: 40},
	{Keep: "head", Lines: 3, MaxChars: 60},
	{Keep: "tail", Lines: 4, MaxChars: 50},
	{Keep: "head_tail", Lines: 5, MaxChars: 80},
	{Grep: &shell.Grep{Pattern: `[a-e]`, Context: 1}, MaxChars: 70},
	{Grep: &shell.Grep{Pattern: `REDACTED|1`, Context: 2}, Keep: "tail", Lines: 3},
}

// runChunked feeds in split at the given cut points into a collector with a small line cap.
func runChunked(t testing.TB, b shell.Budget, lineCap int, in []byte, cuts []int) (string, shell.StreamReport, bool) {
	t.Helper()
	r := NewRedactor()
	r.Learn("export APP_SECRET=s3cr3t-value")
	c, err := newCollector(b, r, lineCap)
	if err != nil {
		t.Fatal(err)
	}
	prev := 0
	for _, k := range cuts {
		mustWrite(t, c, in[prev:k])
		prev = k
	}
	mustWrite(t, c, in[prev:])
	return c.Finish()
}

// checkChunking compares one write with the given chunking for every test budget and a few
// line caps, and checks invariants of the output.
func checkChunking(t *testing.T, in []byte, cuts []int) {
	t.Helper()
	for _, lineCap := range []int{3, 16, 1 << 20} {
		for _, b := range chunkBudgets {
			t1, r1, tr1 := runChunked(t, b, lineCap, in, nil)
			t2, r2, tr2 := runChunked(t, b, lineCap, in, cuts)
			if t1 != t2 || r1 != r2 || tr1 != tr2 {
				t.Fatalf("budget %+v line cap %d, input %q cut at %v:\none write: %q %+v %v\nchunked:   %q %+v %v",
					b, lineCap, in, cuts, t1, r1, tr1, t2, r2, tr2)
			}
			if !utf8.ValidString(t1) || strings.ContainsFunc(t1, func(r rune) bool {
				return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f
			}) {
				t.Fatalf("control or invalid bytes in %q (input %q)", t1, in)
			}
			if r1.LinesKept > r1.LinesTotal || r1.LinesKept < 0 {
				t.Fatalf("report %+v", r1)
			}
			// The learned literal never survives whole; no fragment of the token survives
			// when the input is plain text in which every occurrence of that fragment is
			// inside a whole token at a word start.
			if strings.Contains(t1, "s3cr3t-value") || plainTokens(string(in)) && strings.Contains(t1, fakeGitHub[4:16]) {
				t.Fatalf("secret in %q (input %q)", t1, in)
			}
		}
	}
}

func TestChunkingProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, s := range chunkInputs {
		in := []byte(s)
		// Every single split point, then random multi-splits.
		for k := 0; k <= len(in); k++ {
			checkChunking(t, in, []int{k})
			if (testing.Short() || raceEnabled) && k > 40 {
				break
			}
		}
		for range 50 {
			var cuts []int
			for k := 0; k < len(in); k += 1 + rng.IntN(8) {
				cuts = append(cuts, k)
			}
			checkChunking(t, in, cuts)
		}
	}
}

func FuzzCollectorChunking(f *testing.F) {
	for i, s := range chunkInputs {
		f.Add([]byte(s), uint64(i)*7919+1)
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		if len(in) > 1<<12 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		var cuts []int
		for k := 0; k < len(in); k += 1 + rng.IntN(16) {
			cuts = append(cuts, k)
		}
		checkChunking(t, in, cuts)
	})
}

func TestWriteAfterFinish(t *testing.T) {
	c, _ := NewCollector(shell.Budget{}, nil)
	mustWrite(t, c, []byte("a\n"))
	t1, r1, _ := c.Finish()
	if _, err := c.Write([]byte("b")); !errors.Is(err, ErrFinished) {
		t.Errorf("Write after Finish: %v", err)
	}
	if t2, r2, _ := c.Finish(); t2 != t1 || r2 != r1 {
		t.Errorf("second Finish: %q %+v", t2, r2)
	}
}

func TestEmpty(t *testing.T) {
	for _, b := range chunkBudgets {
		got, rep, truncated := collect(t, b, nil, "")
		want := shell.StreamReport{Mode: rep.Mode}
		if got != "" || rep != want || truncated {
			t.Errorf("%+v: %q %+v %v", b, got, rep, truncated)
		}
	}
}

// plainTokens: in is printable ASCII lines, and every occurrence of the fragment
// fakeGitHub[4:16] is inside an occurrence of fakeGitHub that starts a word.
func plainTokens(in string) bool {
	for i := 0; i < len(in); i++ {
		if c := in[i]; c != '\n' && (c < 0x20 || c >= 0x7f) {
			return false
		}
	}
	frag := fakeGitHub[4:16]
	if strings.Count(in, frag) != strings.Count(in, fakeGitHub) {
		return false
	}
	for off := 0; ; {
		i := strings.Index(in[off:], fakeGitHub)
		if i < 0 {
			return true
		}
		i += off
		if i > 0 && isWordByte(in[i-1]) {
			return false
		}
		off = i + 1
	}
}

// TestPathologicalLinesStayLinear: long lines built to make a careless scanner quadratic. The
// cost of each stage on a line of 32n bytes must stay within 256 times its cost on n bytes
// (linear work costs 32 times, quadratic work 1024 times).
func TestPathologicalLinesStayLinear(t *testing.T) {
	n := 2_500
	if raceEnabled {
		n = 500 // the race detector slows the regular expressions fifty-fold
	}
	lines := []string{
		"://", "://a:", "token", "tokenx", "--token ", "password=", `"token": "`, "x_pass", "pass", "ghp_", "sk-", "eyJ.",
		"Authorization: ", "bearer ", "-----BEGIN PRIVATE KEY-----", "a\b", "\x1b[", "\r", "\xe2",
		// Escapes and encodings before token shapes, and in name/value pairs.
		`\n`, "%0A", `\u000a`, "_ghp_", `\"token\": \"`, "%22token%22%3A%22", "password%3D", `password:\n`,
		// Programs that take passwords: every word a program, every word a flag.
		"mysql ", "curl -u ", "net ", "mysql -p", "curl -u a:b ", "aws configure set token ", "htpasswd -b ",
	}
	for _, unit := range lines {
		line := func(n int) string { return strings.Repeat(unit, n/len(unit)+1) }
		// A line under the collector's line cap is redacted whole; over it, its head and tail.
		// Both sizes stay on one side of the cap, so the ratio compares like with like.
		for _, lineCap := range []int{1 << 30, 4096} {
			checkLinear(t, fmt.Sprintf("collector (line cap %d) on %.20q...", lineCap, unit), n, func(n int) {
				c, _ := newCollector(shell.Budget{Grep: &shell.Grep{Pattern: `error|x`}}, NewRedactor(), lineCap)
				mustWrite(t, c, []byte(line(n)+"\n"))
				c.Finish()
			})
		}
		// Learn runs every redaction rule over the line, then its own.
		checkLinear(t, fmt.Sprintf("Learn of %.20q...", unit), n, func(n int) { NewRedactor().Learn(line(n)) })
	}
	checkLinear(t, "Learn of a long command", n, func(n int) {
		k := n / 46
		NewRedactor().Learn(strings.Repeat("echo abcdefgh | cat ", k) + strings.Repeat("X_TOKEN=abc ", k) + strings.Repeat("read -s <<< x ", k))
	})
	// Lines of one long stream.
	checkLinear(t, "collector on many lines", n, func(n int) {
		c, _ := NewCollector(shell.Budget{}, NewRedactor())
		for range n / 100 {
			mustWrite(t, c, []byte("password:\n  hunter2hunter2\nprivate_key: |\n  abc\n"))
		}
		c.Finish()
	})
}

// checkLinear fails when f's cost grows faster than linearly with n: f(32n) must cost less
// than 256 times f(n). The cost is this thread's CPU time, not wall time, so a loaded machine
// delays the work without changing the ratio; each size runs three times and counts its
// cheapest run, which discards preemptions and cold caches. Memory is made alike for both
// sizes: a first, unmeasured run of the large size leaves the heap with room for it, and the
// garbage collector is off while measuring, so neither a collection (or its assists) nor the
// page faults of fresh memory land in one run and not another. The margin (8 times what
// linear work costs) absorbs what is left, the race detector's shadow memory included, and
// still catches quadratic work by far.
func checkLinear(t *testing.T, what string, n int, f func(n int)) {
	t.Helper()
	const grow, limit = 32, 256
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f(grow * n)
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	cost := func(n int) time.Duration {
		best := time.Duration(math.MaxInt64)
		for range 3 {
			c0 := threadCPU(t)
			f(n)
			best = min(best, threadCPU(t)-c0)
		}
		return max(best, time.Microsecond)
	}
	small, large := cost(n), cost(grow*n)
	if ratio := float64(large) / float64(small); ratio > limit {
		t.Errorf("%s: %d bytes cost %v of CPU, %d bytes %v: %.0f times for %d times the input", what, n, small, grow*n, large, ratio, grow)
	}
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU(t *testing.T) time.Duration {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// TestGrepLongLine: grep sees the kept head and tail of an over-long line.
func TestGrepLongLine(t *testing.T) {
	long := "start " + strings.Repeat("middle ", 100) + "needle end"
	in := "a\n" + long + "\nb\n"
	c, err := newCollector(shell.Budget{Grep: &shell.Grep{Pattern: "needle"}}, nil, 20)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, c, []byte(in))
	got, rep, truncated := c.Finish()
	if !strings.HasPrefix(got, "start ") || !strings.HasSuffix(got, "needle end\n") || strings.Contains(got, "a\n") ||
		rep != (shell.StreamReport{Mode: "grep", LinesTotal: 3, LinesKept: 1}) || !truncated {
		t.Errorf("got %q %+v %v", got, rep, truncated)
	}
}

// TestTap: the tap sees every line cleaned and redacted, before the budget.
func TestTap(t *testing.T) {
	c, err := NewCollector(shell.Budget{Keep: "head", Lines: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	c.Tap(func(l string) { lines = append(lines, l) })
	mustWrite(t, c, []byte("\x1b[31mone\x1b[0m\ntoken="+fakeGitHub+"\n-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\nlast"))
	got, _, _ := c.Finish()
	want := []string{"one", "token=" + Marker(KindGitHubToken), Marker(KindPrivateKey), "last"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("tap saw %q, want %q", lines, want)
	}
	if got != "one\n... [5 lines elided] ...\n" {
		t.Errorf("text %q", got)
	}
}

// A single line far longer than the cap (a minified file, 1 MB of one character) keeps its
// head and tail under the default budget instead of vanishing.
func TestLongSingleRunLineKeepsHeadAndTail(t *testing.T) {
	c, err := NewCollector(shell.Budget{}, NewRedactor())
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 1_000_000)
	for i := 0; i < len(line); i += 32 << 10 {
		if _, err := c.Write([]byte(line[i:min(i+32<<10, len(line))])); err != nil {
			t.Fatal(err)
		}
	}
	text, rep, truncated := c.Finish()
	if !truncated || rep.LinesTotal != 1 {
		t.Fatalf("truncated %v, report %+v", truncated, rep)
	}
	if n := strings.Count(text, "x"); n < shell.DefaultMaxChars/2 || n > shell.DefaultMaxChars {
		t.Fatalf("kept %d x's of 1,000,000; want between %d and %d", n, shell.DefaultMaxChars/2, shell.DefaultMaxChars)
	}
}
