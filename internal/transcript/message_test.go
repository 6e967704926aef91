package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseMessageInfo(t *testing.T) {
	t.Parallel()
	intp := func(n int) *int { return &n }
	tests := []struct {
		name string
		msg  string
		want MessageInfo
		err  bool
	}{
		{name: "absent", msg: ``},
		{name: "null", msg: `null`},
		{name: "not an object", msg: `"text"`},
		{name: "assistant",
			msg: `{"role":"assistant","content":[{"type":"thinking","thinking":"hm","thinkingSignature":"s"},{"type":"text","text":"x"},` +
				`{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}},{"name":"read","arguments":{},"type":"toolCall","id":"c2"}],` +
				`"api":"a","provider":"p","model":"m","usage":{"input":1},"stopReason":"toolUse","timestamp":5}`,
			want: MessageInfo{Role: "assistant", Provider: "p", Model: "m", StopReason: "toolUse",
				ToolCalls: []ToolCallRef{{"c1", "bash"}, {"c2", "read"}},
				Content: json.RawMessage(`[{"type":"thinking","thinking":"hm","thinkingSignature":"s"},{"type":"text","text":"x"},` +
					`{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}},{"name":"read","arguments":{},"type":"toolCall","id":"c2"}]`),
				Usage: json.RawMessage(`{"input":1}`)}},
		{name: "aborted error",
			msg:  `{"role":"assistant","content":[],"stopReason":"aborted","errorMessage":"Request \"aborted\""}`,
			want: MessageInfo{Role: "assistant", StopReason: "aborted", ErrorMessage: `Request "aborted"`, Content: json.RawMessage(`[]`)}},
		{name: "tool result",
			msg:  `{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"out"}],"details":{"x":1},"isError":true,"timestamp":1}`,
			want: MessageInfo{Role: "toolResult", ToolCallID: "c1", ToolName: "bash", IsError: true, Content: json.RawMessage(`[{"type":"text","text":"out"}]`)}},
		{name: "bash",
			msg:  `{"role":"bashExecution","command":"make\ntest","output":"ok\n","exitCode":2,"cancelled":false}`,
			want: MessageInfo{Role: "bashExecution", Command: "make\ntest", ExitCode: intp(2), Output: json.RawMessage(`"ok\n"`)}},
		{name: "custom string content",
			msg:  ` { "role" : "custom" , "customType" : "x.y" , "content" : "hi" , "display" : true } `,
			want: MessageInfo{Role: "custom", CustomType: "x.y", Content: json.RawMessage(`"hi"`)}},
		{name: "summary role",
			msg:  `{"role":"compactionSummary","summary":"s\u00e9"}`,
			want: MessageInfo{Role: "compactionSummary", Summary: json.RawMessage(`"s\u00e9"`)}},
		// JSON.parse semantics: exact keys, the last duplicate wins, wrong types read as zero.
		{name: "exact keys", msg: `{"Role":"user","ROLE":"x","toolcallid":"c","IsError":true}`, want: MessageInfo{}},
		{name: "duplicates",
			msg:  `{"role":"user","role":"assistant","content":[{"type":"toolCall","id":"a"}],"content":"s","stopReason":"stop","stopReason":7}`,
			want: MessageInfo{Role: "assistant", Content: json.RawMessage(`"s"`)}},
		{name: "wrong types",
			msg:  `{"role":1,"isError":"true","exitCode":1.5,"content":{"type":"toolCall"},"toolName":null,"command":["ls"]}`,
			want: MessageInfo{Content: json.RawMessage(`{"type":"toolCall"}`)}},
		{name: "exit codes", msg: `{"exitCode":-3}`, want: MessageInfo{ExitCode: intp(-3)}},
		{name: "exit code not an int", msg: `{"exitCode":1e2}`, want: MessageInfo{}},
		{name: "exit code null", msg: `{"exitCode":1,"exitCode":null}`, want: MessageInfo{}},
		{name: "blocks of the wrong shape",
			msg: `{"content":[null,"s",[{"type":"toolCall"}],{"type":"toolCall","id":5,"name":"n"},{"type":"ToolCall","id":"x"},{"Type":"toolCall"}]}`,
			want: MessageInfo{ToolCalls: []ToolCallRef{{"", "n"}},
				Content: json.RawMessage(`[null,"s",[{"type":"toolCall"}],{"type":"toolCall","id":5,"name":"n"},{"type":"ToolCall","id":"x"},{"Type":"toolCall"}]`)}},
		{name: "escaped keys and values", msg: `{"r\u006fle":"us\u0065r","toolName":"\ud83d\ude00"}`, want: MessageInfo{Role: "user", ToolName: "😀"}},
		{name: "torn", msg: `{"role":"user","content":"x`, err: true},
		{name: "trailing garbage", msg: `{"role":"user"} x`, err: true},
		{name: "bad number", msg: `{"exitCode":01}`, err: true},
		{name: "bad scalar", msg: `nul`, err: true},
		{name: "bad block", msg: `{"content":[{"type":"toolCall",}]}`, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMessageInfo(json.RawMessage(tc.msg))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if tc.err {
				return
			}
			// the trusted parse of validated messages agrees
			tr, err := parseMessageInfo(json.RawMessage(tc.msg), true)
			if err != nil || !reflect.DeepEqual(tr, got) {
				t.Errorf("trusted parse %+v (%v)", tr, err)
			}
		})
	}
}

