package index_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestWatch follows files written while the watcher runs: a new transcript, an append, a
// directory made later (a new day of Codex sessions), a root that did not exist at the start,
// and a deletion.
func TestWatch(t *testing.T) {
	e := newEnv(t)
	claude := e.path("claude-code", "-work-p")
	if err := os.MkdirAll(claude, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var syncs int
	var errs []error
	done := make(chan error, 1)
	go func() {
		done <- e.ix.Watch(ctx, index.WatchOptions{SyncOptions: e.opts("claude-code", "codex"), OnSync: func(_ *index.Summary, err error) {
			mu.Lock()
			defer mu.Unlock()
			syncs++
			if err != nil {
				errs = append(errs, err)
			}
		}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(errs) > 0 {
			t.Errorf("sync errors: %v", errs)
		}
	})
	found := func(q string, n int) func() bool {
		return func() bool {
			hits, err := e.ix.Search(t.Context(), index.SearchOptions{Query: q})
			return err == nil && len(hits) == n
		}
	}
	testkit.Eventually(t, "the first sync", func() bool { mu.Lock(); defer mu.Unlock(); return syncs >= 1 })

	p := filepath.Join(claude, "w1.jsonl")
	write(t, p, lines(ccUser("w1", "u1", "2026-01-01T00:00:00Z", "a freshly written aardvark")))
	testkit.Eventually(t, "a new file indexed", found("aardvark", 1))
	appendFile(t, p, lines(ccUser("w1", "u2", "2026-01-01T00:00:01Z", "an appended aardvark")))
	testkit.Eventually(t, "an appended line indexed", found("aardvark", 2))

	// The Codex root does not exist yet: the watcher waits for it, and for the day's directory.
	codex := filepath.Join(e.roots["codex"][0], "2026", "01", "02")
	write(t, filepath.Join(codex, "rollout-2026-01-02T00-00-00-019e0000-0000-7000-8000-0000000000c1.jsonl"), lines(
		`{"timestamp":"2026-01-02T00:00:00.000Z","type":"session_meta","payload":{"id":"019e0000-0000-7000-8000-0000000000c1","timestamp":"2026-01-02T00:00:00.000Z","cwd":"/w"}}`,
		`{"timestamp":"2026-01-02T00:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"codex wants a basilisk"}]}}`,
	))
	testkit.Eventually(t, "a file in a root made after the start", found("basilisk", 1))
	later := filepath.Join(e.roots["codex"][0], "2026", "01", "03")
	write(t, filepath.Join(later, "rollout-2026-01-03T00-00-00-019e0000-0000-7000-8000-0000000000c2.jsonl"), lines(
		`{"timestamp":"2026-01-03T00:00:00.000Z","type":"session_meta","payload":{"id":"019e0000-0000-7000-8000-0000000000c2","timestamp":"2026-01-03T00:00:00.000Z","cwd":"/w"}}`,
		`{"timestamp":"2026-01-03T00:00:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"another basilisk"}]}}`,
	))
	testkit.Eventually(t, "a file in a new day's directory", found("basilisk", 2))

	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a deleted file marked", func() bool {
		hits, err := e.ix.Search(t.Context(), index.SearchOptions{Query: "aardvark"})
		return err == nil && len(hits) == 2 && hits[0].Deleted && hits[1].Deleted
	})
}

// TestWatchStore: a tool's SQLite database changed while the watcher runs (a write, then the
// tool closing it, which checkpoints its WAL into the file) is read again.
func TestWatchStore(t *testing.T) {
	e := newEnv(t)
	db := filepath.Join(e.roots["crush"][0], ".crush", "crush.db")
	b, err := os.ReadFile("source/testdata/crush/.crush/crush.db")
	if err != nil {
		t.Fatal(err)
	}
	write(t, db, b)
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var syncs int
	done := make(chan error, 1)
	go func() {
		done <- e.ix.Watch(ctx, index.WatchOptions{SyncOptions: e.opts("crush"), OnSync: func(_ *index.Summary, err error) {
			mu.Lock()
			defer mu.Unlock()
			syncs++
			if err != nil {
				t.Errorf("sync: %v", err)
			}
		}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	found := func(q string) func() bool {
		return func() bool {
			hits, err := e.ix.Search(t.Context(), index.SearchOptions{Query: q})
			return err == nil && len(hits) > 0
		}
	}
	testkit.Eventually(t, "the first sync", found("axolotlcrush"))
	tool, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tool.ExecContext(t.Context(), `INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at)
		VALUES ('m-new', '7743a5bd-7acb-4e90-a2ba-d955f9010f97', 'user', '[{"type":"text","data":{"text":"a watched wombat"}}]', '', 1795891290, 1795891290)`); err != nil {
		t.Fatal(err)
	}
	if err := tool.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the changed database read again", found("wombat"))
}
