// Package index is the history index (docs/history.md): every agent tool's transcripts on the
// machine, read by the adapters of internal/index/source, in one SQLite database
// (state/index.db, WAL) with FTS5 full-text search ranked by BM25.
//
// A sync reads each transcript from where the last one stopped: a watermark per file (size,
// mtime, inode, byte offset and a hash of the bytes before that offset) tells an unchanged
// file (skipped), an appended one (read from the offset) and a rewritten one (re-read whole).
// Rows are upserted by the tools' own ids, so reading a line twice never counts it twice.
// Secrets are redacted before anything is written.
package index

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
	"github.com/nexus-run/nexus/internal/shell/output"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite": pure Go, with FTS5
)

// FileName is the index's file in the state directory.
const FileName = "index.db"

// schemaVersion is stored in user_version; an index of another version is rebuilt from the
// transcripts, which are the truth (the index is a cache of them).
const schemaVersion = 5

// upgrades bring an index of an older version to the next one without deleting the rows of
// sessions whose files are gone (an upgrade that must read the transcripts again marks their
// files changed instead): by the version they start from, applied in turn up to schemaVersion.
var upgrades = map[int][]string{ //nolint:gochecknoglobals // immutable
	// 4: files record a read that failed (skipped until the file changes) and the lines cut.
	3: {
		`ALTER TABLE files ADD COLUMN error TEXT NOT NULL DEFAULT ''`,
		`ALTER TABLE files ADD COLUMN cut INTEGER NOT NULL DEFAULT 0`,
	},
	// 5: whole tool results (version 4 kept 4 KiB of each), their length and whether they were
	// cut; subagents linked by the call that spawned them; titles and turns without injected
	// text. The files still there are read again (whole, as if rewritten) with the titles they
	// gave, so their sessions are rebuilt; the sessions of files that are gone stay as they were.
	4: {
		`ALTER TABLE tool_calls ADD COLUMN result_bytes INTEGER NOT NULL DEFAULT 0`,
		`ALTER TABLE tool_calls ADD COLUMN result_cut INTEGER NOT NULL DEFAULT 0`,
		`CREATE INDEX sessions_tool_call ON sessions (tool_call_id) WHERE tool_call_id <> ''`,
		`CREATE INDEX tool_calls_spawn ON tool_calls (cid) WHERE name IN ('Agent', 'Task')`,
		`UPDATE sessions SET title = '' WHERE id IN (SELECT session FROM files WHERE deleted = 0)`,
		`UPDATE files SET size = -1, offset = 0, tail_hash = NULL WHERE deleted = 0`,
	},
}

// Options configures Open.
type Options struct {
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Redactor redacts text before it enters the index (default: output.NewRedactor()).
	Redactor *output.Redactor
	// CacheMiB is SQLite's page cache per connection (default 32).
	CacheMiB int
	// RankWindow is how many of a query's newest matches are ranked (default RankWindow).
	RankWindow int
	// ResultMax is the most of one tool result indexed and kept, in bytes (default
	// DefaultResultMax); a longer result is cut there, and its hits say so. A line over
	// source.LineMax has its strings cut to source.TextMax whatever this says.
	ResultMax int
}

// DefaultResultMax is the default Options.ResultMax: every word of a build log or a file read
// is searchable, and a tool's output of hundreds of megabytes does not fill the index.
const DefaultResultMax = 1 << 20

// EnvResultMax names the environment variable that sets Options.ResultMax for the CLI and the
// gateway: a number of bytes, with an optional KiB or MiB suffix.
const EnvResultMax = "NEXUS_INDEX_RESULT_MAX"

// ResultMaxFromEnv reads EnvResultMax through getenv: 0 (the default) when it is not set,
// INVALID_ARGUMENT when it is not a positive size.
func ResultMaxFromEnv(getenv func(string) string) (int, error) {
	if getenv == nil {
		return 0, nil
	}
	v := strings.TrimSpace(getenv(EnvResultMax))
	if v == "" {
		return 0, nil
	}
	unit := 1
	for suffix, u := range map[string]int{"KiB": 1 << 10, "MiB": 1 << 20} {
		if strings.HasSuffix(v, suffix) {
			v, unit = strings.TrimSpace(strings.TrimSuffix(v, suffix)), u
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > math.MaxInt32/unit {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "", "%s=%q: want a size in bytes (such as 4194304 or 4MiB)", EnvResultMax, getenv(EnvResultMax))
	}
	return n * unit, nil
}

// Index is an open history index. Safe for concurrent use; syncs are serialized.
type Index struct {
	db     *sql.DB
	path   string
	now    func() time.Time
	redact *output.Redactor
	window int
	// resultMax is Options.ResultMax.
	resultMax int
	// syncMu serializes syncs in this process (other processes wait on SQLite's lock).
	syncMu sync.Mutex
	// testHook, set by tests only, is called as a file is parsed ("parse") and written
	// ("write"), to make one fail.
	testHook func(stage, path string)
	// pieceBytes is what one parse reads of a file (pieceBytes; tests make it small).
	pieceBytes int64
}

// Open opens (creating if needed) the index at path. The file is created 0600 in a 0700
// directory; a symlink in its place is refused.
func Open(ctx context.Context, path string, opts Options) (*Index, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Redactor == nil {
		opts.Redactor = output.NewRedactor()
	}
	if opts.RankWindow <= 0 {
		opts.RankWindow = RankWindow
	}
	if opts.CacheMiB <= 0 {
		opts.CacheMiB = 32
	}
	if opts.ResultMax <= 0 {
		opts.ResultMax = DefaultResultMax
	}
	if err := fsutil.PrepareDB(path); err != nil {
		if errors.Is(err, fsutil.ErrNotRegular) {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "index: %v", err)
		}
		return nil, fmt.Errorf("index: %w", err)
	}
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(30000)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_pragma=temp_store(MEMORY)" +
		fmt.Sprintf("&_pragma=cache_size(-%d)", opts.CacheMiB*1024)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	ix := &Index{db: db, path: path, now: opts.Now, redact: opts.Redactor, window: opts.RankWindow, pieceBytes: pieceBytes,
		resultMax: opts.ResultMax}
	if err := ix.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := ensureOrigins(ctx, db); err != nil {
		_ = db.Close()
		return nil, err
	}
	return ix, nil
}