func TestFirstText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("abcdefgh", 40) // 320 bytes
	tests := []struct {
		name    string
		content string
		max     int
		want    string
	}{
		{"string", `"hello"`, 0, "hello"},
		{"blank string", `" \n\t "`, 0, ""},
		{"blocks", `[{"type":"thinking","thinking":"no"},{"type":"text","text":"  "},{"type":"image","data":"QQ=="},{"text":"yes","type":"text"},{"type":"text","text":"later"}]`, 0, "yes"},
		{"no text", `[{"type":"toolCall","id":"c","name":"n","arguments":{"text":"x"}}]`, 0, ""},
		{"exact keys", `[{"Type":"text","text":"a"},{"type":"text","Text":"b"},{"type":"text","text":"c","text":"  "},{"type":"text","text":"d"}]`, 0, "d"},
		{"wrong types", `[{"type":"text","text":5},"text",null,{"type":"text","text":"ok"}]`, 0, "ok"},
		{"other values", `{"type":"text","text":"x"}`, 0, ""},
		{"null", `null`, 0, ""},
		{"absent", ``, 0, ""},
		{"cut", `"` + long + `"`, 10, "abcdefghab"},
		{"cut exact length", `"` + long + `"`, len(long), long},
		{"cut beyond", `"` + long + `"`, 1000, long},
		{"cut inside a character", `"` + "ab\u00e9cd" + `"`, 3, "ab\xc3"},
		{"cut after escapes", `"a\u00e9\n\"` + long + `"`, 6, "aé\n\"a"},
		{"cut at a surrogate pair", `"abc\ud83d\ude00def"`, 5, "abc\xf0\x9f"},
		{"lone surrogate", `"abc\ud83dxyz"`, 6, "abc\uFFFD"},
		{"character across the cut", `"00\u1000"`, 3, "00\xe1"},
		{"blank character across the cut", `"\u00a0"`, 1, ""},
		{"invalid UTF-8 at the cut", "\"ab\xffcd\"", 4, "ab\uFFFD"[:4]},
		{"blank head, text later", `"` + strings.Repeat(" ", 50) + `x"`, 10, strings.Repeat(" ", 10)},
		{"blank head and tail", `"` + strings.Repeat(" \\n", 50) + `"`, 10, ""},
		{"blank head block then text", `[{"type":"text","text":"` + strings.Repeat(" ", 20) + `"},{"type":"text","text":"` + long + `"}]`, 8, "abcdefgh"},
		{"invalid after the text", `[{"type":"text","text":"first"},{"type":`, 0, "first"},
		{"invalid before the text", `[{"type":"text","text":"a\qb"},{"type":"text","text":"c"}]`, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FirstText(json.RawMessage(tc.content), tc.max); got != tc.want {
				t.Errorf("FirstText(%.50q, %d) = %q, want %q", tc.content, tc.max, got, tc.want)
			}
		})
	}
}

