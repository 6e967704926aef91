// Package netstream is the network-stream session kind (docs/observers.md): a server's
// listening sockets and connections, from the kernel's socket diagnostics (sock_diag),
// attributed to the server's processes through their socket inodes (a server nexus does not
// manage: by its port), polled and reported as connection events (open, update, close) with
// byte counters and round-trip times, and metadata counts (established, time-wait, the accept
// queue). The kernel's notifications of ended sockets (sock_diag's destroy groups) report each
// close as it happens, so a connection that opens and ends between two polls is seen too. An
// interrupt stops the reports and the session stays open; resume reports what changed since
// the last report.
package netstream

import (
	"context"
	"errors"
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
	// Subscribe follows the sockets the kernel ends (default sockdiag.SubscribeDestroyed);
	// injectable for tests. Where it fails the sessions poll alone, and say so in their
	// metadata (closes: polling, closesNote: why).
	Subscribe func() (Ends, error)

	// The sessions on one server at one interval share a poller: each listing serves them all.
	mu      sync.Mutex
	pollers map[string]*poller
}

// Ends are the sockets the kernel ends, as sockdiag.Destroyed reads them: Read waits for some
// (sockdiag.ErrLost: some were dropped) until ctx ends.
type Ends interface {
	Read(ctx context.Context, out []sockdiag.Socket) ([]sockdiag.Socket, error)
	Close() error
}

func subscribeDestroyed() (Ends, error) {
	d, err := sockdiag.SubscribeDestroyed()
	if err != nil {
		return nil, err // not a nil *Destroyed in an Ends
	}
	return d, nil
}

// Type implements live.Kind.
func (k *Kind) Type() abi.SessionType { return abi.TypeNetworkStream }

// Capabilities implements live.Kind: receive, close, stream, and interrupt (the seed's
// control rules: stop receiving updates, the session remains available).
func (k *Kind) Capabilities() abi.Capabilities {
	return abi.Capabilities{Receive: true, Interrupt: true, Close: true, Stream: true}
}

// Start implements live.Kind.
func (k *Kind) Start(_ context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
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
	w.ctx, w.stop = context.WithCancel(sink.Context())
	sink.SetMetadata(md)
	return w, nil
}

// watch is one network-stream session.
type watch struct {
	sink     live.Sink
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

	// Of the report goroutine: the listing last reported; the poller's next end to report;
	// the sockets reported closed from the kernel's notices that the last listing still has
	// (a listing made before their end); ends the poller dropped before this session read them.
	last   *listing
	endCur uint64
	closed map[uint64]bool
	missed int
	// missedSaid is the closesMissed the metadata last said.
	missedSaid int

	key     string // its poller's: server and interval
	poller  *poller
	unlife  func() bool   // stops the unsubscribe at the end of ctx (Kind.subscribe)
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
	good   *listing // the latest listing without an error
	subs   map[*watch]struct{}
	// ends are the server's sockets the kernel said ended, oldest first, until every session
	// has read them (at most maxEnds); endSeq is the sequence number the next one gets.
	ends   []end
	endSeq uint64
	// seen is when a listing first saw each socket of latest (that listing's end).
	seen map[uint64]time.Time
	// during holds, while a listing runs, every socket that ended meanwhile: the listing may
	// have read it before its end, and must not report it again.
	during map[uint64]*pending
	// closes says how closes are found: "kernel" (notified) or "polling" (a socket gone from
	// a listing), with closesNote saying why; lost counts the kernel's dropped notifications.
	closes, closesNote string
	lost               int
}

// maxEnds bounds the ends a poller keeps for a session that does not read them (interrupted
// or paused): beyond it the oldest go, and that session's metadata counts them (closesMissed).
const maxEnds = 4096

// end is a socket of the server the kernel said ended.
type end struct {
	seq    uint64
	cookie uint64
	conn   abi.Connection
}

// pending is a socket that ended while a listing ran; reported says it was attributed at once.
type pending struct {
	s        sockdiag.Socket
	at       time.Time
	reported bool
}

// listing is one poll's result for a server.
type listing struct {
	socks  map[uint64]sockdiag.Socket
	counts map[string]any
	err    error
	// start and end of the listing; ports are the server's listening ports (for a server by
	// address, its port): a connection on one that no listing saw is the server's.
	start, end time.Time
	ports      map[uint16]bool
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
		// The poller serves every session on its server, so it lives while any of them does:
		// it takes the first one's lifetime without its end (that session may close before
		// the others) and stops when the last one leaves, at its Close or when its lifetime
		// ends without one (below).
		ctx, cancel := context.WithCancel(context.WithoutCancel(w.ctx))
		p = &poller{k: k, interval: w.interval, pids: w.pids, port: w.port, stop: cancel, subs: map[*watch]struct{}{}}
		k.pollers[w.key] = p
		go p.run(ctx)
	}
	w.poller = p
	w.unlife = context.AfterFunc(w.ctx, func() { k.unsubscribe(w) })
	p.mu.Lock()
	p.subs[w] = struct{}{}
	w.endCur = p.endSeq // the ends before it are not this session's
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
	w.unlife()
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
	// Follow the ends before the first listing, so that nothing falls between the two.
	p.follow(ctx)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.mu.Lock()
		if p.closes == "kernel" {
			p.during = map[uint64]*pending{}
		}
		p.mu.Unlock()
		l := p.measure()
		p.mu.Lock()
		p.publish(l)
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

