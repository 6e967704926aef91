package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/index/source"
)

// testSize is small enough for a quick test and large enough that every source has several
// sessions, subagents included.
const testSize = 4 << 20

func generate(t *testing.T, seed int64) *Corpus {
	t.Helper()
	c, err := Generate(context.Background(), filepath.Join(t.TempDir(), "corpus"), testSize, seed)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCorpusParses: every source's adapter finds every transcript of its share of the corpus
// and reads it whole without skipping a line; the messages, tool calls, subagents and token
// usage it reports are exactly what the generator says it wrote; every tool call has its
// result; subagents link to their parents both ways where the format says so.
func TestCorpusParses(t *testing.T) {
	ctx := context.Background()
	c := generate(t, 7)
	for _, name := range SourceNames() {
		t.Run(name, func(t *testing.T) {
			st := c.Sources[name]
			src, ok := source.ByName(name)
			if !ok {
				t.Fatalf("no adapter %q", name)
			}
			files, err := src.Discover(ctx, st.Roots)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(files)) != st.Files || st.Files < 3 {
				t.Fatalf("Discover found %d files, the generator wrote %d", len(files), st.Files)
			}
			var msgs, calls, subagents int64
			var usage source.Usage
			ids, children := map[string]bool{}, map[string]bool{}
			var subs []source.Session
			for _, path := range files {
				res, err := source.ParseFile(ctx, src, path, 0)
				if err != nil {
					t.Fatal(err)
				}
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Skipped) != 0 || res.Pending != 0 || res.Offset != fi.Size() {
					t.Fatalf("%s: skipped %v, pending %d, offset %d of %d", path, res.Skipped, res.Pending, res.Offset, fi.Size())
				}
				s := res.Session
				if s.ID == "" || s.Project == "" || s.Created.IsZero() || s.Model == "" {
					t.Fatalf("%s: session %+v", path, s)
				}
				if ids[s.ID] {
					t.Fatalf("%s: session id %s twice", path, s.ID)
				}
				ids[s.ID] = true
				for _, tc := range res.ToolCalls {
					if tc.Status == source.StatusPending || tc.Name == "" || tc.Params == "" {
						t.Fatalf("%s: tool call %+v", path, tc)
					}
					if tc.ChildSession != "" {
						children[tc.ChildSession] = true
					}
				}
				for _, m := range res.Messages {
					if m.Timestamp.IsZero() || m.ID == "" {
						t.Fatalf("%s: message %+v", path, m)
					}
				}
				if s.IsSubagent {
					subagents++
					subs = append(subs, s)
				}
				msgs += int64(len(res.Messages))
				calls += int64(len(res.ToolCalls))
				usage = usage.Add(res.Usage)
			}
			if msgs != st.Messages || calls != st.ToolCalls || subagents != st.Subagents || usage != st.Usage {
				t.Fatalf("parsed %d messages, %d tool calls, %d subagents, usage %+v; generated %d, %d, %d, %+v",
					msgs, calls, subagents, usage, st.Messages, st.ToolCalls, st.Subagents, st.Usage)
			}
			if st.Subagents == 0 && name != "pi" { // pi has no subagents
				t.Fatal("no subagent session")
			}
			for _, s := range subs {
				switch name {
				case "claude-code", "codex":
					if !ids[s.ParentSession] || !children[s.ID] {
						t.Fatalf("subagent %s: parent %q known %v, named by a call %v", s.ID, s.ParentSession, ids[s.ParentSession], children[s.ID])
					}
				case "nexus":
					if !ids[s.ParentSession] {
						t.Fatalf("subagent %s: parent %q unknown", s.ID, s.ParentSession)
					}
				}
			}
		})
	}
}

// TestCorpusFigures: the sizes, the private modes and the queries.
func TestCorpusFigures(t *testing.T) {
	c := generate(t, 7)
	total := c.Total()
	if total.Bytes < testSize*9/10 || total.Bytes > testSize*3/2 {
		t.Errorf("corpus of %d bytes, asked for %d", total.Bytes, testSize)
	}
	for name, st := range c.Sources {
		if st.Bytes < total.Bytes/10 {
			t.Errorf("%s: %d bytes of %d", name, st.Bytes, total.Bytes)
		}
	}
	if total.Secrets == 0 || total.Markers["connection refused"] == 0 {
		t.Errorf("secrets %d, markers %v", total.Secrets, total.Markers)
	}
	err := filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v", p, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, q := range c.Suggested {
		kinds[q.Kind]++
		if _, err := parseQuery(q.Text); err != nil {
			t.Error(err)
		}
	}
	if len(c.Suggested) != 20 || kinds["rare"] < 4 || kinds["mid"] < 4 || kinds["two-words"] < 3 ||
		kinds["frequent"] < 3 || kinds["phrase"] < 3 {
		t.Errorf("queries %+v", c.Suggested)
	}
	loaded, err := LoadCorpus(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(loaded.Queries(), "|") != strings.Join(c.Queries(), "|") || loaded.Total().Messages != total.Messages {
		t.Errorf("loaded corpus differs: %+v", loaded)
	}
}

// TestDeterministic: the same seed writes the same bytes, another seed others.
func TestDeterministic(t *testing.T) {
	a, b, other := generate(t, 3), generate(t, 3), generate(t, 4)
	ha, hb, ho := treeHash(t, a.Dir), treeHash(t, b.Dir), treeHash(t, other.Dir)
	if ha != hb {
		t.Fatalf("seed 3 twice: %s and %s", ha, hb)
	}
	if ha == ho {
		t.Fatal("seeds 3 and 4 wrote the same corpus")
	}
	if strings.Join(a.Queries(), "|") != strings.Join(b.Queries(), "|") {
		t.Fatalf("queries differ: %q and %q", a.Queries(), b.Queries())
	}
}

// treeHash hashes every file's path and bytes under dir, with dir itself written as $ROOT (the
// stores and corpus.json name absolute paths). The store's backup (sessions.json.bak, the
// version before the last commit) is left out: which version that is depends on how the
// concurrent creates were batched.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasSuffix(p, ".bak") {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		h.Write([]byte(rel + "\x00"))
		h.Write([]byte(strings.ReplaceAll(string(b), dir, "$ROOT")))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