func TestBlocks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		content string
		want    []Block
		err     bool
	}{
		{`"plain"`, []Block{{Type: "text", Text: "plain"}}, false},
		{`""`, []Block{{Type: "text"}}, false},
		{`null`, nil, false},
		{`7`, nil, false},
		{``, nil, false},
		{`[{"type":"text","text":"a\nb"},{"type":"thinking","thinking":"t","thinkingSignature":"s","redacted":true},` +
			`{"type":"toolCall","id":"c","name":"n","arguments":{"k":[1,2]}},{"type":"image","mimeType":"image/png","data":"QUJD"},"x",null,{}]`,
			[]Block{{Type: "text", Text: "a\nb"}, {Type: "thinking", Thinking: "t", Redacted: true},
				{Type: "toolCall", ID: "c", Name: "n", Arguments: json.RawMessage(`{"k":[1,2]}`)},
				{Type: "image", MimeType: "image/png", Data: json.RawMessage(`"QUJD"`)}, {}}, false},
		{`[{"type":"text","text":1,"redacted":"yes","Text":"x","type":"text"}]`, []Block{{Type: "text"}}, false},
		{`[{"type":"text","text":"a"},]`, nil, true},
		{`"torn`, nil, true},
		{`[1] 2`, nil, true},
	}
	for _, tc := range tests {
		got, err := Blocks(json.RawMessage(tc.content))
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Blocks(%.60q) = %+v, %v; want %+v (error %v)", tc.content, got, err, tc.want, tc.err)
		}
	}
}

func TestParseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want Usage
		err  bool
	}{
		{`{"input":3,"output":191,"cacheRead":0,"cacheWrite":1684,"totalTokens":1878,"cost":{"input":0.1,"total":0.009189}}`,
			Usage{Input: "3", Output: "191", CacheRead: "0", CacheWrite: "1684", TotalTokens: "1878", CostTotal: "0.009189"}, false},
		{`{"input":"3","output":null,"cacheRead":-1.5e3,"cost":5}`, Usage{CacheRead: "-1.5e3"}, false},
		{`{"input":1,"input":{},"cost":{"total":1},"cost":{}}`, Usage{}, false},
		{`{"Input":1,"cost":{"Total":2}}`, Usage{}, false},
		{`null`, Usage{}, false},
		{``, Usage{}, false},
		{`[1]`, Usage{}, false},
		{`{"input":1`, Usage{}, true},
		{`{"input":+1}`, Usage{}, true},
	}
	for _, tc := range tests {
		got, err := ParseUsage(json.RawMessage(tc.raw))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseUsage(%q) = %+v, %v; want %+v (error %v)", tc.raw, got, err, tc.want, tc.err)
		}
	}
}

