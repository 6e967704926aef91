package index_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nexus-run/nexus/internal/index/source"
	"github.com/nexus-run/nexus/internal/testkit"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/index"
)

// bigResult is a Claude Code tool result line of about n bytes: many bytes to read and, cut
// (past source.LineMax) and kept as an excerpt, few to decode and write.
func bigResult(sid, uuid, id string, n int) string {
	return ccResult(sid, uuid, "2026-01-02T03:04:05Z", id, strings.Repeat("output ", n/7))
}

// TestSyncBatches: a sync that crosses the writer's batch bounds (files and bytes) commits each
// batch and goes on: every file is indexed, and the next sync finds them unchanged.
func TestSyncBatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files int
		bytes int // bytes of tool output per file
	}{
		{"exactly a batch of files", index.BatchFiles, 0},
		{"a batch of files and some", index.BatchFiles + 3, 0},
		{"one file just over the byte bound", 1, index.BatchBytes + 1<<10},
		{"three files over the byte bound together", 3, index.BatchBytes/2 + 1<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			for i := range tc.files {
				sid := fmt.Sprintf("s%04d", i)
				ls := []string{ccUser(sid, "u", "2026-01-02T03:04:05Z", fmt.Sprintf("walrus%04d question", i)),
					ccToolUse(sid, "a", "m", "2026-01-02T03:04:06Z", "toolu_1", "Bash", `{"command":"ls"}`, 3)}
				const line = 6 << 20
				for k := 0; k*line < tc.bytes; k++ {
					ls = append(ls, bigResult(sid, fmt.Sprintf("r%d", k), "toolu_1", min(line, tc.bytes-k*line)))
				}
				ls = append(ls, ccText(sid, "b", "m2", "2026-01-02T03:04:07Z", fmt.Sprintf("narwhal%04d answer", i), 4))
				write(t, e.path("claude-code", fmt.Sprintf("p/%s.jsonl", sid)), lines(ls...))
			}
			sum := e.sync("claude-code")
			if sum.New != tc.files || sum.Sessions != tc.files || sum.Messages != 3*tc.files {
				t.Fatalf("summary %+v", sum)
			}
			if tc.bytes > 0 && sum.Bytes < int64(tc.files*tc.bytes) {
				t.Fatalf("read %d bytes, want at least %d", sum.Bytes, tc.files*tc.bytes)
			}
			for _, q := range []string{"walrus0000", fmt.Sprintf("narwhal%04d", tc.files-1)} {
				if hits := mustSearch(t, e.ix, index.SearchOptions{Query: q}); len(hits) != 1 {
					t.Fatalf("%s: %d hits", q, len(hits))
				}
			}
			st, err := e.ix.Stats(t.Context())
			if err != nil || st.Sessions != tc.files || st.Messages != 3*tc.files || st.ToolCalls != tc.files || st.Files != tc.files {
				t.Fatalf("stats %+v %v", st, err)
			}
			if again := e.sync("claude-code"); again.Unchanged != tc.files || again.Bytes != 0 {
				t.Fatalf("second sync %+v", again)
			}
		})
	}
}

// badLineFormat is one adapter's transcript for the bad-line table: a file of good lines and the
// lines to break one at a time (SID stands for the session id, unique per file).
type badLineFormat struct {
	src     string
	path    func(sid string) string // the file under the source's root
	good    []string
	targets []string // each broken in turn; the last is a prompt alone in its turn
	sid     func(i int) string
}

