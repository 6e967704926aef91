package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/testkit"
)

func TestGatewayMCPURL(t *testing.T) {
	a := &app{stateDir: t.TempDir()}
	if _, err := a.gatewayMCPURL(""); err == nil || !strings.Contains(err.Error(), "no gateway is running") {
		t.Errorf("no gateway: %v", err)
	}
	for _, c := range []struct{ listen, want string }{
		{"", ""},
		{"0.0.0.0:7777", "http://127.0.0.1:7777/v1/mcp"},
		{"[::]:7777", "http://127.0.0.1:7777/v1/mcp"},
		{"[::1]:80", "http://[::1]:80/v1/mcp"},
		{"127.0.0.1:4100", "http://127.0.0.1:4100/v1/mcp"},
	} {
		b, _ := json.Marshal(gateway.Info{PID: 7, Listen: c.listen})
		if err := os.WriteFile(filepath.Join(a.stateDir, gateway.InfoFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := a.gatewayMCPURL("")
		if c.want == "" {
			if err == nil || !strings.Contains(err.Error(), "unix socket only") {
				t.Errorf("listen %q: %q %v", c.listen, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("listen %q: %q %v, want %q", c.listen, got, err, c.want)
		}
	}
	for base, want := range map[string]string{"http://h:1": "http://h:1/v1/mcp", "https://h/custom/mcp": "https://h/custom/mcp", "ftp://h": "", "h:1": ""} {
		got, err := a.gatewayMCPURL(base)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("--url %q: %q %v, want %q", base, got, err, want)
		}
	}
}

// The printed configuration gives the client the token: Claude Code's command line, run by a
// shell, passes the header with the token file's content (a path with a blank included).
func TestMCPHTTPSetup(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash not found")
	}
	dir := filepath.Join(t.TempDir(), "a state dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, gateway.TokenFile)
	if err := os.WriteFile(tokenFile, []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mcpHTTPSetup{url: "http://127.0.0.1:4100/v1/mcp", tokenFile: tokenFile}
	var out, note bytes.Buffer
	if err := writeMCPHTTPSetup(&out, &note, "claude", s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String()+note.String(), "s3cr3t") {
		t.Fatal("the token was printed")
	}
	args, err := exec.Command(bash, "-c", `claude() { printf '%s\n' "$@"; }; `+out.String()).Output() //nolint:gosec // G204: the line under test
	if err != nil {
		t.Fatal(err)
	}
	want := "mcp\nadd\n--transport\nhttp\nnexus\nhttp://127.0.0.1:4100/v1/mcp\n--header\nAuthorization: Bearer s3cr3t\n"
	if string(args) != want {
		t.Errorf("claude's arguments:\n%s\nwant\n%s", args, want)
	}

	out.Reset()
	if err := writeMCPHTTPSetup(&out, &note, "cursor", s); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		MCPServers map[string]struct {
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.MCPServers["nexus"].URL != s.url ||
		doc.MCPServers["nexus"].Headers["Authorization"] != "Bearer ${env:NEXUS_TOKEN}" {
		t.Errorf("cursor: %s %v", out.String(), err)
	}
	out.Reset()
	if err := writeMCPHTTPSetup(&out, &note, "codex", s); err != nil {
		t.Fatal(err)
	}
	if out.String() != "[mcp_servers.nexus]\nurl = \"http://127.0.0.1:4100/v1/mcp\"\nbearer_token_env_var = \"NEXUS_TOKEN\"\n" {
		t.Errorf("codex: %q", out.String())
	}
	if !strings.Contains(note.String(), `export NEXUS_TOKEN="$(cat '`+tokenFile+`')"`) ||
		!strings.Contains(note.String(), `default_tools_approval_mode = "approve"`) {
		t.Errorf("notes: %s", note.String())
	}
}
