package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/testkit"
)

const testKey = "sk-test-Zq8vN3pL5rT7wY1x"

// backendFor is a backend of kind at the fake's URL, its key in $TEST_KEY.
func backendFor(kind, url string) Backend {
	b := Backend{Name: "fake", Kind: kind, BaseURL: url, Model: "m1", APIKeyEnv: "TEST_KEY", MaxTokens: 1000}
	if kind != KindAnthropic {
		b.BaseURL += "/v1"
	}
	return b
}

func openFake(t *testing.T, kind string, f *fakeServer, s *sleeps) Provider {
	t.Helper()
	if s == nil {
		s = &sleeps{}
	}
	p, err := Open(backendFor(kind, f.url()), testOptions(s, map[string]string{"TEST_KEY": testKey}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func userAsk() []Message { return []Message{UserText("What directory is the shell in?", 1)} }

func TestRecordedStreams(t *testing.T) {
	type call struct{ id, name, args string }
	cases := []struct {
		name, kind, file string
		text             string
		thinking         []string // thinking blocks in order
		signatures       []string // their signatures ("" none); "~x" means containing x
		redacted         int      // how many thinking blocks are redacted
		calls            []call
		stop             StopReason
		usage            Usage
	}{
		{name: "llama.cpp chat text", kind: KindOpenAICompatible, file: "chat-plain.sse", text: "Hello from a tiny model.", stop: StopEndTurn,
			usage: Usage{Input: 1, CacheRead: 14, Output: 7, TotalTokens: 22}},
		{name: "llama.cpp chat tool call", kind: KindOpenAICompatible, file: "chat-tools.sse", stop: StopToolUse,
			calls: []call{{name: "session_exec"}}},
		{name: "chat reasoning_content", kind: KindOpenAICompatible, file: "chat-reasoning.sse", text: "Hello there.",
			thinking: []string{"The user wants a greeting."}, signatures: []string{""}, stop: StopEndTurn,
			usage: Usage{Input: 8, CacheRead: 32, Output: 9, Reasoning: 5, TotalTokens: 49}},
		{name: "llama.cpp anthropic text", kind: KindAnthropic, file: "anthropic-plain.sse", text: "Hello from a tiny model.", stop: StopEndTurn,
			usage: Usage{Input: 15, Output: 7, TotalTokens: 22}},
		{name: "llama.cpp anthropic tool call", kind: KindAnthropic, file: "anthropic-tools.sse", stop: StopToolUse,
			calls: []call{{name: "session_exec"}}},
		{name: "anthropic thinking with signature", kind: KindAnthropic, file: "anthropic-thinking-tools.sse", text: "I'll check the directory.",
			thinking:   []string{"The user asks where the shell is. I should run pwd in their session.", ""},
			signatures: []string{"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds1lT+3aGsQHi7mJqm4EyXb8YSBJ9bwGGcAsTEmEpHX8lNz9V5S7Ud8Q6CJ3cQA==", "~EmwKAhgBEgy3va3pzix"},
			redacted:   1,
			calls:      []call{{id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", name: "session_exec", args: `{"session_id":"s1","command":"pwd"}`}},
			stop:       StopToolUse,
			usage:      Usage{Input: 472, CacheRead: 1024, CacheWrite: 128, Output: 89, Reasoning: 41, TotalTokens: 1713}},
		{name: "responses reasoning, text and function call", kind: KindOpenAIResponses, file: "responses-reasoning-tools.sse", text: "Let me check the directory.",
			thinking:   []string{"**Finding the directory**\n\nI will run pwd."},
			signatures: []string{`~"encrypted_content":"gAAAAABor0AzJ3bNp8wVYQk5rB2dRZYoLrWb4m9PSu1YqF7c0a9jWm3Z"`},
			calls:      []call{{id: "call_Wm3bL4jSfd8s9Qj0VqVGkcd1|fc_68af4034c2d48193a1e1d1a8b5b7c0d2", name: "session_exec", args: `{"session_id":"s1","command":"pwd"}`}},
			stop:       StopToolUse,
			usage:      Usage{Input: 176, CacheRead: 1024, Output: 180, Reasoning: 128, TotalTokens: 1380}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, testKey, reply{file: tc.file})
			p := openFake(t, tc.kind, f, nil)
			s, err := p.Stream(context.Background(), Request{Messages: userAsk(), Tools: []Tool{sessionExec}})
			if err != nil {
				t.Fatal(err)
			}
			c := collect(t, s)
			if c.err != nil || c.msg.StopReason != tc.stop {
				t.Fatalf("stop %q (want %q), err %v", c.msg.StopReason, tc.stop, c.err)
			}
			if got := c.msg.TextContent(); got != tc.text {
				t.Errorf("text %q, want %q", got, tc.text)
			}
			if c.deltas(EventTextDelta) != tc.text {
				t.Errorf("text deltas %q, want %q", c.deltas(EventTextDelta), tc.text)
			}
			var thinking, sigs []string
			redacted := 0
			for _, b := range c.msg.Content {
				if b.Type == BlockThinking {
					thinking = append(thinking, b.Thinking)
					sigs = append(sigs, b.ThinkingSignature)
					if b.Redacted {
						redacted++
					}
				}
			}
			if !slices.Equal(thinking, tc.thinking) || redacted != tc.redacted {
				t.Errorf("thinking %q (%d redacted), want %q (%d)", thinking, redacted, tc.thinking, tc.redacted)
			}
			for i, want := range tc.signatures {
				if i >= len(sigs) {
					break
				}
				if sub, ok := strings.CutPrefix(want, "~"); ok && !strings.Contains(sigs[i], sub) || !ok && sigs[i] != want {
					t.Errorf("signature %d %q, want %q", i, sigs[i], want)
				}
			}
			// The thinking end events carry the signature; thinking deltas make up the text.
			var ends []string
			for _, ev := range c.events {
				if ev.Type == EventThinkingEnd {
					ends = append(ends, ev.Signature)
				}
			}
			if len(tc.thinking) > 0 && (!slices.Equal(ends, sigs) || c.deltas(EventThinkingDelta) != strings.Join(tc.thinking, "")) {
				t.Errorf("thinking events: end signatures %q, deltas %q", ends, c.deltas(EventThinkingDelta))
			}
			calls := c.msg.ToolCalls()
			if len(calls) != len(tc.calls) {
				t.Fatalf("calls %+v, want %d", calls, len(tc.calls))
			}
			for i, want := range tc.calls {
				got := calls[i]
				if got.Name != want.name || want.id != "" && got.ID != want.id || got.ID == "" {
					t.Errorf("call %d: %s %s, want %s %s", i, got.ID, got.Name, want.id, want.name)
				}
				if want.args != "" && string(got.Arguments) != want.args {
					t.Errorf("call %d arguments %s, want %s", i, got.Arguments, want.args)
				}
				if !json.Valid(got.Arguments) {
					t.Errorf("call %d arguments %s not JSON", i, got.Arguments)
				}
			}
			if tc.usage != (Usage{}) && c.msg.Usage != tc.usage {
				t.Errorf("usage %+v, want %+v", c.msg.Usage, tc.usage)
			}
			// Every block has start, deltas and end in order, indexes matching the content.
			open := map[int]bool{}
			for _, ev := range c.events {
				switch ev.Type {
				case EventTextStart, EventThinkingStart, EventToolCallStart:
					open[ev.Index] = true
				case EventTextDelta, EventThinkingDelta, EventToolCallDelta:
					if !open[ev.Index] {
						t.Errorf("delta for block %d that is not open", ev.Index)
					}
				case EventTextEnd, EventThinkingEnd, EventToolCallEnd:
					if !open[ev.Index] {
						t.Errorf("end of block %d that is not open", ev.Index)
					}
					delete(open, ev.Index)
				}
			}
			if len(open) > 0 {
				t.Errorf("blocks never ended: %v", open)
			}
			// The assistant message is a transcript message: pi's shape, read back equal.
			raw, err := json.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			var back Message
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			raw2, _ := json.Marshal(back)
			if !bytes.Equal(raw, raw2) {
				t.Errorf("message does not survive JSON:\n%s\n%s", raw, raw2)
			}
		})
	}
}

// TestToolResultRoundTrip sends each provider's reply back with the tool result, as the loop
// will: the fake checks the pairing, the test checks what each API needs to continue (thinking
// signatures, reasoning items, call ids).
func TestToolResultRoundTrip(t *testing.T) {
	cases := []struct {
		name, kind, first, second string
		want                      []string // substrings of the second request body
	}{
		{"chat", KindOpenAICompatible, "chat-tools.sse", "chat-tool-result.sse",
			[]string{`"role":"tool"`, `"tool_calls":[{"id":"`}},
		{"anthropic thinking", KindAnthropic, "anthropic-thinking-tools.sse", "anthropic-plain.sse",
			[]string{
				`{"signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds1lT+3aGsQHi7mJqm4EyXb8YSBJ9bwGGcAsTEmEpHX8lNz9V5S7Ud8Q6CJ3cQA==","thinking":"The user asks where the shell is. I should run pwd in their session.","type":"thinking"}`,
				`{"data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj","type":"redacted_thinking"}`,
				`"id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","input":{"session_id":"s1","command":"pwd"},"name":"session_exec","type":"tool_use"`,
				`"tool_use_id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6"`,
			}},
		{"responses reasoning", KindOpenAIResponses, "responses-reasoning-tools.sse", "responses-text.sse",
			[]string{
				`"encrypted_content":"gAAAAABor0AzJ3bNp8wVYQk5rB2dRZYoLrWb4m9PSu1YqF7c0a9jWm3Z"`,
				`"id":"rs_68af4030baa48193b0b43b4c2a176a1a"`,
				`"call_id":"call_Wm3bL4jSfd8s9Qj0VqVGkcd1"`,
				`"id":"fc_68af4034c2d48193a1e1d1a8b5b7c0d2"`,
				`"type":"function_call_output"`,
				`"store":false`,
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, testKey, reply{file: tc.first}, reply{file: tc.second})
			p := openFake(t, tc.kind, f, nil)
			req := Request{System: "You are terse.", Messages: userAsk(), Tools: []Tool{sessionExec}, Thinking: "medium"}
			s, err := p.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			first := collect(t, s)
			calls := first.msg.ToolCalls()
			if len(calls) != 1 {
				t.Fatalf("calls: %+v", first.msg.Content)
			}
			req.Messages = append(req.Messages, first.msg, Message{Role: RoleToolResult, ToolCallID: calls[0].ID,
				ToolName: calls[0].Name, Content: []Content{Text("/home/agent")}, Timestamp: 3})
			s, err = p.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			second := collect(t, s)
			if second.err != nil || second.msg.StopReason != StopEndTurn || second.msg.TextContent() == "" {
				t.Fatalf("second reply: %q %v %+v", second.msg.StopReason, second.err, second.msg.Content)
			}
			reqs := f.received()
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			body := string(reqs[1].body)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("second request lacks %s:\n%s", w, body)
				}
			}
		})
	}
}