// Path is the database file.
func (ix *Index) Path() string { return ix.path }

// Close closes the database.
func (ix *Index) Close() error {
	if err := ix.db.Close(); err != nil {
		return fmt.Errorf("index: close: %w", err)
	}
	return nil
}

func (ix *Index) migrate(ctx context.Context) error {
	var v int
	if err := ix.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("index: read version: %w", err)
	}
	if v == schemaVersion {
		return nil
	}
	conn, err := ix.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("index: migrate: %w", err)
	}
	defer func() { _ = conn.Close() }()
	if v == 0 {
		// A new database: large pages mean fewer, larger writes of FTS segments and text. The
		// page size is fixed once a table exists, and WAL mode (persistent) fixes it too, so
		// both are set here, in this order, on the connection that creates the schema.
		for _, p := range []string{"PRAGMA page_size = 16384", "PRAGMA journal_mode = WAL"} {
			if _, err := conn.ExecContext(ctx, p); err != nil {
				return fmt.Errorf("index: %s: %w", p, err)
			}
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("index: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	_, upgradable := upgrades[v]
	if upgradable {
		for from := v; from < schemaVersion; from++ {
			for _, q := range upgrades[from] {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return fmt.Errorf("index: upgrade from version %d: %w", from, err)
				}
			}
		}
	} else if v != 0 {
		for _, t := range []string{"message_fts", "tool_fts", "fts_stale", "turns", "tool_calls", "messages", "files", "sessions", "meta"} {
			if _, err := tx.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
				return fmt.Errorf("index: drop %s: %w", t, err)
			}
		}
	}
	if !upgradable {
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("index: create schema: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("index: set version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("index: migrate: %w", err)
	}
	return nil
}

// schema: times are Unix milliseconds (UTC), 0 when unknown. The FTS tables are external
// content tables over messages and tool_calls, so text is stored once and snippets read it
// from the row; fts says whether a row's current text is in its FTS table.
const schema = `
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO meta VALUES ('gen', 0);

CREATE TABLE sessions (
	id             INTEGER PRIMARY KEY,
	source         TEXT NOT NULL,
	sid            TEXT NOT NULL,
	path           TEXT NOT NULL DEFAULT '',
	project        TEXT NOT NULL DEFAULT '',
	model          TEXT NOT NULL DEFAULT '',
	created        INTEGER NOT NULL DEFAULT 0,
	updated        INTEGER NOT NULL DEFAULT 0,
	title          TEXT NOT NULL DEFAULT '',
	message_count  INTEGER NOT NULL DEFAULT 0,
	turn_count     INTEGER NOT NULL DEFAULT 0,
	parent_session TEXT NOT NULL DEFAULT '',
	parent_message TEXT NOT NULL DEFAULT '',
	tool_call_id   TEXT NOT NULL DEFAULT '',
	task           TEXT NOT NULL DEFAULT '',
	task_status    TEXT NOT NULL DEFAULT '',
	is_subagent    INTEGER NOT NULL DEFAULT 0,
	context_limit  INTEGER NOT NULL DEFAULT 0,
	fork_origin    TEXT NOT NULL DEFAULT '',
	cumulative     INTEGER NOT NULL DEFAULT 0,
	input_tokens   INTEGER NOT NULL DEFAULT 0,
	output_tokens  INTEGER NOT NULL DEFAULT 0,
	cache_read     INTEGER NOT NULL DEFAULT 0,
	cache_write    INTEGER NOT NULL DEFAULT 0,
	reasoning      INTEGER NOT NULL DEFAULT 0,
	deleted        INTEGER NOT NULL DEFAULT 0,
	gen            INTEGER NOT NULL DEFAULT 0,
	UNIQUE (source, sid)
);
CREATE INDEX sessions_updated ON sessions (updated DESC);
CREATE INDEX sessions_sid ON sessions (sid);
CREATE INDEX sessions_gen ON sessions (gen);
CREATE INDEX sessions_tool_call ON sessions (tool_call_id) WHERE tool_call_id <> '';

CREATE TABLE files (
	id        INTEGER PRIMARY KEY,
	source    TEXT NOT NULL,
	path      TEXT NOT NULL UNIQUE,
	size      INTEGER NOT NULL DEFAULT 0,
	mtime_ns  INTEGER NOT NULL DEFAULT 0,
	inode     INTEGER NOT NULL DEFAULT 0,
	offset    INTEGER NOT NULL DEFAULT 0,
	tail_hash BLOB,
	session   INTEGER NOT NULL DEFAULT 0,
	lines     INTEGER NOT NULL DEFAULT 0,
	skipped   TEXT NOT NULL DEFAULT '',
	deleted   INTEGER NOT NULL DEFAULT 0,
	synced    INTEGER NOT NULL DEFAULT 0,
	error     TEXT NOT NULL DEFAULT '',
	cut       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX files_source ON files (source);

CREATE TABLE messages (
	id          INTEGER PRIMARY KEY,
	session     INTEGER NOT NULL,
	mid         TEXT NOT NULL,
	file        INTEGER NOT NULL DEFAULT 0,
	role        TEXT NOT NULL DEFAULT '',
	text        TEXT NOT NULL DEFAULT '',
	ts          INTEGER NOT NULL DEFAULT 0,
	seq         INTEGER NOT NULL DEFAULT 0,
	turn        INTEGER NOT NULL DEFAULT 0,
	model       TEXT NOT NULL DEFAULT '',
	input       INTEGER NOT NULL DEFAULT 0,
	output      INTEGER NOT NULL DEFAULT 0,
	cache_read  INTEGER NOT NULL DEFAULT 0,
	cache_write INTEGER NOT NULL DEFAULT 0,
	reasoning   INTEGER NOT NULL DEFAULT 0,
	gen         INTEGER NOT NULL DEFAULT 0,
	fts         INTEGER NOT NULL DEFAULT 0,
	UNIQUE (session, mid)
);
CREATE INDEX messages_unindexed ON messages (id) WHERE fts = 0;
CREATE INDEX messages_seq ON messages (session, seq);
CREATE INDEX messages_turn ON messages (session, turn, seq);
CREATE INDEX messages_gen ON messages (gen);

CREATE TABLE turns (
	session  INTEGER NOT NULL,
	turn     INTEGER NOT NULL,
	prompt   INTEGER NOT NULL DEFAULT 0,
	response INTEGER NOT NULL DEFAULT 0,
	started  INTEGER NOT NULL DEFAULT 0,
	ended    INTEGER NOT NULL DEFAULT 0,
	gen      INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (session, turn)
) WITHOUT ROWID;
CREATE INDEX turns_gen ON turns (gen);

CREATE TABLE tool_calls (
	id            INTEGER PRIMARY KEY,
	session       INTEGER NOT NULL,
	cid           TEXT NOT NULL,
	mid           TEXT NOT NULL DEFAULT '',
	file          INTEGER NOT NULL DEFAULT 0,
	name          TEXT NOT NULL DEFAULT '',
	params        TEXT NOT NULL DEFAULT '',
	result        TEXT NOT NULL DEFAULT '',
	result_bytes  INTEGER NOT NULL DEFAULT 0,
	result_cut    INTEGER NOT NULL DEFAULT 0,
	status        TEXT NOT NULL DEFAULT '',
	child_session TEXT NOT NULL DEFAULT '',
	gen           INTEGER NOT NULL DEFAULT 0,
	fts           INTEGER NOT NULL DEFAULT 0,
	UNIQUE (session, cid)
);
CREATE INDEX tool_calls_unindexed ON tool_calls (id) WHERE fts = 0;
CREATE INDEX tool_calls_child ON tool_calls (child_session) WHERE child_session <> '';
CREATE INDEX tool_calls_gen ON tool_calls (gen);
CREATE INDEX tool_calls_mid ON tool_calls (session, mid);
CREATE INDEX tool_calls_spawn ON tool_calls (cid) WHERE name IN ('Agent', 'Task');

CREATE VIRTUAL TABLE message_fts USING fts5 (
	text, content = 'messages', content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO message_fts (message_fts, rank) VALUES ('hashsize', 8388608);
CREATE VIRTUAL TABLE tool_fts USING fts5 (
	name, params, result, content = 'tool_calls', content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO tool_fts (tool_fts, rank) VALUES ('hashsize', 8388608);

-- The FTS tables are brought up to date once per write transaction (writer.indexText), not
-- row by row: FTS5 flushes its pending terms to a new segment at every statement savepoint,
-- so triggers writing it row by row would make a tiny segment per row and spend the sync
-- merging them (and triggers give every upsert a statement journal). A row whose text changes
-- or goes after it was indexed leaves its old text here first (the writer does it), which is
-- what an external-content table needs to remove it.
CREATE TABLE fts_stale (kind INTEGER NOT NULL, id INTEGER NOT NULL, a TEXT, b TEXT, c TEXT);
`

// ms is t in Unix milliseconds, 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// fromMS is the inverse of ms.
func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}
