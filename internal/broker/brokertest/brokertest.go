// Package brokertest is the contract of a broker.Queues (the ai-chat message queues): every
// store of them — SQLite on one node, JetStream in a cluster — runs Run.
package brokertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/testkit"
)

// Backing makes an empty backing store (a database file, a cluster's stream and buckets) and
// returns how to open an instance on it: every instance open answers for the same messages,
// as two processes, or two nodes, would. The test closes what open returns (Cleanup).
type Backing func(t *testing.T) (open func(t *testing.T) broker.Queues)

// Run runs the contract on the stores newBacking makes.
func Run(t *testing.T, newBacking Backing) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T) broker.Queues)
	}{
		{"OrderAndModes", testOrderAndModes},
		{"Interrupt", testInterrupt},
		{"RejectAndRefuse", testRejectAndRefuse},
		{"Rollback", testRollback},
		{"Invalid", testInvalid},
		{"Large", testLarge},
		{"Once", testOnce},
		{"OnceParallel", testOnceParallel},
		{"Deliver", testDeliver},
		{"DeliverParallel", testDeliverParallel},
		{"Drop", testDrop},
		{"HistoryAndKeys", testHistoryAndKeys},
		{"Origin", testOrigin},
		{"Reopen", testReopen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newBacking(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	t.Cleanup(cancel)
	return c
}

func contents(ms []broker.Message) string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Content)
	}
	return strings.Join(out, ",")
}

func enqueue(t *testing.T, q broker.Queues, key string, mode broker.Mode, text string, o broker.EnqueueOptions) broker.Message {
	t.Helper()
	m, err := q.EnqueueWith(ctx(t), key, mode, text, "", o)
	if err != nil {
		t.Fatalf("enqueue %q: %v", text, err)
	}
	return m
}

