package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/testkit"
)

// A line a client may send that is not a message the server can take, and what it answers.
type badLine struct {
	name string
	line string
	code int // the error code answered; 0: answered normally (want) or not at all (want == "")
	id   any // the id of the error answer (nil: null)
	// batch: the answer is an array of errors with these ids.
	batch []string
	// want, for a line that is a valid message after all: a substring of its answer.
	want string
}

func badLines() []badLine {
	huge := strings.Repeat("x", mcp.MaxMessageBytes+1)
	return []badLine{
		{name: "garbage", line: "garbage{{{", code: -32700},
		{name: "truncated JSON", line: `{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"session_exec"`, code: -32700},
		{name: "20,000-deep array", line: strings.Repeat("[", 20000), code: -32700},
		{name: "20,000-deep object", line: strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000), code: -32700},
		{name: "1,500-deep closed array", line: strings.Repeat("[", 1500) + strings.Repeat("]", 1500), code: -32700},
		{name: "huge line", line: huge, code: -32700},
		{name: "huge request", line: `{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"session_exec","arguments":{"command":"echo ` + huge + `"}}}`,
			code: -32700, id: "big"},
		{name: "two values on a line", line: `{"jsonrpc":"2.0","method":"notifications/initialized"} {"x":1}`, code: -32700},
		{name: "byte order mark", line: "\xef\xbb\xbf" + `{"jsonrpc":"2.0","id":"bom","method":"ping"}`, code: -32700},
		{name: "a string", line: `"hello"`, code: -32600},
		{name: "a number", line: `42`, code: -32600},
		{name: "null", line: `null`, code: -32600},
		{name: "empty object", line: `{}`, code: -32600},
		{name: "JSON-RPC 1.0", line: `{"jsonrpc":"1.0","id":"v1","method":"tools/list"}`, code: -32600, id: "v1"},
		{name: "object id", line: `{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, code: -32600},
		{name: "empty batch", line: `[]`, code: -32600},
		{name: "batch of numbers", line: `[1,2,3]`, code: -32600},
		{name: "batch under a protocol without batches", line: `[{"jsonrpc":"2.0","id":"b1","method":"tools/list"},{"jsonrpc":"2.0","id":"b2","method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
			code: -32600, batch: []string{"b1", "b2"}},
		{name: "blank line", line: "   \t"},
		{name: "a response to nothing", line: `{"jsonrpc":"2.0","id":999,"result":{}}`},
		{name: "trailing blanks", line: `{"jsonrpc":"2.0","id":"sp","method":"ping"}   `, id: "sp", want: `"result":{}`},
		{name: "CRLF", line: `{"jsonrpc":"2.0","id":"crlf","method":"ping"}` + "\r", id: "crlf", want: `"result":{}`},
		{name: "resources/list", line: `{"jsonrpc":"2.0","id":"res","method":"resources/list"}`, code: -32601, id: "res"},
		{name: "prompts/list", line: `{"jsonrpc":"2.0","id":"pr","method":"prompts/list"}`, code: -32601, id: "pr"},
	}
}

// rawClient speaks newline-delimited JSON-RPC to a server as bytes.
type rawClient struct {
	t     *testing.T
	w     io.Writer
	lines chan string
	next  int
	notes []map[string]any // notifications received
}

func newRawClient(t *testing.T, w io.Writer, r io.Reader) *rawClient {
	t.Helper()
	c := &rawClient{t: t, w: w, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		br := bufio.NewReaderSize(r, 1<<20)
		for {
			l, err := br.ReadString('\n')
			if l != "" {
				c.lines <- l
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *rawClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.w, line+"\n"); err != nil {
		c.t.Fatalf("send %.60q: %v", line, err)
	}
}

// recv returns the next message that is not a notification (recorded in notes).
func (c *rawClient) recv() (raw string, msg any) {
	c.t.Helper()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.t.Fatal("the server closed its output (it stopped)")
			}
			if err := json.Unmarshal([]byte(l), &msg); err != nil {
				c.t.Fatalf("the server wrote a line that is not JSON: %q: %v", l, err)
			}
			if m, ok := msg.(map[string]any); ok && m["method"] != nil && m["id"] == nil {
				c.notes = append(c.notes, m)
				continue
			}
			return l, msg
		case <-time.After(testkit.Patience()):
			c.t.Fatal("no answer from the server")
		}
	}
}

