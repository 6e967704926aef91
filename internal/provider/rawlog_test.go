package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/testkit"
)

// TestRawLog: a client given a RawLog records every exchange with its backend, a retried
// one's attempts each, as JSON lines: the request (body whole, credential headers and query
// keys left out), the response's status and headers, every stream line as a chunk; every
// body passes the caller's redaction.
func TestRawLog(t *testing.T) {
	f := newFake(t, testKey, reply{status: 503, body: `{"error":{"message":"busy"}}`}, reply{file: "chat-plain.sse"})
	var out testkit.Buffer // the provider writes it from the SDK's reading goroutine
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	opts := testOptions(&sleeps{}, map[string]string{"TEST_KEY": testKey})
	opts.RawLog = NewRawLog(&out, func() time.Time { return at }, func(s string) string {
		return strings.ReplaceAll(s, "terse", "[SECRET]")
	})
	p, err := Open(backendFor(KindOpenAICompatible, f.url()), opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Stream(context.Background(), Request{System: "You are terse.", Messages: userAsk()})
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, s); r.err != nil || r.msg.TextContent() == "" {
		t.Fatalf("reply: %v %+v", r.err, r.msg.Content)
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r rawRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if r.Time != "2026-11-28T12:00:00.000Z" {
			t.Errorf("time %q", r.Time)
		}
		switch r.Dir {
		case "request":
			if !strings.HasSuffix(r.URL, "/chat/completions") {
				t.Errorf("url %q", r.URL)
			}
			if r.Headers["Authorization"] != "[REDACTED]" || !strings.Contains(r.Body, "You are [SECRET].") {
				t.Errorf("request %+v", r)
			}
		case "response":
			if r.Status != 503 && r.Status != 200 {
				t.Errorf("status %d", r.Status)
			}
		}
		if len(dirs) == 0 || dirs[len(dirs)-1] != r.Dir {
			dirs = append(dirs, r.Dir)
		}
	}
	if got := strings.Join(dirs, " "); got != "request response chunk request response chunk" {
		t.Fatalf("records %s:\n%s", got, out.String())
	}
	if strings.Contains(out.String(), testKey) {
		t.Fatalf("the key is in the log:\n%s", out.String())
	}
}

// TestRawLogURL: a URL's credentials and its query parameters that name keys are left out.
func TestRawLogURL(t *testing.T) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://user:pw@example.com/v1?api_key=hush&x=1&token=t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := redactURL(req), "https://example.com/v1?api_key=%5BREDACTED%5D&token=%5BREDACTED%5D&x=1"; got != want {
		t.Fatalf("redactURL = %s, want %s", got, want)
	}
}
