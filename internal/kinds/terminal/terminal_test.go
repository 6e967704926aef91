package terminal_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/terminal"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/procfs"
	"github.com/nexus-run/nexus/internal/testkit"
)

// These tests run a real bash on a real PTY, driven through a live.Registry. Every wait is a
// poll for a condition, bounded only by testkit.Patience() against hangs; nothing asserts on
// timing.

type env struct {
	reg *live.Registry
	dir string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash is not installed")
	}
	dir := t.TempDir()
	home := t.TempDir()
	kind := &terminal.Kind{
		Shell: bash,
		Grace: 300 * time.Millisecond,
		Env:   []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "PS1=$ ", "HISTFILE=/dev/null"},
		Projects: func(id string) (string, error) {
			if id == "p" {
				return dir, nil
			}
			return "", abi.Errorf(abi.CodeInvalidArgument, "", "unknown project %q", id)
		},
	}
	reg := newRegistry(t, live.Config{IdleTimeout: -1}, kind)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		if err := reg.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &env{reg: reg, dir: dir}
}

// newRegistry builds an in-memory registry serving kinds.
func newRegistry(t *testing.T, cfg live.Config, kinds ...live.Kind) *live.Registry {
	t.Helper()
	reg, err := live.New(context.Background(), cfg, kinds...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// sess follows one session's event log.
type sess struct {
	t   *testing.T
	reg *live.Registry
	id  string
	obj abi.Session

	mu     sync.Mutex
	after  uint64
	events []*live.Event
	out    bytes.Buffer // every data event's bytes, in order
}

func (e *env) open(t *testing.T, options string) *sess {
	t.Helper()
	req := abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}}
	if options != "" {
		req.Options = json.RawMessage(options)
	}
	obj, err := e.reg.Create(context.Background(), req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return &sess{t: t, reg: e.reg, id: obj.SessionID, obj: obj}
}

// pull reads what the log holds now (waiting up to wait for something new).
func (s *sess) pull(wait time.Duration) (done bool) {
	s.t.Helper()
	s.mu.Lock()
	after := s.after
	s.mu.Unlock()
	b, err := s.reg.Read(context.Background(), s.id, after, 0, wait)
	if err != nil {
		s.t.Fatalf("read: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range b.Events {
		if e.Seq == 0 {
			s.t.Fatalf("events were missed: %s", e.JSON(abi.ContentANSI))
		}
		s.events = append(s.events, e)
		if out, ok := e.Payload.(live.Output); ok {
			s.out.Write(out)
		}
	}
	s.after = b.Next
	return b.Done
}

func (s *sess) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *sess) snapshot() []*live.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*live.Event(nil), s.events...)
}

// waitOutput waits until the output holds want.
func (s *sess) waitOutput(want string) {
	s.t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for !strings.Contains(s.output(), want) {
		if time.Now().After(deadline) {
			s.t.Fatalf("output never showed %q; got:\n%q", want, tail(s.output()))
		}
		if s.pull(100 * time.Millisecond) {
			if !strings.Contains(s.output(), want) {
				s.t.Fatalf("session ended before the output showed %q; got:\n%q", want, tail(s.output()))
			}
		}
	}
}

// waitEnd reads to the end of the log and returns the close event.
func (s *sess) waitEnd() *live.Event {
	s.t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for !s.pull(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatal("the session never ended")
		}
	}
	ev := s.snapshot()
	last := ev[len(ev)-1]
	if last.Type != abi.EventClose {
		s.t.Fatalf("last event is %s", last.Type)
	}
	return last
}

func tail(s string) string {
	if len(s) > 600 {
		return "..." + s[len(s)-600:]
	}
	return s
}

func (s *sess) send(in string) {
	s.t.Helper()
	if _, err := s.reg.Send(context.Background(), s.id, live.SendRequest{Data: []byte(in)}); err != nil {
		s.t.Fatalf("send %q: %v", in, err)
	}
}

