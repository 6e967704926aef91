package process

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"
)

// StreamGateway is the stream of the gateway's own log lines.
const StreamGateway = "gateway"

// Journal keeps the gateway's own recent log lines for debug-stream sessions on the built-in
// server "gateway": a slog handler that tees every record it passes on.
type Journal struct {
	r   *ring
	now func() time.Time
}

// NewJournal keeps the last capacity lines (default 16,384).
func NewJournal(capacity int, now func() time.Time) *Journal {
	if capacity <= 0 {
		capacity = 1 << 14
	}
	if now == nil {
		now = time.Now
	}
	return &Journal{r: newRing(capacity, 0), now: now}
}

// Follow returns the lines after seq after, waiting for some when there are none (see
// Manager.Follow).
func (j *Journal) Follow(ctx context.Context, after uint64, limit int) ([]Line, bool, error) {
	return j.r.read(ctx, after, limit, nil)
}

// Since is the seq after which the last n lines start.
func (j *Journal) Since(n int) uint64 { return j.r.last(n) }

// Handler wraps next: every record next handles is also a line of the journal, formatted as
// logfmt without time and level (those are the line's own fields).
func (j *Journal) Handler(next slog.Handler) slog.Handler {
	return &journalHandler{next: next, j: j, mu: &sync.Mutex{}}
}

type journalHandler struct {
	next  slog.Handler
	j     *Journal
	attrs []slog.Attr
	group string
	mu    *sync.Mutex
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, rec slog.Record) error {
	var b bytes.Buffer
	h.mu.Lock()
	th := slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
			return slog.Attr{}
		}
		return a
	}})
	var hh slog.Handler = th
	if len(h.attrs) > 0 {
		hh = hh.WithAttrs(h.attrs)
	}
	if h.group != "" {
		hh = hh.WithGroup(h.group)
	}
	_ = hh.Handle(ctx, rec)
	h.mu.Unlock()
	line := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	h.j.r.addLevel(StreamGateway, string(line), rec.Level.String(), int64(len(line))+1, h.j.now())
	return h.next.Handle(ctx, rec) //nolint:wrapcheck // a handler passes its next's error on
}

func (h *journalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(attrs)
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.group = name
	return &c
}
