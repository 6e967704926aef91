// Command acp measures `nexus acp` (docs/acp.md) against the direct use of the gateway it
// relays, with the real binary (`nexus serve`, `nexus acp`, `nexus ai message send`).
//
// Time to first token, on the real local model server (llama.cpp's llama-server with the tiny
// model of tools/llm, an agent without tools so that a turn is one model call): a prompt
// through `nexus acp` (already running and initialized, as in an editor; the Go ACP SDK's
// client) to its first agent_message_chunk, against `nexus ai message send` from its start to
// its first byte on stdout, and against the gateway's own client (SendMessage to the first
// ai-token event, in this process).
//
// The relay's overhead per update: a scripted OpenAI-compatible server streams a reply of many
// tokens as fast as it can; the turn's time to its last update through `nexus acp`, minus the
// time to its last ai-token through the gateway's client, per token.
//
//	go run ./bench/acp            # the figures of docs/BENCHMARKS.md
//	go run ./bench/acp -quick     # a smoke run
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

type result struct {
	Machine benchenv.Machine `json:"machine"`
	Runs    int              `json:"runs"`
	// Time to first token on the real model server, milliseconds: each run's, sorted.
	TTFTAcpMs    []float64 `json:"ttftAcpMs"`
	TTFTSendMs   []float64 `json:"ttftSendMs"`
	TTFTClientMs []float64 `json:"ttftClientMs"`
	// The relay: a reply of Tokens tokens, the time to its last update, each run's.
	Tokens        int       `json:"tokens"`
	RelayAcpMs    []float64 `json:"relayAcpMs"`
	RelayClientMs []float64 `json:"relayClientMs"`
	// UpdatesSeen: the agent_message_chunk updates of the last ACP run (one per token).
	UpdatesSeen int `json:"updatesSeen"`
}

