package debugstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/debugstream"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/testkit"
)

type env struct {
	m   *process.Manager
	j   *process.Journal
	reg *live.Registry
}

func newEnv(t *testing.T, ring ...int) *env {
	t.Helper()
	size := 0
	if len(ring) > 0 {
		size = ring[0]
	}
	return newEnvWith(t, process.Options{Ring: size}, live.Config{IdleTimeout: -1})
}

// newEnvWith is newEnv with the process manager's ring and stall bound (popts) and the
// registry's configuration.
func newEnvWith(t *testing.T, popts process.Options, cfg live.Config) *env {
	t.Helper()
	owner, err := reaper.Open(t.Context(), reaper.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = owner.Close(context.Background()) })
	popts.Owner, popts.MaxLogBytes, popts.Keep, popts.Backoff = owner, 64<<10, 2, func(int) time.Duration { return 0 }
	m, err := process.Open(t.TempDir(), popts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	j := process.NewJournal(0, nil)
	reg, err := live.New(context.Background(), cfg, &debugstream.Kind{Processes: m, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		_ = reg.Shutdown(ctx)
	})
	return &env{m: m, j: j, reg: reg}
}

func (e *env) open(t *testing.T, c abi.Context, opts abi.DebugStreamOptions) string {
	t.Helper()
	raw, _ := json.Marshal(opts)
	s, err := e.reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeDebugStream, Context: c, Options: raw})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return s.SessionID
}

