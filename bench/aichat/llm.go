package main

// The spawn measurement on the real local model server (-llm, -llm-url): llama.cpp's
// llama-server with the tiny deterministic model of tools/llm (its README), which answers
// "Hello from a tiny model." to a request without tools. A counting proxy in front of it says
// how many model calls were made, whose (a subagent's or the parent's), whether any offered
// tools, and how long each took in the server (its queue for a slot included).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// The backend and agent of the real-server variant.
const (
	llmBackend = "llm"
	// quietAgent has every tool disabled: the request carries no tools, so the tiny model
	// answers its text at once and a subagent's turn is one model call.
	quietAgent = "bench-quiet"
	llmAnswer  = "Hello from a tiny model."
)

// LLMSpawnResult is the spawn measurement on the real llama-server: N subagents spawned at
// once through the spawn command, each answering its task with one real model call.
type LLMSpawnResult struct {
	Server    string `json:"server"`
	ServeArgs string `json:"serveArgs,omitempty"`
	Subagents int    `json:"subagents"`
	// DisabledTools: how many tools the subagents' agent has disabled (all the kind offers).
	DisabledTools int     `json:"disabledTools"`
	SpawnMs       float64 `json:"spawnMs"`
	// AllAnnouncedMs: every announcement stored in the parent's queue (as the scripted
	// variant decides it); AllDeliveredMs: every one delivered into the parent's transcript
	// (its turn started); ParentDoneMs: the parent's last turn ended.
	AllAnnouncedMs float64 `json:"allAnnouncedMs"`
	AllDeliveredMs float64 `json:"allDeliveredMs"`
	ParentDoneMs   float64 `json:"parentDoneMs"`
	// ParentTurns are the parent's turns delivering them, ParentTurnsFailed those that did
	// not complete (ParentTurnFailure: the first one's end and reason).
	ParentTurns       int    `json:"parentTurns"`
	ParentCompactions int    `json:"parentCompactions"`
	ParentTurnsFailed int    `json:"parentTurnsFailed"`
	ParentTurnFailure string `json:"parentTurnFailure,omitempty"`
	// Completed are the announcements of runs that ended ok; Answered those carrying the
	// model's answer.
	Completed int `json:"completed"`
	Answered  int `json:"answered"`
	// Model calls seen by the proxy, from the spawn to the parent's last turn's end.
	ChildCalls     int    `json:"childCalls"`
	ParentCalls    int    `json:"parentCalls"`
	CallsWithTools int    `json:"callsWithTools"`
	FailedCalls    int    `json:"failedCalls"`
	FailedCall     string `json:"failedCall,omitempty"`
	// AbortedCalls: the client went away before the stream's end (data: [DONE]).
	AbortedCalls   int     `json:"abortedCalls"`
	MaxInFlight    int     `json:"maxInFlight"`
	ChildCallP50Ms float64 `json:"childCallP50Ms"`
	ChildCallMaxMs float64 `json:"childCallMaxMs"`
	// ParentCallP50Ms: its prompt grows with every announcement delivered.
	ParentCallP50Ms float64 `json:"parentCallP50Ms"`
	// ServerBusyMs is how long at least one call was in the server; ServerCPUMs the CPU time
	// it used (when started here), BenchCPUMs this process's (the gateway, the bench), from
	// the first spawn until all were delivered.
	ServerBusyMs float64 `json:"serverBusyMs"`
	ServerCPUMs  float64 `json:"serverCPUMs,omitempty"`
	BenchCPUMs   float64 `json:"benchCPUMs"`
	// HeapPerKB is the Go heap per subagent whose model call is held at the proxy.
	HeapPerKB float64 `json:"heapPerSubagentKB"`
}

// llmServer is the real server the variant runs on: started here (stop kills it) or given.
type llmServer struct {
	url  string
	args string
	pid  int // 0: not started here
	stop func()
}

