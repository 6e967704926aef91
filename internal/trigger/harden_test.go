package trigger_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/trigger"
)

// TestCronFloor: no job fires more often than the operator's floor (default one minute): a
// heartbeat's interval, an @every schedule's duration and the shortest gap between two
// firings of a cron expression are each held to it, and a job under it is refused with
// INVALID_ARGUMENT that names the floor.
func TestCronFloor(t *testing.T) {
	hb := func(d time.Duration) trigger.Job {
		return trigger.Job{EveryMs: d.Milliseconds(), Message: "m", TriggerTarget: trigger.Target{SessionKey: "agent:main:main"}}
	}
	cron := func(s string) trigger.Job { return trigger.Job{Schedule: s, Message: "m"} }
	for _, tc := range []struct {
		name  string
		floor time.Duration // 0: the default
		job   trigger.Job
		ok    bool
	}{
		{"@every 1s", 0, cron("@every 1s"), false},
		{"@every 59s", 0, cron("@every 59s"), false},
		{"@every 1m", 0, cron("@every 1m"), true},
		{"@every 90s", 0, cron("@every 90s"), true},
		{"zoned @every 30s", 0, cron("CRON_TZ=Europe/Paris @every 30s"), false},
		{"every minute", 0, cron("* * * * *"), true},
		{"every minute, floor 5m", 5 * time.Minute, cron("* * * * *"), false},
		{"every 5 minutes, floor 5m", 5 * time.Minute, cron("*/5 * * * *"), true},
		{"two a minute apart, once a day, floor 2m", 2 * time.Minute, cron("0,1 9 * * *"), false},
		{"daily, floor 1h", time.Hour, cron("0 9 * * *"), true},
		{"weekday mornings, floor 1h", time.Hour, cron("0 9 * * 1-5"), true},
		{"@hourly, floor 2h", 2 * time.Hour, cron("@hourly"), false},
		{"heartbeat 30s", 0, hb(30 * time.Second), false},
		{"heartbeat 1m", 0, hb(time.Minute), true},
		{"heartbeat 30s, floor lowered to 10s", 10 * time.Second, hb(30 * time.Second), true},
		{"@every 10s, floor lowered to 10s", 10 * time.Second, cron("@every 10s"), true},
		{"heartbeat 5m, floor 10m", 10 * time.Minute, hb(5 * time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), &clock{t: at("2026-11-24T08:00:00Z")}, &inbox{})
			f.svc.MinInterval = tc.floor
			_, err := f.svc.AddJob(context.Background(), tc.job)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.ok && !isCode(err, abi.CodeInvalidArgument):
				t.Fatalf("accepted under the floor (err %v)", err)
			case !tc.ok:
				floor := tc.floor
				if floor == 0 {
					floor = trigger.DefaultMinInterval
				}
				if !strings.Contains(err.Error(), "at least "+floor.String()) {
					t.Fatalf("the refusal does not name the floor %s: %v", floor, err)
				}
			}
		})
	}
}

// TestJobSessionKeyChecked: a job whose conversation key cannot be a conversation is refused
// when it is added, not when it first fires.
func TestJobSessionKeyChecked(t *testing.T) {
	f := newFixture(t, t.TempDir(), &clock{t: at("2026-11-24T08:00:00Z")}, &inbox{})
	ctx := context.Background()
	for _, key := range []string{"not a key", "agent:", "agent:main:", "agent:main:bad key", "hook:", "x:y"} {
		for _, j := range []trigger.Job{
			{Schedule: "@daily", Message: "m", TriggerTarget: trigger.Target{SessionKey: key}},
			{EveryMs: time.Hour.Milliseconds(), Message: "m", TriggerTarget: trigger.Target{SessionKey: key}},
		} {
			if _, err := f.svc.AddJob(ctx, j); !isCode(err, abi.CodeInvalidArgument) || !strings.Contains(err.Error(), "session") {
				t.Errorf("job with session %q (every %d ms): %v", key, j.EveryMs, err)
			}
		}
		if _, err := f.svc.Store.AddHook(ctx, trigger.Hook{TriggerTarget: trigger.Target{SessionKey: key}}); !isCode(err, abi.CodeInvalidArgument) {
			t.Errorf("hook with session %q: %v", key, err)
		}
	}
	if jobs, _ := f.svc.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("stored %+v", jobs)
	}
	for _, key := range []string{"agent:main:main", "agent:ops:cron:digest", "hook:abc", "cron:nightly"} {
		if _, err := f.svc.AddJob(ctx, trigger.Job{Schedule: "@daily", Message: "m", TriggerTarget: trigger.Target{SessionKey: key}}); err != nil {
			t.Errorf("job with session %q: %v", key, err)
		}
	}
}

