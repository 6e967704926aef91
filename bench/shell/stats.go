package main

import (
	"slices"
	"time"
)

// Row is one line of a table: one path running one command.
type Row struct {
	// Key is "<path>/<command>", e.g. "engine/true" or "mcp-full/1mb".
	Key     string `json:"key"`
	Letter  string `json:"letter"`
	Path    string `json:"path"`
	Command string `json:"command"`
	Samples int    `json:"samples"`
	Warmup  int    `json:"warmup"`

	P50ms  float64 `json:"p50ms"`
	P90ms  float64 `json:"p90ms"`
	P99ms  float64 `json:"p99ms"`
	MinMs  float64 `json:"minMs"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`

	// SpeedupP50 and SpeedupMean are the `bash -c` row's time divided by this row's, for the
	// same command in the same run: above 1 means faster than a fresh bash -c.
	SpeedupP50  float64 `json:"speedupP50,omitempty"`
	SpeedupMean float64 `json:"speedupMean,omitempty"`

	// Received is how many x of the megabyte (0 for `true`) the caller got in the last
	// sample: in stdout for the engine and bash -c, in the result's stdout field for the
	// session manager and MCP, on the marker's line of the history capture for tmux.
	Received int `json:"received"`
	// ReplyBytes is, for MCP, the size of the last reply's text content plus its structured
	// stdout and stderr (the reply carries the output twice); for tmux, the size of the last
	// whole-history capture.
	ReplyBytes int `json:"replyBytes,omitempty"`
	// TmuxCalls is, for tmux, the mean number of tmux client processes per round trip: one
	// send-keys, the polling captures of the visible pane, one capture of the whole history.
	TmuxCalls float64 `json:"tmuxCalls,omitempty"`
	// Truncated is the result's truncated flag (session manager and MCP).
	Truncated bool   `json:"truncated,omitempty"`
	Skipped   bool   `json:"skipped,omitempty"`
	Note      string `json:"note,omitempty"`

	durations []time.Duration
	calls     int // tmux client processes over the timed samples
	lastCalls int // tmux client processes of the last sample
}

// summarize fills the percentiles from the recorded durations (nearest rank).
func (r *Row) summarize() {
	if len(r.durations) == 0 {
		return
	}
	s := slices.Clone(r.durations)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	pct := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	r.Samples = len(s)
	r.P50ms, r.P90ms, r.P99ms = pct(0.50), pct(0.90), pct(0.99)
	r.MinMs, r.MaxMs = ms(s[0]), ms(s[len(s)-1])
	r.MeanMs = ms(sum) / float64(len(s))
	if r.calls > 0 {
		r.TmuxCalls = float64(r.calls) / float64(len(s))
	}
}
