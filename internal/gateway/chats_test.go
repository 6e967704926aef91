package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/testkit"
)

// branching is a v3 transcript with two branches after a1 (the contract suite's fixture).
const branching = `{"type":"session","version":3,"id":"branch-uuid","timestamp":"2026-07-09T10:00:00.000Z","cwd":"/test"}
{"type":"message","id":"u1","parentId":null,"timestamp":"2026-07-09T10:00:01.000Z","message":{"role":"user","content":"common prompt","timestamp":1783600001000}}
{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-07-09T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"common answer"}],"provider":"x","model":"m"}}
{"type":"message","id":"u2left","parentId":"a1","timestamp":"2026-07-09T10:00:03.000Z","message":{"role":"user","content":"left branch prompt","timestamp":1783600003000}}
{"type":"message","id":"u2right","parentId":"a1","timestamp":"2026-07-09T10:00:04.000Z","message":{"role":"user","content":"right <b>branch</b> prompt","timestamp":1783600004000}}
`

// chatEnv is a gateway handler serving a conversation Service over a fresh sessions directory.
type chatEnv struct {
	dir string
	h   http.Handler
}

func newChatEnv(t *testing.T, opt gateway.Options, copts conversation.Options) *chatEnv {
	t.Helper()
	copts.Dir = filepath.Join(t.TempDir(), "sessions")
	opt.Chats = conversation.New(copts)
	return &chatEnv{dir: copts.Dir, h: gateway.Handler(opt)}
}