func badLineFormats() []badLineFormat {
	const ts = `"timestamp":"2026-01-02T03:04:05.000Z"`
	pi := []string{
		`{"type":"session","version":3,"id":"SID",` + ts + `,"cwd":"/work/p"}`,
		`{"type":"message","id":"u1","parentId":null,` + ts + `,"message":{"role":"user","content":"walrus question","timestamp":1767323045000}}`,
	}
	piTargets := []string{
		`{"type":"message","id":"a1","parentId":"u1",` + ts + `,"message":{"role":"assistant","content":[{"type":"text","text":"narwhal answer"},{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}}],"model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3}}}`,
		`{"type":"message","id":"r1","parentId":"a1",` + ts + `,"message":{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"file.go"}],"isError":false}}`,
		`{"type":"message","id":"u2","parentId":"r1",` + ts + `,"message":{"role":"user","content":[{"type":"text","text":"beluga prompt"}],"timestamp":1767323046000}}`,
	}
	piPath := func(dir string) func(string) string {
		return func(sid string) string { return dir + "/2026-01-02T03-04-05_" + sid + ".jsonl" }
	}
	return []badLineFormat{
		{src: "pi", path: piPath("--work-p--"), good: pi, targets: piTargets},
		{src: "nexus", path: piPath(""), good: pi, targets: piTargets},
		{src: "openclaw", path: piPath("main/sessions"), good: pi, targets: piTargets},
		{src: "claude-code", path: func(sid string) string { return "-work-p/" + sid + ".jsonl" },
			good: []string{
				`{"type":"user","sessionId":"SID","uuid":"u1",` + ts + `,"cwd":"/work/p","message":{"role":"user","content":"walrus question"}}`,
			},
			targets: []string{
				`{"type":"assistant","sessionId":"SID","uuid":"a1",` + ts + `,"requestId":"r1","message":{"id":"m1","role":"assistant","model":"claude-x","content":[{"type":"text","text":"narwhal answer"},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":1,"output_tokens":2}}}`,
				`{"type":"user","sessionId":"SID","uuid":"r1",` + ts + `,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"file.go"}]},"toolUseResult":{"stdout":"file.go"}}`,
				`{"type":"user","sessionId":"SID","uuid":"u2",` + ts + `,"cwd":"/work/p","message":{"role":"user","content":[{"type":"text","text":"beluga prompt"}]}}`,
			}},
		{src: "codex", path: func(sid string) string { return "2026/01/02/rollout-2026-01-02T03-04-05-" + sid + ".jsonl" },
			sid: func(i int) string { return fmt.Sprintf("0e5d3c1a-1111-4222-8333-%012d", i) },
			good: []string{
				`{` + ts + `,"type":"session_meta","payload":{"id":"SID",` + ts + `,"cwd":"/work/p"}}`,
				`{` + ts + `,"type":"turn_context","payload":{"model":"gpt-x"}}`,
				`{` + ts + `,"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"walrus question"}]}}`,
			},
			targets: []string{
				`{` + ts + `,"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"narwhal answer"}]}}`,
				`{` + ts + `,"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"c1"}}`,
				`{` + ts + `,"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"file.go"}}`,
				`{` + ts + `,"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":5,"cached_input_tokens":1,"output_tokens":2,"reasoning_output_tokens":0}}}}`,
				`{` + ts + `,"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"beluga prompt"}]}}`,
			}},
	}
}

// variant is a target line with one value missing or of another type.
type variant struct {
	name string
	line string
}

// variants breaks line every way the table tries: each key of each object (at any depth)
// removed, and each value replaced by a value of every other JSON type; each array element
// removed.
func variants(t *testing.T, line string) []variant {
	t.Helper()
	var root any
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	if err := d.Decode(&root); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	others := []any{nil, json.Number("7"), true, "x", []any{}, map[string]any{}}
	var out []variant
	emit := func(name string) {
		b, err := json.Marshal(root)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, variant{name, string(b)})
	}
	// walk breaks what is inside v; set replaces v in its parent.
	var walk func(v any, set func(any), path string)
	walk = func(v any, set func(any), path string) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				old := v[k]
				delete(v, k)
				emit("no " + path + k)
				for _, o := range others {
					if fmt.Sprintf("%T", o) != fmt.Sprintf("%T", old) {
						v[k] = o
						emit(fmt.Sprintf("%s%s=%T", path, k, o))
					}
				}
				if _, ok := old.(string); ok {
					v[k] = "x" // a string, but not the one it should be
					emit(path + k + "=x")
				}
				v[k] = old
				walk(old, func(n any) { v[k] = n }, path+k+".")
			}
		case []any:
			for i := range v {
				set(append(append([]any{}, v[:i]...), v[i+1:]...))
				emit(fmt.Sprintf("no %s%d", path, i))
				set(v)
				walk(v[i], func(n any) { v[i] = n }, fmt.Sprintf("%s%d.", path, i))
			}
		}
	}
	walk(root, func(any) {}, "")
	return out
}

