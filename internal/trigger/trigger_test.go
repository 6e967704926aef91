package trigger_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/trigger"
	"github.com/nexus-run/nexus/internal/trigger/triggertest"
)

// clock is an injected clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// inbox records deliveries as a conversation queue would: an id is stored once.
type inbox struct {
	mu   sync.Mutex
	seen map[string]bool
	got  []trigger.Delivery
	fail error
}

func (b *inbox) deliver(_ context.Context, d trigger.Delivery) (string, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return "", "", b.fail
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	id := d.ID
	if id == "" {
		id = "msg_" + string(rune('a'+len(b.got)))
	}
	if !b.seen[id] {
		b.seen[id] = true
		b.got = append(b.got, d)
	}
	return id, d.Key, nil
}

func (b *inbox) texts() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, d := range b.got {
		out = append(out, d.Text)
	}
	return out
}

type fixture struct {
	dir   string
	clock *clock
	in    *inbox
	svc   *trigger.Service
}

// newFixture opens a store at dir (a restarted gateway when dir is reused).
func newFixture(t *testing.T, dir string, c *clock, in *inbox) *fixture {
	t.Helper()
	st, err := trigger.OpenStore(context.Background(), trigger.Path(dir), c.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &fixture{dir: dir, clock: c, in: in, svc: &trigger.Service{Store: st, Deliver: in.deliver, Now: c.now}}
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func tick(t *testing.T, f *fixture, when string) time.Time {
	t.Helper()
	f.clock.set(at(when))
	next, err := f.svc.Tick(context.Background(), at(when))
	if err != nil {
		t.Fatalf("tick at %s: %v", when, err)
	}
	return next
}

// TestCronFiresOnSchedule: a cron job fires once per scheduled time, into its own
// conversation by default, and says when it fires next.
func TestCronFiresOnSchedule(t *testing.T) {
	c := &clock{t: at("2026-11-24T10:00:30Z")}
	f := newFixture(t, t.TempDir(), c, &inbox{})
	j, err := f.svc.AddJob(context.Background(), trigger.Job{ID: "nightly", Schedule: "*/15 * * * *", Message: "check the build", TriggerTarget: trigger.Target{Agent: "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != trigger.KindCron || j.Missed != trigger.MissedOnce || j.NextRunAt != at("2026-11-24T10:15:00Z").UnixMilli() {
		t.Fatalf("job %+v", j)
	}
	if next := tick(t, f, "2026-11-24T10:10:00Z"); !next.Equal(at("2026-11-24T10:15:00Z")) || len(f.in.texts()) != 0 {
		t.Fatalf("before its time: next %s, fired %q", next, f.in.texts())
	}
	if next := tick(t, f, "2026-11-24T10:15:00Z"); !next.Equal(at("2026-11-24T10:30:00Z")) {
		t.Fatalf("next %s", next)
	}
	tick(t, f, "2026-11-24T10:15:00Z") // the same instant again: nothing new
	tick(t, f, "2026-11-24T10:30:20Z")
	got := f.in.texts()
	if len(got) != 2 || !strings.HasPrefix(got[0], "[cron nightly (*/15 * * * *), scheduled 2026-11-24T10:15:00") || !strings.HasSuffix(got[1], "]\n\ncheck the build") {
		t.Fatalf("fired %q", got)
	}
	d := f.in.got[0]
	if d.Key != "agent:ops:cron:nightly" || d.From != "cron:nightly" || d.ID != "cron_nightly_"+strconv.FormatInt(at("2026-11-24T10:15:00Z").UnixMilli(), 10) {
		t.Fatalf("delivery %+v", d)
	}
	jobs, err := f.svc.Jobs(context.Background())
	if err != nil || len(jobs) != 1 || jobs[0].Runs != 2 || jobs[0].LastRunAt != at("2026-11-24T10:30:00Z").UnixMilli() {
		t.Fatalf("jobs %+v %v", jobs, err)
	}
}

// TestMissedRunPolicies: after a gateway was down across several scheduled times, policy
// once fires one catch-up run that says how many were missed, policy skip fires none and
// waits for the next time; neither fires a burst.
func TestMissedRunPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{trigger.MissedOnce, []string{"3 scheduled runs were missed while the gateway was not running"}},
		{trigger.MissedSkip, nil},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			dir := t.TempDir()
			c := &clock{t: at("2026-11-24T08:00:00Z")}
			in := &inbox{}
			f := newFixture(t, dir, c, in)
			if _, err := f.svc.AddJob(context.Background(), trigger.Job{ID: "hourly", Schedule: "0 * * * *", Message: "report", Missed: tc.policy}); err != nil {
				t.Fatal(err)
			}
			tick(t, f, "2026-11-24T09:00:00Z")
			if len(in.texts()) != 1 {
				t.Fatalf("on time: %q", in.texts())
			}
			// The gateway stops at 09:30 and comes back at 12:20: 10, 11 and 12 were missed.
			_ = f.svc.Store.Close()
			f2 := newFixture(t, dir, c, in)
			next := tick(t, f2, "2026-11-24T12:20:00Z")
			got := in.texts()[1:]
			if len(got) != len(tc.want) {
				t.Fatalf("after the downtime: %q", got)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) || !strings.Contains(got[i], "scheduled 2026-11-24T12:00:00") {
					t.Fatalf("catch-up run %q", got[i])
				}
			}
			if !next.Equal(at("2026-11-24T13:00:00Z")) {
				t.Fatalf("next %s", next)
			}
			jobs, _ := f2.svc.Jobs(context.Background())
			skipped := strings.Contains(jobs[0].LastError, "skipped 3 missed runs")
			if skipped != (tc.policy == trigger.MissedSkip) || jobs[0].LastRunAt != at("2026-11-24T12:00:00Z").UnixMilli() {
				t.Fatalf("job %+v", jobs[0])
			}
			tick(t, f2, "2026-11-24T12:21:00Z")
			tick(t, f2, "2026-11-24T13:00:10Z")
			if n := len(in.texts()); n != 2+len(tc.want) {
				t.Fatalf("afterwards: %q", in.texts())
			}
		})
	}
}

