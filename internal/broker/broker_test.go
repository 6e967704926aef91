package broker_test

import (
	"context"
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
// queued (kept as cleared, named in its answer); steer-backlog also leaves a followup copy.
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
	enq("k", broker.SteerBacklog, "sb")
	q, err := s.Queued(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := contents(q); got != "s,sb,a,b,sb" {
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
