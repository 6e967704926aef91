package index_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/index/source"
)

// env is an index in a temporary state directory, with one root per source under a temporary
// home, so no test reads the machine's real transcripts.
type env struct {
	t     *testing.T
	ix    *index.Index
	home  string
	roots map[string][]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	ix, err := index.Open(t.Context(), filepath.Join(dir, "state", index.FileName), index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	e := &env{t: t, ix: ix, home: filepath.Join(dir, "home"), roots: map[string][]string{}}
	for _, s := range source.All() {
		e.roots[s.Name()] = []string{filepath.Join(e.home, s.Name())}
	}
	return e
}

func (e *env) opts(sources ...string) index.SyncOptions {
	return index.SyncOptions{Sources: sources, Roots: e.roots, Env: &source.Env{Home: e.home}}
}

func (e *env) sync(sources ...string) *index.Summary {
	e.t.Helper()
	sum, err := e.ix.Sync(e.t.Context(), e.opts(sources...))
	if err != nil {
		e.t.Fatal(err)
	}
	if len(sum.Errors) > 0 {
		e.t.Fatalf("sync errors: %+v", sum.Errors)
	}
	return sum
}

// path is a file under a source's root.
func (e *env) path(src, rel string) string {
	return filepath.Join(e.roots[src][0], rel)
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func lines(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }

// Claude Code lines, the shape of the tool's own.
func ccUser(sid, uuid, ts, text string) string {
	b, _ := json.Marshal(text)
	return fmt.Sprintf(`{"type":"user","sessionId":%q,"uuid":%q,"timestamp":%q,"cwd":"/work/proj","message":{"role":"user","content":%s}}`, sid, uuid, ts, b)
}

func ccText(sid, uuid, mid, ts, text string, out int) string {
	b, _ := json.Marshal(text)
	return fmt.Sprintf(`{"type":"assistant","sessionId":%q,"uuid":%q,"timestamp":%q,"requestId":"req-%s","message":{"id":%q,"role":"assistant","model":"claude-x","content":[{"type":"text","text":%s}],"usage":{"input_tokens":10,"output_tokens":%d}}}`,
		sid, uuid, ts, mid, mid, b, out)
}

func ccToolUse(sid, uuid, mid, ts, id, name, input string, out int) string {
	return fmt.Sprintf(`{"type":"assistant","sessionId":%q,"uuid":%q,"timestamp":%q,"requestId":"req-%s","message":{"id":%q,"role":"assistant","model":"claude-x","content":[{"type":"tool_use","id":%q,"name":%q,"input":%s}],"usage":{"input_tokens":10,"output_tokens":%d}}}`,
		sid, uuid, ts, mid, mid, id, name, input, out)
}

func ccResult(sid, uuid, ts, id, text string) string {
	b, _ := json.Marshal(text)
	return fmt.Sprintf(`{"type":"user","sessionId":%q,"uuid":%q,"timestamp":%q,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":%s}]}}`,
		sid, uuid, ts, id, b)
}

func mustSearch(t *testing.T, ix *index.Index, o index.SearchOptions) []index.Hit {
	t.Helper()
	hits, err := ix.Search(t.Context(), o)
	if err != nil {
		t.Fatalf("search %+v: %v", o, err)
	}
	return hits
}

func show(t *testing.T, ix *index.Index, id string) *index.SessionDetail {
	t.Helper()
	d, err := ix.Show(t.Context(), index.ShowOptions{Session: id})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRealSamples indexes the repository's real transcripts and checks the index holds what
// each adapter read: every message, tool call and token, once.
func TestRealSamples(t *testing.T) {
	e := newEnv(t)
	const testdata = "../../testdata/transcripts"
	for _, src := range []string{"claude-code", "codex", "openclaw", "pi"} {
		e.roots[src] = []string{filepath.Join(testdata, src)}
	}
	sum := e.sync("claude-code", "codex", "openclaw", "pi")
	if sum.New != sum.Files || sum.Files == 0 {
		t.Fatalf("summary %+v", sum)
	}
	ctx := t.Context()
	type want struct{ messages, calls int }
	byID := map[string]want{}
	var usage source.Usage
	for _, name := range []string{"claude-code", "codex", "openclaw", "pi"} {
		src, _ := source.ByName(name)
		files, err := src.Discover(ctx, e.roots[name])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			res, err := source.ParseFile(ctx, src, f, 0)
			if err != nil {
				t.Fatal(err)
			}
			w := byID[res.Session.ID]
			w.messages += len(res.Messages)
			w.calls += len(res.ToolCalls)
			byID[res.Session.ID] = w
			usage = usage.Add(res.Usage)
		}
	}
	st, err := e.ix.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var messages, calls int
	for id, w := range byID {
		d := show(t, e.ix, id)
		if d.Session.Messages != w.messages || len(d.Messages) != w.messages {
			t.Errorf("%s: %d/%d messages, the adapter read %d", id, d.Session.Messages, len(d.Messages), w.messages)
		}
		messages += w.messages
		calls += w.calls
	}
	if st.Messages != messages || st.ToolCalls != calls || st.Sessions != len(byID) {
		t.Errorf("stats %d messages, %d calls, %d sessions; adapters %d, %d, %d", st.Messages, st.ToolCalls, st.Sessions, messages, calls, len(byID))
	}
	if st.Tokens.Input != usage.Input || st.Tokens.Output != usage.Output || st.Tokens.CacheRead != usage.CacheRead ||
		st.Tokens.CacheWrite != usage.CacheWrite || st.Tokens.Reasoning != usage.Reasoning {
		t.Errorf("tokens %+v, adapters %+v", st.Tokens, usage)
	}
	if got := st.SkippedLines["claude-code: "+source.ReasonMalformed]; got != 1 {
		t.Errorf("skipped lines %v, want the one malformed Claude Code line", st.SkippedLines)
	}
	// A second sync reads nothing.
	again := e.sync("claude-code", "codex", "openclaw", "pi")
	if again.Unchanged != again.Files || again.Bytes != 0 || again.Messages != 0 {
		t.Fatalf("second sync %+v", again)
	}
	// The pi sample's tool calls are searchable by tool name.
	hits := mustSearch(t, e.ix, index.SearchOptions{Query: "package", Tool: "bash", Sources: []string{"pi"}, Limit: 5})
	if len(hits) == 0 || hits[0].Kind != "tool_call" || hits[0].Tool != "bash" {
		t.Fatalf("tool hits %+v", hits)
	}
}

func TestIncrementalAppend(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "-work-proj/s1.jsonl")
	write(t, p, lines(
		ccUser("s1", "u1", "2026-01-01T00:00:00Z", "first question about walruses"),
		ccText("s1", "a1", "m1", "2026-01-01T00:00:01Z", "walruses live in the arctic", 5),
	))
	first := e.sync("claude-code")
	if first.New != 1 || first.Messages != 2 {
		t.Fatalf("first %+v", first)
	}
	more := lines(
		ccUser("s1", "u2", "2026-01-01T00:01:00Z", "second question about narwhals"),
		ccText("s1", "a2", "m2", "2026-01-01T00:01:01Z", "narwhals have tusks", 7),
	)
	appendFile(t, p, more)
	second := e.sync("claude-code")
	if second.Appended != 1 || second.Bytes != int64(len(more)) || second.Messages != 2 {
		t.Fatalf("after append: %+v, want 1 appended file, %d bytes read, 2 messages", second, len(more))
	}
	d := show(t, e.ix, "s1")
	if d.Session.Messages != 4 || d.Session.Turns != 2 || d.Session.Tokens.Output != 12 {
		t.Fatalf("session %+v", d.Session)
	}
	var turns []int
	for _, m := range d.Messages {
		turns = append(turns, m.Turn)
	}
	if fmt.Sprint(turns) != "[1 1 2 2]" {
		t.Fatalf("turns %v", turns)
	}
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "narwhals"}); len(hits) != 2 {
		t.Fatalf("hits %+v", hits)
	}
}