// texts is the set of message texts of a parse.
func texts(res *source.Result) map[string]bool {
	out := map[string]bool{}
	for _, m := range res.Messages {
		out[m.Text] = true
	}
	return out
}

// TestBadLines breaks each line of a transcript of each format every way variants knows, one
// way per file, and syncs them all with a good file: each parse keeps the other lines, never
// yields a message without a time, id or role, and counts the line it left out; the one sync
// indexes every file. A prompt without a timestamp stopped every sync (NOT NULL constraint
// failed: turns.started), the good files' included.
func TestBadLines(t *testing.T) {
	e := newEnv(t)
	// What some breaks must be counted as, by format and the broken target's index.
	want := map[string]map[string]string{
		"no timestamp":          {"*": source.ReasonNoTimestamp, "codex/3": ""}, // a token count needs no time
		"timestamp=json.Number": {"pi": source.ReasonNoTimestamp, "nexus": source.ReasonNoTimestamp, "openclaw": source.ReasonNoTimestamp, "*": source.ReasonMalformed},
		"no message.role":       {"pi": source.ReasonNoRole, "nexus": source.ReasonNoRole, "openclaw": source.ReasonNoRole},
		"no payload.role":       {"codex": source.ReasonNoRole},
		"no uuid":               {"claude-code": source.ReasonNoID},
		"no type":               {"*": source.ReasonNoType},
		"type=x":                {"*": source.ReasonUnknownType + ": x"},
		"timestamp=x":           {"*": source.ReasonNoTimestamp, "codex/3": ""},
		"message=string":        {"claude-code": source.ReasonMalformed},
		// A result answers its call by id.
		"no message.content.0.tool_use_id": {"claude-code/1": source.ReasonNoID},
		"no message.toolCallId":            {"pi/1": source.ReasonNoID, "nexus/1": source.ReasonNoID, "openclaw/1": source.ReasonNoID},
		// Codex's goals feature writes outputs that answer no call: not a bad line (and no call,
		// TestCodexOutputWithoutCall).
		"no payload.call_id": {"codex/2": ""},
	}
	files, sessions, messages, skipped := 0, 0, 0, 0
	perSource := map[string]int{}
	tried := map[string]bool{}
	for _, f := range badLineFormats() {
		s, ok := source.ByName(f.src)
		if !ok {
			t.Fatal(f.src)
		}
		for ti, target := range f.targets {
			build := func(line string) (sid string, data []byte) {
				sid = fmt.Sprintf("bad-%05d", files)
				if f.sid != nil {
					sid = f.sid(files)
				}
				files++
				ls := append(append([]string{}, f.good...), f.targets...)
				ls[len(f.good)+ti] = line
				if line == "" {
					ls = append(ls[:len(f.good)+ti], ls[len(f.good)+ti+1:]...)
				}
				return sid, []byte(strings.ReplaceAll(strings.Join(ls, "\n")+"\n", "SID", sid))
			}
			parse := func(name, line string) *source.Result {
				t.Helper()
				sid, data := build(line)
				path := e.path(f.src, f.path(sid))
				write(t, path, data)
				res, err := source.ParseFile(t.Context(), s, path, 0)
				if err != nil {
					t.Fatalf("%s target %d %s: %v", f.src, ti, name, err)
				}
				for _, m := range res.Messages {
					if m.Timestamp.IsZero() || m.ID == "" || m.Role == "" {
						t.Fatalf("%s target %d %s: message %+v", f.src, ti, name, m)
					}
				}
				sessions++
				perSource[f.src]++
				messages += len(res.Messages)
				for _, n := range res.Skipped {
					skipped += n
				}
				return res
			}
			without := texts(parse("without the target", ""))
			for _, v := range variants(t, target) {
				res := parse(v.name, v.line)
				got := texts(res)
				for txt := range without {
					if !got[txt] {
						t.Fatalf("%s target %d %s: lost %q: %+v", f.src, ti, v.name, txt, res.Messages)
					}
				}
				reasons, ok := want[v.name]
				if !ok {
					continue
				}
				tried[v.name] = true
				reason, ok := reasons[fmt.Sprintf("%s/%d", f.src, ti)]
				if !ok {
					reason, ok = reasons[f.src]
				}
				if !ok {
					reason, ok = reasons["*"]
				}
				if ok && reason != "" && res.Skipped[reason] != 1 {
					t.Fatalf("%s target %d %s: skipped %v, want 1 %q", f.src, ti, v.name, res.Skipped, reason)
				}
			}
		}
	}
	for name := range want {
		if !tried[name] {
			t.Errorf("no variant %q", name)
		}
	}
	sum, err := e.ix.Sync(t.Context(), e.opts())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range sum.Skipped {
		total += n
	}
	if len(sum.Errors) > 0 || sum.New != files || sum.Sessions != sessions || sum.Messages != messages || total != skipped {
		t.Fatalf("summary %+v; want %d files, %d sessions, %d messages, %d skipped", sum, files, sessions, messages, skipped)
	}
	st, err := e.ix.Stats(t.Context())
	if err != nil || st.Sessions != sessions || st.Messages != messages || st.Files != files {
		t.Fatalf("stats %+v %v", st, err)
	}
	for src, n := range perSource {
		if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "walrus", Sources: []string{src}, Limit: 1000}); len(hits) != n {
			t.Fatalf("%s: %d files, %d found", src, n, len(hits))
		}
	}
	t.Logf("%d broken files, %d lines skipped", files, skipped)
}

