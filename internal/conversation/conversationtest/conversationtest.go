// Package conversationtest is the contract of conversation.API as a test suite: every
// implementation (the local conversation.Service, the gateway's client over a real gateway
// handler) runs Run, so they cannot drift apart. The suite checks results against the files
// and against transcript's own reading of them, and the ABI code of every refusal.
package conversationtest

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/transcript"
)

//go:embed testdata/*.jsonl
var testdata embed.FS

// Factory returns the implementation under test over the sessions directory opts.Dir, with
// opts.Now as its clock (an implementation that talks to a server gives them to the server's
// Service). It is called once per subtest, with a fresh directory.
type Factory func(t *testing.T, opts conversation.Options) conversation.API

// Run runs the contract suite against the implementations newAPI makes.
func Run(t *testing.T, newAPI Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"Import", testImport},
		{"ImportBody", testImportBody},
		{"Refs", testRefs},
		{"List", testList},
		{"Show", testShow},
		{"History", testHistory},
		{"HistoryLarge", testHistoryLarge},
		{"Tree", testTree},
		{"LabelName", testLabelName},
		{"Fork", testFork},
		{"Compact", testCompact},
		{"ResetArchive", testResetArchive},
		{"Resolve", testResolve},
		{"Export", testExport},
		{"Recover", testRecover},
		{"ConcurrentWriters", testConcurrentWriters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := &env{dir: filepath.Join(t.TempDir(), "sessions"), src: t.TempDir(), clock: &clock{now: time.Date(2026, 5, 1, 3, 30, 0, 0, time.Local)}}
			e.api = newAPI(t, conversation.Options{Dir: e.dir, Now: e.clock.Now})
			tc.fn(t, e)
		})
	}
}

// env is one subtest's world: the sessions directory, a directory of source files and the clock.
type env struct {
	api   conversation.API
	dir   string
	src   string
	clock *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	return t.Context()
}

// fixture writes a transcript of testdata into the source directory and returns its path.
func (e *env) fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := testdata.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return e.write(t, name, b)
}

func (e *env) write(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(e.src, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// imported imports a fixture under key and returns the result.
func (e *env) imported(t *testing.T, name, key string) *conversation.ImportResult {
	t.Helper()
	r, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: e.fixture(t, name), Key: key})
	if err != nil {
		t.Fatalf("import %s: %v", name, err)
	}
	return r
}

// wantCode fails unless err carries code.
func wantCode(t *testing.T, err error, code abi.Code, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	if got := abi.CodeOf(err); got != code {
		t.Fatalf("%s: %v (code %s), want %s", what, err, got, code)
	}
}

// wantMessage fails unless err's text holds sub.
func wantMessage(t *testing.T, err error, sub, what string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		t.Fatalf("%s: error %v, want one saying %q", what, err, sub)
	}
}

// historyOf reads a whole history, copying the messages.
func historyOf(t *testing.T, api conversation.Reader, name string, opts conversation.HistoryOptions) (conversation.HistoryHeader, []string) {
	t.Helper()
	h, err := api.History(ctx(t), name, opts)
	if err != nil {
		t.Fatalf("history %s %+v: %v", name, opts, err)
	}
	defer func() {
		if err := h.Close(); err != nil {
			t.Errorf("close history: %v", err)
		}
	}()
	var msgs []string
	for m, err := range h.Messages {
		if err != nil {
			t.Fatalf("history %s: %v", name, err)
		}
		msgs = append(msgs, string(m))
	}
	return h.Header, msgs
}

