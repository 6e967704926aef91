package conversation

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nexus-run/nexus/internal/abi"
)

// history builds the context of c's transcript. The messages are streamed: a context without
// compaction can be as large as the file, and nothing needs more than the last Limit messages
// at once.
func history(c chat, opts HistoryOptions) (_ *History, err error) {
	if opts.Limit < 0 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "the history limit must not be negative")
	}
	f, err := openTranscript(c.Path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	if opts.Branch != "" && f.Entry(opts.Branch) == nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, c.SessionID, "no entry %q in %s (see nexus chat tree)", opts.Branch, c.Path)
	}
	cx, seq := f.ContextMessages(opts.Branch)
	h := &History{Header: HistoryHeader{LeafID: cx.LeafID, Model: cx.Model, ThinkingLevel: cx.ThinkingLevel}, Closer: f}
	switch {
	case opts.Count:
		n := 0
		for _, err := range seq {
			if err != nil {
				return nil, fmt.Errorf("build context of %s: %w", c.Path, err)
			}
			n++
		}
		if opts.Limit > 0 {
			n = min(n, opts.Limit)
		}
		h.Count = n
		h.Messages = func(func(json.RawMessage, error) bool) {}
	case opts.Limit > 0:
		// A ring of the last Limit messages: next is where the oldest one sits once it is full.
		ring := make([]json.RawMessage, 0, min(opts.Limit, 1024))
		next := 0
		for m, err := range seq {
			if err != nil {
				return nil, fmt.Errorf("build context of %s: %w", c.Path, err)
			}
			m = bytes.Clone(m) // m is valid only until the next batch
			if len(ring) < opts.Limit {
				ring = append(ring, m)
				continue
			}
			ring[next] = m
			next = (next + 1) % opts.Limit
		}
		h.Messages = func(yield func(json.RawMessage, error) bool) {
			for i := range ring {
				if !yield(ring[(next+i)%len(ring)], nil) {
					return
				}
			}
		}
	default:
		path := c.Path
		h.Messages = func(yield func(json.RawMessage, error) bool) {
			for m, err := range seq {
				if err != nil {
					yield(nil, fmt.Errorf("build context of %s: %w", path, err))
					return
				}
				if !yield(m, nil) {
					return
				}
			}
		}
	}
	return h, nil
}