func sign(secret string, parts ...[]byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write(p)
	}
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// TestWebhookReplay: a signed request is accepted once. The timestamped signature
// (X-Nexus-Timestamp, X-Nexus-Signature over "<timestamp>.<body>") is accepted within the
// window around the gateway's clock, once; GitHub's signature of the body alone is accepted
// once within its (longer) memory. What was seen survives a restart; a call whose delivery
// failed does not use up its signature; bearer secrets, which anyone holding them can use
// anyway, keep working for every call.
func TestWebhookReplay(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: at("2026-11-24T08:00:00Z")}
	in := &inbox{}
	f := newFixture(t, dir, c, in)
	ctx := context.Background()
	h, err := f.svc.Store.AddHook(ctx, trigger.Hook{ID: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte("the build failed")
	ts := func(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
	timed := func(at time.Time, b []byte) trigger.HookCall {
		s := ts(at)
		return trigger.HookCall{ID: "ci", Timestamp: s, TimedSignature: sign(h.Secret, []byte(s+"."), b), Body: b}
	}
	call := func(name string, c trigger.HookCall, want abi.Code) {
		t.Helper()
		_, err := f.svc.CallHook(ctx, c)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: refused: %v", name, err)
		case want != "" && (err == nil || abi.CodeOf(err) != want):
			t.Errorf("%s: %v, want %s", name, err, want)
		}
	}
	github := trigger.HookCall{ID: "ci", Signature: sign(h.Secret, body), Body: body}
	call("github signature", github, "")
	call("github signature again", github, abi.CodeAuthenticationInvalid)
	call("github signature of another body", trigger.HookCall{ID: "ci", Signature: sign(h.Secret, []byte("other")), Body: []byte("other")}, "")

	now := c.now()
	call("timestamped", timed(now, body), "")
	call("timestamped again", timed(now, body), abi.CodeAuthenticationInvalid)
	call("timestamped, a second later", timed(now.Add(time.Second), body), "")
	call("timestamped, within the window", timed(now.Add(-trigger.SignatureWindow+time.Second), body), "")
	call("timestamped, too old", timed(now.Add(-trigger.SignatureWindow-time.Second), body), abi.CodeAuthenticationInvalid)
	call("timestamped, too far ahead", timed(now.Add(trigger.SignatureWindow+time.Second), body), abi.CodeAuthenticationInvalid)
	bad := timed(now.Add(2*time.Second), body)
	bad.Timestamp = ts(now.Add(3 * time.Second)) // the signature is of another time
	call("timestamp changed", bad, abi.CodeAuthenticationInvalid)
	call("timestamp not a number", trigger.HookCall{ID: "ci", Timestamp: "soon", TimedSignature: sign(h.Secret, []byte("soon."), body), Body: body}, abi.CodeAuthenticationInvalid)
	call("timestamped signature without its timestamp", trigger.HookCall{ID: "ci", TimedSignature: sign(h.Secret, body), Body: body}, abi.CodeAuthenticationInvalid)

	bearer := trigger.HookCall{ID: "ci", Secret: h.Secret, Body: body}
	call("bearer", bearer, "")
	call("bearer again", bearer, "")

	// A failed delivery leaves the signature for the sender's retry.
	in.fail = errors.New("queue unavailable")
	retry := timed(now.Add(4*time.Second), body)
	call("delivery fails", retry, abi.CodeInternal)
	in.fail = nil
	call("its retry", retry, "")

	// A restarted gateway still knows what it accepted.
	replayed := timed(now.Add(5*time.Second), body)
	call("before the restart", replayed, "")
	_ = f.svc.Store.Close()
	f = newFixture(t, dir, c, in)
	call("after the restart, timestamped", replayed, abi.CodeAuthenticationInvalid)
	call("after the restart, github", github, abi.CodeAuthenticationInvalid)

	// Past the window, a timestamped request is refused by its time; the memory of it can go.
	c.set(now.Add(trigger.SignatureWindow + time.Minute))
	call("timestamped, replayed after the window", replayed, abi.CodeAuthenticationInvalid)
	if got := len(in.texts()); got != 9 {
		t.Fatalf("%d deliveries, want 9: %q", got, in.texts())
	}
}

// TestWebhookReplayConcurrent: the same signed request sent many times at once is delivered
// once.
func TestWebhookReplayConcurrent(t *testing.T) {
	c := &clock{t: at("2026-11-24T08:00:00Z")}
	in := &inbox{}
	f := newFixture(t, t.TempDir(), c, in)
	ctx := context.Background()
	h, err := f.svc.Store.AddHook(ctx, trigger.Hook{ID: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	s := strconv.FormatInt(c.now().Unix(), 10)
	call := trigger.HookCall{ID: "ci", Timestamp: s, TimedSignature: sign(h.Secret, []byte(s+"."), []byte("deploy")), Body: []byte("deploy")}
	errs := make(chan error, 20)
	for range 20 {
		go func() { _, err := f.svc.CallHook(ctx, call); errs <- err }()
	}
	accepted := 0
	for range 20 {
		if err := <-errs; err == nil {
			accepted++
		} else if !isCode(err, abi.CodeAuthenticationInvalid) {
			t.Errorf("refused with %v", err)
		}
	}
	if accepted != 1 || len(in.texts()) != 1 {
		t.Fatalf("%d of 20 identical requests accepted, %d delivered", accepted, len(in.texts()))
	}
}
