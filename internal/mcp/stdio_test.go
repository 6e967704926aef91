package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/shell/session"
)

func TestMessageHeads(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`:                                 `[{1 true}]`,
		`{"method":"tools/call","params":{"x":[1,2]},"id":"a"}`:                          `[{"a" true}]`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`:                         `[{ true}]`,
		`{"jsonrpc":"2.0","id":1.0,"result":{"big":"` + strings.Repeat("x", 100) + `"}}`: `[{1 false}]`,
		`{"jsonrpc":"2.0","result":{},"id":7}`:                                           `[{7 false}]`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`:                            `[{ false}]`,
		`[{"id":1,"method":"a"},{"id":2,"result":{}}]`:                                   `[{1 true} {2 false}]`,
		`not json`: `[]`,
		`  `:       `[]`,
	} {
		if got := fmt.Sprint(messages([]byte(in))); got != want {
			t.Errorf("messages(%s) = %s, want %s", in, got, want)
		}
	}
	// A response's result is not parsed: a broken result after the id still counts.
	if got := fmt.Sprint(messages([]byte(`{"jsonrpc":"2.0","id":3,"result":{"x":`))); got != `[{3 false}]` {
		t.Errorf("truncated response: %s", got)
	}
}

// TestServeStdioAnswersBeforeEOF: input that ends right after a slow request still gets
// every answer before the server stops.
func TestServeStdioAnswersBeforeEOF(t *testing.T) {
	audit := t.TempDir()
	s := New(Config{Session: session.Config{AuditDir: audit}})
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session_create","arguments":{"transport":"local"}}}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/list"}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.ServeStdio(ctx, strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for l := range strings.Lines(out.String()) {
		var m struct {
			ID     any             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		ids[fmt.Sprint(m.ID)] = m.Result != nil
	}
	if !ids["1"] || !ids["2"] || !ids["three"] {
		t.Fatalf("answers %v; output:\n%s", ids, out.String())
	}
}

// blockingReader never returns: the transport must still stop when ctx ends.
type blockingReader struct{ done chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.done; return 0, io.EOF }

func TestServeStdioStopsOnContext(t *testing.T) {
	s := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	r := blockingReader{done: make(chan struct{})}
	defer close(r.done)
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(ctx, r, io.Discard) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not stop")
	}
}

func TestDrainWait(t *testing.T) {
	d := newDrain(context.Background())
	d.wait() // nothing pending
	d.add("1")
	d.add("1")
	d.done("2")
	d.done("1")
	waited := make(chan struct{})
	go func() { d.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned with a request pending")
	case <-time.After(20 * time.Millisecond):
	}
	d.done("1")
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return")
	}
}
