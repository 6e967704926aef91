package acpagent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/client"
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
		{"not JSON", `{"jsonrpc":"2.0","id":1,`, codeParseError, nil, "not JSON"},
		{"oversized", huge, codeParseError, "big", "over the limit"},
		{"too deep", deep, codeParseError, nil, "nested deeper"},
		{"batch", `[{"jsonrpc":"2.0","id":2,"method":"initialize"}]`, codeInvalidRequest, nil, "batches"},
		{"not an object", `42`, codeInvalidRequest, nil, "JSON object"},
		{"no jsonrpc", `{"id":3,"method":"initialize","params":{}}`, codeInvalidRequest, float64(3), `"jsonrpc" must be "2.0"`},
		{"method not a string", `{"jsonrpc":"2.0","id":4,"method":7}`, codeInvalidRequest, float64(4), "method must be"},
		{"bad id", `{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}`, codeInvalidRequest, nil, "id must be"},
		{"neither", `{"jsonrpc":"2.0","params":{}}`, codeInvalidRequest, nil, "needs a method"},
		{"response without result", `{"jsonrpc":"2.0","id":5}`, codeInvalidRequest, float64(5), "result or an error"},
		{"unknown method", `{"jsonrpc":"2.0","id":6,"method":"session/nosuch","params":{}}`, -32601, float64(6), "Method not found"},
		{"bad params", `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"one"}}`, -32602, float64(7), "Invalid params"},
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a := New(Config{Client: client.New(client.Target{Socket: t.TempDir() + "/none.sock"}), Version: "test"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, inR, outW) }()
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
