// Command acpengine measures the time to first token of an agent run as an acp backend (an ai-chat
// session of the kind nexus serve runs: the durable queue, the transcript on disk, the event log,
// a subscriber reading the session's events) against the same agent driven directly by a bare
// ACP client (the SDK's client side, as an editor drives it). Each prompt is timed from the
// send (the ACP prompt, or the session's send) to the first text chunk (the first ai-token event
// read from the session); the first prompt also starts the agent (cold), the others find it
// running (warm).
//
//	go run ./bench/acpengine                                  # the protocol's cost: acptest, an ACP agent answering at once
//	go run ./bench/acpengine -agents acptest,claude-code,opencode -n 5   # and real agents on the tiny model (tools/acp-agents, tools/llm)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/acpengine/acptest"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// agent is how one agent is started, with no tool offered (so its first token is its answer's).
type agent struct {
	command string
	args    []string
	env     map[string]string
	keys    map[string]string // passed from the gateway's environment (env_vars)
	meta    map[string]any
	setup   func(home, url string) error
}

func agents(bin, self, home, sessions string) map[string]agent {
	return map[string]agent{
		"acptest": {command: self, env: map[string]string{acptest.EnvAgent: "1", acptest.EnvDir: sessions}},
		"claude-code": {command: filepath.Join(bin, "claude-agent-acp"),
			keys: map[string]string{"ANTHROPIC_API_KEY": "sk-test"},
			env: map[string]string{"CLAUDE_CONFIG_DIR": filepath.Join(home, ".claude"),
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "ANTHROPIC_MODEL": "tiny"},
			meta: map[string]any{"claudeCode": map[string]any{"options": map[string]any{"tools": []string{}}}}},
		"opencode": {command: filepath.Join(bin, "opencode"), args: []string{"acp"},
			env: map[string]string{"OPENCODE_CONFIG": filepath.Join(home, "opencode.json")},
			setup: func(home, url string) error {
				deny := map[string]string{}
				for _, t := range []string{"bash", "edit", "read", "glob", "grep", "list", "webfetch", "websearch", "codesearch", "task", "todowrite", "todoread", "skill", "lsp", "question"} {
					deny[t] = "deny"
				}
				cfg := map[string]any{"provider": map[string]any{"local": map[string]any{"npm": "@ai-sdk/openai-compatible", "name": "local",
					"options": map[string]any{"baseURL": url + "/v1", "apiKey": "sk-test"}, "models": map[string]any{"tiny": map[string]any{"name": "tiny"}}}},
					"model": "local/tiny", "autoupdate": false, "share": "disabled", "permission": deny}
				b, _ := json.Marshal(cfg)
				return os.WriteFile(filepath.Join(home, "opencode.json"), b, 0o600)
			}},
	}
}

func main() {
	acptest.Main() // this program is the acptest agent when a path starts it so
	names := flag.String("agents", "acptest", "agents to measure: acptest, claude-code, opencode")
	n := flag.Int("n", 50, "prompts per path (the first one cold)")
	bin := flag.String("bin", "tools/acp-agents/node_modules/.bin", "the agents' programs (npm install --prefix tools/acp-agents)")
	llmURL := flag.String("llm-url", "", "a running tools/llm server (default: one is started, its window widened to 65536)")
	flag.Parse()
	if err := run(*names, *n, *bin, *llmURL); err != nil {
		fmt.Fprintln(os.Stderr, "acp:", err)
		os.Exit(1)
	}
}

type result struct {
	Agent string    `json:"agent"`
	Path  string    `json:"path"`
	Cold  float64   `json:"coldMs"`
	Warm  []float64 `json:"warmMs"`
}

func run(names string, n int, bin, llmURL string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	absBin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	needLLM := slices.ContainsFunc(strings.Split(names, ","), func(s string) bool { return s != "acptest" })
	if needLLM && llmURL == "" {
		srv, skip, err := llmserver.StartWith(context.Background(), "-c", "65536", "--override-kv", "llama.context_length=int:65536")
		if err != nil {
			return err
		}
		if skip != "" {
			return fmt.Errorf("%s", skip)
		}
		defer srv.Stop()
		llmURL = srv.URL
	}
	machine := benchenv.Probe("bash")
	var out []result
	for _, name := range strings.Split(names, ",") {
		for _, path := range []string{"direct", "nexus"} {
			tmp, err := os.MkdirTemp("", "bench-acp-")
			if err != nil {
				return err
			}
			home, sessions, ws := filepath.Join(tmp, "home"), filepath.Join(tmp, "sessions"), filepath.Join(tmp, "ws")
			for _, d := range []string{home, sessions, ws} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					return err
				}
			}
			a, ok := agents(absBin, self, home, sessions)[name]
			if !ok {
				return fmt.Errorf("unknown agent %q", name)
			}
			if a.setup != nil {
				if err := a.setup(home, llmURL); err != nil {
					return err
				}
			}
			if name != "acptest" {
				if _, err := os.Stat(a.command); err != nil {
					return fmt.Errorf("%s: %w (npm install --prefix tools/acp-agents)", name, err)
				}
				a.env["ANTHROPIC_BASE_URL"] = llmURL
			}
			var times []float64
			if path == "direct" {
				times, err = direct(a, home, ws, n)
			} else {
				times, err = viaNexus(a, home, ws, tmp, n)
			}
			_ = os.RemoveAll(tmp)
			if err != nil {
				return fmt.Errorf("%s %s: %w", name, path, err)
			}
			r := result{Agent: name, Path: path, Cold: times[0], Warm: times[1:]}
			out = append(out, r)
			w := slices.Clone(r.Warm)
			slices.Sort(w)
			fmt.Printf("%-12s %-7s cold %8.1f ms   warm p50 %8.2f ms  p90 %8.2f ms  min %8.2f ms  (%d)\n", name, path, r.Cold, pct(w, 50), pct(w, 90), w[0], len(w))
		}
	}
	machine.LoadEnd = benchenv.LoadAvg()
	fmt.Printf("load %s → %s\n", machine.LoadStart, machine.LoadEnd)
	if f, err := benchenv.WriteResults("bench/results", "acp", map[string]any{"machine": machine, "results": out}); err == nil {
		fmt.Println("results:", f)
	}
	return nil
}

