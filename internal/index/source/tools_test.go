package source

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// toolSession is what one session of a real tool's sample holds. Every figure was counted on
// the files with jq or sqlite3 (the message and part rows, the usage fields), not taken from
// this package's output. The samples are the tools' own files, made by
// tools/history-samples/refresh.sh (the VERSION file beside each says which version, how).
type toolSession struct {
	id, project, title string
	// markers are words of the prompts refresh.sh gave, each found in the session's user text.
	markers []string
	// result is a word of a tool call's result.
	result  string
	roles   map[string]int
	turns   int
	ok, err int
	usage   Usage
	resume  string
}

var toolSamples = []struct {
	source, root string
	files        int
	sessions     []toolSession
}{
	{
		source: "opencode", root: "opencode", files: 1,
		sessions: []toolSession{
			{
				// Run, then resumed with --session (the second prompt).
				id: "ses_ddc898715ffeQIXRXphzc69Ukw", project: "/tmp/nexus-history-samples/opencode/project",
				title: "Hello from a tiny model.", markers: []string{"axolotlopencode", "okapiopencode"},
				// The glob call failed; three assistant messages (the call's step, two replies).
				roles: map[string]int{"user": 2, "assistant": 3}, turns: 2, err: 1,
				usage:  Usage{Input: 7358, Output: 52, CacheRead: 14442},
				resume: "cd /tmp/nexus-history-samples/opencode/project && opencode --session ses_ddc898715ffeQIXRXphzc69Ukw",
			},
			{
				id: "ses_ddc8903e2ffeXEOhBQ7a9mpVuc", project: "/tmp/nexus-history-samples/opencode/project",
				title: "Hello from a tiny model.", markers: []string{"axolotlopencode"},
				roles: map[string]int{"user": 1, "assistant": 2}, turns: 1, err: 1,
				usage:  Usage{Input: 49, Output: 44, CacheRead: 14438},
				resume: "cd /tmp/nexus-history-samples/opencode/project && opencode --session ses_ddc8903e2ffeXEOhBQ7a9mpVuc",
			},
		},
	},
	{
		source: "qwen-code", root: "qwen-code/projects", files: 1,
		sessions: []toolSession{{
			// Run, then resumed with --resume.
			id: "027fb8f7-fa98-4055-8e9d-1f161fb037bd", project: "/tmp/nexus-history-samples/qwen-code/project",
			markers: []string{"axolotlqwen", "okapiqwen"},
			// The model's call failed (junk arguments): Qwen Code recorded it an error.
			roles: map[string]int{"user": 2, "assistant": 3}, turns: 2, err: 1,
			usage:  Usage{Input: 52149 - 34622, Output: 62, CacheRead: 34622},
			resume: "cd /tmp/nexus-history-samples/qwen-code/project && qwen --resume 027fb8f7-fa98-4055-8e9d-1f161fb037bd",
		}},
	},
	{
		source: "gemini", root: "gemini/tmp", files: 2,
		sessions: []toolSession{
			{
				// Run, then resumed with --resume: the resumed turns go on in the first file.
				id: "7c1d7dc0-91ce-49f9-b121-2025ea0173af", project: "/tmp/nexus-history-samples/gemini/project",
				markers: []string{"axolotlgemini", "okapigemini"},
				// The <session_context> Gemini CLI injects is context, not a prompt; the message
				// holding the call is written three times (its result added, then in the
				// history set at the resume): one message; the results sent back are no message.
				roles: map[string]int{"context": 1, "user": 2, "assistant": 3}, turns: 2, err: 1,
				usage:  Usage{Input: 11064 + 11120 + 11174, Output: 34 + 7 + 7},
				resume: "cd /tmp/nexus-history-samples/gemini/project && gemini --resume 7c1d7dc0-91ce-49f9-b121-2025ea0173af",
			},
			{
				// The resume also starts a file of the same session holding only its context.
				id: "7c1d7dc0-91ce-49f9-b121-2025ea0173af", project: "/tmp/nexus-history-samples/gemini/project",
				roles:  map[string]int{"context": 1},
				resume: "cd /tmp/nexus-history-samples/gemini/project && gemini --resume 7c1d7dc0-91ce-49f9-b121-2025ea0173af",
			},
		},
	},
	{
		source: "crush", root: "crush", files: 1,
		sessions: []toolSession{
			{
				// Run, then resumed with --session.
				id: "7c4d8676-9d2b-495c-adba-c16ccf6bf39b", project: "testdata/crush",
				title: "Hello from a tiny model.", markers: []string{"axolotlcrush", "okapicrush"},
				// The todos call failed and the run ended there; tool messages are results.
				roles: map[string]int{"user": 2, "assistant": 2}, turns: 2, err: 1,
				usage:  Usage{Input: 11355, Output: 7}, // the session's own totals
				resume: "cd testdata/crush && crush --session 7c4d8676-9d2b-495c-adba-c16ccf6bf39b",
			},
			{
				id: "7743a5bd-7acb-4e90-a2ba-d955f9010f97", project: "testdata/crush",
				title: "Hello from a tiny model.", markers: []string{"axolotlcrush"},
				// bash ran pwd: its output is the project's directory.
				roles: map[string]int{"user": 1, "assistant": 2}, turns: 1, ok: 1, result: "/tmp/nexus-history-samples/crush/project",
				usage:  Usage{Input: 11346, Output: 7},
				resume: "cd testdata/crush && crush --session 7743a5bd-7acb-4e90-a2ba-d955f9010f97",
			},
		},
	},
}

