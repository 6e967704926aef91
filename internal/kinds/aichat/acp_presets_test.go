package aichat_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// llm is this package's real model server (tools/llm), for the agents' presets. A coding
// agent's first request is long (Claude Code's system prompt and tools: 21,000 tokens): the
// window is widened past the tiny model's 8192.
// Temperature 0 by default: the agents send none, and the model's junk arguments then vary less.
var llm = llmserver.Once{Args: []string{"-c", "65536", "--override-kv", "llama.context_length=int:65536", "--temp", "0"}}

// agentBin is a program of tools/acp-agents (npm install --prefix tools/acp-agents), or a skip:
// under CI its absence fails the test.
func agentBin(t *testing.T, name string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(wd, "..", "..", "..", "tools", "acp-agents", "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		testkit.SkipUnlessCI(t, fmt.Sprintf("%s is not installed: run npm install --prefix tools/acp-agents (make acp-agents-deps)", name))
	}
	return bin
}

// preset is one of the agents' presets as the tests run it: its program from tools/acp-agents,
// pointed at the real model server.
type preset struct {
	name, bin string
	args      []string
	// env is the backend's env table; keys are the variables passed from the gateway's
	// environment (the API keys: the server wants none, the agents want one).
	env  func(url, home string) map[string]string
	keys map[string]string
	// setup writes the agent's own settings into home before it starts.
	setup func(t *testing.T, url, home string)
	// meta is the backend's session_meta (TOML).
	meta string
	// noAsk, when set, says why a permission request may not be seen with the tiny model: the
	// first turn then passes without one.
	noAsk string
	// mayNotAsk, when set, says why the agent may run the tiny model's call without asking
	// in every one of the three conversations the test gives it.
	mayNotAsk string
	// gemini says the agent speaks only Google's Gemini API: it reaches the model server
	// through tools/llm/gemini-shim.mjs, started for the test (llmserver.GeminiShim).
	gemini bool
}

func presets() []preset {
	return []preset{
		{name: "claude-code", bin: "claude-agent-acp",
			env: func(url, home string) map[string]string {
				return map[string]string{"ANTHROPIC_BASE_URL": url, "CLAUDE_CONFIG_DIR": filepath.Join(home, ".claude"),
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
					"ANTHROPIC_MODEL": "tiny", "ANTHROPIC_SMALL_FAST_MODEL": "tiny"}
			},
			keys: map[string]string{"ANTHROPIC_API_KEY": "sk-test"},
			// Only Bash is offered, and it always asks (even for pwd, which Claude Code takes for
			// read-only): the tiny model's one call is one that asks.
			meta: `{ claudeCode = { options = { tools = ["Bash"] } } }`,
			setup: func(t *testing.T, _, home string) {
				writeFile(t, filepath.Join(home, ".claude", "settings.json"), `{"permissions":{"ask":["Bash"]}}`)
			}},
		{name: "codex-cli", bin: "codex-acp",
			env: func(_, home string) map[string]string {
				return map[string]string{"CODEX_HOME": filepath.Join(home, ".codex")}
			},
			keys:  map[string]string{"OPENAI_API_KEY": "sk-test"},
			noAsk: "the tiny model's call to exec_command carries a junk command (\",\") that Codex refuses while parsing it, before any approval is asked",
			// Codex reaches the server's Responses route; its goals feature (which llama-server's
			// answers do not satisfy) is off, and every command asks.
			setup: func(t *testing.T, url, home string) {
				writeFile(t, filepath.Join(home, ".codex", "config.toml"), fmt.Sprintf(`model = "tiny"
model_provider = "local"
approval_policy = "untrusted"
check_for_update_on_startup = false

[model_providers.local]
name = "local"
base_url = "%s/v1"
wire_api = "responses"

[features]
goals = false
`, url))
			}},
		{name: "gemini-cli", bin: "gemini", args: []string{"--acp"}, gemini: true,
			env: func(url, _ string) map[string]string {
				return map[string]string{"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_CLI_TRUST_WORKSPACE": "true"}
			},
			keys: map[string]string{"GEMINI_API_KEY": "test"},
			// Only write_file is offered (tools.core, which also allows it), and it asks
			// (tools.confirmationRequired ranks above). Not the shell tool: Gemini CLI runs a
			// command it deems safe (the tiny model's pwd) without asking, whatever the rules say.
			// The model is named (no router's classifying request) and loop detection (another
			// model request each turn) is off.
			setup: func(t *testing.T, _, home string) {
				writeFile(t, filepath.Join(home, ".gemini", "settings.json"), `{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"general":{"disableAutoUpdate":true},"tools":{"core":["write_file"],"confirmationRequired":["write_file"]},"model":{"name":"gemini-2.5-flash","disableLoopDetection":true}}`)
			}},
		{name: "qwen-code", bin: "qwen", args: []string{"--acp"},
			env: func(url, _ string) map[string]string {
				return map[string]string{"OPENAI_BASE_URL": url + "/v1", "OPENAI_MODEL": "tiny"}
			},
			keys: map[string]string{"OPENAI_API_KEY": "sk-test"},
			// Only the shell tool is offered, and it asks.
			setup: func(t *testing.T, _, home string) {
				writeFile(t, filepath.Join(home, ".qwen", "settings.json"), `{"security":{"auth":{"selectedType":"openai"}},"privacy":{"usageStatisticsEnabled":false},"tools":{"disabled":["exec","edit","write_file","read_file","zoom_image","grep_search","glob","todo_write","save_memory","agent","skill","exit_plan_mode","enter_plan_mode","web_fetch","web_search","image_gen","list_directory","lsp","ask_user_question","cron_create","cron_list","cron_delete","loop_wakeup","create_sub_session","list_agents","task_stop","task_create","task_update","task_list","team_create","team_delete","team_plan_approval","request_shutdown","send_message","structured_output","monitor","notebook_edit","tool_call","tool_search","read_mcp_resource","enter_worktree","exit_worktree","workflow","artifact","record_artifact","record_source","report_findings","get_goal","update_goal","propose_goal","display_image","read_many_files","task"]},"permissions":{"ask":["run_shell_command"]}}`)
			}},
		{name: "opencode", bin: "opencode", args: []string{"acp"},
			env: func(_, home string) map[string]string {
				return map[string]string{"OPENCODE_CONFIG": filepath.Join(home, "opencode.json")}
			},
			keys:      map[string]string{"OPENAI_API_KEY": "sk-test"},
			mayNotAsk: "OpenCode checks its bash tool's arguments (an empty file, a workdir of \",\", an unparsable command: the tiny model's junk) before it asks",
			// The OpenAI route through opencode's openai-compatible provider; only bash is
			// offered, and it asks.
			setup: func(t *testing.T, url, home string) {
				writeFile(t, filepath.Join(home, "opencode.json"), fmt.Sprintf(`{"$schema":"https://opencode.ai/config.json",
"provider":{"local":{"npm":"@ai-sdk/openai-compatible","name":"local","options":{"baseURL":"%s/v1","apiKey":"sk-test"},"models":{"tiny":{"name":"tiny"}}}},
"model":"local/tiny","autoupdate":false,"share":"disabled","permission":{"bash":"ask","edit":"deny","read":"deny","glob":"deny","grep":"deny","list":"deny","webfetch":"deny","websearch":"deny","codesearch":"deny","task":"deny","todowrite":"deny","todoread":"deny","skill":"deny","lsp":"deny","question":"deny","external_directory":"deny"}}`, url))
			}},
	}
}