// startLLM sets the server up (setup.sh, cached like the tests' under NEXUS_TEST_LLM_CACHE
// or the user's cache directory) and starts it (serve.sh) on a free port with extra
// llama-server arguments. A watchdog kills it when this process ends in any way.
func startLLM(ctx context.Context, extra []string) (*llmServer, error) {
	dir := llmserver.Dir()
	if _, err := os.Stat(filepath.Join(dir, "serve.sh")); err != nil {
		return nil, fmt.Errorf("no real model server: %w (tools/llm; NEXUS_TEST_LLM_DIR names another)", err)
	}
	cache := llmserver.Cache()
	if err := os.MkdirAll(cache, 0o700); err != nil { //nolint:gosec // the tests' own cache directory, as internal/testkit/llmserver
		return nil, err
	}
	// Test binaries may be setting the same cache up: one at a time.
	lock, err := fsutil.LockContext(ctx, filepath.Join(cache, "setup.lock"), 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(dir, "setup.sh"), cache).CombinedOutput() //nolint:gosec // the repository's own script
	_ = lock.Unlock()
	if err != nil {
		return nil, fmt.Errorf("setup.sh %s: %w\n%s", cache, err, out)
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr, _ := l.Addr().(*net.TCPAddr)
	_ = l.Close()
	if addr == nil {
		return nil, errors.New("free port: not a TCP address")
	}
	serve := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(dir, "serve.sh"), strconv.Itoa(addr.Port), cache}, extra...)...) //nolint:gosec // the repository's own script
	var stderr bytes.Buffer
	serve.Stderr = &stderr
	out, err = serve.Output()
	if err != nil {
		return nil, fmt.Errorf("serve.sh: %w\n%s", err, stderr.Bytes())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("serve.sh printed %q, not a pid", out)
	}
	// serve.sh leaves llama-server running on its own: a watchdog holding a pipe's read end
	// kills it when the write end closes, at stop or when this process dies.
	r, w, err := os.Pipe()
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	dog := exec.CommandContext(context.WithoutCancel(ctx), "bash", "-c", `read -r _; kill "$1" 2>/dev/null`, "watchdog", strconv.Itoa(pid)) //nolint:gosec // a pid serve.sh printed
	dog.Stdin = r
	dog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := dog.Start(); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, err
	}
	_ = r.Close()
	// serve.sh's own arguments (-t 1 -tb 1 -np 1 -c 8192) come before the extra ones.
	return &llmServer{url: "http://127.0.0.1:" + strconv.Itoa(addr.Port), args: strings.TrimSpace("serve.sh " + strings.Join(extra, " ")), pid: pid, stop: func() {
		_ = w.Close()
		_ = dog.Wait()
		for i := 0; i < 200 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}}, nil
}

// llmCall is one model call through the proxy.
type llmCall struct {
	parent, tools, aborted bool
	status                 int
	errBody                string
	start, end             time.Time
}

// llmProxy forwards to the real server, counting calls; while its gate is shut it holds
// them before they reach the server.
type llmProxy struct {
	srv *httptest.Server
	rp  *httputil.ReverseProxy

	mu       sync.Mutex
	calls    []llmCall
	inFlight int
	maxIn    int
	held     int
	gate     chan struct{} // nil: open; else closed when the gate opens
	// conns are the upstream transports, one per client connection: each ai-chat session
	// has its own (a clone of http.DefaultTransport), so its calls reuse one connection to
	// the server as they would without the proxy, and meet the server's closing of idle
	// connections as they would.
	conns map[string]*http.Transport
}

type remoteKey struct{}

// RoundTrip sends an upstream request on the transport of the client connection it came on.
func (p *llmProxy) RoundTrip(r *http.Request) (*http.Response, error) {
	from, _ := r.Context().Value(remoteKey{}).(string)
	p.mu.Lock()
	t := p.conns[from]
	if t == nil {
		t = http.DefaultTransport.(*http.Transport).Clone()
		p.conns[from] = t
	}
	p.mu.Unlock()
	return t.RoundTrip(r) //nolint:wrapcheck // the proxy's error handler reports it
}

func (p *llmProxy) close() {
	p.srv.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.conns {
		t.CloseIdleConnections()
	}
}

func newLLMProxy(target string) (*llmProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &llmProxy{rp: httputil.NewSingleHostReverseProxy(u), conns: map[string]*http.Transport{}}
	p.rp.FlushInterval = -1 // a stream: every chunk at once
	p.rp.Transport = p
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		http.Error(w, "proxy: "+err.Error(), http.StatusBadGateway)
	}
	p.srv = httptest.NewServer(p)
	return p, nil
}