// fakeSource is an adapter whose parse is the test's: to give the writer what no real adapter
// does, or to panic.
type fakeSource struct {
	source.Source
	parse func(path string) (*source.Result, error)
}

func (f fakeSource) Parse(_ context.Context, _ io.Reader, path string, _ int64) (*source.Result, error) {
	return f.parse(path)
}

// TestTimelessMessages: a message without a time, alone in its turn, is written (its turn
// starts at 0) rather than failing the sync on turns.started.
func TestTimelessMessages(t *testing.T) {
	e := newEnv(t)
	path := e.path("claude-code", "p/s.jsonl")
	write(t, path, lines(ccUser("s", "u1", "2026-01-02T03:04:05Z", "x")))
	src := fakeSource{Source: source.ClaudeCode{}, parse: func(p string) (*source.Result, error) {
		return &source.Result{Session: source.Session{Source: "claude-code", ID: "timeless", Path: p},
			Messages: []source.Message{{ID: "u1", Role: "user", Text: "walrus without a time", Turn: 1}}, Offset: 1, Lines: 1}, nil
	}}
	sum, err := e.ix.SyncPaths(t.Context(), map[string]source.Source{path: src}, e.opts())
	if err != nil || len(sum.Errors) > 0 || sum.Messages != 1 {
		t.Fatalf("%+v %v", sum, err)
	}
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "walrus"}); len(hits) != 1 || hits[0].Timestamp != "" {
		t.Fatalf("%+v", hits)
	}
}

