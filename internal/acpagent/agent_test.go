package acpagent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/testkit"
)

// fakeGateway answers what opening a session needs (a conversation's show, a session's
// create) and records the creation options.
type fakeGateway struct {
	mu      sync.Mutex
	creates []abi.AIChatOptions
}

func (f *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions":
		var req abi.CreateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		var o abi.AIChatOptions
		_ = json.Unmarshal(req.Options, &o)
		f.mu.Lock()
		f.creates = append(f.creates, o)
		f.mu.Unlock()
		key := req.Context.ChatID
		if key == "" {
			key = "agent:shell:ai:000000000001"
		}
		_ = json.NewEncoder(w).Encode(abi.Session{SessionID: "live-1", Type: abi.TypeAIChat,
			Metadata: map[string]any{"chatKey": key, "level": "trusted", "workspacePath": o.Workspace}})
	case r.Method == http.MethodGet:
		_, _ = w.Write([]byte(`{"key":"x","file":""}`))
	default:
		http.NotFound(w, r)
	}
}

func fakeAgent(t *testing.T, opts abi.AIChatOptions) (*Agent, *fakeGateway) {
	t.Helper()
	sock := filepath.Join(testkit.ShortTempDir(t), "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeGateway{}
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: f}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return New(Config{Client: client.New(client.Target{Socket: sock}), Options: opts}), f
}

// The options a session opens with: the command's, the editor's cwd as the workspace; a
// conversation opened again by its key keeps its own agent (the key names it), whatever agent
// the command names (before: "chat ... belongs to agent main, not shell").
func TestOpenOptions(t *testing.T) {
	a, f := fakeAgent(t, abi.AIChatOptions{Agent: "shell", Backend: "local", Level: "trusted"})
	ctx := t.Context()
	res, err := a.NewSession(ctx, acp.NewSessionRequest{Cwd: "/src/app", McpServers: []acp.McpServer{
		{Stdio: &acp.McpServerStdio{Name: "fs", Command: "/usr/bin/mcp-fs", Args: []string{"--root", "/src"}, Env: []acp.EnvVariable{{Name: "TOKEN", Value: "t"}}}},
		{Http: &acp.McpServerHttpInline{Name: "web", Type: "http", Url: "https://mcp.example.com/mcp", Headers: []acp.HttpHeader{{Name: "Authorization", Value: "Bearer t"}}}},
		{Sse: &acp.McpServerSseInline{Name: "old", Type: "sse", Url: "http://127.0.0.1:9/sse"}},
		{Acp: &acp.McpServerAcpInline{Name: "peer", Type: "acp"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.Meta["nexus"].(map[string]any); fmt.Sprint(n["mcpServers"]) != "map[notConnected:[peer] why:not connected: nexus connects an editor's stdio, http and sse MCP servers (not acp)]" {
		t.Errorf("meta %v", res.Meta)
	}
	// A new mode reopens the session with the editor's servers again.
	if _, err := a.SetSessionMode(ctx, acp.SetSessionModeRequest{SessionId: res.SessionId, ModeId: "yolo"}); err == nil {
		t.Error("the fake gateway's level (trusted) was taken for yolo")
	}
	if _, err := a.ResumeSession(ctx, acp.ResumeSessionRequest{SessionId: "agent:main:ai:0123456789ab", Cwd: "/src/other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NewSession(ctx, acp.NewSessionRequest{Cwd: "relative/dir"}); err == nil {
		t.Error("a relative cwd was taken")
	}
	fs := []abi.AIMCPServer{{Name: "fs", Command: "/usr/bin/mcp-fs", Args: []string{"--root", "/src"}, Env: map[string]string{"TOKEN": "t"}},
		{Name: "web", Type: abi.MCPHTTP, URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer t"}},
		{Name: "old", Type: abi.MCPSSE, URL: "http://127.0.0.1:9/sse"}}
	want := []abi.AIChatOptions{
		{Agent: "shell", Backend: "local", Level: "trusted", Workspace: "/src/app", MCPServers: fs},
		{Backend: "local", Level: "yolo", Workspace: "/src/app", MCPServers: fs},
		{Backend: "local", Level: "trusted", Workspace: "/src/other"},
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.creates) != len(want) {
		t.Fatalf("creates %+v, want %+v", f.creates, want)
	}
	for i := range want {
		if !reflect.DeepEqual(f.creates[i], want[i]) {
			t.Errorf("create %d: %+v, want %+v", i, f.creates[i], want[i])
		}
	}
}

// initialize advertises the MCP transports clientMCP passes on: an editor sends HTTP and SSE
// servers only to an agent that says it takes them (before: none advertised).
func TestInitializeMCPCapabilities(t *testing.T) {
	a, _ := fakeAgent(t, abi.AIChatOptions{})
	res, err := a.Initialize(t.Context(), acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.AgentCapabilities.McpCapabilities; !got.Http || !got.Sse {
		t.Fatalf("mcpCapabilities %+v, want http and sse", got)
	}
}
