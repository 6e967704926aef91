package livetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// NewStateStore opens an empty StateStore for one test.
type NewStateStore func(t *testing.T) live.StateStore

// RunStateStore checks the StateStore contract, which a registry shared by several nodes
// relies on: records read back as written with a revision; every write names the revision it
// read, so of writers that race from one revision (two creates of one id, a close against a
// metadata update, two deletes) exactly one wins and the rest get ErrConflict; List is ordered
// by creation; Watch wakes on every change after a version and ends with its context. It uses
// nothing but the interface, so any store (memory, disk, a key-value bucket) runs it unchanged.
func RunStateStore(t *testing.T, newStore NewStateStore) {
	t.Helper()
	t.Run("GetPut", func(t *testing.T) { testStateGetPut(t, newStore(t)) })
	t.Run("List", func(t *testing.T) { testStateList(t, newStore(t)) })
	t.Run("Delete", func(t *testing.T) { testStateDelete(t, newStore(t)) })
	t.Run("Watch", func(t *testing.T) { testStateWatch(t, newStore(t)) })
	t.Run("RacingCreates", func(t *testing.T) { testStateRacingCreates(t, newStore(t)) })
	t.Run("CreateCloseRace", func(t *testing.T) { testStateCreateCloseRace(t, newStore(t)) })
}

func record(id, created string, status abi.Status) abi.Session {
	return abi.Session{
		SessionID: id, Type: abi.TypeTerminal, CreatedAt: created, Transport: abi.TransportWebSocket,
		Status: status, Context: abi.Context{ProjectID: "p"}, Metadata: map[string]any{},
	}
}

// sameRecord compares records by their wire form: a store that serializes them gives back
// numbers as JSON numbers.
func sameRecord(t *testing.T, got, want abi.Session) {
	t.Helper()
	g, err := json.Marshal(got)
	mustOK(t, err)
	w, err := json.Marshal(want)
	mustOK(t, err)
	if string(g) != string(w) {
		t.Errorf("record\n got  %s\n want %s", g, w)
	}
}

func wantErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

func testStateGetPut(t *testing.T, st live.StateStore) {
	ctx := testCtx(t)
	_, err := st.Get(ctx, "s1")
	wantErr(t, err, live.ErrNoRecord, "Get of a session never put")

	rec := record("s1", "2024-01-02T03:04:05.000Z", abi.StatusActive)
	rev1, err := st.Put(ctx, rec, 0)
	mustOK(t, err)
	if rev1 == 0 {
		t.Fatal("a create returned revision 0")
	}
	got, err := st.Get(ctx, "s1")
	mustOK(t, err)
	sameRecord(t, got.Session, rec)
	if got.Revision != rev1 {
		t.Errorf("Get revision %d, Put returned %d", got.Revision, rev1)
	}
	rec.Metadata["cols"] = 80 // the store keeps what was put, not the caller's map
	got, err = st.Get(ctx, "s1")
	mustOK(t, err)
	if _, shared := got.Session.Metadata["cols"]; shared {
		t.Error("the store shares its record's metadata with the caller")
	}

	_, err = st.Put(ctx, rec, 0)
	wantErr(t, err, live.ErrConflict, "a second create of one id")
	_, err = st.Put(ctx, rec, rev1+100)
	wantErr(t, err, live.ErrConflict, "a write naming a revision the record never had")
	_, err = st.Put(ctx, record("nobody", "2024", abi.StatusActive), 5)
	if err == nil {
		t.Error("an update of a record that does not exist succeeded")
	}

	rec.Status = abi.StatusClosed
	rev2, err := st.Put(ctx, rec, rev1)
	mustOK(t, err)
	if rev2 <= rev1 {
		t.Errorf("revision went from %d to %d", rev1, rev2)
	}
	_, err = st.Put(ctx, rec, rev1)
	wantErr(t, err, live.ErrConflict, "a write from a stale revision")
	got, err = st.Get(ctx, "s1")
	mustOK(t, err)
	sameRecord(t, got.Session, rec)
	if got.Revision != rev2 {
		t.Errorf("revision %d after the update, want %d", got.Revision, rev2)
	}
}

func testStateList(t *testing.T, st live.StateStore) {
	ctx := testCtx(t)
	rs, err := st.List(ctx)
	mustOK(t, err)
	if len(rs) != 0 {
		t.Fatalf("an empty store lists %d records", len(rs))
	}
	// Put out of order: List orders by creation time, then id.
	for _, r := range []abi.Session{
		record("c", "2024-01-03T00:00:00.000Z", abi.StatusActive),
		record("a", "2024-01-01T00:00:00.000Z", abi.StatusClosed),
		record("b2", "2024-01-02T00:00:00.000Z", abi.StatusActive),
		record("b1", "2024-01-02T00:00:00.000Z", abi.StatusPaused),
	} {
		_, err := st.Put(ctx, r, 0)
		mustOK(t, err)
	}
	rs, err = st.List(ctx)
	mustOK(t, err)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.Session.SessionID)
		if got, err := st.Get(ctx, r.Session.SessionID); err != nil || got.Revision != r.Revision {
			t.Errorf("%s: listed at revision %d, Get says %d (%v)", r.Session.SessionID, r.Revision, got.Revision, err)
		}
	}
	if fmt.Sprint(ids) != "[a b1 b2 c]" {
		t.Errorf("List = %v", ids)
	}
}