// TestACPPresets runs each agent preset that is installed against the real model server: a
// turn streams into the session's events and the transcript, and an interrupt stops a turn.
func TestACPPresets(t *testing.T) {
	for _, p := range presets() {
		t.Run(p.name, func(t *testing.T) {
			bin := agentBin(t, p.bin)
			url := llm.URL(t)
			if p.gemini {
				url = llmserver.GeminiShim(t, url)
			}
			home := t.TempDir()
			if p.setup != nil {
				p.setup(t, url, home)
			}
			e := newEnv(t, echo).withBroker(t)
			var env []string
			for k, v := range p.env(url, home) {
				env = append(env, fmt.Sprintf("%s = %q", k, v))
			}
			var keys []string
			for k := range p.keys {
				keys = append(keys, fmt.Sprintf("%q", k))
			}
			args := make([]string, len(p.args))
			for i, a := range p.args {
				args[i] = fmt.Sprintf("%q", a)
			}
			e.extra += fmt.Sprintf("[backends.%s]\ncommand = %q\nargs = [%s]\nenv = { %s }\nenv_vars = [%s]\n",
				p.name, bin, strings.Join(args, ", "), strings.Join(env, ", "), strings.Join(keys, ", "))
			if p.meta != "" {
				e.extra += "session_meta = " + p.meta + "\n"
			}
			k := e.kind(t)
			k.Getenv = func(v string) string {
				switch v {
				case "PATH":
					return os.Getenv(v)
				case "HOME":
					return home
				}
				return p.keys[v]
			}
			r, err := live.New(context.Background(), live.Config{IdleTimeout: -1}, k)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
				defer cancel()
				_ = r.Shutdown(ctx)
			})
			var (
				key string
				s   abi.Session
				w   *watcher
			)
			open := func(n int) {
				key = fmt.Sprintf("agent:main:test:%s-%d", p.name, n)
				opts := fmt.Appendf(nil, `{"backend":%q,"level":"trusted","workspace":%q}`, p.name, e.ws)
				s, err = r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				w = &watcher{r: r, id: s.SessionID}
				send(t, r, s.SessionID, "Run the command pwd.")
			}
			logs := func() string {
				b, _ := os.ReadFile(filepath.Join(e.state, "logs", s.SessionID, "agent-stderr.log"))
				return string(b)
			}

			// The tiny model calls a tool at the conversation's first message: the agent asks
			// (a confirmation request, answered as nexus ai confirm does), runs it, and the
			// model's answer streams as tokens.
			open(1)
			// The model's arguments are junk, and whether an agent asks about a call can depend
			// on them (OpenCode runs a bash "command" it cannot parse without asking): up to
			// three conversations, each with its one call, unless the preset says why it cannot.
			first := "user assistant/toolUse toolResult assistant/stop"
			for n := 1; !asks(t, r, w, logs); n++ {
				if p.noAsk != "" {
					t.Logf("%s: no permission request: %s", p.name, p.noAsk)
					first = "user"
					break
				}
				t.Logf("conversation %d: the agent ran its call without asking: %s%s", n, describe(w.seen), calls(w.seen))
				if n == 3 && p.mayNotAsk != "" {
					t.Logf("%s: no permission request in %d conversations: %s", p.name, n, p.mayNotAsk)
					first = "user"
					break
				}
				if n == 3 {
					t.Fatalf("no confirmation request in %d conversations", n)
				}
				open(n + 1)
			}

			// An interrupt while the model is called: session/cancel ends the turn.
			from := len(w.seen)
			send(t, r, s.SessionID, "Say hello again.")
			w.until(t, "the turn's start", func(e *live.Event) bool {
				p, ok := e.Payload.(abi.AITurn)
				return ok && p.Phase == abi.PhaseStarted
			})
			if _, err := r.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
				t.Fatal(err)
			}
			if end := w.turnEnded(t); end.End != abi.TurnCancelled {
				t.Fatalf("interrupted turn %+v: %s", end, describe(w.seen[from:]))
			}
			// The transcript: prompt, the call and its result, the replies; pi reads it as nexus
			// does, and the history index finds the conversation's words.
			msgs := e.history(t, key)
			if got := roles(msgs); !strings.HasPrefix(got, first) || !strings.HasSuffix(got, "user assistant/aborted") {
				t.Fatalf("transcript %s", got)
			}
			sh, err := e.chats.Show(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			indexFinds(t, e.state, "tiny model", sh.Entry.SessionID)
			piSameContext(t, e, key, sh.File) // last: a skip (pi not installed) ends the test
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// asks checks a preset conversation's first turn: the tiny model calls the one tool offered,
// the agent asks (a confirmation request), the answer nexus ai confirm gives lets the call
// run, and the model's answer streams as tokens. It is false when the turn completed with no
// request.
func asks(t *testing.T, r *live.Registry, w *watcher, logs func() string) bool {
	t.Helper()
	ev := w.until(t, "a confirmation request or the turn's end", func(e *live.Event) bool {
		_, ok := e.Payload.(abi.AIConfirmation)
		p, end := e.Payload.(abi.AITurn)
		return ok || (end && p.Phase == abi.PhaseEnded)
	})
	c, ok := ev.Payload.(abi.AIConfirmation)
	if !ok {
		if ev.Payload.(abi.AITurn).End != abi.TurnCompleted {
			t.Fatalf("no confirmation request: %s\nstderr: %s", describe(w.seen), logs())
		}
		return false
	}
	if _, err := r.Control(context.Background(), w.id, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: c.RequestID, Answer: "allow-once"}); err != nil {
		t.Fatal(err)
	}
	end := w.turnEnded(t)
	said := w.tokens(0)
	if end.End != abi.TurnCompleted || !strings.Contains(said, "Hello from a tiny model.") {
		t.Fatalf("turn %+v, tokens %q: %s\nstderr: %s", end, said, describe(w.seen), logs())
	}
	for _, ev := range w.seen {
		if p, ok := ev.Payload.(abi.AITool); ok && p.ToolCallID == c.ToolCallID && p.Phase == abi.PhaseCompleted {
			return true
		}
	}
	t.Fatalf("no ai-tool completion of the confirmed call %s: %s", c.ToolCallID, describe(w.seen))
	return false
}

// calls names the tool calls a turn's events show, with their arguments and results: what the
// agent did with the tiny model's call when it did not ask.
func calls(seen []*live.Event) string {
	var b strings.Builder
	for _, ev := range seen {
		if p, ok := ev.Payload.(abi.AITool); ok && p.Phase == abi.PhaseCompleted {
			fmt.Fprintf(&b, "\n  %s %s -> error=%v %.300q", p.Name, p.Arguments, p.IsError, p.Output)
		}
	}
	return b.String()
}