// A reply Claude Code writes over several lines, cut by a sync between them, is one message
// with its parts joined and its usage counted once, from the last snapshot.
func TestSplitReplyAcrossSyncs(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "-work-proj/s2.jsonl")
	write(t, p, lines(
		ccUser("s2", "u1", "2026-01-01T00:00:00Z", "list files"),
		ccText("s2", "a1", "m1", "2026-01-01T00:00:01Z", "I will list them", 3),
	))
	e.sync("claude-code")
	appendFile(t, p, lines(
		ccToolUse("s2", "a2", "m1", "2026-01-01T00:00:02Z", "toolu_1", "Bash", `{"command":"ls -la"}`, 9),
		ccResult("s2", "u2", "2026-01-01T00:00:03Z", "toolu_1", "README.md go.mod"),
	))
	e.sync("claude-code")
	d := show(t, e.ix, "s2")
	if d.Session.Messages != 2 || d.Session.Tokens.Output != 9 || d.Session.Tokens.Input != 10 {
		t.Fatalf("session %+v", d.Session)
	}
	reply := d.Messages[1]
	if reply.Text != "I will list them" || len(reply.ToolCalls) != 1 || reply.ToolCalls[0].Status != "ok" ||
		reply.ToolCalls[0].Result != "README.md go.mod" {
		t.Fatalf("reply %+v", reply)
	}
}

