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

	// The sessions on one server at one interval share a poller: each listing serves them all.
	mu      sync.Mutex
	pollers map[string]*poller
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
	w := &watch{sink: sink, k: k, interval: interval, prev: map[uint64]sockdiag.Socket{},
		offered: make(chan struct{}, 1), key: req.Context.ServerID + "@" + interval.String()}
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

	mu    sync.Mutex
	gate  live.Gate                  // interrupt and pause hold the reports
	prev  map[uint64]sockdiag.Socket // what the last report said, by socket cookie
	first bool

	key     string // its poller's: server and interval
	poller  *poller
	offered chan struct{} // a new listing is there
}

// poller lists the sockets of one server at one interval for all the sessions on it.
type poller struct {
	k        *Kind
	interval time.Duration
	pids     func() []int
	port     uint16
	cache    sockdiag.InodeCache // of the run goroutine
	stop     context.CancelFunc

	mu     sync.Mutex
	latest *listing
	subs   map[*watch]struct{}
}

// listing is one poll's result for a server.
type listing struct {
	socks  map[uint64]sockdiag.Socket
	counts map[string]any
	err    error
}

// subscribe attaches w to its server's poller, starting one if there is none, and offers it
// the latest listing at once.
func (k *Kind) subscribe(w *watch) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pollers == nil {
		k.pollers = map[string]*poller{}
	}
	p := k.pollers[w.key]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &poller{k: k, interval: w.interval, pids: w.pids, port: w.port, stop: cancel, subs: map[*watch]struct{}{}}
		k.pollers[w.key] = p
		go p.run(ctx)
	}
	w.poller = p
	p.mu.Lock()
	p.subs[w] = struct{}{}
	if p.latest != nil {
		w.offer()
	}
	p.mu.Unlock()
}

// unsubscribe detaches w; the last session of a poller stops it.
func (k *Kind) unsubscribe(w *watch) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := w.poller
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.subs, w)
	empty := len(p.subs) == 0
	p.mu.Unlock()
	if empty && k.pollers[w.key] == p {
		p.stop()
		delete(k.pollers, w.key)
	}
}

func (w *watch) offer() {
	select {
	case w.offered <- struct{}{}:
	default:
	}
}

func (p *poller) run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		l := p.measure()
		p.mu.Lock()
		p.latest = l
		for w := range p.subs {
			w.offer()
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// measure lists the sockets and keeps the server's, with the metadata counts.
func (p *poller) measure() *listing {
	list := sockdiag.List
	if p.k.List != nil {
		list = p.k.List
	}
	all, err := list()
	if err != nil {
		return &listing{err: fmt.Errorf("list sockets: %w", err)}
	}
	var mine map[uint32]bool
	if p.pids != nil {
		if p.k.Inodes != nil {
			mine = p.k.Inodes(p.pids())
		} else {
			alive := make(map[uint32]bool, len(all))
			for _, s := range all {
				if s.Inode != 0 {
					alive[s.Inode] = true
				}
			}
			mine = p.cache.Inodes(p.pids(), func(i uint32) bool { return alive[i] })
		}
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
			ours = s.Local.Port() == p.port && s.State != "time-wait"
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
	if p.pids == nil {
		listenPorts[p.port] = true
	}
	for _, s := range all {
		if s.State == "time-wait" && listenPorts[s.Local.Port()] {
			timeWait++
		}
	}
	return &listing{socks: cur, counts: map[string]any{"connections": len(cur) - listening, "established": established,
		"timeWait": timeWait, "listening": listening, "acceptQueue": acceptQueue}}
}

// Begin implements live.Beginner: the first report follows the session's announcement.
func (w *watch) Begin() {
	w.done = make(chan struct{})
	w.k.subscribe(w)
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.ctx.Done():
				return
			case <-w.offered:
			}
			if !w.gate.Wait(w.ctx) {
				return
			}
			w.poller.mu.Lock()
			l := w.poller.latest
			w.poller.mu.Unlock()
			if l.err != nil {
				w.sink.Publish(abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeResourceUnavailable, Message: l.err.Error()}})
				continue
			}
			w.report(l)
		}
	}()
}

// report publishes what changed since the session's last report.
func (w *watch) report(l *listing) {
	cur := l.socks
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
	md := make(map[string]any, len(l.counts)+1)
	for k, v := range l.counts {
		md[k] = v
	}
	if !w.first {
		w.first = true
		md["caughtUp"] = true
	}
	w.sink.SetMetadata(md)
}

func conn(action string, s sockdiag.Socket) abi.Connection {
	return abi.Connection{Type: abi.PayloadConnection, Action: action, Local: addr(s.Local), Remote: addr(s.Remote), State: s.State,
		BytesSent: s.BytesAcked, BytesReceived: s.BytesReceived, RTTMs: float64(s.RTT.Microseconds()) / 1000, Retrans: s.Retrans, Inode: s.Inode}
}

func addr(a netip.AddrPort) string { return a.String() }

// Send implements live.Instance.
func (w *watch) Send(context.Context, []byte) error {
	return abi.Errorf(abi.CodeCapabilityUnsupported, w.sink.SessionID(), "network-stream sessions take no input")
}

// Control implements live.Instance: interrupt stops the reports; the session stays open.
func (w *watch) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	if req.Command != abi.CommandInterrupt {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, w.sink.SessionID(), "network-stream sessions do not support %s", req.Command)
	}
	w.gate.Interrupt()
	return map[string]any{"reporting": false, "note": "resume reports what changed since the last report"}, nil
}

// Resume implements live.Resumer.
func (w *watch) Resume(context.Context) (any, error) {
	reporting := w.gate.Resume()
	if reporting {
		w.offer() // what changed meanwhile, from the latest listing
	}
	return map[string]any{"reporting": reporting}, nil
}

// SetPaused implements live.Pauser.
func (w *watch) SetPaused(paused bool) {
	w.gate.SetPaused(paused)
	if !paused {
		w.offer()
	}
}

// Close implements live.Instance.
func (w *watch) Close(ctx context.Context) error {
	w.k.unsubscribe(w)
	w.stop()
	if w.done != nil {
		select {
		case <-w.done:
		case <-ctx.Done():
		}
	}
	return nil
}
