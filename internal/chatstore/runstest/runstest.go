// Package runstest is the contract of a chatstore.SubagentRuns (the subagent run records):
// runs.json on one node and the cluster's bucket on JetStream both run Run.
package runstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/testkit"
)

// Backing makes an empty backing store and returns how to open an instance on it: every
// instance answers for the same runs, as two processes, or two nodes, would. The test closes
// what open returns (Cleanup).
type Backing func(t *testing.T) (open func(t *testing.T) chatstore.SubagentRuns)

// Run runs the contract on the stores newBacking makes.
func Run(t *testing.T, newBacking Backing) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) chatstore.SubagentRuns)
	}{
		{"PutPatchList", testPutPatchList},
		{"CheckedOnce", testCheckedOnce},
		{"Reopen", testReopen},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newBacking(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return c
}

func run(id string, created int64) chatstore.SubagentRunRecord {
	return chatstore.SubagentRunRecord{RunID: id, ChildSessionKey: "agent:main:subagent:" + id, RequesterSessionKey: "agent:main:main",
		Task: "explore", Cleanup: "keep", CreatedAt: created}
}

// testPutPatchList: a run is put once (unknown members kept); a patch merges and must leave a
// valid record; List filters and orders newest first.
func testPutPatchList(t *testing.T, open func(t *testing.T) chatstore.SubagentRuns) {
	g := open(t)
	c := ctx(t)
	r1 := run("r1", 100)
	r1.RequesterOrigin = &chatstore.DeliveryContext{Channel: "telegram", To: "u1"}
	r1.Extra = map[string]json.RawMessage{"requesterDisplayKey": json.RawMessage(`"main"`)}
	if err := g.PutChecked(c, r1, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.PutChecked(c, r1, nil); !errors.Is(err, chatstore.ErrExists) {
		t.Errorf("second put: %v", err)
	}
	r2 := run("r2", 200)
	r2.ChildSessionKey, r2.Cleanup = "agent:other:subagent:r2", "delete"
	if err := g.PutChecked(c, r2, nil); err != nil {
		t.Fatal(err)
	}
	if err := g.PutChecked(c, chatstore.SubagentRunRecord{RunID: "r3"}, nil); !errors.Is(err, chatstore.ErrInvalid) {
		t.Errorf("invalid put: %v", err)
	}
	got, err := g.Patch(c, "r1", map[string]any{"startedAt": 10, "endedAt": 20, "outcome": map[string]any{"status": "error", "error": "boom"}, "childSessionId": "s-child"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome == nil || got.Outcome.Status != chatstore.OutcomeError || got.EndedAt != 20 || got.Task != "explore" ||
		got.ChildSessionID != "s-child" || string(got.Extra["requesterDisplayKey"]) != `"main"` || got.RequesterOrigin.Channel != "telegram" {
		t.Errorf("patched %+v", got)
	}
	for name, patch := range map[string]any{
		"bad cleanup":  map[string]any{"cleanup": "shred"},
		"bad outcome":  map[string]any{"outcome": map[string]any{"status": "meh"}},
		"runId change": map[string]any{"runId": "r9"},
		"wrong type":   map[string]any{"task": 5},
	} {
		if _, err := g.Patch(c, "r1", patch); !errors.Is(err, chatstore.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := g.Patch(c, "nope", map[string]any{"task": "x"}); !errors.Is(err, chatstore.ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	for _, tc := range []struct {
		f    chatstore.SubagentFilter
		want string
	}{
		{chatstore.SubagentFilter{}, "[r2 r1]"},
		{chatstore.SubagentFilter{Active: true}, "[r2]"},
		{chatstore.SubagentFilter{ChildSessionKey: "agent:main:subagent:r1"}, "[r1]"},
		{chatstore.SubagentFilter{RequesterSessionKey: "agent:main:main"}, "[r2 r1]"},
		{chatstore.SubagentFilter{RequesterSessionKey: "nobody"}, "[]"},
	} {
		list, err := g.List(tc.f)
		if err != nil || ids(list) != tc.want {
			t.Errorf("List(%+v) = %s, %v; want %s", tc.f, ids(list), err, tc.want)
		}
	}
	list, _ := g.List(chatstore.SubagentFilter{ChildSessionKey: "agent:main:subagent:r1"})
	if len(list) != 1 || list[0].EndedAt != 20 {
		t.Errorf("listed after the patch: %+v", list)
	}
}

func ids(runs []chatstore.SubagentRunRecord) string {
	out := make([]string, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.RunID)
	}
	return fmt.Sprint(out)
}

// testCheckedOnce: callers on two instances that check a cap and put a run at once never pass
// the cap together; a refused put writes nothing and returns the check's error as it is.
func testCheckedOnce(t *testing.T, open func(t *testing.T) chatstore.SubagentRuns) {
	gs := []chatstore.SubagentRuns{open(t), open(t)}
	const callers, limit = 16, 5
	errFull := errors.New("full")
	var wg sync.WaitGroup
	var mu sync.Mutex
	put, full := 0, 0
	for i := range callers {
		wg.Go(func() {
			rec := run(fmt.Sprint("r", i), int64(i+1))
			err := gs[i%2].PutChecked(context.Background(), rec, func(runs []chatstore.SubagentRunRecord) error {
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
	if put != limit || full != callers-limit {
		t.Fatalf("put %d, refused %d; want %d, %d", put, full, limit, callers-limit)
	}
	for _, g := range gs {
		// Another instance's puts may reach a copy a moment later.
		testkit.Eventually(t, "every instance lists the runs put", func() bool {
			runs, err := g.List(chatstore.SubagentFilter{})
			return err == nil && len(runs) == limit
		})
	}
}

// testReopen: an instance opened on the backing store lists every run put before, as patched.
func testReopen(t *testing.T, open func(t *testing.T) chatstore.SubagentRuns) {
	g := open(t)
	c := ctx(t)
	for i := range 3 {
		if err := g.PutChecked(c, run(fmt.Sprint("r", i), int64(i+1)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Patch(c, "r1", map[string]any{"endedAt": 7}); err != nil {
		t.Fatal(err)
	}
	g2 := open(t)
	if runs, err := g2.List(chatstore.SubagentFilter{Active: true}); err != nil || ids(runs) != "[r2 r0]" {
		t.Fatalf("an instance opened after the puts lists %s, %v", ids(runs), err)
	}
	if err := g2.PutChecked(c, run("r1", 9), nil); !errors.Is(err, chatstore.ErrExists) {
		t.Fatalf("put again on the second: %v", err)
	}
}