func TestEntryMessageInfo(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "s.jsonl")
	content := `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n" +
		`{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"bash","arguments":{}}],"stopReason":"toolUse"}}` + "\n" +
		`{"type":"model_change","id":"a2","parentId":"a1","timestamp":"2026-01-01T00:00:00.000Z","provider":"p","modelId":"m"}` + "\n"
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, p)
	light := f.Entries[0]
	if _, err := light.MessageInfo(); err == nil {
		t.Fatal("MessageInfo of a light entry succeeded")
	}
	full := try(f.Full(light)).ok(t)
	m := try(full.MessageInfo()).ok(t)
	if m.Role != "assistant" || m.StopReason != "toolUse" || !reflect.DeepEqual(m.ToolCalls, []ToolCallRef{{"c", "bash"}}) {
		t.Errorf("got %+v", m)
	}
	if m := try(f.Entries[1].MessageInfo()).ok(t); !reflect.DeepEqual(m, MessageInfo{}) {
		t.Errorf("model_change: %+v", m)
	}
}

// TestFullEntries: in the caller's order (not file order), in batches of
// any size, the same entries as Full; a read error ends the sequence.
func TestFullEntries(t *testing.T) {
	t.Parallel()
	p := piSample(t, "getspecstory-branching.jsonl")
	f := openFile(t, p)
	order := make([]*Entry, 0, 2*len(f.Entries))
	for i := len(f.Entries) - 1; i >= 0; i -= 2 {
		order = append(order, f.Entries[i])
	}
	order = append(order, f.Entries...)
	for _, batch := range []int{1, 300, 1 << 20} {
		i := 0
		for got, err := range f.fullEntries(order, batch) {
			if err != nil {
				t.Fatal(err)
			}
			want := try(f.Full(order[i])).ok(t)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("batch %d, entry %d: got %+v, want %+v", batch, i, got, want)
			}
			i++
		}
		if i != len(order) {
			t.Fatalf("batch %d: %d entries, want %d", batch, i, len(order))
		}
	}
	// Stopping early is fine.
	n := 0
	for _, err := range f.FullEntries(order) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	closed := openFile(t, p)
	_ = closed.Close()
	var last error
	for _, err := range closed.FullEntries(closed.Entries) {
		last = err
	}
	if last == nil {
		t.Fatal("FullEntries of a closed file reported no error")
	}
}

// jsonTrim trims JSON white space (not \f or \v).
func jsonTrim(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// exactDecode is the exact-key reference: encoding/json into a map (the
// last duplicate wins), then each field read only when of its JSON type.
func exactDecode(raw []byte) map[string]json.RawMessage {
	raw = jsonTrim(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	return m
}

func exactString(m map[string]json.RawMessage, k string) string {
	var s string
	if raw := m[k]; len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

func exactArray(raw []byte) []json.RawMessage {
	var a []json.RawMessage
	if len(raw) > 0 && raw[0] == '[' && json.Unmarshal(raw, &a) == nil {
		return a
	}
	return nil
}

func refMessageInfo(msg []byte) MessageInfo {
	m := exactDecode(msg)
	if m == nil {
		return MessageInfo{}
	}
	info := MessageInfo{
		Role: exactString(m, "role"), Provider: exactString(m, "provider"), Model: exactString(m, "model"),
		StopReason: exactString(m, "stopReason"), ErrorMessage: exactString(m, "errorMessage"),
		ToolCallID: exactString(m, "toolCallId"), ToolName: exactString(m, "toolName"),
		CustomType: exactString(m, "customType"), Command: exactString(m, "command"),
		IsError: string(m["isError"]) == "true",
		Content: m["content"], Usage: m["usage"], Output: m["output"], Summary: m["summary"],
	}
	var n int
	if raw := m["exitCode"]; len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') && json.Unmarshal(raw, &n) == nil {
		info.ExitCode = &n
	}
	for _, el := range exactArray(m["content"]) {
		if b := exactDecode(el); b != nil && exactString(b, "type") == "toolCall" {
			info.ToolCalls = append(info.ToolCalls, ToolCallRef{ID: exactString(b, "id"), Name: exactString(b, "name")})
		}
	}
	return info
}

func refFirstText(content []byte, maxBytes int) string {
	cut := func(s string) string {
		if strings.TrimSpace(s) == "" {
			return ""
		}
		if maxBytes > 0 && len(s) > maxBytes {
			return s[:maxBytes]
		}
		return s
	}
	var s string
	if c := jsonTrim(content); len(c) > 0 && c[0] == '"' && json.Unmarshal(c, &s) == nil {
		return cut(s)
	}
	for _, el := range exactArray(jsonTrim(content)) {
		if b := exactDecode(el); b != nil && exactString(b, "type") == "text" {
			if t := cut(exactString(b, "text")); t != "" {
				return t
			}
		}
	}
	return ""
}

func refBlocks(content []byte) []Block {
	var s string
	if c := jsonTrim(content); len(c) > 0 && c[0] == '"' && json.Unmarshal(c, &s) == nil {
		return []Block{{Type: "text", Text: s}}
	}
	var out []Block
	for _, el := range exactArray(jsonTrim(content)) {
		b := exactDecode(el)
		if b == nil {
			continue
		}
		out = append(out, Block{
			Type: exactString(b, "type"), Text: exactString(b, "text"), Thinking: exactString(b, "thinking"),
			Redacted: string(b["redacted"]) == "true", ID: exactString(b, "id"), Name: exactString(b, "name"),
			Arguments: b["arguments"], MimeType: exactString(b, "mimeType"), Data: b["data"],
		})
	}
	return out
}

// tooDeep reports JSON nested beyond what the scanner accepts (encoding/json
// goes deeper).
func tooDeep(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxScanDepth-4 {
				return true
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// FuzzParseMessageInfo checks ParseMessageInfo, FirstText, Blocks and
// ParseUsage against the exact-key decode by encoding/json: they accept
// exactly valid JSON, and read the same values; the trusted parse agrees on
// valid input and does not panic on any.
func FuzzParseMessageInfo(f *testing.F) {
	f.Add([]byte(`{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"toolCall","id":"c","name":"n","arguments":{}}],"usage":{"input":1,"cost":{"total":0.5}},"stopReason":"toolUse"}`), 3)
	f.Add([]byte(`{"role":"toolResult","toolCallId":"c","toolName":"bash","content":[{"type":"text","text":"  \u00e9\ud83d\ude00x"}],"isError":true}`), 4)
	f.Add([]byte(`{"role":"bashExecution","command":"ls","output":"x","exitCode":-1,"role":"user","content":"\ud800 text"}`), 2)
	f.Add([]byte(`{"content":[{"type":"text","text":"a\xffb","Text":"x"},null,{"type":"thinking","redacted":true}],"usage":[]}`), 1)
	f.Fuzz(func(t *testing.T, msg []byte, maxBytes int) {
		maxBytes %= 64
		_, _ = parseMessageInfo(msg, true) // must not panic
		got, err := ParseMessageInfo(msg)
		blank := len(jsonTrim(msg)) == 0
		if valid := json.Valid(msg); (err == nil) != (valid || blank) {
			if err != nil && tooDeep(msg) {
				return
			}
			t.Fatalf("ParseMessageInfo(%q) err=%v, valid JSON %v", msg, err, valid)
		}
		if err != nil {
			_ = FirstText(msg, maxBytes)
			_, _ = Blocks(msg)
			_, _ = ParseUsage(msg)
			return
		}
		if want := refMessageInfo(msg); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", msg, got, want)
		}
		if tr, err := parseMessageInfo(msg, true); err != nil || !reflect.DeepEqual(tr, got) {
			t.Fatalf("%q: trusted parse %+v (%v), strict %+v", msg, tr, err, got)
		}
		// The message itself as a content value, and its content.
		for _, c := range [][]byte{msg, got.Content} {
			if len(c) == 0 {
				continue
			}
			if ft, want := FirstText(c, maxBytes), refFirstText(c, maxBytes); ft != want {
				t.Fatalf("FirstText(%q, %d) = %q, want %q", c, maxBytes, ft, want)
			}
			if bs, err := Blocks(c); err != nil || !reflect.DeepEqual(bs, refBlocks(c)) {
				t.Fatalf("Blocks(%q) = %+v (%v), want %+v", c, bs, err, refBlocks(c))
			}
		}
		for _, u := range [][]byte{msg, got.Usage} {
			if len(u) == 0 {
				continue
			}
			pu, err := ParseUsage(u)
			if err != nil {
				t.Fatalf("ParseUsage(%q): %v", u, err)
			}
			m := exactDecode(u)
			num := func(raw json.RawMessage) json.Number {
				if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
					return json.Number(raw)
				}
				return ""
			}
			want := Usage{Input: num(m["input"]), Output: num(m["output"]), CacheRead: num(m["cacheRead"]),
				CacheWrite: num(m["cacheWrite"]), TotalTokens: num(m["totalTokens"]), CostTotal: num(exactDecode(m["cost"])["total"])}
			if pu != want {
				t.Fatalf("ParseUsage(%q) = %+v, want %+v", u, pu, want)
			}
		}
	})
}

// sampleMessages returns the messages of the large real session.
func sampleMessages(tb testing.TB) []json.RawMessage {
	tb.Helper()
	src := try(os.Open(piSample(tb, largeV1))).ok(tb)
	defer func() { _ = src.Close() }()
	f := try(Read(src)).ok(tb)
	var out []json.RawMessage
	for _, e := range f.Entries {
		if e.Type == "message" {
			out = append(out, e.Message)
		}
	}
	return out
}

// TestSampleMessages: every message of the real session reads as the
// exact-key decode reads it.
func TestSampleMessages(t *testing.T) {
	t.Parallel()
	for i, m := range sampleMessages(t) {
		got := try(ParseMessageInfo(m)).ok(t)
		if want := refMessageInfo(m); !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d: got %+v, want %+v", i, got, want)
		}
		if ft, want := FirstText(got.Content, 576), refFirstText(got.Content, 576); ft != want {
			t.Fatalf("message %d: FirstText %q, want %q", i, ft, want)
		}
		if bs := try(Blocks(got.Content)).ok(t); !reflect.DeepEqual(bs, refBlocks(got.Content)) {
			t.Fatalf("message %d: Blocks differ", i)
		}
	}
}

// BenchmarkMessageInfo compares reading the bookkeeping of the real
// session's messages (role, stop reason, tool calls, usage) with the
// scanner and with encoding/json, as `chat show` did before.
func BenchmarkMessageInfo(b *testing.B) {
	msgs := sampleMessages(b)
	size := 0
	for _, m := range msgs {
		size += len(m)
	}
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				info, err := ParseMessageInfo(m)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ParseUsage(info.Usage); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("scanner-trusted", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				info, err := parseMessageInfo(m, true)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ParseUsage(info.Usage); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		type block struct {
			Type, Text, Thinking, ID, Name string
			Arguments                      json.RawMessage
		}
		var m struct {
			Role, StopReason, ErrorMessage, ToolName string
			IsError                                  bool
			Content                                  json.RawMessage
			Usage                                    *struct {
				Input, Output, CacheRead, CacheWrite, TotalTokens int64
				Cost                                              struct{ Total float64 }
			}
		}
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, raw := range msgs {
				m.Usage, m.Content = nil, nil
				if err := json.Unmarshal(raw, &m); err != nil {
					b.Fatal(err)
				}
				var bs []block
				if len(m.Content) > 0 && m.Content[0] == '[' {
					_ = json.Unmarshal(m.Content, &bs)
				}
			}
		}
	})
}

// BenchmarkTurns is Turns over a 16 MB transcript opened from disk.
func BenchmarkTurns(b *testing.B) {
	p := writeBig(b, 16<<20)
	f := openFile(b, p)
	b.ReportAllocs()
	for b.Loop() {
		turns, err := Turns(f, "")
		if err != nil || len(turns) == 0 {
			b.Fatal(len(turns), err)
		}
	}
}

func ExampleFirstText() {
	content := json.RawMessage(`[{"type":"thinking","thinking":"..."},{"type":"text","text":" "},{"type":"text","text":"Done: 3 files changed."}]`)
	fmt.Println(FirstText(content, 4))
	fmt.Println(FirstText(content, 0))
	// Output:
	// Done
	// Done: 3 files changed.
}