// TestToolSamples reads the files the real tools wrote (OpenCode, Qwen Code, Gemini CLI,
// Crush) and checks every session's facts, messages, calls and tokens.
func TestToolSamples(t *testing.T) {
	ctx := context.Background()
	for _, tc := range toolSamples {
		t.Run(tc.source, func(t *testing.T) {
			version, err := os.ReadFile(filepath.Join("testdata", strings.Split(tc.root, "/")[0], "VERSION"))
			if err != nil || !strings.Contains(string(version), "version: ") {
				t.Fatalf("VERSION beside the sample: %q, %v", version, err)
			}
			src, ok := ByName(tc.source)
			if !ok {
				t.Fatalf("no source %q", tc.source)
			}
			files, err := src.Discover(ctx, []string{filepath.Join("testdata", tc.root)})
			if err != nil || len(files) != tc.files {
				t.Fatalf("discover: %v, %v", files, err)
			}
			var got []*Result
			for _, f := range files {
				res, err := ParseFile(ctx, src, f, 0)
				if err != nil {
					t.Fatal(err)
				}
				info, err := os.Stat(f)
				if err != nil {
					t.Fatal(err)
				}
				if res.Offset != info.Size() || res.Pending != 0 || len(res.Skipped) != 0 {
					t.Errorf("%s: offset %d pending %d skipped %v, want the whole file (%d) read", f, res.Offset, res.Pending, res.Skipped, info.Size())
				}
				got = append(got, res)
				got = append(got, res.Also...)
			}
			if len(got) != len(tc.sessions) {
				t.Fatalf("%d sessions, want %d", len(got), len(tc.sessions))
			}
			for i, w := range tc.sessions {
				checkToolSession(t, tc.source, got[i], w)
			}
		})
	}
}

