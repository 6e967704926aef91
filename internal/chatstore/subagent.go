package chatstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/transcript"
)

// SubagentsFileName is the registry file in the subagents directory (state/subagents).
const SubagentsFileName = "runs.json"

// SubagentRunRecord is one spawned subagent run (the subagent run record of docs/conversations.md). Times are Unix
// milliseconds. Unknown members (upstream has more) are kept in Extra and on disk.
type SubagentRunRecord struct {
	RunID               string           `json:"runId"`
	ChildSessionKey     string           `json:"childSessionKey"`
	RequesterSessionKey string           `json:"requesterSessionKey"`
	RequesterOrigin     *DeliveryContext `json:"requesterOrigin,omitempty"`
	Task                string           `json:"task"`
	Cleanup             string           `json:"cleanup"` // delete | keep
	Label               string           `json:"label,omitempty"`
	CreatedAt           int64            `json:"createdAt"`
	StartedAt           int64            `json:"startedAt,omitempty"`
	EndedAt             int64            `json:"endedAt,omitempty"`
	Outcome             *SubagentOutcome `json:"outcome,omitempty"`
	ArchiveAtMs         int64            `json:"archiveAtMs,omitempty"`
	// ChildSessionID is the child conversation's session id (its transcript's), and
	// ToolCallID and ParentMessageID the sessions_spawn call that started the run and the
	// requester's reply holding it (none for a run started from the CLI): nexus's additions,
	// by which the history index links a child to its parent even once it is archived.
	ChildSessionID  string `json:"childSessionId,omitempty"`
	ToolCallID      string `json:"toolCallId,omitempty"`
	ParentMessageID string `json:"parentMessageId,omitempty"`

	Extra map[string]json.RawMessage `json:"-"`
}

// SubagentOutcome is how a subagent run ended.
type SubagentOutcome struct {
	Status RunOutcome `json:"status"` // ok | error | timeout
	Error  string     `json:"error,omitempty"`
}

var subagentKnown = []string{"runId", "childSessionKey", "requesterSessionKey", "requesterOrigin", "task",
	"cleanup", "label", "createdAt", "startedAt", "endedAt", "outcome", "archiveAtMs", "childSessionId", "toolCallId", "parentMessageId"}

// MarshalJSON writes the known fields and Extra.
func (r SubagentRunRecord) MarshalJSON() ([]byte, error) {
	type plain SubagentRunRecord
	b, err := transcript.Marshal(plain(r))
	if err != nil {
		return nil, err
	}
	if len(r.Extra) == 0 {
		return b, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	for k, v := range r.Extra {
		if !slices.Contains(subagentKnown, k) {
			obj[k] = v
		}
	}
	return encodeObject(obj), nil
}

// UnmarshalJSON decodes the known fields; other members go to Extra.
func (r *SubagentRunRecord) UnmarshalJSON(b []byte) error {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return err
	}
	out, err := decodeSubagent(rec)
	if err != nil {
		return err
	}
	*r = out
	return nil
}

func decodeSubagent(rec record) (SubagentRunRecord, error) {
	type plain SubagentRunRecord
	var p plain
	known := record{}
	var r SubagentRunRecord
	for k, v := range rec {
		if slices.Contains(subagentKnown, k) {
			known[k] = v
			continue
		}
		if r.Extra == nil {
			r.Extra = map[string]json.RawMessage{}
		}
		r.Extra[k] = v
	}
	b, err := transcript.Marshal(known)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return r, fmt.Errorf("%w subagent run record: %w", ErrInvalid, err)
	}
	extra := r.Extra
	r = SubagentRunRecord(p)
	r.Extra = extra
	return r, nil
}

func (r SubagentRunRecord) validate() error {
	var problems []string
	if r.RunID == "" {
		problems = append(problems, "runId is empty")
	}
	if r.ChildSessionKey == "" {
		problems = append(problems, "childSessionKey is empty")
	}
	if r.RequesterSessionKey == "" {
		problems = append(problems, "requesterSessionKey is empty")
	}
	if r.Cleanup != "delete" && r.Cleanup != "keep" {
		problems = append(problems, fmt.Sprintf("cleanup %q (want delete or keep)", r.Cleanup))
	}
	if r.CreatedAt <= 0 {
		problems = append(problems, "createdAt is not set")
	}
	if o := r.Outcome; o != nil && o.Status != OutcomeOK && o.Status != OutcomeError && o.Status != OutcomeTimeout {
		problems = append(problems, fmt.Sprintf("outcome.status %q (want ok, error or timeout)", o.Status))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w subagent run %q: %s", ErrInvalid, r.RunID, strings.Join(problems, "; "))
	}
	return nil
}

// Subagents is the registry state/subagents/runs.json: {"version":1,"runs":{runId: record}},
// written like sessions.json (flock, patches, temp file, fsync, rename, directory fsync).
type Subagents struct {
	t   *table
	now func() time.Time
}

// OpenSubagents returns the registry in dir (state/subagents), creating dir (0700).
// now (nil: time.Now) fills createdAt when Put gets none.
func OpenSubagents(dir string, now func() time.Time) (*Subagents, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("subagents directory %s: %w", dir, err)
	}
	if err := fsutil.MkdirPrivate(abs); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	t := newTable(filepath.Join(abs, SubagentsFileName), "runs", []string{"runId"})
	t.wrapV = json.RawMessage("1")
	return &Subagents{t: t, now: now}, nil
}

