// Package broker is the durable message queue of conversations (docs/ai-chat.md, Queue modes):
// state/broker/queues.db, SQLite in WAL mode with synchronous=FULL, so a message is on disk
// before it is acknowledged and survives kill -9 and a power loss. Each message belongs to a
// conversation (its session key), is delivered at most once into the transcript (the
// transcript entry carries the message's id, so a delivery interrupted between the transcript
// and this store is recognized after a restart), and is never removed without a trace: a
// message cleared by an interrupt, or dropped by a collect cap, stays with its state and reason.
package broker

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// Mode is how a message reaches a conversation that is busy.
type Mode string

// Queue modes (seed 003), with the spellings upstream uses accepted by ParseMode.
const (
	// Steer aborts the running turn and starts a new one with this message; messages already
	// queued stay queued, after it.
	Steer Mode = "steer"
	// Followup waits for the running turn to end; each followup is a turn of its own.
	Followup Mode = "followup"
	// Collect buffers messages until none has come for the debounce, then delivers them
	// together in one turn (at most the cap; beyond it the drop policy applies).
	Collect Mode = "collect"
	// SteerBacklog steers the running turn like Steer when one runs (the caller says so:
	// EnqueueOptions.Steer); with nothing to steer it waits in the backlog like a followup.
	// Either way it is one message, delivered once.
	SteerBacklog Mode = "steer-backlog"
	// Queue is plain FIFO: one turn per message, never interrupting.
	Queue Mode = "queue"
	// Interrupt clears the queue (the cleared messages are kept as cleared), aborts the
	// running turn and starts a new one with this message.
	Interrupt Mode = "interrupt"
	// Reject refuses the message while the conversation is busy (a turn runs, or messages
	// wait): the caller checks the running turn, the store the waiting messages
	// (EnqueueOptions.IfIdle).
	Reject Mode = "reject"
	// Rollback aborts the running turn and runs in its place: its user message is a child of
	// the entry before the aborted turn (EnqueueOptions.RollsBack names a message that turn
	// delivers), which stays in the transcript as an abandoned branch.
	Rollback Mode = "rollback"
)

// ParseMode reads a mode name; "" is the default, followup.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return Followup, nil
	case Steer, Followup, Collect, SteerBacklog, Queue, Interrupt, Reject, Rollback:
		return m, nil
	case "follow-up", "follow_up":
		return Followup, nil
	case "steer+backlog", "steer_backlog", "steerbacklog":
		return SteerBacklog, nil
	}
	return "", abi.Errorf(abi.CodeInvalidArgument, "", "unknown queue mode %q (want %s)", s, ModeNames)
}

// ModeNames lists the modes for messages and help texts.
const ModeNames = "steer, followup, collect, steer-backlog, queue, interrupt, reject or rollback"

// Modes are the modes' canonical names, in ModeNames' order.
var Modes = []string{"steer", "followup", "collect", "steer-backlog", "queue", "interrupt", "reject", "rollback"}

// Aborts reports whether a message of the mode always aborts the running turn (steer-backlog
// does when its caller says a turn runs).
func (m Mode) Aborts() bool { return m == Steer || m == Interrupt || m == Rollback }

// Message states.
const (
	StateQueued    = "queued"
	StateDelivered = "delivered"
	StateCleared   = "cleared" // an interrupt cleared it
	StateDropped   = "dropped" // a collect cap dropped it
	// StateRefused: a reject message found the conversation busy once stored (a turn started
	// between the caller's check and the store), and was refused.
	StateRefused = "refused"
)