func checkToolSession(t *testing.T, name string, res *Result, w toolSession) {
	t.Helper()
	s := res.Session
	if s.Source != name || s.ID != w.id || s.Project != w.project || s.Title != w.title || s.IsSubagent {
		t.Errorf("session = %+v", s)
	}
	if s.Created.IsZero() || s.Updated.Before(s.Created) {
		t.Errorf("%s: created %v updated %v", w.id, s.Created, s.Updated)
	}
	if got := roles(res); !reflect.DeepEqual(got, w.roles) {
		t.Errorf("%s: roles = %v, want %v", w.id, got, w.roles)
	}
	if got := lastTurn(res); got != w.turns {
		t.Errorf("%s: turns = %d, want %d", w.id, got, w.turns)
	}
	var ok, errs int
	for _, c := range res.ToolCalls {
		if c.Name == "" || c.ID == "" || c.MessageID == "" || c.Params == "" {
			t.Errorf("%s: tool call %+v lacks its name, id, message or parameters", w.id, c)
		}
		switch c.Status {
		case StatusOK:
			ok++
		case StatusError:
			errs++
		}
		if c.Status != StatusPending && c.Result == "" {
			t.Errorf("%s: call %s has no result", w.id, c.ID)
		}
	}
	if ok != w.ok || errs != w.err || len(res.ToolCalls) != w.ok+w.err {
		t.Errorf("%s: calls ok/error/all = %d/%d/%d, want %d/%d", w.id, ok, errs, len(res.ToolCalls), w.ok, w.err)
	}
	if res.Usage != w.usage {
		t.Errorf("%s: usage = %+v, want %+v", w.id, res.Usage, w.usage)
	}
	var user []string
	for i, m := range res.Messages {
		if m.Seq != i || m.ID == "" || m.Timestamp.IsZero() {
			t.Errorf("%s: message %d: seq %d id %q time %v", w.id, i, m.Seq, m.ID, m.Timestamp)
		}
		if m.Role == "user" {
			user = append(user, m.Text)
		}
	}
	for _, word := range w.markers {
		if !strings.Contains(strings.Join(user, "\n"), word) {
			t.Errorf("%s: no user message says %q", w.id, word)
		}
	}
	if w.result != "" && !strings.Contains(res.ToolCalls[0].Result, w.result) {
		t.Errorf("%s: the call's result %q does not say %q", w.id, res.ToolCalls[0].Result, w.result)
	}
	if got := Resume(name, s.ID, s.Project); got != w.resume {
		t.Errorf("resume = %q, want %q", got, w.resume)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestStoreReadWritesNothing: reading a tool's database leaves its directory as it was (a
// read-only SQLite connection makes -wal and -shm files beside a WAL database and leaves them),
// and a write the tool still has in its WAL (the tool running) is read.
func TestStoreReadWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), ".crush")
	db := filepath.Join(dir, "crush.db")
	copyFile(t, "testdata/crush/.crush/crush.db", db)
	res, err := ParseFile(ctx, Crush{}, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, dir); !reflect.DeepEqual(got, []string{"crush.db"}) {
		t.Fatalf("after a read the directory holds %v", got)
	}
	if n := len(res.Messages) + len(res.Also[0].Messages); n != 7 {
		t.Fatalf("%d messages", n)
	}

	// The tool's connection, open, with a new message in its WAL only.
	tool, err := sql.Open("sqlite", "file:"+db+"?_pragma=journal_mode(wal)&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tool.Close() }()
	tool.SetMaxOpenConns(1)
	if _, err := tool.ExecContext(ctx, `INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at)
		VALUES ('m-wal', '7c4d8676-9d2b-495c-adba-c16ccf6bf39b', 'user', '[{"type":"text","data":{"text":"okapi in the wal"}}]', '', 1795891290, 1795891290)`); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(db + "-wal"); err != nil {
		t.Fatalf("the tool's WAL: %v", err)
	}
	res, err = ParseFile(ctx, Crush{}, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := res.Messages[len(res.Messages)-1]
	if last.ID != "m-wal" || last.Text != "okapi in the wal" || last.Turn != 3 {
		t.Fatalf("last message %+v, want the one in the WAL", last)
	}
}

// TestCrushDefaultRoots: the data directories of the projects Crush lists.
func TestCrushDefaultRoots(t *testing.T) {
	home := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	list := `{"projects":[{"path":"/w/a","data_dir":"/w/a/.crush"},{"path":"/w/b","data_dir":"rel"}]}`
	write(filepath.Join(home, ".local", "share", "crush", "projects.json"), list)
	write(filepath.Join(home, "xdg", "crush", "projects.json"), `{"projects":[{"path":"/x","data_dir":"/x/.crush"}]}`)
	for _, tc := range []struct {
		env  map[string]string
		want []string
	}{
		{nil, []string{"/w/a/.crush"}}, // a relative data_dir names no directory
		{map[string]string{"XDG_DATA_HOME": filepath.Join(home, "xdg")}, []string{"/x/.crush"}},
		{map[string]string{"CRUSH_GLOBAL_DATA": filepath.Join(home, "none")}, nil},
	} {
		env := Env{Home: home, Getenv: func(k string) string { return tc.env[k] }}
		if got := (Crush{}).DefaultRoots(env); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("env %v: roots %v, want %v", tc.env, got, tc.want)
		}
	}
}

