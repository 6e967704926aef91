// Package triggertest is the contract every trigger.JobStore and trigger.Claimer passes: the
// SQLite store of one node and the shared store of a cluster (internal/triggerkv) alike.
package triggertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/trigger"
)

// Open opens n handles on one new, empty store (n nodes of a cluster, or n gateways on one
// file), each reading the clock now. The handles are closed by the test's cleanup.
type Open func(t *testing.T, now func() time.Time, n int) []trigger.JobStore

// OpenClaims opens n handles on one new claimer.
type OpenClaims func(t *testing.T, n int) []trigger.Claimer

// Run checks the JobStore contract: jobs and hooks added through one handle are seen through
// the others, ids are unique, a removed job or hook is gone everywhere, runs recorded at once
// through several handles are all counted, and a signature is claimed once until given back.
func Run(t *testing.T, open Open) {
	t.Helper()
	t.Run("Jobs", func(t *testing.T) { testJobs(t, open) })
	t.Run("RecordRun", func(t *testing.T) { testRecordRun(t, open) })
	t.Run("Hooks", func(t *testing.T) { testHooks(t, open) })
	t.Run("Signatures", func(t *testing.T) { testSignatures(t, open) })
}

// RunClaims checks the Claimer contract: of callers that claim one firing at once through
// several handles, exactly one wins; a firing claimed is not claimed again.
func RunClaims(t *testing.T, open OpenClaims) {
	t.Helper()
	const handles, callers, firings = 3, 4, 10
	cs := open(t, handles)
	ctx := ctxFor(t)
	wins := make([]int, firings)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, handles*callers*firings)
	for _, c := range cs {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for f := range firings {
					won, err := c.Claim(ctx, fmt.Sprintf("cron_job-%d_%d", f, 1764000000000+int64(f)))
					if err != nil {
						errs <- err
						return
					}
					if won {
						mu.Lock()
						wins[f]++
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for f, n := range wins {
		if n != 1 {
			t.Errorf("firing %d claimed %d times by %d callers, want once", f, n, handles*callers)
		}
	}
	if won, err := cs[0].Claim(ctx, "cron_job-0_1764000000000"); err != nil || won {
		t.Fatalf("a claimed firing claimed again: %v %v", won, err)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return ctx
}

func fixedClock() func() time.Time {
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	return func() time.Time { return at }
}

func isCode(err error, code abi.Code) bool {
	var e *abi.Error
	return errors.As(err, &e) && e.Code == code
}

func testJobs(t *testing.T, open Open) {
	ctx := ctxFor(t)
	st := open(t, fixedClock(), 2)
	a, b := st[0], st[1]
	j, err := a.AddJob(ctx, trigger.Job{ID: "nightly", Schedule: "0 3 * * *", Message: " check the build "}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != trigger.KindCron || j.Message != "check the build" || j.Missed != trigger.MissedOnce || j.CreatedAt != fixedClock()().UnixMilli() {
		t.Fatalf("added %+v", j)
	}
	if _, err := b.AddJob(ctx, trigger.Job{ID: "nightly", EveryMs: time.Hour.Milliseconds(), Message: "m", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}, 0); !isCode(err, abi.CodeInvalidArgument) || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a second job nightly through another handle: %v", err)
	}
	if _, err := b.AddJob(ctx, trigger.Job{Schedule: "* * * * * *", Message: "m"}, 0); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("an invalid job stored: %v", err)
	}
	hb, err := b.AddJob(ctx, trigger.Job{EveryMs: time.Hour.Milliseconds(), Message: "m", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}, 0)
	if err != nil || hb.ID == "" || hb.Kind != trigger.KindHeartbeat {
		t.Fatalf("heartbeat %+v %v", hb, err)
	}
	for _, h := range st {
		jobs, err := h.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{hb.ID, "nightly"}
		if hb.ID > "nightly" {
			want = []string{"nightly", hb.ID}
		}
		if len(jobs) != 2 || jobs[0].ID != want[0] || jobs[1].ID != want[1] {
			t.Fatalf("jobs %+v, want ids %v", jobs, want)
		}
		got, err := h.Job(ctx, "nightly")
		if err != nil || got.Schedule != "0 3 * * *" || got.Message != "check the build" {
			t.Fatalf("job %+v %v", got, err)
		}
	}
	if _, err := a.Job(ctx, "nope"); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("an unknown job: %v", err)
	}
	if err := b.RemoveJob(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Job(ctx, "nightly"); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a removed job read: %v", err)
	}
	if err := a.RemoveJob(ctx, "nightly"); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a removed job removed again: %v", err)
	}
	if _, err := a.AddJob(ctx, trigger.Job{ID: "nightly", Schedule: "0 4 * * *", Message: "m"}, 0); err != nil {
		t.Fatalf("a removed job's id taken again: %v", err)
	}
	if err := a.RecordRun(ctx, "nope", trigger.Run{At: 1, Fired: true}); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a run of an unknown job: %v", err)
	}
}