// statusWriter records the response's status and the start of an error's body.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   []byte
	done   bool // the stream's end, data: [DONE], went through
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("[DONE]")) {
		w.done = true
	}
	if w.status != http.StatusOK && len(w.body) < 300 {
		w.body = append(w.body, b[:min(len(b), 300-len(w.body))]...)
	}
	return w.ResponseWriter.Write(b) //nolint:wrapcheck // a ResponseWriter's own error
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (p *llmProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Tools []json.RawMessage `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	// The parent's requests carry the announcements; a subagent's only its task.
	c := llmCall{parent: bytes.Contains(body, []byte(aichat.AnnouncePrefix)), tools: len(req.Tools) > 0}
	p.mu.Lock()
	gate := p.gate
	if gate != nil {
		p.held++
	}
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	p.mu.Lock()
	p.inFlight++
	p.maxIn = max(p.maxIn, p.inFlight)
	p.mu.Unlock()
	c.start = time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	// Deferred: ReverseProxy panics with http.ErrAbortHandler when the client goes away in
	// the middle of the body (a stream the SDK stopped reading).
	completed := false
	defer func() {
		c.end, c.status, c.aborted = time.Now(), sw.status, !completed && !sw.done
		if c.status != http.StatusOK {
			c.errBody = string(sw.body)
		}
		p.mu.Lock()
		p.inFlight--
		p.calls = append(p.calls, c)
		p.mu.Unlock()
	}()
	p.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), remoteKey{}, r.RemoteAddr)))
	completed = true
}

// reset forgets the calls so far.
func (p *llmProxy) reset() {
	p.mu.Lock()
	p.calls, p.maxIn, p.held = nil, p.inFlight, 0
	p.mu.Unlock()
}

func (p *llmProxy) shut() {
	p.mu.Lock()
	p.gate = make(chan struct{})
	p.mu.Unlock()
}

func (p *llmProxy) open() {
	p.mu.Lock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
	p.mu.Unlock()
}

func (p *llmProxy) heldCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *llmProxy) snapshot() ([]llmCall, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls), p.maxIn
}

// saveQuietAgent writes state/agents/<quietAgent>/agent.toml with every tool disabled: the
// tools the kind offers are read from a request it makes to the scripted model (a turn of the
// agent main at the same level), so a tool added to the kind is disabled too. The proxy checks
// that no request of quietAgent offers one.
func saveQuietAgent(ctx context.Context, h *harness) ([]string, error) {
	id, err := h.open(ctx, 0)
	if err != nil {
		return nil, err
	}
	if _, err := h.turn(ctx, id, "which tools"); err != nil {
		return nil, err
	}
	if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		return nil, err
	}
	h.m.mu.Lock()
	names := slices.Clone(h.m.tools)
	h.m.mu.Unlock()
	if len(names) == 0 {
		return nil, errors.New("the scripted model saw no tools offered")
	}
	return names, profile.Save(h.state, &profile.Profile{ID: quietAgent, Settings: profile.Settings{
		Policy: profile.Policy{DisabledTools: names}, Description: "bench: no tools, one model call per turn"}}, false)
}

// runLLM starts the real server (or takes -llm-url's) and the proxy, runs spawnOnLLM into
// res, and stops what it started. Only a server that cannot be had is an error; the
// measurement's own failures go to res.Errors.
func runLLM(ctx context.Context, cfg config, res *Results) error {
	srv := &llmServer{url: strings.TrimSuffix(cfg.llmURL, "/"), args: "given by -llm-url"}
	if srv.url == "" {
		fmt.Fprintln(os.Stderr, "bench: starting llama-server", cfg.llmArgs)
		var err error
		if srv, err = startLLM(ctx, strings.Fields(cfg.llmArgs)); err != nil {
			return err
		}
		defer srv.stop()
	}
	px, err := newLLMProxy(srv.url)
	if err != nil {
		return err
	}
	defer px.close()
	res.Config["llmServer"], res.Config["llmArgs"] = srv.url, srv.args
	if res.SpawnLLM, err = spawnOnLLM(ctx, cfg, px, srv.pid); err != nil {
		res.Errors = append(res.Errors, "spawn on llama-server: "+err.Error())
	}
	if res.SpawnLLM != nil {
		res.SpawnLLM.Server, res.SpawnLLM.ServeArgs = srv.url, srv.args
	}
	return nil
}

// spawnOnLLM runs spawnLLM in a gateway of its own (with the llm backend), started and
// stopped around it: its sessions.json, read whole after each change, starts about as small
// as the scripted variant's. In the other measurements' gateway (some 310 conversations by
// then) the spawns took half as long again.
func spawnOnLLM(ctx context.Context, cfg config, px *llmProxy, serverPID int) (*LLMSpawnResult, error) {
	h, err := startHarness(ctx, px.srv.URL)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	return spawnLLM(ctx, h, cfg, px, serverPID)
}

// spawnLLM is spawn on the real server: a conversation of quietAgent on the llm backend
// spawns cfg.subagents subagents of quietAgent at once (the spawn command, not the model);
// each makes one real model call and announces "Hello from a tiny model." into the parent,
// whose queue delivers each announcement as a turn of its own (one more real call each).
// Then as many again with their calls held at the proxy, to weigh one waiting on the server.
func spawnLLM(ctx context.Context, h *harness, cfg config, px *llmProxy, serverPID int) (*LLMSpawnResult, error) {
	n := cfg.subagents
	disabled, err := saveQuietAgent(ctx, h)
	if err != nil {
		return nil, err
	}
	zero := 0.0
	openParent := func() (id, key string, err error) {
		opts, _ := json.Marshal(abi.AIChatOptions{Backend: llmBackend, Agent: quietAgent, Level: "yolo", Workspace: h.ws, Temperature: &zero})
		s, err := h.cl.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Options: opts})
		if err != nil {
			return "", "", err
		}
		s, err = h.cl.Get(ctx, s.SessionID)
		if err != nil {
			return "", "", err
		}
		key, _ = s.Metadata["chatKey"].(string)
		return s.SessionID, key, nil
	}
	spawnAll := func(id, task string) error {
		for i := range n {
			if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandSpawn,
				Spawn: &abi.SpawnRequest{Task: fmt.Sprintf("%s %d", task, i), Agent: quietAgent, Cleanup: "keep"}}); err != nil {
				return err
			}
		}
		return nil
	}
	id, key, err := openParent()
	if err != nil {
		return nil, err
	}
	px.reset()
	cpu0, srvCPU0 := cpuTime("self"), cpuTime(strconv.Itoa(serverPID))
	t0 := time.Now()
	if err := spawnAll(id, "task"); err != nil {
		return nil, err
	}
	res := &LLMSpawnResult{Subagents: n, SpawnMs: ms(time.Since(t0)), DisabledTools: len(disabled)}
	announced, delivered, msgs, err := waitAnnounced(ctx, h, key, n, t0, true)
	if err != nil {
		return nil, err
	}
	res.AllAnnouncedMs, res.AllDeliveredMs = ms(announced), ms(delivered)
	res.BenchCPUMs = ms(cpuTime("self") - cpu0)
	if serverPID != 0 {
		res.ServerCPUMs = ms(cpuTime(strconv.Itoa(serverPID)) - srvCPU0)
	}
	turns, compactions, failed, err := waitParentDone(ctx, h, id, n, t0)
	if err != nil {
		return nil, err
	}
	res.ParentDoneMs, res.ParentTurns, res.ParentCompactions, res.ParentTurnsFailed = ms(time.Since(t0)), turns, compactions, len(failed)
	if len(failed) > 0 {
		res.ParentTurnFailure = failed[0]
	}
	for _, m := range msgs {
		if strings.Contains(m.Content, " completed] ") {
			res.Completed++
		}
		if strings.Contains(m.Content, llmAnswer) {
			res.Answered++
		}
	}
	calls, maxIn := px.snapshot()
	res.MaxInFlight = maxIn
	var child, parent []float64
	var busy time.Duration
	var busyUntil time.Time
	slices.SortFunc(calls, func(a, b llmCall) int { return a.start.Compare(b.start) })
	for _, c := range calls {
		if c.parent {
			res.ParentCalls++
			parent = append(parent, ms(c.end.Sub(c.start)))
		} else {
			res.ChildCalls++
			child = append(child, ms(c.end.Sub(c.start)))
		}
		if c.tools {
			res.CallsWithTools++
		}
		if c.status != http.StatusOK {
			res.FailedCalls++
			if res.FailedCall == "" {
				res.FailedCall = fmt.Sprintf("%d %s", c.status, strings.TrimSpace(c.errBody))
			}
		}
		if c.aborted {
			res.AbortedCalls++
		}
		// The union of the calls' intervals: how long the server had work.
		switch {
		case c.start.After(busyUntil):
			busy += c.end.Sub(c.start)
			busyUntil = c.end
		case c.end.After(busyUntil):
			busy += c.end.Sub(busyUntil)
			busyUntil = c.end
		}
	}
	res.ServerBusyMs = ms(busy)
	if len(child) > 0 {
		slices.Sort(child)
		res.ChildCallP50Ms, res.ChildCallMaxMs = child[len(child)/2], child[len(child)-1]
	}
	if len(parent) > 0 {
		slices.Sort(parent)
		res.ParentCallP50Ms = parent[len(parent)/2]
	}
	if _, err := h.cl.Control(ctx, id, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		return nil, err
	}
	if res.CallsWithTools > 0 {
		return res, fmt.Errorf("%d model calls offered tools: %s has one not disabled", res.CallsWithTools, quietAgent)
	}

	// The heap: each subagent's call held before it reaches the server.
	id2, key2, err := openParent()
	if err != nil {
		return res, err
	}
	px.shut()
	defer px.open()
	h0 := heap()
	if err := spawnAll(id2, "held"); err != nil {
		return res, err
	}
	for deadline := time.Now().Add(2 * time.Minute); px.heldCalls() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%d of %d model calls reached the proxy", px.heldCalls(), n)
		}
	}
	res.HeapPerKB = (heap() - h0) / float64(n) / 1024
	px.open()
	// Let them finish: nothing of this measurement runs on into the next.
	t1 := time.Now()
	if _, _, _, err := waitAnnounced(ctx, h, key2, n, t1, true); err != nil {
		return res, err
	}
	if _, _, _, err := waitParentDone(ctx, h, id2, n, t1); err != nil {
		return res, err
	}
	if _, err := h.cl.Control(ctx, id2, abi.ControlRequest{Command: abi.CommandClose}); err != nil {
		return res, err
	}
	return res, nil
}

// waitParentDone waits until the parent's turns have delivered n announcements and the last
// has ended.
func waitParentDone(ctx context.Context, h *harness, id string, n int, t0 time.Time) (turns, compactions int, failed []string, err error) {
	seen := map[string]bool{}
	running := 0
	var after uint64
	for {
		b, err := h.reg.Read(ctx, id, after, 0, time.Second)
		if err != nil {
			return turns, compactions, failed, err
		}
		for _, e := range b.Events {
			if c, ok := e.Payload.(abi.AICompaction); ok && c.Phase == abi.PhaseStarted {
				compactions++
			}
			p, ok := e.Payload.(abi.AITurn)
			if !ok {
				continue
			}
			switch p.Phase {
			case abi.PhaseStarted:
				running++
				turns++
				for _, m := range p.MessageIDs {
					if strings.HasPrefix(m, "announce_") {
						seen[m] = true
					}
				}
			case abi.PhaseEnded:
				running--
				if p.End != abi.TurnCompleted {
					failed = append(failed, strings.TrimSpace(p.End+" "+p.Reason))
				}
			}
		}
		after = b.Next
		if len(seen) >= n && running == 0 {
			return turns, compactions, failed, nil
		}
		if b.Done {
			return turns, compactions, failed, fmt.Errorf("the parent closed after delivering %d of %d announcements", len(seen), n)
		}
		if time.Since(t0) > 5*time.Minute {
			return turns, compactions, failed, fmt.Errorf("the parent delivered %d of %d announcements after 5 minutes", len(seen), n)
		}
	}
}

// printLLMSpawn is the report's line for the real-server variant.
func printLLMSpawn(w io.Writer, s *LLMSpawnResult) {
	fmt.Fprintf(w, "%d subagents spawned at once (real llama-server: %s; all %d tools disabled)\tspawned in %.0f ms, all announced after %.0f ms, all delivered into the parent after %.0f ms, its last turn ended after %.0f ms\n",
		s.Subagents, s.ServeArgs, s.DisabledTools, s.SpawnMs, s.AllAnnouncedMs, s.AllDeliveredMs, s.ParentDoneMs)
	fmt.Fprintf(w, "  model calls: %d subagents' + %d parent's (%d offering tools, %d failed%s, %d cut off by the client), at most %d at once; a subagent's call p50 %.0f ms, max %.0f ms, the parent's p50 %.0f ms; server busy %.0f ms, its CPU %.0f ms, this process's %.0f ms\t\n",
		s.ChildCalls, s.ParentCalls, s.CallsWithTools, s.FailedCalls, prefixed(": ", s.FailedCall), s.AbortedCalls, s.MaxInFlight, s.ChildCallP50Ms, s.ChildCallMaxMs, s.ParentCallP50Ms, s.ServerBusyMs, s.ServerCPUMs, s.BenchCPUMs)
	fmt.Fprintf(w, "  announcements: %d completed, %d with the model's answer, delivered in %d parent turns (%d not completed%s; %d compactions); %.1f KB of heap per subagent waiting on the server (its call held)\t\n",
		s.Completed, s.Answered, s.ParentTurns, s.ParentTurnsFailed, prefixed(": ", s.ParentTurnFailure), s.ParentCompactions, s.HeapPerKB)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// cpuTime is the user+system CPU time of /proc/<pid>/stat (0 when unknown).
func cpuTime(pid string) time.Duration {
	if pid == "0" {
		return 0
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat") //nolint:gosec // a pid or "self"
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
