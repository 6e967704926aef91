package chatstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// zone is UTC+2, so 04:00 local is 02:00 UTC: the boundary must follow the location.
var zone = time.FixedZone("UTC+2", 2*3600)

func local(day, hour, minute int) time.Time {
	return time.Date(2026, 5, day, hour, minute, 0, 0, zone)
}

func TestResetPolicyStale(t *testing.T) {
	daily := ResetPolicy{DailyAtHour: 4, IdleMinutes: 0, Location: zone}
	idle := ResetPolicy{DailyAtHour: -1, IdleMinutes: 60, Location: zone}
	tests := []struct {
		name      string
		p         ResetPolicy
		last, now time.Time
		want      string
	}{
		{"crosses 04:00", daily, local(1, 3, 59), local(1, 4, 1), ReasonDaily},
		{"just before 04:00", daily, local(1, 3, 0), local(1, 3, 59), ""},
		{"at 04:00 exactly", daily, local(1, 3, 59), local(1, 4, 0), ReasonDaily},
		{"after 04:00 same day", daily, local(1, 4, 1), local(1, 23, 0), ""},
		{"late night to early morning", daily, local(1, 23, 0), local(2, 3, 0), ""},
		{"next day after 04:00", daily, local(1, 23, 0), local(2, 5, 0), ReasonDaily},
		{"days later", daily, local(1, 10, 0), local(5, 10, 0), ReasonDaily},
		{"04:00 UTC is not the boundary", daily, local(1, 5, 0), time.Date(2026, 5, 1, 4, 30, 0, 0, time.UTC), ""},
		{"idle window elapsed", idle, local(1, 10, 0), local(1, 11, 0), ReasonIdle},
		{"inside idle window", idle, local(1, 10, 0), local(1, 10, 59), ""},
		{"idle wins when both", DefaultResetPolicy(), local(1, 3, 0), local(1, 5, 0), ReasonIdle},
		{"disabled", ResetPolicy{Disabled: true, DailyAtHour: 4, IdleMinutes: 1}, local(1, 1, 0), local(9, 1, 0), ""},
		{"no timestamp", daily, time.UnixMilli(0), local(1, 5, 0), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := tc.p.stale(tc.last.UnixMilli(), tc.now)
			if got != tc.want {
				t.Errorf("stale = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolveResets(t *testing.T) {
	tests := []struct {
		name   string
		policy ResetPolicy
		step   time.Duration // from the first interaction at 03:30 local
		fresh  bool
	}{
		{"daily boundary crossed", ResetPolicy{DailyAtHour: 4, Location: zone}, 45 * time.Minute, true},
		{"same day", ResetPolicy{DailyAtHour: 4, Location: zone}, 20 * time.Minute, false},
		{"idle window", ResetPolicy{DailyAtHour: -1, IdleMinutes: 60, Location: zone}, 61 * time.Minute, true},
		{"active", ResetPolicy{DailyAtHour: -1, IdleMinutes: 60, Location: zone}, 59 * time.Minute, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newClock(local(1, 3, 30))
			p := tc.policy
			s, err := Open(t.TempDir(), Options{Now: c.Now, NewID: ids("s"), Reset: &p})
			if err != nil {
				t.Fatal(err)
			}
			const key = "agent:main:telegram:group:-1"
			first, fresh, err := s.Resolve(ctx, key)
			if err != nil || !fresh || first.SessionID != "s-0001" || first.ChatType != "group" || first.LastInteractionAt != c.Now().UnixMilli() {
				t.Fatalf("first Resolve = %+v, %v, %v", first, fresh, err)
			}
			if _, err := s.Patch(ctx, key, map[string]any{"label": "team", "queueMode": "collect", "thinkingLevel": "high", "inputTokens": 500, "compactionCount": 2}); err != nil {
				t.Fatal(err)
			}
			const content = "{\"type\":\"session\",\"version\":3}\n{\"type\":\"message\"}\n"
			writeFile(t, first.SessionFile, content)

			c.Advance(tc.step)
			e, fresh, err := s.Resolve(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if fresh != tc.fresh {
				t.Fatalf("fresh = %v, want %v", fresh, tc.fresh)
			}
			if !fresh {
				if e.SessionID != first.SessionID || e.LastInteractionAt != c.Now().UnixMilli() || e.InputTokens != 500 {
					t.Errorf("kept entry = %+v", e)
				}
				if readFile(t, first.SessionFile) != content {
					t.Error("transcript changed")
				}
				return
			}
			if e.SessionID != "s-0002" || e.SessionFile != s.TranscriptPath("s-0002") || e.SessionStartedAt != c.Now().UnixMilli() {
				t.Errorf("new session = %+v", e)
			}
			if e.Label != "team" || e.QueueMode != "collect" || e.ThinkingLevel != "high" || e.ChatType != "group" {
				t.Errorf("user settings lost: %+v", e)
			}
			if e.InputTokens != 0 || e.CompactionCount != 0 {
				t.Errorf("counters kept: %+v", e)
			}
			archived := ArchiveName(first.SessionFile, "reset", c.Now())
			if got := readFile(t, archived); got != content {
				t.Errorf("archive %s = %q", archived, got)
			}
			if _, err := os.Stat(first.SessionFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("old transcript still at its path: %v", err)
			}
		})
	}
}

func TestExplicitReset(t *testing.T) {
	ctx := context.Background()
	c := newClock(t0)
	s := openTest(t, t.TempDir(), c)
	if _, err := s.Reset(ctx, "agent:main:main", ReasonNew); !errors.Is(err, ErrNotFound) {
		t.Errorf("reset of a missing key: %v", err)
	}
	e, err := s.Create(ctx, "agent:main:main", map[string]any{"displayName": "Me", "totalTokens": 9})
	if err != nil {
		t.Fatal(err)
	}
	// never created transcript: nothing to archive
	res, err := s.Reset(ctx, "agent:main:main", ReasonNew)
	if err != nil || res.Archived != "" || res.PreviousSessionID != e.SessionID || res.Entry.SessionID == e.SessionID ||
		res.Entry.DisplayName != "Me" || res.Entry.TotalTokens != 0 || res.Reason != ReasonNew {
		t.Fatalf("reset = %+v, %v", res, err)
	}
	// two resets in the same millisecond keep both archives
	writeFile(t, res.Entry.SessionFile, "one\n")
	r2, err := s.Reset(ctx, "agent:main:main", ReasonReset)
	if err != nil {
		t.Fatal(err)
	}
	if readFile(t, r2.Archived) != "one\n" {
		t.Errorf("archive %s", r2.Archived)
	}
	// a file already sitting at the archive name is never replaced
	writeFile(t, r2.Entry.SessionFile, "two\n")
	taken := ArchiveName(r2.Entry.SessionFile, "reset", c.Now())
	writeFile(t, taken, "precious\n")
	r3, err := s.Reset(ctx, "agent:main:main", ReasonReset)
	if err != nil {
		t.Fatal(err)
	}
	if r3.Archived != taken+"-1" || readFile(t, r3.Archived) != "two\n" || readFile(t, taken) != "precious\n" {
		t.Errorf("archive = %s", r3.Archived)
	}
}

func TestArchive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.jsonl")
	now := time.Date(2026, 1, 21, 12, 0, 0, 0, time.FixedZone("X", 3600))
	if _, err := Archive(path, "bak", now); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	writeFile(t, path, "data")
	if _, err := Archive(path, "trash", now); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad kind: %v", err)
	}
	got, err := Archive(path, "bak", now)
	if err != nil {
		t.Fatal(err)
	}
	if want := path + ".bak.2026-01-21T11-00-00.000Z"; got != want || readFile(t, got) != "data" {
		t.Errorf("Archive = %s, want %s", got, want)
	}
}