// TestGeminiRecords: the records a Gemini CLI recording holds besides the sample's: a rewind
// drops the messages from its id on, a summary is the title, a subagent's recording is in its
// parent's directory, and the one-document format of older versions reads the same.
func TestGeminiRecords(t *testing.T) {
	meta := `{"sessionId":"g1","projectHash":"h","startTime":"2026-01-01T00:00:00Z","lastUpdated":"2026-01-01T00:00:00Z","kind":"main"}`
	u1 := `{"id":"u1","timestamp":"2026-01-01T00:00:01Z","type":"user","content":[{"text":"first walrus"}]}`
	a1 := `{"id":"a1","timestamp":"2026-01-01T00:00:02Z","type":"gemini","content":"","model":"m","toolCalls":[{"id":"c1","name":"ls","args":{"dir":"."},"status":"success","result":[{"functionResponse":{"id":"c1","name":"ls","response":{"output":"narwhal.txt"}}}]}]}`
	u2 := `{"id":"u2","timestamp":"2026-01-01T00:00:03Z","type":"user","content":"second"}`
	a2 := `{"id":"a2","timestamp":"2026-01-01T00:00:04Z","type":"gemini","content":"reply","tokens":{"input":10,"output":2,"cached":4,"thoughts":1}}`
	dir := t.TempDir()
	chats := filepath.Join(dir, "proj", "chats")
	if err := os.MkdirAll(filepath.Join(chats, "g1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "proj", ".project_root"), []byte("/work/proj\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, data string
		msgs             []string
		calls            int
		title, parent    string
	}{
		{name: "jsonl", file: "session-x-g1.jsonl", data: string(join(meta, u1, a1, u2, a2, `{"$set":{"summary":"Listing files"}}`)),
			msgs: []string{"u1", "a1", "u2", "a2"}, calls: 1, title: "Listing files"},
		{name: "rewind", file: "session-y-g1.jsonl", data: string(join(meta, u1, a1, u2, a2, `{"$rewindTo":"u2"}`)),
			msgs: []string{"u1", "a1"}, calls: 1},
		{name: "rewind drops calls", file: "session-z-g1.jsonl", data: string(join(meta, u1, a1, `{"$rewindTo":"a1"}`)),
			msgs: []string{"u1"}},
		{name: "subagent", file: "g1/sub1.jsonl", data: string(join(strings.Replace(meta, `"main"`, `"subagent"`, 1), u1)),
			msgs: []string{"u1"}, parent: "g1"},
		{name: "one document", file: "session-old.json",
			data: "{\n" + `"sessionId":"g1","projectHash":"h","startTime":"2026-01-01T00:00:00Z","lastUpdated":"2026-01-01T00:00:04Z","messages":[` + u1 + "," + a1 + "]\n}\n",
			msgs: []string{"u1", "a1"}, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(chats, tc.file)
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := ParseFile(context.Background(), Gemini{}, path, 0)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range res.Messages {
				ids = append(ids, m.ID)
			}
			s := res.Session
			if !reflect.DeepEqual(ids, tc.msgs) || len(res.ToolCalls) != tc.calls || s.ID != "g1" && tc.parent == "" ||
				s.Title != tc.title || s.ParentSession != tc.parent || s.IsSubagent != (tc.parent != "") || s.Project != "/work/proj" {
				t.Fatalf("messages %v, %d calls, session %+v", ids, len(res.ToolCalls), s)
			}
			if tc.calls > 0 && (res.ToolCalls[0].Result != "narwhal.txt" || res.ToolCalls[0].Status != StatusOK) {
				t.Fatalf("call %+v", res.ToolCalls[0])
			}
			if len(res.Skipped) != 0 {
				t.Fatalf("skipped %v", res.Skipped)
			}
		})
	}
}

// TestQwenTitleAndParent: a title the user gave (/rename) and a subagent's parent.
func TestQwenTitleAndParent(t *testing.T) {
	base := `"sessionId":"q1","cwd":"/w","version":"0.24.4"`
	data := join(
		`{"uuid":"u1","parentUuid":null,`+base+`,"timestamp":"2026-01-01T00:00:01Z","type":"user","message":{"role":"user","parts":[{"text":"hi"}]}}`,
		`{"uuid":"s1","parentUuid":"u1",`+base+`,"timestamp":"2026-01-01T00:00:02Z","type":"system","subtype":"custom_title","systemPayload":{"customTitle":"My title","titleSource":"manual"}}`,
		`{"uuid":"s2","parentUuid":"s1",`+base+`,"timestamp":"2026-01-01T00:00:03Z","type":"system","subtype":"parent_session","systemPayload":{"parentSessionId":"p0"}}`,
		`{"uuid":"s3","parentUuid":"s2",`+base+`,"timestamp":"2026-01-01T00:00:04Z","type":"system","subtype":"brand_new_thing"}`,
	)
	res := parseBytes(t, QwenCode{}, data, 0)
	s := res.Session
	if s.ID != "q1" || s.Title != "My title" || s.ParentSession != "p0" || s.Project != "/w" || len(res.Messages) != 1 {
		t.Fatalf("session %+v, %d messages", s, len(res.Messages))
	}
	if !reflect.DeepEqual(res.Skipped, map[string]int{ReasonUnknownType + ": system/brand_new_thing": 1}) {
		t.Fatalf("skipped %v", res.Skipped)
	}
}

