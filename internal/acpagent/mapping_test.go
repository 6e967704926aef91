package acpagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/abi"
)

func TestToolKind(t *testing.T) {
	tests := []struct {
		tool string
		want acp.ToolKind
	}{
		{"read_file", acp.ToolKindRead},
		{"list_dir", acp.ToolKindRead},
		{"write_file", acp.ToolKindEdit},
		{"edit_file", acp.ToolKindEdit},
		{"copy_file", acp.ToolKindEdit},
		{"glob", acp.ToolKindSearch},
		{"grep", acp.ToolKindSearch},
		{"bash", acp.ToolKindExecute},
		{"mcp_web_fetch", acp.ToolKindFetch},
		{"mcp_fs_read", acp.ToolKindOther},
		{"sessions_spawn", acp.ToolKindOther},
	}
	for _, tc := range tests {
		if got := toolKind(tc.tool); got != tc.want {
			t.Errorf("toolKind(%s) = %s, want %s", tc.tool, got, tc.want)
		}
	}
}

func TestToolTitleAndLocations(t *testing.T) {
	loc := func(p string, line int) acp.ToolCallLocation {
		l := acp.ToolCallLocation{Path: p}
		if line > 0 {
			l.Line = acp.Ptr(line)
		}
		return l
	}
	tests := []struct {
		tool, args string
		title      string
		locs       []acp.ToolCallLocation
	}{
		{"read_file", `{"path":"src/a.go","offset":40}`, "read_file: src/a.go", []acp.ToolCallLocation{loc("/ws/src/a.go", 40)}},
		{"write_file", `{"path":"/etc/x","content":"y"}`, "write_file: /etc/x", []acp.ToolCallLocation{loc("/etc/x", 0)}},
		{"copy_file", `{"source":"a","destination":"b"}`, "copy_file: a → b", []acp.ToolCallLocation{loc("/ws/a", 0), loc("/ws/b", 0)}},
		{"grep", `{"pattern":"TODO","path":"internal"}`, "grep: TODO in internal", []acp.ToolCallLocation{loc("/ws/internal", 0)}},
		{"glob", `{"pattern":"**/*.go"}`, "glob: **/*.go", nil},
		{"bash", `{"command":"make test\necho done"}`, "bash: make test echo done", nil},
		{"bash", `{"command":"` + strings.Repeat("x", 200) + `"}`, "bash: " + strings.Repeat("x", 120) + "…", nil},
		{"sessions_list", `{}`, "sessions_list", nil},
		{"bash", `not json`, "bash", nil},
	}
	for _, tc := range tests {
		a := parseArgs(json.RawMessage(tc.args))
		if got := toolTitle(tc.tool, a); got != tc.title {
			t.Errorf("toolTitle(%s, %s) = %q, want %q", tc.tool, tc.args, got, tc.title)
		}
		if got := toolLocations(tc.tool, a, "/ws"); !reflect.DeepEqual(got, tc.locs) {
			t.Errorf("toolLocations(%s, %s) = %+v, want %+v", tc.tool, tc.args, got, tc.locs)
		}
	}
}

