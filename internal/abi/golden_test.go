package abi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live/livetest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenTime is deliberately not UTC and has sub-millisecond digits: the wire form must be UTC
// with exactly three fractional digits.
var goldenTime = time.Date(2023, 10, 1, 14, 0, 0, 123456789, time.FixedZone("CEST", 2*3600))

// goldenStamp is FormatTime(goldenTime).
const goldenStamp = "2023-10-01T12:00:00.123Z"

// goldenCase is one wire shape; the golden file is also decoded back into a fresh value of the
// same type.
type goldenCase struct {
	name  string
	value any
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

func event(t *testing.T, typ abi.EventType, seq uint64, payload any) abi.Event {
	t.Helper()
	return abi.Event{Event: typ, Timestamp: abi.FormatTime(goldenTime), SessionID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Seq: seq, Payload: mustJSON(t, payload)}
}

func exitCode(n int) *int { return &n }

func sessionOf(typ abi.SessionType, ctx abi.Context, transport abi.Transport, md map[string]any) abi.Session {
	return abi.Session{
		SessionID:    "sess-" + string(typ),
		Type:         typ,
		CreatedAt:    abi.FormatTime(goldenTime),
		Context:      ctx,
		Transport:    transport,
		Status:       abi.StatusActive,
		Capabilities: livetest.CoreCapabilities(typ),
		Metadata:     md,
	}
}

// terminalBytes has an escape sequence, a two-byte character and a CR LF, so the three content
// types differ visibly.
var terminalBytes = []byte("\x1b[1;31mhi\x1b[0m caf\xc3\xa9\r\n")

func goldenCases(t *testing.T) []goldenCase {
	t.Helper()
	terminal := sessionOf(abi.TypeTerminal, abi.Context{ProjectID: "demo"}, abi.TransportWebSocket,
		map[string]any{"cwd": "/home/u/demo", "shell": "/bin/bash"})
	terminal.ExpiresAt = abi.FormatTime(goldenTime.Add(time.Hour))
	aiChat := sessionOf(abi.TypeAIChat, abi.Context{ChatID: "chat-7"}, abi.TransportPolling,
		map[string]any{"backend": "claude", "workspacePath": "/home/u/demo", "allowChallenge": false, "streamingMode": true})
	metaChat := sessionOf(abi.TypeMetaChat, abi.Context{RoadmapID: "rm-1"}, abi.TransportWebSocket,
		map[string]any{"roadmapId": "rm-1"})
	debug := sessionOf(abi.TypeDebugStream, abi.Context{ProcessID: "4242", ServerID: "srv-1"}, abi.TransportHybrid, map[string]any{})
	network := sessionOf(abi.TypeNetworkStream, abi.Context{ServerID: "srv-1"}, abi.TransportWebSocket,
		map[string]any{"connectionInfo": map[string]any{"host": "127.0.0.1", "port": 8080}})
	closed := terminal
	closed.SessionID = "sess-closed"
	closed.Status = abi.StatusClosed
	closed.Metadata = map[string]any{"cwd": "/home/u/demo", "shell": "/bin/bash", "closeReason": "user-requested", "closedAt": goldenStamp}

	cases := []goldenCase{
		{"session_terminal", terminal},
		{"session_ai-chat", aiChat},
		{"session_meta-chat", metaChat},
		{"session_debug-stream", debug},
		{"session_network-stream", network},

		{"event_terminal-output_ansi", event(t, abi.EventData, 7, abi.NewTerminalOutput(terminalBytes, abi.ContentANSI))},
		{"event_terminal-output_text", event(t, abi.EventData, 7, abi.NewTerminalOutput(terminalBytes, abi.ContentText))},
		{"event_terminal-output_raw", event(t, abi.EventData, 7, abi.NewTerminalOutput(terminalBytes, abi.ContentRaw))},
		{"event_ai-token", event(t, abi.EventData, 3, abi.AIToken{Type: abi.PayloadAIToken, Content: "Hello", MessageID: "msg-1", IsFinal: false})},
		{"event_ai-token_final", event(t, abi.EventData, 4, abi.AIToken{Type: abi.PayloadAIToken, Content: "", IsFinal: true})},
		{"event_ai-reasoning_started", event(t, abi.EventData, 5, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseStarted, MessageID: "run-1-1"})},
		{"event_ai-reasoning_delta", event(t, abi.EventData, 6, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseDelta, Content: "Let me check", MessageID: "run-1-1"})},
		{"event_ai-reasoning_ended", event(t, abi.EventData, 7, abi.AIReasoning{Type: abi.PayloadAIReasoning, Phase: abi.PhaseEnded, MessageID: "run-1-1"})},
		{"event_ai-tool_detected", event(t, abi.EventData, 8, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseDetected, ToolCallID: "call_1", Name: "bash", Arguments: json.RawMessage(`{"command":"ls"}`)})},
		{"event_ai-tool_started", event(t, abi.EventData, 10, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseStarted, ToolCallID: "call_1", Name: "bash"})},
		{"event_ai-tool_completed", event(t, abi.EventData, 11, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseCompleted, ToolCallID: "call_1", Name: "bash", Output: "README.md\n[exit code 0]"})},
		{"event_ai-tool_failed", event(t, abi.EventData, 11, abi.AITool{Type: abi.PayloadAITool, Phase: abi.PhaseCompleted, ToolCallID: "call_2", Name: "read_file", Output: "open \"x\": no such file or directory", IsError: true})},
		{"event_ai-tool-progress", event(t, abi.EventData, 11, abi.AIToolProgress{Type: abi.PayloadAIToolProgress, ToolCallID: "call_1", Name: "bash", ElapsedMs: 20000, Output: "Compiling nexus v0.1.0\n"})},
		{"event_ai-batch_started", event(t, abi.EventData, 9, abi.AIBatch{Type: abi.PayloadAIBatch, Phase: abi.PhaseStarted, Calls: 2, Parallel: true})},
		{"event_ai-batch_halted", event(t, abi.EventData, 12, abi.AIBatch{Type: abi.PayloadAIBatch, Phase: abi.PhaseHalted, Reason: "read_file failed"})},
		{"event_ai-batch_completed", event(t, abi.EventData, 12, abi.AIBatch{Type: abi.PayloadAIBatch, Phase: abi.PhaseCompleted})},
		{"event_ai-iteration", event(t, abi.EventData, 13, abi.AIIteration{Type: abi.PayloadAIIteration, Iteration: 1, WillContinue: true})},
		{"event_ai-turn_started", event(t, abi.EventData, 2, abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseStarted, RunID: "run-1"})},
		{"event_log-line", event(t, abi.EventData, 4, abi.LogLine{Type: abi.PayloadLogLine, Stream: abi.StreamStderr, Line: "listening on :8080", Offset: 4096})},
		{"event_log-lines", event(t, abi.EventData, 6, abi.LogLines{Type: abi.PayloadLogLines, Lines: []abi.LogLine{
			{Type: abi.PayloadLogLine, Stream: abi.StreamStdout, Line: "GET /health 200", Offset: 8192},
			{Type: abi.PayloadLogLine, Stream: abi.StreamStdout, Line: "GET /api/items 200", Offset: 8208},
		}})},
		{"event_log-line_gateway", event(t, abi.EventData, 5, abi.LogLine{Type: abi.PayloadLogLine, Stream: abi.StreamGateway, Line: "session created id=0190a1b2", Level: "INFO", Offset: 17})},
		{"event_connection_open", event(t, abi.EventData, 6, abi.Connection{Type: abi.PayloadConnection, Action: "open", Local: "127.0.0.1:8080", Remote: "127.0.0.1:53752", State: "established", BytesSent: 0, BytesReceived: 5, RTTMs: 0.024, Inode: 3665324})},
		{"event_roadmap-item", event(t, abi.EventData, 7, abi.RoadmapEvent{Type: abi.PayloadRoadmapItem, Action: "updated", RoadmapID: "rm63bc7dba", Item: &abi.RoadmapItem{ID: "it0a1b2c3d", Title: "write the docs", Status: "doing"}})},
		{"event_roadmap-turn", event(t, abi.EventData, 8, abi.RoadmapEvent{Type: abi.PayloadRoadmapTurn, RoadmapID: "rm63bc7dba", SessionID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", ChatKey: "agent:worker:main", RunID: "run-1", End: "completed", Iterations: 2})},
		{"event_ai-run_start", event(t, abi.EventData, 3, abi.AIRun{Type: abi.PayloadAIRun, Phase: abi.RunStart, RunID: "run-1"})},
		{"event_ai-run_end", event(t, abi.EventData, 21, abi.RunOf(abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, RunID: "run-1", End: abi.TurnCompleted}))},
		{"event_ai-run_error", event(t, abi.EventData, 21, abi.RunOf(abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, RunID: "run-1", End: abi.TurnError, Reason: "the backend answered 529 overloaded"}))},
		{"event_ai-turn_ended", event(t, abi.EventData, 20, abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, RunID: "run-1", End: abi.TurnLoopDetected, Reason: "bash was called 3 times with the same arguments", Iterations: 3,
			Usage: &abi.AIUsage{Input: 1200, Output: 80, CacheRead: 300, Total: 1580}})},
		{"event_confirmation-request", event(t, abi.EventData, 14, abi.AIConfirmation{Type: abi.PayloadAIConfirmation, RequestID: "confirm-1", ToolCallID: "call_3", Tool: "bash",
			Arguments: json.RawMessage(`{"command":"git status && rm -rf x"}`), Command: "git status && rm -rf x", Cwd: "/home/u/demo", Programs: []string{"git", "rm"},
			Options: []string{"deny", "allow-once", "allow-exec-cwd", "allow-exec-global"}})},
		{"event_confirmation-answered", event(t, abi.EventData, 15, abi.AIConfirmed{Type: abi.PayloadAIConfirmed, RequestID: "confirm-1", Answer: "allow-once"})},
		{"event_metadata_ai-usage", event(t, abi.EventMetadata, 16, abi.MetadataPayload{Type: abi.PayloadMetadata, Metadata: map[string]any{"tokenCount": 1580, "contextWindow": 200000, "remainingTokens": 198420}})},
		{"event_ai-compaction_started", event(t, abi.EventData, 3, abi.AICompaction{Type: abi.PayloadAICompaction, Phase: abi.PhaseStarted, Reason: "threshold", TokensBefore: 184320})},
		{"event_ai-compaction_ended", event(t, abi.EventData, 4, abi.AICompaction{Type: abi.PayloadAICompaction, Phase: abi.PhaseEnded, Reason: "threshold", TokensBefore: 184320,
			TokensAfter: 52110, CompactionID: "9f8e7d6c", FirstKeptEntryID: "1a2b3c4d", SummaryChars: 6120})},
		{"control_confirm", abi.ControlRequest{Command: abi.CommandConfirm, RequestID: "confirm-1", Answer: "allow-exec-cwd"}},
		{"control_compact", abi.ControlRequest{Command: abi.CommandCompact}},
		{"control_spawn", abi.ControlRequest{Command: abi.CommandSpawn, Spawn: &abi.SpawnRequest{Task: "run the tests and report the failures", Label: "tests", Cleanup: "keep", Level: "sandboxed"}}},
		{"control_queue", abi.ControlRequest{Command: abi.CommandQueue, Last: 10}},
		{"event_ai-queue_queued", event(t, abi.EventData, 5, abi.AIQueue{Type: abi.PayloadAIQueue, Phase: abi.QueueQueued, MessageIDs: []string{"msg_0c1d2e3f4a5b6c7d8e9f0a1b"}, Mode: "steer"})},
		{"event_ai-queue_cleared", event(t, abi.EventData, 6, abi.AIQueue{Type: abi.PayloadAIQueue, Phase: abi.QueueCleared, MessageIDs: []string{"msg_1a", "msg_2b"}, Reason: "cleared by the interrupt msg_3c"})},
		{"send_ai-chat", abi.SendRequest{Data: "review the diff", Mode: "followup"}},
		{"event_ai-subagent_started", event(t, abi.EventData, 9, abi.AISubagent{Type: abi.PayloadAISubagent, Phase: abi.PhaseStarted, RunID: "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f",
			ChildSessionKey: "agent:main:subagent:6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f", SessionID: "01a2b3c4-d5e6-7f80-9a1b-2c3d4e5f6a7b", Label: "tests", Task: "run the tests and report the failures"})},
		{"create_ai-chat", abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:main:ai:0c1d2e3f4a5b"}, Options: mustJSON(t, abi.AIChatOptions{Backend: "claude", Model: "claude-sonnet-4-5", Level: "trusted", Workspace: "/home/u/demo"})}},
		{"event_status", event(t, abi.EventStatus, 1, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected, Message: "session active", SessionStatus: abi.StatusActive})},
		{"event_error", event(t, abi.EventError, 9, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{
			Code: abi.CodeEventsMissed, Message: "reader fell behind", Details: map[string]any{"missed": 12, "fromSeq": 1, "toSeq": 12},
		}})},
		{"event_error_nodetails", event(t, abi.EventError, 9, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeConnectionLost, Message: "backend went away"}})},
		{"event_interrupt", event(t, abi.EventInterrupt, 5, abi.InterruptPayload{Type: abi.PayloadInterrupt, Reason: abi.ReasonUserRequested})},
		{"event_interrupt_timeout", event(t, abi.EventInterrupt, 5, abi.InterruptPayload{Type: abi.PayloadInterrupt, Reason: abi.ReasonTimeout})},
		{"event_metadata", event(t, abi.EventMetadata, 6, abi.MetadataPayload{Type: abi.PayloadMetadata, Metadata: map[string]any{"tokenCount": 120, "contextWindow": 200000, "remainingTokens": 199880}})},
		{"event_close", event(t, abi.EventClose, 11, abi.ClosePayload{Type: abi.PayloadClose, Reason: abi.CloseExited, Status: abi.StatusClosed, ExitCode: exitCode(0)})},
		{"event_close_timeout", event(t, abi.EventClose, 11, abi.ClosePayload{Type: abi.PayloadClose, Reason: abi.CloseTimeout, Status: abi.StatusClosed})},

		{"control_response_ok_interrupt", abi.ControlResponse{Status: abi.ResponseOK, Data: &abi.ControlData{SessionID: "sess-terminal", Command: abi.CommandInterrupt, Result: map[string]any{"signal": "SIGINT"}}}},
		{"control_response_ok_resize", abi.ControlResponse{Status: abi.ResponseOK, Data: &abi.ControlData{SessionID: "sess-terminal", Command: abi.CommandResize, Result: map[string]any{"width": 80, "height": 24}}}},
		{"control_response_ok_close", abi.ControlResponse{Status: abi.ResponseOK, Data: &abi.ControlData{SessionID: "sess-closed", Command: abi.CommandClose, Result: closed}, Message: "session closed"}},

		{"events_response", abi.EventsResponse{Events: []abi.Event{
			event(t, abi.EventStatus, 1, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnecting, Message: "starting terminal session", SessionStatus: abi.StatusActive}),
			event(t, abi.EventData, 2, abi.NewTerminalOutput([]byte("$ "), abi.ContentANSI)),
		}, Next: 2, Closed: false}},
		{"events_response_empty_closed", abi.EventsResponse{Events: []abi.Event{}, Next: 11, Closed: true}},
		{"list_response", abi.ListResponse{Sessions: []abi.Session{terminal, aiChat}}},
		{"list_response_empty", abi.ListResponse{Sessions: []abi.Session{}}},

		{"create_request", abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "demo"}, Transport: abi.TransportWebSocket, TTLSeconds: 600, Ephemeral: true,
			Options: mustJSON(t, abi.TerminalOptions{Shell: "/bin/bash", Cols: 80, Rows: 24, Env: []string{"LANG=C.UTF-8"}})}},
		{"send_request", abi.SendRequest{Data: "ZWNobyBoaQo=", Encoding: "base64"}},
		{"control_request", abi.ControlRequest{Command: abi.CommandResize, Width: 80, Height: 24}},
		{"version_response", abi.VersionResponse{Version: "v0.1.0", ABIVersion: abi.Version, PID: 1234}},
		{"client_message", abi.ClientMessage{Op: "resize", Width: 120, Height: 40}},
		{"shell", abi.Shell{SessionID: "a1b2c3-1_local", Transport: "local", Cwd: "/home/u/demo", Workspace: "/home/u/demo",
			Created: goldenStamp, LastUsed: goldenStamp, Execs: 3, Deny: []string{"rm"}}},
		{"index_hit", abi.IndexHit{Kind: "message", Source: "claude-code", Session: "s1", Project: "/w", Title: "t",
			MessageID: "m1", Role: "user", Timestamp: goldenStamp, Snippet: "a \ue000match\ue001 here", Score: -1.5,
			Show: "nexus index show s1 --source claude-code --around m1", Resume: "cd /w && claude --resume s1"}},
		{"index_session_detail", abi.IndexSessionDetail{Session: indexSession(), Children: []string{"agent-1"},
			Messages: []abi.IndexMessage{{ID: "m1", Role: "assistant", Text: "hi", Timestamp: goldenStamp, Seq: 1, Turn: 1, Model: "claude-x",
				Tokens:    &abi.IndexTokens{Input: 1, Output: 2, Total: 3},
				ToolCalls: []abi.IndexToolCall{{ID: "toolu_1", Name: "Task", Params: `{"description":"d"}`, Result: "done", Status: "ok", ChildSession: "agent-1"}}}}}},
		{"index_stats", abi.IndexStats{Sessions: 1, Messages: 2, ToolCalls: 1, Files: 1, SkippedLines: map[string]int{"claude-code: malformed line": 1},
			CutLines: 1, FailedFiles: []abi.IndexFileError{{Source: "claude-code", Path: "/p/s2.jsonl", Error: "panic: boom at source.ClaudeCode.Parse (claudecode.go:1)"}},
			Tokens: abi.IndexTokens{Input: 1, Output: 2, Total: 3}, BySource: []abi.IndexStatsRow{{Key: "claude-code", Sessions: 1, Messages: 2,
				Tokens: abi.IndexTokens{Input: 1, Output: 2, Total: 3}}}, ByModel: []abi.IndexStatsRow{}, ByProject: []abi.IndexStatsRow{}, ByDay: []abi.IndexStatsRow{}}},
		{"index_summary", abi.IndexSummary{Gen: 2, Files: 3, New: 1, Appended: 1, Unchanged: 1, Bytes: 4096, Sessions: 2, Messages: 5,
			ToolCalls: 1, Skipped: map[string]int{"codex: unknown type: x": 1}, Cut: 1, Errors: []abi.IndexFileError{{Source: "pi", Path: "/p/x.jsonl", Error: "permission denied"}},
			DurationMS: 12}},
	}
	for _, code := range abi.Codes() {
		err := abi.Errorf(code, "sess-terminal", "something about %s", code)
		cases = append(cases, goldenCase{"error_" + string(code), abi.ErrorResponse(err, goldenTime)})
	}
	cases = append(cases,
		goldenCase{"error_wrapped_cause", abi.ErrorResponse(&abi.Error{Code: abi.CodeResourceUnavailable, SessionID: "sess-terminal", Message: "send", Err: errors.New("write /dev/ptmx: input/output error")}, goldenTime)},
		goldenCase{"error_plain_go_error", abi.ErrorResponse(errors.New("boom"), goldenTime)},
	)
	return cases
}