// TestFilePanics: a panic while one file is parsed or written fails that file alone: the
// others are indexed in the same sync, the file is reported (in the summary and in Stats) and
// skipped until it changes, and then read again from its last good offset.
func TestFilePanics(t *testing.T) {
	for _, stage := range []string{"parse", "write"} {
		t.Run(stage, func(t *testing.T) {
			e := newEnv(t)
			bad := e.path("claude-code", "p/bad.jsonl")
			write(t, bad, lines(ccUser("bad", "b1", "2026-01-02T03:04:05Z", "a walrus before")))
			e.sync()
			for i := range 3 {
				write(t, e.path("claude-code", fmt.Sprintf("p/good%d.jsonl", i)),
					lines(ccUser(fmt.Sprintf("good%d", i), "u1", "2026-01-02T03:04:05Z", "a narwhal")))
			}
			appendFile(t, bad, lines(ccUser("bad", "b2", "2026-01-02T03:04:06Z", "a beluga after")))
			var mu sync.Mutex
			calls := 0
			index.SetTestHook(e.ix, func(s, path string) {
				if s == stage && path == bad {
					mu.Lock()
					calls++
					mu.Unlock()
					panic("boom")
				}
			})
			sum, err := e.ix.Sync(t.Context(), e.opts())
			if err != nil {
				t.Fatal(err)
			}
			if sum.New != 3 || len(sum.Errors) != 1 || sum.Errors[0].Path != bad || !strings.HasPrefix(sum.Errors[0].Error, "panic: boom at ") {
				t.Fatalf("summary %+v", sum)
			}
			if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "narwhal OR walrus"}); len(hits) != 4 {
				t.Fatalf("the other files and the failed one's earlier lines: %d hits", len(hits))
			}
			if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "beluga"}); len(hits) != 0 {
				t.Fatalf("the failed read wrote: %+v", hits)
			}
			st, err := e.ix.Stats(t.Context())
			if err != nil || len(st.FailedFiles) != 1 || st.FailedFiles[0].Path != bad || st.FailedFiles[0].Source != "claude-code" ||
				!strings.HasPrefix(st.FailedFiles[0].Error, "panic: boom at ") {
				t.Fatalf("stats %+v %v", st, err)
			}

			// Unchanged, the file is not read again.
			if again := e.sync(); again.Unchanged != 4 || calls != 1 {
				t.Fatalf("second sync %+v, %d reads of the failed file", again, calls)
			}
			// Changed, it is read from where its last good read stopped.
			index.SetTestHook(e.ix, nil)
			appendFile(t, bad, lines(ccUser("bad", "b3", "2026-01-02T03:04:07Z", "a beluga again")))
			if again := e.sync(); again.Appended != 1 || again.Messages != 2 {
				t.Fatalf("after the change %+v", again)
			}
			if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "beluga"}); len(hits) != 2 {
				t.Fatalf("after the change: %d hits", len(hits))
			}
			if st, err := e.ix.Stats(t.Context()); err != nil || len(st.FailedFiles) != 0 {
				t.Fatalf("stats after the change %+v %v", st, err)
			}
		})
	}
}

// TestSyncPanic: a panic outside any one file (here the progress callback's) fails the sync,
// not the process; the batch it had open is rolled back and the index stays usable.
func TestSyncPanic(t *testing.T) {
	e := newEnv(t)
	write(t, e.path("claude-code", "p/a.jsonl"), lines(ccUser("a", "u1", "2026-01-02T03:04:05Z", "a walrus")))
	o := e.opts()
	o.Progress = func(index.Progress) { panic("progress") }
	if _, err := e.ix.Sync(t.Context(), o); err == nil || !strings.Contains(err.Error(), "panic: progress") {
		t.Fatalf("sync: %v", err)
	}
	if sum := e.sync(); sum.New != 1 {
		t.Fatalf("the next sync %+v", sum)
	}
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "walrus"}); len(hits) != 1 {
		t.Fatalf("%d hits", len(hits))
	}
}