func main() {
	runs := flag.Int("n", 15, "runs of each measurement")
	tokens := flag.Int("tokens", 2000, "tokens of the relay's reply")
	quick := flag.Bool("quick", false, "a smoke run")
	out := flag.String("out", "bench/results", "directory of the JSON results")
	flag.Parse()
	if *quick {
		*runs, *tokens = 2, 200
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	res := &result{Machine: benchenv.Probe("bash"), Runs: *runs, Tokens: *tokens}
	var errs []string
	if err := run(ctx, res, *runs, *tokens); err != nil {
		errs = append(errs, err.Error())
	}
	res.Machine.LoadEnd = benchenv.LoadAvg()
	print(os.Stdout, res)
	if path, err := benchenv.WriteResults(*out, "acp", res); err == nil {
		fmt.Println("results:", path)
	} else {
		errs = append(errs, err.Error())
	}
	benchenv.PrintFooter(os.Stdout, errs, time.Since(start).Seconds())
	if len(errs) > 0 {
		os.Exit(1)
	}
}

// scripted answers every request with a reply of n tokens, written as fast as it can, and
// records the tools offered.
type scripted struct {
	n     int
	mu    sync.Mutex
	tools []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	s.mu.Lock()
	for _, t := range req.Tools {
		if !slices.Contains(s.tools, t.Function.Name) {
			s.tools = append(s.tools, t.Function.Name)
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	bw := bufio.NewWriter(w)
	for i := range s.n {
		fmt.Fprintf(bw, "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"scripted\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	fmt.Fprint(bw, "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"scripted\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12}}\n\ndata: [DONE]\n\n")
	_ = bw.Flush()
}

type env struct {
	bin, home, ws string
	cl            *client.Client
}

func (e *env) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, e.bin, args...) //nolint:gosec // G204: the binary this bench built
	c.Env = append(os.Environ(), "NEXUS_HOME="+e.home)
	c.Stderr = os.Stderr
	return c
}

func run(ctx context.Context, res *result, runs, tokens int) error {
	dir, err := os.MkdirTemp("", "nexus-bench-acp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	e := &env{bin: filepath.Join(dir, "nexus"), home: filepath.Join(dir, "home"), ws: filepath.Join(dir, "ws")}
	for _, d := range []string{e.home, e.ws} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", e.bin, "./cmd/nexus")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build nexus: %w", err)
	}
	llm, skip, err := llmserver.Start(ctx)
	if err != nil || skip != "" {
		if err != nil {
			return fmt.Errorf("the real model server: %w", err)
		}
		return fmt.Errorf("the real model server: %s", skip)
	}
	defer llm.Stop()
	sm := &scripted{n: tokens}
	srv := httptest.NewServer(sm)
	defer srv.Close()
	cfg := fmt.Sprintf("[backends.llm]\nkind = \"openai-compatible\"\nbase_url = \"%s/v1\"\nmodel = \"probe\"\ncontext_window = 4096\nmax_tokens = 64\n\n"+
		"[backends.scripted]\nkind = \"openai-compatible\"\nbase_url = \"%s/v1\"\nmodel = \"scripted\"\ncontext_window = 1000000\n", llm.URL, srv.URL)
	if err := os.WriteFile(filepath.Join(e.home, "config.toml"), []byte(cfg), 0o600); err != nil {
		return err
	}
	serve := e.cmd(ctx, "serve", "--no-index")
	serve.Stderr = nil // the gateway's log: one line per session
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	e.cl = client.New(client.Target{Socket: filepath.Join(e.home, "state", "gateway.sock")})
	for i := 0; ; i++ {
		if _, err := e.cl.Version(ctx); err == nil {
			break
		} else if i == 200 {
			return fmt.Errorf("the gateway did not start: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The tools the kind offers, from one turn on the scripted model, all disabled for the
	// agent of the first-token runs: the tiny model answers a request without tools in text.
	if _, err := e.turn(ctx, "scripted", ""); err != nil {
		return fmt.Errorf("a turn to learn the tools: %w", err)
	}
	sm.mu.Lock()
	disable := strings.Join(sm.tools, ",")
	sm.mu.Unlock()
	add := e.cmd(ctx, "agent", "add", "quiet", "--backend", "llm", "--level", "yolo", "--disable-tool", disable)
	add.Stdout = io.Discard
	if err := add.Run(); err != nil {
		return fmt.Errorf("agent add: %w", err)
	}

	// nexus acp, started once (as an editor does; one for each agent), a new session per run.
	// The runs of the three ways alternate, so the machine's load is shared alike.
	quiet, err := e.startACP(ctx, "quiet", "llm")
	if err != nil {
		return err
	}
	defer quiet.stop()
	relay, err := e.startACP(ctx, "main", "scripted")
	if err != nil {
		return err
	}
	defer relay.stop()
	for range runs {
		d, err := quiet.prompt(ctx, e.ws)
		if err != nil {
			return fmt.Errorf("nexus acp prompt: %w", err)
		}
		res.TTFTAcpMs = append(res.TTFTAcpMs, ms(d.first))
		d, err = e.turn(ctx, "llm", "quiet")
		if err != nil {
			return fmt.Errorf("client turn: %w", err)
		}
		res.TTFTClientMs = append(res.TTFTClientMs, ms(d.first))
		sd, err := e.send(ctx)
		if err != nil {
			return fmt.Errorf("nexus ai message send: %w", err)
		}
		res.TTFTSendMs = append(res.TTFTSendMs, ms(sd))
		d, err = relay.prompt(ctx, e.ws)
		if err != nil {
			return fmt.Errorf("nexus acp relay prompt: %w", err)
		}
		res.RelayAcpMs = append(res.RelayAcpMs, ms(d.last))
		res.UpdatesSeen = d.updates
		d, err = e.turn(ctx, "scripted", "")
		if err != nil {
			return fmt.Errorf("client relay turn: %w", err)
		}
		res.RelayClientMs = append(res.RelayClientMs, ms(d.last))
	}
	return nil
}

type timing struct {
	first, last time.Duration
	updates     int
}

// turn opens an ai-chat session (agent "" for main) on backend, sends a message and follows
// the turn: the time to its first and last ai-token.
func (e *env) turn(ctx context.Context, backend, agent string) (timing, error) {
	zero := 0.0
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: backend, Agent: agent, Level: "yolo", Workspace: e.ws, Temperature: &zero})
	s, err := e.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Options: opts})
	if err != nil {
		return timing{}, err
	}
	defer func() {
		_, _ = e.cl.Control(context.WithoutCancel(ctx), s.SessionID, abi.ControlRequest{Command: abi.CommandClose})
	}()
	var t timing
	t0 := time.Now()
	sent, err := e.cl.SendMessage(ctx, s.SessionID, []byte("hello"), "")
	if err != nil {
		return t, err
	}
	errOver := errors.New("over")
	err = e.cl.Stream(ctx, s.SessionID, client.StreamOptions{After: sent.AfterSeq, Follow: true}, func(ev abi.Event) error {
		var p struct {
			Type    string `json:"type"`
			Phase   string `json:"phase"`
			Content string `json:"content"`
		}
		if ev.Event != abi.EventData || json.Unmarshal(ev.Payload, &p) != nil {
			return nil
		}
		switch {
		case p.Type == abi.PayloadAIToken && p.Content != "":
			if t.first == 0 {
				t.first = time.Since(t0)
			}
			t.last = time.Since(t0)
			t.updates++
		case p.Type == abi.PayloadAITurn && p.Phase == abi.PhaseEnded:
			return errOver
		}
		return nil
	})
	if !errors.Is(err, errOver) {
		return t, fmt.Errorf("stream: %w", err)
	}
	if t.first == 0 {
		return t, errors.New("the turn streamed no token")
	}
	return t, nil
}