// Path is the runs.json path.
func (g *Subagents) Path() string { return g.t.path }

// Put adds a run record; a record with the same runId must not exist.
func (g *Subagents) Put(ctx context.Context, rec SubagentRunRecord) error {
	return g.PutChecked(ctx, rec, nil)
}

// PutChecked adds a run record if check, given every record of the registry as it is, returns
// nil. The check and the write are one transaction under the registry's lock (this process's
// and the file's), so callers that check a limit at the same time cannot all pass it. An
// error of check is returned as it is, and nothing is written.
func (g *Subagents) PutChecked(ctx context.Context, rec SubagentRunRecord, check func(runs []SubagentRunRecord) error) error {
	if rec.CreatedAt == 0 {
		rec.CreatedAt = g.now().UnixMilli()
	}
	if err := rec.validate(); err != nil {
		return err
	}
	b, err := transcript.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode subagent run %s: %w", rec.RunID, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("encode subagent run %s: %w", rec.RunID, err)
	}
	var refused error
	err = g.t.update(ctx, func(x *tx) error {
		if _, ok := x.get(rec.RunID); ok {
			return fmt.Errorf("%w: subagent run %s", ErrExists, rec.RunID)
		}
		if check != nil {
			runs := make([]SubagentRunRecord, 0, len(x.recs))
			for _, cur := range x.recs {
				if d, err := decodeSubagent(cur); err == nil {
					runs = append(runs, d)
				}
			}
			if refused = check(runs); refused != nil {
				return refused
			}
		}
		g.stampVersion(x)
		x.put(rec.RunID, r)
		return nil
	})
	if refused != nil && errors.Is(err, refused) {
		return refused
	}
	if err != nil {
		return fmt.Errorf("put subagent run %s: %w", rec.RunID, err)
	}
	return nil
}

func (g *Subagents) stampVersion(x *tx) {
	if _, ok := x.top["version"]; ok {
		return
	}
	top := make(map[string]json.RawMessage, len(x.top)+1)
	for k, v := range x.top {
		top[k] = v
	}
	top["version"] = g.t.wrapV
	x.top = top
}

// Patch applies a merge patch to the record of runID (runId itself cannot change) and returns
// the result, which must still be a valid record.
func (g *Subagents) Patch(ctx context.Context, runID string, patch any) (SubagentRunRecord, error) {
	pobj, err := patchObject(patch)
	if err != nil {
		return SubagentRunRecord{}, err
	}
	if v, ok := pobj["runId"]; ok {
		var id string
		if !decString(v, &id) || id != runID {
			return SubagentRunRecord{}, fmt.Errorf("%w: runId cannot change", ErrInvalid)
		}
	}
	var out SubagentRunRecord
	err = g.t.update(ctx, func(x *tx) error {
		cur, ok := x.get(runID)
		if !ok {
			return fmt.Errorf("%w: subagent run %s", ErrNotFound, runID)
		}
		r := cur.clone()
		if err := mergeMembers(r, pobj); err != nil {
			return err
		}
		rec, err := decodeSubagent(r)
		if err != nil {
			return err
		}
		if err := rec.validate(); err != nil {
			return err
		}
		g.stampVersion(x)
		x.put(runID, r)
		out = rec
		return nil
	})
	if err != nil {
		return SubagentRunRecord{}, fmt.Errorf("patch subagent run %s: %w", runID, err)
	}
	return out, nil
}

// Get returns the record of runID.
func (g *Subagents) Get(runID string) (SubagentRunRecord, error) {
	snap, err := g.t.load()
	if err != nil {
		return SubagentRunRecord{}, err
	}
	r, ok := snap.recs[runID]
	if !ok {
		return SubagentRunRecord{}, fmt.Errorf("%w: subagent run %s", ErrNotFound, runID)
	}
	return decodeSubagent(r)
}

// SubagentFilter selects records for List; zero fields match everything.
type SubagentFilter struct {
	RequesterSessionKey string
	ChildSessionKey     string
	// Active keeps runs without endedAt.
	Active bool
}

// List returns the matching records, newest (createdAt) first. Records that do not decode are
// skipped.
func (g *Subagents) List(f SubagentFilter) ([]SubagentRunRecord, error) {
	snap, err := g.t.load()
	if err != nil {
		return nil, err
	}
	runs := make([]SubagentRunRecord, 0, len(snap.recs))
	for _, r := range snap.recs {
		if rec, err := decodeSubagent(r); err == nil {
			runs = append(runs, rec)
		}
	}
	return FilterRuns(runs, f), nil
}

// Delete removes the record of runID (the child session and its transcript are not touched).
func (g *Subagents) Delete(ctx context.Context, runID string) error {
	err := g.t.update(ctx, func(x *tx) error {
		if _, ok := x.get(runID); !ok {
			return fmt.Errorf("%w: subagent run %s", ErrNotFound, runID)
		}
		x.del(runID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete subagent run %s: %w", runID, err)
	}
	return nil
}