// TestStoreSubagents: a subagent's session in OpenCode's and Crush's databases is linked to
// its parent and to the call that ran it (the samples' tiny model never starts one: rows of the
// tools' own schema are added to copies of them).
func TestStoreSubagents(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		src     Source
		fixture string
		rows    []string
		parent  string
		child   string
		call    string
	}{
		{
			src: OpenCode{}, fixture: "opencode/opencode.db", parent: "ses_ddc898715ffeQIXRXphzc69Ukw", child: "ses_child", call: "call_task",
			rows: []string{
				`INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, time_created, time_updated)
					VALUES ('ses_child', 'global', 'ses_ddc898715ffeQIXRXphzc69Ukw', 'child', '/w', 'Child session - 2026', '1.18.33', 1795890180000, 1795890181000)`,
				`INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES ('msg_c1', 'ses_child', 1795890180000, 1795890180000, '{"role":"user"}')`,
				`INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES ('prt_c1', 'msg_c1', 'ses_child', 1795890180000, 1795890180000, '{"type":"text","text":"look for the gecko"}')`,
				`INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES ('prt_zz', 'msg_22376906800156T8oOOqjhzMhn', 'ses_ddc898715ffeQIXRXphzc69Ukw', 1795890180000, 1795890180000,
					'{"type":"tool","tool":"task","callID":"call_task","state":{"status":"completed","input":{"description":"find it","prompt":"look for the gecko"},"output":"found","metadata":{"sessionId":"ses_child"}}}')`,
			},
		},
		{
			src: Crush{}, fixture: "crush/.crush/crush.db", parent: "7c4d8676-9d2b-495c-adba-c16ccf6bf39b", child: "0f21551b-0e9f-4117-b497-fc8ceb1b427a$$call_agent", call: "call_agent",
			rows: []string{
				`INSERT INTO sessions (id, parent_session_id, title, message_count, prompt_tokens, completion_tokens, cost, updated_at, created_at)
					VALUES ('0f21551b-0e9f-4117-b497-fc8ceb1b427a$$call_agent', '7c4d8676-9d2b-495c-adba-c16ccf6bf39b', 'agent', 1, 5, 1, 0, 1795890169, 1795890169)`,
				`INSERT INTO sessions (id, parent_session_id, title, message_count, prompt_tokens, completion_tokens, cost, updated_at, created_at)
					VALUES ('title-7c4d8676-9d2b-495c-adba-c16ccf6bf39b', '7c4d8676-9d2b-495c-adba-c16ccf6bf39b', 'title', 0, 5, 1, 0, 1795890169, 1795890169)`,
				`INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at) VALUES ('c1', '0f21551b-0e9f-4117-b497-fc8ceb1b427a$$call_agent', 'user',
					'[{"type":"text","data":{"text":"look for the gecko"}}]', '', 1795890169, 1795890169)`,
				`UPDATE messages SET parts = json_insert(parts, '$[#]', json('{"type":"tool_call","data":{"id":"call_agent","name":"agent","input":"{\"prompt\":\"look for the gecko\"}","finished":true}}'))
					WHERE id = '0f21551b-0e9f-4117-b497-fc8ceb1b427a'`,
			},
		},
	} {
		t.Run(tc.src.Name(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), filepath.Base(tc.fixture))
			copyFile(t, filepath.Join("testdata", tc.fixture), path)
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range tc.rows {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			res, err := ParseFile(ctx, tc.src, path, 0)
			if err != nil {
				t.Fatal(err)
			}
			byID := map[string]*Result{}
			for _, r := range append([]*Result{res}, res.Also...) {
				byID[r.Session.ID] = r
			}
			child, parent := byID[tc.child], byID[tc.parent]
			if child == nil || parent == nil || len(byID) != 3 {
				t.Fatalf("sessions %v", func() []string {
					var ids []string
					for id := range byID {
						ids = append(ids, id)
					}
					return ids
				}())
			}
			if s := child.Session; s.ParentSession != tc.parent || !s.IsSubagent || s.Title != "" && tc.src.Name() == "opencode" {
				t.Errorf("child %+v", s)
			}
			if len(child.Messages) != 1 || !strings.Contains(child.Messages[0].Text, "gecko") {
				t.Errorf("child messages %+v", child.Messages)
			}
			linked := false
			for _, c := range parent.ToolCalls {
				linked = linked || (c.ID == tc.call && c.ChildSession == tc.child)
			}
			if !linked {
				t.Errorf("no call %s of the parent names the child: %+v", tc.call, parent.ToolCalls)
			}
		})
	}
}

