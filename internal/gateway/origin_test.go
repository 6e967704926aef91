package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
)

// originKind is a fake ai-chat kind whose instances remember the origin each send carried.
type originKind struct {
	*livetest.FakeKind
	mu   sync.Mutex
	seen []abi.Origin
}

func (k *originKind) Start(ctx context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	inst, err := k.FakeKind.Start(ctx, sink, req)
	if err != nil {
		return nil, err
	}
	return originInstance{Instance: inst, k: k}, nil
}

type originInstance struct {
	live.Instance
	k *originKind
}

func (i originInstance) Send(ctx context.Context, req live.SendRequest) (live.SendResult, error) {
	i.k.mu.Lock()
	i.k.seen = append(i.k.seen, req.Origin)
	i.k.mu.Unlock()
	return i.Instance.Send(ctx, req)
}

func (k *originKind) last() abi.Origin {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.seen) == 0 {
		return abi.Origin{}
	}
	return k.seen[len(k.seen)-1]
}

// TestSendOrigin: the gateway says where a message sent to a session comes from by how the
// request was authenticated: the gateway's token is the CLI's, a signed-in browser's cookie
// the console's.
func TestSendOrigin(t *testing.T) {
	kind := &originKind{FakeKind: livetest.NewFakeKind(abi.TypeAIChat, false)}
	reg := newRegistry(t, live.Config{IdleTimeout: -1}, kind)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = reg.Shutdown(ctx)
	})
	e := newEnv(t, "tok", live.Config{})
	auth := console.NewAuth(console.Options{Now: e.clock.Now})
	auth.SetBase("http://127.0.0.1:7777")
	e.reg = reg
	e.h = gateway.Handler(gateway.Options{Registry: reg, Token: "tok", Console: auth, Version: "v-test", Now: e.clock.Now, MaxWait: 2 * time.Second})
	cookie := console.CookieName + "=" + signIn(t, e)

	rec := e.do(t, http.MethodPost, "/v1/sessions", `{"type":"ai-chat"}`, "Authorization", "Bearer tok")
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	var s abi.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	id := s.SessionID
	for _, tc := range []struct {
		name string
		hdr  []string
		want string
	}{
		{"the gateway's token", []string{"Authorization", "Bearer tok"}, abi.OriginCLI},
		{"the console's cookie", []string{"Cookie", cookie, "Origin", "http://127.0.0.1:7777"}, abi.OriginConsole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(t, http.MethodPost, "/v1/sessions/"+id+"/send", `{"data":"hi"}`, tc.hdr...)
			if rec.Code != http.StatusOK {
				t.Fatalf("send: %d %s", rec.Code, rec.Body)
			}
			if got := kind.last(); got != (abi.Origin{Kind: tc.want}) {
				t.Fatalf("origin %+v, want %s", got, tc.want)
			}
		})
	}
}