func marshalGolden(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return append(b, '\n')
}

// TestGolden pins the exact wire form of every shape. Regenerate with: go test ./internal/abi -update
func TestGolden(t *testing.T) {
	cases := goldenCases(t)
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("duplicate golden case %s", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", tc.name+".json")
			got := marshalGolden(t, tc.value)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil { //nolint:gosec // test fixture
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run: go test ./internal/abi -update): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from golden file\n--- got\n%s\n--- want\n%s", path, got, want)
			}

			// The golden file decodes strictly back into the same type and re-encodes to the same
			// JSON (key order aside: "result" is an any and comes back as a map): every field
			// the encoder writes, the strict decoder accepts.
			fresh := reflect.New(reflect.TypeOf(tc.value))
			if err := abi.DecodeStrict(want, fresh.Interface()); err != nil {
				t.Fatalf("DecodeStrict(golden): %v", err)
			}
			if again := marshalGolden(t, fresh.Elem().Interface()); !sameJSON(t, again, want) {
				t.Errorf("round trip differs\n--- got\n%s\n--- want\n%s", again, want)
			}
		})
	}

	// No stale golden file is left behind.
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if !seen[name[:len(name)-len(".json")]] {
			t.Errorf("golden file %s has no test case; delete it", f)
		}
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

var wireTime = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)

