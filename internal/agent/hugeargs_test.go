package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/agent"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Arguments past the limit: the call is refused with a short error naming the size and the
// limit, nothing of the arguments goes back to the model, the transcript records the call
// with a marker and their start only, and the turn (and the next) goes on.
func TestOversizedArguments(t *testing.T) {
	const limit, filler = 64 << 10, 1 << 20
	head, tail := `{"path":"big.txt","content":"`, `"}`
	size := len(head) + filler + len(tail)
	srv := newChatServer(t, true, refusing(t, func(n int, _ []byte, w *chatSSE) {
		if n == 0 {
			w.bigCall("call_big", "echo", head, filler, tail)
			return
		}
		w.text("ok")
	}))
	tw, err := transcript.Create(filepath.Join(t.TempDir(), "t.jsonl"), "/work", transcript.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tw.Close() })
	c := &conversation{tb: t, w: tw, p: srv.open(t), maxArgs: limit}
	tb := echoTools()
	if res := c.turn(tb, "write it", agent.Options{}); res.End != agent.EndCompleted || res.Iterations != 2 {
		t.Fatalf("turn %+v", res)
	}
	if res := c.turn(tb, "again", agent.Options{}); res.End != agent.EndCompleted {
		t.Fatalf("next turn %+v", res)
	}
	if len(tb.runs) != 0 {
		t.Fatalf("the tool ran: %v", tb.runs)
	}
	run := strings.Repeat("a", 64)
	msgs := c.messages()
	if got := roles(msgs); got != "user assistant toolResult:call_big! assistant user assistant" {
		t.Fatalf("transcript %s", got)
	}
	refusal := msgs[2].Content[0].Text
	if !strings.Contains(refusal, fmt.Sprintf("%d bytes", size)) || !strings.Contains(refusal, fmt.Sprintf("%d bytes", limit)) ||
		len(refusal) > 400 || strings.Contains(refusal, run) {
		t.Fatalf("refusal %q", refusal)
	}
	call := msgs[1].ToolCalls()[0]
	if string(call.Arguments) != "{}" || call.ArgumentsTruncated == nil || call.ArgumentsTruncated.Bytes != size ||
		call.ArgumentsTruncated.Limit != limit || !strings.HasPrefix(call.ArgumentsTruncated.Prefix, head) {
		t.Fatalf("recorded call %+v", call)
	}
	if fi, err := os.Stat(tw.Path()); err != nil || fi.Size() > 8<<10 {
		t.Fatalf("transcript of %d bytes (%v)", fi.Size(), err)
	}
	bodies, _ := srv.requests()
	for i, b := range bodies[1:] {
		if len(b) > 8<<10 || strings.Contains(string(b), run) {
			t.Errorf("request %d holds the arguments (%d bytes)", i+1, len(b))
		}
	}
}

// Arguments that are not a JSON object (cut short, malformed) are an error result: the call
// does not run with {} in their place.
func TestMalformedArgumentsNotRun(t *testing.T) {
	srv := newChatServer(t, true, refusing(t, func(n int, _ []byte, w *chatSSE) {
		if n == 0 {
			w.calls(chatCall{"c1", "echo", `{"x":`})
			return
		}
		w.text("ok")
	}))
	var r recorder
	tb := echoTools()
	res, err := agent.Run(t.Context(), srv.open(t), tb, request("go"), r.opts())
	if err != nil || res.End != agent.EndCompleted || len(tb.runs) != 0 {
		t.Fatalf("%+v %v, runs %v", res, err, tb.runs)
	}
	if m := r.messages[1]; !m.IsError || !strings.Contains(m.Content[0].Text, "not a JSON object") {
		t.Fatalf("result %+v", m)
	}
}
