package provider

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/profile"
)

// Kinds of backend: the wire protocol spoken.
const (
	// KindOpenAICompatible is OpenAI chat completions (/chat/completions): OpenAI, Qwen
	// (DashScope), Gemini's OpenAI endpoint, llama.cpp, vLLM, Ollama.
	KindOpenAICompatible = "openai-compatible"
	// KindOpenAIResponses is the OpenAI Responses API (/responses).
	KindOpenAIResponses = "openai-responses"
	// KindAnthropic is Anthropic messages (/v1/messages); llama.cpp serves it too.
	KindAnthropic = "anthropic"
	// KindACP is an external coding agent spoken to over the Agent Client Protocol on its
	// stdio (package acpengine): Command, Args, Env and EnvVars start it; it calls its own
	// model, so base_url and api_key_env are not used.
	KindACP = "acp"
)

// Thinking formats of an openai-compatible backend: how a thinking level is asked for.
const (
	ThinkingOpenAI = "openai" // reasoning_effort
	ThinkingQwen   = "qwen"   // enable_thinking (DashScope, vLLM and llama.cpp Qwen templates)
	ThinkingNone   = "none"   // never sent
)

// Backend is one [backends.NAME] section of $NEXUS_HOME/config.toml over its preset. It holds
// the NAME of the environment variable with the API key, never the key.
type Backend struct {
	Name string `json:"name" toml:"-"`
	// Kind is the protocol: openai-compatible, openai-responses or anthropic.
	Kind string `json:"kind" toml:"kind"`
	// BaseURL is the API root: https://api.openai.com/v1, http://127.0.0.1:8080/v1 (llama.cpp's
	// OpenAI route), https://api.anthropic.com or http://127.0.0.1:8080 (Anthropic's: the SDK
	// adds /v1/messages).
	BaseURL string `json:"baseUrl" toml:"base_url"`
	// Model is the default model of requests.
	Model string `json:"model" toml:"model"`
	// APIKeyEnv names the environment variable holding the key ("" sends none).
	APIKeyEnv string `json:"apiKeyEnv,omitempty" toml:"api_key_env"`
	// ContextWindow is the model's window in tokens (0: unknown), for compaction.
	ContextWindow int `json:"contextWindow,omitempty" toml:"context_window"`
	// MaxTokens bounds each reply (0: the server's default; Anthropic needs one: 8192).
	MaxTokens int `json:"maxTokens,omitempty" toml:"max_tokens"`
	// SummaryModel writes compaction summaries (a cheaper model of the same backend; default
	// Model).
	SummaryModel string `json:"summaryModel,omitempty" toml:"summary_model"`
	// ThinkingFormat (openai-compatible only): openai, qwen or none.
	ThinkingFormat string `json:"thinkingFormat,omitempty" toml:"thinking_format"`
	// MaxAttempts is how many times a request is tried on 429, 5xx and connection failures
	// (default 4, at most 10).
	MaxAttempts int `json:"maxAttempts,omitempty" toml:"max_attempts"`
	// MaxRetryWait is the longest retry-after honoured, as a Go duration (default 1m): a
	// server asking for more fails the request at once.
	MaxRetryWait string `json:"maxRetryWait,omitempty" toml:"max_retry_wait"`

	// Agent starts an acp backend's agent (nil for the other kinds; a pointer keeps Backend
	// comparable).
	Agent *Agent `json:"agent,omitempty" toml:"-"`
}

