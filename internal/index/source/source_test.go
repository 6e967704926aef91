package source

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/chatstore"
)

// testdata is the repository's transcript samples (testdata/transcripts/README.md and the
// README of each source's directory).
const testdata = "../../../testdata/transcripts"

// want is what a sample holds. Every figure was counted on the file with jq, not taken from
// this package's output; the rules the counts follow:
//   - roles: Claude Code: user lines with string content or a non-empty text block, and
//     distinct assistant message.id; Codex: response_item messages by payload.role; pi:
//     message entries by role, toolResult and bashExecution not being messages.
//   - turns: user prompts (Claude Code: not isMeta, nor the notices and local command output
//     it writes itself, such as "Update available!" and <local-command-stdout>; Codex: not the
//     environment or instructions Codex injects itself).
//   - ok/errs/pending: tool calls by status; orphans: results whose call is not in the file.
//   - usage: Claude Code the last snapshot per message.id+requestId, summed; pi the sum over
//     assistant messages; Codex the last token_count's total_token_usage (input less cached).
type want struct {
	source, file              string
	id, parent, project       string
	model, title              string
	subagent                  bool
	roles                     map[string]int
	turns                     int
	ok, errs, pending, orphan int
	children                  []string
	usage                     Usage
	skipped                   map[string]int
	// span is the first and last timestamp of the file (whole seconds), "" for none.
	span string
}

