package jetstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/live"
)

// The headers of an event message: the session sequence numbers of the events it carries, and
// the last number of the append they belong to (an append bigger than one message is split in
// chunks, which a reader applies together).
const (
	hdrFirst = "Nexus-First"
	hdrLast  = "Nexus-Last"
	hdrBatch = "Nexus-Batch-Last"
)

// errPartial is an append whose first chunks were stored and a later one refused: another
// appender wrote in between (this node's appends are serialized, so it came from elsewhere).
var errPartial = errors.New("append stored in part")

// ackWait bounds one publish's wait for its acknowledgement.
const ackWait = 5 * time.Second

// maxChunk bounds an event message's body, under NATS's default max_payload (1 MiB).
const maxChunk = 512 << 10

// Log is a session's EventLog on the cluster's event stream: one subject per session, each
// message one append (or a chunk of one), its events in their canonical form. Appends are
// compare-and-set on the subject's last stream sequence (Nats-Expected-Last-Subject-Sequence),
// so two appenders, on one node or two, never give out a number twice or leave one out. What
// the log serves to readers is a MemoryLog projection with the session's limits, fed by an
// ordered consumer on the subject (a reader waits on it, never polls the stream) and by this
// node's own appends.
type Log struct {
	js      jetstream.JetStream
	stream  string
	subject string
	id      string
	logger  *slog.Logger
	mem     *live.MemoryLog

	// appendMu serializes this node's appends, so an append's chunks are consecutive on the
	// subject. It guards lastStream and lastSeq: the subject's newest message as this
	// appender last knew it (a stale value costs one refused publish and a refresh).
	appendMu   sync.Mutex
	lastStream uint64
	lastSeq    uint64

	// applyMu orders what reaches mem (the consumer's messages and this node's appends) and
	// guards the rest.
	applyMu sync.Mutex
	pending []*live.Event // chunks of an append whose last chunk has not come yet
	closed  bool
	cc      jetstream.ConsumeContext
}

var _ live.EventLog = (*Log)(nil)

// openLog opens the log of session id: it learns the subject's newest message, starts the
// consumer from the subject's first, and returns once the projection holds everything the
// stream held when it was opened.
func openLog(ctx context.Context, js jetstream.JetStream, stream, subject, id string, limits live.LogLimits, logger *slog.Logger) (*Log, error) {
	l := &Log{js: js, stream: stream, subject: subject, id: id, logger: logger, mem: live.NewMemoryLog(limits)}
	if err := l.refresh(ctx); err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, fmt.Errorf("session %s: follow its events: %w", id, err)
	}
	cc, err := cons.Consume(l.deliver)
	if err != nil {
		return nil, fmt.Errorf("session %s: follow its events: %w", id, err)
	}
	l.applyMu.Lock()
	l.cc = cc
	l.applyMu.Unlock()
	if err := l.catchUp(ctx, l.lastSeq); err != nil {
		cc.Stop()
		return nil, fmt.Errorf("session %s: read its events: %w", id, err)
	}
	return l, nil
}

// refresh reads the subject's newest message: the appender's next compare-and-set.
func (l *Log) refresh(ctx context.Context) error {
	st, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return fmt.Errorf("session %s: event stream: %w", l.id, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, l.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		l.lastStream, l.lastSeq = 0, 0
		return nil
	}
	if err != nil {
		return fmt.Errorf("session %s: read its newest event: %w", l.id, err)
	}
	_, last, _, err := seqHeaders(m.Header)
	if err != nil {
		return fmt.Errorf("session %s: stream message %d: %w", l.id, m.Sequence, err)
	}
	l.lastStream, l.lastSeq = m.Sequence, last
	return nil
}

// catchUp waits until the projection holds seq.
func (l *Log) catchUp(ctx context.Context, seq uint64) error {
	for {
		last, _ := l.mem.LastSeq(ctx)
		if last >= seq {
			return nil
		}
		l.applyMu.Lock()
		closed := l.closed
		l.applyMu.Unlock()
		if closed {
			return live.ErrLogClosed
		}
		if err := l.mem.Wait(ctx, last); err != nil {
			return err
		}
	}
}