func (e *chatEnv) do(t *testing.T, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://nexus"+path, rd)
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

// importBranching imports the fixture under key through the route.
func (e *chatEnv) importBranching(t *testing.T, key string) conversation.ImportResult {
	t.Helper()
	w := e.do(t, "POST", "/v1/chats/import?source=branching.jsonl&key="+key, branching)
	if w.Code != http.StatusOK {
		t.Fatalf("import: %d %s", w.Code, w.Body)
	}
	var r conversation.ImportResult
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestChatRoutes drives every /v1/chats route as a plain HTTP client would: keys with ':' in
// the path as typed, bodies, NDJSON history, streamed export with its headers.
func TestChatRoutes(t *testing.T) {
	e := newChatEnv(t, gateway.Options{}, conversation.Options{})
	const key = "agent:main:telegram:dm:42"
	r := e.importBranching(t, key)
	if r.Key != key || !r.Copied || r.Source != "branching.jsonl" || r.File != filepath.Join(e.dir, "branch-uuid.jsonl") {
		t.Fatalf("import: %+v", r)
	}
	for _, path := range []string{"/v1/chats/" + key, "/v1/chats/agent%3Amain%3Atelegram%3Adm%3A42", "/v1/chats/branch-uuid"} {
		w := e.do(t, "GET", path, "")
		var s conversation.Show
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &s) != nil || s.Key != key || s.Stats.Entries != 4 {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
	}
	w := e.do(t, "GET", "/v1/chats?agent=main&limit=5", "")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"key":"`+key+`"`) {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}

	// History: NDJSON, messages verbatim (nothing escaped), an end line with the count.
	w = e.do(t, "GET", "/v1/chats/"+key+"/history?branch=u2right", "")
	want := `{"history":{"leafId":"u2right","model":{"provider":"x","modelId":"m"},"thinkingLevel":"off"}}` + "\n" +
		`{"message":{"role":"user","content":"common prompt","timestamp":1783600001000}}` + "\n" +
		`{"message":{"role":"assistant","content":[{"type":"text","text":"common answer"}],"provider":"x","model":"m"}}` + "\n" +
		`{"message":{"role":"user","content":"right <b>branch</b> prompt","timestamp":1783600004000}}` + "\n" +
		`{"end":{"count":3}}` + "\n"
	if w.Code != http.StatusOK || w.Body.String() != want || w.Header().Get("Content-Type") != conversation.HistoryContentType {
		t.Fatalf("history: %d %q\n%s\nwant\n%s", w.Code, w.Header().Get("Content-Type"), w.Body, want)
	}
	w = e.do(t, "GET", "/v1/chats/"+key+"/history?count=true&limit=2", "")
	if !strings.HasSuffix(w.Body.String(), `{"end":{"count":2}}`+"\n") || strings.Contains(w.Body.String(), `"message"`) {
		t.Fatalf("history count: %s", w.Body)
	}

	w = e.do(t, "GET", "/v1/chats/"+key+"/tree", "")
	var tr conversation.Tree
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &tr) != nil || tr.LeafID != "u2right" || len(tr.Entries) != 4 || tr.Entries[3].Depth != 1 {
		t.Fatalf("tree: %d %s", w.Code, w.Body)
	}

	w = e.do(t, "GET", "/v1/chats/"+key+"/export", "")
	if w.Code != http.StatusOK || w.Body.String() != branching || w.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export jsonl: %d %s", w.Code, w.Body)
	}
	w = e.do(t, "GET", "/v1/chats/"+key+"/export?format=html", "")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") ||
		w.Header().Get("Content-Security-Policy") != "default-src 'none'; style-src 'unsafe-inline'" ||
		w.Header().Get("X-Content-Type-Options") != "nosniff" || strings.Contains(w.Body.String(), "<b>branch") {
		t.Fatalf("export html: %d %v", w.Code, w.Header())
	}

	for _, tc := range []struct {
		path, body, want string
	}{
		{"/label", `{"entryId":"u2left","label":"left"}`, `"label":"left"`},
		{"/name", `{"name":"Triage"}`, `"displayName":"Triage"`},
		{"/fork", `{"at":"u2left","key":"` + key + `:alt"}`, `"key":"` + key + `:alt"`},
		{"/compact", `{"maxLines":100}`, `"compacted":false`},
		{"/resolve", `{"noAutoReset":true}`, `"fresh":false`},
		{"/reset", ``, `"previousSessionId":"branch-uuid"`},
		{"/archive", `{}`, `"key":"` + key + `"`},
	} {
		w := e.do(t, "POST", "/v1/chats/"+key+tc.path, tc.body)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), tc.want) {
			t.Fatalf("POST %s: %d %s", tc.path, w.Code, w.Body)
		}
	}
	w = e.do(t, "POST", "/v1/chats/recover", "")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"damaged":false`) {
		t.Fatalf("recover: %d %s", w.Code, w.Body)
	}
}

// TestChatErrors: every refusal is the ABI's error response with its code's status.
func TestChatErrors(t *testing.T) {
	e := newChatEnv(t, gateway.Options{}, conversation.Options{})
	const key = "agent:main:telegram:dm:42"
	e.importBranching(t, key)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               abi.Code
	}{
		{"GET", "/v1/chats/agent:main:nobody", "", 404, abi.CodeSessionNotFound},
		{"GET", "/v1/chats/..%2F..%2Fetc%2Fpasswd/history", "", 404, abi.CodeSessionNotFound},
		{"GET", "/v1/chats/%2E%2E/tree", "", 404, abi.CodeSessionNotFound},
		{"GET", "/v1/chats/" + key + "/history?limit=-1", "", 400, abi.CodeInvalidArgument},
		{"GET", "/v1/chats/" + key + "/history?count=maybe", "", 400, abi.CodeInvalidArgument},
		{"GET", "/v1/chats/" + key + "/history?branch=nope", "", 400, abi.CodeInvalidArgument},
		{"GET", "/v1/chats?limit=x", "", 400, abi.CodeInvalidArgument},
		{"GET", "/v1/chats?since=yesterday", "", 400, abi.CodeInvalidArgument},
		{"GET", "/v1/chats/" + key + "/export?format=yaml", "", 400, abi.CodeInvalidArgument},
		{"GET", "/v1/chats/agent:main:nobody/export", "", 404, abi.CodeSessionNotFound},
		{"GET", "/v1/chats/" + key + "/nope", "", 404, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/fork", `{"at":"u1","extra":1}`, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/fork", `{"At":"u1"}`, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/fork", `{"at":"nope"}`, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/fork", ``, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/label", `{"entryId":"u1","label":7}`, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/compact", `{"maxLines":1,"summary":"s"}`, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/" + key + "/reset", `{"why":"x"}`, 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/agent:main:nobody/reset", ``, 404, abi.CodeSessionNotFound},
		{"POST", "/v1/chats/import", `{"kind":"header","version":4,"id":"h1"}` + "\n", 400, abi.CodeInvalidArgument},
		{"POST", "/v1/chats/import?key=Bad+Key!", branching, 400, abi.CodeInvalidArgument},
		{"DELETE", "/v1/chats/" + key, "", 404, abi.CodeInvalidArgument},
	} {
		w := e.do(t, tc.method, tc.path, tc.body)
		checkError(t, w.Code, w.Header(), w.Body.Bytes(), tc.status, tc.code, errorSession(w.Body.Bytes()))
		if t.Failed() {
			t.Fatalf("%s %s", tc.method, tc.path)
		}
	}
	// A handler without a conversation service serves no chat route.
	h := gateway.Handler(gateway.Options{})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://nexus/v1/chats", nil))
	checkError(t, w.Code, w.Header(), w.Body.Bytes(), 404, abi.CodeInvalidArgument, "")
}

// errorSession is the session id an error answer names (the chat's, when one is involved).
func errorSession(body []byte) string {
	var r abi.ControlResponse
	if json.Unmarshal(body, &r) != nil || len(r.Errors) == 0 {
		return ""
	}
	return r.Errors[0].SessionID
}

// countingWriter is a ResponseWriter that keeps only sizes: how much, in how many writes, the
// largest.
type countingWriter struct {
	hdr           http.Header
	status        int
	total, writes int
	largest       int
	tail          []byte
}

