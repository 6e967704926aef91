package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/shell"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/audit"
	"github.com/nexus-run/nexus/internal/testkit"
)

// newShells is the agent-shell server of a test gateway: real local shells, an audit log.
func newShells(t *testing.T) (*mcp.Server, string) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found: local shells run it")
	}
	auditDir := t.TempDir()
	s := mcp.New(mcp.Config{Session: agentshell.Config{AuditDir: auditDir, IdleTimeout: -1}, ProgressInterval: 20 * time.Millisecond})
	t.Cleanup(s.Close)
	return s, auditDir
}

func withShells(s *mcp.Server) func(*gateway.DaemonOptions) {
	return func(o *gateway.DaemonOptions) { o.Shells = s }
}

// unixHTTP is an HTTP client whose every request goes to the gateway's socket.
func unixHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func mcpConnect(t *testing.T, endpoint string, hc *http.Client) (*sdk.ClientSession, error) {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "gateway-test", Version: "v0"}, nil).
		Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %v", name, res.Content)
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %s: %v", name, b, err)
		}
	}
}

// MCP over the unix socket needs no token; the gateway lists the shells it opened and streams
// their audit lines, by long-poll and over a WebSocket, until the close record.
func TestMCPOverUnixSocket(t *testing.T) {
	shells, auditDir := newShells(t)
	dir := shortDir(t)
	d := startDaemon(t, dir, "", withShells(shells))
	sock := d.info.Socket
	cs, err := mcpConnect(t, "http://nexus"+abi.APIPrefix+"/mcp", unixHTTP(sock))
	if err != nil {
		t.Fatalf("connect over the socket: %v", err)
	}
	var created abi.Shell
	callTool(t, cs, "session_create", map[string]any{"transport": "local"}, &created)
	id := created.SessionID
	work := t.TempDir()
	callTool(t, cs, "session_exec", map[string]any{"session_id": id, "command": "cd " + work + " && export NX_GW=1"}, nil)
	var r shell.ExecResult
	callTool(t, cs, "session_exec", map[string]any{"session_id": id, "command": "pwd; echo $NX_GW"}, &r)
	if r.Stdout != work+"\n1\n" || r.Cwd != work {
		t.Fatalf("state across calls: %+v", r)
	}

	c := client.New(client.Target{Socket: sock})
	ctx := t.Context()
	list, err := c.Shells(ctx)
	if err != nil || len(list) != 1 || list[0].SessionID != id || list[0].Execs != 2 || list[0].Cwd != work {
		t.Fatalf("GET /v1/shells: %+v %v", list, err)
	}
	// ?logs=N adds the audit directory's logs (the console lists closed shells from them).
	for q, want := range map[string]int{"logs=10": http.StatusOK, "logs=x": http.StatusBadRequest, "logs=5000": http.StatusBadRequest} {
		resp, err := unixHTTP(sock).Get("http://nexus" + abi.APIPrefix + "/shells?" + q)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Logs []struct {
				ID string `json:"session_id"`
			} `json:"logs"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if resp.StatusCode != want || (want == http.StatusOK && (len(body.Logs) != 1 || body.Logs[0].ID != id)) {
			t.Fatalf("GET /v1/shells?%s: %d %+v", q, resp.StatusCode, body)
		}
	}
	got, err := c.Shell(ctx, id)
	if err != nil || got.SessionID != id || got.Transport != "local" {
		t.Fatalf("GET /v1/shells/{id}: %+v %v", got, err)
	}
	if _, err := c.Shell(ctx, "nosuch"); !client.IsCode(err, abi.CodeSessionNotFound) {
		t.Fatalf("an unknown shell: %v", err)
	}
	if _, err := c.ShellEvents(ctx, "../gateway", 0, 0, 0); !client.IsCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("an id naming a path: %v", err)
	}

	evs, err := c.ShellEvents(ctx, id, 0, 0, 0)
	if err != nil || len(evs.Events) != 3 || evs.Next != 3 || evs.Closed {
		t.Fatalf("events: %+v %v", evs, err)
	}
	for i, e := range evs.Events {
		var p gateway.ShellAuditPayload
		var rec audit.Record
		if e.Event != gateway.EventAudit || e.Seq != uint64(i+1) || e.SessionID != id || e.Timestamp == "" ||
			json.Unmarshal(e.Payload, &p) != nil || p.Type != gateway.PayloadShellAudit || json.Unmarshal(p.Record, &rec) != nil {
			t.Fatalf("event %d: %+v", i, e)
		}
		if want := []string{"open", "exec", "exec"}[i]; rec.Event != want || rec.SessionID != id {
			t.Fatalf("event %d: record %+v, want %s", i, rec, want)
		}
	}

	// A WebSocket stream from after=2 gets the second exec, then what follows, then closes.
	streamed := make(chan []abi.Event, 1)
	wsURL := "ws://nexus" + abi.APIPrefix + "/shells/" + id + "/stream?after=2"
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: unixHTTP(sock)})
	if err != nil {
		t.Fatalf("dial the shell stream: %v", err)
	}
	if resp.Body != nil {
		_ = resp.Body.Close()
	}
	go func() {
		defer func() { _ = conn.CloseNow() }()
		var got []abi.Event
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
					t.Errorf("stream ended with %v", err)
				}
				streamed <- got
				return
			}
			var e abi.Event
			if err := json.Unmarshal(data, &e); err != nil {
				t.Errorf("stream message %s: %v", data, err)
			}
			got = append(got, e)
		}
	}()
	// A long-poll waiting for line 4 gets it.
	polled := make(chan abi.EventsResponse, 1)
	go func() {
		r, err := c.ShellEvents(ctx, id, 3, 0, time.Minute)
		if err != nil {
			t.Error(err)
		}
		polled <- r
	}()
	callTool(t, cs, "session_exec", map[string]any{"session_id": id, "command": "echo four"}, nil)
	if p := <-polled; len(p.Events) != 1 || p.Events[0].Seq != 4 || !bytes.Contains(p.Events[0].Payload, []byte("echo four")) {
		t.Fatalf("long-poll: %+v", p)
	}
	callTool(t, cs, "session_destroy", map[string]any{"session_id": id}, nil)
	s := <-streamed
	if len(s) != 3 || s[0].Seq != 3 || s[2].Seq != 5 || !bytes.Contains(s[2].Payload, []byte(`"event":"close"`)) {
		t.Fatalf("stream: %+v", s)
	}
	if evs, err := c.ShellEvents(ctx, id, 5, 0, time.Minute); err != nil || len(evs.Events) != 0 || !evs.Closed || evs.Next != 5 {
		t.Fatalf("events after the close: %+v %v", evs, err)
	}
	if _, err := c.Shell(ctx, id); !client.IsCode(err, abi.CodeSessionClosed) || !strings.Contains(err.Error(), "destroyed") {
		t.Fatalf("a destroyed shell: %v", err)
	}
	if _, err := os.Stat(filepath.Join(auditDir, id+".jsonl")); err != nil {
		t.Fatal(err)
	}

	// Shutting the gateway down closes the shells (reason shutdown) and the MCP sessions' streams.
	callTool(t, cs, "session_create", map[string]any{"transport": "local"}, &created)
	d.stop(t)
	data, err := os.ReadFile(filepath.Join(auditDir, created.SessionID+".jsonl"))
	if err != nil || !bytes.Contains(data, []byte(`"event":"close","reason":"shutdown"`)) {
		t.Fatalf("audit log of a shell open at shutdown: %s %v", data, err)
	}
}

// On TCP, /v1/mcp and /v1/shells need the bearer token like every route; with it, a tool call
// may run past the body deadline (the body is in; the call is not cut).
func TestMCPOverTCPNeedsToken(t *testing.T) {
	shells, _ := newShells(t)
	dir := shortDir(t)
	d := startDaemon(t, dir, "127.0.0.1:0", withShells(shells), func(o *gateway.DaemonOptions) { o.BodyTimeout = time.Second })
	token, err := gateway.LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + d.info.Listen + abi.APIPrefix + "/mcp"
	if _, err := mcpConnect(t, endpoint, nil); err == nil {
		t.Fatal("connected without the token")
	}
	if _, err := mcpConnect(t, endpoint, &http.Client{Transport: bearer{"wrong", http.DefaultTransport}}); err == nil {
		t.Fatal("connected with a wrong token")
	}
	for _, path := range []string{"/mcp", "/shells", "/shells/x/events"} {
		method := http.MethodGet
		var body io.Reader
		if path == "/mcp" {
			method, body = http.MethodPost, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+d.info.Listen+abi.APIPrefix+path, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var er abi.ControlResponse
		err = json.NewDecoder(resp.Body).Decode(&er)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != nil || len(er.Errors) != 1 || er.Errors[0].Type != abi.CodeAuthenticationInvalid ||
			!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%s %s without the token: %d %+v %v", method, path, resp.StatusCode, er, err)
		}
	}
	cs, err := mcpConnect(t, endpoint, &http.Client{Transport: bearer{token, http.DefaultTransport}})
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	var created abi.Shell
	callTool(t, cs, "session_create", map[string]any{"transport": "local"}, &created)
	var r shell.ExecResult
	callTool(t, cs, "session_exec", map[string]any{"session_id": created.SessionID, "command": "sleep 2; echo slept"}, &r)
	if r.Stdout != "slept\n" {
		t.Fatalf("a call longer than the body deadline: %+v", r)
	}
	c := client.New(client.Target{URL: "http://" + d.info.Listen, Token: token})
	if list, err := c.Shells(t.Context()); err != nil || len(list) != 1 {
		t.Fatalf("GET /v1/shells with the token: %+v %v", list, err)
	}
}

// A gateway without shells has no /v1/mcp.
func TestNoShellsNoMCP(t *testing.T) {
	dir := shortDir(t)
	d := startDaemon(t, dir, "")
	c := client.New(client.Target{Socket: d.info.Socket})
	if _, err := c.Shells(t.Context()); !client.IsCode(err, abi.CodeInvalidArgument) || !strings.Contains(err.Error(), "no route") {
		t.Fatalf("GET /v1/shells without shells: %v", err)
	}
}

// tsDriver returns node's path and tools/mcp-client's, skipping (failing under CI) when either
// is missing: `make mcp-client-deps` installs the pinned SDK.
func tsDriver(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs("../../tools/mcp-client")
	if err != nil {
		t.Fatal(err)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		testkit.SkipUnlessCI(t, "node is not installed: the TypeScript MCP SDK test needs it")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		testkit.SkipUnlessCI(t, "the TypeScript MCP SDK is not installed (make mcp-client-deps, or npm ci --prefix tools/mcp-client)")
	}
	return node, dir
}

// The official TypeScript SDK's Streamable HTTP client, against a real gateway on TCP.
func TestMCPTypeScriptClient(t *testing.T) {
	node, tool := tsDriver(t)
	shells, _ := newShells(t)
	dir := shortDir(t)
	d := startDaemon(t, dir, "127.0.0.1:0", withShells(shells))
	token, err := gateway.LoadOrCreateToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cmd := exec.CommandContext(t.Context(), node, filepath.Join(tool, "driver.mjs"), "http://"+d.info.Listen+abi.APIPrefix+"/mcp", work) //nolint:gosec // G204: the test's own driver
	cmd.Env = append(os.Environ(), "NEXUS_TOKEN="+token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("driver: %v\n%s", err, stderr.String())
	}
	var got struct {
		Refused map[string]struct {
			Connected bool   `json:"connected"`
			Code      any    `json:"code"`
			Message   string `json:"message"`
		} `json:"refused"`
		MCPSessionID    string          `json:"mcpSessionId"`
		ProtocolVersion string          `json:"protocolVersion"`
		Tools           []string        `json:"tools"`
		ExecInputSchema json.RawMessage `json:"execInputSchema"`
		Created         abi.Shell       `json:"created"`
		State           struct {
			Structured shell.ExecResult `json:"structured"`
			Text       string           `json:"text"`
			IsError    bool             `json:"isError"`
		} `json:"state"`
		Progress struct {
			Notifications int    `json:"notifications"`
			Stdout        string `json:"stdout"`
		} `json:"progress"`
		Listed       mcp.ListOutput    `json:"listed"`
		Destroyed    mcp.DestroyOutput `json:"destroyed"`
		AfterDestroy struct {
			IsError bool   `json:"isError"`
			Text    string `json:"text"`
		} `json:"afterDestroy"`
		Logs []struct {
			Level string `json:"level"`
			Data  any    `json:"data"`
		} `json:"logs"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("driver output %s: %v", out, err)
	}
	t.Logf("TypeScript SDK: MCP session %s, protocol %s; refused without the token: %+v", got.MCPSessionID, got.ProtocolVersion, got.Refused)
	for _, name := range []string{"noToken", "wrongToken"} {
		r := got.Refused[name]
		if r.Connected || !strings.Contains(r.Message, "401") && fmt.Sprint(r.Code) != "401" {
			t.Errorf("%s: %+v, want a refusal with 401", name, r)
		}
	}
	if strings.Join(got.Tools, " ") != "session_checkpoint session_checkpoints session_create session_destroy session_exec session_list session_restore" {
		t.Errorf("tools %v", got.Tools)
	}
	if !bytes.Contains(got.ExecInputSchema, []byte(`"timeout_secs"`)) || got.MCPSessionID == "" {
		t.Errorf("session_exec schema %s, MCP session %q", got.ExecInputSchema, got.MCPSessionID)
	}
	s := got.State.Structured
	if s.Stdout != work+"\npersisted\n" || s.Stderr != "to-stderr\n" || s.ExitCode != 1 || s.Cwd != work || got.State.IsError ||
		!strings.Contains(got.State.Text, "exit_code: 1") {
		t.Errorf("state across calls: %+v", got.State)
	}
	if got.Progress.Notifications < 1 || got.Progress.Stdout != "done\n" {
		t.Errorf("progress: %+v", got.Progress)
	}
	if len(got.Listed.Sessions) != 1 || got.Listed.Sessions[0].SessionID != got.Created.SessionID || !got.Destroyed.Destroyed {
		t.Errorf("list %+v, destroyed %+v", got.Listed, got.Destroyed)
	}
	if !got.AfterDestroy.IsError || !strings.Contains(got.AfterDestroy.Text, "no session") {
		t.Errorf("exec after destroy: %+v", got.AfterDestroy)
	}
	found := false
	for _, l := range got.Logs {
		found = found || strings.Contains(fmt.Sprint(l.Data), "session created")
	}
	if !found {
		t.Errorf("no log notification for the new session: %+v", got.Logs)
	}
	if n := len(shells.Manager().List()); n != 0 {
		t.Errorf("%d shells left open", n)
	}
}
