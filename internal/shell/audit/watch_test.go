package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

func intp(i int) *int { return &i }

func TestTranscriptFormat(t *testing.T) {
	tr := newTranscript()
	recs := []Record{
		{SessionID: "a-1_local", Event: "open", Transport: "local", Cwd: "/home/u", Deny: []string{"rm"}, Workspace: "/home/u/w"},
		{SessionID: "a-1_local", Event: "exec", Command: "cd /tmp && ls x", Cwd: "/tmp", ExitCode: intp(2), DurationMS: 3,
			Stdout: "one\ntwo", Stderr: "ls: x: No such file\n"},
		{SessionID: "a-1_local", Event: "exec", Command: "sleep 9\necho after", Cwd: "/tmp", ExitCode: intp(124), DurationMS: 1001, TimedOut: true, Truncated: true},
		{SessionID: "a-1_local", Event: "block", Command: "rm -rf /", Reason: `blocked by policy rule "deny: rm": the command would run rm; this session may not run it`},
		{SessionID: "a-1_local", Event: "checkpoint", Checkpoint: "0123456789abcdef0123456789abcdef01234567", Reason: "before refactor"},
		{SessionID: "a-1_local", Event: "restore", Checkpoint: "0123456789abcdef0123456789abcdef01234567"},
		{SessionID: "a-1_local", Event: "checkpoint-error", Reason: "git: not found"},
		{SessionID: "a-1_local", Event: "exec", Command: "printf '\\033]0;pwned\\007'", Cwd: "/tmp", ExitCode: intp(0), Stdout: "esc\x1b[2Jhere\x07\n"},
		{SessionID: "a-1_local", Event: "close", Reason: "destroyed"},
		{SessionID: "b-2_ssh_u@h", Event: "exec", Command: "pwd", Cwd: "/srv", ExitCode: intp(0), Stdout: "/srv\n"},
		{SessionID: "b-2_ssh_u@h", Event: "block", Command: "x", Reason: "something else"},
		{SessionID: "b-2_ssh_u@h", Event: "mystery", Reason: "why"},
	}
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(tr.format(r))
	}
	want := `[a-1_local] [opened local] /home/u (workspace /home/u/w; deny: rm)
[a-1_local] /home/u $ cd /tmp && ls x
one
two
[stderr] ls: x: No such file
→ exit 2 (3 ms)
[a-1_local] /tmp $ sleep 9
> echo after
→ exit 124 (1001 ms) [timed out] [truncated]
[a-1_local] /tmp $ rm -rf /
→ [blocked: deny: rm]
[a-1_local] [checkpoint 0123456789ab: before refactor]
[a-1_local] [restored checkpoint 0123456789ab]
[a-1_local] [automatic checkpoint failed: git: not found]
[a-1_local] /tmp $ printf '\033]0;pwned\007'
esc\x1b[2Jhere\x07
→ exit 0 (0 ms)
[a-1_local] [closed: destroyed]
[b-2_ssh_u@h] /srv $ pwd
/srv
→ exit 0 (0 ms)
[b-2_ssh_u@h] /srv $ x
→ [blocked: something else]
[b-2_ssh_u@h] [mystery: why]
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain\ttab":   "plain\ttab",
		"é ü ✓ \uFFFD": "é ü ✓ \uFFFD",
		"a\x1bb":       `a\x1bb`,
		"bad\xffutf8":  `bad\xffutf8`,
		"c1\u009bx":    `c1\x9bx`,
		"ls\u2028x":    `ls\u2028x`,
		"del\x7f":      `del\x7f`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := oneLine("a\nb\rc"); got != `a\nb\rc` {
		t.Errorf("oneLine = %q", got)
	}
}

func auditLineJSON(t *testing.T, r Record) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWatchOrdersAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	appendFile(t, filepath.Join(dir, "a-1_local.jsonl"),
		auditLineJSON(t, Record{Time: "2026-01-01T00:00:00.000Z", SessionID: "a-1_local", Event: "open", Transport: "local", Cwd: "/a"})+
			auditLineJSON(t, Record{Time: "2026-01-01T00:00:02.000Z", SessionID: "a-1_local", Event: "exec", Command: "echo a", Cwd: "/a", ExitCode: intp(0), Stdout: "a\n"})+
			"not json\n"+
			// An unterminated last line is complete enough when not following.
			strings.TrimSuffix(auditLineJSON(t, Record{Time: "2026-01-01T00:00:04.000Z", SessionID: "a-1_local", Event: "close", Reason: "idle"}), "\n"))
	appendFile(t, filepath.Join(dir, "b-2_local.jsonl"),
		auditLineJSON(t, Record{Time: "2026-01-01T00:00:01.000Z", SessionID: "b-2_local", Event: "open", Transport: "local", Cwd: "/b"})+
			auditLineJSON(t, Record{Time: "2026-01-01T00:00:03.000Z", SessionID: "b-2_local", Event: "exec", Command: "echo b", Cwd: "/b", ExitCode: intp(1), Stderr: "b\n"}))
	appendFile(t, filepath.Join(dir, "notes.txt"), "ignored\n")

	var out, errs bytes.Buffer
	if err := Watch(t.Context(), WatchOptions{Dir: dir, Out: &out, Err: &errs}); err != nil {
		t.Fatal(err)
	}
	want := `[a-1_local] [opened local] /a