// Message is one queued message.
type Message struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	// Seq orders the messages of the store; Priority 1 (steering) goes before 0.
	Seq      int64  `json:"seq"`
	Priority int    `json:"priority,omitempty"`
	Mode     Mode   `json:"mode"`
	Content  string `json:"content"`
	From     string `json:"from,omitempty"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Created  string `json:"createdAt"`
	Done     string `json:"doneAt,omitempty"`
	EntryID  string `json:"entryId,omitempty"`
	// RollsBack (a rollback message) is a message delivered by the turn it rolls back.
	RollsBack string `json:"rollsBack,omitempty"`
	// Origin is where the message came from (its sender's kind and id, a webhook's channel
	// and peer); the turn that delivers it records it.
	Origin abi.Origin `json:"origin,omitzero"`
	// createdAt in Unix milliseconds, for the collect debounce.
	CreatedMs int64 `json:"-"`
	// Cleared are the messages an interrupt cleared (Enqueue's answer only).
	Cleared []string `json:"-"`
	// Duplicate (EnqueueWith's answer with an ID only): a message with that id was stored
	// before; nothing changed.
	Duplicate bool `json:"-"`
}

// MaxContent bounds a message (1 MiB) as its sender wrote it. A trigger puts a line before
// what it delivers (which hook or job it is), within MaxHeader more: a webhook body of
// exactly MaxContent is stored whole.
const (
	MaxContent = 1 << 20
	MaxHeader  = 1 << 10
)

// Store is the queues database.
type Store struct {
	db  *sql.DB
	now func() time.Time
}

// Path is state/broker/queues.db.
func Path(stateDir string) string { return filepath.Join(stateDir, "broker", "queues.db") }

// Options configure Open.
type Options struct {
	Now func() time.Time
}

// Open opens (creating) the store at path: the file 0600 in a 0700 directory, symlinks refused.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := fsutil.PrepareDB(path); err != nil {
		if errors.Is(err, fsutil.ErrNotRegular) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "broker: %v", err)
		}
		return nil, fmt.Errorf("broker: %w", err)
	}
	// synchronous=FULL: a commit is fsynced before it returns, so an acknowledged message
	// survives a power loss, not only a crash of nexus.
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(30000)&_pragma=synchronous(FULL)&_pragma=journal_mode(WAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("broker: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // one writer; reads are cheap and queue-sized
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS messages (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		id TEXT NOT NULL UNIQUE,
		key TEXT NOT NULL,
		priority INTEGER NOT NULL DEFAULT 0,
		mode TEXT NOT NULL,
		content TEXT NOT NULL,
		sender TEXT NOT NULL DEFAULT '',
		state TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		created_ms INTEGER NOT NULL,
		done_ms INTEGER NOT NULL DEFAULT 0,
		entry_id TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX IF NOT EXISTS messages_queued ON messages(key, state, priority DESC, seq);`); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("broker: schema: %w", err)
	}
	for _, c := range [][2]string{{"rolls_back", "TEXT NOT NULL DEFAULT ''"}, {"origin", "TEXT NOT NULL DEFAULT ''"}} {
		if err := addColumn(ctx, db, c[0], c[1]); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return &Store{db: db, now: opts.Now}, nil
}

// addColumn adds a column a store of an earlier version lacks.
func addColumn(ctx context.Context, db *sql.DB, name, decl string) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('messages') WHERE name = ?`, name).Scan(&n); err != nil {
		return fmt.Errorf("broker: schema: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE messages ADD COLUMN `+name+` `+decl); err != nil {
		return fmt.Errorf("broker: schema: add %s: %w", name, err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("broker: close: %w", err)
	}
	return nil
}

// EnqueueOptions are what the caller knows of the conversation when it stores a message.
type EnqueueOptions struct {
	// ID, when set, stores the message once under this id (a trigger's firing): a second
	// store of it changes nothing (Message.Duplicate).
	ID string
	// Steer: a turn runs, which a steer-backlog message steers (it then goes first).
	Steer bool
	// IfIdle refuses the message (BUSY) when the key has queued messages (reject).
	IfIdle bool
	// RollsBack is a message the running turn delivers (rollback).
	RollsBack string
	// Origin is where the message came from.
	Origin abi.Origin
}

