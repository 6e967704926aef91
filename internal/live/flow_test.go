package live_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// flowSession is a fake terminal whose ring holds 8 events, so half a ring is 4 events.
func flowSession(t *testing.T, maxStall time.Duration) (*live.Registry, string, livetest.Probe) {
	t.Helper()
	k := livetest.NewFakeKind(abi.TypeTerminal, false)
	r := newRegistry(t, live.Config{Log: live.LogLimits{Events: 8, Bytes: 1 << 20, MaxStall: maxStall}}, k)
	s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	mustOK(t, err)
	return r, s.SessionID, k.Probe(t, s.SessionID)
}

// emitAsync emits n chunks from a goroutine (the producer may block) and reports each one done.
func emitAsync(p livetest.Probe, n int) <-chan int {
	done := make(chan int, n)
	go func() {
		for i := range n {
			p.Emit([]byte{'a' + byte(i%26)})
			done <- i
		}
		close(done)
	}()
	return done
}

func TestFlowOutputWaitsForFollower(t *testing.T) {
	r, id, p := flowSession(t, time.Hour) // never released: only acks move it
	last, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	f, err := r.Follow(context.Background(), id, last)
	mustOK(t, err)
	defer f.Close()

	done := emitAsync(p, 20)
	// The producer may run 4 events ahead of the follower, then must wait. Once it says it is
	// waiting, nothing but an ack can let it go (MaxStall is an hour), so the sixth chunk must
	// not be out, however slow the machine.
	for i := range 5 {
		if got := <-done; got != i {
			t.Fatalf("chunk %d done out of order (%d)", i, got)
		}
	}
	early := -1
	testkit.Eventually(t, "the producer to wait for the follower", func() bool {
		select {
		case early = <-done:
			return true // it did not wait: reported below, without waiting out the patience
		default:
			return live.FlowWaiting(f)
		}
	})
	if early < 0 {
		select {
		case early = <-done:
		default:
		}
	}
	if early >= 0 {
		t.Fatalf("chunk %d was published while the follower was 5 events behind", early)
	}
	if seq, err := r.LastSeq(context.Background(), id); err != nil || seq != last+5 {
		t.Fatalf("last sequence %d (%v) while the producer waits, want %d", seq, err, last+5)
	}
	// Acknowledge everything as it comes: the producer must get through all 20 with no loss.
	ctx := testCtx(t)
	after := last
	var got []byte
	for len(got) < 20 {
		b, err := r.Read(ctx, id, after, 0, time.Second)
		mustOK(t, err)
		for _, e := range b.Events {
			if e.Seq == 0 {
				t.Fatalf("follower missed events: %s", livetest.Describe(e))
			}
			got = append(got, e.Payload.(live.Output)...)
			f.Ack(e.Seq)
		}
		after = b.Next
	}
	for range done {
	}
	want := "abcdefghijklmnopqrst"
	if string(got) != want {
		t.Fatalf("follower read %q, want %q", got, want)
	}
}

func TestFlowStalledFollowerIsReleased(t *testing.T) {
	r, id, p := flowSession(t, 20*time.Millisecond)
	last, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	f, err := r.Follow(context.Background(), id, last) // never acknowledges anything
	mustOK(t, err)
	defer f.Close()

	done := emitAsync(p, 100)
	n := 0
	for range done {
		n++
	}
	if n != 100 {
		t.Fatalf("producer finished %d of 100 chunks", n)
	}
	// The stalled reader was lapped: it learns so explicitly.
	b, err := r.Read(testCtx(t), id, last, 0, 0)
	mustOK(t, err)
	if len(b.Events) == 0 || b.Events[0].Seq != 0 || livetest.MissedOf(t, b.Events[0]) == 0 {
		t.Fatalf("stalled follower got no EVENTS_MISSED first: %v", livetest.DescribeAll(b.Events))
	}
}

func TestFlowWithoutFollowersNeverWaits(t *testing.T) {
	r, id, p := flowSession(t, time.Hour)
	for range 100 {
		p.Emit([]byte("x")) // would block forever if anything waited
	}
	unwatch, err := r.Watch(context.Background(), id) // a plain watcher (long-poll) is not a follower
	mustOK(t, err)
	defer unwatch()
	for range 100 {
		p.Emit([]byte("y"))
	}
}

func TestFlowCloseReleasesWaitingProducer(t *testing.T) {
	r, id, p := flowSession(t, time.Hour)
	last, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	f, err := r.Follow(context.Background(), id, last)
	mustOK(t, err)
	defer f.Close()
	done := emitAsync(p, 20)
	for range 5 {
		<-done
	}
	_, err = r.Close(testCtx(t), id, abi.CloseRequested)
	mustOK(t, err)
	for range done { // the blocked producer must be let go
	}
}

func TestFlowFollowerCloseReleasesProducer(t *testing.T) {
	r, id, p := flowSession(t, time.Hour)
	last, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	f, err := r.Follow(context.Background(), id, last)
	mustOK(t, err)
	done := emitAsync(p, 20)
	for range 5 {
		<-done
	}
	f.Close()
	for range done {
	}
}

