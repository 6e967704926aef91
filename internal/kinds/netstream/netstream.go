// Package netstream is the network-stream session kind (docs/observers.md): a server's
// listening sockets and connections, from the kernel's socket diagnostics (sock_diag),
// attributed to the server's processes through their socket inodes (a server nexus does not
// manage: by its port), polled and reported as connection events (open, update, close) with
// byte counters and round-trip times, and metadata counts (established, time-wait, the accept
// queue). An interrupt stops the reports and the session stays open; resume reports what
// changed since the last report.
package netstream

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/sockdiag"
)

// DefaultInterval is how often the sockets are listed.
const DefaultInterval = time.Second

// Kind starts network-stream sessions.
type Kind struct {
	Processes *process.Manager
	// List lists the TCP sockets (default sockdiag.List); Inodes finds the ones processes
	// hold (default sockdiag.Inodes); both injectable for tests.
	List   func() ([]sockdiag.Socket, error)
	Inodes func(pids []int) map[uint32]bool
}

// Type implements live.Kind.
func (k *Kind) Type() abi.SessionType { return abi.TypeNetworkStream }

// Capabilities implements live.Kind: receive, close, stream, and interrupt (the seed's
// control rules: stop receiving updates, the session remains available).
func (k *Kind) Capabilities() abi.Capabilities {
	return abi.Capabilities{Receive: true, Interrupt: true, Close: true, Stream: true}
}

// Start implements live.Kind.
func (k *Kind) Start(_ context.Context, sink *live.Sink, req abi.CreateRequest) (live.Instance, error) {
	var opts abi.NetworkStreamOptions
	if len(req.Options) > 0 {
		if err := abi.DecodeStrict(req.Options, &opts); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "network-stream options: %v", err)
		}
	}
	if req.Context.ServerID == "" {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "a network-stream watches a server: context serverId (nexus server list)")
	}
	interval := DefaultInterval
	if opts.IntervalMs != 0 {
		if opts.IntervalMs < 10 || opts.IntervalMs > 3600_000 {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "intervalMs %d: between 10 and 3,600,000", opts.IntervalMs)
		}
		interval = time.Duration(opts.IntervalMs) * time.Millisecond
	}
	w := &watch{sink: sink, k: k, interval: interval, resume: make(chan struct{}), prev: map[uint64]sockdiag.Socket{}}
	md := map[string]any{"serverId": req.Context.ServerID, "intervalMs": interval.Milliseconds()}
	switch {
	case req.Context.ServerID == process.GatewayServer:
		self := os.Getpid()
		w.pids = func() []int { return []int{self} }
		md["pid"] = self
	case k.Processes == nil:
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway manages no servers")
	default:
		srv, err := k.Processes.Server(req.Context.ServerID)
		if err != nil {
			return nil, err
		}
		md["addr"] = srv.Addr
		if srv.ProcessID != "" {
			id := srv.ProcessID
			md["processId"] = id
			w.pids = func() []int { p, _ := k.Processes.PIDs(id); return p }
		} else {
			_, port, err := net.SplitHostPort(srv.Addr)
			if err != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "server %s: address %q", srv.Name, srv.Addr)
			}
			n, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "server %s: port %q", srv.Name, port)
			}
			w.port = uint16(n)
		}
	}
	w.ctx, w.stop = context.WithCancel(context.Background())
	sink.SetMetadata(md)
	return w, nil
}

// watch is one network-stream session.
type watch struct {
	sink     *live.Sink
	k        *Kind
	interval time.Duration
	pids     func() []int // the server's processes; nil: match port instead
	port     uint16

	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}

	mu     sync.Mutex
	held   bool
	paused bool
	resume chan struct{}
	prev   map[uint64]sockdiag.Socket // what the last report said, by socket cookie
	first  bool
	cache  sockdiag.InodeCache // of the poll goroutine
}

func (w *watch) list() ([]sockdiag.Socket, error) {
	if w.k.List != nil {
		return w.k.List()
	}
	return sockdiag.List()
}

func (w *watch) inodes(pids []int, all []sockdiag.Socket) map[uint32]bool {
	if w.k.Inodes != nil {
		return w.k.Inodes(pids)
	}
	alive := make(map[uint32]bool, len(all))
	for _, s := range all {
		if s.Inode != 0 {
			alive[s.Inode] = true
		}
	}
	return w.cache.Inodes(pids, func(i uint32) bool { return alive[i] })
}

