package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

// newRegistry builds a registry that is shut down when the test ends.
func newRegistry(t *testing.T, cfg live.Config, kinds ...live.Kind) *live.Registry {
	t.Helper()
	r, err := live.New(context.Background(), cfg, kinds...)
	mustOK(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r
}

func newBackend(t *testing.T, cfg live.Config, kinds ...live.Kind) livetest.Backend {
	t.Helper()
	r, err := live.New(context.Background(), cfg, kinds...)
	mustOK(t, err)
	return r
}

func openDisk(t *testing.T, dir string) live.Store {
	t.Helper()
	s, err := live.OpenDiskStore(dir, live.DiskOptions{SyncInterval: 10 * time.Millisecond})
	mustOK(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRegistryContract runs the registry contract on both stores: memory, and disk (where it
// also restarts).
func TestRegistryContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		livetest.Run(t, livetest.Harness{New: newBackend})
	})
	t.Run("disk", func(t *testing.T) {
		livetest.Run(t, livetest.Harness{New: newBackend, Store: openDisk})
	})
}

// TestStateStoreContract runs the record store's contract on both stores.
func TestStateStoreContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		livetest.RunStateStore(t, func(*testing.T) live.StateStore { return live.NewMemoryStore() })
	})
	t.Run("disk", func(t *testing.T) {
		livetest.RunStateStore(t, func(t *testing.T) live.StateStore { return openDisk(t, t.TempDir()) })
	})
}

// TestEventLogContract runs the event log contract on both logs.
func TestEventLogContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		livetest.RunEventLog(t, func(_ *testing.T, l live.LogLimits) live.EventLog { return live.NewMemoryLog(l) })
	})
	t.Run("disk", func(t *testing.T) {
		n := 0
		livetest.RunEventLog(t, func(t *testing.T, l live.LogLimits) live.EventLog {
			st := openDisk(t, t.TempDir())
			n++
			_, err := st.Put(context.Background(), abi.Session{SessionID: "s", Status: abi.StatusActive}, 0)
			mustOK(t, err)
			log, err := st.CreateLog(context.Background(), "s", l)
			mustOK(t, err)
			return log
		})
	})
}

// TestKindContract runs the kind contract on the fake kind the other tests use.
func TestKindContract(t *testing.T) {
	var kinds []*livetest.FakeKind
	probe := func(t *testing.T, id string) livetest.Probe {
		for _, k := range kinds {
			if inst := k.Instance(id); inst != nil {
				return inst
			}
		}
		t.Fatalf("no fake session %s", id)
		return nil
	}
	livetest.RunKind(t, livetest.KindHarness{
		New: func(*testing.T) live.Kind {
			k := livetest.NewFakeKind(abi.TypeTerminal, true)
			k.Refuse = func(req abi.CreateRequest) error {
				if req.Context.ProjectID == "" {
					return abi.Errorf(abi.CodeInvalidArgument, "", "a project is needed")
				}
				return nil
			}
			kinds = append(kinds, k)
			return k
		},
		Request:     abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}},
		BadRequests: []abi.CreateRequest{{Type: abi.TypeTerminal}},
		Print: func(t *testing.T, _ live.Backend, id, text string) {
			probe(t, id).Emit([]byte(text))
		},
		Exit: func(t *testing.T, _ live.Backend, id string, code int) {
			probe(t, id).End(abi.CloseExited, &code)
		},
	})
}

// TestSinkContext: a kind's sink carries the session's lifetime, which Start's ctx does not: it
// outlives the request that created the session and ends once the session has closed.
func TestSinkContext(t *testing.T) {
	for _, how := range []string{"close", "ended", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			kind := livetest.NewFakeKind(abi.TypeTerminal, false)
			r, err := live.New(context.Background(), live.Config{IdleTimeout: -1}, kind)
			mustOK(t, err)
			t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
			reqCtx, endRequest := context.WithCancel(context.Background())
			s, err := r.Create(reqCtx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
			mustOK(t, err)
			endRequest()
			life := kind.Instance(s.SessionID).Sink().Context()
			if err := life.Err(); err != nil {
				t.Fatalf("the lifetime ended with the create request: %v", err)
			}
			switch how {
			case "close":
				_, err = r.Close(testCtx(t), s.SessionID, abi.CloseRequested)
				mustOK(t, err)
			case "ended":
				kind.Instance(s.SessionID).End(abi.CloseExited, nil)
			case "shutdown":
				mustOK(t, r.Shutdown(testCtx(t)))
			}
			select {
			case <-life.Done():
			case <-testCtx(t).Done():
				t.Fatal("the session closed, its lifetime did not end")
			}
		})
	}
}
