package broker_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
)

func open(t *testing.T, path string) *broker.Store {
	t.Helper()
	s, err := broker.Open(context.Background(), path, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func contents(ms []broker.Message) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Content)
	}
	return strings.Join(out, ",")
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]broker.Mode{
		"": broker.Followup, "steer": broker.Steer, "followup": broker.Followup, "follow-up": broker.Followup,
		"collect": broker.Collect, "steer-backlog": broker.SteerBacklog, "steer+backlog": broker.SteerBacklog,
		"queue": broker.Queue, "interrupt": broker.Interrupt, " Steer ": broker.Steer,
		"reject": broker.Reject, "rollback": broker.Rollback,
	} {
		if got, err := broker.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := broker.ParseMode("shout"); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("an unknown mode: %v", err)
	}
}

// TestOrderAndModes: FIFO by default; steering messages go first; an interrupt clears what is
// queued (kept as cleared, named in its answer); a steer-backlog goes first when it steers a
// running turn, else in order, and is one message either way (no followup copy).
func TestOrderAndModes(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "broker", "queues.db"))
	ctx := context.Background()
	enq := func(key string, mode broker.Mode, text string) broker.Message {
		t.Helper()
		m, err := s.Enqueue(ctx, key, mode, text, "")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	enq("k", broker.Followup, "a")
	enq("k", broker.Queue, "b")
	enq("other", broker.Followup, "x")
	enq("k", broker.Steer, "s")
	enq("k", broker.SteerBacklog, "idle-sb")
	if _, err := s.EnqueueWith(ctx, "k", broker.SteerBacklog, "sb", "", broker.EnqueueOptions{Steer: true}); err != nil {
		t.Fatal(err)
	}
	q, err := s.Queued(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(q); got != "s,sb,a,b,idle-sb" {
		t.Fatalf("order %s", got)
	}
	if err := s.Delivered(ctx, []string{q[0].ID}, "entry1"); err != nil {
		t.Fatal(err)
	}
	in := enq("k", broker.Interrupt, "stop")
	if len(in.Cleared) != 4 {
		t.Fatalf("the interrupt cleared %v", in.Cleared)
	}
	q, _ = s.Queued(ctx, "k")
	if got := contents(q); got != "stop" {
		t.Fatalf("after the interrupt: %s", got)
	}
	h, err := s.History(ctx, "k", 100)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]int{}
	for _, m := range h {
		states[m.State]++
		if m.State == broker.StateDelivered && (m.Content != "s" || m.EntryID != "entry1") {
			t.Errorf("delivered %+v", m)
		}
	}
	if fmt.Sprint(states) != "map[cleared:4 delivered:1 queued:1]" {
		t.Fatalf("history %v", states)
	}
	keys, err := s.Keys(ctx)
	if err != nil || strings.Join(keys, ",") != "k,other" {
		t.Fatalf("keys %v %v", keys, err)
	}
}

// TestDurable: what Enqueue acknowledged is there after the store is closed and reopened
// (the file 0600 in a 0700 directory); a symlink in its place is refused.
func TestDurable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "broker", "queues.db")
	s, err := broker.Open(context.Background(), path, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Enqueue(context.Background(), "k", broker.Followup, fmt.Sprintf("m%d", i), ""); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, path)
	q, err := s2.Queued(context.Background(), "k")
	if err != nil || len(q) != 20 {
		t.Fatalf("%d queued after reopening, %v", len(q), err)
	}
	for i := 1; i < len(q); i++ {
		if q[i].Seq <= q[i-1].Seq {
			t.Fatal("not in order")
		}
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode(), err, want)
		}
	}
	evil := filepath.Join(t.TempDir(), "queues.db")
	if err := os.Symlink(path, evil); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.Open(context.Background(), evil, broker.Options{}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("a symlink: %v", err)
	}
}

func TestRefused(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "q.db"))
	ctx := context.Background()
	for name, tc := range map[string]struct {
		key, text string
		mode      broker.Mode
	}{
		"no key":    {"", "x", broker.Followup},
		"empty":     {"k", " \n", broker.Followup},
		"too large": {"k", strings.Repeat("x", broker.MaxContent+broker.MaxHeader+1), broker.Followup},
		"bad mode":  {"k", "x", "shout"},
	} {
		if _, err := s.Enqueue(ctx, tc.key, tc.mode, tc.text, ""); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%s: %v", name, err)
		}
	}
	q, _ := s.Queued(ctx, "k")
	if len(q) != 0 {
		t.Errorf("refused messages were stored: %d", len(q))
	}
}

// TestRejectAndRollback: a message stored only if the key has nothing queued (reject) is
// refused with BUSY otherwise; Refuse marks a queued one refused unless it was delivered
// first; a rollback message keeps the message it rolls back (Get), also in a store made
// before the column existed.
func TestRejectAndRollback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	// A store of the previous version: no rolls_back column.
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(`CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, key TEXT NOT NULL,
		priority INTEGER NOT NULL DEFAULT 0, mode TEXT NOT NULL, content TEXT NOT NULL, sender TEXT NOT NULL DEFAULT '', state TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '', created_ms INTEGER NOT NULL, done_ms INTEGER NOT NULL DEFAULT 0, entry_id TEXT NOT NULL DEFAULT '');
		INSERT INTO messages (id, key, mode, content, state, created_ms) VALUES ('msg_old', 'k', 'followup', 'old', 'queued', 1);`); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	ctx := context.Background()
	if _, err := s.EnqueueWith(ctx, "k", broker.Reject, "no", "", broker.EnqueueOptions{IfIdle: true}); abi.CodeOf(err) != abi.CodeBusy {
		t.Fatalf("reject with one queued: %v", err)
	}
	if err := s.Delivered(ctx, []string{"msg_old"}, "e1"); err != nil {
		t.Fatal(err)
	}
	yes, err := s.EnqueueWith(ctx, "k", broker.Reject, "yes", "", broker.EnqueueOptions{IfIdle: true})
	if err != nil {
		t.Fatalf("reject with none queued: %v", err)
	}
	if refused, err := s.Refuse(ctx, yes.ID, "busy after all"); err != nil || !refused {
		t.Fatalf("refuse a queued one: %v %v", refused, err)
	}
	late, err := s.EnqueueWith(ctx, "k", broker.Reject, "late", "", broker.EnqueueOptions{IfIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delivered(ctx, []string{late.ID}, "e2"); err != nil {
		t.Fatal(err)
	}
	if refused, err := s.Refuse(ctx, late.ID, "too late"); err != nil || refused {
		t.Fatalf("refuse a delivered one: %v %v", refused, err)
	}
	rb, err := s.EnqueueWith(ctx, "k", broker.Rollback, "instead", "", broker.EnqueueOptions{RollsBack: late.ID})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, []string{rb.ID, yes.ID, "msg_old"})
	if err != nil || len(got) != 3 {
		t.Fatalf("get %+v %v", got, err)
	}
	if got[0].RollsBack != "" || got[1].State != broker.StateRefused || got[2].RollsBack != late.ID || got[2].Priority != 1 || got[2].Mode != broker.Rollback {
		t.Fatalf("stored %+v", got)
	}
}