func (c *countingWriter) Header() http.Header { return c.hdr }
func (c *countingWriter) WriteHeader(s int)   { c.status = s }
func (c *countingWriter) Write(p []byte) (int, error) {
	c.total += len(p)
	c.writes++
	c.largest = max(c.largest, len(p))
	c.tail = append(c.tail, p...)
	if len(c.tail) > 256 {
		c.tail = c.tail[len(c.tail)-256:]
	}
	return len(p), nil
}

// TestChatHistoryStreams: a context of 24 MB leaves the handler in writes of at most a
// buffer's size, as it is read, never gathered into one answer.
func TestChatHistoryStreams(t *testing.T) {
	e := newChatEnv(t, gateway.Options{}, conversation.Options{})
	var b bytes.Buffer
	b.WriteString(`{"type":"session","version":3,"id":"big","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n")
	parent := "null"
	const n = 6000
	pad := strings.Repeat("p", 4000)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%08x", i)
		fmt.Fprintf(&b, `{"type":"message","id":"%s","parentId":%s,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"m%d %s","timestamp":%d}}`+"\n", id, parent, i, pad, i)
		parent = `"` + id + `"`
	}
	w := e.do(t, "POST", "/v1/chats/import", b.String())
	if w.Code != http.StatusOK {
		t.Fatalf("import: %d %s", w.Code, w.Body)
	}
	cw := &countingWriter{hdr: http.Header{}}
	e.h.ServeHTTP(cw, httptest.NewRequest("GET", "http://nexus/v1/chats/big/history", nil))
	if cw.status != http.StatusOK || !bytes.HasSuffix(cw.tail, []byte(fmt.Sprintf(`{"end":{"count":%d}}`+"\n", n))) {
		t.Fatalf("history: %d, ends %q", cw.status, cw.tail)
	}
	if cw.total < n*4000 || cw.largest > 512<<10 || cw.writes < cw.total/(512<<10) {
		t.Fatalf("%d bytes in %d writes, the largest %d: not streamed", cw.total, cw.writes, cw.largest)
	}
}

// rawConn sends a raw request on a new connection to addr.
func rawConn(t *testing.T, network, addr, head string, body []byte) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads one response from c; the deadline only keeps a broken gateway from hanging
// the test.
func readAnswer(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(testkit.Patience()))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, b
}

// TestChatImportBounds: an import body beyond the service's bound is refused with 413 without
// reading the rest; one that stops arriving is cut off after the body timeout; neither leaves a
// temporary file.
func TestChatImportBounds(t *testing.T) {
	e := newChatEnv(t, gateway.Options{BodyTimeout: 200 * time.Millisecond}, conversation.Options{MaxImportSize: 64 << 10})
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	// 100 KiB sent of 10 MiB announced: the answer comes without the rest.
	c := rawConn(t, "tcp", addr, "POST /v1/chats/import HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10485760\r\n\r\n", bytes.Repeat([]byte("x"), 100<<10))
	resp, body := readAnswer(t, c)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"INVALID_ARGUMENT"`) || !strings.Contains(string(body), "65536") {
		t.Fatalf("oversize import: %d %s", resp.StatusCode, body)
	}
	// Half a transcript, then nothing.
	c = rawConn(t, "tcp", addr, "POST /v1/chats/import HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n", []byte(branching[:200]))
	resp, body = readAnswer(t, c)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"CONNECTION_LOST"`) {
		t.Fatalf("stalled import: %d %s", resp.StatusCode, body)
	}
	names, _ := filepath.Glob(filepath.Join(e.dir, ".import-*"))
	sessions, _ := filepath.Glob(filepath.Join(e.dir, "*.jsonl"))
	if len(names)+len(sessions) > 0 {
		t.Fatalf("files left: %v %v", names, sessions)
	}
	// Within the bound, the same connection path works.
	w := e.do(t, "POST", "/v1/chats/import", branching)
	if w.Code != http.StatusOK {
		t.Fatalf("import within the bound: %d %s", w.Code, w.Body)
	}
}

// TestChatAuth: on TCP the chat routes want the token like every route, checked from the
// headers before an import's body is read; without one nothing is imported.
func TestChatAuth(t *testing.T) {
	token := strings.Repeat("t", 40)
	e := newChatEnv(t, gateway.Options{Token: token}, conversation.Options{})
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := rawConn(t, "tcp", addr, "POST /v1/chats/import HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n", []byte(branching[:100]))
	resp, body := readAnswer(t, c)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "AUTHENTICATION_INVALID") {
		t.Fatalf("import without token: %d %s", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer " + token, 200}} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/chats", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("GET /v1/chats with %q: %d, want %d", tc.auth, resp.StatusCode, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(e.dir, "branch-uuid.jsonl")); err == nil {
		t.Fatal("an unauthenticated import was carried out")
	}
}
