package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/nexus-run/nexus/internal/abi"
)

const exampleConfig = `
# other parts of nexus have their own sections
[agents.main]
level = "TRUSTED"

[backends.claude]
model = "claude-opus-4-1"

[backends.local]
kind = "openai-compatible"
base_url = "http://127.0.0.1:8080/v1"
model = "qwen3-8b"
context_window = 32768
max_tokens = 4096
thinking_format = "qwen"

[backends.local-anthropic]
kind = "anthropic"
base_url = "http://127.0.0.1:8080"
model = "qwen3-8b"

[backends.work]
kind = "openai-responses"
base_url = "https://llm.example.com/v1"
model = "gpt-5"
api_key_env = "WORK_OPENAI_KEY"
max_attempts = 6
max_retry_wait = "2m"
`

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		want Backend
	}{
		{"claude", Backend{Name: "claude", Kind: KindAnthropic, BaseURL: "https://api.anthropic.com", Model: "claude-opus-4-1",
			APIKeyEnv: "ANTHROPIC_API_KEY", ContextWindow: 200000, MaxTokens: 16384}},
		{"qwen", Presets()["qwen"]},
		{"local", Backend{Name: "local", Kind: KindOpenAICompatible, BaseURL: "http://127.0.0.1:8080/v1", Model: "qwen3-8b",
			ContextWindow: 32768, MaxTokens: 4096, ThinkingFormat: ThinkingQwen}},
		{"local-anthropic", Backend{Name: "local-anthropic", Kind: KindAnthropic, BaseURL: "http://127.0.0.1:8080", Model: "qwen3-8b"}},
		{"work", Backend{Name: "work", Kind: KindOpenAIResponses, BaseURL: "https://llm.example.com/v1", Model: "gpt-5",
			APIKeyEnv: "WORK_OPENAI_KEY", MaxAttempts: 6, MaxRetryWait: "2m"}},
	}
	for _, tc := range cases {
		if tc.want.Name == "" {
			tc.want.Name = tc.name
		}
		got, err := cfg.Backend(tc.name)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
	// openai-compatible is a preset without a base URL: usable once configured.
	if _, err := cfg.Backend("openai-compatible"); abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "base_url is required") {
		t.Errorf("openai-compatible without base_url: %v", err)
	}
	if _, err := cfg.Backend("nope"); err == nil || !strings.Contains(err.Error(), "known: claude, claude-code, codex, codex-cli, gemini, gemini-cli, local, local-anthropic, openai-compatible, opencode, qwen, qwen-code, work") {
		t.Errorf("unknown backend: %v", err)
	}
}

// TestRecoverySection: interrupted turns continue after a restart unless [recovery] says not.
func TestRecoverySection(t *testing.T) {
	for _, tc := range []struct {
		toml string
		want bool
	}{
		{"", true},
		{"[recovery]\ncontinue_turns = true\n", true},
		{"[recovery]\ncontinue_turns = false\n", false},
	} {
		cfg, err := ParseConfig([]byte(tc.toml))
		if err != nil || cfg.Recovery.Continue() != tc.want {
			t.Fatalf("%q: %+v %v", tc.toml, cfg, err)
		}
	}
}

