// Command aichat benchmarks the ai-chat session kind as `nexus serve` runs it (gateway.Assemble
// serving ai-chat on a unix socket, transcripts written on disk), against a scripted
// OpenAI-compatible server on loopback, so the model's own time is known and can be left out.
// It measures the loop's overhead per tool call (turns of cheap list_dir calls, minus the time
// in model calls and tools), the latency of each token from the provider's socket to a
// WebSocket subscriber (and to the SDK read directly, with no gateway), the relay rate as a
// ratio to the rate the provider wrote, and the memory of idle ai-chat sessions. With -llm
// (or -llm-url) the subagent burst runs a second time on the real local model server,
// llama.cpp's llama-server with the tiny model of tools/llm (llm.go).
//
//	go run ./bench/aichat           # the figures of docs/BENCHMARKS.md
//	go run ./bench/aichat -llm      # and the subagents on the real llama-server
//	go run ./bench/aichat -quick    # a smoke run
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nexus-run/nexus/bench/internal/benchenv"
	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/provider"
)

type config struct {
	calls, turns  int
	tokens, paced int
	rate          int
	sessions      int
	acks          int
	subagents     int
	outDir        string
	// llm runs spawn a second time on the real llama-server (llmURL: one already running;
	// llmArgs: extra llama-server arguments for the one started here).
	llm     bool
	llmURL  string
	llmArgs string
}

// Results is the JSON document written to bench/results/.
type Results struct {
	Command  string           `json:"command"`
	Started  string           `json:"started"`
	Seconds  float64          `json:"seconds"`
	Machine  benchenv.Machine `json:"machine"`
	Config   map[string]any   `json:"config"`
	Overhead *OverheadResult  `json:"overhead,omitempty"`
	Latency  *LatencyResult   `json:"latency,omitempty"`
	Relay    []RelayRow       `json:"relay,omitempty"`
	Memory   *MemoryResult    `json:"memory,omitempty"`
	Ack      *AckResult       `json:"ack,omitempty"`
	Spawn    *SpawnResult     `json:"spawn,omitempty"`
	SpawnLLM *LLMSpawnResult  `json:"spawnLlamaServer,omitempty"`
	Errors   []string         `json:"errors,omitempty"`
}

// OverheadResult is the loop's own time per tool call.
type OverheadResult struct {
	Calls          int     `json:"calls"`
	TurnMs         float64 `json:"turnMs"`
	ModelMs        float64 `json:"modelMs"`
	ToolMs         float64 `json:"toolMs"`
	PerCallMs      float64 `json:"perCallMs"`
	PerTurnMs      float64 `json:"perTurnMs"`
	AvgPerCallMs   float64 `json:"avgPerCallMs"`
	TranscriptSync bool    `json:"transcriptSync"`
}

// LatencyResult is provider socket → WebSocket subscriber, per token, and the same tokens
// read by the provider's SDK directly in-process (what a program calling the API itself gets).
type LatencyResult struct {
	Tokens      int     `json:"tokens"`
	P50Ms       float64 `json:"p50Ms"`
	P99Ms       float64 `json:"p99Ms"`
	MaxMs       float64 `json:"maxMs"`
	DirectP50Ms float64 `json:"directP50Ms"`
	DirectP99Ms float64 `json:"directP99Ms"`
}

// RelayRow is one relay-rate case.
type RelayRow struct {
	Case        string  `json:"case"`
	Tokens      int     `json:"tokens"`
	SentPerSec  float64 `json:"sentPerSec"`
	RecvPerSec  float64 `json:"recvPerSec"`
	Ratio       float64 `json:"ratio"`
	AllReceived bool    `json:"allReceived"`
}

// AckResult is how long a queued message takes to be acknowledged: stored with its fsync.
type AckResult struct {
	Messages   int     `json:"messages"`
	SendP50Ms  float64 `json:"sendP50Ms"`
	SendP99Ms  float64 `json:"sendP99Ms"`
	StoreP50Ms float64 `json:"storeP50Ms"`
	StoreP99Ms float64 `json:"storeP99Ms"`
	FsyncP50Ms float64 `json:"fsyncP50Ms"`
}

