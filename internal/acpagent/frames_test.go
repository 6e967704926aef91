package acpagent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/jsonrpcline"
	"github.com/nexus-run/nexus/internal/testkit"
)

type answer struct {
	ID     any `json:"id"`
	Result *struct {
		ProtocolVersion int `json:"protocolVersion"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Every malformed or oversized frame is answered with a JSON-RPC error (with its id when it
// has one) and dropped; the connection goes on and answers the next request. Without the
// guard the SDK drops a line it cannot parse unanswered, and ends the connection at a line over
// 10 MB.
func TestMalformedFrames(t *testing.T) {
	deep := strings.Repeat("[", MaxFrameDepth+1) + strings.Repeat("]", MaxFrameDepth+1)
	huge := `{"jsonrpc":"2.0","id":"big","method":"session/prompt","params":{"text":"` + strings.Repeat("x", MaxFrameBytes) + `"}}`
	tests := []struct {
		name, line string
		code       int
		id         any
		msg        string
	}{
		{"not JSON", `{"jsonrpc":"2.0","id":1,`, jsonrpcline.CodeParseError, nil, "not JSON"},
		{"oversized", huge, jsonrpcline.CodeParseError, "big", "over the limit"},
		{"too deep", deep, jsonrpcline.CodeParseError, nil, "nested deeper"},
		{"batch", `[{"jsonrpc":"2.0","id":2,"method":"initialize"}]`, jsonrpcline.CodeInvalidRequest, nil, "batches"},
		{"not an object", `42`, jsonrpcline.CodeInvalidRequest, nil, "JSON object"},
		{"no jsonrpc", `{"id":3,"method":"initialize","params":{}}`, jsonrpcline.CodeInvalidRequest, float64(3), `"jsonrpc" must be "2.0"`},
		{"method not a string", `{"jsonrpc":"2.0","id":4,"method":7}`, jsonrpcline.CodeInvalidRequest, float64(4), "method must be"},
		{"bad id", `{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}`, jsonrpcline.CodeInvalidRequest, nil, "id must be"},
		{"neither", `{"jsonrpc":"2.0","params":{}}`, jsonrpcline.CodeInvalidRequest, nil, "needs a method"},
		{"response without result", `{"jsonrpc":"2.0","id":5}`, jsonrpcline.CodeInvalidRequest, float64(5), "result or an error"},
		{"unknown method", `{"jsonrpc":"2.0","id":6,"method":"session/nosuch","params":{}}`, -32601, float64(6), "Method not found"},
		{"bad params", `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"one"}}`, -32602, float64(7), "Invalid params"},
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a := New(Config{Client: client.New(client.Target{Socket: t.TempDir() + "/none.sock"}), Version: "test"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, inR, outW); _ = outW.Close() }()
	lines := bufio.NewReaderSize(outR, 1<<20)
	read := func(t *testing.T) answer {
		t.Helper()
		b, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read the answer: %v", err)
		}
		var ans answer
		if err := json.Unmarshal(b, &ans); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
		return ans
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := io.WriteString(inW, tc.line+"\n"); err != nil {
				t.Fatal(err)
			}
			ans := read(t)
			if ans.Error == nil || ans.Error.Code != tc.code || !strings.Contains(ans.Error.Message, tc.msg) {
				t.Fatalf("answer %+v, want code %d with %q", ans.Error, tc.code, tc.msg)
			}
			if ans.ID != tc.id {
				t.Fatalf("answer id %v, want %v", ans.ID, tc.id)
			}
			// The connection lives: initialize is answered.
			if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":1}}`+"\n"); err != nil {
				t.Fatal(err)
			}
			if ans := read(t); ans.Result == nil || ans.Result.ProtocolVersion != 1 || ans.ID != "init" {
				t.Fatalf("initialize after the bad frame: %+v", ans)
			}
		})
	}
	_ = inW.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A client that writes its requests and closes its input still gets their answers: the end of
// the input waits for them (as `printf ... | nexus mcp` does). Before, the SDK ended the
// connection at the end of input, and the request still at the gateway was answered "context
// canceled", or not at all.
func TestEndOfInputWaitsForAnswers(t *testing.T) {
	sock := filepath.Join(testkit.ShortTempDir(t), "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	got, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(got)
		<-release
		http.Error(w, "the fake gateway's answer", http.StatusServiceUnavailable)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a := New(Config{Client: client.New(client.Target{Socket: sock})})
	served := make(chan error, 1)
	go func() { served <- a.Serve(t.Context(), inR, outW); _ = outW.Close() }()
	lines := bufio.NewReader(outR)
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":"new","method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	<-got // the request is at the gateway
	_ = inW.Close()
	close(release)
	b, err := lines.ReadBytes('\n')
	if err != nil {
		t.Fatalf("no answer after the end of input: %v", err)
	}
	var ans answer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.ID != "new" || ans.Error == nil || !strings.Contains(ans.Error.Message, "the fake gateway's answer") {
		t.Fatalf("answer %s, want the gateway's error", b)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// What the end of input waits for: the client's requests but prompts, until the SDK writes
// their answers; the agent's own requests and notifications are not answers.
func TestPendingIDs(t *testing.T) {
	in := []struct {
		line, id, method string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, "1", "initialize"},
		{`{"jsonrpc":"2.0","id": "a b" ,"method":"session/load"}`, `"a b"`, "session/load"},
		{`{"jsonrpc":"2.0","method":"session/cancel","params":{}}`, "", "session/cancel"},
		{`{"jsonrpc":"2.0","id":null,"method":"x"}`, "", "x"},
		{`{"jsonrpc":"2.0","id":4,"result":{}}`, "", ""},
	}
	for _, tc := range in {
		if id, m, _ := requestOf([]byte(tc.line)); id != tc.id || m != tc.method {
			t.Errorf("requestOf(%s) = %q %q, want %q %q", tc.line, id, m, tc.id, tc.method)
		}
	}
	out := []struct{ line, id string }{
		{`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}`, "1"},
		{`{"jsonrpc":"2.0","id":"a b","error":{"code":-32603,"message":"x"}}`, `"a b"`},
		{`{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{}}`, ""},
		{`{"jsonrpc":"2.0","method":"session/update","params":{}}`, ""},
	}
	for _, tc := range out {
		if id := answeredID([]byte(tc.line)); id != tc.id {
			t.Errorf("answeredID(%s) = %q, want %q", tc.line, id, tc.id)
		}
	}
}

// A flood of notifications (unknown ones and session/cancel for sessions not open) does not
// end the connection: the SDK queues at most 1024 and closes the connection past that.
func TestNotificationFlood(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a := New(Config{Client: client.New(client.Target{Socket: t.TempDir() + "/none.sock"})})
	served := make(chan error, 1)
	go func() { served <- a.Serve(t.Context(), inR, outW); _ = outW.Close() }()
	go func() {
		w := bufio.NewWriter(inW)
		for i := range 20000 {
			if i%2 == 0 {
				_, _ = io.WriteString(w, `{"jsonrpc":"2.0","method":"_x/ping","params":{}}`+"\n")
			} else {
				_, _ = io.WriteString(w, `{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}`+"\n")
			}
		}
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`+"\n")
		_ = w.Flush()
		_ = inW.Close()
	}()
	b, err := bufio.NewReader(outR).ReadBytes('\n')
	if err != nil {
		t.Fatalf("no answer to initialize after the flood: %v", err)
	}
	var ans answer
	if err := json.Unmarshal(b, &ans); err != nil || ans.Result == nil || ans.Result.ProtocolVersion != 1 {
		t.Fatalf("answer %s, want initialize's", b)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}