// TestWatchSurvivesPanic: a transcript whose read panics while the watcher follows it is
// reported in the sync's summary and in Stats, and the watch goes on with the other files.
func TestWatchSurvivesPanic(t *testing.T) {
	e := newEnv(t)
	dir := e.path("claude-code", "-work-p")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	index.SetTestHook(e.ix, func(_, path string) {
		if path == bad {
			panic("boom")
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var reported []index.FileError
	var errs []error
	done := make(chan error, 1)
	go func() {
		done <- e.ix.Watch(ctx, index.WatchOptions{SyncOptions: e.opts("claude-code"), OnSync: func(sum *index.Summary, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if sum != nil {
				reported = append(reported, sum.Errors...)
			}
		}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
		if len(errs) > 0 {
			t.Errorf("sync errors: %v", errs)
		}
	}()
	found := func(q string) func() bool {
		return func() bool {
			hits, err := e.ix.Search(t.Context(), index.SearchOptions{Query: q})
			return err == nil && len(hits) == 1
		}
	}
	write(t, bad, lines(ccUser("bad", "u1", "2026-01-01T00:00:00Z", "a walrus")))
	testkit.Eventually(t, "the failed file reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reported) > 0 && reported[0].Path == bad && strings.HasPrefix(reported[0].Error, "panic: boom")
	})
	write(t, filepath.Join(dir, "good.jsonl"), lines(ccUser("good", "u1", "2026-01-01T00:00:00Z", "a narwhal")))
	testkit.Eventually(t, "a file written after it indexed", found("narwhal"))
	st, err := e.ix.Stats(t.Context())
	if err != nil || len(st.FailedFiles) != 1 || st.FailedFiles[0].Path != bad {
		t.Fatalf("stats %+v %v", st, err)
	}
}

// TestUpgradeFromVersion3: an index of version 3 gains the columns of version 4 and keeps what
// it holds, the sessions whose files are gone included (reading the transcripts again would
// lose them).
func TestUpgradeFromVersion3(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "p/a.jsonl")
	write(t, p, lines(ccUser("a", "u1", "2026-01-02T03:04:05Z", "a walrus")))
	e.sync()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	e.sync()
	dbPath := e.ix.Path()
	if err := e.ix.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP INDEX sessions_tool_call", "DROP INDEX tool_calls_spawn", "ALTER TABLE tool_calls DROP COLUMN result_bytes",
		"ALTER TABLE tool_calls DROP COLUMN result_cut", "ALTER TABLE files DROP COLUMN error", "ALTER TABLE files DROP COLUMN cut", "PRAGMA user_version = 3"} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ix, err := index.Open(t.Context(), dbPath, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ix.Close() }()
	if hits := mustSearch(t, ix, index.SearchOptions{Query: "walrus"}); len(hits) != 1 || !hits[0].Deleted {
		t.Fatalf("after the upgrade: %+v", hits)
	}
	bad := e.path("claude-code", "p/b.jsonl")
	write(t, bad, lines(ccUser("b", "u1", "2026-01-02T03:04:05Z", "a narwhal")))
	index.SetTestHook(ix, func(_, path string) {
		if path == bad {
			panic("boom")
		}
	})
	if _, err := ix.Sync(t.Context(), e.opts()); err != nil {
		t.Fatal(err)
	}
	if st, err := ix.Stats(t.Context()); err != nil || len(st.FailedFiles) != 1 || st.Deleted != 1 {
		t.Fatalf("stats %+v %v", st, err)
	}
}

// TestSkippedAddsUp: the lines skipped in an appended part add to those of the file's earlier
// reads; a read from the start counts them again.
func TestSkippedAddsUp(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "p/a.jsonl")
	write(t, p, lines(ccUser("a", "u1", "2026-01-02T03:04:05Z", "a walrus"), "not json"))
	e.sync()
	appendFile(t, p, lines("still not json", `{"type":"user","uuid":"u2","message":{"role":"user","content":"no time"}}`))
	e.sync()
	want := map[string]int{"claude-code: " + source.ReasonMalformed: 2, "claude-code: " + source.ReasonNoTimestamp: 1}
	if st, err := e.ix.Stats(t.Context()); err != nil || fmt.Sprint(st.SkippedLines) != fmt.Sprint(want) {
		t.Fatalf("stats %+v %v, want %v", st.SkippedLines, err, want)
	}
	write(t, p, lines(ccUser("a", "u1", "2026-01-02T03:04:05Z", "a walrus"), "not json"))
	e.sync()
	want = map[string]int{"claude-code: " + source.ReasonMalformed: 1}
	if st, err := e.ix.Stats(t.Context()); err != nil || fmt.Sprint(st.SkippedLines) != fmt.Sprint(want) {
		t.Fatalf("stats after a rewrite %+v %v, want %v", st.SkippedLines, err, want)
	}
}

// TestHugeLine: a transcript with a 200 MB line (a tool's output on one line) and a line of
// 17 MB that is no JSON at all is synced in bounded memory: the long text is cut and counted,
// the junk skipped as oversized, the lines around them indexed. (The whole line was read, then
// decoded, redacted and written: 1.6 GB for 200 MB, and the sync panicked past 16 MiB.) The
// memory is measured apart (docs/history.md), not asserted here.
func TestHugeLine(t *testing.T) {
	e := newEnv(t)
	p := e.path("claude-code", "p/huge.jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	put := func(s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	put(ccUser("h", "u1", "2026-01-02T03:04:05Z", "a walrus before") + "\n")
	put(`{"type":"assistant","sessionId":"h","uuid":"a1","timestamp":"2026-01-02T03:04:06Z","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"`)
	chunk := strings.Repeat("narwhal output ", 1<<16)
	for range (200 << 20) / len(chunk) {
		put(chunk)
	}
	put(`"}]}}` + "\n")
	junk := strings.Repeat("junk ", 1<<16)
	for range (17 << 20) / len(junk) {
		put(junk)
	}
	put("\n" + ccUser("h", "u2", "2026-01-02T03:04:07Z", "a beluga after") + "\n")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sum := e.sync()
	if sum.Messages != 3 || sum.Cut != 1 || fmt.Sprint(sum.Skipped) != fmt.Sprint(map[string]int{"claude-code: " + source.ReasonOversized: 1}) {
		t.Fatalf("summary %+v", sum)
	}
	// (Not a search for narwhal: FTS5's snippet of a text with 70,000 matches takes most of a
	// minute.)
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "walrus OR beluga"}); len(hits) != 2 {
		t.Fatalf("%d hits", len(hits))
	}
	d := show(t, e.ix, "h")
	if len(d.Messages) != 3 || len(d.Messages[1].Text) > source.TextMax || len(d.Messages[1].Text) < source.TextMax-len("narwhal output ") ||
		!strings.HasPrefix(d.Messages[1].Text, "narwhal output narwhal") {
		t.Fatalf("%d messages", len(d.Messages))
	}
	if st, err := e.ix.Stats(t.Context()); err != nil || st.CutLines != 1 {
		t.Fatalf("stats %+v %v", st, err)
	}
	if again := e.sync(); again.Unchanged != 1 {
		t.Fatalf("second sync %+v", again)
	}
}

