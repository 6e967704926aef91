// Package trigger runs what starts a conversation's turn without anyone typing
// (docs/triggers.md): cron jobs (a cron expression), heartbeats (every N minutes into a
// session) and webhooks (POST /v1/hooks/{id} with the hook's own secret). They are kept in a
// JobStore: on one node state/triggers/triggers.db (SQLite, synchronous=FULL), in a cluster a
// store every node shares (internal/triggerkv). They are fired by the gateway, and each firing
// is a message with an id derived from its job and scheduled time, so a firing retried after a
// crash is stored once. What a stopped gateway missed is handled by the job's missed-run policy.
package trigger

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// Job kinds.
const (
	KindCron      = "cron"
	KindHeartbeat = "heartbeat"
)

// Missed-run policies: what a job does about the runs it missed while no gateway ran.
const (
	// MissedOnce (the default) fires once for all of them, as soon as the gateway is back,
	// saying how many were missed; never a burst of them.
	MissedOnce = "once"
	// MissedSkip fires none of them and waits for the next scheduled time.
	MissedSkip = "skip"
)

// Target says where a trigger's message goes and how a new conversation is opened (the wire
// type of /v1/cron and /v1/hooks, as Job and Hook are).
type Target = abi.TriggerTarget

// Job is a cron job or a heartbeat.
type Job = abi.CronJob

// Hook is a webhook: POST /v1/hooks/{id} with its secret delivers the body as a message.
type Hook = abi.Hook

// Store is state/triggers/triggers.db.
type Store struct {
	db  *sql.DB
	now func() time.Time
}

// Path is state/triggers/triggers.db.
func Path(stateDir string) string { return filepath.Join(stateDir, "triggers", "triggers.db") }

// OpenStore opens (creating) the store: the file 0600 in a 0700 directory, symlinks refused.
func OpenStore(ctx context.Context, path string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	if err := fsutil.PrepareDB(path); err != nil {
		if errors.Is(err, fsutil.ErrNotRegular) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "triggers: %v", err)
		}
		return nil, fmt.Errorf("triggers: %w", err)
	}
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(30000)&_pragma=synchronous(FULL)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("triggers: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, doc TEXT NOT NULL);
		CREATE TABLE IF NOT EXISTS hooks (id TEXT PRIMARY KEY, secret TEXT NOT NULL, doc TEXT NOT NULL);
		CREATE TABLE IF NOT EXISTS seen (hook TEXT NOT NULL, sig TEXT NOT NULL, expires INTEGER NOT NULL, PRIMARY KEY (hook, sig));`); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("triggers: schema: %w", err)
	}
	return &Store{db: db, now: now}, nil
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("triggers: close: %w", err)
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// MaxMessage bounds a job's message (64 KiB; a webhook's body has the queue's 1 MiB).
const MaxMessage = 64 << 10

func checkTarget(t Target) error {
	if t.Mode != "" {
		switch t.Mode {
		case "steer", "followup", "collect", "steer-backlog", "queue", "interrupt", "reject", "rollback":
		default:
			return abi.Errorf(abi.CodeInvalidArgument, "", "unknown queue mode %q (want steer, followup, collect, steer-backlog, queue, interrupt, reject or rollback)", t.Mode)
		}
	}
	if t.Level != "" && t.Level != "yolo" && t.Level != "trusted" && t.Level != "sandboxed" {
		return abi.Errorf(abi.CodeInvalidArgument, "", "unknown level %q (want yolo, trusted or sandboxed)", t.Level)
	}
	if t.Workspace != "" && !filepath.IsAbs(t.Workspace) {
		return abi.Errorf(abi.CodeInvalidArgument, "", "workspace %q must be an absolute path", t.Workspace)
	}
	// The conversation is named now, not at the first firing: a key that cannot be one would
	// otherwise be accepted and fail at every run.
	if t.SessionKey != "" {
		if err := checkKey(t.SessionKey); err != nil {
			return err
		}
	}
	return nil
}

// checkKey refuses a conversation key that delivery would refuse.
func checkKey(key string) error {
	if _, err := chatstore.ParseKey(key); err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "", "session: %v", err)
	}
	return nil
}

// PrepareJob validates a job about to be stored at now, as every JobStore's AddJob does: an
// empty id gets a generated one, its kind and defaults are set and its record of runs cleared.
// floor is the shortest interval between two firings the job may have (DefaultMinInterval
// when 0).
func PrepareJob(j Job, floor time.Duration, now time.Time) (Job, error) {
	if floor <= 0 {
		floor = DefaultMinInterval
	}
	j.Message = strings.TrimSpace(j.Message)
	switch {
	case j.ID != "" && !idPattern.MatchString(j.ID):
		return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "job id %q: use 1 to 64 of a-z, 0-9, - and _", j.ID)
	case j.Message == "":
		return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "a job needs a message")
	case len(j.Message) > MaxMessage:
		return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "a job's message of %d bytes is over the limit of %d", len(j.Message), MaxMessage)
	case (j.Schedule == "") == (j.EveryMs <= 0):
		return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "a job needs a cron schedule or an interval (every), not both")
	}
	if j.Missed == "" {
		j.Missed = MissedOnce
	}
	if j.Missed != MissedOnce && j.Missed != MissedSkip {
		return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "missed-run policy %q: want once or skip", j.Missed)
	}
	if err := checkTarget(j.TriggerTarget); err != nil {
		return Job{}, err
	}
	if j.Schedule != "" {
		j.Kind = KindCron
		sch, err := parseSchedule(j.Schedule)
		if err != nil {
			return Job{}, err
		}
		if gap, at, ok := shortestGap(sch, now, floor); !ok {
			return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "a cron job must fire at least %s apart (the gateway's floor, nexus serve --min-trigger-interval); %q fires %s apart at %s",
				floor, j.Schedule, gap, abi.FormatTime(at))
		}
	} else {
		j.Kind = KindHeartbeat
		if time.Duration(j.EveryMs)*time.Millisecond < floor {
			return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "a heartbeat's interval must be at least %s (the gateway's floor, nexus serve --min-trigger-interval)", floor)
		}
		if j.SessionKey == "" {
			return Job{}, abi.Errorf(abi.CodeInvalidArgument, "", "a heartbeat needs the session it wakes (--session KEY)")
		}
	}
	if j.ID == "" {
		j.ID = newID("")
	}
	if err := checkKey(jobKey(j)); err != nil { // a cron job's own conversation, from its agent
		return Job{}, err
	}
	j.CreatedAt = now.UnixMilli()
	j.LastRunAt, j.LastFiredAt, j.LastMessageID, j.LastError, j.Runs, j.NextRunAt = 0, 0, "", "", 0, 0
	return j, nil
}

// AddJob validates and stores a job (PrepareJob).
func (s *Store) AddJob(ctx context.Context, j Job, floor time.Duration) (Job, error) {
	j, err := PrepareJob(j, floor, s.now())
	if err != nil {
		return Job{}, err
	}
	doc, err := json.Marshal(j)
	if err != nil {
		return Job{}, fmt.Errorf("triggers: %w", err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO jobs (id, doc) VALUES (?, ?)`, j.ID, string(doc))
	if err != nil {
		return Job{}, fmt.Errorf("triggers: add job: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Job{}, JobExists(j.ID)
	}
	return j, nil
}

