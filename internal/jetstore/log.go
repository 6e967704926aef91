package jetstore

import (
	"bytes"
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

// consumerIdle is how long the server keeps a log's consumer that nobody pulls from.
const consumerIdle = 30 * time.Second

// maxChunk bounds an event message's body, under NATS's default max_payload (1 MiB). Bigger
// messages (8 MiB on a server that allows them) measured no faster: a flood is bounded by the
// servers' writes, not by round trips.
const maxChunk = 512 << 10

// maxQueued bounds the bytes appended and not yet acknowledged; an Append past it waits.
const maxQueued = 8 << 20

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

	// appendMu guards the queue of numbered events the flusher publishes and what goes with
	// it; lastStream and lastSeq are the subject's newest message as this appender last knew
	// it (a stale value costs one refused publish and a refresh).
	appendMu   sync.Mutex
	lastStream uint64
	lastSeq    uint64
	// publishMsg is the stream's publish (a test loses its acknowledgements).
	publishMsg  func(context.Context, *nats.Msg, ...jetstream.PublishOpt) (*jetstream.PubAck, error)
	nextSeq     uint64 // the number the next Append gives out
	queue       []queued
	queuedBytes int // of the queue and the batch in flight
	flushing    bool
	closing     bool
	failed      error         // a publish's failure, for the next Append
	enqueued    uint64        // events ever queued
	resolved    uint64        // of those, stored or dropped
	progress    chan struct{} // closed (and replaced) when the flusher ends a batch

	// applyMu orders what reaches mem (the consumer's messages and this node's appends) and
	// guards the rest.
	applyMu sync.Mutex
	pending []*live.Event // chunks of an append whose last chunk has not come yet
	closed  bool
	cc      jetstream.ConsumeContext
	cons    jetstream.Consumer
	// applied is the stream sequence of the last message the consumer gave: a follower made
	// again starts after it.
	applied uint64
	// stall is how long a wait for the consumer may see nothing come before the follower is
	// made again (default followerStall).
	stall time.Duration
}

// followerStall bounds a wait for this node's consumer of a log: an ordered consumer that
// stopped delivering (seen once after a stream leader's kill) is replaced by one starting
// after the last message it gave, rather than leave the log's appender waiting for ever.
const followerStall = 2 * ackWait

var _ live.EventLog = (*Log)(nil)

// openLog opens the log of session id: it learns the subject's newest message, starts the
// consumer from the subject's first, and returns once the projection holds everything the
// stream held when it was opened.
func openLog(ctx context.Context, js jetstream.JetStream, stream, subject, id string, limits live.LogLimits, logger *slog.Logger) (*Log, error) {
	l := &Log{js: js, stream: stream, subject: subject, id: id, logger: logger, mem: live.NewMemoryLog(limits), progress: make(chan struct{}),
		publishMsg: js.PublishMsg, stall: followerStall}
	if err := l.refresh(ctx); err != nil {
		return nil, err
	}
	l.nextSeq = l.lastSeq + 1
	// The consumer is deleted when the log closes; one left behind (this node gone) goes after
	// consumerIdle, not nats.go's 5 minutes: the stream takes 1,000 consumers (nats-server's
	// default), and a node reading another node's session opens a log, so a consumer, per read.
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: consumerIdle})
	if err != nil {
		return nil, fmt.Errorf("session %s: follow its events: %w", id, err)
	}
	cc, err := cons.Consume(l.deliver)
	if err != nil {
		return nil, fmt.Errorf("session %s: follow its events: %w", id, err)
	}
	l.applyMu.Lock()
	l.cc, l.cons = cc, cons
	l.applyMu.Unlock()
	if err := l.catchUp(ctx, l.lastSeq); err != nil {
		cc.Stop()
		return nil, fmt.Errorf("session %s: read its events: %w", id, err)
	}
	return l, nil
}

// refresh reads the subject's newest message: the appender's next compare-and-set.
func (l *Log) refresh(ctx context.Context) error {
	_, err := l.refreshMsg(ctx)
	return err
}

