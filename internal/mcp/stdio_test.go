package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/testkit"
)

func (h msgHead) String() string {
	kind := "response"
	if h.method {
		kind = "request"
	}
	s := fmt.Sprintf("%v %s", h.id.Raw(), kind)
	if h.result != nil {
		s += " " + string(h.result)
	}
	return s
}

func TestMessageHeads(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`:                                 `[1 request]`,
		`{"method":"tools/call","params":{"x":[1,2]},"id":"a"}`:                          `[a request]`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`:                         `[<nil> request]`,
		`{"jsonrpc":"2.0","id":1.0,"result":{"big":"` + strings.Repeat("x", 100) + `"}}`: `[1 response {"big":"` + strings.Repeat("x", 100) + `"}]`,
		`{"jsonrpc":"2.0","result":{},"id":7}`:                                           `[7 response {}]`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`:                            `[<nil> response]`,
		`{"jsonrpc":"2.0","id":true,"method":"x"}`:                                       `[<nil> request]`,
		`[{"id":1,"method":"a"},{"id":2,"result":{}}]`:                                   `[1 request 2 response {}]`,
		`not json`: `[]`,
		`  `:       `[]`,
	} {
		if got := fmt.Sprint(messages([]byte(in))); got != want {
			t.Errorf("messages(%s) = %s, want %s", in, got, want)
		}
	}
	// A response's result is not parsed: a broken result after the id still counts.
	if got := fmt.Sprint(messages([]byte(`{"jsonrpc":"2.0","id":3,"result":{"x":`))); got != `[3 response]` {
		t.Errorf("truncated response: %s", got)
	}
	// Nor is a large one.
	big := `{"jsonrpc":"2.0","id":4,"result":{"x":"` + strings.Repeat("y", maxResultKept) + `"}}`
	if got := fmt.Sprint(messages([]byte(big))); got != `[4 response]` {
		t.Errorf("large response: %.80s", got)
	}
}

// TestServeStdioAnswersBeforeEOF: input that ends right after a slow request still gets
// every answer before the server stops.
func TestServeStdioAnswersBeforeEOF(t *testing.T) {
	audit := t.TempDir()
	s := New(Config{Session: agentshell.Config{AuditDir: audit}})
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session_create","arguments":{"transport":"local"}}}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/list"}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Patience())
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

// blockingReader blocks until done is closed; entered is closed at its first Read.
type blockingReader struct {
	entered chan struct{}
	once    *sync.Once
	done    chan struct{}
}

func (b blockingReader) Read([]byte) (int, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.done
	return 0, io.EOF
}

// TestServeStdioStopsOnContext: a client that sends nothing does not keep the server from
// stopping when its context ends.
func TestServeStdioStopsOnContext(t *testing.T) {
	s := New(Config{})
	ctx, cancel := context.WithCancel(t.Context())
	r := blockingReader{entered: make(chan struct{}), once: new(sync.Once), done: make(chan struct{})}
	defer close(r.done)
	done := make(chan error, 1)
	go func() { done <- s.ServeStdio(ctx, r, io.Discard) }()
	<-r.entered // the server is waiting for input
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testkit.Patience()):
		t.Fatal("ServeStdio did not stop")
	}
}

func TestStdioStateWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d := newStdioState(ctx)
		d.wait() // nothing pending
		one, two := mustID(float64(1)), mustID("1")
		d.add(one, "tools/call")
		d.add(one, "tools/call")
		d.done(two) // a string id is another id
		d.done(one)
		waited := make(chan struct{})
		go func() { d.wait(); close(waited) }()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("wait returned with a request pending")
		default:
		}
		d.done(one)
		synctest.Wait()
		select {
		case <-waited:
		default:
			t.Fatal("wait did not return once every request was answered")
		}
	})
}

func TestStdioStateBatchRefusal(t *testing.T) {
	d := newStdioState(t.Context())
	if why := d.batchRefusal(nil); !strings.Contains(why, "none agreed") {
		t.Errorf("before initialize: %q", why)
	}
	d.add(mustID(float64(0)), "initialize")
	if why := d.batchRefusal(nil); !strings.Contains(why, "initialize is unanswered") {
		t.Errorf("during initialize: %q", why)
	}
	d.answering(mustID(float64(0)), []byte(`{"protocolVersion":"2025-03-26"}`))
	d.done(mustID(float64(0)))
	if why := d.batchRefusal([]jsonrpc.ID{mustID(float64(2))}); why != "" {
		t.Errorf("under 2025-03-26: %q", why)
	}
	if why := d.batchRefusal([]jsonrpc.ID{mustID(float64(1)), mustID(float64(1))}); !strings.Contains(why, "already in use") {
		t.Errorf("duplicate ids in a batch: %q", why)
	}
	// The batch just passed holds id 2 until it is answered.
	if why := d.batchRefusal([]jsonrpc.ID{mustID(float64(2))}); !strings.Contains(why, "already in use") {
		t.Errorf("an id of a batch in flight: %q", why)
	}
	d.answering(mustID(float64(2)), nil)
	if why := d.batchRefusal([]jsonrpc.ID{mustID(float64(2))}); why != "" {
		t.Errorf("an id answered: %q", why)
	}
	d2 := newStdioState(t.Context())
	d2.add(mustID("i"), "initialize")
	d2.answering(mustID("i"), []byte(`{"protocolVersion":"2025-06-18"}`))
	d2.done(mustID("i"))
	if why := d2.batchRefusal(nil); !strings.Contains(why, "2025-06-18") {
		t.Errorf("under 2025-06-18: %q", why)
	}
}

func mustID(v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		panic(err)
	}
	return id
}