// Agent is how an acp backend's agent is started: the section's command, args, env and
// env_vars keys.
type Agent struct {
	// Command and Args start the agent (Command found through PATH).
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Env are variables set for the agent (its endpoint, its settings: never a key, which
	// goes through EnvVars), over PATH, HOME, LANG, USER, TMPDIR and the EnvVars taken from the
	// gateway's environment.
	Env     map[string]string `json:"env,omitempty"`
	EnvVars []string          `json:"envVars,omitempty"`
	// SessionMeta is sent as the _meta of session/new and session/load: the agent's own
	// session options (claude-agent-acp reads claudeCode.options, such as the tools it offers).
	SessionMeta map[string]any `json:"sessionMeta,omitempty"`
}

// ACPPresets are the coding agents that speak ACP, by the products' names (the model APIs'
// presets own claude, codex, gemini and qwen). Each is started from the workspace; the
// model and its keys are the agent's own settings.
func ACPPresets() map[string]Backend {
	//nolint:gosec // G101: the names of environment variables, not credentials
	return map[string]Backend{
		"claude-code": {Kind: KindACP, Model: "claude-code", Agent: &Agent{Command: "npx", Args: []string{"--yes", "@zed-industries/claude-agent-acp"},
			EnvVars: []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR"}}},
		"codex-cli": {Kind: KindACP, Model: "codex-cli", Agent: &Agent{Command: "npx", Args: []string{"--yes", "@zed-industries/codex-acp"},
			EnvVars: []string{"OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME"}}},
		"gemini-cli": {Kind: KindACP, Model: "gemini-cli", Agent: &Agent{Command: "gemini", Args: []string{"--acp"},
			EnvVars: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL"}}},
		"qwen-code": {Kind: KindACP, Model: "qwen-code", Agent: &Agent{Command: "qwen", Args: []string{"--acp"},
			EnvVars: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "DASHSCOPE_API_KEY"}}},
		"opencode": {Kind: KindACP, Model: "opencode", Agent: &Agent{Command: "opencode", Args: []string{"acp"},
			EnvVars: []string{"OPENCODE_CONFIG", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}}},
	}
}

// Presets are the backends that exist without configuration; a section of the same name
// changes only the fields it sets.
func Presets() map[string]Backend {
	//nolint:gosec // G101: the names of environment variables, not credentials
	p := map[string]Backend{
		"qwen": {Kind: KindOpenAICompatible, BaseURL: "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
			Model: "qwen3-coder-plus", APIKeyEnv: "DASHSCOPE_API_KEY", ContextWindow: 1000000, MaxTokens: 16384, ThinkingFormat: ThinkingQwen},
		"claude": {Kind: KindAnthropic, BaseURL: "https://api.anthropic.com",
			Model: "claude-sonnet-4-5", APIKeyEnv: "ANTHROPIC_API_KEY", ContextWindow: 200000, MaxTokens: 16384},
		"gemini": {Kind: KindOpenAICompatible, BaseURL: "https://generativelanguage.googleapis.com/v1beta/openai/",
			Model: "gemini-2.5-flash", APIKeyEnv: "GEMINI_API_KEY", ContextWindow: 1048576, MaxTokens: 16384},
		"codex": {Kind: KindOpenAIResponses, BaseURL: "https://api.openai.com/v1",
			Model: "gpt-5-codex", APIKeyEnv: "OPENAI_API_KEY", ContextWindow: 400000, MaxTokens: 32768},
		"openai-compatible": {Kind: KindOpenAICompatible},
	}
	for name, b := range ACPPresets() {
		p[name] = b
	}
	return p
}

// Config is the backends of config.toml, presets included, and the MCP servers whose tools
// ai-chat agents get.
type Config struct {
	Backends   map[string]Backend   `json:"backends" toml:"backends"`
	MCPServers map[string]MCPServer `json:"mcpServers,omitempty" toml:"mcp_servers"`
	// Defaults is the [defaults] section: agent.toml's permission keys (level, paths, tools,
	// timeouts, ...) for every agent that does not set them.
	Defaults   profile.Policy `json:"defaults,omitzero" toml:"defaults"`
	Compaction Compaction     `json:"compaction" toml:"compaction"`
	Subagents  Subagents      `json:"subagents" toml:"subagents"`
	Recovery   Recovery       `json:"recovery,omitzero" toml:"recovery"`
}

// Subagents is the [subagents] section: the gateway's limits on sessions_spawn (docs/ai-chat.md,
// Subagents). Zero keeps the built-in default.
type Subagents struct {
	MaxDepth    int `json:"maxDepth,omitempty" toml:"max_depth"`
	MaxChildren int `json:"maxChildren,omitempty" toml:"max_children"`
	MaxRunning  int `json:"maxRunning,omitempty" toml:"max_running"`
	MaxRuns     int `json:"maxRuns,omitempty" toml:"max_runs"`
	// Window and RunTimeout are Go durations ("10m", "2h").
	Window     string `json:"window,omitempty" toml:"window"`
	RunTimeout string `json:"runTimeout,omitempty" toml:"run_timeout"`
}

// Durations are Window and RunTimeout parsed (zero where unset).
func (s Subagents) Durations() (window, runTimeout time.Duration, err error) {
	parse := func(key, v string) (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, abi.Errorf(abi.CodeInvalidArgument, "", "subagents: %s = %q: want a positive duration such as 10m or 2h", key, v)
		}
		return d, nil
	}
	if window, err = parse("window", s.Window); err != nil {
		return 0, 0, err
	}
	runTimeout, err = parse("run_timeout", s.RunTimeout)
	return window, runTimeout, err
}

// Recovery is the [recovery] section: what ai-chat does with the turns a killed gateway left
// running (docs/ai-chat.md, After a crash).
type Recovery struct {
	// ContinueTurns: once an interrupted turn is closed in its transcript, a new model call on
	// the recorded context answers the user's message (default true; false leaves the
	// conversation waiting for its next message).
	ContinueTurns *bool `json:"continueTurns,omitempty" toml:"continue_turns"`
}

// Continue reports whether interrupted turns continue after a restart (default true).
func (r Recovery) Continue() bool { return r.ContinueTurns == nil || *r.ContinueTurns }

// Compaction is the [compaction] section: what ai-chat does before a threshold compaction
// (docs/ai-chat.md, Compaction).
type Compaction struct {
	// MemoryFlush runs one silent turn before a threshold compaction, in which the agent may
	// append durable notes to the workspace's MEMORY.md (default off).
	MemoryFlush bool `json:"memoryFlush,omitempty" toml:"memory_flush"`
	// MinReserveTokens: the flush runs only while at least this many tokens of the window
	// are left for it (default 2000).
	MinReserveTokens int `json:"minReserveTokens,omitempty" toml:"min_reserve_tokens"`
}

// MCPServer is one [mcp_servers.NAME] section: a command nexus starts (stdio) or the URL of a
// Streamable HTTP server. Like backends, it names environment variables, never their values.
type MCPServer struct {
	Command string   `json:"command,omitempty" toml:"command"`
	Args    []string `json:"args,omitempty" toml:"args"`
	// EnvVars are the names of the gateway's variables passed to the command (it gets PATH,
	// HOME and these, nothing else).
	EnvVars []string `json:"envVars,omitempty" toml:"env_vars"`
	// Cwd is the command's directory (default: the conversation's workspace).
	Cwd string `json:"cwd,omitempty" toml:"cwd"`
	URL string `json:"url,omitempty" toml:"url"`
}

// backendTOML is a section as written: nil fields are not set.
type backendTOML struct {
	Kind           *string           `toml:"kind"`
	BaseURL        *string           `toml:"base_url"`
	Model          *string           `toml:"model"`
	APIKeyEnv      *string           `toml:"api_key_env"`
	ContextWindow  *int              `toml:"context_window"`
	MaxTokens      *int              `toml:"max_tokens"`
	SummaryModel   *string           `toml:"summary_model"`
	ThinkingFormat *string           `toml:"thinking_format"`
	MaxAttempts    *int              `toml:"max_attempts"`
	MaxRetryWait   *string           `toml:"max_retry_wait"`
	Command        *string           `toml:"command"`
	Args           *[]string         `toml:"args"`
	Env            map[string]string `toml:"env"`
	EnvVars        *[]string         `toml:"env_vars"`
	SessionMeta    map[string]any    `toml:"session_meta"`
}

// maxConfigSize bounds config.toml.
const maxConfigSize = 1 << 20

// ConfigPath is $NEXUS_HOME/config.toml (NEXUS_HOME defaults to ~/nexus).
func ConfigPath(getenv func(string) string) (string, error) {
	home := getenv("NEXUS_HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find home directory (set NEXUS_HOME): %w", err)
		}
		home = filepath.Join(h, "nexus")
	}
	return filepath.Join(home, "config.toml"), nil
}

// LoadConfig reads config.toml at path; a missing file is the presets alone. The file must
// be a regular file (a symlink is refused) of this user that no one else may write: it says
// where API keys are sent.
func LoadConfig(path string) (*Config, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0) //nolint:gosec // G304: the user's own config, checked below
	if errors.Is(err, fs.ErrNotExist) {
		return ParseConfig(nil)
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "config %s is a symlink: nexus reads only a regular file there", path)
		}
		return nil, fmt.Errorf("open config: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat config %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "config %s is not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "config %s is owned by uid %d, not by this user: it decides where API keys are sent", path, st.Uid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "config %s has mode %04o: other users could change where API keys are sent; run chmod go-w %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	if len(data) > maxConfigSize {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "config %s is larger than %d bytes", path, maxConfigSize)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

var (
	backendName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	envName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ParseConfig reads the [backends.NAME] sections of a config.toml over the presets. Other
// top-level keys belong to other parts of nexus and are left alone; an unknown key inside a
// backend section is an error (a key value written as api_key is refused without being
// quoted back). Errors name keys and lines, never values.
func ParseConfig(data []byte) (*Config, error) {
	var doc struct {
		Backends   map[string]backendTOML `toml:"backends"`
		MCPServers map[string]MCPServer   `toml:"mcp_servers"`
		Defaults   profile.Policy         `toml:"defaults"`
		Compaction Compaction             `toml:"compaction"`
		Subagents  Subagents              `toml:"subagents"`
		Recovery   Recovery               `toml:"recovery"`
	}
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		var strict *toml.StrictMissingError
		var de *toml.DecodeError
		switch {
		case errors.As(err, &strict):
			var bad []string
			for _, e := range strict.Errors {
				k := e.Key()
				if len(k) > 0 && k[0] == "mcp_servers" {
					row, _ := e.Position()
					return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown key %s (line %d) in an MCP server section (known: command, args, env_vars, cwd, url)", strings.Join(k, "."), row)
				}
				if len(k) > 0 && k[0] == "defaults" {
					row, _ := e.Position()
					return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown key %s (line %d) in [defaults] (known: level, disabled_tools, allowed_paths, blocked_paths, allowed_targets, allow_hard_links, max_timeout, confirm_timeout, max_concurrent_tools, progress_interval, and [defaults.tools.NAME] timeout, allowed_paths)", strings.Join(k, "."), row)
				}
				if len(k) > 0 && k[0] == "subagents" {
					row, _ := e.Position()
					return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown key %s (line %d) in [subagents] (known: max_depth, max_children, max_running, max_runs, window, run_timeout)", strings.Join(k, "."), row)
				}
				if len(k) > 0 && k[0] == "compaction" {
					row, _ := e.Position()
					return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown key %s (line %d) in [compaction] (known: memory_flush, min_reserve_tokens)", strings.Join(k, "."), row)
				}
				if len(k) > 0 && k[0] == "recovery" {
					row, _ := e.Position()
					return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown key %s (line %d) in [recovery] (known: continue_turns)", strings.Join(k, "."), row)
				}
				if len(k) > 0 && k[0] == "backends" {
					row, _ := e.Position()
					bad = append(bad, fmt.Sprintf("%s (line %d)", strings.Join(k, "."), row))
				}
			}
			if len(bad) > 0 {
				msg := "unknown keys in a backend section: " + strings.Join(bad, ", ") +
					" (known: kind, base_url, model, api_key_env, context_window, max_tokens, summary_model, thinking_format, max_attempts, max_retry_wait; for kind acp: command, args, env, env_vars, session_meta)"
				if strings.Contains(msg, ".api_key (") {
					msg += "; an API key never goes in the config: put it in an environment variable and name that with api_key_env"
				}
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "%s", msg)
			}
		case errors.As(err, &de):
			row, col := de.Position()
			// DecodeError.String quotes the document's lines: only the message is used.
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "line %d column %d: %s", row, col, de.Error())
		default:
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "%v", err)
		}
	}
	cfg := &Config{Backends: Presets()}
	for name, sec := range doc.Backends {
		if !backendName.MatchString(name) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "backend name %q: use lower-case letters, digits, '-', '_' and '.'", name)
		}
		b := cfg.Backends[name]
		set(&b.Kind, sec.Kind)
		set(&b.BaseURL, sec.BaseURL)
		set(&b.Model, sec.Model)
		set(&b.APIKeyEnv, sec.APIKeyEnv)
		set(&b.ContextWindow, sec.ContextWindow)
		set(&b.MaxTokens, sec.MaxTokens)
		set(&b.SummaryModel, sec.SummaryModel)
		set(&b.ThinkingFormat, sec.ThinkingFormat)
		set(&b.MaxAttempts, sec.MaxAttempts)
		set(&b.MaxRetryWait, sec.MaxRetryWait)
		if sec.Command != nil || sec.Args != nil || sec.Env != nil || sec.EnvVars != nil || sec.SessionMeta != nil {
			a := Agent{}
			if b.Agent != nil {
				a = *b.Agent
			}
			set(&a.Command, sec.Command)
			set(&a.Args, sec.Args)
			set(&a.EnvVars, sec.EnvVars)
			if sec.Env != nil {
				a.Env = sec.Env
			}
			if sec.SessionMeta != nil {
				a.SessionMeta = sec.SessionMeta
			}
			b.Agent = &a
		}
		if b.Kind == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "backend %s: kind is required (%s, %s, %s or %s)", name, KindOpenAICompatible, KindOpenAIResponses, KindAnthropic, KindACP)
		}
		if b.Kind == KindACP && b.Model == "" {
			// An agent picks its own model; the name stands for it in the transcript.
			b.Model = name
		}
		cfg.Backends[name] = b
	}
	for name, b := range cfg.Backends {
		b.Name = name
		cfg.Backends[name] = b
	}
	for name, m := range doc.MCPServers {
		if !backendName.MatchString(name) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "MCP server name %q: use lower-case letters, digits, '-', '_' and '.'", name)
		}
		if (m.Command == "") == (m.URL == "") {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "MCP server %s: set command or url (one of them)", name)
		}
		for _, v := range m.EnvVars {
			if !envName.MatchString(v) {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "MCP server %s: env_vars holds %q, not a variable name (values never go in the config)", name, v)
			}
		}
		if m.URL != "" {
			u, err := url.Parse(m.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "MCP server %s: url must be http(s) without credentials", name)
			}
		}
	}
	cfg.MCPServers = doc.MCPServers
	// The defaults are checked here, so a bad value is found when the config is read, not at
	// some agent's start.
	if _, err := profile.Resolve(doc.Defaults, profile.Policy{}); err != nil {
		return nil, err
	}
	cfg.Defaults = doc.Defaults
	if doc.Compaction.MinReserveTokens < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "compaction: min_reserve_tokens must not be negative")
	}
	cfg.Compaction = doc.Compaction
	if s := doc.Subagents; s.MaxDepth < 0 || s.MaxChildren < 0 || s.MaxRunning < 0 || s.MaxRuns < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "subagents: limits must not be negative")
	}
	if _, _, err := doc.Subagents.Durations(); err != nil {
		return nil, err
	}
	cfg.Subagents = doc.Subagents
	cfg.Recovery = doc.Recovery
	return cfg, nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// Backend returns the backend called name, validated.