// refreshMsg is refresh that returns the newest message (nil: none).
func (l *Log) refreshMsg(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	st, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return nil, fmt.Errorf("session %s: event stream: %w", l.id, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, l.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		l.lastStream, l.lastSeq = 0, 0
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: read its newest event: %w", l.id, err)
	}
	_, last, _, err := seqHeaders(m.Header)
	if err != nil {
		return nil, fmt.Errorf("session %s: stream message %d: %w", l.id, m.Sequence, err)
	}
	l.lastStream, l.lastSeq = m.Sequence, last
	return m, nil
}

// catchUp waits until the projection holds seq. A consumer that gives nothing for l.stall
// while the projection lacks seq is made again (refollow), as often as it takes.
func (l *Log) catchUp(ctx context.Context, seq uint64) error {
	for {
		last, _ := l.mem.LastSeq(ctx)
		if last >= seq {
			return nil
		}
		l.applyMu.Lock()
		closed, stall := l.closed, l.stall
		l.applyMu.Unlock()
		if closed {
			return live.ErrLogClosed
		}
		wctx, cancel := context.WithTimeout(ctx, stall)
		err := l.mem.Wait(wctx, last)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err() //nolint:wrapcheck // the caller's own context
		case errors.Is(err, context.DeadlineExceeded):
			if rerr := l.refollow(ctx, last, seq); rerr != nil {
				l.logger.Warn("follow a log's events again", "id", l.id, "err", rerr)
			}
		default:
			return err
		}
	}
}

// refollow replaces the log's consumer by one that starts after the last message the old
// one gave.
func (l *Log) refollow(ctx context.Context, have, want uint64) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.closed {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{l.subject}, InactiveThreshold: consumerIdle}
	if l.applied > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, l.applied+1
	}
	l.logger.Warn("a log's consumer gave nothing while events were missing: following again", "id", l.id,
		"have", have, "want", want, "fromStreamSeq", cfg.OptStartSeq)
	cctx, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	cons, err := l.js.OrderedConsumer(cctx, l.stream, cfg)
	if err != nil {
		return fmt.Errorf("session %s: follow its events again: %w", l.id, err)
	}
	cc, err := cons.Consume(l.deliver)
	if err != nil {
		return fmt.Errorf("session %s: follow its events again: %w", l.id, err)
	}
	old, oldCons := l.cc, l.cons
	l.cc, l.cons = cc, cons
	if old != nil {
		old.Stop()
	}
	l.deleteConsumer(ctx, oldCons)
	return nil
}

// deleteConsumer deletes a consumer the log no longer uses, not waited for.
func (l *Log) deleteConsumer(ctx context.Context, cons jetstream.Consumer) {
	if cons == nil {
		return
	}
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	go func(name string) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackWait)
		defer cancel()
		if err := l.js.DeleteConsumer(dctx, l.stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			l.logger.Debug("delete a log's consumer", "id", l.id, "consumer", name, "err", err)
		}
	}(info.Name)
}