func TestTornLastLine(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "-work-proj/s3.jsonl")
	whole := ccUser("s3", "u1", "2026-01-01T00:00:00Z", "hello torn world")
	torn := ccText("s3", "a1", "m1", "2026-01-01T00:00:01Z", "a reply being written", 1)
	write(t, p, []byte(whole+"\n"+torn[:40]))
	sum := e.sync("claude-code")
	if sum.Messages != 1 || sum.Bytes != int64(len(whole)+1+40) {
		t.Fatalf("torn %+v", sum)
	}
	appendFile(t, p, []byte(torn[40:]+"\n"))
	sum = e.sync("claude-code")
	if sum.Appended != 1 || sum.Messages != 1 {
		t.Fatalf("completed %+v", sum)
	}
	if d := show(t, e.ix, "s3"); d.Session.Messages != 2 || d.Messages[1].Text != "a reply being written" {
		t.Fatalf("%+v", d.Messages)
	}
}

func TestRewrittenAndDeleted(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "-work-proj/s4.jsonl")
	write(t, p, lines(ccUser("s4", "u1", "2026-01-01T00:00:00Z", "obsolete platypus text")))
	e.sync("claude-code")
	// Rewritten in place, shorter: the old rows go, the new ones come.
	write(t, p, lines(ccUser("s4", "u9", "2026-01-02T00:00:00Z", "fresh echidna")))
	sum := e.sync("claude-code")
	if sum.Rewritten != 1 {
		t.Fatalf("rewrite %+v", sum)
	}
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "platypus"}); len(hits) != 0 {
		t.Fatalf("old text still found: %+v", hits)
	}
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "echidna"}); len(hits) != 1 {
		t.Fatalf("new text: %+v", hits)
	}
	// Rewritten with the same size and a different last line.
	write(t, p, lines(ccUser("s4", "u9", "2026-01-02T00:00:00Z", "fresh wombats")))
	if sum := e.sync("claude-code"); sum.Rewritten != 1 {
		t.Fatalf("same-size rewrite %+v", sum)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	sum = e.sync("claude-code")
	if sum.Deleted != 1 {
		t.Fatalf("delete %+v", sum)
	}
	d := show(t, e.ix, "s4")
	if !d.Session.Deleted || len(d.Messages) != 1 {
		t.Fatalf("deleted session %+v", d)
	}
	hits := mustSearch(t, e.ix, index.SearchOptions{Query: "wombats"})
	if len(hits) != 1 || !hits[0].Deleted {
		t.Fatalf("a deleted session stays searchable, marked: %+v", hits)
	}
	// A second sync does not count it again.
	if sum := e.sync("claude-code"); sum.Deleted != 0 {
		t.Fatalf("%+v", sum)
	}
}

