package main

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/testkit"
)

// TestRipgrepSearch: on a generated corpus, ripgrep's hits for every suggested query are the
// lines under the roots that hold every word (or the phrase), ignoring case, counted here
// without ripgrep.
func TestRipgrepSearch(t *testing.T) {
	rg, err := FindRipgrep()
	if err != nil {
		testkit.SkipUnlessCI(t, err.Error())
	}
	c := generate(t, 11)
	lines := corpusLines(t, c.Roots())
	for _, q := range c.Suggested {
		t.Run(q.Text, func(t *testing.T) {
			terms, err := parseQuery(q.Text)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, l := range lines {
				all := true
				for _, term := range terms {
					all = all && bytes.Contains(l, bytes.ToLower([]byte(term)))
				}
				if all {
					want++
				}
			}
			res, err := RipgrepRun(context.Background(), rg, c.Roots(), q.Text)
			if err != nil {
				t.Fatal(err)
			}
			if res.Hits != want {
				t.Fatalf("%s: %d hits, want %d", res.Command, res.Hits, want)
			}
			if q.Planted >= 0 && int64(res.Hits) < q.Planted {
				t.Fatalf("%d hits, %d planted", res.Hits, q.Planted)
			}
			if res.Wall <= 0 || res.MaxRSS == 0 {
				t.Fatalf("wall %v, max RSS %d", res.Wall, res.MaxRSS)
			}
		})
	}
}

// corpusLines is every line of every file under roots, lowercased.
func corpusLines(t *testing.T, roots []string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 16<<20)
			for sc.Scan() {
				out = append(out, bytes.ToLower(sc.Bytes()))
			}
			return sc.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFindRipgrepMissing: without rg on PATH the harness says what is missing and how to get it.
func TestFindRipgrepMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := FindRipgrep()
	if err == nil || !strings.Contains(err.Error(), "ripgrep (rg) is not on PATH") || !strings.Contains(err.Error(), "apt-get install ripgrep") {
		t.Fatalf("err = %v", err)
	}
	if _, _, err := RipgrepSearch(context.Background(), "", []string{t.TempDir()}, "x"); err == nil {
		t.Fatal("a search without rg succeeded")
	}
}

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  []string // nil: an error
	}{
		{"word", []string{"word"}},
		{"  two  words ", []string{"two", "words"}},
		{`"a phrase here"`, []string{"a phrase here"}},
		{`"unclosed phrase`, []string{`"unclosed`, "phrase"}},
		{`""`, nil},
		{"   ", nil},
	} {
		got, err := parseQuery(tc.query)
		if (err != nil) != (tc.want == nil) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseQuery(%q) = %q, %v; want %q", tc.query, got, err, tc.want)
		}
	}
}

func TestSumCounts(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want int
		ok   bool
	}{
		{"", 0, true},
		{"/a/b.jsonl:3\n/c:d/e.jsonl:4\n", 7, true},
		{"12\n", 12, true},
		{"/a/b.jsonl:x\n", 0, false},
	} {
		got, err := sumCounts(tc.out)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("sumCounts(%q) = %d, %v", tc.out, got, err)
		}
	}
}
