package audit_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/audit"
	"github.com/nexus-run/nexus/internal/testkit"
)

func events(b audit.Batch) string {
	var ev []string
	for _, l := range b.Lines {
		ev = append(ev, l.Event)
	}
	return strings.Join(ev, ",")
}

func TestRead(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found: local sessions run it")
	}
	dir := t.TempDir()
	m := agentshell.New(agentshell.Config{AuditDir: dir, IdleTimeout: -1})
	defer m.Close()
	s := audit.NewReader(dir)
	ctx := t.Context()
	info, err := m.Create(ctx, agentshell.CreateOptions{Transport: "local"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.SessionID
	if _, err := m.Exec(ctx, id, "echo one", agentshell.ExecOptions{}); err != nil {
		t.Fatal(err)
	}

	b, err := s.Read(ctx, id, 0, 0, 0)
	if err != nil || events(b) != "open,exec" || b.Next != 2 || b.Closed || b.Lines[0].Seq != 1 || b.Lines[1].Seq != 2 {
		t.Fatalf("read from the start: %+v %v", b, err)
	}
	if !strings.Contains(string(b.Lines[1].Record), `"command":"echo one"`) || b.Lines[1].Time == "" {
		t.Fatalf("exec record %s", b.Lines[1].Record)
	}
	if b, err := s.Read(ctx, id, 0, 1, 0); err != nil || events(b) != "open" || b.Next != 1 {
		t.Fatalf("limit 1: %+v %v", b, err)
	}
	if b, err := s.Read(ctx, id, 1, 0, 0); err != nil || events(b) != "exec" || b.Next != 2 {
		t.Fatalf("after 1 (behind what the cache holds): %+v %v", b, err)
	}

	// A long-poll waits for the next line.
	got := make(chan audit.Batch, 1)
	go func() {
		b, err := s.Read(ctx, id, 2, 0, testkit.Patience())
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	if _, err := m.Exec(ctx, id, "echo two", agentshell.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	if b := <-got; events(b) != "exec" || b.Next != 3 || !strings.Contains(string(b.Lines[0].Record), "echo two") {
		t.Fatalf("long-poll: %+v", b)
	}
	// A wait with nothing new ends empty; so does one whose context ends.
	if b, err := s.Read(ctx, id, 3, 0, time.Millisecond); err != nil || len(b.Lines) != 0 || b.Next != 3 || b.Closed {
		t.Fatalf("nothing new: %+v %v", b, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if b, err := s.Read(cctx, id, 3, 0, testkit.Patience()); err != nil || len(b.Lines) != 0 {
		t.Fatalf("cancelled wait: %+v %v", b, err)
	}

	if err := m.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Read(ctx, id, 3, 0, testkit.Patience()); err != nil || events(b) != "close" || !b.Closed || b.Next != 4 {
		t.Fatalf("close: %+v %v", b, err)
	}
	if b, err := s.Read(ctx, id, 4, 0, testkit.Patience()); err != nil || len(b.Lines) != 0 || !b.Closed || b.Next != 4 {
		t.Fatalf("after the close (must not wait): %+v %v", b, err)
	}
}

func TestReadRefusals(t *testing.T) {
	dir := t.TempDir()
	s := audit.NewReader(dir)
	ctx := t.Context()
	// A torn line keeps its number and is skipped.
	log := `{"ts":"2026-01-01T00:00:00.000Z","session_id":"x","event":"open"}` + "\n" +
		`{"ts":"2026-01-01T00:00:01.000Z","sess` + "\n" +
		`{"ts":"2026-01-01T00:00:02.000Z","session_id":"x","event":"close","reason":"destroyed"}` + "\n" +
		`{"partial`
	if err := os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := s.Read(ctx, "x", 0, 0, 0)
	if err != nil || events(b) != "open,close" || b.Lines[1].Seq != 3 || !b.Closed || b.Next != 3 {
		t.Fatalf("torn line: %+v %v", b, err)
	}
	if err := os.Symlink(filepath.Join(dir, "x.jsonl"), filepath.Join(dir, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		wait time.Duration
		want error
	}{
		{"nosuch", 0, audit.ErrUnknownSession},
		{"nosuch", time.Minute, audit.ErrUnknownSession},
		{"../x", 0, audit.ErrBadSessionID},
		{"..", 0, audit.ErrBadSessionID},
		{"", 0, audit.ErrBadSessionID},
	} {
		if _, err := s.Read(ctx, c.id, 0, 0, c.wait); !errors.Is(err, c.want) {
			t.Errorf("%q (wait %s): %v, want %v", c.id, c.wait, err, c.want)
		}
	}
	if _, err := s.Read(ctx, "link", 0, 0, 0); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symlinked log: %v", err)
	}
	if _, err := audit.NewReader("").Read(ctx, "x", 0, 0, 0); !errors.Is(err, audit.ErrNoAudit) {
		t.Errorf("no audit directory: %v", err)
	}
}
