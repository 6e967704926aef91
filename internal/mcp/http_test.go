package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/testkit"
)

// httpServer serves a fresh MCP server over Streamable HTTP on a loopback test server.
func httpServer(t *testing.T) (*mcp.Server, *httptest.Server, string) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found: local sessions run it")
	}
	audit := t.TempDir()
	s := mcp.New(mcp.Config{Session: agentshell.Config{AuditDir: audit, IdleTimeout: -1}})
	ts := httptest.NewServer(s.HTTPHandler(mcp.HTTPOptions{}))
	// The server first: it ends the clients' open event streams, which the test server's
	// Close would otherwise wait for.
	t.Cleanup(func() { s.Close(); ts.Close() })
	return s, ts, audit
}

func httpClient(t *testing.T, endpoint string, hc *http.Client) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "http-test", Version: "v0"}, nil).
		Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// The server over HTTP offers exactly what it offers over stdio, and shells keep their state
// between calls and between MCP sessions: they belong to the server.
func TestHTTPServesTheSameTools(t *testing.T) {
	_, ts, audit := httpServer(t)
	cs := httpClient(t, ts.URL, nil)
	overHTTP, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stdio := mcp.New(mcp.Config{Session: agentshell.Config{IdleTimeout: -1}})
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- stdio.Run(ctx, st) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stdio server: %v", err)
		}
	}()
	local, err := sdk.NewClient(&sdk.Implementation{Name: "in-memory", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = local.Close() }()
	inMemory, err := local.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(overHTTP.Tools)
	b, _ := json.Marshal(inMemory.Tools)
	if !bytes.Equal(a, b) || len(overHTTP.Tools) != 7 {
		t.Fatalf("tools over HTTP differ from the stdio server's:\nHTTP  %s\nstdio %s", a, b)
	}
	caps := cs.InitializeResult().Capabilities
	if caps.Tools == nil || caps.Logging == nil || caps.Resources != nil || caps.Prompts != nil { //nolint:staticcheck // SA1019: see New
		t.Fatalf("capabilities %+v", caps)
	}

	e := &e2e{t: t, ctx: t.Context(), cs: cs}
	dir := t.TempDir()
	var created abi.Shell
	e.ok("session_create", map[string]any{"transport": "local"}, &created)
	e.exec(created.SessionID, "cd "+dir+" && export NX_STATE=kept", nil)

	// A second MCP session (a client that reconnected) sees the shell and its state.
	cs2 := httpClient(t, ts.URL, nil)
	if cs2.ID() == cs.ID() || cs2.ID() == "" {
		t.Fatalf("MCP session ids %q and %q", cs.ID(), cs2.ID())
	}
	e2 := &e2e{t: t, ctx: t.Context(), cs: cs2}
	var list mcp.ListOutput
	e2.ok("session_list", map[string]any{}, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != created.SessionID {
		t.Fatalf("session_list from a second MCP session: %+v", list)
	}
	r := e2.exec(created.SessionID, "pwd; echo $NX_STATE; echo oops >&2; false", nil)
	if r.Stdout != dir+"\nkept\n" || r.Stderr != "oops\n" || r.ExitCode != 1 || r.Cwd != dir {
		t.Fatalf("exec from a second MCP session: %+v", r)
	}
	// Closing an MCP session leaves the shell.
	if err := cs2.Close(); err != nil {
		t.Fatal(err)
	}
	e.exec(created.SessionID, "true", nil)
	var destroyed mcp.DestroyOutput
	e.ok("session_destroy", map[string]any{"session_id": created.SessionID}, &destroyed)
	data, err := os.ReadFile(filepath.Join(audit, created.SessionID+".jsonl"))
	if err != nil || !bytes.Contains(data, []byte(`"event":"close"`)) || !bytes.Contains(data, []byte(`echo $NX_STATE`)) {
		t.Fatalf("audit log: %s %v", data, err)
	}
}

// rawPost posts body to the MCP endpoint in an MCP session and returns the HTTP status and
// the JSON-RPC message answered (from a JSON body or the first event of an event stream).
func rawPost(t *testing.T, url, sid, version, body string) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %.60q: %v", body, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				raw = []byte(d)
				break
			}
		}
	} else {
		raw, _ = io.ReadAll(resp.Body)
	}
	var msg map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &msg); err != nil {
			t.Fatalf("POST %.60q: answer %d %q is not JSON: %v", body, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, string(raw), msg
}

// Every body the stdio server refuses line by line is refused over HTTP too, with the same
// JSON-RPC error (HTTP 400, or 413 for one over the limit), and the MCP session and its shells
// go on as before.
func TestHTTPSurvivesMalformedBodies(t *testing.T) {
	_, ts, _ := httpServer(t)
	cs := httpClient(t, ts.URL, nil)
	e := &e2e{t: t, ctx: t.Context(), cs: cs}
	var created abi.Shell
	e.ok("session_create", map[string]any{"transport": "local"}, &created)
	e.exec(created.SessionID, "export MARK=kept", nil)
	version := cs.InitializeResult().ProtocolVersion

	extra := []badLine{
		{name: "a method the SDK does not know", line: `{"jsonrpc":"2.0","id":"m","method":"no/such"}`, code: -32601, id: "m"},
		{name: "a second initialize", line: `{"jsonrpc":"2.0","id":"i2","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`,
			code: 0, id: "i2", want: `"error"`},
		{name: "tools/call with params of the wrong type", line: `{"jsonrpc":"2.0","id":"p","method":"tools/call","params":[1]}`, code: -32602, id: "p"},
	}
	for i, bl := range append(badLines(), extra...) {
		status, raw, msg := rawPost(t, ts.URL, cs.ID(), version, bl.line)
		switch {
		case bl.code == 0 && bl.want == "": // a blank body, a response to nothing
			if strings.TrimSpace(bl.line) == "" {
				checkError(t, bl.name, raw, msg, -32700, nil)
			} else if status != http.StatusAccepted {
				t.Fatalf("%s: status %d %s, want 202", bl.name, status, raw)
			}
		case bl.want != "":
			if msg["id"] != bl.id || !strings.Contains(raw, bl.want) {
				t.Fatalf("%s: answer %d %s, want id %v and %q", bl.name, status, raw, bl.id, bl.want)
			}
		case bl.batch != nil: // batches are not part of this protocol version: one refusal
			if status != http.StatusBadRequest {
				t.Fatalf("%s: status %d", bl.name, status)
			}
			checkError(t, bl.name, raw, msg, -32600, nil)
		default:
			want := http.StatusBadRequest
			if len(bl.line) > mcp.MaxMessageBytes {
				want = http.StatusRequestEntityTooLarge
			}
			if bl.code == -32601 && bl.id == "res" || bl.code == -32602 || bl.name == "prompts/list" {
				want = http.StatusOK // answered in the session's stream, as any call
			}
			if status != want {
				t.Fatalf("%s: status %d, want %d (%.200s)", bl.name, status, want, raw)
			}
			checkError(t, bl.name, raw, msg, bl.code, bl.id)
		}
		r := e.exec(created.SessionID, fmt.Sprintf("echo alive-%d $MARK", i), nil)
		if r.Stdout != fmt.Sprintf("alive-%d kept\n", i) {
			t.Fatalf("after %s: session_exec %+v", bl.name, r)
		}
	}
}

// A request whose id is already in flight in the same MCP session does not disturb the first
// one, nor the session.
func TestHTTPDuplicateRequestID(t *testing.T) {
	_, ts, _ := httpServer(t)
	cs := httpClient(t, ts.URL, nil)
	e := &e2e{t: t, ctx: t.Context(), cs: cs}
	var created abi.Shell
	e.ok("session_create", map[string]any{"transport": "local"}, &created)
	dir := t.TempDir()
	fifo, started := filepath.Join(dir, "gate"), filepath.Join(dir, "started")
	e.exec(created.SessionID, "mkfifo "+fifo, nil)
	version := cs.InitializeResult().ProtocolVersion
	call := func(cmd string) string {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
			"params": map[string]any{"name": "session_exec", "arguments": map[string]any{"session_id": created.SessionID, "command": cmd}}})
		return string(b)
	}
	var wg sync.WaitGroup
	var first string
	wg.Go(func() {
		_, first, _ = rawPost(t, ts.URL, cs.ID(), version, call("touch "+started+"; read x < "+fifo+"; echo got $x"))
	})
	testkit.Eventually(t, "the first call to run", func() bool { _, err := os.Stat(started); return err == nil })
	status, second, msg := rawPost(t, ts.URL, cs.ID(), version, call("echo second"))
	if err := os.WriteFile(fifo, []byte("one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !strings.Contains(first, `got one`) {
		t.Fatalf("the first call's answer: %s", first)
	}
	// The SDK refuses the second (it could not route two answers to one id); the guard makes
	// the refusal a JSON-RPC error.
	if status != http.StatusBadRequest {
		t.Fatalf("a second request with id 7 in flight: status %d, %s", status, second)
	}
	checkError(t, "duplicate id", second, msg, -32600, float64(7))
	r := e.exec(created.SessionID, "echo still", nil)
	if r.Stdout != "still\n" {
		t.Fatalf("after a duplicate id: %+v", r)
	}
}

// Close ends the MCP sessions' open event streams (the standalone GET stream a client keeps),
// so a server embedding the handler can shut down.
func TestHTTPCloseEndsStreams(t *testing.T) {
	s, ts, _ := httpServer(t)
	cs := httpClient(t, ts.URL, nil)
	e := &e2e{t: t, ctx: t.Context(), cs: cs}
	var created abi.Shell
	e.ok("session_create", map[string]any{"transport": "local"}, &created)
	s.Close()
	ts.Close() // returns once every connection is idle: the streams ended
	if n := len(s.Manager().List()); n != 0 {
		t.Fatalf("%d shells left after Close", n)
	}
}
