package index_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/index"
)

// TestToolSamplesIndexed syncs the samples the real tools wrote (OpenCode's and Crush's SQLite
// databases of several sessions each, Qwen Code's and Gemini CLI's JSON Lines) and finds each
// tool's marker word with the command that resumes its session.
func TestToolSamplesIndexed(t *testing.T) {
	e := newEnv(t)
	const testdata = "source/testdata"
	roots := map[string]string{"opencode": "opencode", "qwen-code": "qwen-code/projects", "gemini": "gemini/tmp"}
	for src, dir := range roots {
		e.roots[src] = []string{filepath.Join(testdata, dir)}
	}
	// Crush's database is copied: the test changes it below.
	crushDir := filepath.Join(t.TempDir(), "proj")
	crushDB := filepath.Join(crushDir, ".crush", "crush.db")
	b, err := os.ReadFile(filepath.Join(testdata, "crush", ".crush", "crush.db"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, crushDB, b)
	e.roots["crush"] = []string{crushDir}
	srcs := []string{"opencode", "qwen-code", "gemini", "crush"}
	sum := e.sync(srcs...)
	// Six sessions in five files: OpenCode's and Crush's databases hold two each, Gemini CLI
	// wrote two files of one session (the second holds only its context, a message of the
	// first's id).
	if sum.Files != 5 || sum.New != 5 || sum.Sessions != 7 || sum.Messages != 27 || sum.ToolCalls != 6 {
		t.Fatalf("summary %+v", sum)
	}
	for _, tc := range []struct{ word, source, resume string }{
		{"axolotlopencode", "opencode", "cd /tmp/nexus-history-samples/opencode/project && opencode --session "},
		{"axolotlqwen", "qwen-code", "cd /tmp/nexus-history-samples/qwen-code/project && qwen --resume 027fb8f7-fa98-4055-8e9d-1f161fb037bd"},
		{"axolotlgemini", "gemini", "cd /tmp/nexus-history-samples/gemini/project && gemini --resume 7c1d7dc0-91ce-49f9-b121-2025ea0173af"},
		{"axolotlcrush", "crush", "cd " + crushDir + " && crush --session "},
	} {
		hits := mustSearch(t, e.ix, index.SearchOptions{Query: tc.word, Limit: 10})
		if len(hits) == 0 {
			t.Fatalf("%s: no hits", tc.word)
		}
		for _, h := range hits {
			if h.Source != tc.source || h.Role != "user" || len(h.Resume) < len(tc.resume) || h.Resume[:len(tc.resume)] != tc.resume {
				t.Errorf("%s: hit %+v", tc.word, h)
			}
		}
	}
	// A tool's result is searchable too (Crush's bash ran pwd).
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "samples crush project", Sources: []string{"crush"}}); len(hits) != 1 || hits[0].Tool != "bash" {
		t.Fatalf("tool result hits %+v", hits)
	}
	if again := e.sync(srcs...); again.Unchanged != 5 || again.Messages != 0 {
		t.Fatalf("second sync %+v", again)
	}

	// Crush writes a message into its database (and checkpoints it): the file is read whole
	// again, its rows replaced, none twice.
	db, err := sql.Open("sqlite", "file:"+crushDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at)
		VALUES ('m-new', '7743a5bd-7acb-4e90-a2ba-d955f9010f97', 'user', '[{"type":"text","data":{"text":"a quokka follows"}}]', '', 1795891290, 1795891290)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	again := e.sync(srcs...)
	if again.Unchanged != 4 || again.Sessions != 2 || again.Messages != 8 {
		t.Fatalf("sync after the change %+v", again)
	}
	d := show(t, e.ix, "7743a5bd-7acb-4e90-a2ba-d955f9010f97")
	if d.Session.Messages != 4 || d.Session.Turns != 2 || d.Messages[3].Text != "a quokka follows" {
		t.Fatalf("session after the change %+v", d.Session)
	}
	st, err := e.ix.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions != 6 || st.Messages != 27 || st.ToolCalls != 6 {
		t.Fatalf("stats %d sessions, %d messages, %d calls", st.Sessions, st.Messages, st.ToolCalls)
	}
}
