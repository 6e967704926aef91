package source

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite" (pure Go), as internal/index uses
)

// The tools that keep their sessions in one SQLite database (OpenCode, Crush) are read whole at
// each change of the file: Parse opens it read-only with SQLite itself (so a write the tool has
// in its WAL is seen), reads every session, and returns the first with the others in
// Result.Also (Result.Whole: the file's rows are replaced). The file's size is its Offset, so
// the index's watermark covers the whole database.

// openStore opens the SQLite database at path read-only, its queries only readers.
func openStore(ctx context.Context, path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path) // a URI's path is absolute
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	q := url.Values{"mode": {"ro"}, "_pragma": {"busy_timeout(5000)", "query_only(1)"}}
	if _, err := os.Lstat(abs + "-wal"); errors.Is(err, fs.ErrNotExist) { //nolint:gosec // beside the database Discover found
		// No WAL: the tool closed the database and everything is in the file. Opened as it
		// is, a read-only connection would still make -wal and -shm files beside it and leave
		// them there; immutable reads the file alone and writes nothing. A tool that opens it
		// meanwhile changes it again, and that change is read next.
		q.Set("immutable", "1")
	}
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// discoverTop lists the regular files directly in each root (or at the relative paths of
// keep's candidates) that keep accepts, without walking the tree below: a tool's data directory
// holds much else (OpenCode's snapshots are git repositories), and a Crush root may be a
// project's whole tree.
func discoverTop(ctx context.Context, roots []string, keep func(name string) bool, also ...string) ([]string, error) {
	var out []string
	for _, root := range roots {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("source: discover %s: %w", root, err)
		}
		names := append([]string(nil), also...)
		entries, err := os.ReadDir(root)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("source: discover %s: %w", root, err)
		}
		for _, e := range entries {
			if keep(e.Name()) {
				names = append(names, e.Name())
			}
		}
		for _, n := range names {
			p := filepath.Join(root, n)
			if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() { //nolint:gosec // under a root
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}

// hasTable reports whether the database has the table name: a database of another version (or
// another tool) is not an error, it holds no sessions the adapter knows.
func hasTable(ctx context.Context, db *sql.DB, name string) (bool, error) {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", name).Scan(&n); err != nil {
		return false, fmt.Errorf("schema: %w", err)
	}
	return n > 0, nil
}

// storeResults makes the Result of a whole database from its sessions (in the order given):
// the first is the Result, the others its Also; each has Offset, the file's size.
func storeResults(path string, sessions []*Result) (*Result, error) {
	fi, err := os.Stat(path) //nolint:gosec // the database Discover found
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	for _, r := range sessions {
		r.Offset, r.Whole = fi.Size(), true
		for i := range r.Messages {
			r.Messages[i].Seq = i
			if !r.UsageCumulative {
				r.Usage = r.Usage.Add(r.Messages[i].Usage)
			}
		}
	}
	if len(sessions) == 0 {
		return &Result{Offset: fi.Size(), Whole: true}, nil
	}
	first := sessions[0]
	first.Also = sessions[1:]
	return first, nil
}

// sortMessages orders a session's messages by time, then id (the tools' ids sort in the
// order they were made).
func sortMessages(msgs []Message) {
	sort.SliceStable(msgs, func(i, j int) bool {
		if !msgs[i].Timestamp.Equal(msgs[j].Timestamp) {
			return msgs[i].Timestamp.Before(msgs[j].Timestamp)
		}
		return msgs[i].ID < msgs[j].ID
	})
}

// unixTime reads a time the tools store as a number: milliseconds, or seconds for values too
// small to be milliseconds after 1973.
func unixTime(n int64) time.Time {
	switch {
	case n <= 0:
		return time.Time{}
	case n < 1e11:
		return time.Unix(n, 0).UTC()
	default:
		return time.UnixMilli(n).UTC()
	}
}