var samples = []want{
	{
		source: "claude-code", file: "claude-code/pai-hv/agent-af374ee.jsonl", span: "2025-12-17T01:46:45Z 2025-12-17T01:47:41Z",
		id: "agent-af374ee", parent: "7de1dd02-d3f9-49aa-8911-7d5b98666a03", subagent: true,
		project: "/home/jenkins/Personal_AI_Infrastructure", model: "claude-opus-4-5-20251101",
		roles: map[string]int{"user": 1, "assistant": 1}, turns: 1,
		usage: Usage{Input: 1528, Output: 3},
	},
	{
		source: "claude-code", file: "claude-code/pai-hv/d3d4e0f8-bcb2-4597-8d7e-3fbcb2d9402b.jsonl",
		id: "d3d4e0f8-bcb2-4597-8d7e-3fbcb2d9402b", title: "Observability Skill Setup and Dashboard Launch",
		roles: map[string]int{},
	},
	{
		source: "claude-code", file: "claude-code/pai-sa/eca51c57-7b92-423f-8ad6-52f996c9a8e1.jsonl", span: "2025-12-03T09:04:39Z 2025-12-03T10:36:11Z",
		id: "eca51c57-7b92-423f-8ad6-52f996c9a8e1", project: "/Users/pretor/Documents/PAI - TPOS",
		model: "claude-opus-4-5-20251101",
		roles: map[string]int{"user": 5, "assistant": 30}, turns: 3, ok: 26, errs: 3, orphan: 1,
		usage: Usage{Input: 214, Output: 8792, CacheRead: 2980341, CacheWrite: 315327},
	},
	{
		source: "claude-code", file: "claude-code/mclaude/b8d44276-1f04-4220-98c0-b410f7c58ff5.jsonl", span: "2026-01-17T03:39:23Z 2026-01-17T03:41:26Z",
		id: "b8d44276-1f04-4220-98c0-b410f7c58ff5", project: "/Users/[USER]", model: "claude-opus-4-5-20251101",
		roles: map[string]int{"user": 7, "assistant": 6}, turns: 4, ok: 1, pending: 1,
		usage:   Usage{Input: 50, Output: 21, CacheRead: 114702, CacheWrite: 7040},
		skipped: map[string]int{ReasonMalformed: 1},
	},
	{
		// Made by Claude Code 2.1.197 (testdata/transcripts/claude-code/README.md): an Agent call
		// whose subagent spawned subagents four deep.
		source: "claude-code", file: "claude-code/cc-2.1.197/77f1762e-c969-4294-b33e-f31b7a696ffb.jsonl", span: "2026-11-28T18:06:06Z 2026-11-28T18:07:07Z",
		id: "77f1762e-c969-4294-b33e-f31b7a696ffb", project: "/tmp/ccproj", model: "tiny",
		roles: map[string]int{"user": 1, "assistant": 2}, turns: 1, ok: 1, children: []string{"agent-a583790338c5b5bf5"},
		usage: Usage{Input: 3568, Output: 52, CacheRead: 3483},
	},
	{
		// Its first subagent: the lines name the top session; the spawning call is in
		// agent-a583790338c5b5bf5.meta.json (linked by the index, TestNestedSubagents).
		source: "claude-code", file: "claude-code/cc-2.1.197/77f1762e-c969-4294-b33e-f31b7a696ffb/subagents/agent-a583790338c5b5bf5.jsonl",
		span: "2026-11-28T18:06:11Z 2026-11-28T18:07:07Z", id: "agent-a583790338c5b5bf5", parent: "77f1762e-c969-4294-b33e-f31b7a696ffb",
		subagent: true, project: "/tmp/ccproj", model: "tiny",
		roles: map[string]int{"user": 1, "assistant": 2}, turns: 1, ok: 1,
		usage: Usage{Input: 2822, Output: 44, CacheRead: 2420},
	},
	{
		// Made by Codex 0.171.0 (testdata/transcripts/codex/README.md): three turns, each the
		// model's first action a call: exec_command, then two MCP calls (nexus's session_list,
		// and session_exec, which failed); token_usage_record and world_state records.
		source: "codex", file: "codex/cx-0.171.0/rollout-2026-11-28T18-16-10-01a2235f-2f82-7e31-b5ae-7378a54c9d7f.jsonl",
		span: "2026-11-28T18:16:10Z 2026-11-28T18:16:22Z", id: "01a2235f-2f82-7e31-b5ae-7378a54c9d7f", project: "/tmp/cxproj", model: "tiny",
		roles: map[string]int{"user": 4, "developer": 1, "assistant": 3}, turns: 3, ok: 2, errs: 1,
		usage: Usage{Input: 28487 - 24776, CacheRead: 24776, Output: 160},
	},
	{
		source: "codex", file: "codex/moonmind/rollout-2025-11-12T17-48-11-019a7ae6-1945-7c63-98f2-210adb922af9.jsonl", span: "2025-11-13T01:48:11Z 2025-11-13T06:23:20Z",
		id: "019a7ae6-1945-7c63-98f2-210adb922af9", project: "/mnt/d/ai/MoonMind", model: "gpt-5-codex",
		// 84 function_call and 13 custom_tool_call, each answered.
		roles: map[string]int{"user": 8, "assistant": 5}, turns: 6, ok: 97,
		usage: Usage{Input: 671406 - 537856, CacheRead: 537856, Output: 13743, Reasoning: 4928},
	},
	{
		source: "codex", file: "codex/tfw/rollout-2026-01-30T14-16-50-019c0f0c-9c5d-7081-99a9-f4829741831a.jsonl", span: "2026-01-30T13:16:50Z 2026-01-30T14:14:06Z",
		id: "019c0f0c-9c5d-7081-99a9-f4829741831a", project: "/home/edouard/test-framework", model: "gpt-5.2-codex",
		// 45 paired function calls and 14 completed web searches (no id, no output item).
		roles: map[string]int{"user": 41, "developer": 1, "assistant": 39}, turns: 39, ok: 59,
		usage: Usage{Input: 3639295 - 3472256, CacheRead: 3472256, Output: 40969, Reasoning: 10688},
	},
	{
		source: "codex", file: "codex/opk/rollout-2025-10-31T18-36-16-fa1ac8bf-348e-4b9a-a06d-767050fa1e10.jsonl", span: "2025-11-01T00:36:16Z 2025-11-01T00:36:16Z",
		id: "fa1ac8bf-348e-4b9a-a06d-767050fa1e10", project: "/home/randy/projects/python-3/OpenPrintKit",
		roles: map[string]int{"user": 1},
	},
	{
		source: "pi", file: "pi/pi-mono-large-session-v1.jsonl", span: "2025-11-20T23:33:01Z 2025-11-21T02:14:02Z",
		id: "d703a1a9-1b7b-4fb1-b512-c9738b1fe617", project: "/Users/badlogic/workspaces/pi-mono",
		model: "claude-sonnet-4-5",
		// 391 tool calls: 373 answered (19 of them errors), 18 never answered.
		roles: map[string]int{"user": 88, "assistant": 453}, turns: 88, ok: 354, errs: 19, pending: 18,
		usage: Usage{Input: 1049, Output: 83156, CacheRead: 43229469, CacheWrite: 4296232},
	},
	{
		source: "pi", file: "pi/getspecstory-fields.jsonl", span: "2026-07-09T10:00:00Z 2026-07-09T10:00:08Z",
		id: "fields-uuid", project: "/test/proj",
		// One toolCall and its result, and one bashExecution (exit code 0).
		roles: map[string]int{"user": 2, "assistant": 2, "branchSummary": 1, "compactionSummary": 1, "custom": 1},
		turns: 2, ok: 2,
		usage: Usage{Input: 300, Output: 70, CacheRead: 10, CacheWrite: 5},
	},
	{
		source: "openclaw", file: "openclaw/volvox/94272ff2-523b-45de-8f72-988b595dd872.jsonl", span: "2026-02-18T20:15:40Z 2026-02-18T20:27:37Z",
		id: "94272ff2-523b-45de-8f72-988b595dd872", project: "/home/bill",
		roles: map[string]int{"user": 6, "assistant": 35}, turns: 6, ok: 52,
		usage: Usage{Input: 388904, Output: 5776, CacheRead: 639552},
	},
	{
		source: "openclaw", file: "openclaw/volvox/da1e385f-f176-476c-afab-18ce18805741.jsonl", span: "2026-02-17T14:00:00Z 2026-02-17T14:04:44Z",
		id: "da1e385f-f176-476c-afab-18ce18805741", project: "/home/bill/.openclaw/workspace", model: "glm-5",
		title: "Cron: Morning Digest", // the label of its sessions.json entry
		roles: map[string]int{"user": 1, "assistant": 11}, turns: 1, ok: 41, errs: 1,
		usage: Usage{Input: 112262, Output: 3068, CacheRead: 239040},
	},
	{
		source: "openclaw", file: "openclaw/volvox/c2133e05-5254-42af-a26d-49828235021d.jsonl", span: "2026-02-18T20:05:54Z 2026-02-18T20:06:24Z",
		id:    "c2133e05-5254-42af-a26d-49828235021d", // no header: the file's name
		roles: map[string]int{"assistant": 2}, ok: 1,
		usage: Usage{Input: 158055, Output: 513, CacheRead: 24064},
	},
}