// Append implements live.EventLog, asynchronously: it numbers events after the newest this
// node has given out, queues them and returns; a flusher publishes what is queued as one
// append (a message, or chunks of one), chained on the subject's last stream sequence
// (Nats-Expected-Last-Subject-Sequence), one in flight at a time, so appends are stored in
// the order they were numbered and a sequential appender waits for no round trip. Readers are
// shown events only once the stream has acknowledged them, and Read and LastSeq first wait
// for what was appended before them, so what a reader saw is stored.
//
// When a publish fails (another appender wrote first, or the acknowledgement never came),
// the events of that publish and everything queued after it are dropped, the log reads the
// subject's newest message again, and the next Append returns a *NotStoredError naming the
// numbers that were given out but not acknowledged (and stores nothing of its own); later
// appends number after what the stream holds, so there is still no gap and no duplicate.
func (l *Log) Append(ctx context.Context, events ...*live.Event) (live.Appended, error) {
	l.applyMu.Lock()
	closed := l.closed
	l.applyMu.Unlock()
	if closed {
		return live.Appended{}, live.ErrLogClosed
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	for {
		if l.failed != nil {
			err := l.failed
			l.failed = nil
			return live.Appended{}, err
		}
		if l.closing {
			return live.Appended{}, live.ErrLogClosed
		}
		// Backpressure: an appender faster than the stream waits for it here, not in memory.
		if l.queuedBytes < maxQueued {
			break
		}
		if err := l.waitProgress(ctx); err != nil {
			return live.Appended{}, err
		}
	}
	if len(events) == 0 {
		return live.Appended{First: l.nextSeq, Last: l.nextSeq - 1}, nil
	}
	res := live.Appended{First: l.nextSeq, Last: l.nextSeq + uint64(len(events)) - 1}
	size := 0
	for i, e := range events {
		e.Seq = res.First + uint64(i)
		b, err := e.AppendBinary(nil)
		if err != nil {
			return live.Appended{}, fmt.Errorf("session %s: append: %w", l.id, err)
		}
		l.queue = append(l.queue, queued{e: e, body: b})
		size += len(b)
	}
	l.nextSeq = res.Last + 1
	l.queuedBytes += size
	l.enqueued += uint64(len(events))
	if !l.flushing {
		l.flushing = true
		// The flusher outlives this Append: it publishes later appends too.
		go l.flush(context.WithoutCancel(ctx))
	}
	return res, nil
}

// waitProgress waits, with appendMu held, for the flusher to finish a publish.
func (l *Log) waitProgress(ctx context.Context) error {
	ch := l.progress
	l.appendMu.Unlock()
	defer l.appendMu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle waits until every event appended before it is stored (or dropped).
func (l *Log) settle(ctx context.Context) error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	target := l.enqueued
	for l.resolved < target {
		if err := l.waitProgress(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Flush waits until everything appended before it is acknowledged by the stream, and returns
// the failure of what was not (a *NotStoredError), which the next Append then does not return.
func (l *Log) Flush(ctx context.Context) error {
	if err := l.settle(ctx); err != nil {
		return err
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	err := l.failed
	l.failed = nil
	return err
}

// flush publishes what is queued, a batch at a time, until the queue is empty.
func (l *Log) flush(ctx context.Context) {
	for {
		l.appendMu.Lock()
		batch := l.queue
		l.queue = nil
		if len(batch) == 0 {
			l.flushing = false
			l.signalLocked()
			l.appendMu.Unlock()
			return
		}
		l.appendMu.Unlock()

		err := l.publish(ctx, batch)
		if err == nil {
			// Copies: the projection numbers what it takes, and the appender owns its events.
			events := make([]*live.Event, len(batch))
			for i, q := range batch {
				e := q.e
				events[i] = &live.Event{Seq: e.Seq, Type: e.Type, Time: e.Time, SessionID: e.SessionID, Payload: e.Payload}
			}
			err = l.applyOwn(ctx, events)
		}
		l.appendMu.Lock()
		n := uint64(len(batch))
		for _, q := range batch {
			l.queuedBytes -= len(q.body)
		}
		if err != nil && !errors.Is(err, live.ErrLogClosed) {
			// The chain is broken: what is queued was numbered after the batch, so it goes too.
			for _, q := range l.queue {
				l.queuedBytes -= len(q.body)
			}
			n += uint64(len(l.queue))
			nerr := &NotStoredError{Session: l.id, First: batch[0].e.Seq, Last: l.nextSeq - 1, Err: err}
			// Said here too: the next Append, which returns it, may never come.
			l.logger.Warn("events not stored", "err", nerr)
			l.queue = nil
			rctx, cancel := context.WithTimeout(ctx, ackWait)
			if rerr := l.refresh(rctx); rerr != nil {
				l.logger.Debug("refresh an event subject", "id", l.id, "err", rerr)
			}
			cancel()
			l.nextSeq = l.lastSeq + 1
			if l.failed == nil {
				l.failed = nerr
			}
		}
		l.resolved += n
		l.signalLocked()
		l.appendMu.Unlock()
	}
}

// signalLocked wakes whoever waits for the flusher's progress.
func (l *Log) signalLocked() {
	close(l.progress)
	l.progress = make(chan struct{})
}

// NotStoredError is what an Append returns after an earlier append's publish failed: the
// numbers First..Last were given out (by Appends that returned) but not acknowledged by the
// stream. A refused compare-and-set stored none of them; a lost acknowledgement may have
// stored some, and the log numbers after whatever the stream holds.
type NotStoredError struct {
	Session     string
	First, Last uint64
	Err         error
}

func (e *NotStoredError) Error() string {
	return fmt.Sprintf("session %s: events %d..%d not acknowledged: %v", e.Session, e.First, e.Last, e.Err)
}

func (e *NotStoredError) Unwrap() error { return e.Err }

// queued is an event numbered and waiting for the flusher, with its canonical form.
type queued struct {
	e    *live.Event
	body []byte
}

// publish publishes a batch (numbered, contiguous) as one append, in chunks, each chained on
// the subject's last stream sequence. A chunk refused or unanswered is published again while
// the subject's newest message is still the one before it: the compare-and-set makes that
// safe (a first attempt stored late refuses the second), and a replicated stream refuses a
// publish now and then while the one before is still being applied.
func (l *Log) publish(ctx context.Context, batch []queued) error {
	last := batch[len(batch)-1].e.Seq
	var chunks [][2]int // [start, end) in batch
	size, start := 0, 0
	for i, q := range batch {
		if i > start && size+len(q.body)+binary.MaxVarintLen64 > maxChunk {
			chunks = append(chunks, [2]int{start, i})
			start, size = i, 0
		}
		size += len(q.body) + binary.MaxVarintLen64
	}
	chunks = append(chunks, [2]int{start, len(batch)})
	for k, c := range chunks {
		var body []byte
		for _, q := range batch[c[0]:c[1]] {
			body = binary.AppendUvarint(body, uint64(len(q.body)))
			body = append(body, q.body...)
		}
		first, end := batch[c[0]].e.Seq, batch[c[1]-1].e.Seq
		var since time.Time // the first failure of this chunk
		for attempt := 1; ; attempt++ {
			m := nats.NewMsg(l.subject)
			m.Data = body
			m.Header.Set(hdrFirst, strconv.FormatUint(first, 10))
			m.Header.Set(hdrLast, strconv.FormatUint(end, 10))
			m.Header.Set(hdrBatch, strconv.FormatUint(last, 10))
			// An ack lost with a server (the stream's leader moving) never comes: the attempt
			// ends and its outcome is unknown.
			pctx, cancel := context.WithTimeout(ctx, ackWait)
			ack, err := l.publishMsg(pctx, m, jetstream.WithExpectLastSequencePerSubject(l.lastStream))
			cancel()
			if err == nil {
				l.appendMu.Lock()
				l.lastStream, l.lastSeq = ack.Sequence, end
				l.appendMu.Unlock()
				break
			}
			if since.IsZero() {
				since = time.Now()
				l.logger.Info(msgPublishFailed, "id", l.id, "first", first, "err", err)
			}
			again, stored, rerr := l.publishAgain(ctx, first, end, body, since, attempt)
			if stored {
				break // an unanswered attempt was stored after all (refresh took its sequence)
			}
			if again {
				l.logger.Info(msgPublishRetry, "id", l.id, "attempt", attempt, "err", err, "refresh", rerr)
				continue
			}
			if k > 0 {
				// Numbering it again would store the chunks already acknowledged twice.
				return fmt.Errorf("%w: %w", errPartial, err)
			}
			return err
		}
	}
	return nil
}

// maxAttempts bounds the publishes of a chunk that the stream answers (it refused it while the
// one before was being applied); maxUnanswered bounds how long a chunk is published again while
// the stream does not answer at all (its leader being elected, its quorum lost): an election
// takes seconds, and what is queued meanwhile waits for it rather than being dropped.
const (
	maxAttempts   = 3
	maxUnanswered = 30 * time.Second
)

// msgPublishFailed is logged at a chunk's first failed publish, msgPublishRetry when it is
// published again.
const msgPublishFailed = "event stream did not take a publish"

// msgPublishRetry is logged when a chunk is published again.
const msgPublishRetry = "event stream not answering; publishing again"

// publishAgain reads the subject's newest message after a publish of the chunk starting at
// first failed, and says whether to publish it again: when the subject still ends just before
// it, within maxAttempts, or, while the stream does not answer the read, until maxUnanswered
// has passed since the chunk's first failure (waiting a little between reads).
//
// stored says the subject's newest message is this chunk (first..end, body): an attempt whose
// acknowledgement never came was stored after all, when the stream's quorum came back.
func (l *Log) publishAgain(ctx context.Context, first, end uint64, body []byte, since time.Time, attempt int) (again, stored bool, err error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, ackWait)
		l.appendMu.Lock()
		m, rerr := l.refreshMsg(rctx)
		chained := rerr == nil && l.lastSeq+1 == first
		stored = rerr == nil && m != nil && l.lastSeq == end && bytes.Equal(m.Data, body)
		found := l.lastSeq
		l.appendMu.Unlock()
		cancel()
		waited := time.Since(since)
		switch {
		case stored:
			return false, true, nil
		case rerr == nil && !chained:
			l.logger.Warn("event subject moved on", "id", l.id, "first", first, "subjectLast", found, "attempt", attempt)
			return false, false, nil
		case rerr == nil:
			return chained && (attempt < maxAttempts || waited < maxUnanswered), false, nil
		case waited >= maxUnanswered:
			return false, false, rerr
		}
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-time.After(250 * time.Millisecond): // the stream answers again on its own
		}
	}
}

// applyOwn puts an append this node made into the projection: at once when it follows what the
// projection holds (nobody else appended in between), else once the consumer has delivered
// what came before.
func (l *Log) applyOwn(ctx context.Context, events []*live.Event) error {
	first, last := events[0].Seq, events[len(events)-1].Seq
	l.applyMu.Lock()
	have, _ := l.mem.LastSeq(ctx)
	if have+1 == first {
		_, err := l.mem.Append(ctx, events...)
		l.applyMu.Unlock()
		return err
	}
	l.applyMu.Unlock()
	return l.catchUp(ctx, last)
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
	if md, merr := m.Metadata(); merr == nil {
		if md.Sequence.Stream <= l.applied {
			return // given again by a follower made again
		}
		l.applied = md.Sequence.Stream
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
	if err := l.settle(ctx); err != nil {
		return live.Page{}, err
	}
	return l.mem.Read(ctx, after, limit)
}

// Wait implements live.EventLog.
func (l *Log) Wait(ctx context.Context, after uint64) error { return l.mem.Wait(ctx, after) }

// LastSeq implements live.EventLog.
func (l *Log) LastSeq(ctx context.Context) (uint64, error) {
	if err := l.settle(ctx); err != nil {
		return 0, err
	}
	return l.mem.LastSeq(ctx)
}

// Close implements live.EventLog: it waits for what was appended to be published (or to
// fail, which it returns), then this node stops following the subject; what the stream holds
// stays.
func (l *Log) Close(ctx context.Context) error {
	l.appendMu.Lock()
	l.closing = true
	l.appendMu.Unlock()
	settled := l.settle(ctx)
	l.appendMu.Lock()
	failed := l.failed
	l.failed = nil
	l.appendMu.Unlock()
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.cc != nil {
		l.cc.Stop()
	}
	// Not waited for: a read of another node's session closes its log as it answers.
	l.deleteConsumer(ctx, l.cons)
	return errors.Join(settled, failed, l.mem.Close(ctx))
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
