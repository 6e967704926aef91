package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// decoder reads one provider's stream and reports what it sees to a builder.
type decoder interface {
	// step reads provider events until it has reported at least one, or the stream ends:
	// false then, with err telling why it ended (nil for the end of the stream).
	step(b *builder) bool
	err() error
	close() error
}

// sdkStream is an SDK's typed stream of events.
type sdkStream[T any] interface {
	Next() bool
	Current() T
	Err() error
	Close() error
}

// sdkDecoder is the decoder over an SDK stream: on reports each event to the builder,
// failure turns the SDK's stream error into ours.
type sdkDecoder[T any] struct {
	s       sdkStream[T]
	on      func(b *builder, ev *T)
	failure func(error) error
	// cur holds the event on reports: the SDKs' event unions are kilobytes, and a local
	// passed by pointer to a func value would be a heap allocation per event.
	cur T
}

func (d *sdkDecoder[T]) step(b *builder) bool {
	for d.s.Next() {
		n := len(b.queue)
		d.cur = d.s.Current()
		d.on(b, &d.cur)
		if len(b.queue) > n || b.overflow {
			return true // an overflow ends the reply here (Next), events or not
		}
	}
	return false
}

func (d *sdkDecoder[T]) err() error { return d.failure(d.s.Err()) }

func (d *sdkDecoder[T]) close() error { return d.s.Close() } //nolint:wrapcheck // closing a body

// started returns the decoder of an SDK stream, or the error of its request (the SDKs
// report a failed request as the stream's error before any event).
func started[T any](s sdkStream[T], on func(b *builder, ev *T), failure func(error) error) (decoder, error) {
	if err := s.Err(); err != nil {
		_ = s.Close()
		return nil, err //nolint:wrapcheck // turned into the backend's error by requestError
	}
	return &sdkDecoder[T]{s: s, on: on, failure: failure}, nil
}

// block is a content block being received.
type block struct {
	c    Content
	buf  strings.Builder // text, thinking or arguments so far
	open bool
	// received counts the bytes of the deltas, kept or not.
	received int
	// cut is set once a tool call's arguments pass the builder's limit: buf is then dropped
	// and the rest only counted (cut.Bytes is set from received when the block is read).
	cut *TruncatedArguments
}

// builder assembles the assistant message and queues the events that describe it.
type builder struct {
	msg    Message
	blocks []*block
	queue  []Event
	head   int
	// stop is the stop reason the provider gave; complete is set once it said the reply
	// is over (a stream that ends before is cut short).
	stop     StopReason
	complete bool
	// fail is a failure the provider reported in a normal event (a content filter, a
	// failed response): the reply ends in error.
	fail error
	// maxArgs bounds the arguments kept of one tool call (Request.MaxToolArguments).
	maxArgs int
	// maxReply bounds the text and thinking of the reply (Request.MaxReply; 0: none);
	// replyBytes counts them, and overflow ends the stream.
	maxReply   int
	replyBytes int
	overflow   bool
}

func (b *builder) emit(ev Event) { b.queue = append(b.queue, ev) }

// start opens a block and returns its index.
func (b *builder) start(c Content) int {
	i := len(b.blocks)
	b.blocks = append(b.blocks, &block{c: c, open: true})
	ev := Event{Index: i}
	switch c.Type {
	case BlockText:
		ev.Type = EventTextStart
	case BlockThinking:
		ev.Type = EventThinkingStart
	case BlockToolCall:
		ev.Type = EventToolCallStart
		ev.ToolCall = &ToolCall{ID: c.ID, Name: c.Name}
	}
	b.emit(ev)
	return i
}