func TestFlowReleasedFollowerReengagesWhenCaughtUp(t *testing.T) {
	r, id, p := flowSession(t, 20*time.Millisecond)
	last, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	f, err := r.Follow(context.Background(), id, last)
	mustOK(t, err)
	defer f.Close()
	for range emitAsync(p, 6) { // stalls once, then the follower is released
	}
	if !live.FlowReleased(f) {
		t.Fatal("follower 6 events behind after MaxStall was not released")
	}
	head, err := r.LastSeq(context.Background(), id)
	mustOK(t, err)
	f.Ack(head)
	if live.FlowReleased(f) {
		t.Fatal("follower that caught up is still released")
	}
}

// TestFlowCountsEncodedBytes: data that comes encoded (a debug stream's batches of lines) is
// paced by its bytes as terminal output is, not only by its count of events: a follower more
// than half the log's byte budget behind holds the producer, before the ring, which evicts by
// bytes, can lap it.
func TestFlowCountsEncodedBytes(t *testing.T) {
	for name, payload := range map[string]any{
		"raw":    json.RawMessage(`"` + strings.Repeat("x", 198) + `"`),
		"joined": live.Joined{[]byte(`"`), []byte(strings.Repeat("x", 198)), []byte(`"`)},
	} {
		t.Run(name, func(t *testing.T) {
			k := livetest.NewFakeKind(abi.TypeTerminal, false)
			r := newRegistry(t, live.Config{Log: live.LogLimits{Events: 1000, Bytes: 1000, MaxStall: time.Hour}}, k)
			s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
			mustOK(t, err)
			last, err := r.LastSeq(context.Background(), s.SessionID)
			mustOK(t, err)
			f, err := r.Follow(context.Background(), s.SessionID, last)
			mustOK(t, err)
			defer f.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 10 {
					k.Instance(s.SessionID).EmitData(payload)
				}
			}()
			testkit.Eventually(t, "the producer to wait for the follower", func() bool { return live.FlowWaiting(f) })
			// 200 bytes an event: three are 600 bytes, past half the budget of 1000.
			if seq, err := r.LastSeq(context.Background(), s.SessionID); err != nil || seq != last+3 {
				t.Fatalf("last sequence %d (%v) while the producer waits, want %d", seq, err, last+3)
			}
			f.Ack(last + 10)
			for i := last + 4; i <= last+10; i++ {
				testkit.Eventually(t, "the producer to go on", func() bool {
					seq, _ := r.LastSeq(context.Background(), s.SessionID)
					f.Ack(seq)
					return seq >= i
				})
			}
			<-done
		})
	}
}

// TestFlowStalledFollowerIsReleasedWhileOthersProgress: the stall clock is each follower's
// own. A follower that never acknowledges anything is let go MaxStall after the producer
// began waiting for it, even while another follower, far behind, keeps acknowledging (more
// often than MaxStall) and so keeps the producer waiting for itself. (It used to be let go
// only once no follower at all had made progress for MaxStall: a stalled stream held the
// session as long as any other was still catching up.) In a synctest bubble: virtual time.
func TestFlowStalledFollowerIsReleasedWhileOthersProgress(t *testing.T) {
	const maxStall = time.Second
	synctest.Test(t, func(t *testing.T) {
		k := livetest.NewFakeKind(abi.TypeTerminal, false)
		r := newRegistry(t, live.Config{IdleTimeout: -1, Log: live.LogLimits{Events: 64, Bytes: 1 << 20, MaxStall: maxStall}}, k)
		s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
		mustOK(t, err)
		p := k.Probe(t, s.SessionID)
		last, err := r.LastSeq(context.Background(), s.SessionID)
		mustOK(t, err)
		stalled, err := r.Follow(context.Background(), s.SessionID, last)
		mustOK(t, err)
		defer stalled.Close()
		slow, err := r.Follow(context.Background(), s.SessionID, last)
		mustOK(t, err)
		defer slow.Close()
		done := emitAsync(p, 100)
		synctest.Wait() // 33 chunks out (half the ring is 32), then the producer waits for both
		if !live.FlowWaiting(stalled) {
			t.Fatal("the producer is not waiting for its followers")
		}
		// The slow one acknowledges a chunk every MaxStall/4: it progresses, and stays far
		// enough behind to hold the producer for longer than MaxStall.
		seq := last
		for range 8 {
			time.Sleep(maxStall / 4)
			seq++
			slow.Ack(seq)
			synctest.Wait()
		}
		if !live.FlowReleased(stalled) {
			t.Fatalf("the follower that never read is still waited for %s after the producer began to wait", 2*maxStall)
		}
		if live.FlowReleased(slow) {
			t.Fatal("the follower that kept acknowledging was let go")
		}
		// The slow one catches up, and the producer finishes without anyone being lapped but the
		// stalled follower.
		go func() {
			for range done {
			}
		}()
		for seq < last+100 {
			b, err := r.Read(context.Background(), s.SessionID, seq, 0, time.Second)
			mustOK(t, err)
			for _, e := range b.Events {
				if e.Seq == 0 {
					t.Fatalf("the slow follower missed events: %s", livetest.Describe(e))
				}
			}
			seq = b.Next
			slow.Ack(seq)
		}
	})
}