func TestMalformedAndUnknownLinesNeverFatal(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "-work-proj/s5.jsonl")
	write(t, p, lines(
		`{"type":"user", broken`,
		`{"type":"from-the-future","x":1}`,
		`[1,2]`,
		ccUser("s5", "u1", "2026-01-01T00:00:00Z", "survivor message"),
	))
	sum := e.sync("claude-code")
	if sum.Messages != 1 || sum.Skipped["claude-code: "+source.ReasonMalformed] != 1 ||
		sum.Skipped["claude-code: "+source.ReasonUnknownType+": from-the-future"] != 1 || sum.Skipped["claude-code: "+source.ReasonNoRecord] != 1 {
		t.Fatalf("%+v", sum)
	}
	st, err := e.ix.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.SkippedLines) != 3 {
		t.Fatalf("stats skipped %v", st.SkippedLines)
	}
}

func TestRanking(t *testing.T) {
	e := newEnv(t)
	filler := strings.Repeat("lorem ipsum dolor sit amet ", 40)
	write(t, e.path("claude-code", "-p/r.jsonl"), lines(
		ccUser("r", "u1", "2026-01-01T00:00:00Z", "compiler "+filler),
		ccUser("r", "u2", "2026-01-01T00:00:01Z", "compiler compiler optimisation compiler"),
		ccUser("r", "u3", "2026-01-01T00:00:02Z", filler+" compiler "+filler),
		ccUser("r", "u4", "2026-01-01T00:00:03Z", "nothing relevant"),
	))
	e.sync("claude-code")
	hits := mustSearch(t, e.ix, index.SearchOptions{Query: "compiler"})
	var order []string
	for _, h := range hits {
		order = append(order, h.MessageID)
	}
	if fmt.Sprint(order) != "[u2 u1 u3]" {
		t.Fatalf("rank order %v", order)
	}
	if !strings.Contains(hits[0].Snippet, index.MarkOpen+"compiler"+index.MarkClose) {
		t.Fatalf("snippet %q", hits[0].Snippet)
	}
	if hits[0].Show != "nexus index show r --source claude-code --around u2" ||
		hits[0].Resume != "cd /work/proj && claude --resume r" {
		t.Fatalf("commands %q %q", hits[0].Show, hits[0].Resume)
	}
	// Filters.
	if h := mustSearch(t, e.ix, index.SearchOptions{Query: "compiler", Role: "assistant"}); len(h) != 0 {
		t.Fatalf("role filter %+v", h)
	}
	if h := mustSearch(t, e.ix, index.SearchOptions{Query: "compiler", Project: "nowhere"}); len(h) != 0 {
		t.Fatalf("project filter %+v", h)
	}
	if h := mustSearch(t, e.ix, index.SearchOptions{Query: "compiler", Limit: 1}); len(h) != 1 {
		t.Fatalf("limit %+v", h)
	}
}

func TestRedactedBeforeIndexing(t *testing.T) {
	e := newEnv(t)
	const key = "AKIAIOSFODNN7EXAMPLQ"
	write(t, e.path("claude-code", "-p/sec.jsonl"), lines(
		ccUser("sec", "u1", "2026-01-01T00:00:00Z", "my key is "+key+" please keep it"),
		ccToolUse("sec", "a1", "m1", "2026-01-01T00:00:01Z", "toolu_9", "Bash", `{"command":"export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789"}`, 1),
	))
	e.sync("claude-code")
	if h := mustSearch(t, e.ix, index.SearchOptions{Query: key}); len(h) != 0 {
		t.Fatalf("secret searchable: %+v", h)
	}
	if h := mustSearch(t, e.ix, index.SearchOptions{Query: "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}); len(h) != 0 {
		t.Fatalf("token searchable: %+v", h)
	}
	d := show(t, e.ix, "sec")
	if strings.Contains(d.Messages[0].Text, key) || !strings.Contains(d.Messages[0].Text, "[REDACTED:") {
		t.Fatalf("text %q", d.Messages[0].Text)
	}
	raw, err := os.ReadFile(e.ix.Path())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(key)) || bytes.Contains(raw, []byte("ghp_abcdefghij")) {
		t.Fatal("a secret is in the database file")
	}
}

