package chatstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// SubagentRuns is the registry of subagent runs as the ai-chat kind uses it: runs.json on one
// node (Subagents), the cluster's bucket on JetStream (jetstore.Runs). Either keeps PutChecked's
// check and write one step: of callers checking a cap at once, from any node, they never pass
// it together.
type SubagentRuns interface {
	// PutChecked adds a run record (its runId new) if check, given every record, returns nil;
	// check's error is returned as it is.
	PutChecked(ctx context.Context, rec SubagentRunRecord, check func(runs []SubagentRunRecord) error) error
	// Patch applies a merge patch to the record of runID and returns the result.
	Patch(ctx context.Context, runID string, patch any) (SubagentRunRecord, error)
	// List returns the matching records, newest first.
	List(f SubagentFilter) ([]SubagentRunRecord, error)
}

var _ SubagentRuns = (*Subagents)(nil)

// PrepareRun fills a new record's createdAt (from now when unset) and checks it, as Put does.
func PrepareRun(rec SubagentRunRecord, now time.Time) (SubagentRunRecord, error) {
	if rec.CreatedAt == 0 {
		rec.CreatedAt = now.UnixMilli()
	}
	return rec, rec.validate()
}

// PatchRun applies a merge patch to rec (runId itself cannot change) and returns the result,
// which must still be a valid record, as Patch does.
func PatchRun(rec SubagentRunRecord, patch any) (SubagentRunRecord, error) {
	pobj, err := patchObject(patch)
	if err != nil {
		return SubagentRunRecord{}, err
	}
	if v, ok := pobj["runId"]; ok {
		var id string
		if !decString(v, &id) || id != rec.RunID {
			return SubagentRunRecord{}, fmt.Errorf("%w: runId cannot change", ErrInvalid)
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return SubagentRunRecord{}, fmt.Errorf("encode subagent run %s: %w", rec.RunID, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return SubagentRunRecord{}, fmt.Errorf("encode subagent run %s: %w", rec.RunID, err)
	}
	if err := mergeMembers(r, pobj); err != nil {
		return SubagentRunRecord{}, err
	}
	out, err := decodeSubagent(r)
	if err != nil {
		return SubagentRunRecord{}, err
	}
	return out, out.validate()
}

// FilterRuns keeps the runs f matches, newest (createdAt) first, as List does.
func FilterRuns(runs []SubagentRunRecord, f SubagentFilter) []SubagentRunRecord {
	out := make([]SubagentRunRecord, 0, len(runs))
	for _, rec := range runs {
		if f.RequesterSessionKey != "" && rec.RequesterSessionKey != f.RequesterSessionKey ||
			f.ChildSessionKey != "" && rec.ChildSessionKey != f.ChildSessionKey ||
			f.Active && rec.EndedAt != 0 {
			continue
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b SubagentRunRecord) int {
		if a.CreatedAt != b.CreatedAt {
			if a.CreatedAt > b.CreatedAt {
				return -1
			}
			return 1
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	return out
}