func (c *Config) Backend(name string) (Backend, error) {
	b, ok := c.Backends[name]
	if !ok {
		names := make([]string, 0, len(c.Backends))
		for n := range c.Backends {
			names = append(names, n)
		}
		sort.Strings(names)
		return Backend{}, abi.Errorf(abi.CodeInvalidArgument, "", "no backend %q (known: %s)", name, strings.Join(names, ", "))
	}
	if err := b.Validate(); err != nil {
		return Backend{}, err
	}
	return b, nil
}

// Validate checks a backend's fields.
func (b Backend) Validate() error {
	bad := func(format string, args ...any) error {
		return abi.Errorf(abi.CodeInvalidArgument, "", "backend %s: %s", b.Name, fmt.Sprintf(format, args...))
	}
	if b.Kind == KindACP {
		return b.validateACP(bad)
	}
	if !slices.Contains([]string{KindOpenAICompatible, KindOpenAIResponses, KindAnthropic}, b.Kind) {
		return bad("kind %q: use %s, %s, %s or %s", b.Kind, KindOpenAICompatible, KindOpenAIResponses, KindAnthropic, KindACP)
	}
	if b.BaseURL == "" {
		return bad("base_url is required (for example http://127.0.0.1:8080/v1 for llama.cpp)")
	}
	u, err := url.Parse(b.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("base_url must be an http or https URL")
	}
	if u.User != nil {
		return bad("base_url carries credentials: name an environment variable with api_key_env instead")
	}
	if u.Scheme == "http" && b.APIKeyEnv != "" && !loopback(u.Hostname()) {
		return bad("base_url is plain http to another host: the key in $%s would cross the network unencrypted; use https", b.APIKeyEnv)
	}
	if b.Model == "" {
		return bad("model is required")
	}
	if b.APIKeyEnv != "" && !envName.MatchString(b.APIKeyEnv) {
		return bad("api_key_env must be an environment variable name (letters, digits, '_'), not a key")
	}
	if b.ContextWindow < 0 || b.MaxTokens < 0 {
		return bad("context_window and max_tokens must not be negative")
	}
	if b.MaxAttempts < 0 || b.MaxAttempts > 10 {
		return bad("max_attempts must be between 1 and 10")
	}
	if b.MaxRetryWait != "" {
		if d, err := time.ParseDuration(b.MaxRetryWait); err != nil || d < 0 {
			return bad("max_retry_wait must be a duration such as 60s")
		}
	}
	switch b.ThinkingFormat {
	case "", ThinkingOpenAI, ThinkingQwen, ThinkingNone:
	default:
		return bad("thinking_format %q: use %s, %s or %s", b.ThinkingFormat, ThinkingOpenAI, ThinkingQwen, ThinkingNone)
	}
	return nil
}

// validateACP checks an acp backend: a command, variable names, and no key among the values.
func (b Backend) validateACP(bad func(string, ...any) error) error {
	a := b.Agent
	if a == nil || a.Command == "" {
		return bad("command is required for kind acp (the agent's program, for example npx or gemini)")
	}
	for _, v := range a.EnvVars {
		if !envName.MatchString(v) {
			return bad("env_vars holds %q, not a variable name (values never go in the config)", v)
		}
	}
	for k := range a.Env {
		if !envName.MatchString(k) {
			return bad("env key %q is not a variable name", k)
		}
		if secretName.MatchString(k) {
			return bad("env sets %s: a key never goes in the config; name the variable in env_vars and set it in the gateway's environment", k)
		}
	}
	return nil
}

// secretName is a variable that holds a credential by its name.
var secretName = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASSWORD)$`)

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