func testStateDelete(t *testing.T, st live.StateStore) {
	ctx := testCtx(t)
	rev, err := st.Put(ctx, record("s1", "2024", abi.StatusClosed), 0)
	mustOK(t, err)
	wantErr(t, st.Delete(ctx, "s1", rev+1), live.ErrConflict, "a delete from a wrong revision")
	if _, err := st.Get(ctx, "s1"); err != nil {
		t.Fatalf("a refused delete removed the record: %v", err)
	}
	mustOK(t, st.Delete(ctx, "s1", rev))
	_, err = st.Get(ctx, "s1")
	wantErr(t, err, live.ErrNoRecord, "Get after Delete")
	wantErr(t, st.Delete(ctx, "s1", rev), live.ErrNoRecord, "a second delete")
	if rs, err := st.List(ctx); err != nil || len(rs) != 0 {
		t.Errorf("List after Delete = %d records, %v", len(rs), err)
	}
	// The id is free again.
	_, err = st.Put(ctx, record("s1", "2024", abi.StatusActive), 0)
	mustOK(t, err)
}

func testStateWatch(t *testing.T, st live.StateStore) {
	ctx := testCtx(t)
	now, err := st.Watch(ctx, 0)
	mustOK(t, err)
	if len(now.Records) != 0 || now.Version == 0 {
		t.Fatalf("an empty store watches %d records at version %d (never 0)", len(now.Records), now.Version)
	}

	type result struct {
		rs  live.Records
		err error
	}
	watch := func(after uint64) chan result {
		ch := make(chan result, 1)
		go func() {
			rs, err := st.Watch(ctx, after)
			ch <- result{rs, err}
		}()
		return ch
	}
	// A watcher from the current version waits for the next change and sees it.
	w := watch(now.Version)
	rev, err := st.Put(ctx, record("s1", "2024", abi.StatusActive), 0)
	mustOK(t, err)
	got := <-w
	mustOK(t, got.err)
	if got.rs.Version <= now.Version || len(got.rs.Records) != 1 || got.rs.Records[0].Revision != rev {
		t.Fatalf("after a create the watcher got %+v (from version %d)", got.rs, now.Version)
	}
	// An update and a delete move the version on too.
	w = watch(got.rs.Version)
	rec := record("s1", "2024", abi.StatusClosed)
	rev, err = st.Put(ctx, rec, rev)
	mustOK(t, err)
	next := <-w
	mustOK(t, next.err)
	if next.rs.Version <= got.rs.Version || next.rs.Records[0].Session.Status != abi.StatusClosed {
		t.Fatalf("after an update the watcher got %+v", next.rs)
	}
	w = watch(next.rs.Version)
	mustOK(t, st.Delete(ctx, "s1", rev))
	last := <-w
	mustOK(t, last.err)
	if last.rs.Version <= next.rs.Version || len(last.rs.Records) != 0 {
		t.Fatalf("after a delete the watcher got %+v", last.rs)
	}
	// A watcher behind the version answers at once; one whose context ends says so.
	if rs, err := st.Watch(ctx, now.Version); err != nil || rs.Version != last.rs.Version {
		t.Errorf("a watcher behind: %+v, %v", rs, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() {
		_, err := st.Watch(cctx, last.rs.Version)
		ended <- err
	}()
	cancel()
	wantErr(t, <-ended, context.Canceled, "a watch whose context ended")
}

// testStateRacingCreates: of many callers creating one id at once, exactly one wins.
func testStateRacingCreates(t *testing.T, st live.StateStore) {
	ctx := testCtx(t)
	const callers = 16
	var wins, conflicts int
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rec := record("s1", "2024", abi.StatusActive)
			rec.Metadata["by"] = fmt.Sprint(i)
			_, err := st.Put(ctx, rec, 0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, live.ErrConflict):
				conflicts++
			default:
				t.Errorf("caller %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins != 1 || conflicts != callers-1 {
		t.Errorf("%d creates of one id won, %d conflicted: want exactly one winner", wins, conflicts)
	}
}

// testStateCreateCloseRace: callers that read one revision and then write it — closes and
// metadata updates, as two nodes would — race; exactly one wins, and the record is the
// winner's.
func testStateCreateCloseRace(t *testing.T, st live.StateStore) {
	ctx := testCtx(t)
	for round := range 20 {
		id := fmt.Sprint("s", round)
		rev, err := st.Put(ctx, record(id, "2024", abi.StatusActive), 0)
		mustOK(t, err)
		const callers = 8
		results := make([]error, callers)
		writes := make([]abi.Session, callers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			rec := record(id, "2024", abi.StatusActive)
			if i%2 == 0 {
				rec.Status = abi.StatusClosed
				rec.Metadata["closeReason"] = fmt.Sprint("closer ", i)
			} else {
				rec.Metadata["cols"] = fmt.Sprint("updater ", i)
			}
			writes[i] = rec
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, results[i] = st.Put(ctx, rec, rev)
			}()
		}
		close(start)
		wg.Wait()
		var won []int
		for i, err := range results {
			switch {
			case err == nil:
				won = append(won, i)
			case !errors.Is(err, live.ErrConflict):
				t.Fatalf("round %d: caller %d: %v", round, i, err)
			}
		}
		if len(won) != 1 {
			t.Fatalf("round %d: callers %v won from revision %d: want exactly one", round, won, rev)
		}
		got, err := st.Get(ctx, id)
		mustOK(t, err)
		sameRecord(t, got.Session, writes[won[0]])
	}
}