// follow subscribes to the kernel's notifications of ended sockets and reads them until ctx
// ends; where it cannot, closes are found by polling alone.
func (p *poller) follow(ctx context.Context) {
	sub := subscribeDestroyed
	if p.k.Subscribe != nil {
		sub = p.k.Subscribe
	}
	d, err := sub()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.pollAlone(err)
		return
	}
	p.closes = "kernel"
	go func() {
		defer func() { _ = d.Close() }()
		var buf []sockdiag.Socket
		for {
			got, err := d.Read(ctx, buf[:0])
			buf = got
			lost := errors.Is(err, sockdiag.ErrLost)
			p.ended(got, time.Now(), lost)
			if err != nil && !lost {
				if ctx.Err() == nil {
					p.mu.Lock()
					p.pollAlone(err)
					p.mu.Unlock()
				}
				return
			}
		}
	}()
}

// pollAlone records that closes are found by polling, and why. p.mu is held.
func (p *poller) pollAlone(err error) {
	p.closes = "polling"
	p.closesNote = "the kernel's notifications of ended sockets: " + err.Error() +
		"; a connection that opens and ends between two listings is not seen"
	p.during = nil
}

// ended takes sockets the kernel said ended at at: the server's are kept for its sessions.
func (p *poller) ended(socks []sockdiag.Socket, at time.Time, lost bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if lost {
		p.lost++
	}
	added := false
	for _, s := range socks {
		var since time.Time
		if p.good != nil {
			since = p.good.start
		}
		c, ok := p.attribute(s, at, p.good, since)
		if ok {
			p.push(s.Cookie, c)
			added = true
		}
		if p.during != nil {
			p.during[s.Cookie] = &pending{s: s, at: at, reported: ok}
		}
	}
	if added {
		for w := range p.subs {
			w.offer()
		}
	}
}

// attribute says whether s, which ended at at, was the server's, as listing l tells: one of
// its sockets there, or a connection on one of its listening ports. A socket that no listing
// saw opened after since (if not zero). p.mu is held.
func (p *poller) attribute(s sockdiag.Socket, at time.Time, l *listing, since time.Time) (abi.Connection, bool) {
	if l == nil {
		return abi.Connection{}, false
	}
	// How long it lived, at least: the kernel's clocks; since the listing that first saw it
	// if that is longer. Clocks longer than the time since it could have opened are of a
	// socket that never connected.
	life := s.MinAge
	if was, ok := l.socks[s.Cookie]; ok {
		if was.State == "listen" || was.State == "syn-sent" { // clocks never started
			life = 0
		}
		if t, ok := p.seen[s.Cookie]; ok && at.Sub(t) > life {
			life = at.Sub(t)
		}
	} else {
		if s.State == "listen" || !l.ports[s.Local.Port()] {
			return abi.Connection{}, false
		}
		if !since.IsZero() {
			life = max(0, min(life, at.Sub(since)))
		}
	}
	c := conn("close", s)
	ms := float64(life.Microseconds()) / 1000
	c.DurationMs = &ms
	return c, true
}

// push keeps an end for the sessions. p.mu is held.
func (p *poller) push(cookie uint64, c abi.Connection) {
	p.ends = append(p.ends, end{seq: p.endSeq, cookie: cookie, conn: c})
	p.endSeq++
	if n := len(p.ends); n > maxEnds {
		p.ends = append(p.ends[:0], p.ends[n-maxEnds:]...)
	}
}

// publish makes l the latest listing: a socket that ended while it ran is the server's if l
// has it, and is taken out of it either way. p.mu is held.
func (p *poller) publish(l *listing) {
	if l.err == nil {
		// Those not found the server's from the listing before are found from this one.
		var since time.Time
		if p.good != nil {
			since = p.good.start
		}
		for cookie, e := range p.during {
			if !e.reported {
				if c, ok := p.attribute(e.s, e.at, l, since); ok {
					p.push(cookie, c)
				}
			}
			delete(l.socks, cookie)
		}
		seen := make(map[uint64]time.Time, len(l.socks))
		for cookie := range l.socks {
			if t, ok := p.seen[cookie]; ok {
				seen[cookie] = t
			} else {
				seen[cookie] = l.end
			}
		}
		p.seen = seen
		l.count()
		l.counts["closes"] = p.closes
		if p.closesNote != "" {
			l.counts["closesNote"] = p.closesNote
		}
		if p.lost > 0 {
			l.counts["closesLost"] = p.lost
		}
		p.good = l
	}
	p.during = nil
	p.latest = l
}

