package index_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/index"
)

// The samples Claude Code 2.1.197 and Codex 0.171.0 wrote (testdata/transcripts/*/README.md).
const (
	samples = "../../testdata/transcripts"
	cc21    = samples + "/claude-code/cc-2.1.197"
	cx171   = samples + "/codex/cx-0.171.0"
	ccTop   = "77f1762e-c969-4294-b33e-f31b7a696ffb"
	cxID    = "01a2235f-2f82-7e31-b5ae-7378a54c9d7f"
)

// copyTree copies the regular files under from (only those keep accepts) into to.
func copyTree(t *testing.T, from, to string, keep func(rel string) bool) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil || !keep(rel) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		write(t, filepath.Join(to, rel), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNestedSubagents: Claude Code 2.1's subagents four deep are each linked to the session and
// message of the call that spawned them (a subagent's, below the first), with that call's task
// and status, and the call names its child; whichever of the two files is read first.
func TestNestedSubagents(t *testing.T) {
	chain := []string{ccTop, "agent-a583790338c5b5bf5", "agent-ad3fbc8e4971a7e3e", "agent-a71b5bcbc894fb290", "agent-a126b3e46bd72d2e8"}
	check := func(t *testing.T, e *env) {
		t.Helper()
		for i := 1; i < len(chain); i++ {
			child := show(t, e.ix, chain[i]).Session
			parent := show(t, e.ix, chain[i-1])
			var call *index.ToolCall
			for _, m := range parent.Messages {
				for k := range m.ToolCalls {
					if tc := &m.ToolCalls[k]; tc.Name == "Agent" {
						call = tc
						if child.ParentMessage != m.ID {
							t.Errorf("%s: parent message %q, the call's is %q", chain[i], child.ParentMessage, m.ID)
						}
					}
				}
			}
			if call == nil {
				t.Fatalf("%s: no Agent call", chain[i-1])
			}
			var params struct{ Description string }
			_ = json.Unmarshal([]byte(call.Params), &params)
			if child.ParentSession != chain[i-1] || child.ToolCallID != call.ID || !child.IsSubagent ||
				child.Task != params.Description || child.TaskStatus != "ok" || call.ChildSession != chain[i] {
				t.Errorf("%s: %+v; the spawning call %+v", chain[i], child, call)
			}
		}
	}
	t.Run("together", func(t *testing.T) {
		e := newEnv(t)
		copyTree(t, cc21, e.roots["claude-code"][0], func(string) bool { return true })
		e.sync("claude-code")
		check(t, e)
	})
	t.Run("subagents first", func(t *testing.T) {
		e := newEnv(t)
		copyTree(t, cc21, e.roots["claude-code"][0], func(rel string) bool { return strings.Contains(rel, "/subagents/") })
		e.sync("claude-code")
		copyTree(t, cc21, e.roots["claude-code"][0], func(rel string) bool { return !strings.Contains(rel, "/subagents/") })
		e.sync("claude-code")
		check(t, e)
	})
}

// TestInjectedText: titles come from the first prompt the user typed, never from text the tool
// injected (Codex's environment context, Claude Code's update notice), and the events ledger
// writes a turn for each typed prompt only.
func TestInjectedText(t *testing.T) {
	e := newEnv(t)
	copyTree(t, cx171, e.roots["codex"][0], func(string) bool { return true })
	copyTree(t, samples+"/claude-code/mclaude", e.roots["claude-code"][0], func(string) bool { return true })
	e.sync("codex", "claude-code")
	for id, want := range map[string]string{
		cxID:                                   "please run the command: echo quokkamarker",
		"b8d44276-1f04-4220-98c0-b410f7c58ff5": "you can upgrade by running",
	} {
		if got := show(t, e.ix, id).Session.Title; got != want {
			t.Errorf("%s: title %q, want %q", id, got, want)
		}
	}
	var buf bytes.Buffer
	if _, err := e.ix.Export(t.Context(), &buf, index.ExportOptions{Ledger: index.LedgerEvents}); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec index.ExportRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Session == cxID {
			queries = append(queries, rec.Turn.Query)
			if rec.Turn.Turn == 0 {
				t.Errorf("turn 0 written: %+v", rec.Turn)
			}
		}
	}
	if len(queries) != 3 || queries[0] != "please run the command: echo quokkamarker" {
		t.Errorf("Codex turns %q", queries)
	}
}