// Every answer `nexus ai confirm` takes is offered with an ACP kind, under its own id, and the
// editor's choice comes back as that answer; anything else is deny.
func TestPermissionMapping(t *testing.T) {
	c := abi.AIConfirmation{Tool: "bash", Cwd: "/ws", Programs: []string{"/usr/bin/make", "/usr/bin/tail"},
		Options: []string{"deny", "allow-once", "allow-file", "allow-write-directory", "allow-exec-cwd", "allow-exec-global", "allow-everything"}}
	got := permissionOptions(c)
	want := []struct {
		id   string
		kind acp.PermissionOptionKind
		name string
	}{
		{"deny", acp.PermissionOptionKindRejectOnce, "Reject"},
		{"allow-once", acp.PermissionOptionKindAllowOnce, "Allow once"},
		{"allow-file", acp.PermissionOptionKindAllowAlways, "Always allow these files"},
		{"allow-write-directory", acp.PermissionOptionKindAllowAlways, "Always allow writes in these directories"},
		{"allow-exec-cwd", acp.PermissionOptionKindAllowAlways, "Always allow make, tail in /ws"},
		{"allow-exec-global", acp.PermissionOptionKindAllowAlways, "Always allow make, tail"},
	}
	if len(got) != len(want) {
		t.Fatalf("options %+v, want %d (an answer nexus does not know is left out)", got, len(want))
	}
	for i, w := range want {
		if string(got[i].OptionId) != w.id || got[i].Kind != w.kind || got[i].Name != w.name {
			t.Errorf("option %d = %+v, want %+v", i, got[i], w)
		}
	}
	mcp := abi.AIConfirmation{Tool: "mcp_fs_write", Options: []string{"allow-exec-global"}}
	if o := permissionOptions(mcp); o[0].Name != "Always allow mcp_fs_write" {
		t.Errorf("an MCP tool's global allowance is named %q", o[0].Name)
	}

	answers := []struct {
		name string
		out  acp.RequestPermissionOutcome
		want string
	}{
		{"allow once", acp.NewRequestPermissionOutcomeSelected("allow-once"), "allow-once"},
		{"allow always", acp.NewRequestPermissionOutcomeSelected("allow-exec-cwd"), "allow-exec-cwd"},
		{"reject", acp.NewRequestPermissionOutcomeSelected("deny"), "deny"},
		{"cancelled", acp.NewRequestPermissionOutcomeCancelled(), "deny"},
		{"not offered", acp.NewRequestPermissionOutcomeSelected("allow-file"), "deny"},
	}
	offered := abi.AIConfirmation{Options: []string{"deny", "allow-once", "allow-exec-cwd"}}
	for _, tc := range answers {
		if got := answerOf(tc.out, offered); got != tc.want {
			t.Errorf("%s: answer %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStopReason(t *testing.T) {
	tests := []struct {
		name     string
		end      abi.AITurn
		errs     []string
		lastStop string
		want     acp.StopReason
		ok       bool
	}{
		{"completed", abi.AITurn{End: abi.TurnCompleted}, nil, "stop", acp.StopReasonEndTurn, true},
		{"token limit", abi.AITurn{End: abi.TurnCompleted}, nil, "length", acp.StopReasonMaxTokens, true},
		{"cancelled", abi.AITurn{End: abi.TurnCancelled}, nil, "", acp.StopReasonCancelled, true},
		{"iterations", abi.AITurn{End: abi.TurnMaxIterations}, nil, "", acp.StopReasonMaxTurnRequests, true},
		{"loop", abi.AITurn{End: abi.TurnLoopDetected, Reason: "bash 3 times"}, nil, "", acp.StopReasonMaxTurnRequests, true},
		{"refusal", abi.AITurn{End: abi.TurnError}, []string{"INVALID_ARGUMENT: the model refused to answer"}, "", acp.StopReasonRefusal, true},
		{"error", abi.AITurn{End: abi.TurnError, Reason: "529 overloaded"}, []string{"RESOURCE_UNAVAILABLE: 529"}, "", "", false},
	}
	for _, tc := range tests {
		got, ok := stopReason(tc.end, tc.errs, tc.lastStop)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRequestError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		msg  string
		abi  string
	}{
		{"invalid", abi.Errorf(abi.CodeInvalidArgument, "", "unknown backend x"), -32602, "INVALID_ARGUMENT: unknown backend x", "INVALID_ARGUMENT"},
		{"not found", abi.Errorf(abi.CodeSessionNotFound, "s", "no session s"), codeResourceNotFound, "SESSION_NOT_FOUND: no session s", "SESSION_NOT_FOUND"},
		{"gateway gone", fmt.Errorf("create: %w", abi.Errorf(abi.CodeConnectionLost, "", "no gateway at /x.sock")), -32603, "CONNECTION_LOST: no gateway at /x.sock", "CONNECTION_LOST"},
		{"plain", errors.New("boom"), -32603, "boom", ""},
		{"acp", invalidParams("bad cwd"), -32602, "bad cwd", ""},
	}
	for _, tc := range tests {
		re := requestError(tc.err)
		if re.Code != tc.code || re.Message != tc.msg {
			t.Errorf("%s: %d %q, want %d %q", tc.name, re.Code, re.Message, tc.code, tc.msg)
		}
		if d, _ := re.Data.(map[string]any); tc.abi != "" && (d == nil || d["code"] != tc.abi) {
			t.Errorf("%s: data %v, want code %s", tc.name, re.Data, tc.abi)
		}
	}
}

func ev(t *testing.T, typ abi.EventType, payload any) abi.Event {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return abi.Event{Event: typ, Payload: b}
}

// updateJSON renders updates as the wire does, to compare them as JSON.
func updateJSON(t *testing.T, us []acp.SessionUpdate) []string {
	t.Helper()
	out := make([]string, len(us))
	for i, u := range us {
		b, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

// A turn's events, in order, and the updates each becomes.
func TestMapperEvents(t *testing.T) {
	files := map[string]string{"/ws/a.txt": "one\ntwo\n"}
	m := newMapper("/ws")
	m.read = func(p string) (string, bool) { s, ok := files[p]; return s, ok }
	steps := []struct {
		name  string
		event abi.Event
		after func() // the file system changing as the tool runs
		want  []string
		check func(*testing.T, mapped)
	}{
		{"turn started", ev(t, abi.EventData, abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseStarted}), nil, []string{}, nil},
		{"thinking", ev(t, abi.EventData, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseDelta, Content: "hmm"}), nil,
			[]string{`{"content":{"text":"hmm","type":"text"},"sessionUpdate":"agent_thought_chunk"}`}, nil},
		{"thinking ended", ev(t, abi.EventData, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseEnded}), nil, []string{}, nil},
		{"token", ev(t, abi.EventData, abi.AIToken{Type: abi.PayloadAIToken, Content: "Hi"}), nil,
			[]string{`{"content":{"text":"Hi","type":"text"},"sessionUpdate":"agent_message_chunk"}`}, nil},
		{"final token", ev(t, abi.EventData, abi.AIToken{Type: abi.PayloadAIToken, IsFinal: true}), nil, []string{}, nil},
		{"edit detected", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseDetected, ToolCallID: "c1", Name: "edit_file",
			Arguments: json.RawMessage(`{"path":"a.txt","old_string":"two","new_string":"2"}`)}), nil,
			[]string{`{"kind":"edit","locations":[{"path":"/ws/a.txt"}],"rawInput":{"new_string":"2","old_string":"two","path":"a.txt"},"sessionUpdate":"tool_call","status":"pending","title":"edit_file: a.txt","toolCallId":"c1"}`}, nil},
		{"edit started", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseStarted, ToolCallID: "c1", Name: "edit_file"}),
			func() { files["/ws/a.txt"] = "one\n2\n" },
			[]string{`{"sessionUpdate":"tool_call_update","status":"in_progress","toolCallId":"c1"}`}, nil},
		{"edit completed: a whole-file diff", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseCompleted, ToolCallID: "c1", Name: "edit_file", Output: "edited"}), nil,
			[]string{`{"content":[{"content":{"text":"edited","type":"text"},"type":"content"},{"newText":"one\n2\n","oldText":"one\ntwo\n","path":"/ws/a.txt","type":"diff"}],"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"c1"}`}, nil},
		{"write detected (new file)", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseDetected, ToolCallID: "c2", Name: "write_file",
			Arguments: json.RawMessage(`{"path":"/ws/new.txt","content":"x"}`)}), nil,
			[]string{`{"kind":"edit","locations":[{"path":"/ws/new.txt"}],"rawInput":{"content":"x","path":"/ws/new.txt"},"sessionUpdate":"tool_call","status":"pending","title":"write_file: /ws/new.txt","toolCallId":"c2"}`}, nil},
		{"write completed", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseCompleted, ToolCallID: "c2", Name: "write_file", Output: "wrote"}), nil,
			[]string{`{"content":[{"content":{"text":"wrote","type":"text"},"type":"content"},{"newText":"x","path":"/ws/new.txt","type":"diff"}],"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"c2"}`}, nil},
		{"bash detected", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseDetected, ToolCallID: "c3", Name: "bash",
			Arguments: json.RawMessage(`{"command":"rm -rf /"}`)}), nil,
			[]string{`{"kind":"execute","rawInput":{"command":"rm -rf /"},"sessionUpdate":"tool_call","status":"pending","title":"bash: rm -rf /","toolCallId":"c3"}`}, nil},
		{"confirmation", ev(t, abi.EventData, abi.AIConfirmation{Type: abi.PayloadAIConfirmation, RequestID: "confirm-1", ToolCallID: "c3", Tool: "bash", Options: []string{"deny", "allow-once"}}), nil,
			[]string{}, func(t *testing.T, o mapped) {
				if o.confirm == nil || o.confirm.RequestID != "confirm-1" {
					t.Errorf("confirmation: %+v", o.confirm)
				}
			}},
		{"failed read detected", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseDetected, ToolCallID: "c4", Name: "read_file", Arguments: json.RawMessage(`{"path":"x"}`)}), nil,
			[]string{`{"kind":"read","locations":[{"path":"/ws/x"}],"rawInput":{"path":"x"},"sessionUpdate":"tool_call","status":"pending","title":"read_file: x","toolCallId":"c4"}`}, nil},
		{"failed read", ev(t, abi.EventData, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseCompleted, ToolCallID: "c4", Name: "read_file", Output: "no such file", IsError: true}), nil,
			[]string{`{"content":[{"content":{"text":"no such file","type":"text"},"type":"content"}],"sessionUpdate":"tool_call_update","status":"failed","toolCallId":"c4"}`}, nil},
		{"error event", ev(t, abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeResourceUnavailable, Message: "529"}}), nil,
			[]string{}, func(t *testing.T, o mapped) {
				if o.err != "RESOURCE_UNAVAILABLE: 529" {
					t.Errorf("error: %q", o.err)
				}
			}},
		{"turn ended: the unanswered call settled", ev(t, abi.EventData, abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, End: abi.TurnCancelled}), nil,
			[]string{`{"content":[{"content":{"text":"not run: the turn ended (cancelled)","type":"text"},"type":"content"}],"sessionUpdate":"tool_call_update","status":"failed","toolCallId":"c3"}`},
			func(t *testing.T, o mapped) {
				if o.end == nil || o.end.End != abi.TurnCancelled {
					t.Errorf("end: %+v", o.end)
				}
			}},
		{"status events are not updates", ev(t, abi.EventStatus, map[string]string{"type": "status", "status": "responding"}), nil, []string{}, nil},
	}
	for _, st := range steps {
		out := m.event(st.event)
		if st.after != nil {
			st.after()
		}
		if got := updateJSON(t, out.updates); !reflect.DeepEqual(got, st.want) {
			t.Errorf("%s:\n got %v\nwant %v", st.name, got, st.want)
		}
		if st.check != nil {
			st.check(t, out)
		}
	}
}