func pct(sorted []float64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func environ(a agent, home string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8"}
	for _, m := range []map[string]string{a.env, a.keys} {
		for k, v := range m {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// client is the bare ACP client of the direct path: it notes the first text chunk.
type client struct{ first chan time.Time }

func (c *client) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if n.Update.AgentMessageChunk != nil && n.Update.AgentMessageChunk.Content.Text != nil && n.Update.AgentMessageChunk.Content.Text.Text != "" {
		select {
		case c.first <- time.Now():
		default:
		}
	}
	return nil
}

func (c *client) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}, nil
}
func (c *client) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}
func (c *client) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}
func (c *client) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}
func (c *client) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}
func (c *client) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}
func (c *client) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}
func (c *client) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

// direct drives the agent with the SDK's client: the cold prompt includes the process's start,
// initialize and session/new, as an editor's first prompt does.
func direct(a agent, home, ws string, n int) ([]float64, error) {
	ctx := context.Background()
	var times []float64
	start := time.Now()
	cmd := exec.CommandContext(ctx, a.command, a.args...) //nolint:gosec // the benchmark's own agents
	cmd.Env, cmd.Dir = environ(a, home), ws
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = in.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	c := &client{first: make(chan time.Time, 1)}
	gate := make(chan struct{}) // the SDK's SetLogger races with its reader: it waits
	conn := acp.NewClientSideConnection(c, in, gated{outp, gate})
	conn.SetLogger(slog.New(slog.DiscardHandler))
	close(gate)
	if _, err := conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		return nil, err
	}
	ns, err := conn.NewSession(ctx, acp.NewSessionRequest{Meta: a.meta, Cwd: ws, McpServers: []acp.McpServer{}})
	if err != nil {
		return nil, err
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			start = time.Now()
		}
		if _, err := conn.Prompt(ctx, acp.PromptRequest{SessionId: ns.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(fmt.Sprintf("Say hello (%d).", i))}}); err != nil {
			return nil, err
		}
		select {
		case t := <-c.first:
			times = append(times, float64(t.Sub(start).Microseconds())/1000)
		default:
			return nil, fmt.Errorf("prompt %d: no text chunk", i)
		}
	}
	return times, nil
}

// viaNexus runs the agent as an acp backend of an ai-chat session: each message is sent as the
// CLI's send is (the durable queue), and the first ai-token event is read from the session.
func viaNexus(a agent, home, ws, state string, n int) ([]float64, error) {
	ctx := context.Background()
	var keys []string
	for k := range a.keys {
		keys = append(keys, k)
	}
	cfg := &provider.Config{Backends: map[string]provider.Backend{"bench": {Name: "bench", Kind: provider.KindACP, Model: "bench",
		Agent: &provider.Agent{Command: a.command, Args: a.args, Env: a.env, EnvVars: keys, SessionMeta: a.meta}}}}
	q, err := broker.Open(ctx, broker.Path(state), broker.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = q.Close() }()
	k := &aichat.Kind{
		Chats:    conversation.New(conversation.Options{Dir: conversation.SessionsDir(state)}),
		StateDir: state,
		Config:   func() (*provider.Config, error) { return cfg, nil },
		Getenv: func(v string) string {
			switch v {
			case "PATH":
				return os.Getenv(v)
			case "HOME":
				return home
			case "LANG":
				return "C.UTF-8"
			}
			return a.keys[v]
		},
		Logs:   &aichat.LogOptions{Context: true, Verbose: true},
		Broker: q,
	}
	r, err := live.New(ctx, live.Config{IdleTimeout: -1}, k)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Shutdown(ctx) }()
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: "bench", Level: "yolo", Workspace: ws})
	s, err := r.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:main:bench:acp"}, Options: opts})
	if err != nil {
		return nil, err
	}
	var after uint64
	var times []float64
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: fmt.Appendf(nil, "Say hello (%d).", i)}); err != nil {
			return nil, err
		}
		var first time.Time
		for ended := false; !ended; {
			batch, err := r.Read(ctx, s.SessionID, after, 0, 30*time.Second)
			if err != nil {
				return nil, err
			}
			for _, ev := range batch.Events {
				after = max(after, ev.Seq)
				switch p := ev.Payload.(type) {
				case abi.AIToken:
					if first.IsZero() && p.Content != "" {
						first = time.Now()
					}
				case abi.AITurn:
					if p.Phase == abi.PhaseEnded {
						if p.End != abi.TurnCompleted {
							return nil, fmt.Errorf("turn %d: %s %s", i, p.End, p.Reason)
						}
						ended = true
					}
				}
			}
		}
		if first.IsZero() {
			return nil, fmt.Errorf("turn %d: no token", i)
		}
		times = append(times, float64(first.Sub(start).Microseconds())/1000)
	}
	return times, nil
}

type gated struct {
	r    io.Reader
	open chan struct{}
}

func (g gated) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