func (s *sess) control(req abi.ControlRequest) map[string]any {
	s.t.Helper()
	d, err := s.reg.Control(context.Background(), s.id, req)
	if err != nil {
		s.t.Fatalf("%s: %v", req.Command, err)
	}
	b, _ := json.Marshal(d.Result)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (s *sess) get() abi.Session {
	s.t.Helper()
	obj, err := s.reg.Get(context.Background(), s.id)
	if err != nil {
		s.t.Fatal(err)
	}
	return obj
}

func (s *sess) pid() int {
	s.t.Helper()
	switch v := s.get().Metadata["pid"].(type) {
	case int:
		return v
	case float64:
		return int(v)
	default:
		s.t.Fatalf("metadata.pid is %T %v", v, v)
	}
	return 0
}

// ready waits for the shell to run commands.
func (s *sess) ready() {
	s.t.Helper()
	s.send("echo READY$((20+1))\n")
	s.waitOutput("READY21")
}

func exists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// ---------------------------------------------------------------------------------------------

func TestOutputAndMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	md := s.obj.Metadata
	if md["cwd"] != e.dir || md["workspacePath"] != e.dir || md["shell"] != "bash" || s.obj.Status != abi.StatusActive {
		t.Fatalf("session object %+v", s.obj)
	}
	if !exists(s.pid()) {
		t.Fatalf("shell pid %d is not running", s.pid())
	}
	s.send("pwd; echo $NEXUS_SESSION_ID; echo OUT$((6*7))X\n")
	s.waitOutput("OUT42X")
	out := s.output()
	if !strings.Contains(out, e.dir) || !strings.Contains(out, s.id) {
		t.Fatalf("pwd / NEXUS_SESSION_ID missing from output:\n%q", tail(out))
	}
	// Every data event is terminal output; sequence numbers are contiguous.
	for i, ev := range s.snapshot() {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
}

func TestResize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, `{"cols":90,"rows":20}`)
	s.send("stty size; echo A$((1+1))X\n")
	s.waitOutput("A2X")
	if !strings.Contains(s.output(), "20 90") {
		t.Fatalf("initial size: %q", tail(s.output()))
	}
	res := s.control(abi.ControlRequest{Command: abi.CommandResize, Width: 132, Height: 43})
	if res["width"] != float64(132) || res["height"] != float64(43) {
		t.Fatalf("resize result %v", res)
	}
	if md := s.get().Metadata; md["cols"] != 132 || md["rows"] != 43 {
		t.Fatalf("metadata after resize: cols %v rows %v", md["cols"], md["rows"])
	}
	s.send("stty size; echo B$((1+2))X\n")
	s.waitOutput("B3X")
	if !strings.Contains(s.output(), "43 132") {
		t.Fatalf("stty size after resize: %q", tail(s.output()))
	}
}

func TestInterruptKillsForegroundJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	shell := s.pid()
	s.send("sleep 100\n")
	var sleeper procfs.Proc
	testkit.Eventually(t, "sleep 100 in the foreground", func() bool {
		for _, p := range procfs.Members(shell) {
			if p.Comm == "sleep" && p.PGID == p.TPGID && p.PGID != shell {
				sleeper = p
				return true
			}
		}
		return false
	})
	res := s.control(abi.ControlRequest{Command: abi.CommandInterrupt})
	if res["signal"] != "SIGINT" || res["processGroup"] != float64(sleeper.PGID) {
		t.Fatalf("interrupt result %v, want SIGINT to group %d", res, sleeper.PGID)
	}
	testkit.Eventually(t, "sleep to die", func() bool { return !exists(sleeper.PID) })
	if !exists(shell) {
		t.Fatal("the interrupt killed the shell")
	}
	s.send("echo AFTER$((2+2))X\n")
	s.waitOutput("AFTER4X")
	interrupts := 0
	for _, ev := range s.snapshot() {
		if ev.Type == abi.EventInterrupt {
			interrupts++
		}
	}
	if interrupts != 1 {
		t.Fatalf("%d interrupt events, want 1", interrupts)
	}
}