// Append implements live.EventLog: the stream numbers nothing itself, so each message carries
// the session sequence numbers of its events, and the compare-and-set on the subject's last
// stream sequence is what makes those numbers the stream's truth.
func (l *Log) Append(ctx context.Context, events ...*live.Event) (live.Appended, error) {
	l.applyMu.Lock()
	closed := l.closed
	l.applyMu.Unlock()
	if closed {
		return live.Appended{}, live.ErrLogClosed
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if len(events) == 0 {
		last, _ := l.mem.LastSeq(ctx)
		return live.Appended{First: last + 1, Last: last}, nil
	}
	for {
		res, err := l.publish(ctx, events)
		if err == nil {
			return res, l.applyOwn(ctx, res, events)
		}
		if errors.Is(err, errPartial) || !conflict(err) {
			// The outcome is unknown (a timeout may follow a stored message): the next append
			// learns the subject's newest message first.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackWait)
			rerr := l.refresh(rctx)
			cancel()
			if rerr != nil {
				l.logger.Debug("refresh an event subject", "id", l.id, "err", rerr)
			}
			return live.Appended{}, fmt.Errorf("session %s: append %d events: %w", l.id, len(events), err)
		}
		// Another appender got there first: number after what it stored.
		if err := l.refresh(ctx); err != nil {
			return live.Appended{}, err
		}
	}
}

// publish numbers events after the subject's newest and publishes them, in chunks.
func (l *Log) publish(ctx context.Context, events []*live.Event) (live.Appended, error) {
	first := l.lastSeq + 1
	res := live.Appended{First: first, Last: first + uint64(len(events)) - 1}
	for i, e := range events {
		e.Seq = first + uint64(i)
	}
	var body []byte
	start := 0
	flush := func(end int) error {
		m := nats.NewMsg(l.subject)
		m.Data = body
		m.Header.Set(hdrFirst, strconv.FormatUint(events[start].Seq, 10))
		m.Header.Set(hdrLast, strconv.FormatUint(events[end-1].Seq, 10))
		m.Header.Set(hdrBatch, strconv.FormatUint(res.Last, 10))
		// An ack lost with a server (the stream's leader moving) never comes: the attempt ends
		// and the caller learns its outcome is unknown.
		pctx, cancel := context.WithTimeout(ctx, ackWait)
		ack, err := l.js.PublishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(l.lastStream))
		cancel()
		if err != nil && start > 0 {
			// Numbering it again would store the chunks already acknowledged twice.
			return fmt.Errorf("%w: %w", errPartial, err)
		}
		if err != nil {
			return err
		}
		l.lastStream, l.lastSeq = ack.Sequence, events[end-1].Seq
		body, start = nil, end
		return nil
	}
	for i, e := range events {
		b, err := e.AppendBinary(nil)
		if err != nil {
			return live.Appended{}, err
		}
		if len(body) > 0 && len(body)+len(b)+binary.MaxVarintLen64 > maxChunk {
			if err := flush(i); err != nil {
				return live.Appended{}, err
			}
		}
		body = binary.AppendUvarint(body, uint64(len(b)))
		body = append(body, b...)
	}
	return res, flush(len(events))
}

// applyOwn puts an append this node made into the projection: at once when it follows what the
// projection holds (nobody else appended in between), else once the consumer has delivered
// what came before.
func (l *Log) applyOwn(ctx context.Context, res live.Appended, events []*live.Event) error {
	l.applyMu.Lock()
	last, _ := l.mem.LastSeq(ctx)
	if last+1 == res.First {
		_, err := l.mem.Append(ctx, events...)
		l.applyMu.Unlock()
		return err
	}
	l.applyMu.Unlock()
	return l.catchUp(ctx, res.Last)
}

// deliver is the consumer's handler: it decodes a message's events and applies them, a chunked
// append once its last chunk has come.
func (l *Log) deliver(m jetstream.Msg) {
	first, last, batch, err := seqHeaders(m.Headers())
	var events []*live.Event
	if err == nil {
		events, err = decodeEvents(l.id, m.Data())
	}
	if err == nil && (len(events) == 0 || events[0].Seq != first || events[len(events)-1].Seq != last) {
		err = fmt.Errorf("events %d..%d do not match their headers", first, last)
	}
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.closed {
		return
	}
	ctx := context.Background()
	if err != nil {
		// A message this node cannot read: its numbers read as missed rather than stop the log.
		l.logger.Warn("an event message that does not decode", "id", l.id, "err", err)
		l.applyLocked(ctx)
		l.mem.Skip(last)
		return
	}
	if len(l.pending) > 0 && l.pending[len(l.pending)-1].Seq+1 != first {
		l.applyLocked(ctx) // the rest of that append never came
	}
	l.pending = append(l.pending, events...)
	if last >= batch {
		l.applyLocked(ctx)
	}
}

// applyLocked puts the pending events the projection does not hold yet into it.
func (l *Log) applyLocked(ctx context.Context) {
	events := l.pending
	l.pending = nil
	have, _ := l.mem.LastSeq(ctx)
	for len(events) > 0 && events[0].Seq <= have {
		events = events[1:]
	}
	if len(events) == 0 {
		return
	}
	if events[0].Seq > have+1 {
		// The stream no longer holds what came before (its limits dropped it).
		l.mem.Skip(events[0].Seq - 1)
	}
	if _, err := l.mem.Append(ctx, events...); err != nil {
		l.logger.Warn("apply events", "id", l.id, "err", err)
	}
}

// Read implements live.EventLog.
func (l *Log) Read(ctx context.Context, after uint64, limit int) (live.Page, error) {
	return l.mem.Read(ctx, after, limit)
}

// Wait implements live.EventLog.
func (l *Log) Wait(ctx context.Context, after uint64) error { return l.mem.Wait(ctx, after) }

// LastSeq implements live.EventLog.
func (l *Log) LastSeq(ctx context.Context) (uint64, error) { return l.mem.LastSeq(ctx) }

// Close implements live.EventLog: this node stops following the subject; what the stream
// holds stays.
func (l *Log) Close(ctx context.Context) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.cc != nil {
		l.cc.Stop()
	}
	return l.mem.Close(ctx)
}

func seqHeaders(h nats.Header) (first, last, batch uint64, err error) {
	for _, f := range []struct {
		name string
		v    *uint64
	}{{hdrFirst, &first}, {hdrLast, &last}, {hdrBatch, &batch}} {
		if *f.v, err = strconv.ParseUint(h.Get(f.name), 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("header %s: %w", f.name, err)
		}
	}
	if first == 0 || last < first || batch < last {
		return 0, 0, 0, fmt.Errorf("headers %d..%d of %d: %w", first, last, batch, live.ErrCorrupt)
	}
	return first, last, batch, nil
}

// decodeEvents reads a message body: each event's canonical form behind its length.
func decodeEvents(id string, b []byte) ([]*live.Event, error) {
	var out []*live.Event
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("event frame: %w", live.ErrCorrupt)
		}
		e, err := live.UnmarshalEvent(id, b[k:k+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		b = b[k+int(n):]
	}
	return out, nil
}
