package netstream_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/netstream"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestPollerEndsWithItsSessions: a server's shared poller runs while a session on it does.
// When every session's lifetime has ended, even with no Close (a registry that went away), it
// stops; it does not outlive them on a context of its own.
func TestPollerEndsWithItsSessions(t *testing.T) {
	k := &netstream.Kind{}
	var sinks []*livetest.FakeSink
	for i := range 2 {
		sink := livetest.NewFakeSink(fmt.Sprint("net-", i))
		inst, err := k.Start(context.Background(), sink, abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: process.GatewayServer}})
		if err != nil {
			t.Fatal(err)
		}
		inst.(live.Beginner).Begin()
		t.Cleanup(func() { _ = inst.Close(context.Background()) })
		sinks = append(sinks, sink)
	}
	if n := k.Pollers(); n != 1 {
		t.Fatalf("%d pollers for two sessions on one server, want 1", n)
	}
	for _, s := range sinks {
		s.End()
	}
	testkit.Eventually(t, "the poller stops with its sessions' lifetimes", func() bool { return k.Pollers() == 0 })
}