// delta appends s to block i.
func (b *builder) delta(i int, s string) {
	if i < 0 || i >= len(b.blocks) || !b.blocks[i].open || s == "" {
		return
	}
	bl := b.blocks[i]
	if bl.c.Type != BlockToolCall && b.maxReply > 0 {
		if b.overflow {
			return
		}
		if b.replyBytes += len(s); b.replyBytes > b.maxReply {
			// The stream is closed at the next step (Next); what came before is kept.
			b.overflow = true
			if b.fail == nil {
				b.fail = &ReplyTooLongError{Limit: b.maxReply}
			}
			return
		}
	}
	bl.received += len(s)
	if bl.c.Type == BlockToolCall && b.maxArgs > 0 && bl.received > b.maxArgs {
		// Arguments this large are refused whatever they hold: keep their start to show
		// what the call was, let go of the rest at once and relay nothing more of them.
		if bl.cut == nil {
			bl.cut = &TruncatedArguments{Limit: b.maxArgs, Prefix: prefix(bl.buf.String(), s)}
			bl.buf = strings.Builder{}
		}
		return
	}
	bl.buf.WriteString(s)
	ev := Event{Index: i, Delta: s}
	switch bl.c.Type {
	case BlockText:
		ev.Type = EventTextDelta
	case BlockThinking:
		ev.Type = EventThinkingDelta
	case BlockToolCall:
		ev.Type = EventToolCallDelta
	}
	b.emit(ev)
}

// signature appends to the signature of thinking block i.
func (b *builder) signature(i int, sig string) {
	if i < 0 || i >= len(b.blocks) || !b.blocks[i].open || sig == "" {
		return
	}
	b.blocks[i].c.ThinkingSignature += sig
	b.emit(Event{Type: EventThinkingDelta, Index: i, Signature: sig})
}

// end closes block i.
func (b *builder) end(i int) {
	if i < 0 || i >= len(b.blocks) || !b.blocks[i].open {
		return
	}
	bl := b.blocks[i]
	raw := bl.buf.String()
	bl.c = bl.content()
	bl.open = false
	bl.buf = strings.Builder{}
	ev := Event{Index: i}
	switch bl.c.Type {
	case BlockText:
		ev.Type, ev.Content = EventTextEnd, bl.c.Text
	case BlockThinking:
		ev.Type, ev.Content, ev.Signature = EventThinkingEnd, bl.c.Thinking, bl.c.ThinkingSignature
	case BlockToolCall:
		ev.Type = EventToolCallEnd
		tc := &ToolCall{ID: bl.c.ID, Name: bl.c.Name, Arguments: bl.c.Arguments}
		switch {
		case bl.c.ArgumentsTruncated != nil:
			tc.ArgumentsError = bl.c.ArgumentsTruncated.Refusal()
		case tc.Arguments == nil:
			tc.ArgumentsError = argumentsError(raw)
			tc.Arguments, bl.c.Arguments = json.RawMessage("{}"), json.RawMessage("{}")
		}
		ev.ToolCall = tc
	}
	b.emit(ev)
}

// endAll closes every open block, in order.
func (b *builder) endAll() {
	for i, bl := range b.blocks {
		if bl.open {
			b.end(i)
		}
	}
}

// usage records the usage so far.
func (b *builder) usage(u Usage) {
	u.total()
	b.msg.Usage = u
	b.emit(Event{Type: EventUsage, Usage: u})
}

// content returns the block with what was received so far.
func (bl *block) content() Content {
	c := bl.c
	if !bl.open {
		return c
	}
	switch c.Type {
	case BlockText:
		c.Text += bl.buf.String()
	case BlockThinking:
		c.Thinking += bl.buf.String()
	case BlockToolCall:
		if bl.cut != nil {
			t := *bl.cut
			t.Bytes = bl.received
			c.Arguments, c.ArgumentsTruncated = json.RawMessage("{}"), &t
			break
		}
		c.Arguments = toolArguments(bl.buf.String())
	}
	return c
}

// prefix returns the first truncatedPrefix bytes of kept+more, cut at a character's start,
// as a string of its own (not holding on to kept's memory).
func prefix(kept, more string) string {
	p := kept
	if len(p) > truncatedPrefix {
		p = p[:truncatedPrefix]
	} else {
		p += more[:min(len(more), truncatedPrefix-len(p))]
	}
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRuneInString(p[i:]) {
				p = p[:i] // a character cut in two
			}
			break
		}
	}
	return strings.Clone(strings.ToValidUTF8(p, ""))
}