// TestEmptyFileNoSession: a zero-byte transcript is no session, for any source; once it has a
// line it is one.
func TestEmptyFileNoSession(t *testing.T) {
	e := newEnv(t)
	cc := e.path("claude-code", "-p/0e5d3c1a-1111-4222-8333-444455556666.jsonl")
	cx := e.path("codex", "2026/11/28/rollout-2026-11-28T18-16-10-019e0000-0000-7000-8000-0000000000c1.jsonl")
	write(t, cc, nil)
	write(t, cx, nil)
	e.sync("claude-code", "codex")
	if st, err := e.ix.Stats(t.Context()); err != nil || st.Sessions != 0 {
		t.Fatalf("stats %+v %v", st, err)
	}
	appendFile(t, cc, lines(ccUser("0e5d3c1a-1111-4222-8333-444455556666", "u1", "2026-01-02T03:04:05Z", "a walrus")))
	e.sync("claude-code", "codex")
	if st, err := e.ix.Stats(t.Context()); err != nil || st.Sessions != 1 {
		t.Fatalf("stats after a line %+v %v", st, err)
	}
}

// TestResumeCommands: Claude Code and Codex resume a session in the directory they start in,
// so their commands start there; a Claude Code subagent's hit resumes the session that started
// it (claude --resume agent-… is not a session id), and says so.
func TestResumeCommands(t *testing.T) {
	e := newEnv(t)
	copyTree(t, cx171, e.roots["codex"][0], func(string) bool { return true })
	copyTree(t, cc21, e.roots["claude-code"][0], func(string) bool { return true })
	e.sync("codex", "claude-code")
	hits := mustSearch(t, e.ix, index.SearchOptions{Query: "bilbymarker", Sources: []string{"codex"}})
	if len(hits) == 0 || hits[0].Resume != "cd /tmp/cxproj && codex resume "+cxID || hits[0].ResumeNote != "" {
		t.Fatalf("codex hits %+v", hits)
	}
	// A call that was the model's first action has the time and the place of its turn's prompt.
	tool := mustSearch(t, e.ix, index.SearchOptions{Query: "destroyed", Role: "tool", Sources: []string{"codex"}})
	if len(tool) != 1 || tool[0].Tool != "mcp__nexus__session_exec" || tool[0].Timestamp == "" || !strings.Contains(tool[0].Show, "--around") {
		t.Fatalf("codex tool hits %+v", tool)
	}
	for _, sid := range []string{ccTop, "agent-ad3fbc8e4971a7e3e"} {
		hits := mustSearch(t, e.ix, index.SearchOptions{Query: "tiny", Sources: []string{"claude-code"}, Limit: 100})
		found := false
		for _, h := range hits {
			if h.Session != sid {
				continue
			}
			found = true
			if h.Resume != "cd /tmp/ccproj && claude --resume "+ccTop || (sid == ccTop) != (h.ResumeNote == "") {
				t.Errorf("%s: resume %q (%s)", sid, h.Resume, h.ResumeNote)
			}
		}
		if !found {
			t.Errorf("no hit in %s", sid)
		}
	}
}