// TestCompactionSection: [compaction] turns the memory flush on, with its reserve.
func TestCompactionSection(t *testing.T) {
	cfg, err := ParseConfig([]byte("[compaction]\nmemory_flush = true\nmin_reserve_tokens = 3000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Compaction.MemoryFlush || cfg.Compaction.MinReserveTokens != 3000 {
		t.Fatalf("compaction %+v", cfg.Compaction)
	}
	if cfg, err := ParseConfig(nil); err != nil || cfg.Compaction.MemoryFlush {
		t.Fatalf("by default %+v %v", cfg, err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, toml, want string
	}{
		{"unknown key", "[backends.claude]\nmodle = \"x\"\n", "backends.claude.modle (line 2)"},
		{"a key in the config", "[backends.claude]\napi_key = \"" + testKey + "\"\n", "never goes in the config"},
		{"kind missing", "[backends.mine]\nbase_url = \"http://127.0.0.1:1/v1\"\n", "kind is required"},
		{"bad name", "[backends.\"My Backend\"]\nkind = \"anthropic\"\n", "backend name"},
		{"syntax", "[backends.claude\nmodel = 1\n", "line 1"},
		{"wrong type", "[backends.claude]\nmax_tokens = \"" + testKey + "\"\n", "line 2"},
		{"unknown compaction key", "[compaction]\nmemory_flush = true\nreserve = 3\n", "compaction.reserve (line 3)"},
		{"negative reserve", "[compaction]\nmin_reserve_tokens = -1\n", "min_reserve_tokens"},
		{"unknown subagents key", "[subagents]\nmax_children = 2\nmax_kids = 3\n", "subagents.max_kids (line 3)"},
		{"subagents run timeout", "[subagents]\nrun_timeout = \"soon\"\n", "run_timeout"},
		{"negative subagent limit", "[subagents]\nmax_running = -1\n", "must not be negative"},
		{"unknown recovery key", "[recovery]\ncontinue = false\n", "recovery.continue (line 2) in [recovery] (known: continue_turns)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.toml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || abi.CodeOf(err) != abi.CodeInvalidArgument {
				t.Fatalf("err %v, want INVALID_ARGUMENT containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Fatalf("the error quotes the value: %v", err)
			}
		})
	}
	invalid := []struct {
		name string
		b    Backend
		want string
	}{
		{"kind", Backend{Kind: "openai", BaseURL: "https://x", Model: "m"}, `kind "openai"`},
		{"scheme", Backend{Kind: KindAnthropic, BaseURL: "ftp://x", Model: "m"}, "http or https"},
		{"credentials in url", Backend{Kind: KindAnthropic, BaseURL: "https://user:" + testKey + "@x", Model: "m"}, "carries credentials"},
		{"key over plain http", Backend{Kind: KindAnthropic, BaseURL: "http://llm.example.com", Model: "m", APIKeyEnv: "K"}, "unencrypted"},
		{"key as env name", Backend{Kind: KindAnthropic, BaseURL: "https://x", Model: "m", APIKeyEnv: testKey + "-x"}, "environment variable name"},
		{"model", Backend{Kind: KindAnthropic, BaseURL: "https://x"}, "model is required"},
		{"attempts", Backend{Kind: KindAnthropic, BaseURL: "https://x", Model: "m", MaxAttempts: 11}, "max_attempts"},
		{"wait", Backend{Kind: KindAnthropic, BaseURL: "https://x", Model: "m", MaxRetryWait: "soon"}, "max_retry_wait"},
		{"thinking format", Backend{Kind: KindOpenAICompatible, BaseURL: "https://x", Model: "m", ThinkingFormat: "deepseek"}, "thinking_format"},
	}
	for _, tc := range invalid {
		err := tc.b.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: the error quotes the value: %v", tc.name, err)
		}
	}
	// Loopback http with a key is fine (a local server behind an auth proxy).
	if err := (Backend{Kind: KindAnthropic, BaseURL: "http://127.0.0.1:8080", Model: "m", APIKeyEnv: "K"}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	// Missing: the presets.
	cfg, err := LoadConfig(path)
	if err != nil || cfg.Backends["claude"].Model == "" {
		t.Fatalf("missing config: %v", err)
	}
	if err := os.WriteFile(path, []byte(exampleConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = LoadConfig(path); err != nil || cfg.Backends["local"].Model != "qwen3-8b" {
		t.Fatalf("load: %v", err)
	}
	if err := os.Chmod(path, 0o620); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("group-writable config: %v", err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(link); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlinked config: %v", err)
	}
	got, err := ConfigPath(func(k string) string { return map[string]string{"NEXUS_HOME": "/srv/nx"}[k] })
	if err != nil || got != "/srv/nx/config.toml" {
		t.Fatalf("ConfigPath %q %v", got, err)
	}
}

func TestOpenNeedsTheKey(t *testing.T) {
	b := Presets()["claude"]
	b.Name = "claude"
	_, err := Open(b, Options{Getenv: func(string) string { return "" }})
	if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY (api_key_env) is not set") {
		t.Fatalf("err %v", err)
	}
}

// TestKeyNeverShown: the key's value appears in no error, whatever the provider echoes, and in
// no serialized or printed form of the config or the provider.
func TestKeyNeverShown(t *testing.T) {
	echo := `{"error":{"message":"Incorrect API key provided: ` + testKey + `. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`
	for _, kind := range []string{KindOpenAICompatible, KindOpenAIResponses, KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			cases := []reply{
				{status: 401, body: echo},
				{status: 400, body: echo},
				{body: "data: " + echo + "\n\n"},                                             // an error in the stream
				{body: "event: error\ndata: " + echo + "\n\n"},                               // an error event
				{status: 429, body: echo, header: map[string]string{"Retry-After": "99999"}}, // given up at once
			}
			for i, r := range cases {
				f := newFake(t, testKey, r)
				p := openFake(t, kind, f, nil)
				s, err := p.Stream(context.Background(), Request{Messages: userAsk()})
				if err == nil {
					c := collect(t, s)
					err = c.err
					if strings.Contains(c.msg.ErrorMessage, testKey) {
						t.Errorf("case %d: errorMessage shows the key: %s", i, c.msg.ErrorMessage)
					}
					raw, _ := json.Marshal(c.msg)
					if strings.Contains(string(raw), testKey) {
						t.Errorf("case %d: the message shows the key: %s", i, raw)
					}
				}
				if err == nil {
					continue // the key-free error path of this format
				}
				if strings.Contains(err.Error(), testKey) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), testKey) {
					t.Errorf("case %d: the error shows the key: %v", i, err)
				}
				for e := err; e != nil; e = errors.Unwrap(e) {
					if strings.Contains(e.Error(), testKey) {
						t.Errorf("case %d: a wrapped error shows the key: %v", i, e)
					}
				}
				if !strings.Contains(err.Error(), "[REDACTED]") && i < 2 {
					t.Errorf("case %d: the echoed key was not redacted: %v", i, err)
				}
			}
			f := newFake(t, testKey)
			p := openFake(t, kind, f, nil)
			for _, s := range []string{fmt.Sprintf("%v", p), fmt.Sprintf("%+v", p), fmt.Sprintf("%#v", p)} {
				if strings.Contains(s, testKey) {
					t.Errorf("printing the provider shows the key: %s", s)
				}
			}
			if raw, _ := json.Marshal(p); strings.Contains(string(raw), testKey) {
				t.Errorf("the provider's JSON shows the key: %s", raw)
			}
		})
	}
	cfg, err := ParseConfig([]byte(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORK_OPENAI_KEY", testKey)
	if _, err := Open(cfg.Backends["work"], Options{}); err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(cfg)
	tm, _ := toml.Marshal(cfg)
	for _, s := range []string{string(j), string(tm), fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, testKey) {
			t.Errorf("the config shows the key: %s", s)
		}
		if !strings.Contains(s, "WORK_OPENAI_KEY") {
			t.Errorf("the config lost the variable's name: %s", s)
		}
	}
}

