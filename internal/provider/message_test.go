package provider

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/transcript"
)

// TestMessagesFromRealTranscripts: every message of the real pi samples reaches a Request and
// marshals back with the same value for every field pi wrote (none lost on the way to a model).
func TestMessagesFromRealTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "transcripts", "pi", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pi samples: %v", err)
	}
	// pi's streaming leftovers, not part of the message model.
	ignore := map[string]bool{"partialJson": true}
	total := 0
	for _, path := range files {
		f, err := transcript.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ctx, err := f.BuildContext("")
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for i, raw := range ctx.Messages {
			var head struct {
				Role string `json:"role"`
			}
			_ = json.Unmarshal(raw, &head)
			if head.Role != RoleUser && head.Role != RoleAssistant && head.Role != RoleToolResult {
				continue // converted to user text: see TestFromContext
			}
			msgs, err := FromContext([]json.RawMessage{raw})
			if err != nil || len(msgs) != 1 {
				t.Fatalf("%s message %d: %v", path, i, err)
			}
			ours, err := json.Marshal(msgs[0])
			if err != nil {
				t.Fatal(err)
			}
			var want, got map[string]any
			_ = json.Unmarshal(raw, &want)
			_ = json.Unmarshal(ours, &got)
			if s, ok := want["content"].(string); ok {
				want["content"] = []any{map[string]any{"type": "text", "text": s}}
			}
			if diff := subset(want, got, ignore); diff != "" {
				t.Fatalf("%s message %d (%s): %s\npi:   %s\nours: %s", filepath.Base(path), i, head.Role, diff, raw, ours)
			}
			total++
		}
	}
	t.Logf("%d messages of %d samples", total, len(files))
}