// call sends a request and returns its answer's result, failing on an error answer.
func (c *rawClient) call(method string, params any) map[string]any {
	c.t.Helper()
	c.next++
	id := c.next
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	c.send(string(b))
	raw, msg := c.recv()
	m, _ := msg.(map[string]any)
	if m == nil || m["id"] != float64(id) {
		c.t.Fatalf("%s: got %s, want the answer to id %d", method, raw, id)
	}
	res, ok := m["result"].(map[string]any)
	if !ok {
		c.t.Fatalf("%s: %s", method, raw)
	}
	return res
}

// tool calls a tool and returns its structured content, failing on a tool error.
func (c *rawClient) tool(name string, args map[string]any) map[string]any {
	c.t.Helper()
	res := c.call("tools/call", map[string]any{"name": name, "arguments": args})
	if res["isError"] == true {
		c.t.Fatalf("%s: tool error %v", name, res["content"])
	}
	sc, _ := res["structuredContent"].(map[string]any)
	return sc
}

// expect checks the server's answer to a bad line.
func (c *rawClient) expect(bl badLine) {
	c.t.Helper()
	if bl.code == 0 && bl.want == "" {
		return // nothing is answered; the next call shows the server is alive
	}
	raw, msg := c.recv()
	if bl.want != "" {
		m, _ := msg.(map[string]any)
		if m == nil || m["id"] != bl.id || !strings.Contains(raw, bl.want) {
			c.t.Fatalf("%s: answer %s, want id %v and %q", bl.name, raw, bl.id, bl.want)
		}
		return
	}
	if bl.batch != nil {
		arr, _ := msg.([]any)
		if len(arr) != len(bl.batch) {
			c.t.Fatalf("%s: answer %s, want %d errors", bl.name, raw, len(bl.batch))
		}
		for i, e := range arr {
			checkError(c.t, bl.name, raw, e, bl.code, bl.batch[i])
		}
		return
	}
	checkError(c.t, bl.name, raw, msg, bl.code, bl.id)
}

func checkError(t *testing.T, name, raw string, msg any, code int, id any) {
	t.Helper()
	m, _ := msg.(map[string]any)
	e, _ := m["error"].(map[string]any)
	if e == nil || e["code"] != float64(code) || m["jsonrpc"] != "2.0" {
		t.Fatalf("%s: answer %.300s, want error code %d", name, raw, code)
	}
	if got, ok := m["id"]; !ok || got != id {
		t.Fatalf("%s: answer %.300s, want id %v", name, raw, id)
	}
	if msg, _ := e["message"].(string); msg == "" || len(msg) > 1000 {
		t.Fatalf("%s: error message %.300q", name, msg)
	}
}

// framingScenario: a session is opened, then after each bad line the server answers as it
// should and the session still runs commands, with its state.
func framingScenario(t *testing.T, c *rawClient) {
	t.Helper()
	init := c.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "0"}})
	caps, _ := init["capabilities"].(map[string]any)
	if caps["tools"] == nil || caps["logging"] == nil || caps["resources"] != nil || caps["prompts"] != nil {
		t.Fatalf("capabilities %v: want tools and logging, no resources or prompts", caps)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	c.call("logging/setLevel", map[string]any{"level": "info"})
	info := c.tool("session_create", map[string]any{"transport": "local"})
	sid, _ := info["session_id"].(string)
	if sid == "" {
		t.Fatalf("session_create: %v", info)
	}
	if !slicesContainsLog(c.notes, "session created") {
		t.Errorf("no log message for the new session at level info: %v", c.notes)
	}
	c.tool("session_exec", map[string]any{"session_id": sid, "command": "export MARK=kept"})
	for i, bl := range badLines() {
		c.send(bl.line)
		c.expect(bl)
		r := c.tool("session_exec", map[string]any{"session_id": sid, "command": fmt.Sprintf("echo alive-%d $MARK", i)})
		if r["stdout"] != fmt.Sprintf("alive-%d kept\n", i) {
			t.Fatalf("after %s: session_exec %v", bl.name, r)
		}
	}
}

func slicesContainsLog(notes []map[string]any, msg string) bool {
	for _, n := range notes {
		if n["method"] != "notifications/message" {
			continue
		}
		b, _ := json.Marshal(n["params"])
		if strings.Contains(string(b), msg) {
			return true
		}
	}
	return false
}

