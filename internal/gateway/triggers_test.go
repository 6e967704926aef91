package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
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