// Enqueue stores a message for key and returns it once it is on disk. A steering message
// (steer, interrupt, rollback, a steer-backlog that steers) goes before the queued ones; an
// interrupt first clears them.
func (s *Store) Enqueue(ctx context.Context, key string, mode Mode, content, from string) (Message, error) {
	return s.EnqueueWith(ctx, key, mode, content, from, EnqueueOptions{})
}

// EnqueueWith is Enqueue with what the caller knows of the running turn.
func (s *Store) EnqueueWith(ctx context.Context, key string, mode Mode, content, from string, o EnqueueOptions) (Message, error) {
	m, fresh, err := s.put(ctx, o.ID, key, mode, content, from, o)
	m.Duplicate = err == nil && !fresh
	return m, err
}

// EnqueueOnce is Enqueue under the caller's id (a trigger's firing, an announcement): the
// message is stored unless one with that id exists; fresh is false then, and nothing changes.
func (s *Store) EnqueueOnce(ctx context.Context, id, key string, mode Mode, content, from string) (fresh bool, err error) {
	return s.enqueueOnce(ctx, id, key, mode, content, from, abi.Origin{})
}

func (s *Store) enqueueOnce(ctx context.Context, id, key string, mode Mode, content, from string, origin abi.Origin) (fresh bool, err error) {
	if id == "" {
		return false, abi.Errorf(abi.CodeInvalidArgument, "", "a message stored once needs an id")
	}
	_, fresh, err = s.put(ctx, id, key, mode, content, from, EnqueueOptions{Origin: origin})
	return fresh, err
}

// Announce stores a subagent's announcement (one per run) as a followup message under the
// caller's id, unless one with that id exists.
// Its origin is the subagent run (runID).
func (s *Store) Announce(ctx context.Context, id, key, content, from, runID string) (fresh bool, err error) {
	return s.enqueueOnce(ctx, id, key, Followup, content, from, AnnounceOrigin(runID))
}

func (s *Store) put(ctx context.Context, id, key string, mode Mode, content, from string, o EnqueueOptions) (Message, bool, error) {
	o.ID = id
	now := s.now()
	m, err := Prepare(key, mode, content, from, o, now)
	if err != nil {
		return Message{}, false, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Message{}, false, fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE id = ?`, m.ID).Scan(&n); err != nil {
		return Message{}, false, fmt.Errorf("broker: enqueue: %w", err)
	}
	if n > 0 {
		return m, false, nil
	}
	if o.IfIdle {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE key = ? AND state = ?`, key, StateQueued).Scan(&n); err != nil {
			return Message{}, false, fmt.Errorf("broker: enqueue: %w", err)
		}
		if n > 0 {
			return Message{}, false, ErrBusy(n)
		}
	}
	if mode == Interrupt {
		rows, err := tx.QueryContext(ctx, `UPDATE messages SET state = ?, reason = ?, done_ms = ? WHERE key = ? AND state = ? RETURNING id`,
			StateCleared, ClearedBy(m.ID), now.UnixMilli(), key, StateQueued)
		if err != nil {
			return Message{}, false, fmt.Errorf("broker: clear: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return Message{}, false, fmt.Errorf("broker: clear: %w", err)
			}
			m.Cleared = append(m.Cleared, id)
		}
		if err := rows.Close(); err != nil {
			return Message{}, false, fmt.Errorf("broker: clear: %w", err)
		}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO messages (id, key, priority, mode, content, sender, state, created_ms, rolls_back, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		m.ID, key, m.Priority, string(mode), content, from, StateQueued, m.CreatedMs, m.RollsBack, m.Origin.Encode())
	if err != nil {
		return Message{}, false, fmt.Errorf("broker: enqueue: %w", err)
	}
	if m.Seq, err = res.LastInsertId(); err != nil {
		return Message{}, false, fmt.Errorf("broker: enqueue: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Message{}, false, fmt.Errorf("broker: enqueue: %w", err)
	}
	return m, true, nil
}

// Has reports whether a message with the id was ever stored.
func (s *Store) Has(ctx context.Context, id string) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE id = ?`, id).Scan(&n); err != nil {
		return false, fmt.Errorf("broker: %w", err)
	}
	return n > 0, nil
}

const cols = `seq, id, key, priority, mode, content, sender, state, reason, created_ms, done_ms, entry_id, rolls_back, origin`

func scan(rows *sql.Rows) ([]Message, error) {
	var out []Message
	for rows.Next() {
		var m Message
		var mode string
		var done int64
		var origin string
		if err := rows.Scan(&m.Seq, &m.ID, &m.Key, &m.Priority, &mode, &m.Content, &m.From, &m.State, &m.Reason, &m.CreatedMs, &done, &m.EntryID, &m.RollsBack, &origin); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		m.Origin = abi.DecodeOrigin(origin)
		m.Mode = Mode(mode)
		m.Created = abi.FormatTime(time.UnixMilli(m.CreatedMs))
		if done > 0 {
			m.Done = abi.FormatTime(time.UnixMilli(done))
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return out, nil
}

// Queued returns key's queued messages in delivery order.
func (s *Store) Queued(ctx context.Context, key string) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+cols+` FROM messages WHERE key = ? AND state = ? ORDER BY priority DESC, seq`, key, StateQueued)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = rows.Close() }()
	return scan(rows)
}

// History returns key's last n messages whatever their state, newest last.
func (s *Store) History(ctx context.Context, key string, n int) ([]Message, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+cols+` FROM (SELECT * FROM messages WHERE key = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq`, key, n)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = rows.Close() }()
	return scan(rows)
}

// Keys returns the conversations that have queued messages.
func (s *Store) Keys(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT key FROM messages WHERE state = ? ORDER BY key`, StateQueued)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return out, nil
}

