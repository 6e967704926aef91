// Package debugstream is the debug-stream session kind (docs/observers.md): the lines of a
// managed process (context processId), of a server (serverId: its process, or the gateway's
// own log for the built-in server "gateway"), or of a log file nexus does not own (option
// file), as log-line data events: first the newest lines, then live. An interrupt stops the
// delivery and the session stays open; resume continues after the last line delivered, so
// nothing is skipped or repeated.
package debugstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/logtail"
	"github.com/nexus-run/nexus/internal/process"
)

// DefaultLines is how many of the newest lines a session starts with.
const DefaultLines = 100

// Kind starts debug-stream sessions.
type Kind struct {
	// Processes are the managed processes and servers; Journal the gateway's own log.
	Processes *process.Manager
	Journal   *process.Journal
}

// Type implements live.Kind.
func (k *Kind) Type() abi.SessionType { return abi.TypeDebugStream }

// Capabilities implements live.Kind: the seed's set (receive, close, stream), and interrupt,
// which the seed's control rules give debug streams (stop receiving, the session stays).
func (k *Kind) Capabilities() abi.Capabilities {
	return abi.Capabilities{Receive: true, Interrupt: true, Close: true, Stream: true}
}

// DataKeptElsewhere implements live.DataKeeper: the lines are in the process's log files, the
// gateway's journal or the followed file; a session's event log keeps them in memory only.
func (k *Kind) DataKeptElsewhere() bool { return true }

// source is where a session's lines come from.
type source interface {
	// since is the position after which the newest n lines start.
	since(n int) uint64
	// follow returns lines after pos, waiting for some; lost: some after pos are gone.
	follow(ctx context.Context, pos uint64) ([]process.Line, bool, error)
	// ack says the lines up to seq are delivered; done ends the following.
	ack(seq uint64)
	done()
	// hold says whether the session is at work on the lines it reads (see
	// process.Cursor.Hold): always, but while its gate is closed.
	hold(on bool)
	// open starts following after pos before any line is read, so what comes after waits
	// for this session (follow opens it too if it was not).
	open(pos uint64) error
}

// processSource follows a process through a cursor: the process's capture waits for this
// session, so a flood is not lost to a session that keeps up. It waits without a clock while
// the session is held (at work: reading, delivering under its followers' flow control, which
// bounds that wait), and within the manager's MaxStall while it is not (interrupted).
type processSource struct {
	m    *process.Manager
	id   string
	c    *process.Cursor
	held bool
}

func (s *processSource) since(n int) uint64 { p, _ := s.m.Since(s.id, n); return p }
func (s *processSource) open(pos uint64) error {
	if s.c == nil {
		c, err := s.m.Subscribe(s.id, pos)
		if err != nil {
			return err //nolint:wrapcheck // the manager's errors carry their code
		}
		s.c = c
		c.Hold(s.held)
	}
	return nil
}
func (s *processSource) follow(ctx context.Context, pos uint64) ([]process.Line, bool, error) {
	if err := s.open(pos); err != nil {
		return nil, false, err
	}
	return s.c.Read(ctx, 4096) //nolint:wrapcheck // the caller's own context
}
func (s *processSource) ack(seq uint64) {
	if s.c != nil {
		s.c.Ack(seq)
	}
}
func (s *processSource) done() {
	if s.c != nil {
		s.c.Close()
	}
}
func (s *processSource) hold(on bool) {
	s.held = on
	if s.c != nil {
		s.c.Hold(on)
	}
}

type journalSource struct{ j *process.Journal }

func (s journalSource) since(n int) uint64 { return s.j.Since(n) }
func (s journalSource) follow(ctx context.Context, pos uint64) ([]process.Line, bool, error) {
	return s.j.Follow(ctx, pos, 4096)
}
func (journalSource) ack(uint64)        {}
func (journalSource) done()             {}
func (journalSource) hold(bool)         {}
func (journalSource) open(uint64) error { return nil }

