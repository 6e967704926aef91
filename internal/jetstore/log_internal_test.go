package jetstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// TestLostAckStored: a publish that was stored but whose acknowledgement never reached the
// appender (a leader moving, a loaded server) is recognised as stored (the subject's newest
// message is this chunk), not reported as refused: the retry that the stale subject read allowed is refused with
// "wrong last sequence" because of it, which was TestContracts/R3/EventLog/Bounds failing about
// once in four runs under load.
func TestLostAckStored(t *testing.T) {
	ctx := context.Background()
	srv, err := StartEmbedded(ctx, EmbeddedOptions{Name: "n", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := Open(ctx, nc, Options{Cluster: "lostack", Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })

	for _, tc := range []struct {
		name  string
		stale bool // the first read of the subject after the lost ack does not show it yet
	}{{"ack lost", false}, {"ack lost, retry refused", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := st.OpenLog(ctx, "s-"+map[bool]string{false: "a", true: "b"}[tc.stale], live.LogLimits{Events: 100, Bytes: 1 << 20, Pinned: 10})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			var calls atomic.Int32
			real := l.publishMsg
			l.publishMsg = func(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
				n := calls.Add(1)
				if n == 1 && tc.stale {
					// What a stale read allows: a retry with the old expected sequence, while
					// the first attempt is stored meanwhile. The retry is refused.
					l.appendMu.Lock()
					l.lastStream, l.lastSeq = 0, 0
					l.appendMu.Unlock()
					if _, err := real(ctx, m, opts...); err != nil {
						return nil, err
					}
					return real(ctx, m, opts...) // refused: the subject moved
				}
				ack, err := real(ctx, m, opts...)
				if n == 1 && err == nil {
					return nil, context.DeadlineExceeded // stored, its answer lost
				}
				return ack, err
			}
			for i := range 3 {
				if _, err := l.Append(ctx, &live.Event{Type: abi.EventData, Time: time.Unix(0, 0), SessionID: "x", Payload: live.Output("e")}); err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
				if err := l.Flush(ctx); err != nil {
					t.Fatalf("flush %d: %v", i, err)
				}
			}
			if last, err := l.LastSeq(ctx); err != nil || last != 3 {
				t.Fatalf("LastSeq = %d, %v; want 3", last, err)
			}
			p, err := l.Read(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Events) != 3 || p.Events[0].Seq != 1 || p.Events[2].Seq != 3 {
				t.Fatalf("read %d events", len(p.Events))
			}
		})
	}
}