// syncedSessions is every session of e's index with all its messages, as JSON, the temporary
// home written $HOME.
func syncedSessions(t *testing.T, e *env) map[string]string {
	ix := e.ix
	t.Helper()
	list, err := ix.Sessions(t.Context(), index.SessionsOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list {
		d, err := ix.Show(t.Context(), index.ShowOptions{Session: s.ID, Source: s.Source})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.MarshalIndent(d, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		out[s.Source+"/"+s.ID] = strings.ReplaceAll(string(b), e.home, "$HOME")
	}
	return out
}

// TestPieces: a file read a piece at a time (a line at a time, here) indexes what it does read
// whole, for the repository's real transcripts of every format; and a sync stopped between two
// pieces of a file, after a batch with the first was committed, leaves the file to be read on
// from there by the next one.
func TestPieces(t *testing.T) {
	const testdata = "../../testdata/transcripts"
	sources := []string{"claude-code", "codex", "openclaw", "pi"}
	synced := func(piece int64) (*env, map[string]string) {
		e := newEnv(t)
		for _, src := range sources {
			e.roots[src] = []string{filepath.Join(testdata, src)}
		}
		index.SetPieceBytes(e.ix, piece)
		e.sync(sources...)
		return e, syncedSessions(t, e)
	}
	_, whole := synced(1 << 30)
	e, pieces := synced(1)
	for k, w := range whole {
		if pieces[k] != w {
			t.Errorf("%s read in pieces:\n%s\nwhole:\n%s", k, pieces[k], w)
		}
	}
	if len(pieces) != len(whole) {
		t.Errorf("%d sessions in pieces, %d whole", len(pieces), len(whole))
	}
	if again := e.sync(sources...); again.Unchanged != again.Files || again.Bytes != 0 {
		t.Fatalf("after the pieces %+v", again)
	}
}

// TestPiecesResume: a sync stopped between two pieces of a file, after a batch holding the
// first ones was committed, leaves the file to be read on from there: the next sync appends the
// rest, and the index holds what a whole read gives.
func TestPiecesResume(t *testing.T) {
	const file = "../../testdata/transcripts/pi/pi-mono-large-session-v1.jsonl" // 1019 lines
	setup := func() *env {
		e := newEnv(t)
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		write(t, e.path("pi", "--w--/2025-11-01T00-00-00_large.jsonl"), data)
		return e
	}
	whole := setup()
	whole.sync("pi")
	want := syncedSessions(t, whole)

	e := setup()
	index.SetPieceBytes(e.ix, 1) // a line a piece: a batch (index.BatchFiles pieces) is committed after line 512
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	parses := 0
	index.SetTestHook(e.ix, func(stage, _ string) {
		if stage == "parse" {
			if parses++; parses == index.BatchFiles+100 {
				cancel()
			}
		}
	})
	o := e.opts("pi")
	o.Workers = 2 // so the writer is at most a few pieces behind the parse that stops it
	if _, err := e.ix.Sync(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped sync: %v", err)
	}
	index.SetTestHook(e.ix, nil)
	st, err := e.ix.Stats(t.Context())
	if err != nil || st.Messages == 0 {
		t.Fatalf("the first batch was not kept: %+v %v", st, err)
	}
	if sum := e.sync("pi"); sum.Appended != 1 || sum.Messages == 0 {
		t.Fatalf("the next sync %+v", sum)
	}
	got := syncedSessions(t, e)
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s resumed:\n%s\nwhole:\n%s", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d sessions resumed, %d whole", len(got), len(want))
	}
}