// Start implements live.Kind.
func (k *Kind) Start(_ context.Context, sink live.Sink, req abi.CreateRequest) (live.Instance, error) {
	var opts abi.DebugStreamOptions
	if len(req.Options) > 0 {
		if err := abi.DecodeStrict(req.Options, &opts); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "debug-stream options: %v", err)
		}
	}
	s := &stream{sink: sink, lines: opts.Lines}
	s.out.batch = opts.Batch
	if s.lines == 0 {
		s.lines = DefaultLines
	}
	if opts.Grep != "" {
		re, err := regexp.Compile(opts.Grep)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "grep: %v", err)
		}
		s.grep = re
	}
	md := map[string]any{}
	given := 0
	for _, v := range []string{req.Context.ProcessID, req.Context.ServerID, opts.File} {
		if v != "" {
			given++
		}
	}
	if given != 1 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "a debug-stream follows one thing: context processId, context serverId or option file")
	}
	switch {
	case opts.File != "":
		if !filepath.IsAbs(opts.File) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "file %q must be an absolute path", opts.File)
		}
		s.file = filepath.Clean(opts.File)
		md["file"] = s.file
	case req.Context.ServerID == process.GatewayServer && k.Journal != nil:
		s.src = journalSource{k.Journal}
		md["serverId"] = process.GatewayServer
	case req.Context.ServerID != "":
		if k.Processes == nil {
			return nil, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway manages no servers")
		}
		srv, err := k.Processes.Server(req.Context.ServerID)
		if err != nil {
			return nil, err
		}
		md["serverId"], md["addr"] = srv.Name, srv.Addr
		switch {
		case srv.BuiltIn:
			if k.Journal == nil {
				return nil, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway keeps no log journal")
			}
			s.src = journalSource{k.Journal}
		case srv.ProcessID != "":
			s.src = &processSource{m: k.Processes, id: srv.ProcessID}
			md["processId"] = srv.ProcessID
		default:
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "server %s is an address nexus does not manage: it has no logs to stream (follow its log file with option file)", srv.Name)
		}
	default:
		if k.Processes == nil {
			return nil, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway manages no processes")
		}
		in, err := k.Processes.Get(req.Context.ProcessID)
		if err != nil {
			return nil, err
		}
		s.src = &processSource{m: k.Processes, id: in.ID}
		md["processId"], md["processName"] = in.ID, in.Name
	}
	s.ctx, s.stop = context.WithCancel(sink.Context())
	sink.SetMetadata(md)
	return s, nil
}

// stream is one debug-stream session.
type stream struct {
	sink  live.Sink
	src   source
	file  string
	lines int
	grep  *regexp.Regexp

	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}

	out batcher // the lines on their way to the session, under the delivery goroutine

	mu       sync.Mutex
	caught   bool      // caughtUp was said
	gate     live.Gate // interrupt and pause hold the delivery
	lastLine uint64
}

// Begin implements live.Beginner: delivery starts once the session is announced.
func (s *stream) Begin() {
	s.done = make(chan struct{})
	var pos, end uint64
	var err error
	if s.file == "" {
		// The process's cursor is taken and held here, before Create answers: a process that
		// floods right after would otherwise fill its ring before the delivery goroutine runs
		// (under load, it did) and the session would start with lines lost.
		pos, end = s.startPos()
		s.src.hold(true)
		err = s.src.open(pos)
	}
	go func() {
		defer close(s.done)
		switch {
		case err != nil:
		case s.file != "":
			err = s.followFile()
		default:
			err = s.followSource(pos, end)
		}
		if err != nil && s.ctx.Err() == nil {
			s.sink.Publish(abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeOf(err), Message: err.Error()}})
		}
	}()
}

// caughtUp tells the session's readers that the lines there were at its start are delivered
// (nexus debug log tail without --follow stops there).
func (s *stream) caughtUp() {
	s.mu.Lock()
	done := s.caught
	s.caught = true
	s.mu.Unlock()
	if !done {
		s.sink.SetMetadata(map[string]any{"caughtUp": true})
	}
}

// startPos is where the session starts reading (after pos: the newest lines it asked for) and
// end, the newest line at its start.
func (s *stream) startPos() (pos, end uint64) {
	pos = s.src.since(s.lines)
	if s.lines < 0 {
		pos = 0
	}
	return pos, s.src.since(0)
}

