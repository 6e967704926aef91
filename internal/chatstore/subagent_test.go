package chatstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

func TestSubagentRegistry(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "subagents")
	c := newClock(t0)
	g, err := OpenSubagents(dir, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	rec := SubagentRunRecord{
		RunID:               "r1",
		ChildSessionKey:     "agent:main:subagent:r1",
		RequesterSessionKey: "agent:main:main",
		RequesterOrigin:     &DeliveryContext{Channel: "telegram", To: "u1"},
		Task:                "explore the codebase",
		Cleanup:             "keep",
		Label:               "explore",
		Extra:               map[string]json.RawMessage{"requesterDisplayKey": json.RawMessage(`"main"`)},
	}
	if err := g.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := g.Put(ctx, rec); !errors.Is(err, ErrExists) {
		t.Errorf("second put: %v", err)
	}
	c.Advance(1000)
	rec2 := rec
	rec2.RunID, rec2.ChildSessionKey, rec2.Cleanup, rec2.Extra = "r2", "agent:main:subagent:r2", "delete", nil
	rec2.CreatedAt = t0.UnixMilli() + 5
	if err := g.Put(ctx, rec2); err != nil {
		t.Fatal(err)
	}
	got, err := g.Get("r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt != t0.UnixMilli() || got.RequesterOrigin.Channel != "telegram" || string(got.Extra["requesterDisplayKey"]) != `"main"` {
		t.Errorf("Get = %+v", got)
	}
	got, err = g.Patch(ctx, "r1", map[string]any{"startedAt": 10, "endedAt": 20, "outcome": map[string]any{"status": "error", "error": "boom"}, "archiveAtMs": 99})
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome == nil || got.Outcome.Status != OutcomeError || got.EndedAt != 20 || got.Task != rec.Task {
		t.Errorf("patched = %+v", got)
	}
	// nexus's links of a run are fields of their own, not Extra.
	got, err = g.Patch(ctx, "r1", map[string]any{"childSessionId": "s-child", "toolCallId": "call_1", "parentMessageId": "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.ChildSessionID != "s-child" || got.ToolCallID != "call_1" || got.ParentMessageID != "m-1" || len(got.Extra) != 1 {
		t.Errorf("links = %+v", got)
	}
	bad := []struct {
		name  string
		patch any
	}{
		{"bad cleanup", map[string]any{"cleanup": "shred"}},
		{"bad outcome", map[string]any{"outcome": map[string]any{"status": "meh"}}},
		{"runId change", map[string]any{"runId": "r9"}},
		{"task wrong type", map[string]any{"task": 5}},
	}
	for _, tc := range bad {
		if _, err := g.Patch(ctx, "r1", tc.patch); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := g.Patch(ctx, "nope", map[string]any{"task": "x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	if err := g.Put(ctx, SubagentRunRecord{RunID: "r3"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid put: %v", err)
	}

	list, err := g.List(SubagentFilter{})
	if err != nil || len(list) != 2 || list[0].RunID != "r2" {
		t.Errorf("List = %+v, %v", list, err)
	}
	if list, _ := g.List(SubagentFilter{Active: true}); len(list) != 1 || list[0].RunID != "r2" {
		t.Errorf("active = %+v", list)
	}
	if list, _ := g.List(SubagentFilter{ChildSessionKey: "agent:main:subagent:r1"}); len(list) != 1 {
		t.Errorf("by child = %+v", list)
	}
	if err := g.Delete(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx, "r2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	var file struct {
		Version int                        `json:"version"`
		Runs    map[string]json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal([]byte(readFile(t, g.Path())), &file); err != nil || file.Version != 1 || len(file.Runs) != 1 {
		t.Errorf("runs.json = %s (%v)", readFile(t, g.Path()), err)
	}
}

func TestSubagentUnknownFieldsKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SubagentsFileName)
	orig := `{
  "version": 2,
  "futureTop": {"a": [1, 2]},
  "runs": {
    "r1": {
      "runId": "r1",
      "childSessionKey": "agent:main:subagent:r1",
      "requesterSessionKey": "agent:main:main",
      "task": "t",
      "cleanup": "keep",
      "createdAt": 1,
      "cleanupHandled": false,
      "model":   "x <y>"
    }
  }
}
`
	writeFile(t, path, orig)
	g, err := OpenSubagents(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Patch(context.Background(), "r1", map[string]any{"startedAt": 5}); err != nil {
		t.Fatal(err)
	}
	var before, after struct {
		Version json.RawMessage            `json:"version"`
		Future  json.RawMessage            `json:"futureTop"`
		Runs    map[string]json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal([]byte(orig), &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(readFile(t, path)), &after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before.Version, after.Version) || !bytes.Equal(before.Future, after.Future) {
		t.Errorf("top members changed: %s %s", after.Version, after.Future)
	}
	var b, a map[string]json.RawMessage
	_ = json.Unmarshal(before.Runs["r1"], &b)
	_ = json.Unmarshal(after.Runs["r1"], &a)
	for k, v := range b {
		if !bytes.Equal(a[k], v) {
			t.Errorf("r1.%s = %s, want %s", k, a[k], v)
		}
	}
	if string(a["startedAt"]) != "5" {
		t.Errorf("startedAt = %s", a["startedAt"])
	}
}

// TestSubagentPutCheckedIsOneTransaction: callers that check a cap and put a run at the same
// time, from two handles on the file (as two processes would), never pass the cap together; a
// refused put writes nothing and returns the check's error as it is.
func TestSubagentPutCheckedIsOneTransaction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "subagents")
	var gs [2]*Subagents
	for i := range gs {
		g, err := OpenSubagents(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = g
	}
	const callers, limit = 24, 5
	errFull := errors.New("full")
	var wg sync.WaitGroup
	var mu sync.Mutex
	put, full := 0, 0
	for i := range callers {
		wg.Go(func() {
			rec := SubagentRunRecord{RunID: fmt.Sprintf("r%d", i), ChildSessionKey: fmt.Sprintf("agent:main:subagent:r%d", i),
				RequesterSessionKey: "agent:main:main", Cleanup: "keep"}
			err := gs[i%2].PutChecked(context.Background(), rec, func(runs []SubagentRunRecord) error {
				if len(runs) >= limit {
					return errFull
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				put++
			case errors.Is(err, errFull) && err.Error() == errFull.Error(): // the check's error, as it is
				full++
			default:
				t.Errorf("put %s: %v", rec.RunID, err)
			}
		})
	}
	wg.Wait()
	runs, err := gs[0].List(SubagentFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if put != limit || full != callers-limit || len(runs) != limit {
		t.Fatalf("put %d, refused %d, recorded %d; want %d, %d, %d", put, full, len(runs), limit, callers-limit, limit)
	}
}