// toolArguments returns args when it is a JSON object, {} when blank, nil otherwise.
func toolArguments(args string) json.RawMessage {
	t := strings.TrimSpace(args)
	if t == "" {
		return json.RawMessage("{}")
	}
	if t[0] != '{' || !json.Valid([]byte(t)) {
		return nil
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(t)) != nil {
		return nil
	}
	return buf.Bytes()
}

// argumentsError describes arguments that are not a JSON object, quoting their start.
func argumentsError(args string) string {
	const quote = 200
	q := args
	if len(q) > quote {
		q = q[:quote] + "..."
	}
	return fmt.Sprintf("the tool call's arguments are not a JSON object (%d bytes): %q", len(args), q)
}

// message returns the assistant message so far.
func (b *builder) message() Message {
	m := b.msg
	m.Content = make([]Content, 0, len(b.blocks))
	for _, bl := range b.blocks {
		c := bl.content()
		if c.Type == BlockToolCall && c.Arguments == nil {
			c.Arguments = json.RawMessage("{}")
		}
		m.Content = append(m.Content, c)
	}
	return m
}

// eventStream is the Stream of every provider: a decoder feeding a builder, pulled by Next.
type eventStream struct {
	ctx    context.Context
	cancel context.CancelFunc
	dec    decoder
	b      builder
	cur    Event
	ended  bool // EventDone queued
	err    error
	// classify turns the decoder's error into the stream's.
	classify func(error) error

	closeOnce sync.Once
	closeErr  error
}

func newEventStream(ctx context.Context, cancel context.CancelFunc, dec decoder, msg Message, maxArgs int, classify func(error) error) *eventStream {
	s := &eventStream{ctx: ctx, cancel: cancel, dec: dec, classify: classify}
	s.b.msg, s.b.maxArgs = msg, maxArgs
	return s
}

func (s *eventStream) Next() bool {
	b := &s.b
	for b.head == len(b.queue) {
		if s.ended {
			return false
		}
		b.queue, b.head = b.queue[:0], 0
		if !s.dec.step(b) {
			s.finish(s.dec.err())
		} else if b.overflow {
			s.finish(nil) // the reply's error is b.fail; the connection is closed
		}
	}
	s.cur = b.queue[b.head]
	b.queue[b.head] = Event{}
	b.head++
	return true
}

// finish ends the reply: open blocks are closed, the stop reason and error settled, and
// EventDone queued.
func (s *eventStream) finish(err error) {
	b := &s.b
	stop := b.stop
	switch {
	case s.ctx.Err() != nil:
		stop = StopAborted
		s.err = fmt.Errorf("provider: reply aborted: %w", context.Cause(s.ctx))
	case err != nil:
		stop = StopError
		s.err = s.classify(err)
	case b.fail != nil:
		stop = StopError
		s.err = s.classify(b.fail)
	case !b.complete:
		stop = StopError
		s.err = s.classify(errTruncated)
	}
	if stop == "" {
		stop = StopEndTurn
	}
	b.endAll()
	for _, bl := range b.blocks {
		if bl.c.Type == BlockToolCall && stop == StopEndTurn {
			// Some servers say "stop" after tool calls; the calls still need results.
			stop = StopToolUse
		}
	}
	b.msg.StopReason = stop
	if s.err != nil {
		b.msg.ErrorMessage = s.err.Error()
	}
	b.emit(Event{Type: EventDone, StopReason: stop})
	s.ended = true
	_ = s.release()
}

func (s *eventStream) Event() Event { return s.cur }

func (s *eventStream) Message() Message { return s.b.message() }

func (s *eventStream) Err() error { return s.err }

// release closes the connection once.
func (s *eventStream) release() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.dec.close()
		s.cancel()
	})
	return s.closeErr
}

func (s *eventStream) Close() error {
	s.cancel()
	return s.release()
}
