package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/debugstream"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/reaper"
)

// gateway is the part of `nexus serve` the debug streams go through, put together as serve.go
// does: a reaper owner, a process manager with its defaults (10 MiB log files, a ring of
// 65,536 lines), a live registry with the debug-stream kind and its event logs on disk
// (state/live) or in memory.
type gateway struct {
	dir   string
	owner *reaper.Owner
	procs *process.Manager
	store live.Store
	reg   *live.Registry
}

func openGateway(ctx context.Context, storeKind string, maxSessions int) (_ *gateway, err error) {
	dir, err := os.MkdirTemp("", "nexus-bench-observers-")
	if err != nil {
		return nil, err
	}
	g := &gateway{dir: dir}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	if g.owner, err = reaper.Open(ctx, reaper.Options{Kind: "bench"}); err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	if g.procs, err = process.Open(process.Dir(dir), process.Options{Owner: g.owner}); err != nil {
		return nil, err
	}
	switch storeKind {
	case "disk":
		ds, err := live.OpenDiskStore(filepath.Join(dir, "live"), live.DiskOptions{})
		if err != nil {
			return nil, err
		}
		g.store = ds
	default:
		g.store = live.NewMemoryStore()
	}
	g.reg, err = live.New(ctx, live.Config{MaxSessions: maxSessions, IdleTimeout: -1, Store: g.store},
		&debugstream.Kind{Processes: g.procs, Journal: process.NewJournal(0, nil)})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// close stops the sessions, the processes and the owner, and removes the state directory.
func (g *gateway) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if g.reg != nil {
		_ = g.reg.Shutdown(ctx)
	}
	if g.store != nil {
		_ = g.store.Close()
	}
	if g.procs != nil {
		g.procs.Close(ctx)
	}
	if g.owner != nil {
		_, _ = g.owner.Close(ctx)
	}
	_ = os.RemoveAll(g.dir)
}

// start runs this program again as a managed process, with env.
func (g *gateway) start(ctx context.Context, env ...string) (process.Info, error) {
	exe, err := os.Executable()
	if err != nil {
		return process.Info{}, err
	}
	return g.procs.Start(ctx, process.Spec{Command: []string{exe}, Env: env})
}

// open creates a debug-stream session following process id, starting with its newest lines
// lines (-1: all the ring holds).
func (g *gateway) open(ctx context.Context, id string, lines int, batch bool) (string, error) {
	raw, err := json.Marshal(abi.DebugStreamOptions{Lines: lines, Batch: batch})
	if err != nil {
		return "", err
	}
	s, err := g.reg.Create(ctx, abi.CreateRequest{Type: abi.TypeDebugStream, Context: abi.Context{ProcessID: id}, Options: raw})
	if err != nil {
		return "", fmt.Errorf("create a debug-stream session: %w", err)
	}
	return s.SessionID, nil
}

// subscriber is what a WebSocket stream of a session does in the gateway (gateway.go,
// handleStream): read up to 512 events, encode each as its frame's JSON, acknowledge it.
type subscriber struct {
	reg    *live.Registry
	id     string
	fl     live.Follower
	encode bool

	// What it got: stdout lines (numbered by the writer), those missing between two it got,
	// those that came twice or out of order; EVENTS_MISSED error events: the session's own
	// (the process's ring was lapped before the session read it) and the registry's (this
	// reader fell behind the session's event log); other errors; read batches.
	lines, lost, disorder int
	ringMissed, logMissed int
	errs                  []string
	batches, events       int
	dataEvents            int
	frame                 []byte
	bytes                 int64
	last                  time.Time // when the newest stdout line was read
	next                  int       // the line number expected next
}

// run reads the session until the process's exit status arrives (or the session ends, or
// ctx does); want is how many lines the process writes.
func (s *subscriber) run(ctx context.Context, want int) error {
	after := uint64(0)
	for {
		b, err := s.reg.Read(ctx, s.id, after, 512, 30*time.Second)
		if err != nil {
			return err
		}
		exited, got := false, false
		for _, e := range b.Events {
			var frame []byte
			if s.encode { // into a reused buffer, as the gateway's stream does
				s.frame = e.AppendJSON(s.frame[:0], abi.ContentANSI)
				frame = s.frame
				s.bytes += int64(len(frame))
			}
			payload := e.Payload
			if j, ok := payload.(live.Joined); ok && !s.encode {
				payload = json.RawMessage(j.AppendTo(nil))
			}
			switch p := payload.(type) {
			case live.Joined: // its frame, as the gateway writes it, holds the lines
				s.dataEvents++
				n, err := s.encoded(frame)
				if err != nil {
					s.errs = append(s.errs, fmt.Sprintf("event %d: %v", e.Seq, err))
				}
				got = n > 0 || got
			case abi.LogLine:
				s.dataEvents++
				got = s.line(p) || got
			case json.RawMessage: // the lines as the kind encoded them (one, or a batch)
				if e.Type == abi.EventData {
					s.dataEvents++
					n, err := s.encoded(p)
					if err != nil {
						s.errs = append(s.errs, fmt.Sprintf("event %d: %v", e.Seq, err))
					}
					got = n > 0 || got
				}
			case abi.StatusPayload:
				if len(p.Message) >= len("process exited") && p.Message[:len("process exited")] == "process exited" {
					exited = true
				}
			case abi.ErrorPayload:
				switch {
				case p.Error.Code == abi.CodeEventsMissed && e.Seq == 0:
					s.logMissed++
				case p.Error.Code == abi.CodeEventsMissed:
					s.ringMissed++
				default:
					s.errs = append(s.errs, string(p.Error.Code)+": "+p.Error.Message)
				}
			}
			s.fl.Ack(e.Seq)
		}
		if got {
			s.last = time.Now()
		}
		if len(b.Events) > 0 {
			s.batches++
			s.events += len(b.Events)
		}
		after = b.Next
		s.fl.Ack(after)
		if exited || b.Done {
			if s.next < want {
				s.lost += want - s.next
				s.next = want
			}
			return nil
		}
	}
}

func (s *subscriber) line(l abi.LogLine) bool {
	if l.Stream != abi.StreamStdout {
		return false
	}
	n := lineNumber(l.Line)
	switch {
	case n == s.next:
	case n > s.next:
		s.lost += n - s.next
	default:
		s.disorder++
	}
	s.next = max(s.next, n+1)
	s.lines++
	return true
}

// encoded takes the stdout lines out of a log-line or log-lines payload as a client that wants
// their text would, without decoding the rest: each item starts with the prefix the kind
// writes, and the writer's lines need no escaping. It returns how many it found.
func (s *subscriber) encoded(p []byte) (int, error) {
	const item = `{"type":"log-line","stream":"stdout","line":"`
	n := 0
	for {
		i := bytes.Index(p, []byte(item))
		if i < 0 {
			break
		}
		p = p[i+len(item):]
		end := bytes.IndexByte(p, '"')
		if end < 0 {
			return n, errors.New("a line without its end")
		}
		s.line(abi.LogLine{Stream: abi.StreamStdout, Line: string(p[:min(end, 8)])})
		p = p[end:]
		n++
	}
	return n, nil
}

var errIncomplete = errors.New("not every subscriber got every line")
