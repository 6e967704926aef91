package chatstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nexus-run/nexus/internal/transcript"
)

// RunCustomType is the customType of the transcript entries that record runs.
const RunCustomType = "nexus.run"

// Appender appends a `custom` entry (extension state, not sent to the model) to a transcript
// and returns its id. transcript.Writer implements it.
type Appender interface {
	AppendCustom(customType string, data any) (string, error)
}

// RunPhase is a step of a run's lifecycle: start → streaming → compacting → end.
type RunPhase string

// Run phases, in order.
const (
	PhaseStart      RunPhase = "start"
	PhaseStreaming  RunPhase = "streaming"
	PhaseCompacting RunPhase = "compacting"
	PhaseEnd        RunPhase = "end"
)

var phaseOrder = map[RunPhase]int{PhaseStart: 0, PhaseStreaming: 1, PhaseCompacting: 2, PhaseEnd: 3}

// RunOutcome is how a run ended.
type RunOutcome string

// Run outcomes.
const (
	OutcomeOK      RunOutcome = "ok"
	OutcomeError   RunOutcome = "error"
	OutcomeTimeout RunOutcome = "timeout"
)

// Errors of runs.
var (
	ErrRunPhase = errors.New("run phase out of order")
	ErrRunEnded = errors.New("run already ended")
)

