package gateway_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/trigger"
)

// TestTriggerRoutes: cron jobs and hooks are managed with the gateway's token; a webhook call
// needs its hook's secret and nothing else (the token is not asked for, and does not stand in
// for the secret); a refused call delivers nothing; an oversized body is refused (413, as every body limit).
func TestTriggerRoutes(t *testing.T) {
	const token = "tok-123"
	st, err := trigger.OpenStore(context.Background(), trigger.Path(t.TempDir()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var mu sync.Mutex
	var got []trigger.Delivery
	svc := &trigger.Service{Store: st, Deliver: func(_ context.Context, d trigger.Delivery) (string, string, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, d)
		return "msg_1", d.Key, nil
	}}
	e := newEnv(t, token, live.Config{})
	e.h = gateway.Handler(gateway.Options{Registry: e.reg, Token: token, Triggers: svc, Now: e.clock.Now})
	auth := []string{"Authorization", "Bearer " + token}

	// Management needs the token.
	rec := e.do(t, "POST", "/v1/hooks", `{"id":"ci","agent":"ops"}`)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusUnauthorized, abi.CodeAuthenticationInvalid, "")
	rec = e.do(t, "POST", "/v1/hooks", `{"id":"ci","agent":"ops"}`, auth...)
	if rec.Code != http.StatusCreated {
		t.Fatalf("add hook: %d %s", rec.Code, rec.Body)
	}
	var h trigger.Hook
	_ = json.Unmarshal(rec.Body.Bytes(), &h)
	if !strings.HasPrefix(h.Secret, "whsec_") {
		t.Fatalf("hook %s", rec.Body)
	}
	rec = e.do(t, "GET", "/v1/hooks", "", auth...)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "whsec_") || !strings.Contains(rec.Body.String(), `"id":"ci"`) {
		t.Fatalf("list hooks: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(t, "POST", "/v1/hooks", `{"secret":"mine"}`, auth...)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusBadRequest, abi.CodeInvalidArgument, "")

	// The call: the hook's secret, not the token.
	for name, hdr := range map[string][]string{
		"nothing":        nil,
		"the token":      auth,
		"a wrong secret": {"X-Nexus-Hook-Secret", h.Secret + "0"},
	} {
		rec = e.do(t, "POST", "/v1/hooks/ci", "deploy", hdr...)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, rec.Code, rec.Body)
		}
	}
	rec = e.do(t, "POST", "/v1/hooks/nope", "deploy", "Authorization", "Bearer "+h.Secret)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusUnauthorized, abi.CodeAuthenticationInvalid, "")
	if len(got) != 0 {
		t.Fatalf("delivered %+v", got)
	}
	rec = e.do(t, "POST", "/v1/hooks/ci", `{"message":"deploy done","mode":"collect"}`, "Authorization", "Bearer "+h.Secret, "Content-Type", "application/json")
	if rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), `"sessionKey":"hook:`) {
		t.Fatalf("call: %d %s", rec.Code, rec.Body)
	}
	if len(got) != 1 || got[0].Text != "[webhook ci]\n\ndeploy done" || got[0].Mode != "collect" || got[0].Target.Agent != "ops" {
		t.Fatalf("delivered %+v", got)
	}
	rec = e.do(t, "POST", "/v1/hooks/ci", strings.Repeat("x", gateway.MaxHookBody+1), "X-Nexus-Hook-Secret", h.Secret)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusRequestEntityTooLarge, abi.CodeInvalidArgument, "")
	// Other routes still need the token, even under /v1/hooks.
	rec = e.do(t, "DELETE", "/v1/hooks/ci", "", "Authorization", "Bearer "+h.Secret)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusUnauthorized, abi.CodeAuthenticationInvalid, "")

	// Cron jobs.
	rec = e.do(t, "POST", "/v1/cron", `{"id":"d","schedule":"@daily","message":"m","bogus":1}`, auth...)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusBadRequest, abi.CodeInvalidArgument, "")
	rec = e.do(t, "POST", "/v1/cron", `{"id":"d","schedule":"@daily","message":"m"}`, auth...)
	if rec.Code != http.StatusCreated || !strings.Contains(rec.Body.String(), `"nextRunAt":`) {
		t.Fatalf("add job: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(t, "POST", "/v1/cron/d/run", "", auth...)
	if rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), `"sessionKey":"agent:main:cron:d"`) {
		t.Fatalf("run job: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(t, "DELETE", "/v1/cron/d", "", auth...)
	if rec.Code != http.StatusOK {
		t.Fatalf("remove job: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(t, "DELETE", "/v1/cron/d", "", auth...)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusBadRequest, abi.CodeInvalidArgument, "")
}

// hookEnv is a gateway whose webhooks deliver into a real message queue (broker), as nexus
// serve's do, and one hook "ci".
func hookEnv(t *testing.T) (*env, *broker.Store, trigger.Hook) {
	t.Helper()
	e := newEnv(t, "tok", live.Config{})
	st, err := trigger.OpenStore(context.Background(), trigger.Path(t.TempDir()), e.clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	queues, err := broker.Open(context.Background(), broker.Path(t.TempDir()), broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = queues.Close() })
	svc := &trigger.Service{Store: st, Now: e.clock.Now, Deliver: func(ctx context.Context, d trigger.Delivery) (string, string, error) {
		m, err := queues.Enqueue(ctx, d.Key, broker.Followup, d.Text, d.From)
		return m.ID, d.Key, err
	}}
	h, err := st.AddHook(context.Background(), trigger.Hook{ID: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	e.h = gateway.Handler(gateway.Options{Registry: e.reg, Token: "tok", Triggers: svc, Now: e.clock.Now})
	return e, queues, h
}

// TestWebhookBodyLimit: a webhook body of up to MaxHookBody bytes is delivered whole, the
// line that says which hook it came from notwithstanding; one byte more is refused with 413
// INVALID_ARGUMENT before anything is queued.
func TestWebhookBodyLimit(t *testing.T) {
	e, queues, h := hookEnv(t)
	for _, tc := range []struct {
		name   string
		size   int
		status int
	}{
		{"limit-1", gateway.MaxHookBody - 1, http.StatusAccepted},
		{"limit", gateway.MaxHookBody, http.StatusAccepted},
		{"limit+1", gateway.MaxHookBody + 1, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(t, "POST", "/v1/hooks/ci", strings.Repeat("x", tc.size), "X-Nexus-Hook-Secret", h.Secret)
			if tc.status != http.StatusAccepted {
				checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), tc.status, abi.CodeInvalidArgument, "")
				return
			}
			var out trigger.HookResult
			if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != tc.status || err != nil {
				t.Fatalf("%d bytes: %d %s", tc.size, rec.Code, rec.Body)
			}
			q, err := queues.Queued(context.Background(), out.SessionKey)
			if err != nil || len(q) != 1 || q[0].Content != "[webhook ci]\n\n"+strings.Repeat("x", tc.size) {
				t.Fatalf("queued %d messages, %v", len(q), err)
			}
		})
	}
}

// TestWebhookSignedOnce: over HTTP, a signed call (X-Nexus-Timestamp and X-Nexus-Signature,
// or GitHub's X-Hub-Signature-256) is accepted once and its replay refused with 401; a call
// with the bearer secret may be repeated.
func TestWebhookSignedOnce(t *testing.T) {
	e, _, h := hookEnv(t)
	sign := func(parts ...string) string {
		m := hmac.New(sha256.New, []byte(h.Secret))
		for _, p := range parts {
			m.Write([]byte(p))
		}
		return "sha256=" + hex.EncodeToString(m.Sum(nil))
	}
	ts := strconv.FormatInt(e.clock.Now().Unix(), 10)
	for _, tc := range []struct {
		name string
		hdr  []string
		want []int
	}{
		{"timestamped", []string{"X-Nexus-Timestamp", ts, "X-Nexus-Signature", sign(ts, ".", "deploy")}, []int{http.StatusAccepted, http.StatusUnauthorized}},
		{"github", []string{"X-Hub-Signature-256", sign("deploy")}, []int{http.StatusAccepted, http.StatusUnauthorized}},
		{"bearer", []string{"Authorization", "Bearer " + h.Secret}, []int{http.StatusAccepted, http.StatusAccepted}},
	} {
		for i, want := range tc.want {
			if rec := e.do(t, "POST", "/v1/hooks/ci", "deploy", tc.hdr...); rec.Code != want {
				t.Errorf("%s, call %d: %d %s, want %d", tc.name, i+1, rec.Code, rec.Body, want)
			}
		}
	}
}