[b-2_local] [opened local] /b
[a-1_local] /a $ echo a
a
→ exit 0 (0 ms)
[b-2_local] /b $ echo b
[stderr] b
→ exit 1 (0 ms)
[a-1_local] [closed: idle]
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(errs.String(), "a-1_local.jsonl: skipped a line that is not an audit record") {
		t.Errorf("stderr: %q", errs.String())
	}

	out.Reset()
	if err := Watch(t.Context(), WatchOptions{Dir: dir, Session: "b-2_local", Out: &out}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "a-1_local") || !strings.Contains(out.String(), "[b-2_local] /b $ echo b") {
		t.Errorf("--session b-2_local:\n%s", out.String())
	}
	if err := Watch(t.Context(), WatchOptions{Dir: dir, Session: "../x", Out: &out}); err == nil {
		t.Error("a session id with a slash was accepted")
	}
	// An unknown session is an error that names the sessions there are, following or not.
	for _, follow := range []bool{false, true} {
		out.Reset()
		err := Watch(t.Context(), WatchOptions{Dir: dir, Session: "b-3_local", Follow: follow, Out: &out})
		if !errors.Is(err, ErrUnknownSession) || !strings.Contains(err.Error(), `"b-3_local"`) ||
			!strings.Contains(err.Error(), "a-1_local") || !strings.Contains(err.Error(), "b-2_local") || out.Len() != 0 {
			t.Errorf("follow %v: unknown session: %v, output %q", follow, err, out.String())
		}
	}
	empty := t.TempDir()
	if err := Watch(t.Context(), WatchOptions{Dir: empty, Session: "a-1_local", Out: &out}); !errors.Is(err, ErrUnknownSession) ||
		!strings.Contains(err.Error(), "holds no session's log") {
		t.Errorf("empty directory: %v", err)
	}
	// A missing directory is an empty transcript.
	out.Reset()
	if err := Watch(t.Context(), WatchOptions{Dir: filepath.Join(dir, "none"), Out: &out}); err != nil || out.Len() != 0 {
		t.Errorf("missing dir: %v %q", err, out.String())
	}
}

// waitReady waits for a following Watch to be ready, failing if it returns first.
func waitReady(t *testing.T, ready <-chan struct{}, done <-chan error) {
	t.Helper()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Watch returned early: %v", err)
	case <-time.After(testkit.Patience()):
		t.Fatal("Watch never got ready")
	}
}

