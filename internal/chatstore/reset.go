package chatstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/transcript"
)

// ResetPolicy decides when Resolve starts a new session for a key (docs/conversations.md, Session keys).
type ResetPolicy struct {
	// Disabled turns automatic resets off (explicit Reset still works).
	Disabled bool
	// DailyAtHour is the local hour (0-23) of the daily reset; negative: no daily reset.
	DailyAtHour int
	// IdleMinutes is the idle window; 0 or negative: no idle reset.
	IdleMinutes int
	// Location is the time zone of DailyAtHour (default time.Local).
	Location *time.Location
}

// DefaultResetPolicy resets daily at 04:00 local time and after 60 idle minutes.
func DefaultResetPolicy() ResetPolicy {
	return ResetPolicy{DailyAtHour: 4, IdleMinutes: 60}
}

// Reset reasons.
const (
	ReasonDaily = "daily"
	ReasonIdle  = "idle"
	ReasonNew   = "new"   // the /new command
	ReasonReset = "reset" // the /reset command
)

// stale says whether an entry last active at lastMs must be reset at now, and why.
func (p ResetPolicy) stale(lastMs int64, now time.Time) (string, bool) {
	if p.Disabled || lastMs <= 0 {
		return "", false
	}
	last := time.UnixMilli(lastMs)
	if p.IdleMinutes > 0 && now.Sub(last) >= time.Duration(p.IdleMinutes)*time.Minute {
		return ReasonIdle, true
	}
	if p.DailyAtHour >= 0 && p.DailyAtHour < 24 {
		loc := p.Location
		if loc == nil {
			loc = time.Local
		}
		n := now.In(loc)
		boundary := time.Date(n.Year(), n.Month(), n.Day(), p.DailyAtHour, 0, 0, 0, loc)
		if boundary.After(n) {
			boundary = time.Date(n.Year(), n.Month(), n.Day()-1, p.DailyAtHour, 0, 0, 0, loc)
		}
		if last.Before(boundary) {
			return ReasonDaily, true
		}
	}
	return "", false
}

// Resolve returns the current session of key for an incoming interaction and records it
// (lastInteractionAt). It mints a new session (fresh = true) when the key has none, or when
// the policy says the current one is over: the daily boundary passed since its last
// interaction (updatedAt when never interacted) or the idle window elapsed. A reset archives
// the old transcript as with Reset. Use Get for a read that changes nothing.
func (s *Store) Resolve(ctx context.Context, key string) (entry SessionEntry, fresh bool, err error) {
	err = s.t.update(ctx, func(x *tx) error {
		c, err := canon(key, x.recs)
		if err != nil {
			return err
		}
		now := s.now()
		ms := now.UnixMilli()
		touch := map[string]json.RawMessage{"lastInteractionAt": mustMarshal(ms)}
		cur, ok := x.get(c)
		if !ok {
			k, err := ParseKey(c)
			if err != nil {
				return err
			}
			r, err := s.applyPatch(x, c, s.fresh(k, ms), touch, ms)
			if err != nil {
				return err
			}
			entry, fresh = decodeEntry(r), true
			return nil
		}
		e := decodeEntry(cur)
		last := e.LastInteractionAt
		if last == 0 {
			last = e.UpdatedAt
		}
		if reason, over := s.reset.stale(last, now); over {
			r, _, err := s.resetIn(x, c, cur, reason)
			if err != nil {
				return err
			}
			entry, fresh = decodeEntry(r), true
			return nil
		}
		r, err := s.applyPatch(x, c, cur, touch, ms)
		if err != nil {
			return err
		}
		entry = decodeEntry(r)
		return nil
	})
	if err != nil {
		return SessionEntry{}, false, fmt.Errorf("resolve session %s: %w", key, err)
	}
	return entry, fresh, nil
}

// ResetResult describes an explicit reset.
type ResetResult struct {
	Entry             SessionEntry `json:"entry"`
	PreviousSessionID string       `json:"previousSessionId"`
	// Archived is the old transcript's new path ("" when it had not been created).
	Archived string `json:"archived,omitempty"`
	Reason   string `json:"reason"`
}