// send runs nexus ai message send on a new session of the quiet agent: the time from its
// start to its first byte on stdout.
func (e *env) send(ctx context.Context) (time.Duration, error) {
	open := e.cmd(ctx, "ai", "chat", "open", "--agent", "quiet", "--workspace", e.ws, "--temperature", "0", "--format", "json")
	b, err := open.Output()
	if err != nil {
		return 0, fmt.Errorf("ai chat open: %w", err)
	}
	var s abi.Session
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, err
	}
	defer func() {
		_, _ = e.cl.Control(context.WithoutCancel(ctx), s.SessionID, abi.ControlRequest{Command: abi.CommandClose})
	}()
	c := e.cmd(ctx, "ai", "message", "send", "--session-id", s.SessionID, "hello")
	out, err := c.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := c.Start(); err != nil {
		return 0, err
	}
	one := make([]byte, 1)
	_, rerr := io.ReadFull(out, one)
	d := time.Since(t0)
	_, _ = io.Copy(io.Discard, out)
	if err := c.Wait(); err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, fmt.Errorf("no output: %w", rerr)
	}
	return d, nil
}

// acpClient is the editor's side: the Go ACP SDK's client connection to `nexus acp`.
type acpClient struct {
	cmd  *exec.Cmd
	conn *acp.ClientSideConnection
	in   io.WriteCloser

	mu      sync.Mutex
	t0      time.Time
	first   time.Duration
	last    time.Duration
	updates int
}

func (e *env) startACP(ctx context.Context, agent, backend string) (*acpClient, error) {
	c := e.cmd(ctx, "acp", "--agent", agent, "--backend", backend, "--level", "yolo", "--temperature", "0", "--log-level", "warn")
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	a := &acpClient{cmd: c, in: in}
	a.conn = acp.NewClientSideConnection(a, in, out)
	a.conn.SetLogger(slog.New(slog.DiscardHandler))
	if _, err := a.conn.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber}); err != nil {
		a.stop()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	return a, nil
}

func (a *acpClient) stop() {
	_ = a.in.Close()
	_ = a.cmd.Wait()
}