// TestFiringIsIdempotent: a gateway killed after delivering a run but before recording it
// delivers it again under the same id, which the queue stores once.
func TestFiringIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: at("2026-11-24T08:00:00Z")}
	in := &inbox{}
	f := newFixture(t, dir, c, in)
	if _, err := f.svc.AddJob(context.Background(), trigger.Job{ID: "j", Schedule: "@hourly", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	// A store whose record fails after the delivery: the database closed under it.
	deliverThenClose := func(ctx context.Context, d trigger.Delivery) (string, string, error) {
		id, key, err := in.deliver(ctx, d)
		_ = f.svc.Store.Close()
		return id, key, err
	}
	f.svc.Deliver = deliverThenClose
	f.clock.set(at("2026-11-24T09:00:00Z"))
	if _, err := f.svc.Tick(context.Background(), at("2026-11-24T09:00:00Z")); err == nil {
		t.Fatal("the record should have failed")
	}
	f2 := newFixture(t, dir, c, in)
	tick(t, f2, "2026-11-24T09:00:05Z")
	if len(in.got) != 1 {
		t.Fatalf("delivered %d times", len(in.got))
	}
}

// TestHeartbeat: a heartbeat wakes its session every interval from its creation.
func TestHeartbeat(t *testing.T) {
	c := &clock{t: at("2026-11-24T08:00:00Z")}
	f := newFixture(t, t.TempDir(), c, &inbox{})
	ctx := context.Background()
	if _, err := f.svc.AddJob(ctx, trigger.Job{ID: "hb", EveryMs: (30 * time.Minute).Milliseconds(), Message: "anything to do?"}); err == nil {
		t.Fatal("a heartbeat without a session")
	}
	if _, err := f.svc.AddJob(ctx, trigger.Job{ID: "hb", EveryMs: (30 * time.Minute).Milliseconds(), Message: "anything to do?", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}); err != nil {
		t.Fatal(err)
	}
	if next := tick(t, f, "2026-11-24T08:29:00Z"); !next.Equal(at("2026-11-24T08:30:00Z")) {
		t.Fatalf("next %s", next)
	}
	tick(t, f, "2026-11-24T08:30:00Z")
	tick(t, f, "2026-11-24T09:00:30Z")
	got := f.in.texts()
	if len(got) != 2 || !strings.HasPrefix(got[0], "[heartbeat hb, every 30m0s, at 2026-11-24T08:30:00") || f.in.got[1].Key != "agent:main:main" {
		t.Fatalf("fired %q", got)
	}
}

// TestJobValidation: bad jobs are refused with INVALID_ARGUMENT and nothing is stored.
func TestJobValidation(t *testing.T) {
	c := &clock{t: at("2026-11-24T08:00:00Z")}
	f := newFixture(t, t.TempDir(), c, &inbox{})
	ctx := context.Background()
	for name, j := range map[string]trigger.Job{
		"no schedule":      {Message: "m"},
		"both":             {Schedule: "@daily", EveryMs: 60000, Message: "m", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}},
		"bad cron":         {Schedule: "61 * * * *", Message: "m"},
		"no message":       {Schedule: "@daily"},
		"short heartbeat":  {EveryMs: 1000, Message: "m", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}},
		"bad id":           {ID: "../x", Schedule: "@daily", Message: "m"},
		"bad mode":         {Schedule: "@daily", Message: "m", TriggerTarget: trigger.Target{Mode: "shout"}},
		"bad level":        {Schedule: "@daily", Message: "m", TriggerTarget: trigger.Target{Level: "root"}},
		"relative dir":     {Schedule: "@daily", Message: "m", TriggerTarget: trigger.Target{Workspace: "work"}},
		"bad policy":       {Schedule: "@daily", Message: "m", Missed: "all"},
		"message too long": {Schedule: "@daily", Message: strings.Repeat("x", trigger.MaxMessage+1)},
	} {
		if _, err := f.svc.AddJob(ctx, j); !isCode(err, abi.CodeInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := f.svc.AddJob(ctx, trigger.Job{ID: "dup", Schedule: "@daily", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.AddJob(ctx, trigger.Job{ID: "dup", Schedule: "@daily", Message: "m"}); !isCode(err, abi.CodeInvalidArgument) {
		t.Errorf("a duplicate id: %v", err)
	}
	if err := f.svc.RemoveJob(ctx, "nope"); !isCode(err, abi.CodeInvalidArgument) {
		t.Errorf("removing an unknown job: %v", err)
	}
	if err := f.svc.RemoveJob(ctx, "dup"); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := f.svc.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("jobs %+v", jobs)
	}
}

func isCode(err error, code abi.Code) bool {
	var ae *abi.Error
	return errors.As(err, &ae) && ae.Code == code
}

// TestWebhookAuth: a hook delivers its body only with its secret (as a bearer secret or an
// HMAC signature of the body); a wrong secret and an unknown hook get the same refusal; a
// removed hook's secret stops working; each call without a configured session gets its own
// hook:<uuid> conversation.
func TestWebhookAuth(t *testing.T) {
	c := &clock{t: at("2026-11-24T08:00:00Z")}
	in := &inbox{}
	f := newFixture(t, t.TempDir(), c, in)
	ctx := context.Background()
	h, err := f.svc.Store.AddHook(ctx, trigger.Hook{ID: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h.Secret, "whsec_") {
		t.Fatalf("secret %q", h.Secret)
	}
	sign := func(secret string, body []byte) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		return "sha256=" + hex.EncodeToString(m.Sum(nil))
	}
	body := []byte(`{"message":"the build failed"}`)
	for name, call := range map[string]trigger.HookCall{
		"no secret":      {ID: "ci", Body: body},
		"wrong secret":   {ID: "ci", Secret: h.Secret + "x", Body: body},
		"wrong hmac":     {ID: "ci", Signature: sign("other", body), Body: body},
		"unknown hook":   {ID: "cd", Secret: h.Secret, Body: body},
		"secret as hmac": {ID: "ci", Signature: h.Secret, Body: body},
	} {
		if _, err := f.svc.CallHook(ctx, call); !isCode(err, abi.CodeAuthenticationInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(in.got) != 0 {
		t.Fatalf("delivered %+v", in.got)
	}
	r1, err := f.svc.CallHook(ctx, trigger.HookCall{ID: "ci", Secret: h.Secret, Body: body, ContentType: "application/json"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.svc.CallHook(ctx, trigger.HookCall{ID: "ci", Signature: sign(h.Secret, []byte("plain text")), Body: []byte("plain text"), ContentType: "text/plain"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r1.SessionKey, "hook:") || r1.SessionKey == r2.SessionKey {
		t.Fatalf("keys %s %s", r1.SessionKey, r2.SessionKey)
	}
	if got := in.texts(); len(got) != 2 || got[0] != "[webhook ci]\n\nthe build failed" || got[1] != "[webhook ci]\n\nplain text" {
		t.Fatalf("delivered %q", got)
	}
	if _, err := f.svc.CallHook(ctx, trigger.HookCall{ID: "ci", Secret: h.Secret, Body: []byte("{"), ContentType: "application/json"}); !isCode(err, abi.CodeInvalidArgument) {
		t.Errorf("bad JSON: %v", err)
	}
	if _, err := f.svc.CallHook(ctx, trigger.HookCall{ID: "ci", Secret: h.Secret, Body: []byte("  ")}); !isCode(err, abi.CodeInvalidArgument) {
		t.Errorf("empty body: %v", err)
	}
	hooks, err := f.svc.Store.Hooks(ctx)
	if err != nil || len(hooks) != 1 || hooks[0].Calls != 2 || hooks[0].Secret != "" {
		t.Fatalf("hooks %+v %v", hooks, err)
	}
	if err := f.svc.Store.RemoveHook(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CallHook(ctx, trigger.HookCall{ID: "ci", Secret: h.Secret, Body: body}); !isCode(err, abi.CodeAuthenticationInvalid) {
		t.Errorf("a removed hook: %v", err)
	}
}

// TestStoreFiles: the database is private and a symlink in its place is refused.
func TestStoreFiles(t *testing.T) {
	dir := t.TempDir()
	st, err := trigger.OpenStore(context.Background(), trigger.Path(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	for p, want := range map[string]os.FileMode{filepath.Dir(trigger.Path(dir)): 0o700, trigger.Path(dir): 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Fatalf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	other := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(trigger.Path(other)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(trigger.Path(dir), trigger.Path(other)); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.OpenStore(context.Background(), trigger.Path(other), nil); !isCode(err, abi.CodeInvalidArgument) {
		t.Fatalf("a symlink: %v", err)
	}
}

// TestRunFiresOnTime: the scheduler's loop itself, in a synctest bubble (virtual time): a
// heartbeat added while it runs wakes it and fires at each interval, a removed job stops
// firing, and the loop ends with its context.
func TestRunFiresOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		in := &inbox{}
		st, err := trigger.OpenStore(context.Background(), trigger.Path(t.TempDir()), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = st.Close() }()
		svc := &trigger.Service{Store: st, Deliver: in.deliver}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { svc.Run(ctx); close(done) }()
		synctest.Wait()
		if _, err := svc.AddJob(context.Background(), trigger.Job{ID: "hb", EveryMs: time.Minute.Milliseconds(), Message: "tick", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if n := len(in.texts()); n != 0 {
			t.Fatalf("fired %d times before its minute", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := len(in.texts()); n != 1 {
			t.Fatalf("fired %d times after a minute", n)
		}
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		if n := len(in.texts()); n != 4 {
			t.Fatalf("fired %d times after four minutes", n)
		}
		if err := svc.RemoveJob(context.Background(), "hb"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if n := len(in.texts()); n != 4 {
			t.Fatalf("fired %d times after its removal", n)
		}
		cancel()
		<-done
	})
}

// TestStoreContract: the SQLite store passes the JobStore contract, several gateways' handles
// on one file standing for the nodes.
func TestStoreContract(t *testing.T) {
	triggertest.Run(t, func(t *testing.T, now func() time.Time, n int) []trigger.JobStore {
		path := trigger.Path(t.TempDir())
		var out []trigger.JobStore
		for range n {
			st, err := trigger.OpenStore(context.Background(), path, now)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			out = append(out, st)
		}
		return out
	})
}