// TestPiecePanic: a file whose second piece fails to be written is recorded failed after its
// first piece: its later pieces are not written in that sync, and once it changes it is read on
// from the first piece's end.
func TestPiecePanic(t *testing.T) {
	e := newEnv(t)
	index.SetPieceBytes(e.ix, 1) // a line a piece
	p := e.path("claude-code", "p/a.jsonl")
	write(t, p, lines(ccUser("a", "u1", "2026-01-02T03:04:05Z", "a walrus"), ccUser("a", "u2", "2026-01-02T03:04:06Z", "a narwhal"),
		ccUser("a", "u3", "2026-01-02T03:04:07Z", "a beluga")))
	writes := 0
	index.SetTestHook(e.ix, func(stage, _ string) {
		if stage == "write" {
			if writes++; writes == 2 {
				panic("boom")
			}
		}
	})
	sum, err := e.ix.Sync(t.Context(), e.opts())
	if err != nil || len(sum.Errors) != 1 || sum.Messages != 1 {
		t.Fatalf("%+v %v", sum, err)
	}
	for q, n := range map[string]int{"walrus": 1, "narwhal": 0, "beluga": 0} {
		if hits := mustSearch(t, e.ix, index.SearchOptions{Query: q}); len(hits) != n {
			t.Fatalf("%s: %d hits", q, len(hits))
		}
	}
	index.SetTestHook(e.ix, nil)
	appendFile(t, p, lines(ccUser("a", "u4", "2026-01-02T03:04:08Z", "an orca")))
	if sum := e.sync(); sum.Appended != 1 || sum.Messages != 3 {
		t.Fatalf("after the change %+v", sum)
	}
	if hits := mustSearch(t, e.ix, index.SearchOptions{Query: "walrus OR narwhal OR beluga OR orca"}); len(hits) != 4 {
		t.Fatalf("%d hits", len(hits))
	}
	if st, err := e.ix.Stats(t.Context()); err != nil || st.Messages != 4 || len(st.FailedFiles) != 0 {
		t.Fatalf("stats %+v %v", st, err)
	}
}

// TestUpgradeFromVersion4: an index of version 4 (4 KiB of each tool result, titles from
// injected text) reads again the transcripts still there, whole, and keeps the sessions whose
// files are gone.
func TestUpgradeFromVersion4(t *testing.T) {
	e := newEnv(t)
	gone := e.path("claude-code", "p/a.jsonl")
	write(t, gone, lines(ccUser("a", "u1", "2026-01-02T03:04:05Z", "a walrus")))
	kept := e.path("claude-code", "p/b.jsonl")
	write(t, kept, lines(ccUser("b", "u1", "2026-01-02T03:04:05Z", "a narwhal")))
	e.sync()
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	e.sync()
	dbPath := e.ix.Path()
	if err := e.ix.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dbPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP INDEX sessions_tool_call", "DROP INDEX tool_calls_spawn", "ALTER TABLE tool_calls DROP COLUMN result_bytes",
		"ALTER TABLE tool_calls DROP COLUMN result_cut", "PRAGMA user_version = 4"} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ix, err := index.Open(t.Context(), dbPath, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ix.Close() }()
	sum, err := ix.Sync(t.Context(), e.opts())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rewritten != 1 || sum.Unchanged != 0 {
		t.Fatalf("after the upgrade %+v", sum)
	}
	for _, w := range []struct {
		q       string
		deleted bool
	}{{"walrus", true}, {"narwhal", false}} {
		if hits := mustSearch(t, ix, index.SearchOptions{Query: w.q}); len(hits) != 1 || hits[0].Deleted != w.deleted || hits[0].Title == "" {
			t.Fatalf("%s after the upgrade: %+v", w.q, hits)
		}
	}
}