func (s *stream) followSource(pos, end uint64) error {
	if pos >= end {
		s.caughtUp()
	}
	defer s.src.done()
	// While the session is at work on what it read, the process waits for it without giving
	// up: the session's flow control lets go of a follower that stalls (within MaxStall of its
	// own), whereas the process letting go of the session would lose the lines of every
	// follower that keeps up. Only a closed gate (open) lets the process's clock run.
	s.src.hold(true)
	for s.open() {
		lines, lost, err := s.src.follow(s.ctx, pos)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		if lost {
			s.sink.Publish(abi.EventError, abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeEventsMissed,
				Message: fmt.Sprintf("lines after %d were overwritten before this session read them (the process writes faster than it is followed)", pos)}})
		}
		s.out.expect = 0
		for _, l := range lines {
			if s.grep != nil || l.Level != "" {
				s.out.expect += len(l.Text) + 64
			}
		}
		for _, l := range lines {
			pos = l.Seq
			if l.Stream == process.StreamStatus {
				if !s.deliver() || !s.open() {
					return nil
				}
				s.sink.Publish(abi.EventStatus, abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected, Message: "process " + l.Text})
				continue
			}
			if s.grep != nil && !s.grep.MatchString(l.Text) {
				continue
			}
			var full bool
			if run, at, end, ok := l.Encoded(); ok && (s.grep == nil || !s.out.batch) {
				full = s.out.addShared(run, at, end, l.Seq)
			} else { // a journal's line, or a sparse run that grep leaves
				full = s.out.add(abi.LogLine{Type: abi.PayloadLogLine, Stream: l.Stream, Line: l.Text, Level: l.Level, Offset: l.Offset}.AppendJSON(nil), l.Seq)
			}
			if full && !s.deliver() {
				return nil
			}
		}
		if !s.deliver() {
			return nil
		}
		s.src.ack(pos)
		if pos >= end {
			s.caughtUp()
		}
	}
	return nil
}