// Anything a user types is a valid search: operators, column filters, quotes and
// punctuation are words or separators, never an FTS5 syntax error.
func TestQueryTolerance(t *testing.T) {
	e := newEnv(t)
	write(t, e.path("claude-code", "-p/q.jsonl"), lines(
		ccUser("q", "u1", "2026-01-01T00:00:00Z", "run src/index.go with foo_bar AND baz-qux v1.2.3 near(x) NOT this"),
	))
	e.sync("claude-code")
	for _, q := range []string{
		`"unterminated phrase`, `foo AND`, `OR foo`, `NOT`, `foo NOT`, `-foo`, `foo OR OR bar`, `NEAR(foo bar)`, `text:foo`,
		`{text}: foo`, `foo*bar`, `*`, `^foo`, `foo + bar`, `(foo`, `foo)`, `"" foo`, `src/index.go`, `foo_bar`, `baz-qux`,
		`v1.2.3`, `'single'`, `\x00`, "naïve café", `日本語`, `a"b"c`, `foo -`, `- foo`, `AND OR NOT`, `foo: bar`, `"a" * "b"`,
	} {
		_, err := e.ix.Search(t.Context(), index.SearchOptions{Query: q})
		if err != nil && abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("query %q: %v", q, err)
		}
	}
	for q, want := range map[string]int{`src/index.go`: 1, `foo_bar`: 1, `baz-qux`: 1, `v1.2.3`: 1, `"with foo"`: 1, `ind*`: 1,
		`walrus OR baz`: 1, `foo -baz`: 0, `NOT this`: 0, `near(x)`: 1} {
		hits, err := e.ix.Search(t.Context(), index.SearchOptions{Query: q})
		if err != nil && abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Fatalf("%q: %v", q, err)
		}
		if len(hits) != want {
			t.Errorf("%q (%s): %d hits, want %d", q, index.MatchQuery(q), len(hits), want)
		}
	}
	if _, err := e.ix.Search(t.Context(), index.SearchOptions{Query: `(( ** ))`}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("a query of no words: %v", err)
	}
}

func FuzzMatchQuery(f *testing.F) {
	for _, s := range []string{`foo`, `"a b"`, `a OR b`, `-x y`, `NEAR(a b)`, `col:x`, `a* "b`} {
		f.Add(s)
	}
	dir := f.TempDir()
	ix, err := index.Open(context.Background(), filepath.Join(dir, index.FileName), index.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ix.Close() })
	f.Fuzz(func(t *testing.T, q string) {
		_, err := ix.Search(context.Background(), index.SearchOptions{Query: q})
		if err != nil && abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Fatalf("query %q (%s): %v", q, index.MatchQuery(q), err)
		}
	})
}

