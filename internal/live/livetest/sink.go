package livetest

import (
	"context"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// FakeSink is a live.Sink of no registry: it records what a kind publishes, and its lifetime
// ends when the test says (End), so a test can see what a kind does when its session's
// lifetime ends without a Close (a registry in another process that went away).
type FakeSink struct {
	id     string
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	events []abi.EventType
	seq    uint64
}

var _ live.Sink = (*FakeSink)(nil)

// NewFakeSink returns the sink of session id, its lifetime running.
func NewFakeSink(id string) *FakeSink {
	ctx, cancel := context.WithCancel(context.Background())
	return &FakeSink{id: id, ctx: ctx, cancel: cancel}
}

// End ends the session's lifetime (Context is cancelled).
func (f *FakeSink) End() { f.cancel() }

// Events lists the types of the events published, in order.
func (f *FakeSink) Events() []abi.EventType {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.EventType(nil), f.events...)
}

func (f *FakeSink) add(typ abi.EventType, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.events = append(f.events, typ)
		f.seq++
	}
}

// Context implements live.Sink.
func (f *FakeSink) Context() context.Context { return f.ctx }

// SessionID implements live.Sink.
func (f *FakeSink) SessionID() string { return f.id }

// Output implements live.Sink.
func (f *FakeSink) Output([]byte) { f.add(abi.EventData, 1) }

// PublishFlow implements live.Sink.
func (f *FakeSink) PublishFlow(any) { f.add(abi.EventData, 1) }

// PublishFlowAll implements live.Sink.
func (f *FakeSink) PublishFlowAll(payloads []any) { f.add(abi.EventData, len(payloads)) }

// Publish implements live.Sink.
func (f *FakeSink) Publish(typ abi.EventType, _ any) { f.add(typ, 1) }

// SetMetadata implements live.Sink.
func (f *FakeSink) SetMetadata(map[string]any) { f.add(abi.EventMetadata, 1) }

// Ended implements live.Sink: the lifetime ends, as a registry's close would end it.
func (f *FakeSink) Ended(string, *int) { f.add(abi.EventClose, 1); f.cancel() }

// LastSeq implements live.Sink.
func (f *FakeSink) LastSeq() uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.seq }

// Now implements live.Sink.
func (f *FakeSink) Now() time.Time { return time.Now() }
