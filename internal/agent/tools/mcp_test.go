package tools_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"text to echo"`
}

// mcpSession serves a real go-sdk MCP server with two tools over in-memory transports and
// returns the connected client session.
func mcpSession(t *testing.T) *sdk.ClientSession {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "fs", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "echo", Description: "echoes"}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	sdk.AddTool(srv, &sdk.Tool{Name: "read_file", Description: "the server's own read_file"}, func(_ context.Context, _ *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "server read_file"}}}, nil, nil
	})
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	mustOK(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "nexus-test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	mustOK(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// A builtin shadowing an MCP name, to see the dispatcher order: built-ins resolve first.
type shadow struct{}

func (shadow) Spec() tools.Spec {
	return tools.Spec{Name: "mcp_fs_echo", Description: "builtin", Schema: &jsonschemaObject}
}

func (shadow) Run(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{Output: "builtin wins"}, nil
}

func TestMCPTools(t *testing.T) {
	f := newFixture(t)
	r := registry(t, f, permission.YOLO, nil)
	mustOK(t, r.AddMCP(t.Context(), tools.NewMCPClient("fs", mcpSession(t))))

	res, err := call(t, r, nil, "mcp_fs_read_file", `{"text":"x"}`, "")
	mustOK(t, err)
	if res.Output != "server read_file" {
		t.Fatalf("mcp_fs_read_file = %q", res.Output)
	}
	res, err = call(t, r, nil, "read_file", `{"path":"src/a.go"}`, "")
	mustOK(t, err)
	if !strings.Contains(res.Output, "package a") {
		t.Fatalf("read_file resolved to the server's: %q", res.Output)
	}
	res, err = call(t, r, nil, "mcp_fs_echo", `{"text":"hi"}`, "")
	mustOK(t, err)
	if res.Output != "echo: hi" {
		t.Fatalf("mcp_fs_echo = %q", res.Output)
	}
	// The server's schema is checked before the call goes out.
	if _, err := r.Prepare("mcp_fs_echo", json.RawMessage(`{"text":5}`), nil); err == nil || !strings.Contains(err.Error(), "invalid arguments") {
		t.Fatalf("bad MCP arguments: %v", err)
	}
	var names []string
	for _, s := range r.Specs() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); !strings.HasPrefix(got, "read_file,write_file") || !strings.Contains(got, "mcp_fs_echo") {
		t.Fatalf("specs %s", got)
	}

	// A built-in registered under an MCP tool's name wins.
	r2 := registry(t, f, permission.YOLO, nil)
	mustOK(t, r2.AddMCP(t.Context(), tools.NewMCPClient("fs", mcpSession(t))))
	mustOK(t, r2.Add(shadow{}))
	res, err = call(t, r2, nil, "mcp_fs_echo", `{"text":"hi"}`, "")
	mustOK(t, err)
	if res.Output != "builtin wins" {
		t.Fatalf("mcp_fs_echo = %q, want the built-in", res.Output)
	}
	var specs []string
	for _, s := range r2.Specs() {
		specs = append(specs, s.Name+":"+s.Description)
	}
	if got := strings.Join(specs, ","); !strings.HasPrefix(got, "read_file:") || strings.Count(got, "mcp_fs_echo") != 1 ||
		!strings.Contains(got, "mcp_fs_echo:builtin,mcp_fs_read_file:") {
		t.Fatalf("specs (built-ins first, the shadowed MCP tool left out): %s", got)
	}
	if got := tools.MCPName("my server", "do.it"); got != "mcp_my_server_do_it" {
		t.Fatalf("MCPName = %q", got)
	}
}

func TestMCPToolPermissions(t *testing.T) {
	f := newFixture(t)
	// TRUSTED: each call asks until allow-exec-global names the tool.
	r := registry(t, f, permission.Trusted, nil)
	mustOK(t, r.AddMCP(t.Context(), tools.NewMCPClient("fs", mcpSession(t))))
	al := &permission.Allowances{}
	p, err := r.Prepare("mcp_fs_echo", json.RawMessage(`{"text":"a"}`), al)
	mustOK(t, err)
	if p.Decision.Verdict != permission.Ask || !slices.Equal(p.Decision.Request.Options, []permission.Answer{permission.Deny, permission.AllowOnce, permission.AllowExecGlobal}) {
		t.Fatalf("first call: %+v %+v", p.Decision, p.Decision.Request)
	}
	if _, err := call(t, r, al, "mcp_fs_echo", `{"text":"a"}`, permission.AllowOnce); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, r, al, "mcp_fs_echo", `{"text":"b"}`, permission.AllowExecGlobal); err != nil {
		t.Fatal(err)
	}
	res, err := call(t, r, al, "mcp_fs_echo", `{"text":"c"}`, "")
	mustOK(t, err)
	if res.Output != "echo: c" {
		t.Fatalf("output %q", res.Output)
	}
	if p, _ := r.Prepare("mcp_fs_read_file", json.RawMessage(`{"text":"a"}`), al); p.Decision.Verdict != permission.Ask {
		t.Fatal("allowing one MCP tool allowed another")
	}

	// SANDBOXED: neither offered nor run.
	rs := registry(t, f, permission.Sandboxed, nil)
	mustOK(t, rs.AddMCP(t.Context(), tools.NewMCPClient("fs", mcpSession(t))))
	if _, err := rs.Prepare("mcp_fs_echo", json.RawMessage(`{"text":"a"}`), nil); err == nil || !strings.Contains(err.Error(), "sandboxed") {
		t.Fatalf("sandboxed MCP call: %v", err)
	}
	for _, s := range rs.Specs() {
		if strings.HasPrefix(s.Name, "mcp_") {
			t.Fatalf("%s offered in sandboxed mode", s.Name)
		}
	}
}
