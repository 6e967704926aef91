package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// `nexus serve` takes the agent-shell flags with the prefix "mcp-", beside its own
// --max-sessions and --idle-timeout, and reads the same NEXUS_MCP_* variables.
func TestShellFlagsPrefixed(t *testing.T) {
	env := map[string]string{"NEXUS_MCP_MAX_SESSIONS": "9", "NEXUS_MCP_IDLE_TIMEOUT": "0s", "NEXUS_MCP_AUDIT_DIR": "rel/audit", "NEXUS_MCP_START_TIMEOUT": "7s"}
	a := &app{env: Env{Getenv: func(k string) string { return env[k] }}, stateDir: "/state"}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	live := fs.Int("max-sessions", 64, "")
	sf := shellFlags{prefix: "mcp-"}
	sf.bind(fs, fs)
	if err := fs.Parse([]string{"--mcp-shadow-dir", "/shadow"}); err != nil {
		t.Fatal(err)
	}
	if err := a.applyFlagEnv(fs, "mcp-"); err != nil {
		t.Fatal(err)
	}
	cfg, err := a.shellConfig(&sf)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("rel/audit")
	if *live != 64 || cfg.MaxSessions != 9 || cfg.IdleTimeout >= 0 || cfg.AuditDir != abs || cfg.ShadowDir != "/shadow" || cfg.SSH.StartTimeout != 7*time.Second {
		t.Errorf("live %d, shells %+v", *live, cfg)
	}
	for _, c := range []struct{ args, want string }{
		{"--mcp-max-sessions=0", "--mcp-max-sessions is 0"},
		{"--mcp-idle-timeout=-1s", "--mcp-idle-timeout is -1s"},
		{"--mcp-start-timeout=-1s", "--mcp-start-timeout must not be negative"},
		{"--mcp-policy=/nonexistent/policy.json", "policy"},
	} {
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		sf := shellFlags{prefix: "mcp-"}
		sf.bind(fs, fs)
		if err := fs.Parse([]string{c.args}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.shellConfig(&sf); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
	if p := runPrefixes(3); len(p) != 3 || p[0] == p[1] || p[1] == p[2] || p[0] == p[2] || len(p[0]) != 4 {
		t.Errorf("runPrefixes: %v", p)
	}
}