// TestStoreDiscover: a database is looked for where the tool keeps it, not in the tree below
// (OpenCode's data directory holds git repositories of snapshots; a Crush root may be a whole
// project); a symlink is not followed.
func TestStoreDiscover(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"oc/opencode.db", "oc/opencode-beta.db", "oc/snapshot/x/opencode.db", "oc/opencode.db-wal",
		"proj/.crush/crush.db", "proj/sub/.crush/crush.db", "data/crush.db", "data/deep/crush.db"} {
		copyFile(t, "testdata/opencode/VERSION", filepath.Join(dir, f))
	}
	if err := os.Symlink(filepath.Join(dir, "oc", "opencode.db"), filepath.Join(dir, "proj", "opencode-link.db")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src   Source
		roots []string
		want  []string
	}{
		{OpenCode{}, []string{"oc", "proj", "missing"}, []string{"oc/opencode-beta.db", "oc/opencode.db"}},
		{Crush{}, []string{"proj", "data", "missing", "oc/opencode.db"}, []string{"data/crush.db", "proj/.crush/crush.db"}},
	} {
		var roots []string
		for _, r := range tc.roots {
			roots = append(roots, filepath.Join(dir, r))
		}
		got, err := tc.src.Discover(context.Background(), roots)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i], _ = filepath.Rel(dir, got[i])
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.src.Name(), got, tc.want)
		}
	}
}

// TestStoreNotADatabase: a file where a database is looked for that is none (garbage, or
// empty) is an error or no session, never a panic, and is not written to.
func TestStoreNotADatabase(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage", "opencode.db")
	empty := filepath.Join(dir, "empty", "crush.db")
	copyFile(t, "testdata/opencode/VERSION", garbage)
	if err := os.MkdirAll(filepath.Dir(empty), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseFile(context.Background(), OpenCode{}, garbage, 0); err == nil {
		t.Error("a file that is no database read without an error")
	}
	res, err := ParseFile(context.Background(), Crush{}, empty, 0)
	if err != nil || res.Session.ID != "" || len(res.Also) != 0 || !res.Whole {
		t.Errorf("empty database: %+v, %v", res, err)
	}
	for _, d := range []string{filepath.Dir(garbage), filepath.Dir(empty)} {
		if got := dirNames(t, d); len(got) != 1 {
			t.Errorf("%s holds %v after the read", d, got)
		}
	}
}

// TestGeminiWholeResult: a Gemini CLI tool result is kept whole, so a word deep in a long
// output is searchable (the index, not the adapter, cuts a result at its cap).
func TestGeminiWholeResult(t *testing.T) {
	long := strings.Repeat("filler ", 2000) + "deepwombat"
	meta := `{"sessionId":"g2","projectHash":"h","startTime":"2026-01-01T00:00:00Z","lastUpdated":"2026-01-01T00:00:00Z","kind":"main"}`
	u1 := `{"id":"u1","timestamp":"2026-01-01T00:00:01Z","type":"user","content":[{"text":"list"}]}`
	a1 := `{"id":"a1","timestamp":"2026-01-01T00:00:02Z","type":"gemini","content":"","model":"m","toolCalls":[{"id":"c1","name":"ls","args":{},"status":"success","result":[{"functionResponse":{"id":"c1","name":"ls","response":{"output":"` + long + `"}}}]}]}`
	dir := filepath.Join(t.TempDir(), "proj", "chats")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "session-x-g2.jsonl")
	if err := os.WriteFile(path, join(meta, u1, a1), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := ParseFile(context.Background(), Gemini{}, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ToolCalls) != 1 || !strings.Contains(res.ToolCalls[0].Result, "deepwombat") {
		t.Fatalf("the call's result lost its end: %d calls", len(res.ToolCalls))
	}
}