func (s *stream) followFile() error {
	var size int64
	if fi, err := os.Stat(s.file); err == nil {
		size = fi.Size()
	}
	if size == 0 {
		s.caughtUp()
	}
	var n uint64 // the file's lines, numbered for the batcher
	deliver := func() error {
		if !s.deliver() {
			return context.Canceled
		}
		return nil
	}
	err := logtail.Follow(s.ctx, s.file, logtail.Options{Last: s.lines, Read: deliver}, func(l logtail.Line) error {
		n++
		if s.grep == nil || s.grep.MatchString(l.Text) {
			if s.out.add(abi.LogLine{Type: abi.PayloadLogLine, Stream: abi.StreamFile, Line: l.Text, Offset: l.Offset, Gen: l.Gen}.AppendJSON(nil), n) {
				if err := deliver(); err != nil {
					return err
				}
			}
		}
		if l.Gen > 0 || l.Offset+int64(len(l.Text))+1 >= size {
			if err := deliver(); err != nil { // what caughtUp announces is delivered first
				return err
			}
			s.caughtUp()
		}
		return nil
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	if err != nil {
		return abi.Errorf(abi.CodeResourceUnavailable, s.sink.SessionID(), "follow %s: %v", s.file, err)
	}
	return nil
}

// batcher gathers the encoded lines that are ready together: as log-lines payloads of at most
// abi.BatchBytes (option batch), or as one log-line payload each, published in one step. A run
// of consecutive lines the process's capture encoded together goes out as a live.Joined slice
// of that run, shared with every other session that follows the process; other lines (a
// journal's, a file's, those grep keeps) are copied into a batch of their own.
type batcher struct {
	batch    bool
	payloads []any

	run           []byte // the capture run of the shared lines gathered, from runAt to runEnd
	runAt, runEnd int
	buf           []byte // the copied lines' payload being built
	n             int    // lines in buf
	last          uint64 // the source's number of the newest line gathered
	// expect is how many encoded bytes are still to come from the current read: a new copied
	// batch is sized for them (up to abi.BatchBytes), so building it copies each line once.
	expect int
}

var (
	batchPrefix = []byte(`{"type":"` + abi.PayloadLogLines + `","lines":[`)
	batchSuffix = []byte(`]}`)
)

// addShared gathers a line whose JSON is run[at:end], in its chunk's shared run; it reports
// whether the batch should go now.
func (b *batcher) addShared(run []byte, at, end int, seq uint64) bool {
	b.last = seq
	if !b.batch {
		b.payloads = append(b.payloads, json.RawMessage(run[at:end:end]))
		return len(b.payloads) >= 1024
	}
	b.closeCopy()
	if b.run != nil && (&b.run[0] != &run[0] || at != b.runEnd+1) {
		b.closeRun()
	}
	if b.run == nil {
		b.run, b.runAt = run, at
	}
	b.runEnd = end
	return b.runEnd-b.runAt >= abi.BatchBytes
}

// add gathers one encoded log-line payload (copied); it reports whether the batch should go
// now.
func (b *batcher) add(js []byte, seq uint64) bool {
	b.last = seq
	if !b.batch {
		b.payloads = append(b.payloads, json.RawMessage(js))
		return len(b.payloads) >= 1024
	}
	b.closeRun()
	if b.n == 0 {
		size := min(max(b.expect, 16<<10), abi.BatchBytes) + len(js) + 64
		b.buf = append(make([]byte, 0, size), batchPrefix...)
	} else {
		b.buf = append(b.buf, ',')
	}
	b.buf = append(b.buf, js...)
	b.expect -= len(js) + 1
	b.n++
	return len(b.buf) >= abi.BatchBytes
}

func (b *batcher) closeRun() {
	if b.run != nil {
		b.payloads = append(b.payloads, live.Joined{batchPrefix, b.run[b.runAt:b.runEnd:b.runEnd], batchSuffix})
		b.run = nil
	}
}

func (b *batcher) closeCopy() {
	if b.n > 0 {
		b.payloads = append(b.payloads, json.RawMessage(append(b.buf, batchSuffix...)))
		b.buf, b.n = nil, 0
	}
}

func (b *batcher) empty() bool { return len(b.payloads) == 0 && b.n == 0 && b.run == nil }

// take returns what was gathered, as data event payloads, and empties the batcher.
func (b *batcher) take() []any {
	b.closeRun()
	b.closeCopy()
	out := b.payloads
	b.payloads = nil
	return out
}

// open waits while the gate is closed (interrupted, paused); false when the session ends
// first. Meanwhile the session is not at work on its source's lines: the process it follows
// does not wait for it beyond its MaxStall.
func (s *stream) open() bool {
	if s.gate.Opened() == nil {
		return s.ctx.Err() == nil
	}
	if s.src != nil {
		s.src.hold(false)
		defer s.src.hold(true)
	}
	return s.gate.Wait(s.ctx)
}

// deliver publishes the gathered lines once the gate is open (an interrupt holds them, so
// nothing is skipped); false when the session ends first.
func (s *stream) deliver() bool {
	if s.out.empty() {
		return true
	}
	if !s.open() {
		return false
	}
	last := s.out.last
	s.sink.PublishFlowAll(s.out.take())
	s.mu.Lock()
	s.lastLine = last
	s.mu.Unlock()
	return true
}

// Send implements live.Instance: a debug stream takes no input (the registry refuses it first).
func (s *stream) Send(context.Context, live.SendRequest) (live.SendResult, error) {
	return live.SendResult{}, abi.Errorf(abi.CodeCapabilityUnsupported, s.sink.SessionID(), "debug-stream sessions take no input")
}

// Control implements live.Instance: interrupt stops the delivery; the session stays open.
func (s *stream) Control(_ context.Context, req abi.ControlRequest) (any, error) {
	if req.Command != abi.CommandInterrupt {
		return nil, abi.Errorf(abi.CodeCapabilityUnsupported, s.sink.SessionID(), "debug-stream sessions do not support %s", req.Command)
	}
	s.gate.Interrupt()
	s.mu.Lock()
	last := s.lastLine
	s.mu.Unlock()
	return map[string]any{"delivering": false, "note": "resume continues after the last line delivered", "lastLine": last}, nil
}

// Resume implements live.Resumer: delivery goes on after the last line delivered.
func (s *stream) Resume(context.Context) (any, error) {
	return map[string]any{"delivering": s.gate.Resume()}, nil
}

// SetPaused implements live.Pauser.
func (s *stream) SetPaused(paused bool) { s.gate.SetPaused(paused) }

// Close implements live.Instance.
func (s *stream) Close(ctx context.Context) error {
	s.stop()
	if s.done != nil {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	return nil
}