// prompt opens a session (the backend is the agent's) and prompts it: the time to the first
// and the last agent_message_chunk.
func (a *acpClient) prompt(ctx context.Context, ws string) (timing, error) {
	s, err := a.conn.NewSession(ctx, acp.NewSessionRequest{Cwd: ws, McpServers: []acp.McpServer{}})
	if err != nil {
		return timing{}, fmt.Errorf("session/new: %w", err)
	}
	a.mu.Lock()
	a.t0, a.first, a.last, a.updates = time.Now(), 0, 0, 0
	a.mu.Unlock()
	r, err := a.conn.Prompt(ctx, acp.PromptRequest{SessionId: s.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock("hello")}})
	if err != nil {
		return timing{}, err
	}
	if r.StopReason != acp.StopReasonEndTurn {
		return timing{}, fmt.Errorf("stop reason %s", r.StopReason)
	}
	if _, err := a.conn.CloseSession(ctx, acp.CloseSessionRequest{SessionId: s.SessionId}); err != nil {
		return timing{}, fmt.Errorf("session/close: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.first == 0 {
		return timing{}, errors.New("no agent_message_chunk")
	}
	return timing{first: a.first, last: a.last, updates: a.updates}, nil
}

func (a *acpClient) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if n.Update.AgentMessageChunk == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	d := time.Since(a.t0)
	if a.first == 0 {
		a.first = d
	}
	a.last = d
	a.updates++
	return nil
}

func (a *acpClient) RequestPermission(context.Context, acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	return acp.RequestPermissionResponse{Outcome: acp.NewRequestPermissionOutcomeCancelled()}, nil
}

func (a *acpClient) ReadTextFile(context.Context, acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	return acp.ReadTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsReadTextFile)
}

func (a *acpClient) WriteTextFile(context.Context, acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	return acp.WriteTextFileResponse{}, acp.NewMethodNotFound(acp.ClientMethodFsWriteTextFile)
}

func (a *acpClient) CreateTerminal(context.Context, acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	return acp.CreateTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalCreate)
}

func (a *acpClient) KillTerminal(context.Context, acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	return acp.KillTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalKill)
}

func (a *acpClient) TerminalOutput(context.Context, acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	return acp.TerminalOutputResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalOutput)
}

func (a *acpClient) ReleaseTerminal(context.Context, acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	return acp.ReleaseTerminalResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalRelease)
}

func (a *acpClient) WaitForTerminalExit(context.Context, acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	return acp.WaitForTerminalExitResponse{}, acp.NewMethodNotFound(acp.ClientMethodTerminalWaitForExit)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func spread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("median %.1f ms (min %.1f, max %.1f)", s[len(s)/2], s[0], s[len(s)-1])
}

func print(w io.Writer, r *result) {
	fmt.Fprintf(w, "machine: %d CPU %s, load %s → %s\n", r.Machine.NumCPU, r.Machine.CPUModel, r.Machine.LoadStart, r.Machine.LoadEnd)
	fmt.Fprintf(w, "time to first token, real llama-server, %d runs each:\n", r.Runs)
	fmt.Fprintf(w, "  nexus acp (prompt → first agent_message_chunk)      %s\n", spread(r.TTFTAcpMs))
	fmt.Fprintf(w, "  nexus ai message send (start → first stdout byte)   %s\n", spread(r.TTFTSendMs))
	fmt.Fprintf(w, "  gateway client (send → first ai-token)              %s\n", spread(r.TTFTClientMs))
	fmt.Fprintf(w, "relay of a %d-token reply (scripted server), time to the last update:\n", r.Tokens)
	fmt.Fprintf(w, "  nexus acp      %s (%d updates)\n", spread(r.RelayAcpMs), r.UpdatesSeen)
	fmt.Fprintf(w, "  gateway client %s\n", spread(r.RelayClientMs))
	if r.Tokens > 0 && len(r.RelayAcpMs) > 0 {
		per := (median(r.RelayAcpMs) - median(r.RelayClientMs)) / float64(r.Tokens) * 1000
		fmt.Fprintf(w, "  the relay's overhead per update: %.1f µs (difference of the medians / tokens)\n", per)
	}
}