// follow registers a follower of the session (what a WebSocket stream is): the session's
// output waits for it instead of lapping it.
func (e *env) follow(t *testing.T, id string) live.Follower {
	t.Helper()
	f, err := e.reg.Follow(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// collect reads a session's events after after until stop says so (acknowledging them to f
// when it is set); it returns the log lines and the last sequence read.
func (e *env) collect(t *testing.T, id string, after uint64, stop func(ev *live.Event, lines []abi.LogLine) bool, f ...live.Follower) ([]abi.LogLine, uint64) {
	t.Helper()
	var lines []abi.LogLine
	defer func() {
		for _, x := range f {
			x.Ack(after)
		}
	}()
	deadline := time.Now().Add(testkit.Patience())
	for {
		b, err := e.reg.Read(context.Background(), id, after, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, ev := range b.Events {
			if ev.Type == abi.EventError {
				t.Fatalf("an error event after %d: %+v", after, ev.Payload)
			}
			after = ev.Seq
			lines = append(lines, logLines(t, ev)...)
			if stop(ev, lines) {
				return lines, after
			}
		}
		for _, x := range f {
			x.Ack(after)
		}
		if b.Done || time.Now().After(deadline) {
			t.Fatalf("stopped after %d lines (seq %d)", len(lines), after)
		}
	}
}

// decodeLines returns the log lines of a data event: one (log-line), or a batch (log-lines),
// whether the payload is a value or its JSON.
func decodeLines(ev *live.Event) ([]abi.LogLine, error) {
	if ev.Type != abi.EventData {
		return nil, nil
	}
	payload := ev.Payload
	if j, ok := payload.(live.Joined); ok {
		payload = json.RawMessage(j.AppendTo(nil))
	}
	switch p := payload.(type) {
	case abi.LogLine:
		return []abi.LogLine{p}, nil
	case json.RawMessage:
		var v struct {
			abi.LogLine
			Lines []abi.LogLine `json:"lines"`
		}
		if err := json.Unmarshal(p, &v); err != nil {
			return nil, fmt.Errorf("event %d: %w", ev.Seq, err)
		}
		switch v.Type {
		case abi.PayloadLogLine:
			return []abi.LogLine{v.LogLine}, nil
		case abi.PayloadLogLines:
			if len(v.Lines) == 0 {
				return nil, fmt.Errorf("event %d: an empty batch", ev.Seq)
			}
			return v.Lines, nil
		}
	}
	return nil, fmt.Errorf("event %d: unexpected data payload %T", ev.Seq, ev.Payload)
}

func logLines(t *testing.T, ev *live.Event) []abi.LogLine {
	t.Helper()
	ls, err := decodeLines(ev)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func sh(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sh")
	if err != nil {
		testkit.SkipUnlessCI(t, "sh is not installed")
	}
	return p
}

func exitedLines(ev *live.Event, _ []abi.LogLine) bool { return exited(ev) }

func exited(ev *live.Event) bool {
	p, ok := ev.Payload.(abi.StatusPayload)
	return ok && strings.HasPrefix(p.Message, "process exited")
}

// TestFloodToSubscribers: a process writing 20,000 lines as fast as it can, through many
// rotations of its log files: two debug-stream sessions opened before it ends each get every
// line exactly once, in order (count and checksum), and a reader resuming a session after any
// sequence N gets the rest with no gap and no repeat. With a ring of 512 lines, far fewer than
// the flood, the sessions hold the process back rather than lose lines. One session gets a
// log-line event per line, the other batches (option batch); the resumed one is each in turn.
func TestFloodToSubscribers(t *testing.T) {
	for _, ring := range []int{0, 512} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("ring=%d/batch=%v", ring, batch), func(t *testing.T) { testFlood(t, ring, batch) })
		}
	}
}

func testFlood(t *testing.T, ring int, batch bool) {
	const n = 20000
	e := newEnv(t, ring)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	// It floods once the sessions follow it (the test writes to its fifo).
	in, err := e.m.Start(context.Background(), process.Spec{Command: []string{sh(t), "-c", fmt.Sprintf("read go < %s; i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); done; echo bye >&2", fifo, n)}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{e.open(t, abi.Context{ProcessID: in.ID}, abi.DebugStreamOptions{Lines: -1, Batch: batch}), e.open(t, abi.Context{ProcessID: in.ID}, abi.DebugStreamOptions{Lines: -1, Batch: !batch})}
	followers := []live.Follower{e.follow(t, ids[0]), e.follow(t, ids[1])}
	if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	check := func(what string, lines []abi.LogLine, from int) {
		t.Helper()
		got, exp := crc32.NewIEEE(), crc32.NewIEEE()
		for i := from; i <= n; i++ {
			fmt.Fprintf(exp, "line-%d\n", i)
		}
		count, stderr := 0, 0
		for _, l := range lines {
			switch {
			case l.Stream == abi.StreamStdout:
				fmt.Fprintf(got, "%s\n", l.Line)
				count++
			case l.Stream == abi.StreamStderr && l.Line == "bye":
				stderr++
			}
		}
		if count != n-from+1 || got.Sum32() != exp.Sum32() || stderr != 1 {
			t.Fatalf("%s: %d lines, checksum %x (want %d, %x), stderr %d", what, count, got.Sum32(), n-from+1, exp.Sum32(), stderr)
		}
	}
	// The second session is read at the same time, by its own reader.
	type result struct {
		lines []abi.LogLine
		err   error
	}
	second := make(chan result, 1)
	go func() {
		lines, _, err := e.read(ids[1], 0, exitedLines, followers[1])
		second <- result{lines, err}
	}()
	// The first reader goes away after 5,000 lines; a new one resumes after the last event it
	// had (registered before the first lets go, as a reconnecting stream does).
	first, seqN, err := e.read(ids[0], 0, func(*live.Event, []abi.LogLine) bool { return false }, followers[0], 5000)
	if err != nil {
		t.Fatal(err)
	}
	resumed := e.follow(t, ids[0])
	resumed.Ack(seqN)
	followers[0].Close()
	rest, _, err := e.read(ids[0], seqN, exitedLines, resumed)
	if err != nil {
		t.Fatal(err)
	}
	// stdout and stderr are two pipes: where "bye" falls among the lines is the capture's
	// reading order, so the stdout lines alone must join up.
	stdout := func(ls []abi.LogLine) []abi.LogLine {
		return slices.DeleteFunc(slices.Clone(ls), func(l abi.LogLine) bool { return l.Stream != abi.StreamStdout })
	}
	head, tail := stdout(first), stdout(rest)
	if head[len(head)-1].Line != fmt.Sprintf("line-%d", len(head)) || tail[0].Line != fmt.Sprintf("line-%d", len(head)+1) {
		t.Fatalf("resumed after %q with %q", head[len(head)-1].Line, tail[0].Line)
	}
	check("the first session", append(first, rest...), 1)
	r := <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	check("the second session", r.lines, 1)
}

// read is collect for any goroutine: it reads until stop, or until max log lines (0: no
// limit), acknowledging to f.
func (e *env) read(id string, after uint64, stop func(*live.Event, []abi.LogLine) bool, f live.Follower, maxLines ...int) ([]abi.LogLine, uint64, error) {
	var lines []abi.LogLine
	deadline := time.Now().Add(testkit.Patience())
	for {
		b, err := e.reg.Read(context.Background(), id, after, 0, 200*time.Millisecond)
		if err != nil {
			return lines, after, err
		}
		for _, ev := range b.Events {
			if ev.Type == abi.EventError {
				return lines, after, fmt.Errorf("an error event after %d: %+v", after, ev.Payload)
			}
			after = ev.Seq
			ls, err := decodeLines(ev)
			if err != nil {
				return lines, after, err
			}
			lines = append(lines, ls...)
			if len(maxLines) > 0 && len(ls) > 0 && len(lines) >= maxLines[0] {
				return lines, after, nil
			}
			if stop(ev, lines) {
				return lines, after, nil
			}
		}
		f.Ack(after)
		if b.Done || time.Now().After(deadline) {
			return lines, after, fmt.Errorf("stopped after %d lines (seq %d)", len(lines), after)
		}
	}
}

// TestInterruptAndResume: an interrupt stops the delivery and the session stays open; resume
// goes on after the last line delivered, with what came meanwhile.
func TestInterruptAndResume(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	// The process echoes what the test writes into its fifo, line by line.
	in, err := e.m.Start(context.Background(), process.Spec{Command: []string{sh(t), "-c", "cat " + fifo}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	id := e.open(t, abi.Context{ProcessID: in.ID}, abi.DebugStreamOptions{})
	fmt.Fprintln(w, "one")
	_, after := e.collect(t, id, 0, func(_ *live.Event, l []abi.LogLine) bool { return len(l) == 1 })
	res, err := e.reg.Control(context.Background(), id, abi.ControlRequest{Command: abi.CommandInterrupt})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := res.Result.(map[string]any); m["delivering"] != false {
		t.Fatalf("interrupt %+v", res.Result)
	}
	fmt.Fprintln(w, "two")
	fmt.Fprintln(w, "three")
	// The lines are in the process's ring, not in the session: wait until the ring has them.
	testkit.Eventually(t, "the lines in the process", func() bool {
		ls, _ := e.m.Tail(in.ID, 1)
		return len(ls) == 1 && ls[0].Text == "three"
	})
	if b, err := e.reg.Read(context.Background(), id, after, 0, 0); err != nil {
		t.Fatal(err)
	} else {
		for _, ev := range b.Events {
			if len(logLines(t, ev)) > 0 {
				t.Fatalf("a line delivered while interrupted: %+v", ev)
			}
		}
	}
	s, err := e.reg.Get(context.Background(), id)
	if err != nil || s.Status != abi.StatusActive {
		t.Fatalf("after the interrupt %+v %v", s, err)
	}
	if _, err := e.reg.Control(context.Background(), id, abi.ControlRequest{Command: abi.CommandResume}); err != nil {
		t.Fatal(err)
	}
	lines, _ := e.collect(t, id, after, func(_ *live.Event, l []abi.LogLine) bool { return len(l) == 2 })
	if lines[0].Line != "two" || lines[1].Line != "three" {
		t.Fatalf("after resume %+v", lines)
	}
}

// TestGatewayJournalAndFile: the built-in server "gateway" streams the gateway's own log
// lines with their level; a file nexus does not own is followed by name through a rename
// rotation.
func TestGatewayJournalAndFile(t *testing.T) {
	e := newEnv(t)
	logger := slog.New(e.j.Handler(slog.NewTextHandler(&testkit.Buffer{}, nil)))
	logger.Info("before the session", "n", 1)
	gw := e.open(t, abi.Context{ServerID: "gateway"}, abi.DebugStreamOptions{Lines: 10})
	logger.Warn("after the session", "who", "test")
	lines, _ := e.collect(t, gw, 0, func(_ *live.Event, l []abi.LogLine) bool { return len(l) == 2 })
	if lines[0].Line != `msg="before the session" n=1` || lines[0].Level != "INFO" || lines[1].Level != "WARN" || lines[1].Stream != abi.StreamGateway {
		t.Fatalf("gateway lines %+v", lines)
	}

	path := filepath.Join(t.TempDir(), "app.log")
	if err := os.WriteFile(path, []byte("old-1\nold-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fid := e.open(t, abi.Context{}, abi.DebugStreamOptions{File: path, Lines: 1})
	got, after := e.collect(t, fid, 0, func(_ *live.Event, l []abi.LogLine) bool { return len(l) == 1 })
	if got[0].Line != "old-2" {
		t.Fatalf("the last line %+v", got)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("new-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ = e.collect(t, fid, after, func(_ *live.Event, l []abi.LogLine) bool { return len(l) == 1 })
	if got[0].Line != "new-1" || got[0].Gen != 1 {
		t.Fatalf("after the rotation %+v", got)
	}
}

// TestBatch: with option batch, the lines that are ready together come as log-lines events of
// at most abi.BatchBytes, in order and complete, from a file and from a process; grep applies
// to each line.
func TestBatch(t *testing.T) {
	const n = 5000
	e := newEnv(t)
	var content strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&content, "line-%d %s\n", i, strings.Repeat("x", i%50))
	}
	path := filepath.Join(t.TempDir(), "app.log")
	if err := os.WriteFile(path, []byte(content.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := e.m.Start(context.Background(), process.Spec{Command: []string{"cat", path}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the process's lines", func() bool {
		ls, _ := e.m.Tail(in.ID, 1)
		return len(ls) == 1 && strings.HasPrefix(ls[0].Text, "exited")
	})
	for name, opts := range map[string]struct {
		c    abi.Context
		opts abi.DebugStreamOptions
		want func(i int) bool
	}{
		"file":         {opts: abi.DebugStreamOptions{File: path, Lines: -1, Batch: true}, want: func(int) bool { return true }},
		"process":      {c: abi.Context{ProcessID: in.ID}, opts: abi.DebugStreamOptions{Lines: -1, Batch: true}, want: func(int) bool { return true }},
		"process grep": {c: abi.Context{ProcessID: in.ID}, opts: abi.DebugStreamOptions{Lines: -1, Batch: true, Grep: `^line-\d*7 `}, want: func(i int) bool { return i%10 == 7 }},
	} {
		id := e.open(t, opts.c, opts.opts)
		events, lines := 0, 0
		var got []abi.LogLine
		e.collect(t, id, 0, func(ev *live.Event, l []abi.LogLine) bool {
			if ev.Type == abi.EventData {
				events++
				p := ev.JSON(abi.ContentANSI)
				if _, payload, _ := strings.Cut(string(p), `"payload":`); !strings.HasPrefix(payload, `{"type":"log-lines","lines":[`) || len(payload) > abi.BatchBytes+8<<10 {
					t.Fatalf("%s: event %d is not a batch: %.80s", name, ev.Seq, ev.Payload)
				}
			}
			got, lines = l, len(l)
			if ev.Type == abi.EventMetadata {
				md := ev.Payload.(abi.MetadataPayload).Metadata
				return md["caughtUp"] == true
			}
			return false
		})
		want := 0
		for i := 1; i <= n; i++ {
			if !opts.want(i) {
				continue
			}
			if want >= len(got) || !strings.HasPrefix(got[want].Line, fmt.Sprintf("line-%d ", i)) {
				t.Fatalf("%s: line %d of %d is %+v, want line-%d", name, want, len(got), got[min(want, len(got)-1)], i)
			}
			want++
		}
		if lines != want || events*20 > lines {
			t.Errorf("%s: %d lines in %d events, want %d lines in batches", name, lines, events, want)
		}
	}
}

// TestBadInput: what a debug-stream session refuses, with the ABI's codes.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	for name, tc := range map[string]struct {
		c    abi.Context
		opts string
		code abi.Code
	}{
		"nothing":         {code: abi.CodeInvalidArgument},
		"two things":      {c: abi.Context{ProcessID: "p1", ServerID: "gateway"}, code: abi.CodeInvalidArgument},
		"unknown process": {c: abi.Context{ProcessID: "nope"}, code: abi.CodeInvalidArgument},
		"unknown server":  {c: abi.Context{ServerID: "nope"}, code: abi.CodeInvalidArgument},
		"relative file":   {opts: `{"file":"app.log"}`, code: abi.CodeInvalidArgument},
		"bad grep":        {c: abi.Context{ServerID: "gateway"}, opts: `{"grep":"("}`, code: abi.CodeInvalidArgument},
		"unknown option":  {c: abi.Context{ServerID: "gateway"}, opts: `{"follow":true}`, code: abi.CodeInvalidArgument},
	} {
		req := abi.CreateRequest{Type: abi.TypeDebugStream, Context: tc.c}
		if tc.opts != "" {
			req.Options = json.RawMessage(tc.opts)
		}
		if _, err := e.reg.Create(context.Background(), req); abi.CodeOf(err) != tc.code {
			t.Errorf("%s: %v", name, err)
		}
	}
	id := e.open(t, abi.Context{ServerID: "gateway"}, abi.DebugStreamOptions{})
	if _, err := e.reg.Send(context.Background(), id, live.SendRequest{Data: []byte("x")}); abi.CodeOf(err) != abi.CodeCapabilityUnsupported {
		t.Errorf("send: %v", err)
	}
	for _, c := range []abi.Command{abi.CommandResize, abi.CommandRestart} {
		if _, err := e.reg.Control(context.Background(), id, abi.ControlRequest{Command: c, Width: 80, Height: 24}); abi.CodeOf(err) != abi.CodeCapabilityUnsupported {
			t.Errorf("%s: %v", c, err)
		}
	}
}

// TestKindContract: the live-session kind contract, on the gateway's journal (Print logs the
// text through it).
func TestKindContract(t *testing.T) {
	var j *process.Journal
	livetest.RunKind(t, livetest.KindHarness{
		New: func(t *testing.T) live.Kind {
			j = process.NewJournal(0, nil)
			return &debugstream.Kind{Journal: j}
		},
		Request: abi.CreateRequest{Type: abi.TypeDebugStream, Context: abi.Context{ServerID: "gateway"}},
		BadRequests: []abi.CreateRequest{
			{Type: abi.TypeDebugStream},
			{Type: abi.TypeDebugStream, Options: json.RawMessage(`{"file":"relative.log"}`)},
			{Type: abi.TypeDebugStream, Context: abi.Context{ServerID: "gateway"}, Options: json.RawMessage(`{"grep":"("}`)},
		},
		Print: func(t *testing.T, _ live.Backend, _ string, text string) {
			slog.New(j.Handler(slog.NewTextHandler(io.Discard, nil))).Info(text)
		},
	})
}

// TestStalledFollowerCostsOthersNothing: one debug-stream session on a process that floods
// 20,000 lines through a ring of 512, read by four followers as WebSocket streams read it, and
// followed by one more that never reads (a client that stopped reading). The four get every
// line, in order, and no EVENTS_MISSED; the stalled one is let go, and learns that it missed
// events when it reads again. The process's capture gives up on a session's cursor after
// 500 ms without progress, the session on a follower after 3 s: while the session waits for
// its followers, the process must wait for the session without a clock (the session's own
// flow control bounds that wait), or it laps the session and every follower loses lines.
// Neither bound is asserted: they only make the old order of events (the process giving up
// first) certain.
func TestStalledFollowerCostsOthersNothing(t *testing.T) {
	const (
		n       = 20000
		readers = 4
	)
	e := newEnvWith(t, process.Options{Ring: 512, MaxStall: 500 * time.Millisecond}, live.Config{IdleTimeout: -1, Log: live.LogLimits{Events: 1024, MaxStall: 3 * time.Second}})
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	in, err := e.m.Start(context.Background(), process.Spec{Command: []string{sh(t), "-c", fmt.Sprintf("read go < %s; i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); done", fifo, n)}})
	if err != nil {
		t.Fatal(err)
	}
	id := e.open(t, abi.Context{ProcessID: in.ID}, abi.DebugStreamOptions{Lines: -1})
	stalled := e.follow(t, id) // never reads, never acknowledges
	type result struct {
		lines []abi.LogLine
		err   error
	}
	results := make(chan result, readers)
	for range readers {
		f := e.follow(t, id)
		go func() {
			lines, err := e.stream(id, f)
			results <- result{lines, err}
		}()
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	for i := range readers {
		r := <-results
		if r.err != nil {
			t.Fatalf("reader %d: %v", i, r.err)
		}
		got := 0
		for _, l := range r.lines {
			if l.Stream != abi.StreamStdout {
				continue
			}
			got++
			if l.Line != fmt.Sprintf("line-%d", got) {
				t.Fatalf("reader %d: line %d is %q", i, got, l.Line)
			}
		}
		if got != n {
			t.Fatalf("reader %d got %d of %d lines", i, got, n)
		}
	}
	// What the stalled one reads now: the session's first events (kept), then the news that
	// it missed the lines that followed them.
	b, err := e.reg.Read(context.Background(), id, 0, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	missed := slices.IndexFunc(b.Events, func(ev *live.Event) bool { return ev.Seq == 0 && livetest.MissedOf(t, ev) > 0 })
	if missed < 0 {
		t.Fatalf("the stalled follower was not let go: it reads %v", livetest.DescribeAll(b.Events))
	}
	stalled.Close()
}

// stream reads a session as the gateway's WebSocket stream does (512 events at a time, each
// acknowledged once it is taken) until the process's exit status; an error event ends it.
func (e *env) stream(id string, f live.Follower) ([]abi.LogLine, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	var lines []abi.LogLine
	after := uint64(0)
	for {
		b, err := e.reg.Read(ctx, id, after, 512, 30*time.Second)
		if err != nil {
			return lines, err
		}
		for _, ev := range b.Events {
			if ev.Type == abi.EventError {
				return lines, fmt.Errorf("an error event after %d: %+v", after, ev.Payload)
			}
			ls, err := decodeLines(ev)
			if err != nil {
				return lines, err
			}
			lines = append(lines, ls...)
			after = ev.Seq
			f.Ack(after)
			if exited(ev) {
				return lines, nil
			}
		}
		after = b.Next
		f.Ack(after)
		if b.Done {
			return lines, fmt.Errorf("the session ended after %d lines", len(lines))
		}
	}
}
