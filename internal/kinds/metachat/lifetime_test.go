package metachat_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/metachat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestWatcherEndsWithItsSessions: the kind's one watcher of the registry's sessions runs while
// a meta-chat does. When every meta-chat's lifetime has ended, even with no Close (a registry
// that went away), it stops; it does not outlive them on a context of its own.
func TestWatcherEndsWithItsSessions(t *testing.T) {
	e := newEnv(t)
	rm, err := e.rm.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	// A kind of no registry, watching e's through the view its fake ai-chat kind was given.
	k := &metachat.Kind{Roadmaps: e.rm}
	k.Attach(e.chat.View())
	var sinks []*livetest.FakeSink
	for i := range 2 {
		sink := livetest.NewFakeSink(fmt.Sprint("meta-", i))
		inst, err := k.Start(context.Background(), sink, abi.CreateRequest{Type: abi.TypeMetaChat, Context: abi.Context{RoadmapID: rm.ID}})
		if err != nil {
			t.Fatal(err)
		}
		inst.(live.Beginner).Begin()
		t.Cleanup(func() { _ = inst.Close(context.Background()) })
		sinks = append(sinks, sink)
	}
	if !k.Watching() {
		t.Fatal("no watcher while two meta-chats run")
	}
	for _, s := range sinks {
		s.End()
	}
	testkit.Eventually(t, "the watcher stops with its sessions' lifetimes", func() bool { return !k.Watching() })
}