func queued(t *testing.T, q broker.Queues, key string) []broker.Message {
	t.Helper()
	ms, err := q.Queued(ctx(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func get(t *testing.T, q broker.Queues, ids ...string) []broker.Message {
	t.Helper()
	ms, err := q.Get(ctx(t), ids)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// testOrderAndModes: FIFO per key, keys apart; the steering modes (steer, interrupt,
// rollback, a steer-backlog that steers) go first, in their order; a steer-backlog with nothing
// to steer waits in order like a followup; collect, queue and followup are plain FIFO for the
// store (their debounce and turns are the caller's).
func testOrderAndModes(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	for _, tc := range []struct {
		key  string
		mode broker.Mode
		text string
		o    broker.EnqueueOptions
		prio int
	}{
		{"k", broker.Followup, "a", broker.EnqueueOptions{}, 0},
		{"k", broker.Queue, "b", broker.EnqueueOptions{}, 0},
		{"other", broker.Followup, "x", broker.EnqueueOptions{}, 0},
		{"k", broker.Steer, "s", broker.EnqueueOptions{}, 1},
		{"k", broker.SteerBacklog, "idle-sb", broker.EnqueueOptions{}, 0},
		{"k", broker.SteerBacklog, "sb", broker.EnqueueOptions{Steer: true}, 1},
		{"k", broker.Collect, "c", broker.EnqueueOptions{}, 0},
	} {
		m := enqueue(t, q, tc.key, tc.mode, tc.text, tc.o)
		if m.Priority != tc.prio || m.State != broker.StateQueued || m.Mode != tc.mode || m.Key != tc.key || m.ID == "" || m.Duplicate {
			t.Errorf("%s: stored %+v, want priority %d", tc.text, m, tc.prio)
		}
	}
	ms := queued(t, q, "k")
	if got := contents(ms); got != "s,sb,a,b,idle-sb,c" {
		t.Fatalf("order %s", got)
	}
	if got := contents(queued(t, q, "other")); got != "x" {
		t.Fatalf("other key %s", got)
	}
	for i, m := range ms {
		if m.Seq <= 0 || m.Created == "" || m.CreatedMs <= 0 {
			t.Errorf("message %d: %+v", i, m)
		}
	}
	// Seq is store order: a, b, ... are increasing whatever their priority.
	byStore := []broker.Message{ms[2], ms[3], ms[0], ms[4], ms[1], ms[5]} // a, b, s, idle-sb, sb, c
	for i := 1; i < len(byStore); i++ {
		if byStore[i].Seq <= byStore[i-1].Seq {
			t.Errorf("%s has seq %d after %s's %d", byStore[i].Content, byStore[i].Seq, byStore[i-1].Content, byStore[i-1].Seq)
		}
	}
}

// testInterrupt: an interrupt clears what was queued before it (kept as cleared with its
// reason, named in its answer), not a delivered message nor another key's, and goes first of
// what comes after.
func testInterrupt(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	a := enqueue(t, q, "k", broker.Followup, "a", broker.EnqueueOptions{})
	b := enqueue(t, q, "k", broker.Collect, "b", broker.EnqueueOptions{})
	s := enqueue(t, q, "k", broker.Steer, "s", broker.EnqueueOptions{})
	enqueue(t, q, "other", broker.Followup, "x", broker.EnqueueOptions{})
	if err := q.Delivered(ctx(t), []string{s.ID}, "e1"); err != nil {
		t.Fatal(err)
	}
	in := enqueue(t, q, "k", broker.Interrupt, "stop", broker.EnqueueOptions{})
	slices.Sort(in.Cleared)
	want := []string{a.ID, b.ID}
	slices.Sort(want)
	if !slices.Equal(in.Cleared, want) || in.Priority != 1 {
		t.Fatalf("the interrupt: %+v, want cleared %v", in, want)
	}
	after := enqueue(t, q, "k", broker.Followup, "after", broker.EnqueueOptions{})
	if got := contents(queued(t, q, "k")); got != "stop,after" {
		t.Fatalf("after the interrupt: %s", got)
	}
	if got := contents(queued(t, q, "other")); got != "x" {
		t.Fatalf("the other key: %s", got)
	}
	got := get(t, q, a.ID, b.ID, s.ID, in.ID, after.ID)
	for i, wantState := range []string{broker.StateCleared, broker.StateCleared, broker.StateDelivered, broker.StateQueued, broker.StateQueued} {
		if got[i].State != wantState {
			t.Errorf("%s: %s, want %s", got[i].Content, got[i].State, wantState)
		}
	}
	if got[0].Reason != broker.ClearedBy(in.ID) || got[0].Done == "" {
		t.Errorf("cleared %+v", got[0])
	}
	if got[2].EntryID != "e1" {
		t.Errorf("delivered %+v", got[2])
	}
}

// testRejectAndRefuse: a message stored only if the key has nothing queued (IfIdle) is refused
// with BUSY otherwise; Refuse marks a queued one refused, unless it left the queued state first.
func testRejectAndRefuse(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	c := ctx(t)
	old := enqueue(t, q, "k", broker.Followup, "old", broker.EnqueueOptions{})
	if _, err := q.EnqueueWith(c, "k", broker.Reject, "no", "", broker.EnqueueOptions{IfIdle: true}); abi.CodeOf(err) != abi.CodeBusy {
		t.Fatalf("reject with one queued: %v", err)
	}
	if err := q.Delivered(c, []string{old.ID}, "e1"); err != nil {
		t.Fatal(err)
	}
	yes := enqueue(t, q, "k", broker.Reject, "yes", broker.EnqueueOptions{IfIdle: true})
	if refused, err := q.Refuse(c, yes.ID, "busy after all"); err != nil || !refused {
		t.Fatalf("refuse a queued one: %v %v", refused, err)
	}
	if refused, err := q.Refuse(c, yes.ID, "again"); err != nil || refused {
		t.Fatalf("refuse a refused one: %v %v", refused, err)
	}
	late := enqueue(t, q, "k", broker.Reject, "late", broker.EnqueueOptions{IfIdle: true})
	if err := q.Delivered(c, []string{late.ID}, "e2"); err != nil {
		t.Fatal(err)
	}
	if refused, err := q.Refuse(c, late.ID, "too late"); err != nil || refused {
		t.Fatalf("refuse a delivered one: %v %v", refused, err)
	}
	got := get(t, q, yes.ID, late.ID)
	if got[0].State != broker.StateRefused || got[0].Reason != "busy after all" || got[1].State != broker.StateDelivered || got[1].EntryID != "e2" {
		t.Fatalf("stored %+v", got)
	}
	if len(queued(t, q, "k")) != 0 {
		t.Fatal("a refused message is queued")
	}
}

// testRollback: a rollback message keeps the message it rolls back, steers, and reads back.
func testRollback(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	enqueue(t, q, "k", broker.Followup, "waits", broker.EnqueueOptions{})
	rb := enqueue(t, q, "k", broker.Rollback, "instead", broker.EnqueueOptions{RollsBack: "msg_turn"})
	got := get(t, q, rb.ID)
	if len(got) != 1 || got[0].RollsBack != "msg_turn" || got[0].Priority != 1 || got[0].Mode != broker.Rollback {
		t.Fatalf("stored %+v", got)
	}
	if got := contents(queued(t, q, "k")); got != "instead,waits" {
		t.Fatalf("order %s", got)
	}
}

// testInvalid: what is not a message is refused (INVALID_ARGUMENT) and nothing is stored.
func testInvalid(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	for name, tc := range map[string]struct {
		key, text string
		mode      broker.Mode
		id        string
	}{
		"no key":     {"", "x", broker.Followup, ""},
		"empty":      {"k", " \n", broker.Followup, ""},
		"too large":  {"k", strings.Repeat("x", broker.MaxContent+broker.MaxHeader+1), broker.Followup, ""},
		"bad mode":   {"k", "x", "shout", ""},
		"long id":    {"k", "x", broker.Followup, strings.Repeat("i", broker.MaxID+1)},
		"no once id": {"k", "x", broker.Followup, "-"},
	} {
		var err error
		if tc.id == "-" {
			_, err = q.EnqueueOnce(ctx(t), "", tc.key, tc.mode, tc.text, "")
		} else {
			_, err = q.EnqueueWith(ctx(t), tc.key, tc.mode, tc.text, "", broker.EnqueueOptions{ID: tc.id})
		}
		if abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	if ms := queued(t, q, "k"); len(ms) != 0 {
		t.Errorf("refused messages were stored: %d", len(ms))
	}
}

// testLarge: a message of the largest size (MaxContent with its header), and one of bytes JSON
// would escape, are stored whole.
func testLarge(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	big := strings.Repeat("0123456789abcdef", (broker.MaxContent+broker.MaxHeader)/16)
	odd := strings.Repeat("\x01\"<\\é\n", 1000)
	for _, text := range []string{big, odd} {
		m := enqueue(t, q, "k", broker.Followup, text, broker.EnqueueOptions{})
		got := get(t, q, m.ID)
		if len(got) != 1 || got[0].Content != text {
			t.Fatalf("a message of %d bytes read back as %d", len(text), len(got[0].Content))
		}
	}
	ms := queued(t, q, "k")
	if len(ms) != 2 || ms[0].Content != big || ms[1].Content != odd {
		t.Fatalf("queued %d", len(ms))
	}
}

// testOnce: a message stored under an id is stored once, whichever way it is stored again,
// under whichever key; Has knows it.
func testOnce(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	c := ctx(t)
	if has, err := q.Has(c, "fire-1"); err != nil || has {
		t.Fatalf("has before: %v %v", has, err)
	}
	fresh, err := q.EnqueueOnce(c, "fire-1", "k", broker.Followup, "first", "cron:j")
	if err != nil || !fresh {
		t.Fatalf("first: %v %v", fresh, err)
	}
	for name, again := range map[string]func() (bool, error){
		"EnqueueOnce": func() (bool, error) { return q.EnqueueOnce(c, "fire-1", "k", broker.Followup, "second", "") },
		"another key": func() (bool, error) { return q.EnqueueOnce(c, "fire-1", "k2", broker.Followup, "third", "") },
		"Announce":    func() (bool, error) { return q.Announce(c, "fire-1", "k", "fourth", "", "r1") },
		"EnqueueWith": func() (bool, error) {
			m, err := q.EnqueueWith(c, "k", broker.Steer, "fifth", "", broker.EnqueueOptions{ID: "fire-1"})
			if err == nil && (!m.Duplicate || m.ID != "fire-1") {
				return true, fmt.Errorf("answer %+v", m)
			}
			return !m.Duplicate, err
		},
	} {
		if fresh, err := again(); err != nil || fresh {
			t.Errorf("%s: fresh %v, %v", name, fresh, err)
		}
	}
	if got := contents(queued(t, q, "k")); got != "first" {
		t.Fatalf("queued %s", got)
	}
	if got := queued(t, q, "k2"); len(got) != 0 {
		t.Fatalf("the other key has %d", len(got))
	}
	if has, err := q.Has(c, "fire-1"); err != nil || !has {
		t.Fatalf("has after: %v %v", has, err)
	}
	// Still once after it was delivered.
	if err := q.Delivered(c, []string{"fire-1"}, "e1"); err != nil {
		t.Fatal(err)
	}
	if fresh, err := q.EnqueueOnce(c, "fire-1", "k", broker.Followup, "late", ""); err != nil || fresh {
		t.Fatalf("after delivery: %v %v", fresh, err)
	}
	if got := queued(t, q, "k"); len(got) != 0 {
		t.Fatalf("queued again: %s", contents(got))
	}
}

// testOnceParallel: callers on two instances store one id at once; exactly one is fresh, and one
// message is stored.
func testOnceParallel(t *testing.T, open func(t *testing.T) broker.Queues) {
	qs := []broker.Queues{open(t), open(t)}
	const callers = 8
	for round := range 3 {
		id := fmt.Sprint("announce-", round)
		var fresh atomic.Int32
		var wg sync.WaitGroup
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				q := qs[i%len(qs)]
				var ok bool
				var err error
				if i%2 == 0 {
					ok, err = q.Announce(context.Background(), id, "k", fmt.Sprint("from ", i), "", "r")
				} else {
					ok, err = q.EnqueueOnce(context.Background(), id, "k", broker.Followup, fmt.Sprint("from ", i), "")
				}
				if err != nil {
					t.Error(err)
				}
				if ok {
					fresh.Add(1)
				}
			}()
		}
		wg.Wait()
		if n := fresh.Load(); n != 1 {
			t.Fatalf("round %d: %d callers were fresh", round, n)
		}
	}
	for _, q := range qs {
		if ms := queued(t, q, "k"); len(ms) != 3 {
			t.Fatalf("%d queued: %s", len(ms), contents(ms))
		}
	}
}

// testDeliver: a delivered message is never queued again; Deliver answers what it moved;
// a message that left the queued state keeps its first end.
func testDeliver(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	c := ctx(t)
	a := enqueue(t, q, "k", broker.Followup, "a", broker.EnqueueOptions{})
	enqueue(t, q, "k", broker.Followup, "b", broker.EnqueueOptions{})
	d := enqueue(t, q, "k", broker.Collect, "d", broker.EnqueueOptions{})
	if err := q.Drop(c, []string{d.ID}, "cap"); err != nil {
		t.Fatal(err)
	}
	won, err := q.Deliver(c, []string{a.ID, d.ID, "msg_unknown"}, "e1")
	if err != nil || !slices.Equal(won, []string{a.ID}) {
		t.Fatalf("deliver: %v %v", won, err)
	}
	if won, err := q.Deliver(c, []string{a.ID}, "e2"); err != nil || len(won) != 0 {
		t.Fatalf("deliver again: %v %v", won, err)
	}
	if won, err := q.Deliver(c, nil, "e3"); err != nil || len(won) != 0 {
		t.Fatalf("deliver nothing: %v %v", won, err)
	}
	if got := contents(queued(t, q, "k")); got != "b" {
		t.Fatalf("queued %s", got)
	}
	got := get(t, q, a.ID, d.ID)
	if got[0].State != broker.StateDelivered || got[0].EntryID != "e1" || got[0].Done == "" || got[1].State != broker.StateDropped || got[1].EntryID != "" {
		t.Fatalf("stored %+v", got)
	}
	if got := get(t, q, "msg_unknown"); len(got) != 0 {
		t.Fatalf("an unknown id: %+v", got)
	}
}

// testDeliverParallel: deliverers on two instances deliver the same messages at once; each
// message is won by exactly one.
func testDeliverParallel(t *testing.T, open func(t *testing.T) broker.Queues) {
	qs := []broker.Queues{open(t), open(t), open(t)}
	var ids []string
	for i := range 5 {
		ids = append(ids, enqueue(t, qs[0], "k", broker.Followup, fmt.Sprint("m", i), broker.EnqueueOptions{}).ID)
	}
	wins := make([][]string, len(qs))
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won, err := q.Deliver(context.Background(), ids, fmt.Sprint("entry-", i))
			if err != nil {
				t.Error(err)
			}
			wins[i] = won
		}()
	}
	wg.Wait()
	count := map[string]int{}
	winner := map[string]string{}
	for i, won := range wins {
		for _, id := range won {
			count[id]++
			winner[id] = fmt.Sprint("entry-", i)
		}
	}
	for _, id := range ids {
		if count[id] != 1 {
			t.Fatalf("%s won %d times (%v)", id, count[id], wins)
		}
	}
	for _, m := range get(t, qs[1], ids...) {
		if m.State != broker.StateDelivered || m.EntryID != winner[m.ID] {
			t.Fatalf("%+v, won by %s", m, winner[m.ID])
		}
	}
}

// testDrop: dropped messages keep their reason and leave the queue.
func testDrop(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	a := enqueue(t, q, "k", broker.Collect, "a", broker.EnqueueOptions{})
	b := enqueue(t, q, "k", broker.Collect, "b", broker.EnqueueOptions{})
	if err := q.Drop(ctx(t), []string{a.ID}, "collect cap 1"); err != nil {
		t.Fatal(err)
	}
	if err := q.Drop(ctx(t), nil, "nothing"); err != nil {
		t.Fatal(err)
	}
	if got := contents(queued(t, q, "k")); got != "b" {
		t.Fatalf("queued %s", got)
	}
	got := get(t, q, b.ID, a.ID)
	if got[0].ID != a.ID || got[0].State != broker.StateDropped || got[0].Reason != "collect cap 1" || got[1].State != broker.StateQueued {
		t.Fatalf("stored (store order) %+v", got)
	}
}

// testHistoryAndKeys: History is the key's last n messages of every state, newest last; Keys the
// conversations with something queued.
func testHistoryAndKeys(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	c := ctx(t)
	if keys, err := q.Keys(c); err != nil || len(keys) != 0 {
		t.Fatalf("keys of an empty store: %v %v", keys, err)
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, enqueue(t, q, "k", broker.Followup, fmt.Sprint("m", i), broker.EnqueueOptions{}).ID)
	}
	enqueue(t, q, "b", broker.Followup, "x", broker.EnqueueOptions{})
	done := enqueue(t, q, "a", broker.Followup, "y", broker.EnqueueOptions{})
	enqueue(t, q, "k", broker.Steer, "s", broker.EnqueueOptions{})
	if err := q.Delivered(c, []string{ids[0], ids[1], done.ID}, "e"); err != nil {
		t.Fatal(err)
	}
	h, err := q.History(c, "k", 3)
	if err != nil || contents(h) != "m3,m4,s" {
		t.Fatalf("history 3: %s %v", contents(h), err)
	}
	h, err = q.History(c, "k", 100)
	if err != nil || contents(h) != "m0,m1,m2,m3,m4,s" || h[0].State != broker.StateDelivered || h[2].State != broker.StateQueued {
		t.Fatalf("history: %s %v", contents(h), err)
	}
	keys, err := q.Keys(c)
	if err != nil || strings.Join(keys, ",") != "b,k" {
		t.Fatalf("keys %v %v", keys, err)
	}
}