// contextOf is transcript's own context of the file at path: the reference a history must equal.
func contextOf(t *testing.T, path, leaf string) (*transcript.Context, []string) {
	t.Helper()
	f, err := transcript.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	c, err := f.BuildContext(leaf)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]string, len(c.Messages))
	for i, m := range c.Messages {
		msgs[i] = string(m)
	}
	return c, msgs
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // a path the contract suite itself built under its temporary directory
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testImport(t *testing.T, e *env) {
	src := e.fixture(t, "branching.jsonl")
	r, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != "agent:main:import:branch-uuid" || r.SessionID != "branch-uuid" || !r.Copied || r.Migrated || r.Source != src ||
		r.File != filepath.Join(e.dir, "branch-uuid.jsonl") || r.Entry.Model != "m" || r.Entry.ModelProvider != "x" {
		t.Fatalf("import: %+v", r)
	}
	// v3 files are copied byte for byte; the source is only read.
	if !bytes.Equal(readFile(t, r.File), readFile(t, src)) {
		t.Fatal("the copy differs from the source")
	}
	again, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: src})
	if err != nil || again.Copied || again.Key != r.Key {
		t.Fatalf("import again: %+v, %v", again, err)
	}
	// The same header id with other entries is another transcript.
	changed := e.write(t, "changed.jsonl", bytes.Replace(readFile(t, src), []byte("common prompt"), []byte("other prompt"), 1))
	_, err = e.api.Import(ctx(t), conversation.ImportRequest{Source: changed})
	wantCode(t, err, abi.CodeInvalidArgument, "a different transcript with the same id")
	wantMessage(t, err, "a different transcript with session id branch-uuid", "a different transcript with the same id")
	if !bytes.Equal(readFile(t, r.File), readFile(t, src)) {
		t.Fatal("a refused import changed the store's copy")
	}
	// Under an explicit key taken by the same session: refused, it is already a chat.
	_, err = e.api.Import(ctx(t), conversation.ImportRequest{Source: src, Key: "agent:main:elsewhere"})
	wantCode(t, err, abi.CodeInvalidArgument, "import under a second key")

	// v1 is migrated to v3 on import; the context stays the source's.
	v1 := e.fixture(t, "v1.jsonl")
	m, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: v1, Key: "agent:main:telegram:dm:42"})
	if err != nil || !m.Migrated || m.Key != "agent:main:telegram:dm:42" || m.Entry.ChatType != "direct" {
		t.Fatalf("import v1: %+v, %v", m, err)
	}
	if !bytes.Contains(readFile(t, m.File), []byte(`"version":3`)) {
		t.Fatal("the v1 copy is not v3")
	}
	_, want := contextOf(t, v1, "")
	if _, got := historyOf(t, e.api, m.Key, conversation.HistoryOptions{}); !slices.Equal(got, want) {
		t.Fatalf("migrated history %q, want %q", got, want)
	}
	if _, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: v1}); err != nil {
		t.Fatalf("import v1 again: %v", err)
	}

	for _, tc := range []struct {
		name, file, key, says string
	}{
		{"harness header", "harness.jsonl", "", "harness header"},
		{"id leaving the directory", "evil-id.jsonl", "", "cannot name a transcript file"},
		{"malformed key", "pending.jsonl", "not a key", ""},
		{"key of another chat", "pending.jsonl", "agent:main:telegram:dm:42", "already names another chat"},
	} {
		_, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: e.fixture(t, tc.file), Key: tc.key})
		wantCode(t, err, abi.CodeInvalidArgument, tc.name)
		if tc.says != "" {
			wantMessage(t, err, tc.says, tc.name)
		}
	}
	_, err = e.api.Import(ctx(t), conversation.ImportRequest{Source: filepath.Join(e.src, "missing.jsonl")})
	wantCode(t, err, abi.CodeInvalidArgument, "missing source")
	wantMessage(t, err, "no transcript at", "missing source")
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.dir), "evil.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an import wrote outside the sessions directory: %v", err)
	}
	// Nothing temporary is left behind by the imports, good or refused.
	names, _ := filepath.Glob(filepath.Join(e.dir, ".import-*"))
	if len(names) > 0 {
		t.Fatalf("temporary files left: %v", names)
	}
}

func testImportBody(t *testing.T, e *env) {
	b, err := testdata.ReadFile("testdata/v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: "upload.jsonl", Body: bytes.NewReader(b)})
	if err != nil || r.Key != "agent:main:import:v1-uuid" || !r.Copied || !r.Migrated || r.Source != "upload.jsonl" {
		t.Fatalf("import a body: %+v, %v", r, err)
	}
	// The same transcript again as a file: nothing to do.
	again, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: e.fixture(t, "v1.jsonl")})
	if err != nil || again.Copied || again.Key != r.Key {
		t.Fatalf("import the file after the body: %+v, %v", again, err)
	}
	_, err = e.api.Import(ctx(t), conversation.ImportRequest{Source: "codex.jsonl", Body: strings.NewReader(`{"timestamp":"2026-06-19T12:32:38.000Z","type":"session_meta","payload":{"id":"x"}}` + "\n")})
	wantCode(t, err, abi.CodeInvalidArgument, "a body that is not a pi transcript")
	wantMessage(t, err, "not a pi transcript", "a body that is not a pi transcript")
	_, err = e.api.Import(ctx(t), conversation.ImportRequest{Source: "empty", Body: strings.NewReader("")})
	wantCode(t, err, abi.CodeInvalidArgument, "an empty body")
	names, _ := filepath.Glob(filepath.Join(e.dir, ".import-*"))
	if len(names) > 0 {
		t.Fatalf("temporary files left: %v", names)
	}
}