// A conversation's history (pi's messages) replays as the updates a live turn would have sent.
func TestMapperHistory(t *testing.T) {
	m := newMapper("/ws")
	tests := []struct {
		msg  string
		want []string
	}{
		{`{"role":"user","content":"run something","timestamp":1}`,
			[]string{`{"content":{"text":"run something","type":"text"},"sessionUpdate":"user_message_chunk"}`}},
		{`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`,
			[]string{`{"content":{"text":"look","type":"text"},"sessionUpdate":"user_message_chunk"}`}},
		{`{"role":"assistant","content":[{"type":"thinking","thinking":"plan"},{"type":"text","text":"Editing."},{"type":"toolCall","id":"c1","name":"edit_file","arguments":{"path":"a.txt","old_string":"a","new_string":"b"}}],"stopReason":"toolUse"}`,
			[]string{
				`{"content":{"text":"plan","type":"text"},"sessionUpdate":"agent_thought_chunk"}`,
				`{"content":{"text":"Editing.","type":"text"},"sessionUpdate":"agent_message_chunk"}`,
				`{"kind":"edit","locations":[{"path":"/ws/a.txt"}],"rawInput":{"new_string":"b","old_string":"a","path":"a.txt"},"sessionUpdate":"tool_call","status":"pending","title":"edit_file: a.txt","toolCallId":"c1"}`,
			}},
		{`{"role":"toolResult","toolCallId":"c1","toolName":"edit_file","content":[{"type":"text","text":"edited"}],"isError":false}`,
			[]string{`{"content":[{"content":{"text":"edited","type":"text"},"type":"content"},{"newText":"b","oldText":"a","path":"/ws/a.txt","type":"diff"}],"sessionUpdate":"tool_call_update","status":"completed","toolCallId":"c1"}`}},
		{`{"role":"toolResult","toolCallId":"c9","toolName":"bash","content":[{"type":"text","text":"the turn was interrupted"}],"isError":true}`,
			[]string{`{"content":[{"content":{"text":"the turn was interrupted","type":"text"},"type":"content"}],"sessionUpdate":"tool_call_update","status":"failed","toolCallId":"c9"}`}},
		{`{"role":"compactionSummary","summary":"we fixed the build","tokensBefore":9000}`,
			[]string{`{"content":{"text":"[summary of the earlier conversation]\nwe fixed the build\n","type":"text"},"sessionUpdate":"agent_message_chunk"}`}},
		{`{"role":"custom","customType":"x","content":"internal"}`, []string{}},
		{`not json`, []string{}},
	}
	for _, tc := range tests {
		if got := updateJSON(t, m.history(json.RawMessage(tc.msg))); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %v\nwant %v", tc.msg, got, tc.want)
		}
	}
}

