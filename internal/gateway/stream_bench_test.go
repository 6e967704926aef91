package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
)

var benchChunk = bytes.Repeat([]byte("Z"), 4095) // a typical PTY read of bulk output

// BenchmarkStreamFanout publishes 4 KiB terminal output events and delivers each to N WebSocket
// subscribers (loopback TCP, ansi). One op is one event reaching every subscriber; MB/s counts
// payload bytes over all subscribers. "frames" subscribers read frames without decoding them (the
// gateway's own cost); "client" subscribers decode every event with internal/client and its
// payload with encoding/json, as a Go consumer does. The event log is large enough that nobody
// falls behind the retained window.
func BenchmarkStreamFanout(b *testing.B) {
	for _, subs := range []int{1, 50} {
		for _, mode := range []string{"frames", "client"} {
			b.Run(fmt.Sprintf("subs=%d/%s", subs, mode), func(b *testing.B) { benchFanout(b, subs, mode) })
		}
	}
}

func benchFanout(b *testing.B, subs int, mode string) {
	b.Helper()
	// A terminal kind without a PTY: the benchmark publishes output through its sink, so what
	// is measured is the registry and the gateway alone.
	k := livetest.NewFakeKind(abi.TypeTerminal, false)
	reg := newRegistry(b, live.Config{IdleTimeout: -1, Log: live.LogLimits{Events: 1 << 30, Bytes: 1 << 62}}, k)
	srv := httptest.NewServer(gateway.Handler(gateway.Options{Registry: reg}))
	defer srv.Close()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.Shutdown(ctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl := client.New(client.Target{URL: srv.URL})
	s, err := cl.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "bench"}})
	if err != nil {
		b.Fatal(err)
	}
	after, _ := reg.LastSeq(ctx, s.SessionID)
	n := b.N
	var wg sync.WaitGroup
	errs := make(chan error, subs)
	for range subs {
		var next func() (bool, error)
		switch mode {
		case "frames":
			u := strings.Replace(srv.URL, "http", "ws", 1) + fmt.Sprintf("/v1/sessions/%s/stream?after=%d", s.SessionID, after)
			c, _, err := websocket.Dial(ctx, u, nil)
			if err != nil {
				b.Fatal(err)
			}
			c.SetReadLimit(1 << 20)
			defer func() { _ = c.CloseNow() }()
			var buf bytes.Buffer
			next = func() (bool, error) {
				_, r, err := c.Reader(ctx)
				if err != nil {
					return false, err
				}
				buf.Reset()
				_, err = buf.ReadFrom(r)
				return bytes.HasPrefix(buf.Bytes(), []byte(`{"event":"data"`)), err
			}
		default:
			c, err := cl.Dial(ctx, s.SessionID, client.DialOptions{After: after})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Abort() }()
			next = func() (bool, error) {
				e, err := c.Next(ctx)
				if err != nil || e.Event != abi.EventData {
					return false, err
				}
				var out abi.TerminalOutput
				if err := json.Unmarshal(e.Payload, &out); err != nil {
					return false, err
				}
				return len(out.Content) == len(benchChunk), nil
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got := 0; got < n; {
				data, err := next()
				if err != nil {
					errs <- err
					return
				}
				if data {
					got++
				}
			}
		}()
	}
	sink := sinkOf(b, k, s.SessionID)
	b.SetBytes(int64(len(benchChunk) * subs))
	b.ReportAllocs()
	b.ResetTimer()
	for range n {
		sink.Output(append([]byte(nil), benchChunk...))
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