// cleared are the members a reset drops: they describe the old session, not the key.
// User settings (label, displayName, queueMode, thinkingLevel, model, origin, ...) stay.
var cleared = []string{
	"inputTokens", "outputTokens", "totalTokens", "contextTokensUsed", "compactionCount",
	"systemPromptReport", "skillsSnapshot", "forkedFromSessionId", "forkedFromTurnId",
	"hasChildren", "abortedLastRun",
}

// Reset starts a new session for key (the /new and /reset commands; reason is free text, such
// as ReasonNew): a new sessionId and transcript path, sessionStartedAt now, token counters
// cleared. The old transcript, if it exists, is renamed to <file>.reset.<ts>, never deleted.
func (s *Store) Reset(ctx context.Context, key, reason string) (ResetResult, error) {
	var res ResetResult
	err := s.t.update(ctx, func(x *tx) error {
		c, cur, err := x.existing(key)
		if err != nil {
			return err
		}
		var prev string
		_ = decString(cur["sessionId"], &prev)
		r, archived, err := s.resetIn(x, c, cur, reason)
		if err != nil {
			return err
		}
		res = ResetResult{Entry: decodeEntry(r), PreviousSessionID: prev, Archived: archived, Reason: reason}
		return nil
	})
	if err != nil {
		return ResetResult{}, fmt.Errorf("reset session %s: %w", key, err)
	}
	return res, nil
}

func (s *Store) resetIn(x *tx, key string, cur record, reason string) (record, string, error) {
	archived, err := s.archiveTranscript(x, cur, "reset")
	if err != nil {
		return nil, "", err
	}
	now := s.now().UnixMilli()
	id := s.newID()
	patch := map[string]json.RawMessage{
		"sessionId":         mustMarshal(id),
		"sessionFile":       mustMarshal(s.TranscriptPath(id)),
		"sessionStartedAt":  mustMarshal(now),
		"lastInteractionAt": mustMarshal(now),
	}
	for _, m := range cleared {
		if _, ok := cur[m]; ok {
			patch[m] = json.RawMessage("null")
		}
	}
	_ = reason // recorded by the caller (ResetResult); the entry format has no member for it
	r, err := s.applyPatch(x, key, cur, patch, now)
	if err != nil {
		return nil, "", err
	}
	return r, archived, nil
}

// ArchiveKinds are the archive suffixes docs/conversations.md names.
var ArchiveKinds = []string{"bak", "reset", "deleted"}

// ArchiveName is path + "." + kind + "." + the UTC time in ISO-8601 with ':' replaced by '-'
// (upstream's archiveFileOnDisk naming, e.g. x.jsonl.reset.2026-01-21T12-00-00.000Z).
func ArchiveName(path, kind string, now time.Time) string {
	return transcript.ArchiveName(path, kind, now)
}

// Archive renames path to ArchiveName(path, kind, now) (kind: bak, reset or deleted) and
// returns the new path. It never replaces an existing file: when the name is taken a counter
// is appended (-1, -2, ...). The directory is fsynced.
func Archive(path, kind string, now time.Time) (string, error) {
	if !slices.Contains(ArchiveKinds, kind) {
		return "", fmt.Errorf("%w: archive kind %q (want bak, reset or deleted)", ErrInvalid, kind)
	}
	return archive(path, kind, now)
}

func archive(path, kind string, now time.Time) (string, error) {
	if _, err := os.Lstat(path); err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	base := ArchiveName(path, kind, now)
	target := base
	for i := 1; ; i++ {
		err := renameNoReplace(path, target)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || i > 1000 {
			return "", fmt.Errorf("archive %s: %w", path, err)
		}
		target = fmt.Sprintf("%s-%d", base, i)
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		return target, err
	}
	return target, nil
}

// renameNoReplace renames old to new, failing with an os.ErrExist error when new exists.
func renameNoReplace(oldPath, newPath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldPath, unix.AT_FDCWD, newPath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		// file systems without RENAME_NOREPLACE: link fails on an existing name too
		if err := os.Link(oldPath, newPath); err != nil {
			return err //nolint:wrapcheck // *LinkError names both paths
		}
		return os.Remove(oldPath)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldPath, New: newPath, Err: err}
	}
	return nil
}