// TestPairingRepairs: what prepare does to a conversation the loop left unpaired, checked by
// the fake as it receives it.
func TestPairingRepairs(t *testing.T) {
	call := func(id string) Content {
		return Content{Type: BlockToolCall, ID: id, Name: "session_exec", Arguments: json.RawMessage(`{"command":"ls"}`)}
	}
	asst := func(stop StopReason, c ...Content) Message {
		return Message{Role: RoleAssistant, Content: c, API: APIAnthropicMessages, Provider: "fake", Model: "m1", StopReason: stop}
	}
	result := func(id string) Message {
		return Message{Role: RoleToolResult, ToolCallID: id, ToolName: "session_exec", Content: []Content{Text("ok")}}
	}
	cases := []struct {
		name    string
		msgs    []Message
		wantErr string   // an INVALID_ARGUMENT before any request
		want    []string // substrings of the request body
		notWant []string
	}{
		{name: "unanswered call gets a synthetic result",
			msgs: []Message{UserText("a", 1), asst(StopToolUse, call("toolu_1")), UserText("b", 2)},
			want: []string{`"tool_use_id":"toolu_1"`, noResult, `"is_error":true`}},
		{name: "aborted reply dropped with its results",
			msgs:    []Message{UserText("a", 1), asst(StopAborted, Text("partial"), call("toolu_2")), result("toolu_2"), UserText("b", 2)},
			notWant: []string{"toolu_2", "partial"}},
		{name: "ids the API refuses are mapped on both sides",
			msgs: []Message{UserText("a", 1), asst(StopToolUse, call("call_9|fc_9")), result("call_9|fc_9")},
			want: []string{`"id":"call_9_fc_9_`, `"tool_use_id":"call_9_fc_9_`}},
		{name: "thinking of another model becomes text",
			msgs: []Message{UserText("a", 1), {Role: RoleAssistant, API: APIOpenAIResponses, Provider: "codex", Model: "gpt", StopReason: StopEndTurn,
				Content: []Content{{Type: BlockThinking, Thinking: "mull it over", ThinkingSignature: `{"id":"rs_1"}`}, Text("answer")}}, UserText("b", 2)},
			want: []string{`"text":"mull it over"`}, notWant: []string{"rs_1"}},
		{name: "orphan result refused",
			msgs:    []Message{UserText("a", 1), result("toolu_x")},
			wantErr: `tool result for call "toolu_x" has no tool call before it`},
		{name: "two calls of one id paired in order, the second renamed",
			msgs: []Message{UserText("a", 1), asst(StopToolUse, call("same"), call("same")), result("same"), result("same"), UserText("b", 2)},
			want: []string{`"id":"same"`, `"id":"same_2"`, `"tool_use_id":"same"`, `"tool_use_id":"same_2"`}, notWant: []string{noResult}},
		{name: "calls without ids get ids of their own",
			msgs:    []Message{UserText("a", 1), asst(StopToolUse, call(""), call("")), result(""), result(""), UserText("b", 2)},
			notWant: []string{`"id":""`, `"tool_use_id":""`, noResult}},
		{name: "one id in two replies",
			msgs: []Message{UserText("a", 1), asst(StopToolUse, call("c")), result("c"), asst(StopToolUse, call("c")), result("c")},
			want: []string{`"tool_use_id":"c"`, `"tool_use_id":"c_2"`}, notWant: []string{noResult}},
		{name: "an aborted reply's id does not take a later call's result",
			msgs: []Message{UserText("a", 1), asst(StopAborted, call("x")), result("x"), asst(StopToolUse, call("x")), result("x")},
			want: []string{`"tool_use_id":"x"`}, notWant: []string{noResult}},
		{name: "second result refused",
			msgs:    []Message{UserText("a", 1), asst(StopToolUse, call("toolu_3")), result("toolu_3"), result("toolu_3")},
			wantErr: "already has a result"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var replies []reply
			if tc.wantErr == "" {
				replies = append(replies, reply{file: "anthropic-plain.sse"})
			}
			f := newFake(t, testKey, replies...)
			p := openFake(t, KindAnthropic, f, nil)
			s, err := p.Stream(context.Background(), Request{Messages: tc.msgs})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || abi.CodeOf(err) != abi.CodeInvalidArgument {
					t.Fatalf("err %v, want INVALID_ARGUMENT %q", err, tc.wantErr)
				}
				if n := len(f.received()); n != 0 {
					t.Fatalf("%d requests sent", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c := collect(t, s); c.err != nil {
				t.Fatal(c.err)
			}
			body := string(f.received()[0].body)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("request lacks %s:\n%s", w, body)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(body, w) {
					t.Errorf("request holds %s:\n%s", w, body)
				}
			}
		})
	}
}