// writeStore writes sessions.json as an upstream writer would, before the API touches it.
func (e *env) writeStore(t *testing.T, entries map[string]map[string]any) {
	t.Helper()
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, chatstore.FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testRefs names chats every way a caller can: keys with ':', session ids, and labels and
// upstream keys made of characters a URL path treats specially.
func testRefs(t *testing.T, e *env) {
	// (A label of "/" alone is not here: an HTTP path cannot carry it; see docs/ABI.md.)
	odd := []string{"a/b", "..", ".", "../../etc/passwd", "%2F", "x?y#z", "with space", "ünï", "a%b", "//", "/a", "a/", "..%2F"}
	entries := map[string]map[string]any{}
	for i, l := range odd {
		entries[fmt.Sprintf("agent:main:odd:%d", i)] = map[string]any{"sessionId": fmt.Sprintf("odd-%d", i), "updatedAt": 1768996800000 + i, "label": l}
	}
	// An upstream key nexus would not write, reachable as written.
	entries["Weird Key/../x"] = map[string]any{"sessionId": "weird", "updatedAt": 1768996800000}
	e.writeStore(t, entries)
	const key = "agent:main:telegram:dm:42"
	r := e.imported(t, "branching.jsonl", key)
	for _, ref := range []string{key, "AGENT:main:telegram:dm:42", r.SessionID} {
		s, err := e.api.Show(ctx(t), ref)
		if err != nil || s.Key != key {
			t.Fatalf("show %q: %+v, %v", ref, s, err)
		}
		if _, msgs := historyOf(t, e.api, ref, conversation.HistoryOptions{Count: true}); len(msgs) != 0 {
			t.Fatalf("history --count of %q carried messages", ref)
		}
	}
	for i, l := range odd {
		s, err := e.api.Show(ctx(t), l)
		if err != nil || s.Key != fmt.Sprintf("agent:main:odd:%d", i) || s.Header != nil {
			t.Fatalf("show label %q: %+v, %v", l, s, err)
		}
	}
	s, err := e.api.Show(ctx(t), "Weird Key/../x")
	if err != nil || s.Key != "Weird Key/../x" {
		t.Fatalf("show an upstream key: %+v, %v", s, err)
	}
	for _, ref := range []string{"agent:main:nobody", "no-such-session-id", "../x", "...", "%252F"} {
		_, err := e.api.Show(ctx(t), ref)
		wantCode(t, err, abi.CodeSessionNotFound, "show "+ref)
		_, err = e.api.History(ctx(t), ref, conversation.HistoryOptions{})
		wantCode(t, err, abi.CodeSessionNotFound, "history "+ref)
		_, err = e.api.Tree(ctx(t), ref)
		wantCode(t, err, abi.CodeSessionNotFound, "tree "+ref)
		_, err = e.api.Label(ctx(t), ref, conversation.LabelRequest{EntryID: "u1", Label: "x"})
		wantCode(t, err, abi.CodeSessionNotFound, "label "+ref)
	}
	_, err = e.api.Show(ctx(t), "")
	wantCode(t, err, abi.CodeInvalidArgument, "show of an empty name")
	_, err = e.api.Reset(ctx(t), "")
	wantCode(t, err, abi.CodeInvalidArgument, "reset of an empty name")
}

func testList(t *testing.T, e *env) {
	e.writeStore(t, map[string]map[string]any{
		"agent:main:main": {"sessionId": "old-upstream-session", "updatedAt": 1768996800000, "label": "ops-desk", "displayName": "Ops desk",
			"lastChannel": "discord", "skillsSnapshot": map[string]any{"version": 7}},
	})
	e.imported(t, "branching.jsonl", "agent:ops:slack:channel:c1")
	e.clock.Add(time.Minute)
	e.imported(t, "v1.jsonl", "agent:main:telegram:dm:42")
	items, err := e.api.List(ctx(t), conversation.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(items []chatstore.Item) []string {
		var out []string
		for _, it := range items {
			out = append(out, it.Key)
		}
		return out
	}
	if got, want := keys(items), []string{"agent:main:telegram:dm:42", "agent:ops:slack:channel:c1", "agent:main:main"}; !slices.Equal(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	// Fields nexus does not know are kept.
	if string(items[2].Entry.Extra["skillsSnapshot"]) != `{"version":7}` {
		t.Fatalf("unknown field lost: %+v", items[2].Entry.Extra)
	}
	for _, tc := range []struct {
		opts conversation.ListOptions
		want []string
	}{
		{conversation.ListOptions{Agent: "OPS"}, []string{"agent:ops:slack:channel:c1"}},
		{conversation.ListOptions{Channel: "discord"}, []string{"agent:main:main"}},
		{conversation.ListOptions{Channel: "telegram"}, []string{"agent:main:telegram:dm:42"}},
		{conversation.ListOptions{Label: "ops-desk"}, []string{"agent:main:main"}},
		{conversation.ListOptions{Label: "ops"}, nil},
		{conversation.ListOptions{Search: "SLACK"}, []string{"agent:ops:slack:channel:c1"}},
		{conversation.ListOptions{Limit: 2}, []string{"agent:main:telegram:dm:42", "agent:ops:slack:channel:c1"}},
		{conversation.ListOptions{Since: e.clock.Now().Add(-30 * time.Second)}, []string{"agent:main:telegram:dm:42"}},
	} {
		items, err := e.api.List(ctx(t), tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if items == nil || !slices.Equal(keys(items), tc.want) {
			t.Errorf("list %+v: %v (nil %v), want %v", tc.opts, keys(items), items == nil, tc.want)
		}
	}
	_, err = e.api.List(ctx(t), conversation.ListOptions{Limit: -1})
	wantCode(t, err, abi.CodeInvalidArgument, "negative limit")
}

func testShow(t *testing.T, e *env) {
	r := e.imported(t, "full_format.jsonl", "agent:main:full")
	s, err := e.api.Show(ctx(t), r.Key)
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats
	if s.Key != r.Key || s.Entry == nil || s.Entry.SessionID != "full-format-uuid" || s.File != r.File || s.Header == nil ||
		s.Header.ParentSession != "/orig/session.jsonl" || st.Entries != 19 || st.ToolCalls != 1 || st.Compactions != 1 ||
		st.Labels["u1"] != "checkpoint-1" || st.Name != "My test session" || st.ThinkingLevel != "high" || st.Tokens.Input != 600 ||
		st.ContextTokens != 330 || st.FileSize != 4480 || st.Notes == nil || s.Turns == nil || s.Runs == nil {
		b, _ := json.Marshal(s)
		t.Fatalf("show: %s", b)
	}
	// Local and remote answers encode the same: a round trip through JSON changes nothing.
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back conversation.Show
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if b2, _ := json.Marshal(back); !bytes.Equal(b, b2) {
		t.Fatalf("show does not survive JSON:\n%s\n%s", b, b2)
	}
	// A chat whose first message has not arrived has no transcript yet.
	res, err := e.api.Resolve(ctx(t), "agent:main:main", conversation.ResolveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s, err = e.api.Show(ctx(t), "agent:main:main")
	if err != nil || s.Header != nil || s.Stats != nil || s.Entry == nil || s.Entry.SessionID != res.Entry.SessionID || s.Turns == nil || s.Runs == nil {
		t.Fatalf("show without transcript: %+v, %v", s, err)
	}
}

func testHistory(t *testing.T, e *env) {
	r := e.imported(t, "full_format.jsonl", "agent:main:full")
	b := e.imported(t, "branching.jsonl", "agent:main:branching")
	files := map[string]string{r.Key: r.File, b.Key: b.File}
	for _, tc := range []struct {
		key, branch string
	}{{r.Key, ""}, {b.Key, ""}, {b.Key, "u2left"}, {b.Key, "a1"}} {
		c, want := contextOf(t, files[tc.key], tc.branch)
		h, got := historyOf(t, e.api, tc.key, conversation.HistoryOptions{Branch: tc.branch})
		if !slices.Equal(got, want) {
			t.Fatalf("history %s@%s:\n%q\nwant\n%q", tc.key, tc.branch, got, want)
		}
		if h.LeafID != c.LeafID || h.ThinkingLevel != c.ThinkingLevel || (h.Model == nil) != (c.Model == nil) || (c.Model != nil && *h.Model != *c.Model) {
			t.Fatalf("history header %+v, want %+v", h, c)
		}
		for _, limit := range []int{1, 2, len(want) + 3} {
			_, last := historyOf(t, e.api, tc.key, conversation.HistoryOptions{Branch: tc.branch, Limit: limit})
			if !slices.Equal(last, want[max(0, len(want)-limit):]) {
				t.Fatalf("history limit %d: %q", limit, last)
			}
			hc, err := e.api.History(ctx(t), tc.key, conversation.HistoryOptions{Branch: tc.branch, Limit: limit, Count: true})
			if err != nil {
				t.Fatal(err)
			}
			if hc.Count != min(limit, len(want)) || hc.Header.LeafID != c.LeafID {
				t.Fatalf("history count limit %d: %d, want %d", limit, hc.Count, min(limit, len(want)))
			}
			_ = hc.Close()
		}
	}
	_, err := e.api.History(ctx(t), b.Key, conversation.HistoryOptions{Branch: "nope"})
	wantCode(t, err, abi.CodeInvalidArgument, "unknown branch")
	wantMessage(t, err, `no entry "nope"`, "unknown branch")
	_, err = e.api.History(ctx(t), b.Key, conversation.HistoryOptions{Limit: -1})
	wantCode(t, err, abi.CodeInvalidArgument, "negative limit")
	// A reader may stop early.
	h, err := e.api.History(ctx(t), r.Key, conversation.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range h.Messages {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// The leaf of an empty transcript is null.
	empty := e.write(t, "empty.jsonl", []byte(`{"type":"session","version":3,"id":"empty-1","timestamp":"2026-07-09T10:00:00.000Z","cwd":"/"}`+"\n"))
	if _, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: empty}); err != nil {
		t.Fatal(err)
	}
	eh, msgs := historyOf(t, e.api, "empty-1", conversation.HistoryOptions{})
	hb, _ := json.Marshal(eh)
	if len(msgs) != 0 || string(hb) != `{"leafId":null,"model":null,"thinkingLevel":"off"}` {
		t.Fatalf("empty history %s %q", hb, msgs)
	}
}

// testHistoryLarge streams a context many read batches long (8 MiB each, 12 MB here), messages
// larger than a wire buffer included: it must arrive whole and in order.
func testHistoryLarge(t *testing.T, e *env) {
	var b bytes.Buffer
	b.WriteString(`{"type":"session","version":3,"id":"big","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n")
	parent := "null"
	for i := 1; i <= 3000; i++ {
		pad := strings.Repeat("p", 3000)
		if i%1000 == 0 {
			pad = strings.Repeat("q", 600<<10) // longer than the line buffers
		}
		id := fmt.Sprintf("%08x", i)
		fmt.Fprintf(&b, `{"type":"message","id":"%s","parentId":%s,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"m%d %s","timestamp":%d}}`+"\n", id, parent, i, pad, i)
		parent = `"` + id + `"`
	}
	path := e.write(t, "big.jsonl", b.Bytes())
	if _, err := e.api.Import(ctx(t), conversation.ImportRequest{Source: path}); err != nil {
		t.Fatal(err)
	}
	_, want := contextOf(t, path, "")
	_, got := historyOf(t, e.api, "big", conversation.HistoryOptions{})
	if len(got) != len(want) {
		t.Fatalf("%d messages, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("message %d differs", i)
		}
	}
	_, last := historyOf(t, e.api, "big", conversation.HistoryOptions{Limit: 1001})
	if !slices.Equal(last, want[len(want)-1001:]) {
		t.Fatal("the last 1001 messages differ")
	}
}

func testTree(t *testing.T, e *env) {
	r := e.imported(t, "branching.jsonl", "agent:main:branching")
	tr, err := e.api.Tree(ctx(t), r.Key)
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		id     string
		depth  int
		active bool
	}
	var got []node
	for _, n := range tr.Entries {
		got = append(got, node{n.ID, n.Depth, n.Active})
	}
	want := []node{{"u1", 0, true}, {"a1", 0, true}, {"u2left", 1, false}, {"u2right", 1, true}, {"a2right", 1, true}}
	if tr.SessionID != "branch-uuid" || tr.LeafID != "a2right" || !slices.Equal(tr.Roots, []string{"u1"}) || !slices.Equal(got, want) {
		t.Fatalf("tree %+v: %v", tr, got)
	}
	if n := tr.Entries[1]; !slices.Equal(n.Children, []string{"u2left", "u2right"}) || n.ParentID == nil || *n.ParentID != "u1" ||
		n.Preview != "common answer" || n.Role != "assistant" {
		t.Fatalf("entry a1: %+v", n)
	}
	if tr.Entries[0].ParentID != nil {
		t.Fatal("a root has a parent")
	}
}

func testLabelName(t *testing.T, e *env) {
	r := e.imported(t, "branching.jsonl", "agent:ops:slack:channel:c1")
	l, err := e.api.Label(ctx(t), r.Key, conversation.LabelRequest{EntryID: "u2left", Label: "tried-left"})
	if err != nil || l.TargetID != "u2left" || l.Label == nil || *l.Label != "tried-left" || l.Key != r.Key || l.SessionID != "branch-uuid" || l.EntryID == "" {
		t.Fatalf("label: %+v, %v", l, err)
	}
	tr, err := e.api.Tree(ctx(t), r.Key)
	if err != nil || tr.Entries[2].ID != "u2left" || tr.Entries[2].Label != "tried-left" {
		t.Fatalf("tree after label: %+v, %v", tr, err)
	}
	l, err = e.api.Label(ctx(t), r.Key, conversation.LabelRequest{EntryID: "u2left"})
	if err != nil || l.Label != nil {
		t.Fatalf("clear label: %+v, %v", l, err)
	}
	s, err := e.api.Show(ctx(t), r.Key)
	if err != nil || len(s.Stats.Labels) != 0 {
		t.Fatalf("labels after clearing: %+v, %v", s.Stats.Labels, err)
	}
	_, err = e.api.Label(ctx(t), r.Key, conversation.LabelRequest{EntryID: "nope", Label: "x"})
	wantCode(t, err, abi.CodeInvalidArgument, "label of an unknown entry")
	_, err = e.api.Label(ctx(t), r.Key, conversation.LabelRequest{Label: "x"})
	wantCode(t, err, abi.CodeInvalidArgument, "label without an entry")

	n, err := e.api.Name(ctx(t), r.Key, conversation.NameRequest{Name: "Slack triage"})
	if err != nil || n.Entry.DisplayName != "Slack triage" || n.Key != r.Key {
		t.Fatalf("name: %+v, %v", n, err)
	}
	if s, err := e.api.Show(ctx(t), r.Key); err != nil || s.Stats.Name != "Slack triage" {
		t.Fatalf("show after name: %v", err)
	}
	n, err = e.api.Name(ctx(t), r.Key, conversation.NameRequest{})
	if err != nil || n.Entry.DisplayName != "" {
		t.Fatalf("clear name: %+v, %v", n, err)
	}
	// A chat without a transcript is named in sessions.json only.
	if _, err := e.api.Resolve(ctx(t), "agent:main:main", conversation.ResolveRequest{}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.api.Name(ctx(t), "agent:main:main", conversation.NameRequest{Name: "Main"}); err != nil || n.Entry.DisplayName != "Main" {
		t.Fatalf("name without transcript: %+v, %v", n, err)
	}
	// A v1 file in the store is migrated before the first append (its original archived).
	v1 := e.imported(t, "v1.jsonl", "agent:main:v1")
	if _, err := e.api.Label(ctx(t), v1.Key, conversation.LabelRequest{EntryID: "00000001", Label: "first"}); err != nil {
		t.Fatalf("label in a migrated file: %v", err)
	}
}

func testFork(t *testing.T, e *env) {
	src := e.imported(t, "branching.jsonl", "agent:ops:slack:channel:c1")
	f, err := e.api.Fork(ctx(t), src.Key, conversation.ForkRequest{At: "u2left", Key: src.Key + ":fork:left"})
	if err != nil {
		t.Fatal(err)
	}
	if f.Key != src.Key+":fork:left" || f.Entry.ForkedFromSessionID != "branch-uuid" || f.Entry.ForkedFromTurnID != "a1" ||
		string(f.Entry.Extra["forkedFromEntryId"]) != `"u2left"` ||
		!f.ForkedFrom.Entry.HasChildren || f.ForkedFrom.Key != src.Key || f.ForkedFrom.EntryID != "u2left" || f.Entry.Model != "m" ||
		f.File != filepath.Join(e.dir, f.Entry.SessionID+".jsonl") {
		b, _ := json.Marshal(f)
		t.Fatalf("fork: %s", b)
	}
	_, want := contextOf(t, src.File, "u2left")
	if _, got := historyOf(t, e.api, f.Key, conversation.HistoryOptions{}); !slices.Equal(got, want) {
		t.Fatalf("fork history %q, want %q", got, want)
	}
	s, err := e.api.Show(ctx(t), f.Entry.SessionID)
	if err != nil || s.Header.ParentSession != src.File {
		t.Fatalf("fork header: %+v, %v", s, err)
	}
	d, err := e.api.Fork(ctx(t), src.Key, conversation.ForkRequest{At: "a1"})
	if err != nil || !strings.HasPrefix(d.Key, src.Key+":fork:") || len(d.Key) != len(src.Key)+len(":fork:")+8 {
		t.Fatalf("fork with the default key: %+v, %v", d, err)
	}
	for _, tc := range []struct {
		name string
		req  conversation.ForkRequest
	}{
		{"unknown entry", conversation.ForkRequest{At: "nope"}},
		{"no entry", conversation.ForkRequest{}},
		{"taken key", conversation.ForkRequest{At: "a1", Key: src.Key + ":fork:left"}},
		{"malformed key", conversation.ForkRequest{At: "a1", Key: "Bad Key!"}},
	} {
		_, err := e.api.Fork(ctx(t), src.Key, tc.req)
		wantCode(t, err, abi.CodeInvalidArgument, "fork: "+tc.name)
	}
	// Refused forks leave no transcript behind.
	names, _ := filepath.Glob(filepath.Join(e.dir, "*.jsonl"))
	if len(names) != 3 {
		t.Fatalf("transcripts after the forks: %v", names)
	}
}

func testCompact(t *testing.T, e *env) {
	r := e.imported(t, "branching.jsonl", "agent:ops:slack:channel:c1")
	keep := 1
	c, err := e.api.Compact(ctx(t), r.Key, conversation.CompactRequest{Summary: "The user asked twice; the right branch won.\n", KeepTokens: &keep})
	if err != nil || c.CompactionID == "" || c.FirstKeptEntryID != "a2right" || c.Entry.CompactionCount != 1 || c.Compacted != nil || len(c.TokensBefore) == 0 {
		t.Fatalf("compact with a summary: %+v, %v", c, err)
	}
	h, msgs := historyOf(t, e.api, r.Key, conversation.HistoryOptions{})
	if h.LeafID != c.CompactionID || len(msgs) == 0 || !strings.Contains(msgs[0], `"summary":"The user asked twice; the right branch won."`) {
		t.Fatalf("history after compaction: %+v %q", h, msgs)
	}
	_, err = e.api.Compact(ctx(t), r.Key, conversation.CompactRequest{Summary: "again", KeepTokens: &keep})
	wantCode(t, err, abi.CodeInvalidArgument, "compact again")
	wantMessage(t, err, "nothing to compact", "compact again")
	p := e.imported(t, "pending.jsonl", "")
	_, err = e.api.Compact(ctx(t), p.Key, conversation.CompactRequest{Summary: "s", KeepTokens: &keep})
	wantCode(t, err, abi.CodeResourceUnavailable, "compact while a tool call is unanswered")
	wantMessage(t, err, "unanswered", "compact while a tool call is unanswered")

	l, err := e.api.Compact(ctx(t), r.Key, conversation.CompactRequest{MaxLines: 100})
	if err != nil || l.Compacted == nil || *l.Compacted || l.Archived != "" || l.Entry.SessionID != "branch-uuid" {
		t.Fatalf("line compaction of a short file: %+v, %v", l, err)
	}
	full := e.imported(t, "full_format.jsonl", "agent:main:full")
	before := readFile(t, full.File)
	l, err = e.api.Compact(ctx(t), full.Key, conversation.CompactRequest{MaxLines: 2})
	if err != nil || l.Compacted == nil || !*l.Compacted || l.Entry.CompactionCount != 1 || !strings.HasPrefix(l.Archived, full.File+".bak.") {
		t.Fatalf("line compaction: %+v, %v", l, err)
	}
	if !bytes.Equal(readFile(t, l.Archived), before) {
		t.Fatal("the archive is not the original")
	}
	if s, err := e.api.Show(ctx(t), full.Key); err != nil || s.Stats.Entries != 2 {
		t.Fatalf("entries after line compaction: %v", err)
	}
	if _, err := e.api.Resolve(ctx(t), "agent:main:main", conversation.ResolveRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.api.Compact(ctx(t), "agent:main:main", conversation.CompactRequest{MaxLines: 1})
	wantCode(t, err, abi.CodeInvalidArgument, "compact a chat without transcript")
	wantMessage(t, err, "has no transcript yet", "compact a chat without transcript")
	neg := -1
	for _, tc := range []struct {
		name string
		req  conversation.CompactRequest
	}{
		{"neither", conversation.CompactRequest{}},
		{"both", conversation.CompactRequest{MaxLines: 3, Summary: "s"}},
		{"blank summary", conversation.CompactRequest{Summary: " \n"}},
		{"negative lines", conversation.CompactRequest{MaxLines: -1}},
		{"negative keep", conversation.CompactRequest{Summary: "s", KeepTokens: &neg}},
		{"keep with lines", conversation.CompactRequest{MaxLines: 3, KeepTokens: &keep}},
	} {
		_, err := e.api.Compact(ctx(t), full.Key, tc.req)
		wantCode(t, err, abi.CodeInvalidArgument, "compact: "+tc.name)
	}
}

func testResetArchive(t *testing.T, e *env) {
	r := e.imported(t, "v1.jsonl", "agent:main:telegram:dm:42")
	e.clock.Add(time.Second)
	res, err := e.api.Reset(ctx(t), r.Key)
	if err != nil || res.PreviousSessionID != "v1-uuid" || res.Entry.SessionID == "v1-uuid" || res.Reason != chatstore.ReasonReset ||
		!strings.HasPrefix(res.Archived, r.File+".reset.") {
		t.Fatalf("reset: %+v, %v", res, err)
	}
	if _, err := os.Stat(res.Archived); err != nil {
		t.Fatalf("reset archive: %v", err)
	}
	if _, err := os.Stat(r.File); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old transcript is still in place: %v", err)
	}
	s, err := e.api.Show(ctx(t), r.Key)
	if err != nil || s.Header != nil || s.Entry.SessionID != res.Entry.SessionID {
		t.Fatalf("show after reset: %+v, %v", s, err)
	}
	// Nothing to archive the second time: the new session has no transcript yet.
	again, err := e.api.Reset(ctx(t), r.Key)
	if err != nil || again.Archived != "" {
		t.Fatalf("reset without transcript: %+v, %v", again, err)
	}

	b := e.imported(t, "branching.jsonl", "agent:ops:slack:channel:c1")
	a, err := e.api.Archive(ctx(t), b.Key)
	if err != nil || a.Key != b.Key || a.SessionID != "branch-uuid" || !strings.HasPrefix(a.Archived, b.File+".deleted.") {
		t.Fatalf("archive: %+v, %v", a, err)
	}
	if _, err := os.Stat(a.Archived); err != nil {
		t.Fatalf("archived transcript: %v", err)
	}
	_, err = e.api.Show(ctx(t), b.Key)
	wantCode(t, err, abi.CodeSessionNotFound, "show an archived chat")
	_, err = e.api.Archive(ctx(t), b.Key)
	wantCode(t, err, abi.CodeSessionNotFound, "archive twice")
}

func testResolve(t *testing.T, e *env) {
	const key = "agent:main:telegram:dm:42"
	first, err := e.api.Resolve(ctx(t), key, conversation.ResolveRequest{})
	if err != nil || !first.Fresh || first.Key != key || first.Entry.SessionID == "" {
		t.Fatalf("first resolve: %+v, %v", first, err)
	}
	// The chat's transcript exists once a message arrived: a reset must archive it.
	if err := os.WriteFile(first.Entry.SessionFile, []byte(`{"type":"session","version":3,"id":"x","timestamp":"2026-05-01T01:30:00.000Z","cwd":"/"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(10 * time.Minute)
	again, err := e.api.Resolve(ctx(t), key, conversation.ResolveRequest{})
	if err != nil || again.Fresh || again.Entry.SessionID != first.Entry.SessionID {
		t.Fatalf("within the window: %+v, %v", again, err)
	}
	// Past 04:00 local: the daily reset (the idle window off).
	e.clock.Add(50 * time.Minute)
	zero, hour := 0, 4
	daily, err := e.api.Resolve(ctx(t), key, conversation.ResolveRequest{IdleMinutes: &zero, ResetHour: &hour})
	if err != nil || !daily.Fresh || daily.Entry.SessionID == first.Entry.SessionID {
		t.Fatalf("daily reset: %+v, %v", daily, err)
	}
	if archives, _ := filepath.Glob(first.Entry.SessionFile + ".reset.*"); len(archives) != 1 {
		t.Fatalf("old transcript not archived: %v", archives)
	}
	none, idle := -1, 45
	e.clock.Add(30 * time.Minute)
	if r, err := e.api.Resolve(ctx(t), key, conversation.ResolveRequest{ResetHour: &none, IdleMinutes: &idle}); err != nil || r.Fresh {
		t.Fatalf("30 minutes is within a 45 minute window: %+v, %v", r, err)
	}
	e.clock.Add(46 * time.Minute)
	r, err := e.api.Resolve(ctx(t), key, conversation.ResolveRequest{ResetHour: &none, IdleMinutes: &idle})
	if err != nil || !r.Fresh || r.Entry.SessionID == daily.Entry.SessionID {
		t.Fatalf("idle reset: %+v, %v", r, err)
	}
	e.clock.Add(72 * time.Hour)
	if n, err := e.api.Resolve(ctx(t), key, conversation.ResolveRequest{NoAutoReset: true}); err != nil || n.Fresh || n.Entry.SessionID != r.Entry.SessionID {
		t.Fatalf("no auto reset: %+v, %v", n, err)
	}
	bad, neg := 24, -1
	for _, tc := range []struct {
		key string
		req conversation.ResolveRequest
	}{
		{key, conversation.ResolveRequest{ResetHour: &bad}},
		{key, conversation.ResolveRequest{IdleMinutes: &neg}},
		{"Agent:Bad Key!", conversation.ResolveRequest{}},
		{"", conversation.ResolveRequest{}},
	} {
		_, err := e.api.Resolve(ctx(t), tc.key, tc.req)
		wantCode(t, err, abi.CodeInvalidArgument, fmt.Sprintf("resolve %q %+v", tc.key, tc.req))
	}
}

func testExport(t *testing.T, e *env) {
	r := e.imported(t, "full_format.jsonl", "agent:main:full")
	var b bytes.Buffer
	if err := e.api.Export(ctx(t), r.Key, conversation.ExportJSONL, &b); err != nil || !bytes.Equal(b.Bytes(), readFile(t, r.File)) {
		t.Fatalf("jsonl export: %v", err)
	}
	b.Reset()
	if err := e.api.Export(ctx(t), r.Key, conversation.ExportMarkdown, &b); err != nil ||
		!strings.Contains(b.String(), "# My test session\n") || !strings.Contains(b.String(), "\n## Compaction summary\n") {
		t.Fatalf("md export: %v\n%s", err, b.String())
	}
	b.Reset()
	if err := e.api.Export(ctx(t), r.Key, conversation.ExportHTML, &b); err != nil ||
		!strings.Contains(b.String(), `content="default-src 'none'; style-src 'unsafe-inline'"`) || strings.Contains(b.String(), "<script") {
		t.Fatalf("html export: %v", err)
	}
	for _, tc := range []struct {
		ref    string
		format conversation.ExportFormat
		code   abi.Code
	}{
		{"agent:main:nobody", conversation.ExportMarkdown, abi.CodeSessionNotFound},
		{"agent:main:nobody", conversation.ExportJSONL, abi.CodeSessionNotFound},
		{r.Key, "yaml", abi.CodeInvalidArgument},
	} {
		b.Reset()
		err := e.api.Export(ctx(t), tc.ref, tc.format, &b)
		wantCode(t, err, tc.code, fmt.Sprintf("export %s %s", tc.ref, tc.format))
		if b.Len() > 0 {
			t.Fatalf("a refused export wrote %q", b.String())
		}
	}
	// A chat whose transcript is not a pi file is refused before a byte is written.
	if _, err := e.api.Resolve(ctx(t), "agent:main:main", conversation.ResolveRequest{}); err != nil {
		t.Fatal(err)
	}
	s, err := e.api.Show(ctx(t), "agent:main:main")
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := testdata.ReadFile("testdata/harness.jsonl")
	if err := os.WriteFile(s.File, b2, 0o600); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	err = e.api.Export(ctx(t), "agent:main:main", conversation.ExportJSONL, &b)
	wantCode(t, err, abi.CodeInvalidArgument, "export of a foreign file")
	if b.Len() > 0 {
		t.Fatalf("a refused export wrote %q", b.String())
	}
}

func testRecover(t *testing.T, e *env) {
	e.imported(t, "branching.jsonl", "agent:main:one")
	e.imported(t, "v1.jsonl", "agent:main:two")
	r, err := e.api.Recover(ctx(t))
	if err != nil || r.Damaged {
		t.Fatalf("recover of a sound file: %+v, %v", r, err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, chatstore.FileName), []byte("{broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.api.List(ctx(t), conversation.ListOptions{})
	wantCode(t, err, abi.CodeInvalidArgument, "list of a damaged store")
	wantMessage(t, err, "nexus chat recover", "list of a damaged store")
	_, err = e.api.Show(ctx(t), "agent:main:one")
	wantCode(t, err, abi.CodeInvalidArgument, "show in a damaged store")
	r, err = e.api.Recover(ctx(t))
	if err != nil || !r.Damaged || r.From != "bak" || r.Entries != 1 || !strings.Contains(r.Archived, ".corrupt.") {
		t.Fatalf("recover: %+v, %v", r, err)
	}
	items, err := e.api.List(ctx(t), conversation.ListOptions{})
	if err != nil || len(items) != 1 {
		t.Fatalf("list after recover: %v, %v", items, err)
	}
}

// testConcurrentWriters appends labels to one chat from many callers at once: each is
// written (the implementation serializes its own writers), none is lost.
func testConcurrentWriters(t *testing.T, e *env) {
	r := e.imported(t, "branching.jsonl", "agent:main:busy")
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := e.api.Label(ctx(t), r.Key, conversation.LabelRequest{EntryID: "u1", Label: fmt.Sprintf("l%d", i)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent label: %v", err)
		}
	}
	tr, err := e.api.Tree(ctx(t), r.Key)
	if err != nil {
		t.Fatal(err)
	}
	labels := 0
	for _, en := range tr.Entries {
		if en.Type == "label" {
			labels++
		}
	}
	if labels != n {
		t.Fatalf("%d label entries, want %d", labels, n)
	}
}