// TestStdioSurvivesMalformedLines drives ServeStdio over pipes with raw bytes.
func TestStdioSurvivesMalformedLines(t *testing.T) {
	s := mcp.New(mcp.Config{Session: agentshell.Config{AuditDir: t.TempDir(), IdleTimeout: -1}})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.ServeStdio(t.Context(), inR, outW)
		_ = outW.Close()
		done <- err
	}()
	c := newRawClient(t, inW, outR)
	framingScenario(t, c)
	if n := len(s.Manager().List()); n != 1 {
		t.Fatalf("%d sessions open, want 1", n)
	}
	_ = inW.Close()
	if err := await(t, done, "ServeStdio did not stop at the end of its input"); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
	if n := len(s.Manager().List()); n != 0 {
		t.Fatalf("%d sessions left open", n)
	}
}

// TestNexusMCPSurvivesMalformedLines: the same against a real `nexus mcp` process.
func TestNexusMCPSurvivesMalformedLines(t *testing.T) {
	bin := nexusBinary(t)
	home := t.TempDir()
	cmd := exec.Command(bin, "mcp", "--audit-dir", filepath.Join(home, "audit"), "--idle-timeout", "0") //nolint:gosec // G204: the binary built for the test
	cmd.Env = append(os.Environ(), "NEXUS_HOME="+home)
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			_ = cmd.Process.Kill()
			t.Logf("nexus mcp stderr:\n%s", stderr.String())
		}
	}()
	c := newRawClient(t, in, out)
	framingScenario(t, c)
	select {
	case err := <-exited:
		t.Fatalf("nexus mcp exited: %v", err)
	default:
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if err := await(t, exited, "nexus mcp did not exit at the end of its input"); err != nil {
		t.Fatalf("nexus mcp: %v", err)
	}
	if !strings.Contains(stderr.String(), "refused a message from the client") {
		t.Errorf("the operator's log does not mention the refused lines:\n%s", stderr.String())
	}
}

// await returns what done delivers, failing the test (what did not happen) if it never does.
func await(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(testkit.Patience()):
		t.Fatalf("gave up waiting: %s", what)
		return nil
	}
}

// injector sits between an SDK client and the server: it passes the client's lines on, adds
// lines of its own, and takes the answers to those out of the client's way (the SDK client
// would rightly fail on an answer to a request it never sent).
type injector struct {
	mu       sync.Mutex // serializes lines to the server
	toServer io.WriteCloser
	replies  chan string
}