// Jobs lists the jobs by id.
func (s *Store) Jobs(ctx context.Context) ([]Job, error) {
	return listDocs[Job](ctx, s.db, `SELECT doc FROM jobs ORDER BY id`, "job")
}

// listDocs decodes the JSON documents a query returns.
func listDocs[T any](ctx context.Context, db *sql.DB, query, what string) ([]T, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []T
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("triggers: %w", err)
		}
		var v T
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			return nil, fmt.Errorf("triggers: a stored %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("triggers: %w", err)
	}
	return out, nil
}

// Job returns one job.
func (s *Store) Job(ctx context.Context, id string) (Job, error) {
	var doc string
	err := s.db.QueryRowContext(ctx, `SELECT doc FROM jobs WHERE id = ?`, id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return Job{}, NoJob(id)
	}
	if err != nil {
		return Job{}, fmt.Errorf("triggers: %w", err)
	}
	var j Job
	if err := json.Unmarshal([]byte(doc), &j); err != nil {
		return Job{}, fmt.Errorf("triggers: job %s: %w", id, err)
	}
	return j, nil
}

// RemoveJob deletes a job.
func (s *Store) RemoveJob(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM jobs WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("triggers: remove job: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return NoJob(id)
	}
	return nil
}

// RecordRun stores the outcome of one of a job's runs. The job is read and written in one
// transaction (begun immediate: it holds the write lock), so that runs recorded at once — the
// scheduler's and nexus cron run's, or two gateways' on one file — are all counted.
func (s *Store) RecordRun(ctx context.Context, id string, r Run) error {
	return s.update(ctx, `SELECT doc FROM jobs WHERE id = ?`, `UPDATE jobs SET doc = ? WHERE id = ?`, id, func(doc []byte) ([]byte, error) {
		var j Job
		if err := json.Unmarshal(doc, &j); err != nil {
			return nil, fmt.Errorf("triggers: job %s: %w", id, err)
		}
		return json.Marshal(r.Apply(j, s.now()))
	}, NoJob(id))
}

