package aichat

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/broker"
)

// TestPlanCollect: the debounce, the cap and each drop policy, on an injected clock.
func TestPlanCollect(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	msg := func(i int, mode broker.Mode, at time.Duration) broker.Message {
		return broker.Message{ID: fmt.Sprintf("m%d", i), Mode: mode, Content: fmt.Sprintf("c%d", i), CreatedMs: t0.Add(at).UnixMilli()}
	}
	collect := func(n int) []broker.Message {
		var q []broker.Message
		for i := range n {
			q = append(q, msg(i, broker.Collect, time.Duration(i)*10*time.Millisecond))
		}
		return q
	}
	last := func(n int) time.Time { return t0.Add(time.Duration(n-1) * 10 * time.Millisecond) }
	o := CollectOptions{Debounce: 500 * time.Millisecond, Cap: 3}
	for _, tc := range []struct {
		name    string
		q       []broker.Message
		now     time.Time
		drop    string
		wait    time.Duration
		deliver string
		dropped string
		text    string
	}{
		{"a followup goes alone", []broker.Message{msg(0, broker.Followup, 0), msg(1, broker.Followup, 0)}, t0, "", 0, "m0", "", "c0"},
		{"collect waits for the debounce", collect(2), last(2).Add(200 * time.Millisecond), "", 300 * time.Millisecond, "", "", ""},
		{"collect after the debounce", collect(2), last(2).Add(500 * time.Millisecond), "", 0, "m0 m1", "", "c0\n\nc1"},
		{"the collect run stops at another mode", append(collect(2), msg(9, broker.Followup, 0)), last(2).Add(time.Second), "", 0, "m0 m1", "", "c0\n\nc1"},
		{"cap, drop old", collect(5), last(5).Add(time.Second), DropOld, 0, "m2 m3 m4", "m0 m1", "c2\n\nc3\n\nc4"},
		{"cap, drop new", collect(5), last(5).Add(time.Second), DropNew, 0, "m0 m1 m2", "m3 m4", "c0\n\nc1\n\nc2"},
		{"cap, summarize", collect(5), last(5).Add(time.Second), DropSummarize, 0, "m2 m3 m4", "m0 m1", "(2 earlier messages were left out; they began: \"c0\" \"c1\")\n\nc2\n\nc3\n\nc4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oo := o
			oo.Drop = tc.drop
			p := planCollect(tc.q, tc.now, oo.withDefaults())
			if p.wait != tc.wait || strings.Join(ids(p.deliver), " ") != tc.deliver || strings.Join(ids(p.dropped), " ") != tc.dropped || p.text != tc.text {
				t.Fatalf("plan: wait %v, deliver %v, dropped %v, text %q", p.wait, ids(p.deliver), ids(p.dropped), p.text)
			}
		})
	}
}