func TestSubagentLinks(t *testing.T) {
	e := newEnv(t)
	write(t, e.path("claude-code", "-p/s1.jsonl"), lines(
		ccUser("s1", "u1", "2026-01-01T00:00:00Z", "research this"),
		`{"type":"assistant","sessionId":"s1","uuid":"a1","timestamp":"2026-01-01T00:00:01Z","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Task","input":{"description":"find the bug","prompt":"go"}}]}}`,
		`{"type":"user","sessionId":"s1","uuid":"u2","timestamp":"2026-01-01T00:00:05Z","toolUseResult":{"status":"completed","agentId":"ab12cd","content":[]},"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"done"}]}]}}`,
	))
	write(t, e.path("claude-code", "-p/s1/subagents/agent-ab12cd.jsonl"), lines(
		`{"type":"assistant","isSidechain":true,"uuid":"x1","timestamp":"2026-01-01T00:00:02Z","message":{"id":"m9","role":"assistant","content":"found it"}}`,
	))
	e.sync("claude-code")
	d := show(t, e.ix, "agent-ab12cd")
	s := d.Session
	if !s.IsSubagent || s.ParentSession != "s1" || s.Task != "find the bug" || s.TaskStatus != "ok" || s.ToolCallID != "toolu_1" || s.ParentMessage != "m1" {
		t.Fatalf("subagent %+v", s)
	}
	if p := show(t, e.ix, "s1"); fmt.Sprint(p.Children) != "[agent-ab12cd]" {
		t.Fatalf("children %v", p.Children)
	}
}