func TestWatchFollow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit") // created by Watch
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errs testkit.Buffer
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, WatchOptions{Dir: dir, Follow: true, Out: &out, Err: &errs, Ready: func() { close(ready) }})
	}()
	waitReady(t, ready, done)

	a := filepath.Join(dir, "a-1_local.jsonl")
	appendFile(t, a, auditLineJSON(t, Record{Time: "2026-01-01T00:00:00.000Z", SessionID: "a-1_local", Event: "open", Transport: "local", Cwd: "/w"}))
	out.WaitFor(t, "[a-1_local] [opened local] /w\n")

	// A line written in two pieces is printed once it is complete, and only then.
	line := auditLineJSON(t, Record{Time: "2026-01-01T00:00:01.000Z", SessionID: "a-1_local", Event: "exec", Command: "make", Cwd: "/w", ExitCode: intp(0), DurationMS: 5, Stdout: "built\n"})
	appendFile(t, a, line[:20])
	// A new file's line is a later event: once it shows, the partial line must not have.
	b := filepath.Join(dir, "b-2_docker_web.jsonl")
	appendFile(t, b, auditLineJSON(t, Record{Time: "2026-01-01T00:00:02.000Z", SessionID: "b-2_docker_web", Event: "open", Transport: "docker", Cwd: "/"}))
	out.WaitFor(t, "[b-2_docker_web] [opened docker] /\n")
	if strings.Contains(out.String(), "make") {
		t.Fatalf("a partial line was printed:\n%s", out.String())
	}
	appendFile(t, a, line[20:])
	out.WaitFor(t, "[a-1_local] /w $ make\nbuilt\n→ exit 0 (5 ms)\n")

	// Several records at once come out whole and in order.
	appendFile(t, b, auditLineJSON(t, Record{Time: "2026-01-01T00:00:03.000Z", SessionID: "b-2_docker_web", Event: "exec", Command: "id", Cwd: "/", ExitCode: intp(0), Stdout: "root\n"})+
		auditLineJSON(t, Record{Time: "2026-01-01T00:00:04.000Z", SessionID: "b-2_docker_web", Event: "close", Reason: "destroyed"}))
	out.WaitFor(t, "[b-2_docker_web] / $ id\nroot\n→ exit 0 (0 ms)\n[b-2_docker_web] [closed: destroyed]\n")

	// Not an audit file: ignored.
	appendFile(t, filepath.Join(dir, "x.tmp"), "junk\n")

	// A file replaced by a shorter one is read from its start.
	if err := os.WriteFile(a, []byte(auditLineJSON(t, Record{Time: "2026-01-01T00:00:05.000Z", SessionID: "a-1_local", Event: "close", Reason: "idle"})), 0o600); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "[a-1_local] [closed: idle]\n")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
	case <-time.After(testkit.Patience()):
		t.Fatal("Watch did not stop when its context ended")
	}
	if strings.Count(out.String(), "$ make") != 1 || strings.Contains(out.String(), "junk") {
		t.Errorf("transcript:\n%s", out.String())
	}
	if errs.String() != "" {
		t.Errorf("stderr: %s", errs.String())
	}
}

func TestWatchFollowSessionFilterAndBacklog(t *testing.T) {
	dir := t.TempDir()
	appendFile(t, filepath.Join(dir, "a-1_local.jsonl"), auditLineJSON(t, Record{Time: "2026-01-01T00:00:00.000Z", SessionID: "a-1_local", Event: "open", Transport: "local", Cwd: "/a"}))
	appendFile(t, filepath.Join(dir, "b-2_local.jsonl"), auditLineJSON(t, Record{Time: "2026-01-01T00:00:00.000Z", SessionID: "b-2_local", Event: "open", Transport: "local", Cwd: "/b"}))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out testkit.Buffer
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, WatchOptions{Dir: dir, Session: "b-2_local", Follow: true, Out: &out, Ready: func() { close(ready) }})
	}()
	waitReady(t, ready, done)
	out.WaitFor(t, "[b-2_local] [opened local] /b\n")
	appendFile(t, filepath.Join(dir, "a-1_local.jsonl"), auditLineJSON(t, Record{Time: "2026-01-01T00:00:01.000Z", SessionID: "a-1_local", Event: "close", Reason: "x"}))
	appendFile(t, filepath.Join(dir, "b-2_local.jsonl"), auditLineJSON(t, Record{Time: "2026-01-01T00:00:02.000Z", SessionID: "b-2_local", Event: "close", Reason: "y"}))
	out.WaitFor(t, "[b-2_local] [closed: y]\n")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "a-1_local") {
		t.Errorf("other session shown:\n%s", out.String())
	}
}

func TestWatchFollowDirectoryRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	var out testkit.Buffer
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Watch(t.Context(), WatchOptions{Dir: dir, Follow: true, Out: &out, Ready: func() { close(ready) }})
	}()
	waitReady(t, ready, done)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "removed") {
			t.Fatalf("Watch: %v", err)
		}
	case <-time.After(testkit.Patience()):
		t.Fatal("Watch kept running after its directory was removed")
	}
}

func TestParseEventsOverflow(t *testing.T) {
	// struct inotify_event with IN_Q_OVERFLOW (0x4000) and no name.
	ev := make([]byte, 16)
	ev[5] = 0x40
	names, rescan, gone := parseEvents(ev)
	if len(names) != 0 || !rescan || gone {
		t.Fatalf("names %v rescan %v gone %v", names, rescan, gone)
	}
}