// TestSDKReadsNoEnvironment: a backend without a key sends none, and goes to its own base URL,
// whatever OPENAI_* and ANTHROPIC_* variables hold (the SDKs' clients would read them).
func TestSDKReadsNoEnvironment(t *testing.T) {
	for _, k := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"} {
		t.Setenv(k, testKey)
	}
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	files := map[string]string{KindOpenAICompatible: "chat-plain.sse", KindAnthropic: "anthropic-plain.sse", KindOpenAIResponses: "responses-text.sse"}
	for kind, file := range files {
		f := newFake(t, "", reply{file: file}) // checks that no key arrives
		b := backendFor(kind, f.url())
		b.APIKeyEnv = ""
		p, err := Open(b, Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.Stream(context.Background(), Request{Messages: userAsk()})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if c := collect(t, s); c.err != nil {
			t.Fatalf("%s: %v", kind, c.err)
		}
	}
}

// TestConfigDefaults: the [defaults] section holds agent.toml's policy keys for every agent;
// an unknown key there is an error naming it and its line, and a bad value one naming the key.
func TestConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte("[defaults]\nlevel = \"yolo\"\nblocked_paths = [\".env\"]\nmax_timeout = \"30m\"\n\n[defaults.tools.bash]\ntimeout = \"20m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Defaults; d.Level != "yolo" || len(d.BlockedPaths) != 1 || d.MaxTimeout != "30m" || d.Tools["bash"].Timeout != "20m" {
		t.Fatalf("defaults %+v", d)
	}
	for _, c := range []struct{ toml, want string }{
		{"[defaults]\nlevel = \"yolo\"\nblockd_paths = [\"x\"]\n", "unknown key defaults.blockd_paths (line 3)"},
		{"[defaults.tools.bash]\n\ntimeot = \"1m\"\n", "unknown key defaults.tools.bash.timeot (line 3)"},
		{"[defaults]\nmax_timeout = \"forever\"\n", "config.toml [defaults]: max_timeout"},
	} {
		if _, err := ParseConfig([]byte(c.toml)); abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%q: %v, want %q", c.toml, err, c.want)
		}
	}
}

// TestACPBackends: the agents' presets, a section that points one at another endpoint, a
// backend of its own, and what is refused.
func TestACPBackends(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
[backends.claude-code]
env = { ANTHROPIC_BASE_URL = "http://127.0.0.1:8080" }

[backends.mine]
kind = "acp"
command = "/opt/agent"
args = ["--acp"]
env_vars = ["MY_AGENT_KEY"]
`))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.Backend("claude-code")
	if err != nil {
		t.Fatal(err)
	}
	if cc.Kind != KindACP || cc.Agent.Command != "npx" || cc.Agent.Env["ANTHROPIC_BASE_URL"] != "http://127.0.0.1:8080" || !slices.Contains(cc.Agent.EnvVars, "ANTHROPIC_API_KEY") {
		t.Fatalf("claude-code: %+v %+v", cc, cc.Agent)
	}
	mine, err := cfg.Backend("mine")
	if err != nil {
		t.Fatal(err)
	}
	if mine.Model != "mine" || mine.Agent.Command != "/opt/agent" || !slices.Equal(mine.Agent.Args, []string{"--acp"}) {
		t.Fatalf("mine: %+v %+v", mine, mine.Agent)
	}
	for _, name := range []string{"claude-code", "codex-cli", "gemini-cli", "qwen-code", "opencode"} {
		if _, err := cfg.Backend(name); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	for _, tc := range []struct{ toml, want string }{
		{"[backends.x]\nkind = \"acp\"\n", "command is required for kind acp"},
		{"[backends.x]\nkind = \"acp\"\ncommand = \"a\"\nenv = { OPENAI_API_KEY = \"sk-1\" }\n", "a key never goes in the config"},
		{"[backends.x]\nkind = \"acp\"\ncommand = \"a\"\nenv_vars = [\"A=B\"]\n", "not a variable name"},
	} {
		cfg, err := ParseConfig([]byte(tc.toml))
		if err == nil {
			_, err = cfg.Backend("x")
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.toml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-1") {
			t.Errorf("the error quotes the value: %v", err)
		}
	}
}
