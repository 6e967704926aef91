package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/index/source"
	"github.com/nexus-run/nexus/internal/testkit"
)

const indexSession = "0e5d3c1a-1111-4222-8333-444455556666"

// ccUser is a Claude Code user line of indexSession.
func ccUser(uuid, ts, text string) string {
	return fmt.Sprintf(`{"type":"user","sessionId":%q,"uuid":%q,"timestamp":%q,"cwd":"/work/p","message":{"role":"user","content":%q}}`+"\n",
		indexSession, uuid, ts, text)
}

// ccReply is a Claude Code assistant line of indexSession that calls a tool.
func ccReply(uuid, mid, ts, text, tool string) string {
	return fmt.Sprintf(`{"type":"assistant","sessionId":%q,"uuid":%q,"timestamp":%q,"requestId":"req-%s","message":{"id":%q,"role":"assistant","model":"claude-x","content":[{"type":"text","text":%q},{"type":"tool_use","id":"toolu_%s","name":%q,"input":{"command":"ls"}}],"usage":{"input_tokens":10,"output_tokens":5}}}`+"\n",
		indexSession, uuid, ts, mid, mid, text, mid, tool)
}

// indexHome is a home directory holding one Claude Code transcript, and sync options that
// read it (and nothing of the machine's own home).
func indexHome(t *testing.T) (transcript string, opts index.SyncOptions) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	transcript = filepath.Join(home, ".claude", "projects", "-work-p", indexSession+".jsonl")
	if err := os.MkdirAll(filepath.Dir(transcript), 0o700); err != nil {
		t.Fatal(err)
	}
	data := ccUser("u1", "2026-01-01T00:00:00Z", "where do walruses live?") +
		ccReply("a1", "m1", "2026-01-01T00:00:01Z", "On Arctic sea ice.", "Bash")
	if err := os.WriteFile(transcript, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return transcript, index.SyncOptions{Env: &source.Env{Home: home}}
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// indexEnv is a gateway handler serving a synced index.
type indexEnv struct {
	h          http.Handler
	transcript string
}

func newIndexEnv(t *testing.T) *indexEnv {
	t.Helper()
	transcript, opts := indexHome(t)
	ix, err := index.Open(t.Context(), filepath.Join(t.TempDir(), index.FileName), index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	if _, err := ix.Sync(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	return &indexEnv{h: gateway.Handler(gateway.Options{Index: ix, IndexSync: opts}), transcript: transcript}
}

func (e *indexEnv) do(t *testing.T, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var req *http.Request
	if body != "" {
		req = httptest.NewRequest(method, "http://nexus"+path, strings.NewReader(body))
	} else {
		req = httptest.NewRequest(method, "http://nexus"+path, nil)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

func decodeBody(t *testing.T, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
}

// TestIndexRoutes drives every /v1/index route as a plain HTTP client would.
func TestIndexRoutes(t *testing.T) {
	e := newIndexEnv(t)
	var search struct{ Hits []index.Hit }
	decodeBody(t, e.do(t, "GET", "/v1/index/search?q=walruses&source=claude-code&source=codex&limit=5&since=2025-12-31T00:00:00Z", ""), &search)
	if len(search.Hits) != 1 || search.Hits[0].MessageID != "u1" || search.Hits[0].Snippet != "where do "+index.MarkOpen+"walruses"+index.MarkClose+" live?" ||
		search.Hits[0].Show != "nexus index show "+indexSession+" --source claude-code --around u1" {
		t.Fatalf("search: %+v", search.Hits)
	}
	// No hit is an empty array, never null.
	w := e.do(t, "GET", "/v1/index/search?q=walruses&since=2026-06-01T00:00:00Z", "")
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"hits":[]}` {
		t.Fatalf("no hits: %d %s", w.Code, w.Body)
	}
	decodeBody(t, e.do(t, "GET", "/v1/index/search?q=ls&tool=Bash", ""), &search)
	if len(search.Hits) != 1 || search.Hits[0].Kind != "tool_call" || search.Hits[0].ToolCallID != "toolu_m1" {
		t.Fatalf("tool search: %+v", search.Hits)
	}
	decodeBody(t, e.do(t, "GET", "/v1/index/search?q="+strings.ReplaceAll(`(walruses OR "sea ice" NOT x:y {*} ^`, " ", "+"), ""), &search)
	if len(search.Hits) != 2 {
		t.Fatalf("operators: %+v", search.Hits)
	}

	var sessions struct{ Sessions []index.SessionInfo }
	decodeBody(t, e.do(t, "GET", "/v1/index/sessions?project=/work&limit=1", ""), &sessions)
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].ID != indexSession || sessions.Sessions[0].Messages != 2 {
		t.Fatalf("sessions: %+v", sessions.Sessions)
	}
	var d index.SessionDetail
	decodeBody(t, e.do(t, "GET", "/v1/index/sessions/0e5d3c1a?source=claude-code&around=m1&context=1", ""), &d)
	if d.Session.ID != indexSession || len(d.Messages) != 2 || d.Messages[1].ID != "m1" || len(d.Messages[1].ToolCalls) != 1 {
		t.Fatalf("show: %+v", d)
	}
	var st index.Stats
	decodeBody(t, e.do(t, "GET", "/v1/index/stats", ""), &st)
	if st.Sessions != 1 || st.Messages != 2 || st.ToolCalls != 1 || st.Tokens.Total != 15 {
		t.Fatalf("stats: %+v", st)
	}

	// A sync on demand reads what was appended, with or without a body.
	appendLine(t, e.transcript, ccUser("u2", "2026-01-01T00:01:00Z", "and narwhals?"))
	var sum index.Summary
	decodeBody(t, e.do(t, "POST", "/v1/index/sync", ""), &sum)
	if sum.Appended != 1 || sum.Messages != 1 {
		t.Fatalf("sync: %+v", sum)
	}
	decodeBody(t, e.do(t, "POST", "/v1/index/sync", `{}`), &sum)
	if sum.Unchanged != 1 || sum.Bytes != 0 {
		t.Fatalf("sync again: %+v", sum)
	}
	decodeBody(t, e.do(t, "POST", "/v1/index/sync", `{"sources":["codex"]}`), &sum)
	if sum.Files != 0 {
		t.Fatalf("sync of codex alone: %+v", sum)
	}
	decodeBody(t, e.do(t, "GET", "/v1/index/search?q=narwhals", ""), &search)
	if len(search.Hits) != 1 || search.Hits[0].MessageID != "u2" {
		t.Fatalf("after sync: %+v", search.Hits)
	}
}

// TestIndexErrors: every refusal is the ABI's error response with its code's status.
func TestIndexErrors(t *testing.T) {
	e := newIndexEnv(t)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               abi.Code
		session            string
	}{
		{"GET", "/v1/index/search", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=((+**+))", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=x&limit=x", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=x&limit=-1", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=x&limit=1&limit=2", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=x&since=yesterday", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=x&source=cursor", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/search?q=x&sources=pi", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/sessions?limit=-1", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/sessions?source=cursor", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/sessions?query=x", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/sessions/no-such-session", "", 404, abi.CodeSessionNotFound, "no-such-session"},
		{"GET", "/v1/index/sessions/" + indexSession + "?source=codex", "", 404, abi.CodeSessionNotFound, indexSession},
		{"GET", "/v1/index/sessions/" + indexSession + "?source=cursor", "", 400, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/sessions/" + indexSession + "?around=zz", "", 400, abi.CodeInvalidArgument, indexSession},
		{"GET", "/v1/index/sessions/" + indexSession + "?context=-2", "", 400, abi.CodeInvalidArgument, indexSession},
		{"GET", "/v1/index/sessions/" + indexSession + "?context=1&context=2", "", 400, abi.CodeInvalidArgument, indexSession},
		{"GET", "/v1/index/stats?all=1", "", 400, abi.CodeInvalidArgument, ""},
		{"POST", "/v1/index/sync", `{"sources":["cursor"]}`, 400, abi.CodeInvalidArgument, ""},
		{"POST", "/v1/index/sync", `{"roots":{"pi":["/etc"]}}`, 400, abi.CodeInvalidArgument, ""},
		{"POST", "/v1/index/sync", `[]`, 400, abi.CodeInvalidArgument, ""},
		{"POST", "/v1/index/sync?force=1", "", 400, abi.CodeInvalidArgument, ""},
		{"DELETE", "/v1/index/stats", "", 404, abi.CodeInvalidArgument, ""},
		{"GET", "/v1/index/sync", "", 404, abi.CodeInvalidArgument, ""},
	} {
		w := e.do(t, tc.method, tc.path, tc.body)
		checkError(t, w.Code, w.Header(), w.Body.Bytes(), tc.status, tc.code, tc.session)
		if t.Failed() {
			t.Fatalf("%s %s", tc.method, tc.path)
		}
	}
	// A handler without an index serves no index route.
	h := gateway.Handler(gateway.Options{})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://nexus/v1/index/stats", nil))
	checkError(t, w.Code, w.Header(), w.Body.Bytes(), 404, abi.CodeInvalidArgument, "")
}

// indexGoroutines counts the goroutines of a daemon's index watch still running.
func indexGoroutines() int {
	return goroutinesCreatedBy("github.com/nexus-run/nexus/internal/gateway.startIndex",
		"github.com/nexus-run/nexus/internal/index.(*Index).Watch")
}

// TestServeKeepsIndexFresh runs the real daemon with HOME at a temporary directory holding one
// transcript: the index is synced at start and follows an append while the gateway runs, all
// read over the client; the watch ends and the database closes with the daemon.
func TestServeKeepsIndexFresh(t *testing.T) {
	transcript, opts := indexHome(t)
	dir := shortDir(t)
	d := startDaemon(t, dir, "", func(o *gateway.DaemonOptions) { o.Index = &gateway.IndexOptions{Sync: opts} })
	c := client.New(client.Target{Socket: d.info.Socket})
	ctx := t.Context()
	found := func(q string, n int) func() bool {
		return func() bool {
			hits, err := c.IndexSearch(ctx, index.SearchOptions{Query: q})
			return err == nil && len(hits) == n
		}
	}
	testkit.Eventually(t, "the first sync's text found through the API", found("walruses", 1))

	appendLine(t, transcript, ccUser("u2", "2026-01-01T00:01:00Z", "what about narwhals?"))
	testkit.Eventually(t, "an appended line found through the API", found("narwhals", 1))
	hits, err := c.IndexSearch(ctx, index.SearchOptions{Query: "narwhals OR walruses", Sources: []string{"claude-code"}, Role: "user", Limit: 5})
	if err != nil || len(hits) != 2 || hits[0].Session != indexSession {
		t.Fatalf("search: %+v %v", hits, err)
	}

	list, err := c.IndexSessions(ctx, index.SessionsOptions{Sources: []string{"claude-code"}})
	if err != nil || len(list) != 1 || list[0].Messages != 3 {
		t.Fatalf("sessions: %+v %v", list, err)
	}
	detail, err := c.IndexShow(ctx, index.ShowOptions{Session: indexSession, Around: "u2", Context: 1})
	if err != nil || len(detail.Messages) != 2 || detail.Messages[1].Text != "what about narwhals?" {
		t.Fatalf("show: %+v %v", detail, err)
	}
	st, err := c.IndexStats(ctx)
	if err != nil || st.Messages != 3 || st.Sessions != 1 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	sum, err := c.IndexSync(ctx)
	if err != nil || sum.Files != 1 || sum.Bytes != 0 {
		t.Fatalf("sync: %+v %v", sum, err)
	}
	if _, err := c.IndexShow(ctx, index.ShowOptions{Session: "no-such-session"}); !client.IsCode(err, abi.CodeSessionNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	if _, err := c.IndexSearch(ctx, index.SearchOptions{Query: "x", Sources: []string{"cursor"}}); !client.IsCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("unknown source: %v", err)
	}
	if _, err := c.IndexShow(ctx, index.ShowOptions{}); !client.IsCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("no session: %v", err)
	}

	d.stop(t)
	testkit.Eventually(t, "the index watch ends with the daemon", func() bool { return indexGoroutines() == 0 })
	// What the daemon indexed stays in state/index.db, which it closed.
	ix, err := index.Open(context.Background(), filepath.Join(dir, index.FileName), index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ix.Close() }()
	if hits, err := ix.Search(ctx, index.SearchOptions{Query: "narwhals"}); err != nil || len(hits) != 1 {
		t.Fatalf("after the daemon: %+v %v", hits, err)
	}
}

// TestServeWithoutIndex: a daemon without IndexOptions opens no index and serves no route.
func TestServeWithoutIndex(t *testing.T) {
	dir := shortDir(t)
	d := startDaemon(t, dir, "")
	c := client.New(client.Target{Socket: d.info.Socket})
	if _, err := c.IndexStats(t.Context()); !client.IsCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("stats without an index: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, index.FileName)); err == nil {
		t.Fatal("a daemon without an index created state/index.db")
	}
}

// TestIndexSyncBadLines: a transcript line without a timestamp (or its role, or its id) is
// counted and skipped; the sync answers 200 with the counts and every good line indexed. (One
// such line failed every sync: 500, NOT NULL constraint failed: turns.started.)
func TestIndexSyncBadLines(t *testing.T) {
	e := newIndexEnv(t)
	appendLine(t, e.transcript, `{"type":"user","sessionId":"`+indexSession+`","uuid":"u9","message":{"role":"user","content":"a prompt without a time"}}`+"\n"+
		ccUser("u10", "2026-01-01T00:02:00Z", "and belugas?"))
	other := filepath.Join(filepath.Dir(e.transcript), "0e5d3c1a-2222-4222-8333-444455556666.jsonl")
	if err := os.WriteFile(other, []byte(`{"type":"user","sessionId":"s2","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"no uuid"}}`+"\n"+
		strings.ReplaceAll(ccUser("u1", "2026-01-01T00:00:00Z", "orcas too"), indexSession, "s2")), 0o600); err != nil {
		t.Fatal(err)
	}
	var sum index.Summary
	decodeBody(t, e.do(t, "POST", "/v1/index/sync", ""), &sum)
	want := map[string]int{"claude-code: no timestamp": 1, "claude-code: no id": 1}
	if sum.Appended != 1 || sum.New != 1 || sum.Messages != 2 || len(sum.Errors) != 0 || fmt.Sprint(sum.Skipped) != fmt.Sprint(want) {
		t.Fatalf("sync: %+v", sum)
	}
	var search struct{ Hits []index.Hit }
	decodeBody(t, e.do(t, "GET", "/v1/index/search?q=belugas+OR+orcas", ""), &search)
	if len(search.Hits) != 2 {
		t.Fatalf("search: %+v", search.Hits)
	}
	var st index.Stats
	decodeBody(t, e.do(t, "GET", "/v1/index/stats", ""), &st)
	if fmt.Sprint(st.SkippedLines) != fmt.Sprint(want) {
		t.Fatalf("stats: %+v", st)
	}
}

// TestServeSurvivesLargeTranscript: a Claude Code transcript of 17 MB (over the index writer's
// 16 MiB batch) written while the daemon runs, with a 20 MB line in it, is indexed, and the
// daemon goes on serving. (The batch's commit panicked in the watcher's goroutine and took the
// gateway down.)
func TestServeSurvivesLargeTranscript(t *testing.T) {
	_, opts := indexHome(t)
	dir := shortDir(t)
	d := startDaemon(t, dir, "", func(o *gateway.DaemonOptions) { o.Index = &gateway.IndexOptions{Sync: opts} })
	c := client.New(client.Target{Socket: d.info.Socket})
	ctx := t.Context()
	found := func(q string) func() bool {
		return func() bool {
			hits, err := c.IndexSearch(ctx, index.SearchOptions{Query: q})
			return err == nil && len(hits) == 1
		}
	}
	testkit.Eventually(t, "the first sync", found("walruses"))

	big := filepath.Join(opts.Env.Home, ".claude", "projects", "-work-p", "0e5d3c1a-3333-4222-8333-444455556666.jsonl")
	var b strings.Builder
	b.WriteString(strings.ReplaceAll(ccUser("b1", "2026-01-02T00:00:00Z", "a large transcript about orcas"), indexSession, "big"))
	output := strings.Repeat("a line of tool output\n", 1<<15)
	for i := 0; b.Len() < 17<<20; i++ {
		fmt.Fprintf(&b, `{"type":"user","sessionId":"big","uuid":"r%d","timestamp":"2026-01-02T00:00:01Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":%q}]}}`+"\n", i, i, output)
	}
	fmt.Fprintf(&b, `{"type":"user","sessionId":"big","uuid":"r-huge","timestamp":"2026-01-02T00:00:02Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t-huge","content":%q}]}}`+"\n",
		strings.Repeat("x", 20<<20))
	b.WriteString(strings.ReplaceAll(ccUser("b2", "2026-01-02T00:00:03Z", "the end of it: belugas"), indexSession, "big"))
	if err := os.WriteFile(big, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the large transcript indexed", found("belugas"))
	if hits, err := c.IndexSearch(ctx, index.SearchOptions{Query: "orcas"}); err != nil || len(hits) != 1 {
		t.Fatalf("orcas: %+v %v", hits, err)
	}
	st, err := c.IndexStats(ctx)
	if err != nil || st.Sessions != 2 || st.CutLines != 1 || len(st.FailedFiles) != 0 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	// The daemon still writes what changes.
	appendLine(t, big, strings.ReplaceAll(ccUser("b3", "2026-01-02T00:00:04Z", "and narwhals"), indexSession, "big"))
	testkit.Eventually(t, "an append after it indexed", found("narwhals"))
}