// TestResultCap: a result is indexed up to the cap and no further, and its hit says it was cut
// and how long it was; show gives its start.
func TestResultCap(t *testing.T) {
	dir := t.TempDir()
	ix, err := index.Open(t.Context(), filepath.Join(dir, "state", index.FileName), index.Options{ResultMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ix.Close() }()
	e := newEnv(t)
	e.ix = ix
	out := "early walrus " + strings.Repeat("x ", 60) + " late narwhal"
	write(t, e.path("claude-code", "p/s.jsonl"), lines(
		ccUser("s", "u1", "2026-01-02T03:04:05Z", "look"),
		ccToolUse("s", "a1", "m1", "2026-01-02T03:04:06Z", "t1", "Bash", `{"command":"cat"}`, 1),
		ccResult("s", "u2", "2026-01-02T03:04:07Z", "t1", out),
	))
	e.sync("claude-code")
	hits := mustSearch(t, ix, index.SearchOptions{Query: "walrus"})
	if len(hits) != 1 || !hits[0].ResultCut || hits[0].ResultBytes != int64(len(out)) {
		t.Fatalf("hits %+v", hits)
	}
	if hits := mustSearch(t, ix, index.SearchOptions{Query: "narwhal"}); len(hits) != 0 {
		t.Fatalf("a word past the cap found: %+v", hits)
	}
}

// TestWholeResults: a word deep in a tool's output (past the 4 KiB the index kept of each
// result) is found, and show gives the result's start with its length.
func TestWholeResults(t *testing.T) {
	e := newEnv(t)
	out := "first line\n" + strings.Repeat("filler words here\n", 1000) + "deepwordquux at the end"
	write(t, e.path("claude-code", "p/s.jsonl"), lines(
		ccUser("s", "u1", "2026-01-02T03:04:05Z", "look"),
		ccToolUse("s", "a1", "m1", "2026-01-02T03:04:06Z", "t1", "Bash", `{"command":"cat"}`, 1),
		ccResult("s", "u2", "2026-01-02T03:04:07Z", "t1", out),
	))
	e.sync("claude-code")
	hits := mustSearch(t, e.ix, index.SearchOptions{Query: "deepwordquux"})
	if len(hits) != 1 || hits[0].Kind != "tool_call" || hits[0].ResultCut || !strings.Contains(hits[0].Snippet, "deepwordquux") {
		t.Fatalf("hits %+v", hits)
	}
	tc := show(t, e.ix, "s").Messages[1].ToolCalls[0]
	if len(tc.Result) != index.ShowResultMax || tc.ResultBytes != int64(len(out)) || !strings.HasPrefix(tc.Result, "first line\n") {
		t.Fatalf("shown %d bytes of %d", len(tc.Result), tc.ResultBytes)
	}
}

// TestDeepToolOutput: words that real transcripts hold only deep in a tool's output (past its
// first 4 KiB, all the index used to keep of a result) are found, in the session that holds
// them. Each word was checked on the file: every occurrence of it is past byte 4096 of a tool
// result (a build log, a file read, a web page), none in a message or in a result's start.
func TestDeepToolOutput(t *testing.T) {
	e := newEnv(t)
	for _, src := range []string{"codex", "pi"} {
		e.roots[src] = []string{filepath.Join(samples, src)}
	}
	e.sync("codex", "pi")
	for word, file := range map[string]string{
		"CodexConfigResult":   "rollout-2025-11-12T17-48-11-019a7ae6-1945-7c63-98f2-210adb922af9.jsonl", // moonmind
		"Recoverability":      "rollout-2026-01-30T14-16-50-019c0f0c-9c5d-7081-99a9-f4829741831a.jsonl", // tfw
		"augmentcode":         "rollout-2025-09-29T13-09-19-01999469-65fd-7fa2-ab93-d24bb4c714cb.jsonl", // andc
		"parseSessionEntries": "2026-04-22T07-21-09-111Z_5431f726-6e26-446b-a010-4decf32e234b.jsonl",    // jlai
		"branchWithSummary":   "2026-04-22T07-21-09-111Z_5431f726-6e26-446b-a010-4decf32e234b.jsonl",
	} {
		hits := mustSearch(t, e.ix, index.SearchOptions{Query: word, Limit: 50})
		found := false
		for _, h := range hits {
			if h.Kind == "tool_call" && strings.Contains(h.Snippet, word) && strings.HasSuffix(show(t, e.ix, h.Session).Session.Path, file) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: not found in %s's tool output: %+v", word, file, hits)
		}
	}
}

// TestLinkPlans: the statements that link subagents by their spawning call reach the rows
// through the partial indexes of spawning calls and of subagents' calls, never by scanning the
// calls or through the index on gen (which, in a full sync, holds every call written so far:
// each batch's commit walked them all, and the 1 GB sync took twice as long).
func TestLinkPlans(t *testing.T) {
	e := newEnv(t)
	for _, q := range index.LinkByCall {
		rows, err := index.DB(e.ix).QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, 1)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		_ = rows.Close()
		all := strings.Join(plan, "; ")
		for _, bad := range []string{"tool_calls_gen", "(source=?)", "SCAN tc;", "SCAN tool_calls;", "SCAN s;", "SCAN sessions;"} {
			if strings.Contains(all+";", bad) {
				t.Errorf("plan %q uses %s, for\n%s", all, bad, q)
			}
		}
	}
}

// TestResultMaxFromEnv: the cap people set for the CLI and the gateway.
func TestResultMaxFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
		bad  bool
	}{
		{"", 0, false}, {"4096", 4096, false}, {"4MiB", 4 << 20, false}, {"64 KiB", 64 << 10, false},
		{"0", 0, true}, {"-1", 0, true}, {"lots", 0, true}, {"9999999MiB", 0, true},
	} {
		got, err := index.ResultMaxFromEnv(func(k string) string {
			if k == index.EnvResultMax {
				return tc.v
			}
			return ""
		})
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("%q: %d, %v", tc.v, got, err)
		}
	}
}
