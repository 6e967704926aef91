package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/nexus-run/nexus/internal/cli"
	"github.com/nexus-run/nexus/internal/testkit"
)

// indexHome is a home directory with a Claude Code project, and the environment of a nexus
// whose HOME it is (the index's default roots are under it, never the machine's own).
type indexHome struct {
	home, state, project string
}

func newIndexHome(t *testing.T) *indexHome {
	t.Helper()
	dir := t.TempDir()
	h := &indexHome{home: filepath.Join(dir, "u"), state: filepath.Join(dir, "state"), project: filepath.Join(dir, "u", ".claude", "projects", "-work-p")}
	if err := os.MkdirAll(h.project, 0o700); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *indexHome) env(stdout, stderr io.Writer) cli.Env {
	return cli.Env{Stdout: stdout, Stderr: stderr, Getenv: func(k string) string {
		if k == "HOME" {
			return h.home
		}
		return ""
	}}
}

func (h *indexHome) args(args ...string) []string { return append(args, "--state-dir", h.state) }

// ccLine is a Claude Code user line.
func ccLine(sid, uuid, text string) string {
	content, _ := json.Marshal(text)
	return fmt.Sprintf(`{"type":"user","sessionId":%q,"uuid":%q,"timestamp":"2026-01-01T00:00:00Z","cwd":"/work/p","message":{"role":"user","content":%s}}`+"\n", sid, uuid, content)
}

func appendTo(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestIndexSyncProgressOnTerminal: with stderr a terminal (a real PTY), sync draws its progress
// line there, in place, and erases it before the summary; stdout gets the summary alone.
func TestIndexSyncProgressOnTerminal(t *testing.T) {
	h := newIndexHome(t)
	for i := range 3 {
		appendTo(t, filepath.Join(h.project, fmt.Sprintf("s%d.jsonl", i)), ccLine(fmt.Sprintf("s%d", i), "u1", "hello"))
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		testkit.SkipUnlessCI(t, "no pseudo-terminal: "+err.Error())
	}
	defer func() { _ = ptmx.Close() }()
	var term testkit.Buffer
	read := make(chan struct{})
	go func() { _, _ = io.Copy(&term, ptmx); close(read) }()
	var stdout testkit.Buffer
	code := cli.Main(t.Context(), h.args("index", "sync"), h.env(&stdout, tty))
	_ = tty.Close()
	if code != 0 {
		t.Fatalf("exit %d; stdout %s", code, stdout.String())
	}
	// The last file's line is always drawn, then erased.
	term.WaitFor(t, "[########################] 3/3 files")
	term.WaitFor(t, "3/3 files, 0.0 MB\r\x1b[K")
	var sum struct{ New, Files int }
	if err := json.Unmarshal([]byte(stdout.String()), &sum); err != nil || sum.New != 3 || sum.Files != 3 {
		t.Fatalf("summary %q: %v", stdout.String(), err)
	}
	if strings.Contains(stdout.String(), "files,") {
		t.Fatalf("progress on stdout: %q", stdout.String())
	}
	_ = ptmx.Close()
	<-read

	// Not a terminal: no progress at all.
	var plain testkit.Buffer
	if code := cli.Main(t.Context(), h.args("index", "sync"), h.env(io.Discard, &plain)); code != 0 || plain.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, plain.String())
	}
}

// TestIndexSyncWatch: sync --watch prints one summary line per sync, the first full one and one
// per change, until its context ends, then exits 0.
func TestIndexSyncWatch(t *testing.T) {
	h := newIndexHome(t)
	p := filepath.Join(h.project, "w1.jsonl")
	appendTo(t, p, ccLine("w1", "u1", "the first aardvark"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, h.args("index", "sync", "--watch", "--source", "claude-code"), h.env(&stdout, &stderr))
	}()
	stdout.WaitFor(t, `"new":1`)
	more := ccLine("w1", "u2", "a second aardvark")
	appendTo(t, p, more)
	stdout.WaitFor(t, fmt.Sprintf(`"appended":1,"rewritten":0,"deleted":0,"bytes":%d,`, len(more)))
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for _, l := range lines {
		var sum map[string]any
		if err := json.Unmarshal([]byte(l), &sum); err != nil {
			t.Fatalf("not one JSON summary per line: %q: %v", l, err)
		}
	}
	if len(lines) < 2 {
		t.Fatalf("lines %q", lines)
	}
	// The index holds both messages.
	var out testkit.Buffer
	if code := cli.Main(t.Context(), h.args("index", "search", "aardvark"), h.env(&out, io.Discard)); code != 0 {
		t.Fatalf("search exit %d", code)
	}
	var hits []struct {
		MessageID string `json:"message_id"`
	}
	if err := json.Unmarshal([]byte(out.String()), &hits); err != nil || len(hits) != 2 {
		t.Fatalf("hits %s: %v", out.String(), err)
	}
	if stderr.Len() != 0 {
		t.Fatalf("stderr %q", stderr.String())
	}
}

// TestIndexSearchBoldOnTerminal: on a terminal (a real PTY) the table shows the matches in bold;
// elsewhere the markers stay as they are.
func TestIndexSearchBoldOnTerminal(t *testing.T) {
	h := newIndexHome(t)
	appendTo(t, filepath.Join(h.project, "b.jsonl"), ccLine("b1", "u1", "a bold \x1b[2J walrus"))
	if code := cli.Main(t.Context(), h.args("index", "sync"), h.env(io.Discard, io.Discard)); code != 0 {
		t.Fatalf("sync exit %d", code)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		testkit.SkipUnlessCI(t, "no pseudo-terminal: "+err.Error())
	}
	defer func() { _ = ptmx.Close() }()
	var term testkit.Buffer
	go func() { _, _ = io.Copy(&term, ptmx) }()
	code := cli.Main(t.Context(), h.args("index", "search", "walrus", "--format", "table"), h.env(tty, io.Discard))
	_ = tty.Close()
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The transcript's own escape is a space; only the bold is sent.
	term.WaitFor(t, "a bold [2J \x1b[1mwalrus\x1b[22m")
	var plain testkit.Buffer
	if code := cli.Main(t.Context(), h.args("index", "search", "walrus", "--format", "table"), h.env(&plain, io.Discard)); code != 0 ||
		!strings.Contains(plain.String(), "a bold [2J **walrus**\n") {
		t.Fatalf("exit %d, not a terminal: %q", code, plain.String())
	}
}
