package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/local/bin/nexus":   "/usr/local/bin/nexus",
		"/home/a b/nexus":        `'/home/a b/nexus'`,
		"/home/it's/nexus":       `'/home/it'\''s/nexus'`,
		"/opt/$HOME/`x`/nexus":   "'/opt/$HOME/`x`/nexus'",
		"":                       "''",
		"/x/nexus-1.2+3@host:ab": "/x/nexus-1.2+3@host:ab",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestTOMLString(t *testing.T) {
	for in, want := range map[string]string{
		`/usr/bin/nexus`:  `"/usr/bin/nexus"`,
		`C:\nexus "x"`:    `"C:\\nexus \"x\""`,
		"/tmp/a\tb\x7f/é": `"/tmp/a\u0009b\u007F/é"`,
	} {
		if got := tomlString(in); got != want {
			t.Errorf("tomlString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestMCPServersJSON(t *testing.T) {
	type doc struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	for _, tc := range []struct {
		name string
		l    mcpLaunchConfig
	}{
		{"plain", mcpLaunchConfig{exe: "/a&b/<nexus>", args: []string{"mcp"}}},
		{"env", mcpLaunchConfig{exe: "/x/nexus", args: []string{"mcp", "--audit-dir", "/a d"}, env: [][2]string{{"NEXUS_HOME", "/h"}, {"NEXUS_MCP_POLICY", "/p.json"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mcpServersJSON(tc.l)
			var d doc
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			n := d.MCPServers["nexus"]
			if n.Command != tc.l.exe || !slices.Equal(n.Args, tc.l.args) || len(n.Env) != len(tc.l.env) {
				t.Errorf("%s", b)
			}
			for _, e := range tc.l.env {
				if n.Env[e[0]] != e[1] {
					t.Errorf("env %s = %q, want %q", e[0], n.Env[e[0]], e[1])
				}
			}
			if b[len(b)-1] != '\n' {
				t.Error("no final newline")
			}
		})
	}
}

func TestCodexTOML(t *testing.T) {
	for _, tc := range []struct {
		l    mcpLaunchConfig
		want string
	}{
		{mcpLaunchConfig{exe: "/usr/bin/nexus", args: []string{"mcp"}}, "[mcp_servers.nexus]\ncommand = \"/usr/bin/nexus\"\nargs = [\"mcp\"]\n"},
		{mcpLaunchConfig{exe: `/o"d/nexus`, args: []string{"mcp", "--state-dir", "/s"}, env: [][2]string{{"NEXUS_MCP_KEY_DIR", "/k"}}},
			"[mcp_servers.nexus]\ncommand = \"/o\\\"d/nexus\"\nargs = [\"mcp\", \"--state-dir\", \"/s\"]\n\n[mcp_servers.nexus.env]\n\"NEXUS_MCP_KEY_DIR\" = \"/k\"\n"},
	} {
		if got := codexTOML(tc.l); got != tc.want {
			t.Errorf("codexTOML(%v) =\n%s\nwant\n%s", tc.l, got, tc.want)
		}
	}
}

func TestGoRunBuild(t *testing.T) {
	for path, want := range map[string]bool{
		"/tmp/go-build123456/b001/exe/nexus":          true,
		"/home/u/.cache/tmp/go-build9/b001/exe/nexus": true,
		"/home/u/go/bin/nexus":                        false,
		"/tmp/go-build1/b001/cli.test":                false,
		"/opt/exe/nexus":                              false,
	} {
		if got := goRunBuild(path); got != want {
			t.Errorf("goRunBuild(%s) = %v, want %v", path, got, want)
		}
	}
}

func TestAbsPathAndKnownHosts(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	if got := absPath("~/keys"); got != filepath.Join(home, "keys") {
		t.Errorf("absPath(~/keys) = %s", got)
	}
	if got := absPath("none"); got != "none" {
		t.Errorf("absPath(none) = %s", got)
	}
	wd, _ := os.Getwd()
	if got := absPath("rel"); got != filepath.Join(wd, "rel") {
		t.Errorf("absPath(rel) = %s", got)
	}
	if got := knownHostsFile(""); got != "" {
		t.Errorf("no ~/.ssh/known_hosts: %q", got)
	}
	kh := filepath.Join(home, ".ssh", "known_hosts")
	if err := os.MkdirAll(filepath.Dir(kh), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := knownHostsFile(""); got != kh {
		t.Errorf("default known_hosts = %q", got)
	}
	if got := knownHostsFile("NONE"); got != "" {
		t.Errorf("none = %q", got)
	}
	if got := knownHostsFile("/etc/kh"); got != "/etc/kh" {
		t.Errorf("explicit = %q", got)
	}
}

func TestApplyFlagEnv(t *testing.T) {
	env := map[string]string{"NEXUS_MCP_MAX_SESSIONS": "9", "NEXUS_MCP_IDLE_TIMEOUT": "5m", "NEXUS_MCP_KEY_DIR": "/env/keys"}
	a := &app{env: Env{Getenv: func(k string) string { return env[k] }}}
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	maxS := fs.Int("max-sessions", 64, "")
	idle := fs.Duration("idle-timeout", time.Minute, "")
	keys := fs.String("key-dir", "", "")
	if err := fs.Parse([]string{"--key-dir", "/flag/keys"}); err != nil {
		t.Fatal(err)
	}
	if err := a.applyFlagEnv(fs, ""); err != nil {
		t.Fatal(err)
	}
	if *maxS != 9 || *idle != 5*time.Minute || *keys != "/flag/keys" {
		t.Errorf("max %d idle %s keys %s", *maxS, *idle, *keys)
	}
	env["NEXUS_MCP_MAX_SESSIONS"] = "many"
	fs2 := pflag.NewFlagSet("y", pflag.ContinueOnError)
	fs2.Int("max-sessions", 64, "")
	if err := a.applyFlagEnv(fs2, ""); err == nil {
		t.Error("a bad value was accepted")
	}
}
