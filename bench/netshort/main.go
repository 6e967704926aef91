// Command netshort counts the short connections a network-stream session reports
// (docs/BENCHMARKS.md, "Observers: short connections"): an HTTP server in this process (the
// built-in server "gateway") answers N requests, each on its own connection of a few
// milliseconds, while a session lists the sockets every interval; then it counts the closes
// of the server's side the session reported, and those with the bytes the server received
// and sent.
//
//	go run ./bench/netshort [-n 100] [-every 0] [-interval 1s] [-poll-only]
//
// -poll-only finds closes by polling alone, as sessions did before they followed the kernel's
// notices of ended sockets.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/netstream"
	"github.com/nexus-run/nexus/internal/live"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "netshort:", err)
		os.Exit(1)
	}
}

func run() error {
	n := flag.Int("n", 100, "short connections")
	interval := flag.Duration("interval", time.Second, "the session's listing interval")
	every := flag.Duration("every", 0, "a pause between requests")
	pollOnly := flag.Bool("poll-only", false, "no kernel notices: closes found by polling alone")
	flag.Parse()
	ctx := context.Background()

	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	body := strings.Repeat("x", 1000)
	srv := &http.Server{ReadHeaderTimeout: time.Minute, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, body)
	})}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()

	k := &netstream.Kind{}
	if *pollOnly {
		k.Subscribe = func() (netstream.Ends, error) { return nil, errors.New("not asked (-poll-only)") }
	}
	// A ring that holds every event of the run: this reader polls, and a poller that falls
	// behind the retained window loses events of its own (EVENTS_MISSED), which is not what
	// is measured here.
	reg, err := live.New(ctx, live.Config{IdleTimeout: -1, Log: live.LogLimits{Events: 1 << 17, Bytes: 256 << 20, Pinned: 1024}}, k)
	if err != nil {
		return err
	}
	defer func() { _ = reg.Shutdown(ctx) }()
	raw, _ := json.Marshal(abi.NetworkStreamOptions{IntervalMs: int(interval.Milliseconds())})
	s, err := reg.Create(ctx, abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: "gateway"}, Options: raw})
	if err != nil {
		return err
	}
	var after uint64
	var md map[string]any
	var missed []string // this reader fell behind the session's retained events
	// The closes of the server's side; a client's address names it, and comes again when the
	// kernel reuses the client's port.
	var closes []abi.Connection
	read := func(until time.Time, done func() bool) error {
		for !done() && time.Now().Before(until) {
			b, err := reg.Read(ctx, s.SessionID, after, 0, 100*time.Millisecond)
			if err != nil {
				return err
			}
			for _, e := range b.Events {
				after = e.Seq
				switch p := e.Payload.(type) {
				case abi.MetadataPayload:
					if md == nil {
						md = map[string]any{}
					}
					for k, v := range p.Metadata {
						md[k] = v
					}
				case abi.ErrorPayload:
					missed = append(missed, p.Error.Message)
				case abi.Connection:
					if p.Action == "close" && p.Local == l.Addr().String() {
						closes = append(closes, p)
					}
				}
			}
		}
		return nil
	}
	if err := read(time.Now().Add(time.Minute), func() bool { return md["caughtUp"] == true }); err != nil {
		return err
	}

	// Each request on its own connection; the client's address names the server's side.
	clients := map[string]int{}
	var reqBytes int
	start := time.Now()
	for range *n {
		c, err := new(net.Dialer).DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			return err
		}
		req := "GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
		reqBytes = len(req)
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		if _, err := io.ReadAll(c); err != nil {
			return err
		}
		clients[c.LocalAddr().String()]++
		_ = c.Close()
		time.Sleep(*every) // the load's pace, not a wait for a condition
	}
	took := time.Since(start)
	// Three intervals after the last request: every close a listing can find is found.
	if err := read(time.Now().Add(10**interval), func() bool { return len(closes) == *n }); err != nil {
		return err
	}
	seen, withBytes, withDuration := 0, 0, 0
	for _, c := range closes {
		if clients[c.Remote] == 0 {
			continue
		}
		clients[c.Remote]--
		seen++
		if c.BytesReceived >= uint64(reqBytes) && c.BytesSent > uint64(len(body)) {
			withBytes++
		}
		if c.DurationMs != nil {
			withDuration++
		}
	}
	fmt.Printf("%d short connections in %v (interval %v, closes %v): %d reported, %d with their bytes, %d with a duration; closesLost %v, closesMissed %v\n",
		*n, took.Round(time.Millisecond), *interval, md["closes"], seen, withBytes, withDuration, md["closesLost"], md["closesMissed"])
	if len(missed) > 0 {
		fmt.Printf("this reader fell behind: %q\n", missed)
	}
	return nil
}