func (j *injector) forwardClient(r io.Reader) {
	defer func() { _ = j.toServer.Close() }()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		l, err := br.ReadString('\n')
		if l != "" {
			j.mu.Lock()
			_, _ = io.WriteString(j.toServer, l)
			j.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (j *injector) forwardServer(r io.Reader, toClient io.WriteCloser, injected func(string) bool) {
	defer func() { _ = toClient.Close() }()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		l, err := br.ReadString('\n')
		if l != "" {
			if injected(l) {
				j.replies <- l
			} else if _, err := io.WriteString(toClient, l); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (j *injector) inject(line string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = io.WriteString(j.toServer, line+"\n")
}

// TestSDKClientSurvivesMalformedLines: an official SDK client keeps working, with its
// session, while malformed lines reach the server between its calls.
func TestSDKClientSurvivesMalformedLines(t *testing.T) {
	s := mcp.New(mcp.Config{Session: agentshell.Config{AuditDir: t.TempDir(), IdleTimeout: -1}})
	srvInR, srvInW := io.Pipe()
	srvOutR, srvOutW := io.Pipe()
	cliInR, cliInW := io.Pipe()   // server -> client
	cliOutR, cliOutW := io.Pipe() // client -> server
	done := make(chan error, 1)
	go func() {
		err := s.ServeStdio(t.Context(), srvInR, srvOutW)
		_ = srvOutW.Close()
		done <- err
	}()
	j := &injector{toServer: srvInW, replies: make(chan string, 4)}
	injectedIDs := map[any]bool{nil: true}
	for _, bl := range badLines() {
		injectedIDs[bl.id] = true
	}
	go j.forwardClient(cliOutR)
	go j.forwardServer(srvOutR, cliInW, func(l string) bool {
		if strings.HasPrefix(l, "[") {
			return true // the client sends no batches
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			return true
		}
		id, has := m["id"]
		return has && injectedIDs[id]
	})

	var logs testkit.Buffer
	client := sdk.NewClient(&sdk.Implementation{Name: "sdk-framing", Version: "v0"}, &sdk.ClientOptions{
		// Logging is deprecated from protocol 2026-07-28 but still served: this test checks it.
		LoggingMessageHandler: func(_ context.Context, r *sdk.LoggingMessageRequest) { //nolint:staticcheck // see above
			b, _ := json.Marshal(r.Params)
			_, _ = logs.Write(append(b, '\n'))
		},
	})
	ctx := t.Context()
	cs, err := client.Connect(ctx, &sdk.IOTransport{Reader: cliInR, Writer: cliOutW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	caps := cs.InitializeResult().Capabilities
	if caps.Tools == nil || caps.Logging == nil || caps.Resources != nil || caps.Prompts != nil { //nolint:staticcheck // SA1019: the Logging capability is what is tested
		t.Fatalf("capabilities %+v: want tools and logging only", caps)
	}
	if err := cs.SetLoggingLevel(ctx, &sdk.SetLoggingLevelParams{Level: "info"}); err != nil { //nolint:staticcheck // SA1019: see above
		t.Fatalf("logging/setLevel: %v", err)
	}
	if _, err := cs.ListResources(ctx, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("resources/list: %v, want method not found", err)
	}
	e := &e2e{t: t, ctx: ctx, cs: cs}
	var info abi.Shell
	// The client speaks a protocol version where the log level travels with each request.
	p := &sdk.CallToolParams{Name: "session_create", Arguments: map[string]any{"transport": "local"}, Meta: sdk.Meta{sdk.MetaKeyLogLevel: "info"}} //nolint:staticcheck // the deprecated logging feature is what is tested
	if res := e.callParams(p, &info); res.IsError || info.SessionID == "" {
		t.Fatalf("session_create: %s", text(res))
	}
	logs.WaitFor(t, "session created")
	e.exec(info.SessionID, "export MARK=kept", nil)
	for i, bl := range badLines() {
		j.inject(bl.line)
		if bl.code != 0 || bl.want != "" {
			select {
			case l := <-j.replies:
				var msg any
				if err := json.Unmarshal([]byte(l), &msg); err != nil {
					t.Fatalf("%s: %q", bl.name, l)
				}
				switch {
				case bl.want != "":
					if !strings.Contains(l, bl.want) {
						t.Fatalf("%s: answer %s, want %q", bl.name, l, bl.want)
					}
				case bl.batch == nil:
					checkError(t, bl.name, l, msg, bl.code, bl.id)
				}
			case <-time.After(testkit.Patience()):
				t.Fatalf("%s: no answer", bl.name)
			}
		}
		if r := e.exec(info.SessionID, fmt.Sprintf("echo alive-%d $MARK", i), nil); r.Stdout != fmt.Sprintf("alive-%d kept\n", i) {
			t.Fatalf("after %s: %+v", bl.name, r)
		}
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if err := await(t, done, "ServeStdio did not stop when the client closed"); err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
}

// TestStdioBatchUnderOldProtocol: under a protocol version with batches, a batch is served.
func TestStdioBatchUnderOldProtocol(t *testing.T) {
	s := mcp.New(mcp.Config{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		_ = s.ServeStdio(t.Context(), inR, outW)
		_ = outW.Close()
	}()
	defer func() { _ = inW.Close() }()
	c := newRawClient(t, inW, outR)
	c.call("initialize", map[string]any{"protocolVersion": "2025-03-26", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "0"}})
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	c.send(`[{"jsonrpc":"2.0","id":"p1","method":"ping"},{"jsonrpc":"2.0","id":"p2","method":"tools/list"}]`)
	raw, msg := c.recv()
	arr, _ := msg.([]any)
	if len(arr) != 2 || !strings.Contains(raw, `"id":"p1","result":{}`) || !strings.Contains(raw, "session_exec") {
		t.Fatalf("batch answer %.300s", raw)
	}
	// A batch reusing an id still in flight would end the SDK's connection: refused.
	c.send(`[{"jsonrpc":"2.0","id":"d","method":"ping"},{"jsonrpc":"2.0","id":"d","method":"ping"}]`)
	c.expect(badLine{name: "duplicate ids", code: -32600, batch: []string{"d", "d"}})
	c.call("ping", nil)
}
