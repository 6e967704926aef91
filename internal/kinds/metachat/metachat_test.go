package metachat_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/metachat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/roadmap"
	"github.com/nexus-run/nexus/internal/testkit"
)

type env struct {
	reg  *live.Registry
	rm   *roadmap.Store
	chat *livetest.FakeKind
	term *livetest.FakeKind
}

func newEnv(t *testing.T) *env {
	t.Helper()
	rm, err := roadmap.Open(filepath.Join(t.TempDir(), "roadmaps.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{rm: rm, chat: livetest.NewFakeKind(abi.TypeAIChat, false), term: livetest.NewFakeKind(abi.TypeTerminal, false)}
	e.reg, err = live.New(context.Background(), live.Config{IdleTimeout: -1}, &metachat.Kind{Roadmaps: rm}, e.chat, e.term)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		_ = e.reg.Shutdown(ctx)
	})
	return e
}

// reader collects a meta-chat's roadmap events in order.
type reader struct {
	reg   *live.Registry
	id    string
	after uint64
	got   []abi.RoadmapEvent
}

func (r *reader) until(t *testing.T, n int) []abi.RoadmapEvent {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for len(r.got) < n {
		b, err := r.reg.Read(context.Background(), r.id, r.after, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			r.after = e.Seq
			if p, ok := e.Payload.(abi.RoadmapEvent); ok {
				r.got = append(r.got, p)
			}
		}
		if b.Done || time.Now().After(deadline) {
			t.Fatalf("got %d roadmap events, want %d: %+v", len(r.got), n, r.got)
		}
	}
	return r.got
}

func describe(evs []abi.RoadmapEvent) []string {
	var out []string
	for _, e := range evs {
		s := e.Type + ":" + e.Action
		switch e.Type {
		case abi.PayloadRoadmapItem:
			s += ":" + e.Item.Title + "=" + e.Item.Status
		case abi.PayloadRoadmapSession:
			s += ":" + e.SessionType
		case abi.PayloadRoadmapTurn:
			s += e.End
		case abi.PayloadRoadmapSubagent:
			s += ":" + e.Label
		}
		out = append(out, s)
	}
	return out
}

// TestMetaChatFollowsItsRoadmap: a meta-chat receives, in order, its roadmap's items as they
// are added and updated, the sessions linked to it as they are created and closed (not the
// others), the turns that end in a linked ai-chat and the subagents it spawns; an interrupt
// stops the updates (the session stays), resume reports what changed meanwhile.
func TestMetaChatFollowsItsRoadmap(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rm, err := e.rm.Create("ship the release")
	if err != nil {
		t.Fatal(err)
	}
	build, err := e.rm.AddItem(rm.ID, "build", "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeMetaChat, Context: abi.Context{RoadmapID: rm.ID}})
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{reg: e.reg, id: s.SessionID}
	r.until(t, 1) // the item there already
	worker, err := e.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{RoadmapID: rm.ID, ChatID: "agent:w:main"}})
	if err != nil {
		t.Fatal(err)
	}
	r.until(t, 2)
	if _, err := e.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	sink := e.chat.Instance(worker.SessionID).Sink()
	sink.Publish(abi.EventData, abi.AISubagent{Type: abi.PayloadAISubagent, Phase: abi.PhaseStarted, RunID: "run-1", Label: "tester", Task: "run the tests"})
	r.until(t, 3)
	sink.Publish(abi.EventData, abi.AITurn{Type: abi.PayloadAITurn, Phase: abi.PhaseEnded, RunID: "r1", End: abi.TurnCompleted, Iterations: 2})
	r.until(t, 4)
	if _, err := e.rm.UpdateItem(rm.ID, build.ID, "", roadmap.Doing); err != nil {
		t.Fatal(err)
	}
	r.until(t, 5)

	// Interrupted: nothing comes; resumed: what changed meanwhile.
	if _, err := e.reg.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rm.UpdateItem(rm.ID, build.ID, "", roadmap.Done); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Close(ctx, worker.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if b, err := e.reg.Read(ctx, s.SessionID, r.after, 0, 0); err != nil {
		t.Fatal(err)
	} else {
		for _, ev := range b.Events {
			if _, ok := ev.Payload.(abi.RoadmapEvent); ok {
				t.Fatalf("an update while interrupted: %+v", ev)
			}
		}
	}
	if got, _ := e.reg.Get(ctx, s.SessionID); got.Status != abi.StatusActive {
		t.Fatalf("the session after the interrupt: %s", got.Status)
	}
	if _, err := e.reg.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandResume}); err != nil {
		t.Fatal(err)
	}
	got := describe(r.until(t, 7))
	want := []string{"roadmap-item:added:build=todo", "roadmap-session:created:ai-chat", "roadmap-subagent:spawned:tester",
		"roadmap-turn:completed", "roadmap-item:updated:build=doing"}
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("events %v, want %v first", got, want)
		}
	}
	rest := map[string]bool{got[5]: true, got[6]: true}
	if !rest["roadmap-item:updated:build=done"] || !rest["roadmap-session:closed:ai-chat"] {
		t.Fatalf("after resume %v", got[5:])
	}
}

// TestBadInput: what a meta-chat refuses.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for name, req := range map[string]abi.CreateRequest{
		"no roadmap":      {Type: abi.TypeMetaChat},
		"unknown roadmap": {Type: abi.TypeMetaChat, Context: abi.Context{RoadmapID: "rm-nope"}},
	} {
		if _, err := e.reg.Create(ctx, req); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	rm, _ := e.rm.Create("x")
	s, err := e.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeMetaChat, Context: abi.Context{RoadmapID: rm.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("x")}); abi.CodeOf(err) != abi.CodeCapabilityUnsupported {
		t.Errorf("send: %v", err)
	}
	for name, f := range map[string]func() error{
		"empty title":  func() error { _, err := e.rm.Create(" "); return err },
		"bad status":   func() error { _, err := e.rm.AddItem(rm.ID, "t", "maybe"); return err },
		"unknown item": func() error { _, err := e.rm.UpdateItem(rm.ID, "nope", "", roadmap.Done); return err },
		"unknown map":  func() error { _, err := e.rm.AddItem("nope", "t", ""); return err },
	} {
		if abi.CodeOf(f()) != abi.CodeInvalidArgument {
			t.Errorf("%s", name)
		}
	}
}