// RunEvent is the data of one nexus.run custom entry.
type RunEvent struct {
	RunID     string     `json:"runId"`
	SessionID string     `json:"sessionId"`
	Phase     RunPhase   `json:"phase"`
	Outcome   RunOutcome `json:"outcome,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// Run is one agent invocation in a session. Its phases are appended to the session's
// transcript as they happen; they only move forward and End happens once.
type Run struct {
	ID        string
	SessionID string

	a     Appender
	mu    sync.Mutex
	phase RunPhase
	ended bool
}

// RunOptions configure StartRunWith.
type RunOptions struct {
	// NewID mints the run id (default: uuid v7).
	NewID func() string
}

// StartRun begins a run of sessionID and records its start.
func StartRun(a Appender, sessionID string) (*Run, error) {
	return StartRunWith(a, sessionID, RunOptions{})
}

// StartRunWith is StartRun with an injected id source.
func StartRunWith(a Appender, sessionID string, opts RunOptions) (*Run, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: start run: no transcript", ErrInvalid)
	}
	if sessionID == "" {
		return nil, fmt.Errorf("%w: start run: empty session id", ErrInvalid)
	}
	newID := opts.NewID
	if newID == nil {
		newID = NewUUIDv7
	}
	r := &Run{ID: newID(), SessionID: sessionID, a: a}
	if _, err := a.AppendCustom(RunCustomType, RunEvent{RunID: r.ID, SessionID: sessionID, Phase: PhaseStart}); err != nil {
		return nil, fmt.Errorf("record start of run %s: %w", r.ID, err)
	}
	r.phase = PhaseStart
	return r, nil
}

// Current returns the last recorded phase.
func (r *Run) Current() RunPhase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phase
}

// Phase records a move to p (streaming or compacting). Phases move forward, except that a
// run may stream again after compacting: a provider's context-overflow error is answered by
// compacting and retrying once (docs/conversations.md, The transcript). Repeating the current phase records
// nothing. Use End to finish.
func (r *Run) Phase(p RunPhase) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return fmt.Errorf("%w: run %s", ErrRunEnded, r.ID)
	}
	if p != PhaseStreaming && p != PhaseCompacting {
		return fmt.Errorf("%w: run %s: phase %q (want streaming or compacting; End ends a run)", ErrRunPhase, r.ID, p)
	}
	if p == r.phase {
		return nil
	}
	if phaseOrder[p] < phaseOrder[r.phase] && (p != PhaseStreaming || r.phase != PhaseCompacting) {
		return fmt.Errorf("%w: run %s: %s after %s", ErrRunPhase, r.ID, p, r.phase)
	}
	if _, err := r.a.AppendCustom(RunCustomType, RunEvent{RunID: r.ID, SessionID: r.SessionID, Phase: p}); err != nil {
		return fmt.Errorf("record %s of run %s: %w", p, r.ID, err)
	}
	r.phase = p
	return nil
}

// End records the end of the run with its outcome (ok, error, timeout) and, for error and
// timeout, cause's message. A run ends exactly once; if recording fails, End may be retried.
func (r *Run) End(outcome RunOutcome, cause error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return fmt.Errorf("%w: run %s", ErrRunEnded, r.ID)
	}
	switch outcome {
	case OutcomeOK:
		if cause != nil {
			return fmt.Errorf("%w: run %s: outcome ok with an error (%s)", ErrInvalid, r.ID, cause.Error())
		}
	case OutcomeError, OutcomeTimeout:
	default:
		return fmt.Errorf("%w: run %s: outcome %q (want ok, error or timeout)", ErrInvalid, r.ID, outcome)
	}
	ev := RunEvent{RunID: r.ID, SessionID: r.SessionID, Phase: PhaseEnd, Outcome: outcome}
	if cause != nil {
		ev.Error = cause.Error()
	}
	if _, err := r.a.AppendCustom(RunCustomType, ev); err != nil {
		return fmt.Errorf("record end of run %s: %w", r.ID, err)
	}
	r.phase, r.ended = PhaseEnd, true
	return nil
}

// RunPhaseMark is one recorded phase of a run.
type RunPhaseMark struct {
	Phase     RunPhase `json:"phase"`
	EntryID   string   `json:"entryId"`
	Timestamp string   `json:"timestamp"`
}

// RunSummary is a run read back from a transcript.
type RunSummary struct {
	RunID     string         `json:"runId"`
	SessionID string         `json:"sessionId"`
	StartedAt string         `json:"startedAt,omitempty"` // timestamp of the start entry
	EndedAt   string         `json:"endedAt,omitempty"`
	Ended     bool           `json:"ended"` // false: still running, or the process died
	Outcome   RunOutcome     `json:"outcome,omitempty"`
	Error     string         `json:"error,omitempty"`
	Phases    []RunPhaseMark `json:"phases"`
}

// RunsFromEntries reads the runs recorded in entries (of f; f.Entries for the whole file, or
// a path) in order of first appearance. Entries whose data is not a run event are skipped.
func RunsFromEntries(f *transcript.File, entries []*transcript.Entry) ([]RunSummary, error) {
	var out []RunSummary
	idx := map[string]int{}
	for _, e := range entries {
		if e.Type != "custom" || e.CustomType != RunCustomType {
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			return nil, fmt.Errorf("read entry %s: %w", e.ID, err)
		}
		var line struct {
			Data RunEvent `json:"data"`
		}
		if json.Unmarshal(raw, &line) != nil || line.Data.RunID == "" {
			continue
		}
		ev := line.Data
		i, ok := idx[ev.RunID]
		if !ok {
			i = len(out)
			idx[ev.RunID] = i
			out = append(out, RunSummary{RunID: ev.RunID, SessionID: ev.SessionID})
		}
		s := &out[i]
		s.Phases = append(s.Phases, RunPhaseMark{Phase: ev.Phase, EntryID: e.ID, Timestamp: e.Timestamp})
		switch ev.Phase {
		case PhaseStart:
			if s.StartedAt == "" {
				s.StartedAt = e.Timestamp
			}
		case PhaseEnd:
			s.Ended, s.EndedAt, s.Outcome, s.Error = true, e.Timestamp, ev.Outcome, ev.Error
		}
	}
	return out, nil
}

// RunsFromFile is RunsFromEntries over the whole file.
func RunsFromFile(f *transcript.File) ([]RunSummary, error) {
	return RunsFromEntries(f, f.Entries)
}