// SpawnResult is N subagents spawned at once: until every one has announced, and what an idle
// one (its session waiting on the model) costs the gateway.
type SpawnResult struct {
	Subagents      int     `json:"subagents"`
	SpawnMs        float64 `json:"spawnMs"`
	AllAnnouncedMs float64 `json:"allAnnouncedMs"`
	// AllDeliveredMs: every announcement delivered into the parent's transcript (its turn
	// started); CPUMs: this process's CPU time (the gateway, the bench) until then.
	AllDeliveredMs float64 `json:"allDeliveredMs"`
	CPUMs          float64 `json:"cpuMs"`
	HeapPerKB      float64 `json:"heapPerSubagentKB"`
}

// MemoryResult is the cost of idle ai-chat sessions.
type MemoryResult struct {
	Sessions      int     `json:"sessions"`
	HeapPerKB     float64 `json:"heapPerSessionKB"`
	RSSPerKB      float64 `json:"rssPerSessionKB"`
	BaselineHeap  float64 `json:"baselineHeapMB"`
	BaselineRSSMB float64 `json:"baselineRSSMB"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg config
	var quick bool
	flag.IntVar(&cfg.calls, "calls", 50, "overhead: tool calls per turn (one per model call)")
	flag.IntVar(&cfg.turns, "turns", 5, "overhead: turns measured")
	flag.IntVar(&cfg.tokens, "tokens", 20000, "relay: tokens of the unpaced stream")
	flag.IntVar(&cfg.paced, "paced-tokens", 3000, "latency and paced relay: tokens")
	flag.IntVar(&cfg.rate, "rate", 1000, "latency and paced relay: tokens per second the provider writes")
	flag.IntVar(&cfg.sessions, "sessions", 300, "memory: idle ai-chat sessions")
	flag.IntVar(&cfg.acks, "acks", 500, "ack: messages queued")
	flag.IntVar(&cfg.subagents, "subagents", 100, "spawn: subagents spawned at once")
	flag.BoolVar(&quick, "quick", false, "smoke run: -calls 10 -turns 2 -tokens 2000 -paced-tokens 300 -sessions 30")
	flag.StringVar(&cfg.outDir, "out", "bench/results", "directory for the JSON results")
	flag.BoolVar(&cfg.llm, "llm", false, "spawn: also on the real local model server (llama-server started with tools/llm/serve.sh)")
	flag.StringVar(&cfg.llmURL, "llm-url", "", "spawn: also on this running llama-server (http://127.0.0.1:PORT) instead of starting one")
	flag.StringVar(&cfg.llmArgs, "llm-args", "", "extra llama-server arguments for -llm (e.g. \"-np 4 -c 32768\": slots share the context)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if quick {
		cfg.calls, cfg.turns, cfg.tokens, cfg.paced, cfg.sessions, cfg.acks, cfg.subagents = 10, 2, 2000, 300, 30, 50, 10
	}
	start := time.Now()
	res := &Results{Command: strings.Join(os.Args, " "), Started: start.UTC().Format(time.RFC3339), Machine: benchenv.Probe("bash"),
		Config: map[string]any{"calls": cfg.calls, "turns": cfg.turns, "tokens": cfg.tokens, "pacedTokens": cfg.paced, "rate": cfg.rate, "sessions": cfg.sessions}}
	ctx := context.Background()
	// First, in a process with nothing else in it yet: its own gateway's shutdown would free
	// memory while memory measures, and the others' idle sessions would weigh on its GC.
	if cfg.llm || cfg.llmURL != "" {
		if err := runLLM(ctx, cfg, res); err != nil {
			return err
		}
	}
	h, err := startHarness(ctx, "")
	if err != nil {
		return err
	}
	defer h.stop()
	if res.Overhead, err = overhead(ctx, h, cfg); err != nil {
		res.Errors = append(res.Errors, "overhead: "+err.Error())
	}
	lat, rows, err := relay(ctx, h, cfg)
	if err != nil {
		res.Errors = append(res.Errors, "relay: "+err.Error())
	}
	if lat != nil {
		if lat.DirectP50Ms, lat.DirectP99Ms, err = direct(ctx, h, cfg); err != nil {
			res.Errors = append(res.Errors, "direct: "+err.Error())
		}
	}
	res.Latency, res.Relay = lat, rows
	if res.Ack, err = ack(ctx, h, cfg); err != nil {
		res.Errors = append(res.Errors, "ack: "+err.Error())
	}
	if res.Spawn, err = spawn(ctx, h, cfg); err != nil {
		res.Errors = append(res.Errors, "spawn: "+err.Error())
	}
	if res.Memory, err = memory(ctx, h, cfg); err != nil {
		res.Errors = append(res.Errors, "memory: "+err.Error())
	}
	res.Machine.LoadEnd = benchenv.LoadAvg()
	res.Seconds = time.Since(start).Seconds()
	report(res)
	path, err := benchenv.WriteResults(cfg.outDir, "aichat", res)
	if err != nil {
		return err
	}
	fmt.Println("results:", path)
	return nil
}

// model is the scripted provider. A user message "tools N" makes a turn of N model calls each
// asking for list_dir on a different directory; "stream N R" streams N tokens at R per second
// (R 0: as fast as the connection takes them), recording when each was written.
type model struct {
	mu   sync.Mutex
	sent []time.Time
	// tools are the names of the tools the last request offered.
	tools []string
}

func (m *model) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tools := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		tools[i] = t.Function.Name
	}
	m.mu.Lock()
	m.tools = tools
	m.mu.Unlock()
	var user string
	results := 0
	for _, msg := range req.Messages {
		switch msg.Role {
		case "user":
			var s string
			if json.Unmarshal(msg.Content, &s) != nil {
				var parts []struct {
					Text string `json:"text"`
				}
				_ = json.Unmarshal(msg.Content, &parts)
				if len(parts) > 0 {
					s = parts[0].Text
				}
			}
			user, results = s, 0
		case "tool":
			results++
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	chunk := func(delta map[string]any, finish string) {
		c := map[string]any{"id": "b", "object": "chat.completion.chunk", "created": 0, "model": "bench",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nilIf(finish)}}}
		if finish != "" {
			c["usage"] = map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
		}
		b, _ := json.Marshal(c)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
	}
	done := func() {
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		f.Flush()
	}
	fields := strings.Fields(user)
	switch {
	case len(fields) == 2 && fields[0] == "tools":
		n, _ := strconv.Atoi(fields[1])
		if results < n {
			args, _ := json.Marshal(map[string]any{"path": fmt.Sprintf("d%d", results)})
			chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("c%d", results), "type": "function",
				"function": map[string]any{"name": "list_dir", "arguments": string(args)}}}}, "")
			chunk(map[string]any{}, "tool_calls")
		} else {
			chunk(map[string]any{"role": "assistant", "content": "done"}, "")
			chunk(map[string]any{}, "stop")
		}
		done()
	case user == "hang": // an idle subagent: the reply starts and never ends
		chunk(map[string]any{"role": "assistant", "content": "..."}, "")
		f.Flush()
		<-r.Context().Done()
	case len(fields) == 3 && fields[0] == "stream":
		n, _ := strconv.Atoi(fields[1])
		rate, _ := strconv.Atoi(fields[2])
		sent := make([]time.Time, n)
		var every time.Duration
		if rate > 0 {
			every = time.Second / time.Duration(rate)
		}
		t0 := time.Now()
		for i := range n {
			if every > 0 {
				if d := time.Until(t0.Add(time.Duration(i) * every)); d > 0 {
					select {
					case <-time.After(d):
					case <-r.Context().Done(): // the turn was aborted
						return
					}
				}
			}
			sent[i] = time.Now()
			chunk(map[string]any{"content": fmt.Sprintf("t%d ", i)}, "")
			f.Flush()
		}
		// Recorded before the end is written: the reader may look as soon as it has it.
		m.mu.Lock()
		m.sent = sent
		m.mu.Unlock()
		chunk(map[string]any{}, "stop")
		done()
	default:
		chunk(map[string]any{"role": "assistant", "content": "ok"}, "")
		chunk(map[string]any{}, "stop")
		done()
	}
}

func nilIf(s string) any {
	if s == "" {
		return nil
	}
	return s
}

type harness struct {
	dir    string
	state  string
	ws     string
	sock   string
	reg    *live.Registry
	cl     *client.Client
	m      *model
	srv    *httptest.Server
	queues broker.Queues
	cancel context.CancelFunc
	done   chan error
}

// startHarness starts the gateway; llmBase, when set, is the real server's (the llm backend).
func startHarness(ctx context.Context, llmBase string) (*harness, error) {
	dir, err := os.MkdirTemp("", "nexus-bench-aichat-")
	if err != nil {
		return nil, err
	}
	h := &harness{dir: dir, ws: filepath.Join(dir, "ws"), m: &model{}, done: make(chan error, 1)}
	for i := range 1000 {
		if err := os.MkdirAll(filepath.Join(h.ws, fmt.Sprintf("d%d", i)), 0o700); err != nil {
			return nil, err
		}
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		return nil, err
	}
	h.state = state
	h.srv = httptest.NewServer(http.HandlerFunc(h.m.serve))
	cfgText := fmt.Sprintf("[backends.bench]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"bench\"\ncontext_window = 1000000\n", h.srv.URL+"/v1")
	if llmBase != "" {
		// As the real-model tests configure it (internal/cli/ai_script_test.go).
		cfgText += fmt.Sprintf("\n[backends.%s]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"probe\"\ncontext_window = 4096\nmax_tokens = 256\n", llmBackend, llmBase+"/v1")
	}
	ready := make(chan gateway.Info, 1)
	d, err := gateway.Assemble(ctx, gateway.Config{
		StateDir: state, Version: "bench", Types: []abi.SessionType{abi.TypeAIChat},
		IdleTimeout: -1, MaxSessions: 100000, Store: live.NewMemoryStore(),
		Backends: func() (*provider.Config, error) { return provider.ParseConfig([]byte(cfgText)) },
		Getenv:   func(string) string { return "" },
		// What nexus serve writes by default: context.md and verbose.md.
		AILogs: &aichat.LogOptions{Context: true, Verbose: true},
		// The subagent benchmark spawns 100 at once from one conversation.
		Subagents:       aichat.SubagentLimits{MaxChildren: 1000, MaxRunning: 1000, MaxRuns: 1000},
		ShutdownTimeout: 60 * time.Second,
		Ready:           func(in gateway.Info, _ *console.Auth) { ready <- in },
	})
	if err != nil {
		return nil, err
	}
	h.queues = d.Broker
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.cancel = cancel
	go func() { h.done <- d.Run(sctx) }()
	select {
	case in := <-ready:
		h.sock = in.Socket
		h.reg = d.Registry
	case err := <-h.done:
		return nil, fmt.Errorf("gateway did not start: %w", err)
	}
	h.cl = client.New(client.Target{Socket: h.sock})
	return h, nil
}

func (h *harness) stop() {
	h.cancel()
	if err := <-h.done; err != nil {
		fmt.Fprintln(os.Stderr, "bench: gateway:", err)
	}
	h.srv.Close() // the daemon closed the queue when it stopped
	_ = os.RemoveAll(h.dir)
}

func (h *harness) open(ctx context.Context, maxIter int) (string, error) {
	opts, _ := json.Marshal(abi.AIChatOptions{Backend: "bench", Level: "yolo", Workspace: h.ws, MaxToolIterations: maxIter})
	s, err := h.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Options: opts})
	return s.SessionID, err
}

// turn sends text and returns the turn's events (read in-process, with their times).
func (h *harness) turn(ctx context.Context, id, text string) ([]*live.Event, error) {
	after, err := h.cl.SendAfter(ctx, id, []byte(text))
	if err != nil {
		return nil, err
	}
	var evs []*live.Event
	for {
		b, err := h.reg.Read(ctx, id, after, 0, time.Minute)
		if err != nil {
			return nil, err
		}
		for _, e := range b.Events {
			evs = append(evs, e)
			if p, ok := e.Payload.(abi.AITurn); ok && p.Phase == abi.PhaseEnded {
				if p.End != abi.TurnCompleted {
					return evs, fmt.Errorf("the turn ended %s: %s", p.End, p.Reason)
				}
				return evs, nil
			}
		}
		after = b.Next
	}
}

// overhead measures turns of cfg.calls/5 and cfg.calls tool calls: the loop's time per call
// is the slope between them (what one more call costs), the rest is the turn's fixed cost
// (opening the transcript, sessions.json, the run's records).
func overhead(ctx context.Context, h *harness, cfg config) (*OverheadResult, error) {
	small := max(cfg.calls/5, 1)
	loopSmall, _, _, _, err := loopTime(ctx, h, small, cfg.turns)
	if err != nil {
		return nil, err
	}
	loopBig, turn, model, tool, err := loopTime(ctx, h, cfg.calls, cfg.turns)
	if err != nil {
		return nil, err
	}
	perCall := (loopBig - loopSmall) / float64(cfg.calls-small)
	if cfg.calls == small {
		perCall = loopBig / float64(cfg.calls)
	}
	return &OverheadResult{Calls: cfg.calls, TurnMs: turn, ModelMs: model, ToolMs: tool, PerCallMs: perCall,
		PerTurnMs: loopBig - perCall*float64(cfg.calls), AvgPerCallMs: loopBig / float64(cfg.calls), TranscriptSync: true}, nil
}

// loopTime runs turns of calls tool calls each (after a warm-up turn) and returns the mean
// loop time (turn minus model calls minus tools), turn, model and tool times, in ms.
func loopTime(ctx context.Context, h *harness, calls, turns int) (loop, turn, model, tool float64, err error) {
	id, err := h.open(ctx, calls+1)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	var turnSum, modelSum, toolSum time.Duration
	for t := range turns + 1 {
		evs, err := h.turn(ctx, id, fmt.Sprintf("tools %d", calls))
		if err != nil {
			return 0, 0, 0, 0, err
		}
		var begin, end, connecting, started time.Time
		var md, td time.Duration
		for _, e := range evs {
			switch p := e.Payload.(type) {
			case abi.AITurn:
				if p.Phase == abi.PhaseStarted {
					begin = e.Time
				} else {
					end = e.Time
				}
			case abi.StatusPayload:
				switch p.Status {
				case abi.StateConnecting:
					connecting = e.Time
				case abi.StateIdle:
					md += e.Time.Sub(connecting)
				}
			case abi.AITool:
				switch p.Phase {
				case abi.PhaseStarted:
					started = e.Time
				case abi.PhaseCompleted:
					td += e.Time.Sub(started)
				}
			}
		}
		if t == 0 {
			continue // warm-up: connections, the transcript file's creation
		}
		turnSum, modelSum, toolSum = turnSum+end.Sub(begin), modelSum+md, toolSum+td
	}
	n := float64(turns) * 1e6
	if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		return 0, 0, 0, 0, err
	}
	return float64(turnSum-modelSum-toolSum) / n, float64(turnSum) / n, float64(modelSum) / n, float64(toolSum) / n, nil
}

// relay streams tokens to a WebSocket subscriber: paced (latency and rate) and unpaced.
func relay(ctx context.Context, h *harness, cfg config) (*LatencyResult, []RelayRow, error) {
	var lat *LatencyResult
	var rows []RelayRow
	for _, c := range []struct {
		name   string
		tokens int
		rate   int
	}{
		{fmt.Sprintf("paced %d tok/s", cfg.rate), cfg.paced, cfg.rate},
		{fmt.Sprintf("paced %d tok/s", 10*cfg.rate), 10 * cfg.paced, 10 * cfg.rate},
		// Unpaced, the provider's writes only fill socket buffers: the received rate is the
		// relay's ceiling, the ratio says nothing.
		{"unpaced (the relay's ceiling)", cfg.tokens, 0},
	} {
		id, err := h.open(ctx, 0)
		if err != nil {
			return nil, nil, err
		}
		conn, err := h.cl.Dial(ctx, id, client.DialOptions{})
		if err != nil {
			return nil, nil, err
		}
		recv := make([]time.Time, c.tokens)
		got := 0
		errc := make(chan error, 1)
		go func() {
			defer close(errc)
			for {
				e, err := conn.Next(ctx)
				if err != nil {
					errc <- err
					return
				}
				if e.Event != abi.EventData {
					continue
				}
				var p struct {
					Type    string `json:"type"`
					Content string `json:"content"`
					Phase   string `json:"phase"`
				}
				if json.Unmarshal(e.Payload, &p) != nil {
					continue
				}
				if p.Type == abi.PayloadAITurn && p.Phase == abi.PhaseEnded {
					return
				}
				if p.Type != abi.PayloadAIToken || !strings.HasPrefix(p.Content, "t") {
					continue
				}
				i, err := strconv.Atoi(strings.TrimSpace(p.Content[1:]))
				if err == nil && i < len(recv) {
					recv[i] = time.Now()
					got++
				}
			}
		}()
		if _, err := h.cl.SendAfter(ctx, id, fmt.Appendf(nil, "stream %d %d", c.tokens, c.rate)); err != nil {
			return nil, nil, err
		}
		if err := <-errc; err != nil && !errors.Is(err, client.ErrStreamEnded) {
			return nil, nil, err
		}
		_ = conn.Close()
		h.m.mu.Lock()
		sent := h.m.sent
		h.m.mu.Unlock()
		row := RelayRow{Case: c.name, Tokens: c.tokens, AllReceived: got == c.tokens}
		if len(sent) == c.tokens && got == c.tokens {
			sendDur := sent[len(sent)-1].Sub(sent[0]).Seconds()
			recvDur := recv[len(recv)-1].Sub(recv[0]).Seconds()
			row.SentPerSec = float64(c.tokens-1) / sendDur
			row.RecvPerSec = float64(c.tokens-1) / recvDur
			row.Ratio = row.RecvPerSec / row.SentPerSec
			if c.rate == cfg.rate {
				d := make([]float64, c.tokens)
				for i := range d {
					d[i] = float64(recv[i].Sub(sent[i])) / 1e6
				}
				slices.Sort(d)
				lat = &LatencyResult{Tokens: c.tokens, P50Ms: d[len(d)/2], P99Ms: d[len(d)*99/100], MaxMs: d[len(d)-1]}
			}
		}
		rows = append(rows, row)
		if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
			return nil, nil, err
		}
	}
	return lat, rows, nil
}

// direct streams the paced tokens through provider.Stream in this process, with no gateway:
// the latency floor of reading the provider at all.
func direct(ctx context.Context, h *harness, cfg config) (p50, p99 float64, err error) {
	p, err := provider.Open(provider.Backend{Name: "bench", Kind: provider.KindOpenAICompatible, BaseURL: h.srv.URL + "/v1", Model: "bench"}, provider.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		return 0, 0, err
	}
	s, err := p.Stream(ctx, provider.Request{Messages: []provider.Message{provider.UserText(fmt.Sprintf("stream %d %d", cfg.paced, cfg.rate), 0)}})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = s.Close() }()
	recv := make([]time.Time, cfg.paced)
	for s.Next() {
		ev := s.Event()
		if ev.Type != provider.EventTextDelta || !strings.HasPrefix(ev.Delta, "t") {
			continue
		}
		if i, err := strconv.Atoi(strings.TrimSpace(ev.Delta[1:])); err == nil && i < len(recv) {
			recv[i] = time.Now()
		}
	}
	if err := s.Err(); err != nil {
		return 0, 0, err
	}
	h.m.mu.Lock()
	sent := h.m.sent
	h.m.mu.Unlock()
	if len(sent) != len(recv) {
		return 0, 0, errors.New("the provider's record does not match")
	}
	d := make([]float64, len(recv))
	for i := range d {
		d[i] = float64(recv[i].Sub(sent[i])) / 1e6
	}
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100], nil
}

// ack times sends of messages that queue behind a turn that does not end (the gateway's whole
// answer: HTTP, the queue's commit with its fsync), the store's commit alone, and a bare
// write+fdatasync of a small file on the same disk (the floor of any durable acknowledgement).
func ack(ctx context.Context, h *harness, cfg config) (*AckResult, error) {
	id, err := h.open(ctx, 0)
	if err != nil {
		return nil, err
	}
	if _, err := h.cl.SendMessage(ctx, id, fmt.Appendf(nil, "stream %d %d", 1000000, 1), ""); err != nil {
		return nil, err // a reply of a token a second: the session stays busy while messages queue
	}
	pct := func(d []float64) (float64, float64) {
		slices.Sort(d)
		return d[len(d)/2], d[len(d)*99/100]
	}
	n := cfg.acks
	send := make([]float64, n)
	for i := range n {
		t0 := time.Now()
		if _, err := h.cl.SendMessage(ctx, id, fmt.Appendf(nil, "queued %d", i), "followup"); err != nil {
			return nil, err
		}
		send[i] = float64(time.Since(t0)) / 1e6
	}
	store := make([]float64, n)
	for i := range n {
		t0 := time.Now()
		if _, err := h.queues.Enqueue(ctx, "bench:direct", broker.Followup, fmt.Sprintf("direct %d", i), ""); err != nil {
			return nil, err
		}
		store[i] = float64(time.Since(t0)) / 1e6
	}
	f, err := os.CreateTemp(h.dir, "fsync-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fs := make([]float64, n)
	for i := range n {
		t0 := time.Now()
		if _, err := f.WriteString("a queued message of some length\n"); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		fs[i] = float64(time.Since(t0)) / 1e6
	}
	if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		return nil, err
	}
	r := &AckResult{Messages: n}
	r.SendP50Ms, r.SendP99Ms = pct(send)
	r.StoreP50Ms, r.StoreP99Ms = pct(store)
	r.FsyncP50Ms, _ = pct(fs)
	return r, nil
}

// spawn starts cfg.subagents subagents from one conversation through the spawn command (the
// scripted model answers each task at once) and waits until all have announced into it; then
// as many whose model never answers, to weigh an idle one.
func spawn(ctx context.Context, h *harness, cfg config) (*SpawnResult, error) {
	n := cfg.subagents
	id, err := h.open(ctx, 0)
	if err != nil {
		return nil, err
	}
	s, err := h.cl.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	key, _ := s.Metadata["chatKey"].(string)
	cpu0 := cpuTime("self")
	t0 := time.Now()
	for i := range n {
		if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandSpawn, Spawn: &abi.SpawnRequest{Task: fmt.Sprintf("task %d", i), Cleanup: "keep"}}); err != nil {
			return nil, err
		}
	}
	res := &SpawnResult{Subagents: n, SpawnMs: float64(time.Since(t0)) / 1e6}
	announced, delivered, _, err := waitAnnounced(ctx, h, key, n, t0, true)
	if err != nil {
		return nil, err
	}
	res.AllAnnouncedMs, res.AllDeliveredMs, res.CPUMs = float64(announced)/1e6, float64(delivered)/1e6, ms(cpuTime("self")-cpu0)
	if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		return nil, err
	}
	id2, err := h.open(ctx, 0)
	if err != nil {
		return nil, err
	}
	h0 := heap()
	for range n {
		if _, err := h.cl.Control(ctx, id2, abi.ControlRequest{Command: abi.CommandSpawn, Spawn: &abi.SpawnRequest{Task: "hang", Cleanup: "keep"}}); err != nil {
			return nil, err
		}
	}
	res.HeapPerKB = (heap() - h0) / float64(n) / 1024
	return res, nil
}

// waitAnnounced polls the conversation key's queue until n subagents have announced into it
// (stored there), and returns when that was after t0, with the announcements. delivered:
// also until each is delivered (its turn started in the parent), and when that was.
func waitAnnounced(ctx context.Context, h *harness, key string, n int, t0 time.Time, delivered bool) (announcedAt, deliveredAt time.Duration, msgs []broker.Message, err error) {
	for {
		hist, err := h.queues.History(ctx, key, 10*n)
		if err != nil {
			return 0, 0, nil, err
		}
		got, done := 0, 0
		msgs = msgs[:0]
		for _, m := range hist {
			if strings.HasPrefix(m.ID, "announce_") {
				got++
				msgs = append(msgs, m)
				if m.State == broker.StateDelivered {
					done++
				}
			}
		}
		if got >= n && announcedAt == 0 {
			announcedAt = time.Since(t0)
		}
		if done >= n && deliveredAt == 0 {
			deliveredAt = time.Since(t0)
		}
		if announcedAt > 0 && (!delivered || deliveredAt > 0) {
			return announcedAt, deliveredAt, msgs, nil
		}
		if time.Since(t0) > 5*time.Minute {
			return 0, 0, nil, fmt.Errorf("%d of %d announced, %d delivered, after 5 minutes", got, n, done)
		}
		if announcedAt == 0 {
			time.Sleep(5 * time.Millisecond) // polling the store: the figure's resolution
		} else {
			// Each poll reads the announcements whole (about 1.4 ms of CPU at 100): the
			// delivered figure, seconds long on the real server, is polled less often.
			time.Sleep(25 * time.Millisecond)
		}
	}
}

func memory(ctx context.Context, h *harness, cfg config) (*MemoryResult, error) {
	h0, r0 := heap(), benchenv.RSS()
	for range cfg.sessions {
		if _, err := h.open(ctx, 0); err != nil {
			return nil, err
		}
	}
	h1, r1 := heap(), benchenv.RSS()
	n := float64(cfg.sessions)
	return &MemoryResult{Sessions: cfg.sessions, HeapPerKB: (h1 - h0) / n / 1024, RSSPerKB: (r1 - r0) / n / 1024,
		BaselineHeap: h0 / 1e6, BaselineRSSMB: r0 / 1e6}, nil
}

// heap is the live Go heap after two collections, in bytes.
func heap() float64 {
	goruntime.GC()
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}

func report(r *Results) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "machine: %d CPU %s, load %s -> %s\n\n", r.Machine.NumCPU, r.Machine.CPUModel, r.Machine.LoadStart, r.Machine.LoadEnd)
	if o := r.Overhead; o != nil {
		fmt.Fprintf(w, "loop overhead per tool call (slope between %d and %d calls per turn)\t%.3f ms (+ %.1f ms per turn; %.3f ms per call at %d calls)\n", max(o.Calls/5, 1), o.Calls, o.PerCallMs, o.PerTurnMs, o.AvgPerCallMs, o.Calls)
		fmt.Fprintf(w, "  a turn of %d calls: %.1f ms = model %.1f ms + tools %.1f ms + loop\t\n", o.Calls, o.TurnMs, o.ModelMs, o.ToolMs)
	}
	if l := r.Latency; l != nil {
		fmt.Fprintf(w, "token latency, provider socket -> WebSocket subscriber (%d tokens)\tp50 %.3f ms, p99 %.3f ms, max %.3f ms\n", l.Tokens, l.P50Ms, l.P99Ms, l.MaxMs)
		fmt.Fprintf(w, "  the same tokens read by the SDK directly, no gateway\tp50 %.3f ms, p99 %.3f ms\n", l.DirectP50Ms, l.DirectP99Ms)
	}
	for _, row := range r.Relay {
		fmt.Fprintf(w, "relay %s (%d tokens)\tsent %.0f tok/s, received %.0f tok/s, ratio %.3f, all received %v\n", row.Case, row.Tokens, row.SentPerSec, row.RecvPerSec, row.Ratio, row.AllReceived)
	}
	if a := r.Ack; a != nil {
		fmt.Fprintf(w, "queued message acknowledged, gateway send (%d)\tp50 %.3f ms, p99 %.3f ms\n", a.Messages, a.SendP50Ms, a.SendP99Ms)
		fmt.Fprintf(w, "  the queue's commit alone (SQLite, synchronous=FULL)\tp50 %.3f ms, p99 %.3f ms; a bare write+fsync: p50 %.3f ms\n", a.StoreP50Ms, a.StoreP99Ms, a.FsyncP50Ms)
	}
	if sp := r.Spawn; sp != nil {
		fmt.Fprintf(w, "%d subagents spawned at once (scripted model)\tspawned in %.0f ms, all announced after %.0f ms, all delivered into the parent after %.0f ms (CPU %.0f ms); %.1f KB of heap per idle subagent\n", sp.Subagents, sp.SpawnMs, sp.AllAnnouncedMs, sp.AllDeliveredMs, sp.CPUMs, sp.HeapPerKB)
	}
	if sp := r.SpawnLLM; sp != nil {
		printLLMSpawn(w, sp)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "memory per idle ai-chat session (%d sessions)\theap %.1f KB, RSS %.1f KB\n", m.Sessions, m.HeapPerKB, m.RSSPerKB)
	}
	_ = w.Flush()
	benchenv.PrintFooter(os.Stdout, r.Errors, r.Seconds)
}