// measure lists the sockets and keeps the server's, with the metadata counts.
func (p *poller) measure() *listing {
	list := sockdiag.List
	if p.k.List != nil {
		list = p.k.List
	}
	start := time.Now()
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
		if s.State == "listen" {
			listenPorts[s.Local.Port()] = true
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
	return &listing{socks: cur, counts: map[string]any{"timeWait": timeWait}, start: start, end: time.Now(), ports: listenPorts}
}

// count adds the metadata counts of the listing's sockets.
func (l *listing) count() {
	var listening, established, acceptQueue int
	for _, s := range l.socks {
		switch s.State {
		case "listen":
			listening++
			acceptQueue += int(s.RQueue)
		case "established":
			established++
		}
	}
	l.counts["connections"] = len(l.socks) - listening
	l.counts["established"] = established
	l.counts["listening"] = listening
	l.counts["acceptQueue"] = acceptQueue
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
			w.report()
		}
	}()
}

// report publishes what changed since the session's last report: the ends the kernel told
// of, then, on a new listing, what it changed.
func (w *watch) report() {
	p := w.poller
	p.mu.Lock()
	l := p.latest
	if l == nil { // resumed before the first listing: it offers itself
		p.mu.Unlock()
		return
	}
	var ends []end
	if len(p.ends) > 0 {
		first := p.ends[0].seq
		if w.endCur < first {
			w.missed += int(first - w.endCur)
			w.endCur = first
		}
		ends = append(ends, p.ends[w.endCur-first:]...)
	}
	w.endCur = p.endSeq
	// Drop the ends every session has read.
	low := p.endSeq
	for o := range p.subs {
		low = min(low, o.endCur)
	}
	if len(p.ends) > 0 && low > p.ends[0].seq {
		if rest := p.ends[low-p.ends[0].seq:]; len(rest) > 0 {
			p.ends = append(p.ends[:0], rest...)
		} else {
			p.ends = nil // a burst's array is not kept
		}
	}
	p.mu.Unlock()

	if w.closed == nil {
		w.closed = map[uint64]bool{}
	}
	out := make([]any, 0, len(ends))
	for _, e := range ends {
		out = append(out, e.conn)
		w.closed[e.cookie] = true
	}
	fresh := l != w.last
	w.last = l
	if fresh && l.err != nil {
		w.sink.PublishFlowAll(out)
		w.sink.Publish(abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeResourceUnavailable, Message: l.err.Error()}})
		return
	}
	if fresh {
		out = w.diff(l.socks, out)
	}
	w.sink.PublishFlowAll(out)
	if !fresh && w.missed == w.missedSaid {
		return
	}
	md := make(map[string]any, len(l.counts)+2)
	for k, v := range l.counts {
		md[k] = v
	}
	if w.missed > 0 {
		md["closesMissed"] = w.missed
		w.missedSaid = w.missed
	}
	if !w.first {
		w.first = true
		md["caughtUp"] = true
	}
	w.sink.SetMetadata(md)
}

// diff appends what changed from the last listing reported to cur. A socket the kernel said
// ended is not reported again, from a listing made before its end.
func (w *watch) diff(cur map[uint64]sockdiag.Socket, out []any) []any {
	w.mu.Lock()
	prev := w.prev
	w.prev = cur
	w.mu.Unlock()
	for c, s := range cur {
		if w.closed[c] {
			continue
		}
		old, ok := prev[c]
		switch {
		case !ok:
			out = append(out, conn("open", s))
		case old.BytesAcked != s.BytesAcked || old.BytesReceived != s.BytesReceived || old.State != s.State:
			out = append(out, conn("update", s))
		}
	}
	for c, s := range prev {
		if _, ok := cur[c]; !ok && !w.closed[c] {
			out = append(out, conn("close", s))
		}
	}
	// A listing without a closed socket was made after its end: so are those that follow.
	for c := range w.closed {
		if _, ok := cur[c]; !ok {
			delete(w.closed, c)
		}
	}
	return out
}

func conn(action string, s sockdiag.Socket) abi.Connection {
	return abi.Connection{Type: abi.PayloadConnection, Action: action, Local: addr(s.Local), Remote: addr(s.Remote), State: s.State,
		BytesSent: s.DataAcked, BytesReceived: s.BytesReceived, RTTMs: float64(s.RTT.Microseconds()) / 1000, Retrans: s.Retrans, Inode: s.Inode}
}

func addr(a netip.AddrPort) string { return a.String() }

// Send implements live.Instance.
func (w *watch) Send(context.Context, live.SendRequest) (live.SendResult, error) {
	return live.SendResult{}, abi.Errorf(abi.CodeCapabilityUnsupported, w.sink.SessionID(), "network-stream sessions take no input")
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
