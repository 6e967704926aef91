package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChatResolve drives `chat resolve` with an injected clock through creation, reuse, the idle
// window, the daily boundary (local time), --no-auto-reset and bad flags.
func TestChatResolve(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 5, 1, 3, 30, 0, 0, time.Local)
	type result struct {
		Key   string `json:"key"`
		Fresh bool   `json:"fresh"`
		Entry struct {
			SessionID   string `json:"sessionId"`
			SessionFile string `json:"sessionFile"`
		} `json:"entry"`
	}
	run := func(at time.Time, args ...string) (result, int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		env := Env{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }, Now: func() time.Time { return at }}
		code := Main(context.Background(), append([]string{"--state-dir", filepath.Join(dir, "state"), "chat", "resolve"}, args...), env)
		var r result
		if code == 0 {
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("output %s: %v", out.String(), err)
			}
		}
		return r, code, out.String()
	}
	const key = "agent:main:telegram:dm:42"

	first, code, _ := run(now, key)
	if code != 0 || !first.Fresh || first.Key != key || first.Entry.SessionID == "" {
		t.Fatalf("first resolve: %+v (exit %d)", first, code)
	}
	// The chat's transcript exists once a message arrived: a reset must archive it.
	if err := os.WriteFile(first.Entry.SessionFile, []byte(`{"type":"session","version":3,"id":"x","timestamp":"2026-05-01T01:30:00.000Z","cwd":"/"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, _, _ := run(now.Add(10*time.Minute), key)
	if again.Fresh || again.Entry.SessionID != first.Entry.SessionID {
		t.Fatalf("within the window: %+v", again)
	}
	// Past 04:00 local: the daily reset (the idle window is off here).
	daily, _, _ := run(now.Add(time.Hour), key, "--idle", "0")
	if !daily.Fresh || daily.Entry.SessionID == first.Entry.SessionID {
		t.Fatalf("daily reset did not happen: %+v", daily)
	}
	archives, _ := filepath.Glob(first.Entry.SessionFile + ".reset.*")
	if len(archives) != 1 {
		t.Fatalf("old transcript not archived: %v", archives)
	}
	// The idle window (the daily reset is off here).
	later := now.Add(time.Hour + 30*time.Minute)
	if r, _, _ := run(later, key, "--reset-hour", "-1", "--idle", "45m"); r.Fresh {
		t.Fatalf("30 minutes is within a 45 minute window: %+v", r)
	}
	idle, _, _ := run(later.Add(46*time.Minute), key, "--reset-hour", "-1", "--idle", "45m")
	if !idle.Fresh || idle.Entry.SessionID == daily.Entry.SessionID {
		t.Fatalf("idle reset did not happen: %+v", idle)
	}
	// --no-auto-reset keeps the session however long it was idle.
	if r, _, _ := run(later.Add(72*time.Hour), key, "--no-auto-reset"); r.Fresh || r.Entry.SessionID != idle.Entry.SessionID {
		t.Fatalf("--no-auto-reset reset: %+v", r)
	}
	for _, bad := range [][]string{
		{key, "--reset-hour", "24"},
		{key, "--idle", "-1m"},
		{key, "--idle", "30s"},
		{"Agent:Bad Key!"},
	} {
		if _, code, out := run(now, bad...); code == 0 || !strings.Contains(out, "INVALID_ARGUMENT") {
			t.Errorf("%v: exit %d, %s", bad, code, out)
		}
	}
}