func TestShowAroundAndFind(t *testing.T) {
	e := newEnv(t)
	var ls []string
	for i := range 20 {
		ls = append(ls, ccUser("sess-around-1", fmt.Sprintf("u%02d", i), fmt.Sprintf("2026-01-01T00:00:%02dZ", i), fmt.Sprintf("message number %d", i)))
	}
	write(t, e.path("claude-code", "-p/a.jsonl"), lines(ls...))
	e.sync("claude-code")
	d, err := e.ix.Show(t.Context(), index.ShowOptions{Session: "sess-ar", Around: "u10", Context: 2})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range d.Messages {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[u08 u09 u10 u11 u12]" {
		t.Fatalf("around %v", ids)
	}
	if _, err := e.ix.Show(t.Context(), index.ShowOptions{Session: "nope"}); abi.CodeOf(err) != abi.CodeSessionNotFound {
		t.Fatalf("unknown session: %v", err)
	}
	if _, err := e.ix.Show(t.Context(), index.ShowOptions{Session: "sess-around-1", Around: "zz"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("unknown message: %v", err)
	}
	if _, err := e.ix.Search(t.Context(), index.SearchOptions{Query: "x", Sources: []string{"cursor"}}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("unknown source: %v", err)
	}
	list, err := e.ix.Sessions(t.Context(), index.SessionsOptions{Limit: 5})
	if err != nil || len(list) != 1 || list[0].Messages != 20 || list[0].Title != "message number 0" {
		t.Fatalf("sessions %+v %v", list, err)
	}
}

func TestExportLedgers(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "-work-proj/x.jsonl")
	write(t, p, lines(
		ccUser("x", "u1", "2026-01-01T00:00:00Z", "what is two plus two"),
		ccToolUse("x", "a1", "m1", "2026-01-01T00:00:01Z", "toolu_1", "calc", `{"expr":"2+2"}`, 2),
		ccResult("x", "u2", "2026-01-01T00:00:02Z", "toolu_1", "4"),
		ccText("x", "a2", "m2", "2026-01-01T00:00:03Z", "It is four.", 3),
	))
	e.sync("claude-code")
	var buf bytes.Buffer
	cur, err := e.ix.Export(t.Context(), &buf, index.ExportOptions{Ledger: index.LedgerEvents})
	if err != nil {
		t.Fatal(err)
	}
	recs := decode(t, buf.Bytes())
	if len(recs) != 1 || recs[0].Turn.Query != "what is two plus two" || recs[0].Turn.Response != "It is four." || recs[0].Cursor != cur {
		t.Fatalf("events %s", buf.String())
	}
	buf.Reset()
	if _, err := e.ix.Export(t.Context(), &buf, index.ExportOptions{Ledger: index.LedgerAgents}); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range decode(t, buf.Bytes()) {
		kinds[r.Type]++
	}
	if fmt.Sprint(kinds) != "map[message:3 session:1 tool_call:1 turn:1]" {
		t.Fatalf("agents ledger %v", kinds)
	}
	// From the cursor: nothing until the transcript grows, then only what is new.
	buf.Reset()
	if c, err := e.ix.Export(t.Context(), &buf, index.ExportOptions{Ledger: index.LedgerEvents, Cursor: cur}); err != nil || buf.Len() != 0 || c != cur {
		t.Fatalf("nothing new: %q %d %v", buf.String(), c, err)
	}
	appendFile(t, p, lines(
		ccUser("x", "u3", "2026-01-01T00:01:00Z", "and three plus three"),
		ccText("x", "a3", "m3", "2026-01-01T00:01:01Z", "Six.", 1),
	))
	e.sync("claude-code")
	buf.Reset()
	if _, err := e.ix.Export(t.Context(), &buf, index.ExportOptions{Ledger: index.LedgerEvents, Cursor: cur}); err != nil {
		t.Fatal(err)
	}
	recs = decode(t, buf.Bytes())
	if len(recs) != 1 || recs[0].Turn.Turn != 2 || recs[0].Turn.Response != "Six." {
		t.Fatalf("new turns %s", buf.String())
	}
	if _, err := e.ix.Export(t.Context(), &buf, index.ExportOptions{Ledger: "bogus"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("bad ledger: %v", err)
	}
}

func decode(t *testing.T, b []byte) []index.ExportRecord {
	t.Helper()
	var out []index.ExportRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var r index.ExportRecord
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestStateFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state", index.FileName)
	ix, err := index.Open(t.Context(), p, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{p: 0o600, filepath.Dir(p): 0o700 | os.ModeDir} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
	link := filepath.Join(dir, "state", "link.db")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := index.Open(t.Context(), link, index.Options{}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("a symlinked index: %v", err)
	}
	// A symlinked transcript is not followed.
	e := newEnv(t)
	secret := filepath.Join(t.TempDir(), "secret.jsonl")
	write(t, secret, lines(ccUser("z", "u1", "2026-01-01T00:00:00Z", "private zebra")))
	if err := os.MkdirAll(e.path("claude-code", "-p"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, e.path("claude-code", "-p/z.jsonl")); err != nil {
		t.Fatal(err)
	}
	e.sync("claude-code")
	if h := mustSearch(t, e.ix, index.SearchOptions{Query: "zebra"}); len(h) != 0 {
		t.Fatalf("followed a symlink: %+v", h)
	}
}

// TestRankWindow: a query matching more rows than the window ranks the newest matches only,
// and a filter that the newest matches fail widens the window until it finds its hits.
func TestRankWindow(t *testing.T) {
	dir := t.TempDir()
	ix, err := index.Open(t.Context(), filepath.Join(dir, index.FileName), index.Options{RankWindow: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	e := &env{t: t, ix: ix, home: filepath.Join(dir, "home"), roots: map[string][]string{"claude-code": {filepath.Join(dir, "cc")}}}
	// The oldest message is the best match, and its session's project is the only "old" one.
	write(t, e.path("claude-code", "-old/a.jsonl"), lines(
		strings.Replace(ccUser("a", "u0", "2026-01-01T00:00:00Z", "gecko gecko gecko"), "/work/proj", "/old", 1)))
	e.sync("claude-code")
	var ls []string
	for i := range 8 {
		ls = append(ls, ccUser("b", fmt.Sprintf("u%d", i+1), "2026-01-02T00:00:00Z", "gecko "+strings.Repeat("filler ", 20)))
	}
	write(t, e.path("claude-code", "-new/b.jsonl"), lines(ls...))
	e.sync("claude-code")
	hits := mustSearch(t, ix, index.SearchOptions{Query: "gecko"})
	var ids []string
	for _, h := range hits {
		ids = append(ids, h.MessageID)
	}
	if fmt.Sprint(ids) != "[u8 u7 u6]" { // equal scores: newest first
		t.Fatalf("window of 3: %v", ids)
	}
	if hits := mustSearch(t, ix, index.SearchOptions{Query: "gecko", Project: "/old"}); len(hits) != 1 || hits[0].MessageID != "u0" {
		t.Fatalf("a filter widens the window: %+v", hits)
	}
}