func TestClipText(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := clipText(s, 5)
	if !strings.HasPrefix(got, "éé\n… (16 more bytes)") {
		t.Errorf("clipText = %q", got)
	}
	if clipText("short", 10) != "short" {
		t.Error("a short text is kept whole")
	}
}

func TestFilePath(t *testing.T) {
	tests := map[string]string{
		"file:///home/u/a.go":       "/home/u/a.go",
		"file:///home/u/with%20sp":  "/home/u/with sp",
		"https://example.com/a.go":  "",
		"file:relative":             "",
		"zed:///agent/thread/12345": "",
	}
	for uri, want := range tests {
		if got := filePath(uri); got != want {
			t.Errorf("filePath(%q) = %q, want %q", uri, got, want)
		}
	}
}

func TestUsageOf(t *testing.T) {
	tests := []struct {
		in   *abi.AIUsage
		want string
	}{
		{nil, "null"},
		{&abi.AIUsage{Input: 1, Output: 32, CacheRead: 504, Total: 537}, `{"cachedReadTokens":504,"inputTokens":1,"outputTokens":32,"totalTokens":537}`},
		{&abi.AIUsage{Input: 10, Output: 2, CacheWrite: 7, Total: 12}, `{"cachedWriteTokens":7,"inputTokens":10,"outputTokens":2,"totalTokens":12}`},
	}
	for _, tc := range tests {
		b, err := json.Marshal(usageOf(tc.in))
		if err != nil || string(b) != tc.want {
			t.Errorf("usageOf(%+v) = %s %v, want %s", tc.in, b, err, tc.want)
		}
	}
}
