package acpengine_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/nexus-run/nexus/internal/acpengine"
	"github.com/nexus-run/nexus/internal/acpengine/acptest"
	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/testkit"
)

func TestMain(m *testing.M) {
	acptest.Main() // the test binary is the agent when the engine starts it
	os.Exit(m.Run())
}

// record is what a turn handed to its caller.
type record struct {
	mu     sync.Mutex
	events []agent.Event
	msgs   []provider.Message
	tokens chan string
}

func newRecord() *record { return &record{tokens: make(chan string, 100)} }

func (r *record) options() agent.Options {
	return agent.Options{
		Emit: func(ev agent.Event) {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
			if ev.Type == agent.EventToken && ev.Content != "" {
				r.tokens <- ev.Content
			}
		},
		Append: func(m provider.Message) error {
			r.mu.Lock()
			r.msgs = append(r.msgs, m)
			r.mu.Unlock()
			return nil
		},
	}
}

func (r *record) types() []agent.EventType {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []agent.EventType
	for _, e := range r.events {
		out = append(out, e.Type)
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type setup struct {
	dir    string // the agent's sessions
	stderr *syncBuffer
	noLoad bool
}

func newSetup(t *testing.T) *setup {
	return &setup{dir: t.TempDir(), stderr: &syncBuffer{}}
}

func (s *setup) engine(t *testing.T) *acpengine.Engine {
	t.Helper()
	env := []string{acptest.EnvAgent + "=1", acptest.EnvDir + "=" + s.dir}
	if s.noLoad {
		env = append(env, acptest.EnvNoLoad+"=1")
	}
	e := acpengine.New(acpengine.Config{Name: "test", Command: os.Args[0], Env: env, Dir: t.TempDir(), Stderr: s.stderr})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func run(t *testing.T, e *acpengine.Engine, ctx context.Context, prompt, resume string, r *record, confirm acpengine.Confirm) *agent.Result {
	t.Helper()
	res, err := e.Run(ctx, acpengine.Turn{Prompt: prompt, Resume: resume, Options: r.options(), Confirm: confirm, Provider: "test", Model: "m"})
	if err != nil {
		t.Fatalf("run %q: %v", prompt, err)
	}
	return res
}

func lastText(msgs []provider.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleAssistant {
			return msgs[i].TextContent()
		}
	}
	return ""
}

func TestStreaming(t *testing.T) {
	e := newSetup(t).engine(t)
	r := newRecord()
	res := run(t, e, t.Context(), "hello", "", r, nil)
	if res.End != agent.EndCompleted || res.Err != nil {
		t.Fatalf("end %s (%v)", res.End, res.Err)
	}
	if len(r.msgs) != 1 {
		t.Fatalf("messages %+v", r.msgs)
	}
	m := r.msgs[0]
	if m.Role != provider.RoleAssistant || m.TextContent() != "Hello, world" || m.StopReason != provider.StopEndTurn || m.API != acpengine.API {
		t.Fatalf("reply %+v", m)
	}
	if m.Content[0].Type != provider.BlockThinking || m.Content[0].Thinking != "thinking it over" {
		t.Fatalf("thinking %+v", m.Content)
	}
	want := []agent.EventType{agent.EventStatus, agent.EventStatus, agent.EventReasoningStarted, agent.EventReasoning, agent.EventReasoningEnded,
		agent.EventToken, agent.EventToken, agent.EventToken, agent.EventIterationCompleted, agent.EventStatus, agent.EventTurnEnded}
	if got := r.types(); !equal(got, want) {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
}

func equal(a, b []agent.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestToolCall(t *testing.T) {
	e := newSetup(t).engine(t)
	r := newRecord()
	res := run(t, e, t.Context(), "tool", "", r, nil)
	if res.End != agent.EndCompleted || res.Iterations != 2 {
		t.Fatalf("end %s, %d iterations", res.End, res.Iterations)
	}
	if len(r.msgs) != 3 {
		t.Fatalf("want reply, result, reply: %+v", r.msgs)
	}
	calls := r.msgs[0].ToolCalls()
	if len(calls) != 1 || calls[0].ID != "call-1" || calls[0].Name != "acp_read" || !strings.Contains(string(calls[0].Arguments), `"/w/notes.txt"`) {
		t.Fatalf("call %+v", calls)
	}
	if r.msgs[0].StopReason != provider.StopToolUse {
		t.Fatalf("stop %s", r.msgs[0].StopReason)
	}
	tr := r.msgs[1]
	if tr.Role != provider.RoleToolResult || tr.ToolCallID != "call-1" || tr.TextContent() != "apricot marmalade" || tr.IsError {
		t.Fatalf("result %+v", tr)
	}
	if r.msgs[2].TextContent() != "The notes say apricot." {
		t.Fatalf("reply %+v", r.msgs[2])
	}
	var seen []agent.EventType
	for _, ty := range r.types() {
		switch ty {
		case agent.EventToolDetected, agent.EventToolStarted, agent.EventToolCompleted:
			seen = append(seen, ty)
		}
	}
	if !equal(seen, []agent.EventType{agent.EventToolDetected, agent.EventToolStarted, agent.EventToolCompleted}) {
		t.Fatalf("tool events %v", seen)
	}
}

func TestPermission(t *testing.T) {
	for _, tc := range []struct {
		answer permission.Answer
		reply  string
		isErr  bool
	}{
		{permission.Deny, "chose no", true},
		{permission.AllowOnce, "chose yes", false},
		{permission.AllowExecGlobal, "chose always", false},
	} {
		t.Run(string(tc.answer), func(t *testing.T) {
			e := newSetup(t).engine(t)
			r := newRecord()
			var asked *permission.Request
			var askedCall provider.ToolCall
			res := run(t, e, t.Context(), "perm", "", r, func(_ context.Context, c provider.ToolCall, req *permission.Request) (permission.Answer, error) {
				asked, askedCall = req, c
				return tc.answer, nil
			})
			if res.End != agent.EndCompleted {
				t.Fatalf("end %s (%v)", res.End, res.Err)
			}
			if asked == nil || asked.Command != "rm -rf build" || asked.Tool != "acp_execute" || askedCall.ID != "call-rm" {
				t.Fatalf("request %+v for %+v", asked, askedCall)
			}
			if want := []permission.Answer{permission.Deny, permission.AllowOnce, permission.AllowExecGlobal}; len(asked.Options) != 3 || asked.Options[2] != want[2] {
				t.Fatalf("options %v", asked.Options)
			}
			if got := lastText(r.msgs); got != tc.reply {
				t.Fatalf("reply %q, want %q", got, tc.reply)
			}
			if r.msgs[1].IsError != tc.isErr {
				t.Fatalf("result %+v", r.msgs[1])
			}
		})
	}
}

// An interrupt is session/cancel: the agent ends the prompt cancelled, the reply so far is
// kept (aborted), and the same agent process takes the next prompt.
func TestCancel(t *testing.T) {
	e := newSetup(t).engine(t)
	ctx, cancel := context.WithCancel(t.Context())
	r := newRecord()
	go func() {
		<-r.tokens // "waiting": the agent is in the prompt
		cancel()
	}()
	res := run(t, e, ctx, "wait", "", r, nil)
	if res.End != agent.EndCancelled {
		t.Fatalf("end %s (%v)", res.End, res.Err)
	}
	if len(r.msgs) != 1 || r.msgs[0].StopReason != provider.StopAborted || r.msgs[0].TextContent() != "waiting" {
		t.Fatalf("messages %+v", r.msgs)
	}
	before := e.SessionID()
	r2 := newRecord()
	run(t, e, t.Context(), "whoami", "", r2, nil)
	if got := lastText(r2.msgs); !strings.Contains(got, "session "+before+" loaded=false") {
		t.Fatalf("after cancel: %q", got)
	}
}

// A permission request open when the turn is interrupted is answered cancelled.
func TestCancelDuringPermission(t *testing.T) {
	e := newSetup(t).engine(t)
	ctx, cancel := context.WithCancel(t.Context())
	r := newRecord()
	res := run(t, e, ctx, "perm", "", r, func(ctx context.Context, _ provider.ToolCall, _ *permission.Request) (permission.Answer, error) {
		cancel()
		<-ctx.Done()
		return permission.Deny, ctx.Err()
	})
	if res.End != agent.EndCancelled {
		t.Fatalf("end %s (%v)", res.End, res.Err)
	}
	// The call the agent never finished is answered, as an interrupted call of nexus's own loop is.
	if len(r.msgs) != 2 || r.msgs[1].Role != provider.RoleToolResult || !r.msgs[1].IsError || !strings.Contains(r.msgs[1].TextContent(), "interrupted") {
		t.Fatalf("messages %+v", r.msgs)
	}
}

// A crash is the turn's error, naming the exit and the agent's last words; the next prompt
// starts the agent again and loads the same session.
func TestCrashRestartsAndLoads(t *testing.T) {
	s := newSetup(t)
	e := s.engine(t)
	r := newRecord()
	run(t, e, t.Context(), "hello", "", r, nil)
	sid := e.SessionID()
	r = newRecord()
	res := run(t, e, t.Context(), "crash", "", r, nil)
	if res.End != agent.EndError || res.Err == nil {
		t.Fatalf("end %s", res.End)
	}
	for _, want := range []string{"exited during the turn", "exit status 3", "boom", "the next message starts it again"} {
		if !strings.Contains(res.Err.Error(), want) {
			t.Fatalf("error %q lacks %q", res.Err, want)
		}
	}
	if !strings.Contains(s.stderr.String(), "boom") {
		t.Fatalf("stderr %q", s.stderr.String())
	}
	if last := r.msgs[len(r.msgs)-1]; last.StopReason != provider.StopError || last.TextContent() != "bye" {
		t.Fatalf("reply %+v", last)
	}
	if e.Running() {
		t.Fatal("the crashed agent is still counted as running")
	}
	r = newRecord()
	run(t, e, t.Context(), "whoami", "", r, nil)
	if got := lastText(r.msgs); !strings.Contains(got, "session "+sid+" loaded=true") {
		t.Fatalf("after the crash: %q", got)
	}
}

// The session id outlives the engine: another engine (a restarted gateway) given it loads it;
// the agent's replay of the history is not taken for a turn. An agent that cannot load gets a
// new session.
func TestResume(t *testing.T) {
	for _, noLoad := range []bool{false, true} {
		t.Run(map[bool]string{false: "load", true: "no-load"}[noLoad], func(t *testing.T) {
			s := newSetup(t)
			s.noLoad = noLoad
			first := s.engine(t)
			run(t, first, t.Context(), "hello", "", newRecord(), nil)
			sid := first.SessionID()
			if err := first.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			second := s.engine(t)
			r := newRecord()
			history := func() string { return "The conversation so far: hello / Hello, world." }
			if _, err := second.Run(t.Context(), acpengine.Turn{Prompt: "whoami", Resume: sid, Options: r.options(), History: history}); err != nil {
				t.Fatal(err)
			}
			got := lastText(r.msgs)
			if noLoad {
				if second.SessionID() == sid || strings.Contains(got, "loaded=true") {
					t.Fatalf("an agent without session/load: %q (session %s)", got, second.SessionID())
				}
				// Its new session is told the conversation so far, once.
				if !strings.Contains(got, "echo: The conversation so far: hello / Hello, world.whoami") {
					t.Fatalf("the new session's first prompt: %q", got)
				}
				r = newRecord()
				if _, err := second.Run(t.Context(), acpengine.Turn{Prompt: "again", Options: r.options(), History: history}); err != nil {
					t.Fatal(err)
				}
				if got := lastText(r.msgs); got != "echo: again" {
					t.Fatalf("the second prompt: %q", got)
				}
				return
			}
			if second.SessionID() != sid || !strings.Contains(got, "session "+sid+" loaded=true") {
				t.Fatalf("after restart: %q (session %s, want %s)", got, second.SessionID(), sid)
			}
			for _, m := range r.msgs {
				if strings.Contains(m.TextContent(), "REPLAYED") {
					t.Fatalf("the load's replay was recorded: %+v", r.msgs)
				}
			}
		})
	}
}

// A command that is not there is a clear error, and so is one that exits at once.
func TestStartFailures(t *testing.T) {
	e := acpengine.New(acpengine.Config{Name: "missing", Command: "/nonexistent/agent", Dir: t.TempDir()})
	res := run(t, e, t.Context(), "hello", "", newRecord(), nil)
	if res.End != agent.EndError || !strings.Contains(res.Err.Error(), "/nonexistent/agent") {
		t.Fatalf("end %s (%v)", res.End, res.Err)
	}
	e = acpengine.New(acpengine.Config{Name: "false", Command: "/bin/false", Dir: t.TempDir()})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	res = run(t, e, t.Context(), "hello", "", newRecord(), nil)
	if res.End != agent.EndError || !strings.Contains(res.Err.Error(), "exit status 1") {
		t.Fatalf("end %s (%v)", res.End, res.Err)
	}
}

// With the gateway's owner the agent is a reaper group: it runs, it is stopped with the
// engine, and a crash is reaped before the restart.
func TestOwnerGroup(t *testing.T) {
	owner, err := reaper.Open(t.Context(), reaper.Options{NoCgroup: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = owner.Close(context.Background()) })
	s := newSetup(t)
	e := acpengine.New(acpengine.Config{Name: "test", Command: os.Args[0], Dir: t.TempDir(), Owner: owner,
		Env: []string{acptest.EnvAgent + "=1", acptest.EnvDir + "=" + s.dir}})
	pidOf := func() int {
		r := newRecord()
		run(t, e, t.Context(), "whoami", "", r, nil)
		m := regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(lastText(r.msgs))
		if m == nil {
			t.Fatalf("whoami: %q", lastText(r.msgs))
		}
		pid, _ := strconv.Atoi(m[1])
		return pid
	}
	first := pidOf()
	if res := run(t, e, t.Context(), "crash", "", newRecord(), nil); res.End != agent.EndError {
		t.Fatalf("crash: %s", res.End)
	}
	second := pidOf()
	if second == first {
		t.Fatal("the agent was not started again")
	}
	if err := e.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{first, second} {
		testkit.Eventually(t, "the agent's process to be gone", func() bool {
			return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
		})
	}
}