func TestSamples(t *testing.T) {
	for _, w := range samples {
		t.Run(w.file, func(t *testing.T) {
			src, ok := ByName(w.source)
			if !ok {
				t.Fatalf("no source %q", w.source)
			}
			path := filepath.Join(testdata, w.file)
			res, err := ParseFile(context.Background(), src, path, 0)
			if err != nil {
				t.Fatal(err)
			}
			s := res.Session
			if s.Source != w.source || s.ID != w.id || s.ParentSession != w.parent || s.IsSubagent != w.subagent ||
				s.Project != w.project || s.Title != w.title {
				t.Errorf("session = %+v", s)
			}
			if got := span(s); got != w.span {
				t.Errorf("created, updated = %q, want %q", got, w.span)
			}
			if w.model != "" && s.Model != w.model {
				t.Errorf("model = %q, want %q", s.Model, w.model)
			}
			if got := roles(res); !reflect.DeepEqual(got, w.roles) {
				t.Errorf("roles = %v, want %v", got, w.roles)
			}
			if got := lastTurn(res); got != w.turns {
				t.Errorf("turns = %d, want %d", got, w.turns)
			}
			var ok2, errs, pending, orphan int
			var children []string
			for _, tc := range res.ToolCalls {
				switch tc.Status {
				case StatusOK:
					ok2++
				case StatusError:
					errs++
				case StatusPending:
					pending++
				}
				if tc.Name == "" {
					orphan++
				}
				if tc.ChildSession != "" {
					children = append(children, tc.ChildSession)
				}
			}
			if ok2 != w.ok || errs != w.errs || pending != w.pending || orphan != w.orphan {
				t.Errorf("tool calls ok/error/pending/orphan = %d/%d/%d/%d, want %d/%d/%d/%d",
					ok2, errs, pending, orphan, w.ok, w.errs, w.pending, w.orphan)
			}
			if !reflect.DeepEqual(children, w.children) {
				t.Errorf("children = %v, want %v", children, w.children)
			}
			if res.Usage != w.usage {
				t.Errorf("usage = %+v, want %+v", res.Usage, w.usage)
			}
			if len(res.Skipped) != 0 || len(w.skipped) != 0 {
				if !reflect.DeepEqual(res.Skipped, w.skipped) {
					t.Errorf("skipped = %v, want %v", res.Skipped, w.skipped)
				}
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if res.Offset != info.Size() || res.Pending != 0 {
				t.Errorf("offset %d pending %d, want the whole file (%d)", res.Offset, res.Pending, info.Size())
			}
			for i, m := range res.Messages {
				if m.Seq != i || m.ID == "" {
					t.Fatalf("message %d: seq %d id %q", i, m.Seq, m.ID)
				}
			}
		})
	}
}

// TestSubagentLink: the Codex parent names its child's thread in a spawn_agent result, and the
// child names the parent in its session_meta.
// TestSubagentLink: a Codex parent whose spawn_agent output names the child thread, and the
// child whose session_meta names its parent, are linked both ways. The lines follow the shape
// of Codex Desktop 0.142's rollouts (no public sample of a pair has a licence to ship).
func TestSubagentLink(t *testing.T) {
	dir := t.TempDir()
	parentFile := filepath.Join(dir, "rollout-parent.jsonl")
	childFile := filepath.Join(dir, "rollout-child.jsonl")
	const parentID, childID, callID = "019e0000-0000-7000-8000-00000000000a", "019e0000-0000-7000-8000-00000000000b", "call_spawn1"
	write := func(path string, lines ...string) {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(parentFile,
		`{"timestamp":"2026-06-19T04:29:48.000Z","type":"session_meta","payload":{"id":"`+parentID+`","timestamp":"2026-06-19T04:29:48.000Z","cwd":"/w"}}`,
		`{"timestamp":"2026-06-19T04:29:50.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"use a subagent"}]}}`,
		`{"timestamp":"2026-06-19T04:29:51.000Z","type":"response_item","payload":{"type":"function_call","name":"spawn_agent","arguments":"{\"message\":\"do it\"}","call_id":"`+callID+`"}}`,
		`{"timestamp":"2026-06-19T04:29:52.000Z","type":"response_item","payload":{"type":"function_call_output","call_id":"`+callID+`","output":"{\"agent_id\":\"`+childID+`\",\"nickname\":\"a\"}"}}`,
	)
	write(childFile,
		`{"timestamp":"2026-06-19T04:29:51.500Z","type":"session_meta","payload":{"id":"`+childID+`","timestamp":"2026-06-19T04:29:51.500Z","cwd":"/w","parent_thread_id":"`+parentID+`"}}`,
		`{"timestamp":"2026-06-19T04:29:51.600Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"do it"}]}}`,
	)
	ctx := context.Background()
	parent, err := ParseFile(ctx, Codex{}, parentFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	child, err := ParseFile(ctx, Codex{}, childFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	if child.Session.ParentSession != parentID || !child.Session.IsSubagent || parent.Session.ID != parentID {
		t.Fatalf("child %+v, parent %+v", child.Session, parent.Session)
	}
	var spawn *ToolCall
	for i := range parent.ToolCalls {
		if parent.ToolCalls[i].ChildSession == childID {
			spawn = &parent.ToolCalls[i]
		}
	}
	if spawn == nil || spawn.Name != "spawn_agent" || spawn.ID != callID {
		t.Fatalf("spawning call = %+v", spawn)
	}
}

func span(s Session) string {
	if s.Created.IsZero() && s.Updated.IsZero() {
		return ""
	}
	return s.Created.Truncate(time.Second).Format(time.RFC3339) + " " + s.Updated.Truncate(time.Second).Format(time.RFC3339)
}

func roles(res *Result) map[string]int {
	m := map[string]int{}
	for _, msg := range res.Messages {
		m[msg.Role]++
	}
	return m
}

func lastTurn(res *Result) int {
	if len(res.Messages) == 0 {
		return 0
	}
	return res.Messages[len(res.Messages)-1].Turn
}

// Synthetic lines, one per source, for the edge cases no real file has.
var (
	ccUser = `{"type":"user","sessionId":"s1","uuid":"u1","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hello"}}`
	ccAsst = `{"type":"assistant","sessionId":"s1","uuid":"a1","requestId":"r1","timestamp":"2026-01-01T00:00:01Z","message":{"id":"m1","role":"assistant","model":"claude-x","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":5}}}`
	cxMeta = `{"timestamp":"2026-01-01T00:00:00Z","type":"session_meta","payload":{"id":"t1","cwd":"/w"}}`
	cxUser = `{"timestamp":"2026-01-01T00:00:01Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}}`
	cxAsst = `{"timestamp":"2026-01-01T00:00:02Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}`
	piHead = `{"type":"session","version":3,"id":"p1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`
	piUser = `{"type":"message","id":"aaaaaaaa","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hello","timestamp":1}}`
	piAsst = `{"type":"message","id":"bbbbbbbb","parentId":"aaaaaaaa","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input":3,"output":5}}}`
)

type edge struct {
	source                   string
	head, user, asst, record string // a header (may be ""), a user line, an assistant line, a line of an unknown type
	unknownReason            string
}

var edges = []edge{
	{"claude-code", "", ccUser, ccAsst, `{"type":"brand-new-kind","sessionId":"s1"}`, ReasonUnknownType + ": brand-new-kind"},
	{"codex", cxMeta, cxUser, cxAsst, `{"timestamp":"2026-01-01T00:00:03Z","type":"brand_new_kind","payload":{}}`, ReasonUnknownType + ": brand_new_kind"},
	{"pi", piHead, piUser, piAsst, `{"type":"brand_new_kind","id":"cccccccc","parentId":"bbbbbbbb"}`, ReasonUnknownType + ": brand_new_kind"},
}

func parseBytes(t *testing.T, src Source, data []byte, offset int64) *Result {
	t.Helper()
	res, err := src.Parse(context.Background(), bytes.NewReader(data[offset:]), "/x/"+src.Name()+".jsonl", offset)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func join(lines ...string) []byte {
	var b []byte
	for _, l := range lines {
		if l != "" {
			b = append(append(b, l...), '\n')
		}
	}
	return b
}

// TestTornLastLine: a last line cut mid-write is not consumed: the offset stops before it and
// its bytes are pending; once the line is complete, a parse from that offset reads it.
func TestTornLastLine(t *testing.T) {
	for _, e := range edges {
		t.Run(e.source, func(t *testing.T) {
			src, _ := ByName(e.source)
			whole := join(e.head, e.user, e.asst)
			cut := len(whole) - 1 - len(e.asst)/2
			res := parseBytes(t, src, whole[:cut], 0)
			complete := int64(len(join(e.head, e.user)))
			if res.Offset != complete || res.Pending != int64(cut)-complete {
				t.Fatalf("offset %d pending %d, want %d and %d", res.Offset, res.Pending, complete, int64(cut)-complete)
			}
			if got := roles(res); !reflect.DeepEqual(got, map[string]int{"user": 1}) || len(res.Skipped) != 0 {
				t.Fatalf("roles %v skipped %v", got, res.Skipped)
			}
			rest := parseBytes(t, src, whole, res.Offset)
			if got := roles(rest); !reflect.DeepEqual(got, map[string]int{"assistant": 1}) || rest.Offset != int64(len(whole)) {
				t.Fatalf("the rest: roles %v offset %d", got, rest.Offset)
			}
		})
	}
}

// TestBadLines: a malformed line, a line that is not an object and a record of an unknown
// type are counted, and the session and its other messages are kept.
func TestBadLines(t *testing.T) {
	for _, e := range edges {
		t.Run(e.source, func(t *testing.T) {
			src, _ := ByName(e.source)
			data := join(e.head, e.user, `{"type":"user","message":{"ro`, e.record, `[1,2]`, "", e.asst)
			res := parseBytes(t, src, data, 0)
			want := map[string]int{ReasonMalformed: 1, e.unknownReason: 1, ReasonNoRecord: 1}
			if !reflect.DeepEqual(res.Skipped, want) {
				t.Errorf("skipped = %v, want %v", res.Skipped, want)
			}
			if got := roles(res); !reflect.DeepEqual(got, map[string]int{"user": 1, "assistant": 1}) {
				t.Errorf("roles = %v", got)
			}
			if res.Session.ID == "" || res.Offset != int64(len(data)) {
				t.Errorf("session %q offset %d of %d", res.Session.ID, res.Offset, len(data))
			}
		})
	}
}

// TestIncremental: on each real sample, a parse from any line boundary equals a parse of the
// remaining bytes as a file of their own, and the two parses together read every line once.
func TestIncremental(t *testing.T) {
	for _, w := range samples {
		t.Run(w.file, func(t *testing.T) {
			src, _ := ByName(w.source)
			path := filepath.Join(testdata, w.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			full := parseBytes(t, src, data, 0)
			for _, frac := range []int{3, 2} {
				cut := bytes.IndexByte(data[len(data)/frac:], '\n')
				if cut < 0 {
					continue
				}
				off := int64(len(data)/frac + cut + 1)
				head := parseBytes(t, src, data[:off], 0)
				tail, err := ParseFile(context.Background(), src, path, off)
				if err != nil {
					t.Fatal(err)
				}
				alone, err := src.Parse(context.Background(), bytes.NewReader(data[off:]), path, off)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(tail, alone) {
					t.Fatalf("from offset %d: the file and the bytes differ", off)
				}
				if head.Offset > off || tail.Offset != full.Offset {
					t.Fatalf("offsets: head %d (cut %d), tail %d, full %d", head.Offset, off, tail.Offset, full.Offset)
				}
				if head.Offset == off && head.Lines+tail.Lines != full.Lines {
					t.Fatalf("lines: %d + %d != %d", head.Lines, tail.Lines, full.Lines)
				}
			}
		})
	}
}

// TestDiscover: each adapter finds its files under an overridden root and nothing else; a
// missing root is not an error.
func TestDiscover(t *testing.T) {
	root := t.TempDir()
	files := map[string]bool{
		"claude/-w/s1.jsonl":                                               true,
		"claude/-w/s1/subagents/agent-a1.jsonl":                            true,
		"claude/-w/notes.txt":                                              false,
		"codex/2026/01/02/rollout-2026-x-t1.jsonl":                         true,
		"codex/2026/01/02/other.jsonl":                                     false,
		"pi/--w--/2026-01-01T00-00-00-000Z_p1.jsonl":                       true,
		"openclaw/main/sessions/o1.jsonl":                                  true,
		"openclaw/main/sessions/o0.jsonl.deleted.2026-01-01T00-00-00.000Z": true,
		"openclaw/main/sessions/sessions.json":                             false,
		"openclaw/main/other/o2.jsonl":                                     false,
	}
	for name := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "claude/-w/s1.jsonl"), filepath.Join(root, "claude/-w/link.jsonl")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		src Source
		dir string
	}{{ClaudeCode{}, "claude"}, {Codex{}, "codex"}, {Pi{}, "pi"}, {OpenClaw{}, "openclaw"}, {Nexus{}, "nexus"}} {
		got, err := tc.src.Discover(context.Background(), []string{filepath.Join(root, tc.dir), filepath.Join(root, "missing")})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for name, keep := range files {
			if keep && strings.HasPrefix(name, tc.dir+"/") {
				want = append(want, filepath.Join(root, name))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: found %v, want %v", tc.src.Name(), got, want)
		}
		for _, p := range want {
			if !contains(got, p) {
				t.Fatalf("%s: %s not found in %v", tc.src.Name(), p, got)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDefaultRoots: each root follows its tool's environment variable, else the home directory.
func TestDefaultRoots(t *testing.T) {
	env := func(vars map[string]string) Env {
		return Env{Home: "/h", Getenv: func(k string) string { return vars[k] }}
	}
	for _, tc := range []struct {
		src  Source
		vars map[string]string
		want string
	}{
		{Pi{}, nil, "/h/.pi/agent/sessions"},
		{Pi{}, map[string]string{"PI_CODING_AGENT_DIR": "/p"}, "/p/sessions"},
		{ClaudeCode{}, nil, "/h/.claude/projects"},
		{ClaudeCode{}, map[string]string{"CLAUDE_CONFIG_DIR": "/c"}, "/c/projects"},
		{Codex{}, nil, "/h/.codex/sessions"},
		{Codex{}, map[string]string{"CODEX_HOME": "/x"}, "/x/sessions"},
		{OpenClaw{}, nil, "/h/.openclaw/agents /h/.clawdbot/agents"},
		{Nexus{}, nil, "/h/nexus/state/sessions"},
		{Nexus{}, map[string]string{"NEXUS_HOME": "/n"}, "/n/state/sessions"},
	} {
		if got := tc.src.DefaultRoots(env(tc.vars)); !reflect.DeepEqual(got, strings.Fields(tc.want)) {
			t.Errorf("%s %v: %v, want %s", tc.src.Name(), tc.vars, got, tc.want)
		}
	}
}

// TestClaudeSubagentLink: a Task result that names its agent links the call to the subagent's
// session, and a subagent file under <session>/subagents/ names its parent, from its lines or
// else from its directory. (No public sample has the parent side: these lines follow the
// format of Claude Code 2.x's toolUseResult.)
func TestClaudeSubagentLink(t *testing.T) {
	parent := join(
		`{"type":"user","sessionId":"s1","uuid":"u1","timestamp":"2026-01-01T00:00:01Z","message":{"role":"user","content":"research this"}}`,
		`{"type":"assistant","sessionId":"s1","uuid":"a1","timestamp":"2026-01-01T00:00:02Z","message":{"id":"m1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Task","input":{"prompt":"go"}}]}}`,
		`{"type":"user","sessionId":"s1","uuid":"u2","timestamp":"2026-01-01T00:00:03Z","toolUseResult":{"status":"completed","agentId":"ab12cd","content":[]},"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"done"}]}]}}`,
		`{"type":"user","sessionId":"s1","uuid":"u3","timestamp":"2026-01-01T00:00:04Z","toolUseResult":"Error: no agent","message":{"role":"user","content":"thanks"}}`,
	)
	res := parseBytes(t, ClaudeCode{}, parent, 0)
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].ChildSession != "agent-ab12cd" || res.ToolCalls[0].Result != "done" ||
		len(res.Messages) != 3 || len(res.Skipped) != 0 {
		t.Fatalf("calls %+v messages %d skipped %v", res.ToolCalls, len(res.Messages), res.Skipped)
	}
	child := []byte(`{"type":"assistant","isSidechain":true,"uuid":"a1","timestamp":"2026-01-01T00:00:02Z","message":{"id":"m9","role":"assistant","content":"ok"}}` + "\n")
	sub, err := ClaudeCode{}.Parse(context.Background(), bytes.NewReader(child), "/p/-w/s1/subagents/agent-ab12cd.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	if sub.Session.ID != "agent-ab12cd" || sub.Session.ParentSession != "s1" || !sub.Session.IsSubagent {
		t.Fatalf("subagent session %+v", sub.Session)
	}
}

// TestUnterminated: what happens to the bytes after the last newline. A whole JSON object is
// consumed (its writer finished it; only the newline is missing), a cut one is not; a
// pretty-printed record (lines from a lone "{" to a lone "}") is one record, and one cut before
// its "}" is not consumed either.
func TestUnterminated(t *testing.T) {
	pretty := "{\n  \"timestamp\": \"2026-01-01T00:00:01Z\",\n  \"type\": \"response_item\",\n  \"payload\": {\"type\": \"message\", \"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"hello\"}]}\n}"
	for _, tc := range []struct {
		name     string
		data     string
		consumed int // bytes consumed
		users    int
	}{
		{"whole object", cxMeta + "\n" + cxUser, len(cxMeta) + 1 + len(cxUser), 1},
		{"cut object", cxMeta + "\n" + cxUser[:40], len(cxMeta) + 1, 0},
		{"pretty record", cxMeta + "\n" + pretty + "\n", len(cxMeta) + 1 + len(pretty) + 1, 1},
		{"pretty record, last brace unterminated", cxMeta + "\n" + pretty, len(cxMeta) + 1 + len(pretty), 1},
		{"pretty record cut", cxMeta + "\n" + pretty[:60] + "\n", len(cxMeta) + 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := parseBytes(t, Codex{}, []byte(tc.data), 0)
			if res.Offset != int64(tc.consumed) || res.Pending != int64(len(tc.data)-tc.consumed) {
				t.Fatalf("offset %d pending %d, want %d and %d", res.Offset, res.Pending, tc.consumed, len(tc.data)-tc.consumed)
			}
			if got := roles(res)["user"]; got != tc.users || len(res.Skipped) != 0 {
				t.Fatalf("users %d skipped %v", got, res.Skipped)
			}
		})
	}
}

// TestNexusStore: a nexus transcript's session takes the label, model, project, subagent and
// fork fields of its sessions.json entry, written here by internal/chatstore itself; a
// transcript the store does not name is still read.
func TestNexusStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := chatstore.Open(dir, chatstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const key = "agent:main:subagent:0190aaaa-0000-7000-8000-000000000001"
	e, err := store.Create(ctx, key, map[string]any{"label": "Fix the build", "parentSessionId": "p-1",
		"parentMessageId": "m-1", "toolCallId": "call-1", "project": "/w", "forkedFromSessionId": "f-1"})
	if err != nil {
		t.Fatal(err)
	}
	head := strings.Replace(piHead, `"id":"p1"`, `"id":"`+e.SessionID+`"`, 1)
	path := store.TranscriptPath(e.SessionID)
	if err := os.WriteFile(path, join(head, piUser, piAsst), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := ParseFile(ctx, Nexus{}, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Session{Source: "nexus", ID: e.SessionID, Path: path, Project: "/w", Title: "Fix the build",
		ParentSession: "p-1", ParentMessage: "m-1", ToolCallID: "call-1", IsSubagent: true, ForkOrigin: "f-1",
		Created: res.Session.Created, Updated: res.Session.Updated}
	if res.Session != want {
		t.Fatalf("session = %+v\nwant %+v", res.Session, want)
	}
	if got := roles(res); !reflect.DeepEqual(got, map[string]int{"user": 1, "assistant": 1}) || res.Usage != (Usage{Input: 3, Output: 5}) {
		t.Fatalf("roles %v usage %+v", got, res.Usage)
	}
	other := filepath.Join(dir, "0190bbbb-0000-7000-8000-000000000002.jsonl")
	if err := os.WriteFile(other, join(piUser), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err = ParseFile(ctx, Nexus{}, other, 0)
	if err != nil || res.Session.ID != "0190bbbb-0000-7000-8000-000000000002" || res.Session.Title != "" || len(res.Messages) != 1 {
		t.Fatalf("unnamed transcript: %v %+v", err, res)
	}
}

// TestContent: the text, parameters and results the index will search are the ones in the
// file (each expected string read from the file with jq): Codex's output_text is kept, tool
// parameters are the call's arguments, results are the start of the output, no longer than
// ResultExcerptMax.
func TestContent(t *testing.T) {
	for _, tc := range []struct {
		source, file           string
		assistantText          string // the first assistant message with text starts so
		callID, name           string
		paramsPrefix, resultPf string
	}{
		{"pi", "pi/getspecstory-fields.jsonl", "", "", "bash", `{"command":"echo hi"}`, "hi"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src, _ := ByName(tc.source)
			res, err := ParseFile(context.Background(), src, filepath.Join(testdata, tc.file), 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.assistantText != "" {
				found := false
				for _, m := range res.Messages {
					if m.Role == "assistant" && m.Text != "" {
						found = strings.HasPrefix(m.Text, tc.assistantText)
						break
					}
				}
				if !found {
					t.Errorf("no assistant text starting %q", tc.assistantText)
				}
			}
			var call *ToolCall
			for i := range res.ToolCalls {
				c := &res.ToolCalls[i]
				if len(c.Result) > ResultExcerptMax {
					t.Errorf("call %s: result of %d bytes", c.ID, len(c.Result))
				}
				if c.Name == tc.name && (tc.callID == "" || c.ID == tc.callID) {
					call = c
				}
			}
			if call == nil || !strings.HasPrefix(call.Params, tc.paramsPrefix) || !strings.HasPrefix(call.Result, tc.resultPf) {
				t.Fatalf("call = %+v", call)
			}
		})
	}
}

// TestTornBlock: a pretty-printed record cut short and followed by one-line records is counted
// as malformed, and the records after it are read from where they start.
func TestTornBlock(t *testing.T) {
	data := join(cxMeta, "{", `  "timestamp": "2026-01-01T00:00:01Z",`, cxUser, cxAsst)
	res := parseBytes(t, Codex{}, data, 0)
	if got := roles(res); !reflect.DeepEqual(got, map[string]int{"user": 1, "assistant": 1}) ||
		!reflect.DeepEqual(res.Skipped, map[string]int{ReasonMalformed: 1}) || res.Offset != int64(len(data)) {
		t.Fatalf("roles %v skipped %v offset %d of %d", got, res.Skipped, res.Offset, len(data))
	}
	if want := lineID(int64(len(join(cxMeta, "{", `  "timestamp": "2026-01-01T00:00:01Z",`)))); res.Messages[0].ID != want {
		t.Fatalf("user message id %q, want %q", res.Messages[0].ID, want)
	}
}

// TestStoreCache: an adapter from All decodes a directory's sessions.json once and reads it
// again when it changes; a subagent's parent key (spawnedBy) is resolved to its session id.
func TestStoreCache(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "agents", "main", "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeStore := func(label string) {
		t.Helper()
		store := `{"agent:main:main":{"sessionId":"parent-1"},` +
			`"agent:main:subagent:x":{"sessionId":"child-1","spawnedBy":"agent:main:main","label":"` + label + `"}}`
		if err := os.WriteFile(filepath.Join(dir, "sessions.json"), []byte(store), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeStore("first label")
	path := filepath.Join(dir, "child-1.jsonl")
	head := strings.Replace(piHead, `"id":"p1"`, `"id":"child-1"`, 1)
	if err := os.WriteFile(path, join(head, piUser), 0o600); err != nil {
		t.Fatal(err)
	}
	src, _ := ByName("openclaw")
	res, err := ParseFile(ctx, src, path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Session.ParentSession != "parent-1" || !res.Session.IsSubagent || res.Session.Title != "first label" {
		t.Fatalf("session %+v", res.Session)
	}
	writeStore("a second, longer label")
	if res, err = ParseFile(ctx, src, path, 0); err != nil || res.Session.Title != "a second, longer label" {
		t.Fatalf("after the store changed: %v %+v", err, res.Session)
	}
}