// TestGoldenInvariants checks properties of the golden files that must hold whatever -update
// wrote: timestamps are ISO 8601 UTC with milliseconds, the capability object always carries its
// seven flags, and the envelopes carry their stable keys.
func TestGoldenInvariants(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden files")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		walkJSON(v, "$", func(path, key string, val any) {
			switch key {
			case "timestamp", "createdAt", "expiresAt", "closedAt":
				s, ok := val.(string)
				if !ok || !wireTime.MatchString(s) {
					t.Errorf("%s %s = %v: not ISO 8601 UTC with milliseconds", f, path, val)
				}
			case "capabilities":
				m, ok := val.(map[string]any)
				if !ok {
					t.Errorf("%s %s: capabilities is %T", f, path, val)
					return
				}
				keys := make([]string, 0, len(m))
				for k, b := range m {
					keys = append(keys, k)
					if _, ok := b.(bool); !ok {
						t.Errorf("%s %s.%s is %T, want boolean", f, path, k, b)
					}
				}
				sort.Strings(keys)
				want := []string{"close", "interrupt", "receive", "resize", "restart", "send", "stream"}
				if !reflect.DeepEqual(keys, want) {
					t.Errorf("%s %s keys = %v, want %v", f, path, keys, want)
				}
			case "payload":
				m, ok := val.(map[string]any)
				if !ok {
					t.Errorf("%s %s: payload is %T", f, path, val)
					return
				}
				if _, ok := m["type"].(string); !ok {
					t.Errorf("%s %s: payload has no type", f, path)
				}
			}
		})
	}
}