// Begin implements live.Beginner: the first report follows the session's announcement.
func (w *watch) Begin() {
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			if !w.gate() {
				return
			}
			if err := w.poll(); err != nil {
				w.sink.Publish(abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeResourceUnavailable, Message: err.Error()}})
			}
			select {
			case <-w.ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (w *watch) gate() bool {
	for {
		w.mu.Lock()
		held, ch := w.held, w.resume
		w.mu.Unlock()
		if !held {
			return w.ctx.Err() == nil
		}
		select {
		case <-ch:
		case <-w.ctx.Done():
			return false
		}
	}
}

// poll lists the sockets, keeps the server's, and reports what changed since the last report.
func (w *watch) poll() error {
	all, err := w.list()
	if err != nil {
		return fmt.Errorf("list sockets: %w", err)
	}
	var mine map[uint32]bool
	if w.pids != nil {
		mine = w.inodes(w.pids(), all)
	}
	cur := map[uint64]sockdiag.Socket{}
	listenPorts := map[uint16]bool{}
	var listening, established, acceptQueue int
	for _, s := range all {
		ours := false
		switch {
		case mine != nil:
			ours = s.Inode != 0 && mine[s.Inode]
		default:
			ours = s.Local.Port() == w.port && s.State != "time-wait"
		}
		if !ours {
			continue
		}
		cur[s.Cookie] = s
		switch s.State {
		case "listen":
			listening++
			acceptQueue += int(s.RQueue)
			listenPorts[s.Local.Port()] = true
		case "established":
			established++
		}
	}
	// Sockets in TIME_WAIT belong to no process any more: they are the server's by its ports.
	timeWait := 0
	if w.pids == nil {
		listenPorts[w.port] = true
	}
	for _, s := range all {
		if s.State == "time-wait" && listenPorts[s.Local.Port()] {
			timeWait++
		}
	}
	w.mu.Lock()
	prev := w.prev
	w.prev = cur
	w.mu.Unlock()
	for c, s := range cur {
		old, ok := prev[c]
		switch {
		case !ok:
			w.sink.PublishFlow(conn("open", s))
		case old.BytesAcked != s.BytesAcked || old.BytesReceived != s.BytesReceived || old.State != s.State:
			w.sink.PublishFlow(conn("update", s))
		}
	}
	for c, s := range prev {
		if _, ok := cur[c]; !ok {
			w.sink.PublishFlow(conn("close", s))
		}
	}
	md := map[string]any{"connections": len(cur) - listening, "established": established, "timeWait": timeWait,
		"listening": listening, "acceptQueue": acceptQueue}
	if !w.first {
		w.first = true
		md["caughtUp"] = true
	}
	w.sink.SetMetadata(md)
	return nil
}

func conn(action string, s sockdiag.Socket) abi.Connection {
	return abi.Connection{Type: abi.PayloadConnection, Action: action, Local: addr(s.Local), Remote: addr(s.Remote), State: s.State,
		BytesSent: s.BytesAcked, BytesReceived: s.BytesReceived, RTTMs: float64(s.RTT.Microseconds()) / 1000, Retrans: s.Retrans, Inode: s.Inode}
}

func addr(a netip.AddrPort) string { return a.String() }

func (w *watch) hold(held bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if held == w.held {
		return
	}
	w.held = held
	if held {
		w.resume = make(chan struct{})
	} else {
		close(w.resume)
	}
}

// Send implements live.Instance.
func (w *watch) Send(context.Context, []byte) error {
	return abi.Errorf(abi.CodeCapabilityUnsupported, w.sink.SessionID(), "network-stream sessions take no input")
}

// Control implements live.Instance: interrupt stops the reports; the session stays open.
func (w *watch) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	if req.Command != abi.CommandInterrupt {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, w.sink.SessionID(), "network-stream sessions do not support %s", req.Command)
	}
	w.hold(true)
	return map[string]any{"reporting": false, "note": "resume reports what changed since the last report"}, nil
}

// Resume implements live.Resumer.
func (w *watch) Resume(context.Context) (any, error) {
	w.mu.Lock()
	paused := w.paused
	w.mu.Unlock()
	if !paused {
		w.hold(false)
	}
	return map[string]any{"reporting": !paused}, nil
}

// SetPaused implements live.Pauser.
func (w *watch) SetPaused(paused bool) {
	w.mu.Lock()
	w.paused = paused
	w.mu.Unlock()
	w.hold(paused)
}

// Close implements live.Instance.
func (w *watch) Close(ctx context.Context) error {
	w.stop()
	if w.done != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
		}
	}
	return nil
}