// testOrigin: a message keeps where it came from, every way of storing one.
func testOrigin(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	c := ctx(t)
	hook := abi.Origin{Kind: abi.OriginWebhook, ID: "relay", Channel: "telegram", Peer: "alice", ChatType: "direct"}
	m := enqueue(t, q, "k", broker.Followup, "hi", broker.EnqueueOptions{Origin: hook})
	plain := enqueue(t, q, "k", broker.Followup, "hi", broker.EnqueueOptions{})
	if _, err := q.Announce(c, "announce_r1", "k", "done", "subagent:r1", "r1"); err != nil {
		t.Fatal(err)
	}
	got := get(t, q, m.ID, plain.ID, "announce_r1")
	if got[0].Origin != hook || got[1].Origin != (abi.Origin{}) || got[2].Origin != broker.AnnounceOrigin("r1") ||
		got[2].Mode != broker.Followup || got[2].From != "subagent:r1" {
		t.Fatalf("origins %+v", got)
	}
	if err := q.Delivered(c, []string{m.ID}, "e"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, q, m.ID); got[0].Origin != hook || got[0].From != "" {
		t.Fatalf("after delivery %+v", got[0])
	}
}

// testReopen: an instance closed and another opened on the same backing store have every
// message in its state, and the order and once-only ids go on.
func testReopen(t *testing.T, open func(t *testing.T) broker.Queues) {
	q := open(t)
	c := ctx(t)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.Enqueue(context.Background(), "k", broker.Followup, fmt.Sprint("m", i), ""); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if _, err := q.EnqueueOnce(c, "once", "k2", broker.Followup, "o", ""); err != nil {
		t.Fatal(err)
	}
	before := queued(t, q, "k")
	if err := q.Delivered(c, []string{before[0].ID}, "e"); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q2 := open(t)
	after := queued(t, q2, "k")
	if len(after) != 9 {
		t.Fatalf("%d queued after reopening", len(after))
	}
	for i, m := range after {
		if m.ID != before[i+1].ID || m.Content != before[i+1].Content || m.Seq != before[i+1].Seq {
			t.Fatalf("message %d: %+v, was %+v", i, m, before[i+1])
		}
	}
	if got := get(t, q2, before[0].ID); got[0].State != broker.StateDelivered {
		t.Fatalf("delivered before: %+v", got)
	}
	if fresh, err := q2.EnqueueOnce(c, "once", "k2", broker.Followup, "o", ""); err != nil || fresh {
		t.Fatalf("once after reopening: %v %v", fresh, err)
	}
	last := enqueue(t, q2, "k", broker.Followup, "last", broker.EnqueueOptions{})
	if last.Seq <= after[len(after)-1].Seq {
		t.Fatalf("seq %d after %d", last.Seq, after[len(after)-1].Seq)
	}
}
