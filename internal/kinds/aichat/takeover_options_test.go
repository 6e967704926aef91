package aichat_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
)

// TestTakeOverOptions: the options a node taking a conversation over reopens it with are the
// ones its session was opened with, read from the session's metadata as it is here and as
// another node reads it from the cluster's record (JSON). Seen through the binary
// (TestClusterConversationTakeover): a session opened with --temperature 0, taken over, asked
// the model for no temperature.
func TestTakeOverOptions(t *testing.T) {
	e := newEnv(t, echo)
	r := e.gateway(t)
	zero := 0.0
	want := abi.AIChatOptions{Backend: "fake", Model: "fake-1", Agent: "main", Level: "yolo", Workspace: e.ws, Thinking: "low",
		Temperature: &zero, MaxToolIterations: 4, QueueMode: "collect"}
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Options: raw})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Get(context.Background(), s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var record abi.Session
	if err := json.Unmarshal(b, &record); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    abi.Session
	}{{"here", got}, {"from a record", record}} {
		t.Run(tc.name, func(t *testing.T) {
			o := aichat.OptionsOf(tc.s)
			if o.Temperature == nil || *o.Temperature != 0 {
				t.Errorf("temperature %v, want 0", o.Temperature)
			}
			w := want
			o.Temperature, w.Temperature = nil, nil
			if !reflect.DeepEqual(o, w) {
				t.Errorf("options %+v, want %+v", o, w)
			}
		})
	}
}