// update rewrites the document that sel reads for id with change, in one transaction; none
// is missing.
func (s *Store) update(ctx context.Context, sel, upd, id string, change func([]byte) ([]byte, error), none error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("triggers: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var doc string
	err = tx.QueryRowContext(ctx, sel, id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return none
	}
	if err != nil {
		return fmt.Errorf("triggers: %w", err)
	}
	b, err := change([]byte(doc))
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, upd, string(b), id); err != nil {
		return fmt.Errorf("triggers: update %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("triggers: update %s: %w", id, err)
	}
	return nil
}

// PrepareHook validates a hook about to be stored at now, as every JobStore's AddHook does,
// and makes its secret: an empty id gets a generated one; the hook comes back without its
// secret, its record of calls cleared.
func PrepareHook(h Hook, now time.Time) (Hook, string, error) {
	if h.ID != "" && !idPattern.MatchString(h.ID) {
		return Hook{}, "", abi.Errorf(abi.CodeInvalidArgument, "", "hook id %q: use 1 to 64 of a-z, 0-9, - and _", h.ID)
	}
	if err := checkTarget(h.TriggerTarget); err != nil {
		return Hook{}, "", err
	}
	if _, err := chatstore.ParseDMScope(h.DMScope); err != nil {
		return Hook{}, "", abi.Errorf(abi.CodeInvalidArgument, "", "--dm-scope: %v", err)
	}
	if h.ID == "" {
		h.ID = newID("")
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	h.CreatedAt, h.LastCalledAt, h.Calls, h.Secret = now.UnixMilli(), 0, 0, ""
	return h, "whsec_" + hex.EncodeToString(b[:]), nil
}

// AddHook stores a webhook with a new secret, returned once in the answer's Secret.
func (s *Store) AddHook(ctx context.Context, h Hook) (Hook, error) {
	h, secret, err := PrepareHook(h, s.now())
	if err != nil {
		return Hook{}, err
	}
	doc, err := json.Marshal(h) //nolint:gosec // Secret was just cleared: the secret has its own column, never the document
	if err != nil {
		return Hook{}, fmt.Errorf("triggers: %w", err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO hooks (id, secret, doc) VALUES (?, ?, ?)`, h.ID, secret, string(doc))
	if err != nil {
		return Hook{}, fmt.Errorf("triggers: add hook: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Hook{}, HookExists(h.ID)
	}
	h.Secret = secret
	return h, nil
}

// Hooks lists the hooks (without their secrets).
func (s *Store) Hooks(ctx context.Context) ([]Hook, error) {
	return listDocs[Hook](ctx, s.db, `SELECT doc FROM hooks ORDER BY id`, "hook")
}

// Hook returns a hook with its secret; ok is false when there is none.
func (s *Store) Hook(ctx context.Context, id string) (Hook, string, bool, error) {
	var doc, secret string
	err := s.db.QueryRowContext(ctx, `SELECT doc, secret FROM hooks WHERE id = ?`, id).Scan(&doc, &secret)
	if errors.Is(err, sql.ErrNoRows) {
		return Hook{}, "", false, nil
	}
	if err != nil {
		return Hook{}, "", false, fmt.Errorf("triggers: %w", err)
	}
	var h Hook
	if err := json.Unmarshal([]byte(doc), &h); err != nil {
		return Hook{}, "", false, fmt.Errorf("triggers: hook %s: %w", id, err)
	}
	return h, secret, true, nil
}

// HookCalled counts a call of hook id (in one transaction, as RecordRun).
func (s *Store) HookCalled(ctx context.Context, id string) error {
	return s.update(ctx, `SELECT doc FROM hooks WHERE id = ?`, `UPDATE hooks SET doc = ? WHERE id = ?`, id, func(doc []byte) ([]byte, error) {
		var h Hook
		if err := json.Unmarshal(doc, &h); err != nil {
			return nil, fmt.Errorf("triggers: hook %s: %w", id, err)
		}
		h.LastCalledAt = s.now().UnixMilli()
		h.Calls++
		h.Secret = ""
		return json.Marshal(h) //nolint:gosec // Secret was just cleared: the secret has its own column, never the document
	}, nil)
}

// RemoveHook deletes a hook: its secret stops working at once.
func (s *Store) RemoveHook(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM hooks WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("triggers: remove hook: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return NoHook(id)
	}
	if _, err := s.db.ExecContext(ctx, `DELETE FROM seen WHERE hook = ?`, id); err != nil {
		return fmt.Errorf("triggers: remove hook: %w", err)
	}
	return nil
}

// ClaimSignature records the signature sig of a call to hook until expires; false when it was
// recorded already (the request is a replay). What has expired is dropped first, so the
// table holds only what a replay could still use.
func (s *Store) ClaimSignature(ctx context.Context, hook, sig string, expires time.Time) (bool, error) {
	now := s.now().UnixMilli()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM seen WHERE expires <= ?`, now); err != nil {
		return false, fmt.Errorf("triggers: %w", err)
	}
	res, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO seen (hook, sig, expires) VALUES (?, ?, ?)`, hook, sig, expires.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("triggers: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("triggers: %w", err)
	}
	return n == 1, nil
}

// UnclaimSignature forgets a signature whose call delivered nothing, so the sender's retry works.
func (s *Store) UnclaimSignature(ctx context.Context, hook, sig string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM seen WHERE hook = ? AND sig = ?`, hook, sig); err != nil {
		return fmt.Errorf("triggers: %w", err)
	}
	return nil
}
