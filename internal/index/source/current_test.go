package source

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cx171 and cc21 are the samples the current versions of the tools wrote (the READMEs beside
// them say how).
const (
	cx171 = "codex/cx-0.171.0/rollout-2026-11-28T18-16-10-01a2235f-2f82-7e31-b5ae-7378a54c9d7f.jsonl"
	cc21  = "claude-code/cc-2.1.197/77f1762e-c969-4294-b33e-f31b7a696ffb"
)

func openSample(t *testing.T, file string, offset int64) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join(testdata, file))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	return f
}

func parseSample(t *testing.T, src Source, file string) *Result {
	t.Helper()
	res, err := ParseFile(context.Background(), src, filepath.Join(testdata, file), 0)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestCodex0171Calls: each call of Codex 0.171's rollout is attached to its own turn (the
// model's first action in each turn is a call: its anchor is the turn's prompt, not the reply
// of the turn before); MCP calls are named mcp__<server>__<tool> as Claude Code names them,
// their status is Codex's (item_completed: failed), and their result is the text of the
// content array, not its JSON.
func TestCodex0171Calls(t *testing.T) {
	res := parseSample(t, Codex{}, cx171)
	byID := map[string]Message{}
	for _, m := range res.Messages {
		byID[m.ID] = m
	}
	want := []struct {
		name, status, prompt, result string
	}{
		{"exec_command", StatusOK, "please run the command: echo quokkamarker", "Process exited with code 0"},
		{"mcp__nexus__session_list", StatusOK, "list the open nexus shells for the dingomarker job", `{"sessions":[]}`},
		{"mcp__nexus__session_exec", StatusError, "use the nexus shell to count the bilbymarker lines", "Wall time: 0.0024 seconds\nOutput:\nno session \"\": it was destroyed"},
	}
	if len(res.ToolCalls) != len(want) {
		t.Fatalf("%d calls: %+v", len(res.ToolCalls), res.ToolCalls)
	}
	for i, w := range want {
		tc := res.ToolCalls[i]
		m, ok := byID[tc.MessageID]
		if tc.Name != w.name || tc.Status != w.status || !ok || m.Text != w.prompt || m.Timestamp.IsZero() {
			t.Errorf("call %d: %s %s under %q (%+v), want %s %s under %q", i, tc.Name, tc.Status, tc.MessageID, m, w.name, w.status, w.prompt)
		}
		if !strings.Contains(tc.Result, w.result) {
			t.Errorf("call %d result %q, want it to hold %q", i, tc.Result, w.result)
		}
	}
	if len(res.Skipped) != 0 {
		t.Errorf("skipped %v: token_usage_record and world_state are Codex's own records", res.Skipped)
	}
	// The environment context is a user message the tool wrote: context, not turn 1.
	for _, m := range res.Messages {
		injected := strings.HasPrefix(m.Text, "<environment_context>")
		if m.Role == "user" && (m.Context != injected || (injected && m.Turn != 0)) {
			t.Errorf("message %q: context %v turn %d", m.Text[:min(len(m.Text), 40)], m.Context, m.Turn)
		}
	}
}

// TestCodexPieceAnchor: read a line at a time, the calls find the same messages and statuses
// (the anchor and the failed calls carry from piece to piece).
func TestCodexPieceAnchor(t *testing.T) {
	whole := parseSample(t, Codex{}, cx171)
	var got []ToolCall
	var state any
	offset := int64(0)
	for {
		f := openSample(t, cx171, offset)
		res, err := Codex{}.Parse(context.Background(), Piece(f, 1, state), cx171, offset)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.ToolCalls...)
		if !res.More {
			break
		}
		offset, state = res.Offset, res.State()
	}
	// A piece holds a call or its output: merge them by id as the index does.
	merged := map[string]ToolCall{}
	for _, tc := range got {
		m := merged[tc.ID]
		if tc.Name != "" {
			m.Name, m.MessageID = tc.Name, tc.MessageID
		}
		if tc.Status != StatusPending {
			m.Status, m.Result = tc.Status, tc.Result
		}
		merged[tc.ID] = m
	}
	for _, w := range whole.ToolCalls {
		if g := merged[w.ID]; g.Name != w.Name || g.MessageID != w.MessageID || g.Status != w.Status || g.Result != w.Result {
			t.Errorf("in pieces %+v, whole %+v", g, w)
		}
	}
}

// TestCodexOutputWithoutCall: an output without call_id (the goals feature writes them)
// answers no call: no phantom call, and not a bad line.
func TestCodexOutputWithoutCall(t *testing.T) {
	data := strings.Join([]string{
		`{"timestamp":"2026-11-28T18:16:10.413Z","type":"session_meta","payload":{"id":"01a2235f-2f82-7e31-b5ae-7378a54c9d7f","cwd":"/tmp/cxproj"}}`,
		`{"timestamp":"2026-11-28T18:16:11.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}}`,
		`{"timestamp":"2026-11-28T18:16:12.000Z","type":"response_item","payload":{"type":"function_call_output","output":"goal: keep going"}}`,
	}, "\n") + "\n"
	res := parseBytes(t, Codex{}, []byte(data), 0)
	if len(res.ToolCalls) != 0 || len(res.Skipped) != 0 {
		t.Fatalf("calls %+v, skipped %v", res.ToolCalls, res.Skipped)
	}
}

// TestClaudeCodeSpawnCall: a 2.1 sidechain names the call that spawned it through its
// .meta.json (toolUseId), at every depth.
func TestClaudeCodeSpawnCall(t *testing.T) {
	for agent, call := range map[string]string{
		"agent-a583790338c5b5bf5": "lA9fcd22bmzAz9SIf0sdr8aU08qRn8cK", // depth 1: a call of the top session
		"agent-ad3fbc8e4971a7e3e": "6sCwd9FTDBpTr0CraKSiibF4cyC0W2Hv", // depth 2: a call of agent-a583…
		"agent-a126b3e46bd72d2e8": "U25yoFCPU6THjgYWevndjxVkYBntlZJp", // depth 4
	} {
		res := parseSample(t, ClaudeCode{}, cc21+"/subagents/"+agent+".jsonl")
		if res.Session.ToolCallID != call || !res.Session.IsSubagent || res.Session.ID != agent {
			t.Errorf("%s: %+v", agent, res.Session)
		}
	}
}

// TestClaudeCodeInjected: the lines Claude Code writes itself (meta lines, update notices, a
// local command's output) are context: no turn, no title.
func TestClaudeCodeInjected(t *testing.T) {
	res := parseSample(t, ClaudeCode{}, "claude-code/mclaude/b8d44276-1f04-4220-98c0-b410f7c58ff5.jsonl")
	var context, typed []string
	for _, m := range res.Messages {
		if m.Role != "user" {
			continue
		}
		first := strings.SplitN(m.Text, "\n", 2)[0]
		if m.Context {
			context = append(context, first)
		} else {
			typed = append(typed, first)
		}
	}
	if len(context) != 3 || !strings.HasPrefix(context[0], "Update available!") || len(typed) != 4 || typed[0] != "you can upgrade by running" {
		t.Fatalf("context %q, typed %q", context, typed)
	}
}