func testRecordRun(t *testing.T, open Open) {
	ctx := ctxFor(t)
	st := open(t, fixedClock(), 3)
	if _, err := st[0].AddJob(ctx, trigger.Job{ID: "j", Schedule: "@hourly", Message: "m"}, 0); err != nil {
		t.Fatal(err)
	}
	const each = 5
	var wg sync.WaitGroup
	errs := make(chan error, len(st)*each)
	for i, h := range st {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				at := int64(1000 * (i*each + k + 1))
				if err := h.RecordRun(ctx, "j", trigger.Run{At: at, Fired: true, MessageID: fmt.Sprint("m", at)}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	j, err := st[1].Job(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	if j.Runs != len(st)*each || j.LastRunAt != int64(1000*len(st)*each) || j.LastFiredAt != fixedClock()().UnixMilli() {
		t.Fatalf("after %d runs recorded at once: %+v", len(st)*each, j)
	}
	// A run another node claimed moves only the schedule on.
	if err := st[2].RecordRun(ctx, "j", trigger.Run{At: 1_000_000, Elsewhere: true}); err != nil {
		t.Fatal(err)
	}
	if err := st[0].RecordRun(ctx, "j", trigger.Run{At: 2_000, Error: "late"}); err != nil {
		t.Fatal(err)
	}
	j, err = st[0].Job(ctx, "j")
	if err != nil || j.Runs != len(st)*each || j.LastRunAt != 1_000_000 || j.LastError != "late" {
		t.Fatalf("after a run elsewhere and an older failed one: %+v %v", j, err)
	}
}

func testHooks(t *testing.T, open Open) {
	ctx := ctxFor(t)
	st := open(t, fixedClock(), 2)
	a, b := st[0], st[1]
	h, err := a.AddHook(ctx, trigger.Hook{ID: "ci", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}})
	if err != nil || !strings.HasPrefix(h.Secret, "whsec_") || h.CreatedAt != fixedClock()().UnixMilli() {
		t.Fatalf("hook %+v %v", h, err)
	}
	if _, err := b.AddHook(ctx, trigger.Hook{ID: "ci"}); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a second hook ci: %v", err)
	}
	if _, err := b.AddHook(ctx, trigger.Hook{ID: "Bad Id"}); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a bad id: %v", err)
	}
	hooks, err := b.Hooks(ctx)
	if err != nil || len(hooks) != 1 || hooks[0].ID != "ci" || hooks[0].Secret != "" || hooks[0].SessionKey != "agent:main:main" {
		t.Fatalf("hooks %+v %v", hooks, err)
	}
	got, secret, ok, err := b.Hook(ctx, "ci")
	if err != nil || !ok || secret != h.Secret || got.Secret != "" {
		t.Fatalf("hook %+v %q %v %v", got, secret, ok, err)
	}
	if _, _, ok, err := b.Hook(ctx, "nope"); err != nil || ok {
		t.Fatalf("an unknown hook: %v %v", ok, err)
	}
	var wg sync.WaitGroup
	for _, s := range st {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if err := s.HookCalled(ctx, "ci"); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if got, _, _, err := a.Hook(ctx, "ci"); err != nil || got.Calls != 6 || got.LastCalledAt != fixedClock()().UnixMilli() {
		t.Fatalf("after 6 calls at once: %+v %v", got, err)
	}
	if err := b.RemoveHook(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, err := a.Hook(ctx, "ci"); err != nil || ok {
		t.Fatalf("a removed hook found: %v %v", ok, err)
	}
	if err := a.RemoveHook(ctx, "ci"); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a removed hook removed again: %v", err)
	}
	if err := a.HookCalled(ctx, "ci"); err != nil {
		t.Fatalf("a call counted for a removed hook: %v", err)
	}
}

func testSignatures(t *testing.T, open Open) {
	ctx := ctxFor(t)
	st := open(t, fixedClock(), 2)
	a, b := st[0], st[1]
	sig := "sha256=" + strings.Repeat("ab", 32)
	until := fixedClock()().Add(time.Hour)
	for _, step := range []struct {
		h         trigger.JobStore
		hook, sig string
		fresh     bool
	}{
		{a, "ci", sig, true},
		{b, "ci", sig, false}, // a replay to another node
		{a, "ci", sig, false},
		{b, "other", sig, true}, // the same signature for another hook is its own
	} {
		fresh, err := step.h.ClaimSignature(ctx, step.hook, step.sig, until)
		if err != nil || fresh != step.fresh {
			t.Fatalf("claim %s %s: fresh %v, want %v (%v)", step.hook, step.sig, fresh, step.fresh, err)
		}
	}
	if err := b.UnclaimSignature(ctx, "ci", sig); err != nil {
		t.Fatal(err)
	}
	if fresh, err := a.ClaimSignature(ctx, "ci", sig, until); err != nil || !fresh {
		t.Fatalf("a signature given back not claimed again: %v %v", fresh, err)
	}
}