func walkJSON(v any, path string, fn func(path, key string, val any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := path + "." + k
			fn(p, k, val)
			walkJSON(val, p, fn)
		}
	case []any:
		for i, val := range x {
			walkJSON(val, path+"["+strconv.Itoa(i)+"]", fn)
		}
	}
}

// TestSessionShapePerType checks each type's session object against the ABI's field list
// directly, independent of the golden files.
func TestSessionShapePerType(t *testing.T) {
	for _, typ := range abi.Types() {
		t.Run(string(typ), func(t *testing.T) {
			s := sessionOf(typ, abi.Context{}, abi.TransportWebSocket, map[string]any{})
			var m map[string]any
			if err := json.Unmarshal(mustJSON(t, s), &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"sessionId", "type", "createdAt", "context", "transport", "status", "capabilities", "metadata"} {
				if _, ok := m[k]; !ok {
					t.Errorf("session object lacks %q: %v", k, m)
				}
			}
			if _, ok := m["expiresAt"]; ok {
				t.Errorf("expiresAt is optional and must be omitted when unset: %v", m)
			}
			if m["type"] != string(typ) || m["status"] != "active" {
				t.Errorf("type/status = %v/%v", m["type"], m["status"])
			}
			if ctx, _ := m["context"].(map[string]any); len(ctx) != 0 {
				t.Errorf("empty context should encode as {}: %v", ctx)
			}
		})
	}
}

func indexSession() abi.IndexSession {
	return abi.IndexSession{Source: "claude-code", ID: "agent-1", Path: "/p/s1/subagents/agent-1.jsonl", Project: "/w", Model: "claude-x",
		Created: goldenStamp, Updated: goldenStamp, Title: "find the bug", Messages: 1, Turns: 1, ParentSession: "s1",
		ParentMessage: "m1", ToolCallID: "toolu_1", Task: "find the bug", TaskStatus: "ok", IsSubagent: true,
		Tokens: abi.IndexTokens{Input: 1, Output: 2, Total: 3}, Show: "nexus index show agent-1 --source claude-code"}
}
