package transcript

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestTurnsLargeSample: the real session's 453 assistant messages and 391
// tool calls all land in exactly one turn, each turn named by its final
// assistant message.
func TestTurnsLargeSample(t *testing.T) {
	t.Parallel()
	f := openFile(t, piSample(t, largeV1))
	turns := try(Turns(f, "")).ok(t)
	seen := map[string]bool{}
	calls, results, queries, complete := 0, 0, 0, 0
	prev := ""
	for i, tu := range turns {
		if tu.ID == "" || tu.ID != tu.ResponseID || tu.ID != tu.AssistantIDs[len(tu.AssistantIDs)-1] {
			t.Errorf("turn %d: id %q response %q assistants %v", i, tu.ID, tu.ResponseID, tu.AssistantIDs)
		}
		if e := f.Entry(tu.ID); e == nil || e.Role != "assistant" || e.Timestamp != tu.Timestamp {
			t.Errorf("turn %d: %q is not an assistant entry with the turn's timestamp", i, tu.ID)
		}
		if tu.ParentTurnID != prev {
			t.Errorf("turn %d: parent turn %q, want %q", i, tu.ParentTurnID, prev)
		}
		prev = tu.ID
		if len(tu.QueryIDs) == 0 {
			t.Errorf("turn %d has no query", i)
		}
		for _, id := range tu.AssistantIDs {
			if seen[id] {
				t.Errorf("assistant %s in two turns", id)
			}
			seen[id] = true
		}
		if len(tu.ToolCallIDs) != tu.ToolCalls || len(tu.ToolNames) != tu.ToolCalls {
			t.Errorf("turn %d: %d calls, %d ids, %d names", i, tu.ToolCalls, len(tu.ToolCallIDs), len(tu.ToolNames))
		}
		calls += tu.ToolCalls
		results += tu.ToolResults
		queries += len(tu.QueryIDs)
		if tu.Complete {
			complete++
		}
	}
	want := struct{ turns, assistants, calls, results, queries, complete int }{86, 453, 391, 373, 88, 64}
	got := struct{ turns, assistants, calls, results, queries, complete int }{len(turns), len(seen), calls, results, queries, complete}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestTurnsCrafted: grouping of queries, tools, steering, aborts, retries,
// open turns, branches.
func TestTurnsCrafted(t *testing.T) {
	t.Parallel()
	aborted := json.RawMessage(`{"role":"assistant","content":[],"provider":"p","model":"m","stopReason":"aborted"}`)
	failed := json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"x"}],"provider":"p","model":"m","stopReason":"error"}`)
	abortedCall := json.RawMessage(`{"role":"assistant","content":[{"type":"toolCall","id":"c9","name":"bash","arguments":{}}],"stopReason":"aborted"}`)
	type turn struct {
		id         string
		queries    []string
		assistants []string
		calls      int
		results    int
		complete   bool
	}
	cases := []struct {
		name  string
		build func(s *session)
		want  []turn
	}{
		{"one exchange", func(s *session) {
			s.add("u", userMsg("q")).add("a", assistantMsg("r"))
		}, []turn{{"a", []string{"u"}, []string{"a"}, 0, 0, true}}},
		{"several queries, one answer", func(s *session) {
			s.add("u1", userMsg("q")).add("u2", userMsg("more"))
			s.ids["c"] = try(s.w.AppendCustomMessage("trigger", "cron fired", false, nil)).ok(s.t)
			s.add("a", assistantMsg("r"))
		}, []turn{{"a", []string{"u1", "u2", "c"}, []string{"a"}, 0, 0, true}}},
		{"tool calls are part of the turn", func(s *session) {
			s.add("u", userMsg("q")).add("a1", assistantMsg("", call{"c1", "read", ""}, call{"c2", "bash", ""})).
				add("r1", toolResultMsg("c1", "")).add("r2", toolResultMsg("c2", "")).add("a2", assistantMsg("done")).
				add("u2", userMsg("next")).add("a3", assistantMsg("ok"))
		}, []turn{{"a2", []string{"u"}, []string{"a1", "a2"}, 2, 2, true}, {"a3", []string{"u2"}, []string{"a3"}, 0, 0, true}}},
		{"input while tools run steers the turn", func(s *session) {
			s.add("u", userMsg("q")).add("a1", assistantMsg("", call{"c1", "bash", ""})).add("r1", toolResultMsg("c1", "")).
				add("u2", userMsg("also this")).add("a2", assistantMsg("both done"))
		}, []turn{{"a2", []string{"u", "u2"}, []string{"a1", "a2"}, 1, 1, true}}},
		{"an aborted answer ends its turn", func(s *session) {
			s.add("u", userMsg("q")).add("a", aborted).add("u2", userMsg("again")).add("a2", assistantMsg("r"))
		}, []turn{{"a", []string{"u"}, []string{"a"}, 0, 0, false}, {"a2", []string{"u2"}, []string{"a2"}, 0, 0, true}}},
		{"aborted tool calls: the next input is a new turn", func(s *session) {
			s.add("u", userMsg("q")).add("a", abortedCall).add("u2", userMsg("again")).add("a2", assistantMsg("r"))
		}, []turn{{"a", []string{"u"}, []string{"a"}, 1, 0, false}, {"a2", []string{"u2"}, []string{"a2"}, 0, 0, true}}},
		{"a failed call is retried in the same turn", func(s *session) {
			s.add("u", userMsg("q")).add("a1", failed).add("a2", assistantMsg("r"))
		}, []turn{{"a2", []string{"u"}, []string{"a1", "a2"}, 0, 0, true}}},
		{"a second final message extends the turn", func(s *session) {
			s.add("u", userMsg("q")).add("a1", assistantMsg("r")).add("a2", assistantMsg("and more"))
		}, []turn{{"a2", []string{"u"}, []string{"a1", "a2"}, 0, 0, true}}},
		{"open turns", func(s *session) {
			s.add("u", userMsg("q")).add("a1", assistantMsg("", call{"c1", "bash", ""}))
		}, []turn{{"a1", []string{"u"}, []string{"a1"}, 1, 0, false}}},
		{"a query waiting for its answer", func(s *session) {
			s.add("u", userMsg("q")).add("a", assistantMsg("r")).add("u2", bash(1))
		}, []turn{{"a", []string{"u"}, []string{"a"}, 0, 0, true}, {"", []string{"u2"}, nil, 0, 0, false}}},
		{"settings, custom entries and labels are not turns", func(s *session) {
			try(s.w.AppendModelChange("p", "m")).ok(s.t)
			s.add("u", userMsg("q"))
			try(s.w.AppendCustom("x", nil)).ok(s.t)
			try(s.w.AppendLabel(s.ids["u"], "l")).ok(s.t)
			s.add("a", assistantMsg("r"))
		}, []turn{{"a", []string{"u"}, []string{"a"}, 0, 0, true}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSession(t, byte(160+i))
			tc.build(s)
			key := map[string]string{"": ""}
			for k, v := range s.ids {
				key[v] = k
			}
			names := func(ids []string) []string {
				var out []string
				for _, id := range ids {
					out = append(out, key[id])
				}
				return out
			}
			var got []turn
			for _, tu := range try(Turns(s.w.File(), s.w.LeafID())).ok(t) {
				got = append(got, turn{key[tu.ID], names(tu.QueryIDs), names(tu.AssistantIDs), tu.ToolCalls, tu.ToolResults, tu.Complete})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestTurnsOnBranch: turns follow the branch of the leaf asked for.
func TestTurnsOnBranch(t *testing.T) {
	t.Parallel()
	s := newSession(t, 180)
	s.add("u1", userMsg("q")).add("a1", assistantMsg("r")).add("u2", userMsg("left")).add("a2", assistantMsg("left answer"))
	if err := s.w.Branch(s.ids["a1"]); err != nil {
		t.Fatal(err)
	}
	s.add("u3", userMsg("right")).add("a3", assistantMsg("right answer"))
	for leaf, want := range map[string][]string{s.ids["a2"]: {s.ids["a1"], s.ids["a2"]}, "": {s.ids["a1"], s.ids["a3"]}} {
		var got []string
		for _, tu := range try(Turns(s.w.File(), leaf)).ok(t) {
			got = append(got, tu.ID)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("leaf %q: turns %v, want %v", leaf, got, want)
		}
	}
}

// TestTurnMarkers: markers are custom entries pi's context ignores, and
// read back as written.
func TestTurnMarkers(t *testing.T) {
	t.Parallel()
	s := newSession(t, 181)
	s.add("u1", userMsg("q")).add("a1", assistantMsg("", call{"c1", "bash", ""})).add("r1", toolResultMsg("c1", "")).add("a2", assistantMsg("done"))
	before := try(s.w.Context()).ok(t)
	turns := try(Turns(s.w.File(), "")).ok(t)
	if len(turns) != 1 {
		t.Fatalf("%d turns", len(turns))
	}
	mid := try(s.w.AppendTurnMarker(turns[0])).ok(t)
	s.add("u2", userMsg("next")).add("a3", assistantMsg("ok"))
	turns = try(Turns(s.w.File(), "")).ok(t)
	try(s.w.AppendTurnMarker(turns[1])).ok(t)
	if err := s.w.Close(); err != nil {
		t.Fatal(err)
	}
	f := openFile(t, s.w.Path())
	at := buildCtx(t, f, mid)
	before.LeafID = at.LeafID
	sameContext(t, "context at the marker", at, before)
	if got := len(buildCtx(t, f, "").Messages); got != 6 {
		t.Errorf("%d messages at the end, want 6 (markers left out)", got)
	}
	markers := try(TurnMarkers(f)).ok(t)
	ts := func(id string) int64 { return *unixMillis(f.Entry(id).Timestamp) }
	want := []TurnMarker{
		{Type: "turn", ID: s.ids["a2"], QueryMessageIDs: []string{s.ids["u1"]}, ResponseMessageID: s.ids["a2"], Timestamp: ts(s.ids["a2"]), ToolCallCount: 1, Model: "claude"},
		{Type: "turn", ID: s.ids["a3"], ParentTurnID: s.ids["a2"], QueryMessageIDs: []string{s.ids["u2"]}, ResponseMessageID: s.ids["a3"], Timestamp: ts(s.ids["a3"]), ToolCallCount: 0, Model: "claude"},
	}
	if !reflect.DeepEqual(markers, want) {
		t.Errorf("markers\n got %+v\nwant %+v", markers, want)
	}
	if e := f.Entry(mid); e.Type != "custom" || e.CustomType != TurnMarkerType {
		t.Errorf("marker entry %+v", e)
	}
	// Turns are computed the same with the markers in the path.
	again := try(Turns(f, "")).ok(t)
	if len(again) != 2 || again[0].ID != s.ids["a2"] || again[1].ID != s.ids["a3"] {
		t.Errorf("turns with markers: %+v", again)
	}
}
