package live_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// heavyKind starts instances it keeps no reference to, and hands the test weak pointers to
// them: what still reaches an instance is the registry.
type heavyKind struct {
	started []weak.Pointer[heavyInstance]
}

type heavyInstance struct{ conversation []byte }

func (k *heavyKind) Type() abi.SessionType { return abi.TypeAIChat }
func (k *heavyKind) Capabilities() abi.Capabilities {
	return livetest.CoreCapabilities(abi.TypeAIChat)
}
func (k *heavyKind) Start(context.Context, live.Sink, abi.CreateRequest) (live.Instance, error) {
	inst := &heavyInstance{conversation: make([]byte, 1<<20)}
	k.started = append(k.started, weak.Make(inst))
	return inst, nil
}
func (*heavyInstance) Send(context.Context, live.SendRequest) (live.SendResult, error) {
	return live.SendResult{}, nil
}
func (*heavyInstance) Control(context.Context, abi.ControlRequest) (any, error) {
	return nil, nil //nolint:nilnil // the test kind has no control results
}
func (*heavyInstance) Close(context.Context) error { return nil }

// TestRegistryLetsGoOfClosedInstances: once a session is closed the registry holds no
// reference to its backend (an AI chat's conversation, tools, model client), while the session
// stays listed for its retention; using it says it is closed.
func TestRegistryLetsGoOfClosedInstances(t *testing.T) {
	k := &heavyKind{}
	reg := newRegistry(t, live.Config{NewID: livetest.SeqIDs(), IdleTimeout: -1}, k)
	ctx := context.Background()
	s, err := reg.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat})
	mustOK(t, err)
	_, err = reg.Close(ctx, s.SessionID, abi.CloseRequested)
	mustOK(t, err)
	testkit.Eventually(t, "the closed session's instance is collected", func() bool {
		runtime.GC()
		return k.started[0].Value() == nil
	})
	if _, err := reg.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("hi")}); abi.CodeOf(err) != abi.CodeSessionClosed {
		t.Errorf("send to the closed session: %v", err)
	}
	if got, err := reg.Get(ctx, s.SessionID); err != nil || got.Status != abi.StatusClosed {
		t.Errorf("get: %+v, %v", got, err)
	}
}