// subset reports the first field of want that got lacks or holds differently.
func subset(want, got any, ignore map[string]bool) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return "not an object"
		}
		for k, v := range w {
			if ignore[k] {
				continue
			}
			if d := subset(v, g[k], ignore); d != "" {
				return k + ": " + d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return "array differs"
		}
		for i := range w {
			if d := subset(w[i], g[i], ignore); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(want, got) {
		b, _ := json.Marshal(got)
		a, _ := json.Marshal(want)
		return string(a) + " != " + string(b)
	}
	return ""
}

func TestFromContext(t *testing.T) {
	raw := []json.RawMessage{
		json.RawMessage(`{"role":"compactionSummary","summary":"we did things","tokensBefore":10,"timestamp":5}`),
		json.RawMessage(`{"role":"branchSummary","summary":"tried x","fromId":"a1","timestamp":6}`),
		json.RawMessage(`{"role":"custom","customType":"note","content":"remember y","display":true,"timestamp":7}`),
		json.RawMessage(`{"role":"bashExecution","command":"ls","output":"a\nb","exitCode":2,"cancelled":false,"truncated":true,"fullOutputPath":"/tmp/o","timestamp":8}`),
		json.RawMessage(`{"role":"bashExecution","command":"secret","output":"","excludeFromContext":true,"timestamp":9}`),
		json.RawMessage(`{"role":"somethingNew","timestamp":10}`),
		json.RawMessage(`{"role":"user","content":"hi","timestamp":11}`),
	}
	msgs, err := FromContext(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		transcript.CompactionSummaryPrefix + "we did things" + transcript.CompactionSummarySuffix,
		transcript.BranchSummaryPrefix + "tried x" + transcript.BranchSummarySuffix,
		"remember y",
		"Ran `ls`\n```\na\nb\n```\n\nCommand exited with code 2\n\n[Output truncated. Full output: /tmp/o]",
		"hi",
	}
	if len(msgs) != len(want) {
		t.Fatalf("%d messages: %+v", len(msgs), msgs)
	}
	for i, w := range want {
		if msgs[i].Role != RoleUser || msgs[i].TextContent() != w {
			t.Errorf("message %d: %s %q, want %q", i, msgs[i].Role, msgs[i].TextContent(), w)
		}
	}
	if msgs[0].Timestamp != 5 || msgs[4].Timestamp != 11 {
		t.Errorf("timestamps %d %d", msgs[0].Timestamp, msgs[4].Timestamp)
	}
	if _, err := FromContext([]json.RawMessage{json.RawMessage(`{"role":`)}); err == nil || !strings.Contains(err.Error(), "context message 0") {
		t.Errorf("bad JSON: %v", err)
	}
}

func TestMessageJSON(t *testing.T) {
	m := Message{Role: RoleAssistant, API: APIAnthropicMessages, Provider: "claude", Model: "m", StopReason: StopToolUse, Timestamp: 9,
		Usage: Usage{Input: 1, Output: 2, TotalTokens: 3},
		Content: []Content{
			Text(""),
			{Type: BlockThinking, Thinking: "", ThinkingSignature: "sig"},
			{Type: BlockToolCall, ID: "c1", Name: "ls"},
		}}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// Empty text and thinking keep their keys, a call without arguments gets {}: pi reads
	// them as it wrote them.
	want := `{"role":"assistant","content":[{"type":"text","text":""},{"type":"thinking","thinking":"","thinkingSignature":"sig"},{"type":"toolCall","id":"c1","name":"ls","arguments":{}}],"api":"anthropic-messages","provider":"claude","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":9}`
	if string(raw) != want {
		t.Fatalf("got  %s\nwant %s", raw, want)
	}
	tr, _ := json.Marshal(Message{Role: RoleToolResult, ToolCallID: "c1", ToolName: "ls", Content: []Content{Text("x")}})
	if string(tr) != `{"role":"toolResult","toolCallId":"c1","toolName":"ls","content":[{"type":"text","text":"x"}],"isError":false,"timestamp":0}` {
		t.Fatalf("tool result %s", tr)
	}
}

func TestShortID(t *testing.T) {
	long := strings.Repeat("x", 70)
	cases := []struct {
		id    string
		limit int
		keep  bool
	}{
		{"toolu_01T1x1fJ34qAmk2tNTrN7Up6", 64, true},
		{"call_9|fc_9", 64, false},
		{long, 64, false},
		{"", 64, false},
	}
	seen := map[string]string{}
	for _, tc := range cases {
		got := shortID(tc.id, tc.limit, idChar)
		if (got == tc.id) != tc.keep || len(got) > tc.limit {
			t.Errorf("shortID(%q) = %q", tc.id, got)
		}
		for _, r := range got {
			if !idChar(r) {
				t.Errorf("shortID(%q) = %q holds %q", tc.id, got, r)
			}
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%q and %q both map to %q", other, tc.id, got)
		}
		seen[got] = tc.id
	}
	if shortID(long, 64, idChar) == shortID(long+"y", 64, idChar) {
		t.Error("two long ids with one prefix map to one id")
	}
}

func TestRetryAfter(t *testing.T) {
	now := fixedNow
	cases := []struct {
		h    map[string]string
		want time.Duration
		ok   bool
	}{
		{map[string]string{"Retry-After": "7"}, 7 * time.Second, true},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond, true},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond, true},
		{map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second, true},
		{map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, 0, true},
		{map[string]string{"Retry-After": "1e300"}, 1e7 * time.Second, true},
		{map[string]string{"Retry-After": "soon"}, 0, false},
		{map[string]string{"Retry-After": "-3"}, 0, false},
		{nil, 0, false},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: %v %v, want %v %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoff(t *testing.T) {
	var ceilings []time.Duration
	p := retryPolicy{base: time.Second, maxDelay: 5 * time.Second, jitter: func(c time.Duration) time.Duration {
		ceilings = append(ceilings, c)
		return c / 2
	}}
	var got []time.Duration
	for a := 1; a <= 5; a++ {
		got = append(got, p.backoff(a))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if !reflect.DeepEqual(ceilings, want) {
		t.Fatalf("ceilings %v, want %v", ceilings, want)
	}
	if got[2] != 2*time.Second {
		t.Fatalf("the wait is the jitter's: %v", got)
	}
	for range 1000 {
		if d := fullJitter(time.Second); d < 0 || d > time.Second {
			t.Fatalf("jitter %v outside [0, 1s]", d)
		}
	}
}