// TestCheckPairing: the fakes' own check catches what it must.
func TestCheckPairing(t *testing.T) {
	cases := []struct {
		path, body string
		ok         bool
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user"},{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"tool","tool_call_id":"a"}]}`, true},
		{"/v1/chat/completions", `{"messages":[{"role":"user"},{"role":"assistant","tool_calls":[{"id":"a"}]}]}`, false},
		{"/v1/chat/completions", `{"messages":[{"role":"user"},{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"user"}]}`, false},
		{"/v1/chat/completions", `{"messages":[{"role":"user"},{"role":"tool","tool_call_id":"a"}]}`, false},
		{"/v1/messages", `{"messages":[{"role":"user","content":[]},{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`, true},
		{"/v1/messages", `{"messages":[{"role":"user","content":[]},{"role":"assistant","content":[{"type":"tool_use","id":"a"}]},{"role":"user","content":[]}]}`, false},
		{"/v1/messages", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`, false},
		{"/v1/responses", `{"input":[{"role":"user"},{"type":"function_call","call_id":"a"},{"type":"function_call_output","call_id":"a"}]}`, true},
		{"/v1/responses", `{"input":[{"role":"user"},{"type":"function_call","call_id":"a"}]}`, false},
		{"/v1/responses", `{"input":[{"role":"user"},{"type":"function_call_output","call_id":"a"}]}`, false},
	}
	for i, tc := range cases {
		if err := checkPairing(tc.path, []byte(tc.body)); (err == nil) != tc.ok {
			t.Errorf("case %d: %v, want ok=%v", i, err, tc.ok)
		}
	}
}

func TestRetries(t *testing.T) {
	ok := map[string]string{KindOpenAICompatible: "chat-plain.sse", KindAnthropic: "anthropic-plain.sse", KindOpenAIResponses: "responses-text.sse"}
	limited := reply{status: 429, body: `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`}
	down := reply{status: 503, body: `{"error":{"message":"The server is overloaded","type":"server_error"}}`}
	after := func(r reply, k, v string) reply { r.header = map[string]string{k: v}; return r }
	cases := []struct {
		name     string
		kind     string
		attempts int // max_attempts (0: default 4)
		replies  []reply
		sleeps   []time.Duration
		code     abi.Code // "" for success
		inErr    string
	}{
		{name: "429 retry-after seconds", kind: KindOpenAICompatible, replies: []reply{after(limited, "Retry-After", "7")}, sleeps: []time.Duration{7 * time.Second}},
		{name: "429 retry-after-ms", kind: KindOpenAIResponses, replies: []reply{after(limited, "Retry-After-Ms", "1500")}, sleeps: []time.Duration{1500 * time.Millisecond}},
		{name: "429 retry-after date", kind: KindAnthropic,
			replies: []reply{after(limited, "Retry-After", fixedNow.Add(30*time.Second).Format(http.TimeFormat))}, sleeps: []time.Duration{30 * time.Second}},
		{name: "5xx twice then success", kind: KindOpenAICompatible, replies: []reply{down, {status: 502, body: "<html>bad gateway</html>"}},
			sleeps: []time.Duration{time.Second, 2 * time.Second}},
		{name: "anthropic overloaded 529", kind: KindAnthropic, replies: []reply{{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}},
			sleeps: []time.Duration{time.Second}},
		{name: "rate limit outlasts the attempts", kind: KindOpenAICompatible, replies: []reply{limited, limited, limited, limited},
			sleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, code: abi.CodeLimitExceeded, inErr: "HTTP 429 Too Many Requests after 4 attempts: Rate limit reached for requests"},
		{name: "server errors outlast the attempts", kind: KindAnthropic, attempts: 2, replies: []reply{down, down},
			sleeps: []time.Duration{time.Second}, code: abi.CodeResourceUnavailable, inErr: "HTTP 503 Service Unavailable after 2 attempts"},
		{name: "retry-after beyond max_retry_wait", kind: KindOpenAICompatible, replies: []reply{after(limited, "Retry-After", "3600")},
			code: abi.CodeLimitExceeded, inErr: "the server asks to wait 1h0m0s, more than max_retry_wait 1m0s"},
		{name: "400 is not retried", kind: KindOpenAICompatible, replies: []reply{{status: 400, body: `{"error":{"message":"Unknown model m1","type":"invalid_request_error"}}`}},
			code: abi.CodeInvalidArgument, inErr: "HTTP 400 Bad Request: Unknown model m1"},
		{name: "401 is not retried", kind: KindAnthropic, replies: []reply{{status: 401, body: `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`}},
			code: abi.CodeAuthenticationInvalid, inErr: "check the key in $TEST_KEY"},
		{name: "one attempt configured", kind: KindOpenAIResponses, attempts: 1, replies: []reply{down},
			code: abi.CodeResourceUnavailable, inErr: "HTTP 503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replies := tc.replies
			if tc.code == "" {
				replies = append(replies, reply{file: ok[tc.kind]})
			}
			f := newFake(t, testKey, replies...)
			sl := &sleeps{}
			b := backendFor(tc.kind, f.url())
			b.MaxAttempts = tc.attempts
			p, err := Open(b, testOptions(sl, map[string]string{"TEST_KEY": testKey}))
			if err != nil {
				t.Fatal(err)
			}
			s, err := p.Stream(context.Background(), Request{Messages: userAsk()})
			if tc.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c := collect(t, s); c.err != nil || c.msg.TextContent() == "" {
					t.Fatalf("after retries: %v %+v", c.err, c.msg.Content)
				}
			} else {
				if err == nil {
					t.Fatal("no error")
				}
				if abi.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.inErr) {
					t.Fatalf("err %v (code %s), want %s containing %q", err, abi.CodeOf(err), tc.code, tc.inErr)
				}
				if errors.Is(err, ErrContextOverflow) {
					t.Fatalf("%v is not an overflow", err)
				}
			}
			if got := sl.got(); !slices.Equal(got, tc.sleeps) {
				t.Errorf("sleeps %v, want %v", got, tc.sleeps)
			}
			if n, want := len(f.received()), len(replies); n != want {
				t.Errorf("%d requests, want %d", n, want)
			}
		})
	}
}

func TestRetryConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	_ = l.Close()
	sl := &sleeps{}
	p, err := Open(Backend{Name: "gone", Kind: KindOpenAICompatible, BaseURL: url + "/v1", Model: "m"}, testOptions(sl, nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Stream(context.Background(), Request{Messages: userAsk()})
	if abi.CodeOf(err) != abi.CodeResourceUnavailable || !strings.Contains(err.Error(), "no response after 4 attempts") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err %v", err)
	}
	if got := sl.got(); len(got) != 3 {
		t.Fatalf("sleeps %v", got)
	}
}

// cutOffset is the offset just after the n-th event of a recorded stream.
func cutOffset(t *testing.T, file string, n int) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for range n {
		i := bytes.Index(data[off:], []byte("\n\n"))
		if i < 0 {
			t.Fatalf("%s has fewer than %d events", file, n)
		}
		off += i + 2
	}
	return off
}

func TestDroppedConnection(t *testing.T) {
	cases := []struct {
		name, kind, file string
		events           int // events sent before the cut
		text             string
		clean            bool // closed cleanly rather than cut
	}{
		{"chat cut", KindOpenAICompatible, "chat-plain.sse", 4, "Hello from a", false},
		{"chat closed early", KindOpenAICompatible, "chat-plain.sse", 4, "Hello from a", true},
		{"anthropic cut", KindAnthropic, "anthropic-plain.sse", 5, "Hello from a", false},
		{"anthropic closed early", KindAnthropic, "anthropic-plain.sse", 5, "Hello from a", true},
		{"responses cut", KindOpenAIResponses, "responses-text.sse", 4, "The shell is in /home/agent.", false},
		{"responses closed early", KindOpenAIResponses, "responses-text.sse", 4, "The shell is in /home/agent.", true},
		{"tool call cut mid-arguments", KindAnthropic, "anthropic-tools.sse", 8, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := reply{file: tc.file, cutAfter: cutOffset(t, tc.file, tc.events)}
			if tc.clean {
				r.cutAfter, r.closeAfter = 0, r.cutAfter
			}
			f := newFake(t, testKey, r)
			p := openFake(t, tc.kind, f, nil)
			s, err := p.Stream(context.Background(), Request{Messages: userAsk()})
			if err != nil {
				t.Fatal(err)
			}
			c := collect(t, s)
			if c.msg.StopReason != StopError || abi.CodeOf(c.err) != abi.CodeConnectionLost {
				t.Fatalf("stop %q, err %v (code %s)", c.msg.StopReason, c.err, abi.CodeOf(c.err))
			}
			if c.msg.TextContent() != tc.text || c.msg.ErrorMessage == "" {
				t.Fatalf("partial text %q (want %q), errorMessage %q", c.msg.TextContent(), tc.text, c.msg.ErrorMessage)
			}
			if tc.text == "" {
				// A call cut mid-arguments is kept, its arguments {} and the error said.
				calls := c.msg.ToolCalls()
				var end *ToolCall
				for _, ev := range c.events {
					if ev.Type == EventToolCallEnd {
						end = ev.ToolCall
					}
				}
				if len(calls) != 1 || string(calls[0].Arguments) != "{}" || end == nil || !strings.Contains(end.ArgumentsError, "not a JSON object") {
					t.Fatalf("cut call: %+v, end %+v", calls, end)
				}
			}
			if errors.Is(c.err, context.Canceled) {
				t.Fatal("a dropped connection is not a cancellation")
			}
		})
	}
}

// TestToolArgumentsCap: arguments past Request.MaxToolArguments are neither kept nor relayed,
// over each API's recorded stream: the call ends with {}, the marker (size, limit, a prefix)
// and a refusal naming the size, and the reply is otherwise whole.
func TestToolArgumentsCap(t *testing.T) {
	const limit = 16
	for _, tc := range []struct{ kind, file string }{
		{KindOpenAICompatible, "chat-tools.sse"},
		{KindAnthropic, "anthropic-tools.sse"},
		{KindOpenAIResponses, "responses-reasoning-tools.sse"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			stream := func(max int) collected {
				f := newFake(t, testKey, reply{file: tc.file})
				s, err := openFake(t, tc.kind, f, nil).Stream(context.Background(), Request{Messages: userAsk(), Tools: []Tool{sessionExec}, MaxToolArguments: max})
				if err != nil {
					t.Fatal(err)
				}
				return collect(t, s)
			}
			first := stream(0)
			whole := first.msg.ToolCalls()[0]
			c := stream(limit)
			if c.err != nil || c.msg.StopReason != StopToolUse {
				t.Fatalf("stop %q, err %v", c.msg.StopReason, c.err)
			}
			call := c.msg.ToolCalls()[0]
			cut := call.ArgumentsTruncated
			if string(call.Arguments) != "{}" || call.ID != whole.ID || cut == nil {
				t.Fatalf("call %+v (whole %s)", call, whole.Arguments)
			}
			if n := len(first.deltas(EventToolCallDelta)); cut.Bytes != n || cut.Limit != limit || cut.Prefix == "" || !strings.HasPrefix(strings.Join(strings.Fields(string(whole.Arguments)), ""), strings.Join(strings.Fields(cut.Prefix), "")) {
				t.Fatalf("marker %+v, arguments %d bytes %s", cut, n, whole.Arguments)
			}
			if d := c.deltas(EventToolCallDelta); len(d) > limit {
				t.Errorf("relayed %d bytes of arguments: %q", len(d), d)
			}
			var end *ToolCall
			for _, ev := range c.events {
				if ev.Type == EventToolCallEnd {
					end = ev.ToolCall
				}
			}
			if end == nil || string(end.Arguments) != "{}" || !strings.Contains(end.ArgumentsError, fmt.Sprintf("%d bytes", cut.Bytes)) {
				t.Fatalf("end %+v", end)
			}
			// The marker goes to the transcript with the block and comes back from it.
			b, err := json.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			var back Message
			if err := json.Unmarshal(b, &back); err != nil || *back.ToolCalls()[0].ArgumentsTruncated != *cut {
				t.Fatalf("round trip %s: %v", b, err)
			}
		})
	}
}

func TestContextOverflow(t *testing.T) {
	llama, err := os.ReadFile(filepath.Join("testdata", "llamacpp-overflow.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, kind string
		r          reply
		overflow   bool
	}{
		{"openai chat", KindOpenAICompatible, reply{status: 400, body: `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}, true},
		{"openai responses", KindOpenAIResponses, reply{status: 400, body: `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`}, true},
		{"anthropic prompt too long", KindAnthropic, reply{status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`}, true},
		{"anthropic request too large", KindAnthropic, reply{status: 413, body: `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`}, true},
		{"llama.cpp (recorded)", KindOpenAICompatible, reply{status: 400, body: string(llama)}, true},
		{"llama.cpp on the anthropic route", KindAnthropic, reply{status: 400, body: string(llama)}, true},
		{"gemini", KindOpenAICompatible, reply{status: 400, body: `[{"error":{"code":400,"message":"The input token count (1196265) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]`}, true},
		{"qwen dashscope", KindOpenAICompatible, reply{status: 400, body: `{"error":{"message":"<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, 129024]","type":"invalid_request_error","param":null,"code":"invalid_parameter_error"}}`}, true},
		{"llama.cpp in the stream", KindOpenAICompatible, reply{body: "data: {\"error\":{\"code\":400,\"message\":\"request (9009 tokens) exceeds the available context size (8192 tokens), try increasing it\",\"type\":\"exceed_context_size_error\"}}\n\n"}, true},
		{"anthropic error event", KindAnthropic, reply{body: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 201000 tokens > 200000 maximum\"}}\n\n"}, true},
		{"responses failed", KindOpenAIResponses, reply{body: "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_9\",\"status\":\"failed\",\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window of this model.\"},\"output\":[]}}\n\n"}, true},
		{"rate limit about tokens is not overflow", KindOpenAICompatible, reply{status: 400, body: `{"error":{"message":"Rate limit reached: too many tokens per min (TPM)","type":"tokens","code":"rate_limit_exceeded"}}`}, false},
		{"other 400 is not overflow", KindOpenAICompatible, reply{status: 400, body: `{"error":{"message":"Invalid schema for function 'session_exec'","type":"invalid_request_error"}}`}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, testKey, tc.r)
			p := openFake(t, tc.kind, f, nil)
			s, err := p.Stream(context.Background(), Request{Messages: userAsk()})
			if err == nil {
				c := collect(t, s)
				if c.msg.StopReason != StopError {
					t.Fatalf("stop %q", c.msg.StopReason)
				}
				err = c.err
			}
			if got := errors.Is(err, ErrContextOverflow); got != tc.overflow {
				t.Fatalf("overflow %v, want %v: %v", got, tc.overflow, err)
			}
			if tc.overflow && abi.CodeOf(err) != abi.CodeInvalidArgument {
				t.Fatalf("code %s: %v", abi.CodeOf(err), err)
			}
			if n := len(f.received()); n != 1 {
				t.Fatalf("%d requests: an overflow or a 400 is never retried", n)
			}
		})
	}
}

func TestCancelMidStream(t *testing.T) {
	cases := []struct {
		name, kind, file string
		events           int
		viaClose         bool
	}{
		{"chat", KindOpenAICompatible, "chat-plain.sse", 3, false},
		{"anthropic", KindAnthropic, "anthropic-plain.sse", 4, false},
		{"responses", KindOpenAIResponses, "responses-text.sse", 4, false},
		{"chat closed", KindOpenAICompatible, "chat-plain.sse", 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			// The server sends the first events, then keeps the stream open until the client
			// goes away.
			f := newFake(t, testKey, reply{body: string(data[:cutOffset(t, tc.file, tc.events)]), hold: true})
			p := openFake(t, tc.kind, f, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := p.Stream(ctx, Request{Messages: userAsk()})
			if err != nil {
				t.Fatal(err)
			}
			var evs []Event
			for s.Next() {
				ev := s.Event()
				evs = append(evs, ev)
				if ev.Type == EventTextDelta {
					if tc.viaClose {
						_ = s.Close()
					} else {
						cancel()
					}
				}
			}
			msg := s.Message()
			if msg.StopReason != StopAborted || !errors.Is(s.Err(), context.Canceled) {
				t.Fatalf("stop %q, err %v", msg.StopReason, s.Err())
			}
			if msg.TextContent() == "" || evs[len(evs)-1].StopReason != StopAborted {
				t.Fatalf("partial reply lost: %+v", msg.Content)
			}
			// The server saw the connection close (the hang guard only bounds a failure).
			select {
			case <-f.gone:
			case <-time.After(testkit.Patience()):
				t.Fatal("the server never saw the client go away")
			}
		})
	}
}

// TestReplyCap: a reply whose text and thinking pass Request.MaxReply ends there in error
// (LIMIT_EXCEEDED, ReplyTooLongError), what came before kept and nothing past it relayed, over
// each API's recorded stream; a server that goes on streaming (here: holding the stream open
// after the cap) sees the connection closed, not waited on.
func TestReplyCap(t *testing.T) {
	const limit = 8
	for _, tc := range []struct {
		kind, file string
		events     int
	}{
		{KindOpenAICompatible, "chat-plain.sse", 6},
		{KindAnthropic, "anthropic-thinking-tools.sse", 8},
		{KindOpenAIResponses, "responses-reasoning-tools.sse", 10},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			f := newFake(t, testKey, reply{body: string(data[:cutOffset(t, tc.file, tc.events)]), hold: true})
			s, err := openFake(t, tc.kind, f, nil).Stream(context.Background(), Request{Messages: userAsk(), Tools: []Tool{sessionExec}, MaxReply: limit})
			if err != nil {
				t.Fatal(err)
			}
			c := collect(t, s)
			var tooLong *ReplyTooLongError
			if c.msg.StopReason != StopError || !errors.As(c.err, &tooLong) || tooLong.Limit != limit || abi.CodeOf(c.err) != abi.CodeLimitExceeded {
				t.Fatalf("stop %q, err %v", c.msg.StopReason, c.err)
			}
			relayed := len(c.deltas(EventTextDelta)) + len(c.deltas(EventThinkingDelta))
			if relayed > limit { // none when the first delta passes the limit
				t.Fatalf("relayed %d bytes of text and thinking, limit %d", relayed, limit)
			}
			kept := 0
			for _, b := range c.msg.Content {
				kept += len(b.Text) + len(b.Thinking)
			}
			if kept != relayed {
				t.Fatalf("kept %d bytes, relayed %d", kept, relayed)
			}
			select {
			case <-f.gone:
			case <-time.After(testkit.Patience()):
				t.Fatal("the server never saw the connection closed")
			}
		})
	}
}
