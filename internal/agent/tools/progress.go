package tools

import (
	"context"
	"strings"
	"sync"
	"time"
)

// progressTail is how much of a running call's output a progress report carries: its last
// lines, enough to see what a build or an install is doing.
const progressTail = 2 << 10

// Progress is what a running call shows of itself before it ends: when it started to run (a
// confirmation's wait before it is not its time) and the tail of its output. The turn loop
// puts one in a call's context (WithProgress) and reports it every few seconds; a tool that
// streams output (bash) writes to it. Safe for concurrent use.
type Progress struct {
	mu      sync.Mutex
	started time.Time
	tail    []byte
}

type progressKey struct{}

// WithProgress carries p to the tool a call runs.
func WithProgress(ctx context.Context, p *Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// ProgressOf is the call's Progress, nil when no one watches.
func ProgressOf(ctx context.Context) *Progress {
	p, _ := ctx.Value(progressKey{}).(*Progress)
	return p
}

// Start marks the moment the call starts to run (a second mark keeps the first).
func (p *Progress) Start(now time.Time) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started.IsZero() {
		p.started = now
	}
}

// Write keeps the tail of the call's output (an agentshell OnOutput line, for one).
func (p *Progress) Write(_ string, b []byte) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, b...)
	if n := len(p.tail); n > progressTail {
		// Copied down rather than resliced, so the buffer does not grow with the output.
		p.tail = p.tail[:copy(p.tail, p.tail[n-progressTail:])]
	}
}

// Snapshot is when the call started to run (zero before it does) and its output's tail.
func (p *Progress) Snapshot() (time.Time, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The tail may begin inside a character.
	return p.started, strings.ToValidUTF8(string(p.tail), "")
}