// Delivered records that the messages went into the transcript as entry entryID.
func (s *Store) Delivered(ctx context.Context, ids []string, entryID string) error {
	_, err := s.finish(ctx, ids, StateDelivered, "", entryID)
	return err
}

// Deliver is Delivered, answering which of the ids this call moved out of the queued state.
func (s *Store) Deliver(ctx context.Context, ids []string, entryID string) ([]string, error) {
	return s.finish(ctx, ids, StateDelivered, "", entryID)
}

// Refuse records that a reject message was refused, unless it was delivered meanwhile:
// refused reports which.
func (s *Store) Refuse(ctx context.Context, id, reason string) (refused bool, err error) {
	res, err := s.db.ExecContext(ctx, `UPDATE messages SET state = ?, reason = ?, done_ms = ? WHERE id = ? AND state = ?`,
		StateRefused, reason, s.now().UnixMilli(), id, StateQueued)
	if err != nil {
		return false, fmt.Errorf("broker: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("broker: %w", err)
	}
	return n > 0, nil
}

// Get returns the stored messages of the ids (any state), in store order.
func (s *Store) Get(ctx context.Context, ids []string) ([]Message, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	//nolint:gosec // G202: only placeholders are joined into the text; the ids are arguments
	rows, err := s.db.QueryContext(ctx, `SELECT `+cols+` FROM messages WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`) ORDER BY seq`, args...)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = rows.Close() }()
	return scan(rows)
}

// Drop records that a collect cap dropped the messages.
func (s *Store) Drop(ctx context.Context, ids []string, reason string) error {
	_, err := s.finish(ctx, ids, StateDropped, reason, "")
	return err
}

// finish moves the queued ones of ids to state and returns them.
func (s *Store) finish(ctx context.Context, ids []string, state, reason, entryID string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	now := s.now().UnixMilli()
	var moved []string
	for _, id := range ids {
		res, err := tx.ExecContext(ctx, `UPDATE messages SET state = ?, reason = ?, entry_id = ?, done_ms = ? WHERE id = ? AND state = ?`,
			state, reason, entryID, now, id, StateQueued)
		if err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		} else if n > 0 {
			moved = append(moved, id)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return moved, nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "msg_" + hex.EncodeToString(b[:])
}