func TestRestartNewShell(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	old := s.pid()
	res := s.control(abi.ControlRequest{Command: abi.CommandRestart})
	pid := int(res["pid"].(float64))
	if pid == old || pid <= 0 || res["previousPid"] != float64(old) {
		t.Fatalf("restart result %v (old pid %d)", res, old)
	}
	if s.pid() != pid || s.get().SessionID != s.id || s.get().Status != abi.StatusActive {
		t.Fatalf("session after restart: %+v", s.get())
	}
	testkit.Eventually(t, "the old shell to be reaped", func() bool { return !exists(old) && len(procfs.Members(old)) == 0 })
	s.send("echo $$; echo NEW$((3+4))X\n")
	s.waitOutput("NEW7X")
	if !strings.Contains(s.output(), strconv.Itoa(pid)) {
		t.Fatalf("the new shell's $$ is not %d: %q", pid, tail(s.output()))
	}
	var states []string
	for _, ev := range s.snapshot() {
		if p, ok := ev.Payload.(abi.StatusPayload); ok {
			states = append(states, p.Status)
		}
	}
	if got := strings.Join(states, ","); !strings.Contains(got, "connecting,connected") || strings.Count(got, "connected") < 2 {
		t.Fatalf("status events around the restart: %s", got)
	}
}

func TestCloseReapsEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	shell := s.pid()
	// A background job, one that ignores the hangup, and a foreground job.
	s.send("sleep 301 & nohup sleep 302 >/dev/null 2>&1 & sleep 303\n")
	testkit.Eventually(t, "the three sleeps", func() bool {
		n := 0
		for _, p := range procfs.Members(shell) {
			if p.Comm == "sleep" {
				n++
			}
		}
		return n == 3
	})
	obj, err := s.reg.Close(context.Background(), s.id, abi.CloseRequested)
	if err != nil {
		t.Fatal(err)
	}
	if obj.Status != abi.StatusClosed || obj.Metadata["closeReason"] != abi.CloseRequested {
		t.Fatalf("close answered %+v", obj)
	}
	if exists(shell) {
		t.Fatalf("shell %d still in /proc after close (not reaped)", shell)
	}
	// Orphaned jobs are killed by close; their reaping is up to init.
	for _, p := range procfs.Members(shell) {
		if !p.Dead() {
			t.Fatalf("process %d (%s, state %c) of the session survived close", p.PID, p.Comm, p.State)
		}
	}
	testkit.Eventually(t, "no process of the session left in /proc", func() bool { return len(procfs.Members(shell)) == 0 })
	ev := s.waitEnd()
	if p := ev.Payload.(abi.ClosePayload); p.Reason != abi.CloseRequested || p.Status != abi.StatusClosed {
		t.Fatalf("close event %+v", p)
	}
	// Closing again, or using it, answers SESSION_CLOSED.
	if _, err := s.reg.Close(context.Background(), s.id, abi.CloseRequested); abi.CodeOf(err) != abi.CodeSessionClosed {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.reg.Send(context.Background(), s.id, live.SendRequest{Data: []byte("x")}); abi.CodeOf(err) != abi.CodeSessionClosed {
		t.Fatalf("send after close: %v", err)
	}
}

func TestShellExitEndsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	shell := s.pid()
	s.send("exit 3\n")
	ev := s.waitEnd()
	p := ev.Payload.(abi.ClosePayload)
	if p.Reason != abi.CloseExited || p.Status != abi.StatusClosed || p.ExitCode == nil || *p.ExitCode != 3 {
		t.Fatalf("close event %+v (exit code %v)", p, p.ExitCode)
	}
	b := ev.JSON(abi.ContentANSI)
	if !bytes.Contains(b, []byte(`"reason":"exited"`)) || !bytes.Contains(b, []byte(`"exitCode":3`)) {
		t.Fatalf("close event JSON %s", b)
	}
	obj := s.get()
	if obj.Status != abi.StatusClosed || obj.Metadata["exitCode"] != 3 || obj.Metadata["closeReason"] != abi.CloseExited {
		t.Fatalf("session after exit: %s %v", obj.Status, obj.Metadata)
	}
	if exists(shell) {
		t.Fatalf("the exited shell %d was not reaped", shell)
	}
	if err := s.reg.Check(context.Background(), s.id); abi.CodeOf(err) != abi.CodeSessionClosed {
		t.Fatalf("check after exit: %v", err)
	}
	if n := s.reg.LiveCount(); n != 0 {
		t.Fatalf("live count %d after the shell exited", n)
	}
}

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	res := s.control(abi.ControlRequest{Command: abi.CommandPause})
	if res["status"] != string(abi.StatusPaused) || s.get().Status != abi.StatusPaused {
		t.Fatalf("pause: %v, status %s", res, s.get().Status)
	}
	done := filepath.Join(e.dir, "printed")
	// The marker is printed well after the typed line's echo, which may still slip through.
	s.send("sleep 0.5; echo PAUSED$((6*7))X; touch printed\n")
	testkit.Eventually(t, "the paused command to finish", func() bool { _, err := os.Stat(done); return err == nil })
	s.pull(0)
	if strings.Contains(s.output(), "PAUSED42X") {
		t.Fatalf("output arrived while paused: %q", tail(s.output()))
	}
	res = s.control(abi.ControlRequest{Command: abi.CommandResume})
	if res["status"] != string(abi.StatusActive) || s.get().Status != abi.StatusActive {
		t.Fatalf("resume: %v, status %s", res, s.get().Status)
	}
	s.waitOutput("PAUSED42X")
	var statuses []abi.Status
	for _, ev := range s.snapshot() {
		if p, ok := ev.Payload.(abi.StatusPayload); ok {
			statuses = append(statuses, p.SessionStatus)
		}
	}
	if got := fmt.Sprint(statuses); !strings.Contains(got, "paused active") {
		t.Fatalf("status events %s", got)
	}
	// Closing a paused session works too (the reader is released).
	s.control(abi.ControlRequest{Command: abi.CommandPause})
	if _, err := s.reg.Close(context.Background(), s.id, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	s.waitEnd()
}

func TestUTF8NeverSplit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	const n = 60000 // 180 KB of three-byte characters: many reads, many chances to split one
	s.send(fmt.Sprintf("printf '\\xe2\\x82\\xac%%.0s' {1..%d}; echo; echo EUROS$((5*5))X\n", n))
	s.waitOutput("EUROS25X")
	data := 0
	for _, ev := range s.snapshot() {
		out, ok := ev.Payload.(live.Output)
		if !ok {
			continue
		}
		data++
		if !utf8.Valid(out) {
			t.Fatalf("event %d is not valid UTF-8 (a character was split): % x ... % x", ev.Seq, out[:min(8, len(out))], out[max(0, len(out)-8):])
		}
		var p abi.TerminalOutput
		if err := json.Unmarshal(ev.Wire(abi.ContentANSI).Payload, &p); err != nil || strings.ContainsRune(p.Content, utf8.RuneError) {
			t.Fatalf("event %d ansi content carries a replacement character", ev.Seq)
		}
	}
	if got := strings.Count(s.output(), "€"); got != n {
		t.Fatalf("%d euro signs arrived, want %d", got, n)
	}
	if data < 3 {
		t.Fatalf("only %d data events: the output was not spread over several reads", data)
	}
}

// TestFloodInLargeEvents: a flood is read in pieces as large as the reader's buffer, not one
// event per 4 KiB read(2) of the line discipline, and none of it is lost or reordered.
func TestFloodInLargeEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	const n = 4_000_000
	s.send(fmt.Sprintf("head -c %d /dev/zero | tr '\\0' a; echo; echo FLOOD$((2*3))X\n", n))
	s.waitOutput("FLOOD6X")
	largest := 0
	for _, ev := range s.snapshot() {
		if out, ok := ev.Payload.(live.Output); ok {
			largest = max(largest, len(out))
		}
	}
	if got := strings.Count(s.output(), "a"); got < n {
		t.Fatalf("%d of %d bytes of the flood arrived", got, n)
	}
	if !strings.Contains(s.output(), strings.Repeat("a", n)) {
		t.Fatal("the flood did not arrive in one piece, in order")
	}
	if largest <= 16<<10 {
		t.Fatalf("the largest output event is %d bytes: the reader did not read on while output was ready", largest)
	}
}

func TestContentTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.open(t, "")
	s.ready()
	s.send("printf '\\033[31mRED%d\\033[0m \\xc3\\xa9\\n' 5; echo CT$((8+1))X\n")
	s.waitOutput("CT9X")
	var ansiOut, textOut strings.Builder
	var rawOut []byte
	for _, ev := range s.snapshot() {
		out, ok := ev.Payload.(live.Output)
		if !ok {
			continue
		}
		for _, ct := range []abi.ContentType{abi.ContentANSI, abi.ContentText, abi.ContentRaw} {
			w := ev.Wire(ct)
			if w.Event != abi.EventData || w.SessionID != s.id || w.Seq != ev.Seq {
				t.Fatalf("envelope %+v", w)
			}
			var p abi.TerminalOutput
			if err := json.Unmarshal(w.Payload, &p); err != nil || p.Type != abi.PayloadTerminalOutput || p.ContentType != ct {
				t.Fatalf("%s payload %s", ct, w.Payload)
			}
			// JSON() is the same envelope, encoded once and shared by subscribers.
			if !bytes.Equal(ev.JSON(ct), mustJSON(t, w)) {
				t.Fatalf("%s: JSON() and Wire() disagree", ct)
			}
			switch ct {
			case abi.ContentANSI:
				ansiOut.WriteString(p.Content)
			case abi.ContentText:
				textOut.WriteString(p.Content)
			case abi.ContentRaw:
				b, err := base64.StdEncoding.DecodeString(p.Content)
				if err != nil || !bytes.Equal(b, out) {
					t.Fatalf("raw content does not decode to the exact bytes: %v", err)
				}
				rawOut = append(rawOut, b...)
			}
		}
	}
	if !strings.Contains(ansiOut.String(), "\x1b[31mRED5\x1b[0m é") {
		t.Fatalf("ansi lost the escape sequences: %q", tail(ansiOut.String()))
	}
	if !strings.Contains(textOut.String(), "RED5 é") || strings.Contains(textOut.String(), "\x1b[31m") {
		t.Fatalf("text kept escape sequences or lost text: %q", tail(textOut.String()))
	}
	if !bytes.Equal(rawOut, []byte(s.output())) {
		t.Fatal("raw contents are not the exact output bytes")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		name string
		req  abi.CreateRequest
		code abi.Code
	}{
		{"no project", abi.CreateRequest{Type: abi.TypeTerminal}, abi.CodeInvalidArgument},
		{"unknown project", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "nope"}}, abi.CodeInvalidArgument},
		{"bad options", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"cols":"wide"}`)}, abi.CodeInvalidArgument},
		{"unknown option", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"colour":1}`)}, abi.CodeInvalidArgument},
		{"too wide", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"cols":10001}`)}, abi.CodeInvalidArgument},
		{"negative rows", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"rows":-3}`)}, abi.CodeInvalidArgument},
		{"missing shell", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"shell":"/no/such/shell"}`)}, abi.CodeInvalidArgument},
	} {
		_, err := e.reg.Create(context.Background(), c.req)
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Code != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	if n := e.reg.LiveCount(); n != 0 {
		t.Fatalf("failed starts left %d live sessions", n)
	}
	// A chosen shell and extra environment are honoured.
	s := e.open(t, `{"shell":"sh","env":["NEXUS_TEST_VAR=hello"]}`)
	if s.obj.Metadata["shell"] != "sh" {
		t.Fatalf("shell %v", s.obj.Metadata["shell"])
	}
	s.send("echo $NEXUS_TEST_VAR-$((1+1))\n")
	s.waitOutput("hello-2")
}

// Shutdown closes every terminal with reason shutdown and leaves no shell behind.
func TestShutdownReapsShells(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var shells []int
	var ss []*sess
	for range 3 {
		s := e.open(t, "")
		s.ready()
		s.send("sleep 304 &\n")
		shells = append(shells, s.pid())
		ss = append(ss, s)
	}
	for _, sh := range shells {
		testkit.Eventually(t, "the background sleep", func() bool {
			for _, p := range procfs.Members(sh) {
				if p.Comm == "sleep" {
					return true
				}
			}
			return false
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	if err := e.reg.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range ss {
		if p := s.waitEnd().Payload.(abi.ClosePayload); p.Reason != abi.CloseShutdown {
			t.Fatalf("close reason %s", p.Reason)
		}
		testkit.Eventually(t, "no process of the session left", func() bool { return !exists(shells[i]) && len(procfs.Members(shells[i])) == 0 })
	}
}
