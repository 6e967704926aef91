package index_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
)

// TestNexusSubagentLinks: a nexus subagent, written as nexus writes it (sessions.json by
// chatstore, runs.json by chatstore's registry, the transcripts in pi's format), is linked to
// its parent's session, reply and sessions_spawn call with its task and its run's status
// (pending, then the outcome), is not taken for a fork of its parent (its header names the
// parent's transcript), and stays linked once archived (gone from sessions.json).
func TestNexusSubagentLinks(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	dir := e.roots["nexus"][0]
	store, err := chatstore.Open(dir, chatstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := chatstore.OpenSubagents(filepath.Join(filepath.Dir(dir), "subagents"), nil)
	if err != nil {
		t.Fatal(err)
	}
	const parentKey, childKey, runID = "agent:main:ai:boss", "agent:main:subagent:r-1", "r-1"
	parent, err := store.Create(ctx, parentKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	child, err := store.Create(ctx, childKey, map[string]any{"spawnedBy": parentKey, "parentSessionId": parent.SessionID,
		"parentMessageId": "a0000001", "toolCallId": "call_spawn", "taskDescription": "count the files", "taskStatus": "running",
		"isSubagent": true, "label": "worker"})
	if err != nil {
		t.Fatal(err)
	}
	parentPath, childPath := store.TranscriptPath(parent.SessionID), store.TranscriptPath(child.SessionID)
	write(t, parentPath, lines(
		fmt.Sprintf(`{"type":"session","version":3,"id":%q,"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`, parent.SessionID),
		`{"type":"message","id":"u0000001","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"delegate the count","timestamp":1}}`,
		`{"type":"message","id":"a0000001","parentId":"u0000001","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"call_spawn","name":"sessions_spawn","arguments":{"task":"count the files","label":"worker"}}],"stopReason":"toolUse"}}`,
		fmt.Sprintf(`{"type":"message","id":"t0000001","parentId":"a0000001","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"toolResult","toolCallId":"call_spawn","toolName":"sessions_spawn","content":[{"type":"text","text":%q}],"isError":false,"timestamp":3}}`,
			fmt.Sprintf(`{"runId":%q,"childSessionKey":%q,"childSessionId":%q,"sessionId":"live-1","status":"started"}`, runID, childKey, child.SessionID)),
	))
	write(t, childPath, lines(
		fmt.Sprintf(`{"type":"session","version":3,"id":%q,"timestamp":"2026-01-01T00:00:02.500Z","cwd":"/w","parentSession":%q}`, child.SessionID, parentPath),
		`{"type":"message","id":"c0000001","parentId":null,"timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"user","content":"count the files","timestamp":4}}`,
	))
	if err := runs.Put(ctx, chatstore.SubagentRunRecord{RunID: runID, ChildSessionKey: childKey, RequesterSessionKey: parentKey,
		Task: "count the files", Cleanup: "delete", Label: "worker", CreatedAt: 1, StartedAt: 1,
		ChildSessionID: child.SessionID, ToolCallID: "call_spawn", ParentMessageID: "a0000001"}); err != nil {
		t.Fatal(err)
	}
	check := func(when, status string) {
		t.Helper()
		s := show(t, e.ix, child.SessionID).Session
		if !s.IsSubagent || s.ParentSession != parent.SessionID || s.ParentMessage != "a0000001" || s.ToolCallID != "call_spawn" ||
			s.Task != "count the files" || s.TaskStatus != status || s.ForkOrigin != "" {
			t.Fatalf("%s: the child %+v", when, s)
		}
		if p := show(t, e.ix, parent.SessionID); fmt.Sprint(p.Children) != "["+child.SessionID+"]" {
			t.Fatalf("%s: the parent's children %v", when, p.Children)
		}
	}
	e.sync("nexus")
	check("running", "pending")

	// The run ends: runs.json says so, then the child's transcript gets its last entries.
	if _, err := runs.Patch(ctx, runID, map[string]any{"endedAt": 9, "outcome": map[string]any{"status": "timeout", "error": "no answer"}}); err != nil {
		t.Fatal(err)
	}
	appendFile(t, childPath, lines(`{"type":"custom","id":"c0000002","parentId":"c0000001","timestamp":"2026-01-01T00:00:09.000Z","customType":"nexus.subagent.end","data":{"runId":"r-1"}}`))
	e.sync("nexus")
	check("ended", "timeout")

	// cleanup delete: the child leaves sessions.json, its transcript becomes an archive.
	if _, err := store.Delete(ctx, childKey); err != nil {
		t.Fatal(err)
	}
	e.sync("nexus")
	check("archived", "timeout")
}
