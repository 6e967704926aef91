package index

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/index/source"
)

// SyncOptions says what a sync reads.
type SyncOptions struct {
	// Sources are the adapters' names to sync; empty means all.
	Sources []string
	// Roots overrides a source's directories (by source name); a source without an entry
	// reads its DefaultRoots.
	Roots map[string][]string
	// Env finds the default roots (default: the process's home and environment).
	Env *source.Env
	// Workers parse files in parallel (default GOMAXPROCS); one writer writes.
	Workers int
	// Progress, if set, is called after each file is written.
	Progress func(Progress)
}

// Progress is abi.IndexProgress.
type Progress = abi.IndexProgress

// Summary is abi.IndexSummary.
type Summary = abi.IndexSummary

// FileError is abi.IndexFileError.
type FileError = abi.IndexFileError

// Sources returns the adapters named (all when names is empty), or INVALID_ARGUMENT naming
// the known ones.
func Sources(names []string) ([]source.Source, error) {
	if len(names) == 0 {
		return source.All(), nil
	}
	var out []source.Source
	for _, n := range names {
		s, ok := source.ByName(n)
		if !ok {
			var known []string
			for _, s := range source.All() {
				known = append(known, s.Name())
			}
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "unknown source %q (sources: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

// Roots resolves each source's directories: opts.Roots, else the adapter's defaults.
func (o SyncOptions) roots(srcs []source.Source) (map[string][]string, error) {
	env := o.Env
	if env == nil {
		e, err := source.OSEnv()
		if err != nil {
			return nil, err
		}
		env = &e
	}
	out := map[string][]string{}
	for _, s := range srcs {
		rs, ok := o.Roots[s.Name()]
		if !ok {
			rs = s.DefaultRoots(*env)
		}
		// Absolute and clean, so a file has one path in the index whatever the working
		// directory of the sync that found it.
		for _, r := range rs {
			abs, err := filepath.Abs(r)
			if err != nil {
				return nil, fmt.Errorf("index: root %s: %w", r, err)
			}
			out[s.Name()] = append(out[s.Name()], abs)
		}
	}
	return out, nil
}

// target is a file to sync and the adapter that reads it.
type target struct {
	src  source.Source
	path string
}

// Sync reads every source's transcripts into the index: new and changed files, and marks
// deleted the files (and sessions) that are gone from a root.
func (ix *Index) Sync(ctx context.Context, opts SyncOptions) (*Summary, error) {
	srcs, err := Sources(opts.Sources)
	if err != nil {
		return nil, err
	}
	roots, err := opts.roots(srcs)
	if err != nil {
		return nil, err
	}
	var targets []target
	seen := map[string]bool{}
	for _, s := range srcs {
		files, err := s.Discover(ctx, roots[s.Name()])
		if err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				targets = append(targets, target{s, f})
			}
		}
	}
	// Files indexed under these roots that discovery no longer finds are gone.
	gone, err := ix.goneFiles(ctx, srcs, roots, seen)
	if err != nil {
		return nil, err
	}
	for _, g := range gone {
		targets = append(targets, target{g.src, g.path})
	}
	return ix.syncTargets(ctx, targets, opts)
}

// SyncPaths syncs the given files (a watcher's changed paths); a path that no longer exists
// is marked deleted.
func (ix *Index) SyncPaths(ctx context.Context, paths map[string]source.Source, opts SyncOptions) (*Summary, error) {
	targets := make([]target, 0, len(paths))
	for p, s := range paths {
		targets = append(targets, target{s, p})
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].path < targets[j].path })
	return ix.syncTargets(ctx, targets, opts)
}

func (ix *Index) goneFiles(ctx context.Context, srcs []source.Source, roots map[string][]string, seen map[string]bool) ([]target, error) {
	var out []target
	for _, s := range srcs {
		rows, err := ix.db.QueryContext(ctx, "SELECT path FROM files WHERE source = ? AND deleted = 0", s.Name())
		if err != nil {
			return nil, fmt.Errorf("index: files: %w", err)
		}
		for rows.Next() {
			var p string
			if err := rows.Scan(&p); err != nil {
				_ = rows.Close()
				return nil, fmt.Errorf("index: files: %w", err)
			}
			if !seen[p] && under(p, roots[s.Name()]) {
				out = append(out, target{s, p})
			}
		}
		if err := rows.Close(); err != nil {
			return nil, fmt.Errorf("index: files: %w", err)
		}
	}
	return out, nil
}

func under(p string, roots []string) bool {
	for _, r := range roots {
		if rel, err := filepath.Rel(r, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

// watermark is what the index knows of a file from its last sync.
type watermark struct {
	id      int64
	size    int64
	mtimeNS int64
	inode   uint64
	offset  int64
	hash    []byte
	deleted bool
	// sid is the session the file's lines were read into: an append has no header to say.
	sid string
}

// Kinds of file change a sync finds.
const (
	changeUnchanged = iota
	changeNew
	changeAppended
	changeRewritten
	changeDeleted
)

// job is one file read by a worker, for the writer.
type job struct {
	src    source.Source
	path   string
	wm     *watermark
	change int
	res    *source.Result
	size   int64
	mtime  int64
	inode  uint64
	hash   []byte
	read   int64
	err    error
	// failed says err will recur until the file changes (its parse panicked): the file is
	// recorded with it and skipped until then.
	failed bool
	// cont says the job is a piece of the file after the first (source.Piece): its change was
	// counted with the first.
	cont bool
	// resultBytes are the lengths of res.ToolCalls' results as the adapter read them, before
	// the cap cut them.
	resultBytes []int64
}

// pieceBytes bounds what one parse reads of a file: a larger file is read, written and let go
// a piece at a time, so a sync's memory does not grow with the size of a transcript.
const pieceBytes = 4 << 20

func (ix *Index) syncTargets(ctx context.Context, targets []target, opts SyncOptions) (_ *Summary, err error) {
	ix.syncMu.Lock()
	defer ix.syncMu.Unlock()
	start := ix.now()
	marks, err := ix.watermarks(ctx)
	if err != nil {
		return nil, err
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan target)
	out := make(chan *job, workers*2)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for t := range in {
				// A file past pieceBytes is sent a piece at a time, in order: the next piece is
				// read while the writer writes this one.
				for j := ix.read(ctx, t, marks[t.path]); j != nil; {
					more, from, sid, inode := j.res != nil && j.res.More, int64(0), "", j.inode
					var state any
					if more {
						from, sid, state = j.res.Offset, j.res.Session.ID, j.res.State()
					}
					select {
					case out <- j:
					case <-ctx.Done():
						return
					}
					j = nil
					if more {
						j = ix.readOn(ctx, t, inode, from, sid, state)
					}
				}
			}
		})
	}
	go func() {
		defer close(in)
		for _, t := range targets {
			select {
			case in <- t:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(out) }()

	var w *writer
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		// A panic outside any one file's read and write (those are the file's failure): the
		// open batch is rolled back and the sync fails, what earlier batches wrote stays, and
		// the process (a gateway watching the transcripts) goes on.
		cancel()
		for range out { //nolint:revive // drain so the workers end
		}
		if w != nil {
			w.abort()
		}
		err = fmt.Errorf("index: sync: %w", panicError(v))
	}()
	w, err = ix.newWriter(ctx)
	if err != nil {
		cancel()
		for range out { //nolint:revive // drain so the workers end
		}
		return nil, err
	}
	sum := &Summary{Gen: w.gen, Files: len(targets)}
	prog := Progress{FilesTotal: len(targets)}
	var werr error
	for j := range out {
		if werr != nil {
			continue
		}
		if err := w.write(ctx, j, sum); err != nil {
			werr = err
			cancel()
			continue
		}
		if j.res == nil || !j.res.More {
			prog.Files++ // its last piece
		}
		prog.Bytes += j.read
		if opts.Progress != nil {
			opts.Progress(prog)
		}
	}
	if werr == nil {
		werr = ctx.Err()
	}
	if werr != nil {
		w.abort()
		return nil, werr
	}
	if err := w.finish(ctx); err != nil {
		return nil, err
	}
	sum.DurationMS = ix.now().Sub(start).Milliseconds()
	return sum, nil
}

func (ix *Index) watermarks(ctx context.Context) (map[string]*watermark, error) {
	rows, err := ix.db.QueryContext(ctx, `SELECT f.id, f.path, f.size, f.mtime_ns, f.inode, f.offset, f.tail_hash, f.deleted, coalesce(s.sid, '')
		FROM files f LEFT JOIN sessions s ON s.id = f.session`)
	if err != nil {
		return nil, fmt.Errorf("index: watermarks: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]*watermark{}
	for rows.Next() {
		var w watermark
		var p string
		var inode int64
		if err := rows.Scan(&w.id, &p, &w.size, &w.mtimeNS, &inode, &w.offset, &w.hash, &w.deleted, &w.sid); err != nil {
			return nil, fmt.Errorf("index: watermarks: %w", err)
		}
		w.inode = uint64(inode) //nolint:gosec // stored from a uint64
		out[p] = &w
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("index: watermarks: %w", err)
	}
	return out, nil
}

// hashWindow is how much of a file's start and of the bytes before its offset the watermark
// hashes: enough to see a rewrite of the header or of the last record, without reading the
// file again.
const hashWindow = 4096

// fileHash hashes the first and the last hashWindow bytes before offset.
func fileHash(f *os.File, offset int64) ([]byte, error) {
	h := sha256.New()
	head := min(offset, hashWindow)
	buf := make([]byte, hashWindow)
	if _, err := f.ReadAt(buf[:head], 0); err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	h.Write(buf[:head])
	if offset > head {
		from := max(head, offset-hashWindow)
		n := offset - from
		if _, err := f.ReadAt(buf[:n], from); err != nil {
			return nil, fmt.Errorf("hash: %w", err)
		}
		h.Write(buf[:n])
	}
	return h.Sum(nil), nil
}

// read decides what changed in one file and parses what is new. A panic in it (an adapter's
// bug a transcript finds) fails this file alone.
func (ix *Index) read(ctx context.Context, t target, wm *watermark) (j *job) {
	j = &job{src: t.src, path: t.path, wm: wm}
	defer func() {
		if v := recover(); v != nil {
			j.res, j.err, j.failed = nil, panicError(v), true
		}
	}()
	fi, err := os.Lstat(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		if wm == nil || wm.deleted {
			j.change = changeUnchanged
		} else {
			j.change = changeDeleted
		}
		return j
	}
	if err != nil {
		j.err = err
		return j
	}
	if !fi.Mode().IsRegular() {
		j.err = fmt.Errorf("not a regular file")
		return j
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	j.size, j.mtime = fi.Size(), fi.ModTime().UnixNano()
	if st != nil {
		j.inode = st.Ino
	}
	if wm != nil && !wm.deleted && wm.size == j.size && wm.mtimeNS == j.mtime && wm.inode == j.inode {
		j.change = changeUnchanged
		return j
	}
	f, err := os.OpenFile(t.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		j.err = err
		return j
	}
	defer func() { _ = f.Close() }()
	j.change = changeNew
	var offset int64
	if wm != nil {
		j.change = changeRewritten
		if wm.inode == j.inode && j.size >= wm.offset {
			h, err := fileHash(f, wm.offset)
			if err != nil {
				j.err = err
				return j
			}
			if bytes.Equal(h, wm.hash) {
				j.change, offset = changeAppended, wm.offset
			}
		}
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			j.err = err
			return j
		}
	}
	sid := ""
	if j.change == changeAppended {
		sid = wm.sid
	}
	ix.parse(ctx, j, f, offset, sid, nil)
	return j
}

// readOn reads the piece of a file that follows from, when the file is still the one (inode)
// whose earlier pieces were read; nil when it is not (the next sync reads it again). sid is the
// session the first piece found: a piece has no header of its own.
func (ix *Index) readOn(ctx context.Context, t target, inode uint64, from int64, sid string, state any) (j *job) {
	j = &job{src: t.src, path: t.path, change: changeAppended, cont: true}
	defer func() {
		if v := recover(); v != nil {
			j.res, j.err, j.failed = nil, panicError(v), true
		}
	}()
	f, err := os.OpenFile(t.path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil || st.Ino != inode || fi.Size() < from {
		return nil
	}
	j.size, j.mtime, j.inode = fi.Size(), fi.ModTime().UnixNano(), st.Ino
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		j.err = err
		return j
	}
	ix.parse(ctx, j, f, from, sid, state)
	return j
}

// parse reads a piece of f from offset into j, redacted; sid and state are the session and
// the adapter's state the piece before ended with.
func (ix *Index) parse(ctx context.Context, j *job, f *os.File, offset int64, sid string, state any) {
	if ix.testHook != nil {
		ix.testHook("parse", j.path)
	}
	res, err := j.src.Parse(ctx, source.Piece(f, ix.pieceBytes, state), j.path, offset)
	if err != nil {
		j.err = err
		return
	}
	if sid != "" && !res.Whole {
		// A database read whole names its sessions itself (the first may be another one now).
		res.Session.ID = sid
	}
	j.read = res.Offset - offset + res.Pending
	if j.hash, err = fileHash(f, res.Offset); err != nil {
		j.err = err
		return
	}
	j.resultBytes = ix.cutResults(res)
	ix.redactResult(res)
	j.res = res
}

// redactResult redacts every text a parse found before it reaches the index.
// It also replaces the snippet markers, so a marker in a snippet is always one.
func (ix *Index) redactResult(res *source.Result) {
	clean := func(s string) string {
		s = ix.redact.Redact(s)
		if strings.ContainsAny(s, MarkOpen+MarkClose) {
			s = markers.Replace(s)
		}
		return s
	}
	for _, r := range res.Also {
		ix.redactResult(r)
	}
	res.Session.Title = clean(res.Session.Title)
	for i := range res.Messages {
		res.Messages[i].Text = clean(res.Messages[i].Text)
	}
	for i := range res.ToolCalls {
		tc := &res.ToolCalls[i]
		tc.Params = clean(tc.Params)
		tc.Result = clean(tc.Result)
	}
}

// cutResults cuts each tool result to the index's cap, before redaction (which then reads at
// most the cap), and keeps its length as read; the cut is what a hit says.
func (ix *Index) cutResults(res *source.Result) []int64 {
	lens := make([]int64, len(res.ToolCalls))
	for i := range res.ToolCalls {
		tc := &res.ToolCalls[i]
		lens[i] = int64(len(tc.Result))
		if len(tc.Result) > ix.resultMax {
			tc.Result = excerptUTF8(tc.Result, ix.resultMax)
			tc.ResultCut = true
		}
	}
	return lens
}

// markers replaces the snippet markers in indexed text.
var markers = strings.NewReplacer(MarkOpen, "\ufffd", MarkClose, "\ufffd") //nolint:gochecknoglobals // immutable

// writer writes jobs in batched transactions.
type writer struct {
	ix       *Index
	gen      int64
	tx       *sql.Tx
	st       map[string]*sql.Stmt
	batch    int   // files in the open transaction
	batchLen int64 // bytes in the open transaction
	// linked says the subagent links are up to date with what this transaction wrote; seen
	// are the sessions this sync wrote (their rows may already hold the ids of another file).
	linked bool
	seen   map[int64]bool
	// failed are the files this sync recorded as failed: their later pieces are not written
	// (the file is read on from its last good piece once it changes).
	failed map[string]bool
}

// Batches: a transaction is committed after this many files or bytes, so a long first sync
// shows its progress to readers and a crash loses little.
const (
	batchFiles = 512
	batchBytes = 16 << 20
)

func (ix *Index) newWriter(ctx context.Context) (*writer, error) {
	w := &writer{ix: ix, linked: true, seen: map[int64]bool{}, failed: map[string]bool{}}
	if err := w.begin(ctx); err != nil {
		return nil, err
	}
	if err := w.tx.QueryRowContext(ctx, "UPDATE meta SET value = value + 1 WHERE key = 'gen' RETURNING value").Scan(&w.gen); err != nil {
		w.abort()
		return nil, fmt.Errorf("index: next generation: %w", err)
	}
	return w, nil
}

var statements = map[string]string{
	"origin": originStatement,
	// A read from the start (?11) replaces the file's counts of lines, skipped lines and cut
	// lines; an append adds to them.
	"file": `INSERT INTO files (source, path, size, mtime_ns, inode, offset, tail_hash, lines, skipped, deleted, synced, error, cut)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, '', ?12)
		ON CONFLICT (path) DO UPDATE SET source = excluded.source, size = excluded.size,
			mtime_ns = excluded.mtime_ns, inode = excluded.inode, offset = excluded.offset,
			tail_hash = excluded.tail_hash,
			lines = CASE WHEN ?11 THEN excluded.lines ELSE lines + excluded.lines END,
			cut = CASE WHEN ?11 THEN excluded.cut ELSE cut + excluded.cut END,
			skipped = CASE WHEN ?11 OR skipped = '' THEN excluded.skipped WHEN excluded.skipped = '' THEN skipped
				ELSE (SELECT json_group_object(key, n) FROM (SELECT key, sum(value) AS n FROM
					(SELECT key, value FROM json_each(files.skipped) UNION ALL SELECT key, value FROM json_each(excluded.skipped))
					GROUP BY key)) END,
			deleted = 0, synced = excluded.synced, error = ''
		RETURNING id, session`,
	// A file that failed keeps the offset and hash of its last good read.
	"failFile": `INSERT INTO files (source, path, size, mtime_ns, inode, error, synced) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (path) DO UPDATE SET source = excluded.source, size = excluded.size, mtime_ns = excluded.mtime_ns,
			inode = excluded.inode, error = excluded.error, deleted = 0, synced = excluded.synced`,
	"session": `INSERT INTO sessions (source, sid, path, project, model, created, updated, title,
			parent_session, parent_message, tool_call_id, is_subagent, fork_origin, cumulative, gen, task_status)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (source, sid) DO UPDATE SET
			path = excluded.path,
			project = coalesce(nullif(excluded.project, ''), project),
			model = coalesce(nullif(excluded.model, ''), model),
			created = CASE WHEN created = 0 OR (excluded.created <> 0 AND excluded.created < created) THEN excluded.created ELSE created END,
			updated = max(updated, excluded.updated),
			title = coalesce(nullif(title, ''), excluded.title),
			parent_session = coalesce(nullif(excluded.parent_session, ''), parent_session),
			parent_message = coalesce(nullif(excluded.parent_message, ''), parent_message),
			tool_call_id = coalesce(nullif(excluded.tool_call_id, ''), tool_call_id),
			is_subagent = max(is_subagent, excluded.is_subagent),
			fork_origin = coalesce(nullif(excluded.fork_origin, ''), fork_origin),
			task_status = coalesce(nullif(excluded.task_status, ''), task_status),
			cumulative = max(cumulative, excluded.cumulative),
			deleted = 0, gen = excluded.gen
		RETURNING id, message_count, turn_count`,
	"nextSeq": `SELECT coalesce(max(seq) + 1, 0) FROM messages WHERE session = ?`,
	// A reply split over lines (and so over two syncs) arrives as the same id again: its
	// text is the parts joined, its usage the final snapshot's.
	"message": `INSERT INTO messages (session, mid, file, role, text, ts, seq, turn, model,
			input, output, cache_read, cache_write, reasoning, gen)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (session, mid) DO UPDATE SET
			file = excluded.file,
			role = coalesce(nullif(excluded.role, ''), role),
			text = CASE WHEN text = '' THEN excluded.text WHEN excluded.text = '' OR instr(text, excluded.text) > 0 THEN text
				WHEN instr(excluded.text, text) = 1 THEN excluded.text ELSE text || char(10) || excluded.text END,
			ts = CASE WHEN ts = 0 THEN excluded.ts ELSE ts END,
			model = coalesce(nullif(excluded.model, ''), model),
			input = CASE WHEN excluded.input + excluded.output + excluded.cache_read + excluded.cache_write > 0 THEN excluded.input ELSE input END,
			output = CASE WHEN excluded.input + excluded.output + excluded.cache_read + excluded.cache_write > 0 THEN excluded.output ELSE output END,
			cache_read = CASE WHEN excluded.input + excluded.output + excluded.cache_read + excluded.cache_write > 0 THEN excluded.cache_read ELSE cache_read END,
			cache_write = CASE WHEN excluded.input + excluded.output + excluded.cache_read + excluded.cache_write > 0 THEN excluded.cache_write ELSE cache_write END,
			reasoning = CASE WHEN excluded.input + excluded.output + excluded.cache_read + excluded.cache_write > 0 THEN excluded.reasoning ELSE reasoning END,
			gen = excluded.gen, fts = 0`,
	// Before a row that may be indexed already is rewritten or deleted, its old text is kept
	// for removing it from the FTS table (indexText).
	"staleMessage":   `INSERT INTO fts_stale SELECT 0, id, text, NULL, NULL FROM messages WHERE session = ? AND mid = ? AND fts = 1`,
	"staleTool":      `INSERT INTO fts_stale SELECT 1, id, name, params, result FROM tool_calls WHERE session = ? AND cid = ? AND fts = 1`,
	"staleFile":      `INSERT INTO fts_stale SELECT 0, id, text, NULL, NULL FROM messages WHERE file = ?1 AND fts = 1`,
	"staleFileTools": `INSERT INTO fts_stale SELECT 1, id, name, params, result FROM tool_calls WHERE file = ?1 AND fts = 1`,
	// A result whose call was read in an earlier sync (or another file) completes it.
	"tool": `INSERT INTO tool_calls (session, cid, mid, file, name, params, result, status, child_session, gen, result_bytes, result_cut)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (session, cid) DO UPDATE SET
			mid = coalesce(nullif(excluded.mid, ''), mid),
			file = excluded.file,
			name = coalesce(nullif(excluded.name, ''), name),
			params = coalesce(nullif(excluded.params, ''), params),
			result = CASE WHEN excluded.status <> 'pending' THEN excluded.result ELSE result END,
			result_bytes = CASE WHEN excluded.status <> 'pending' THEN excluded.result_bytes ELSE result_bytes END,
			result_cut = CASE WHEN excluded.status <> 'pending' THEN excluded.result_cut ELSE result_cut END,
			status = CASE WHEN excluded.status <> 'pending' THEN excluded.status ELSE status END,
			child_session = coalesce(nullif(excluded.child_session, ''), child_session),
			gen = excluded.gen, fts = 0`,
	"turns": `INSERT INTO turns (session, turn, prompt, response, started, ended, gen)
		SELECT m.session, m.turn,
			CASE WHEN m.turn = 0 THEN 0 ELSE
				coalesce((SELECT id FROM messages p WHERE p.session = m.session AND p.turn = m.turn AND p.role = 'user' ORDER BY p.seq LIMIT 1), 0) END,
			coalesce((SELECT id FROM messages r WHERE r.session = m.session AND r.turn = m.turn AND r.role = 'assistant' AND r.text <> '' ORDER BY r.seq DESC LIMIT 1), 0),
			coalesce(min(nullif(m.ts, 0)), 0), max(m.ts), ?
		FROM messages m WHERE m.session = ? AND m.turn >= ? GROUP BY m.turn
		ON CONFLICT (session, turn) DO UPDATE SET prompt = excluded.prompt, response = excluded.response,
			started = excluded.started, ended = excluded.ended, gen = excluded.gen`,
	"counts": `UPDATE sessions SET
			message_count = (SELECT count(*) FROM messages WHERE session = ?1),
			turn_count = (SELECT coalesce(max(turn), 0) FROM messages WHERE session = ?1)
		WHERE id = ?1`,
	"usageSum": `UPDATE sessions SET (input_tokens, output_tokens, cache_read, cache_write, reasoning) =
			(SELECT coalesce(sum(input), 0), coalesce(sum(output), 0), coalesce(sum(cache_read), 0),
				coalesce(sum(cache_write), 0), coalesce(sum(reasoning), 0) FROM messages WHERE session = ?1)
		WHERE id = ?1`,
	"usageSet":    `UPDATE sessions SET input_tokens = ?, output_tokens = ?, cache_read = ?, cache_write = ?, reasoning = ? WHERE id = ?`,
	"title":       `UPDATE sessions SET title = ? WHERE id = ? AND title = ''`,
	"setTitle":    `UPDATE sessions SET title = ? WHERE id = ?`,
	"fileSession": `UPDATE files SET session = ? WHERE id = ?`,
	"clearFile":   `DELETE FROM messages WHERE file = ?1`,
	"clearTools":  `DELETE FROM tool_calls WHERE file = ?1`,
	"deleteFile":  `UPDATE files SET deleted = 1, error = '', synced = ? WHERE path = ? RETURNING session`,
	"deleteSession": `UPDATE sessions SET deleted = 1, gen = ?1 WHERE id = ?2
		AND NOT EXISTS (SELECT 1 FROM files WHERE session = ?2 AND deleted = 0)`,
}

func (w *writer) begin(ctx context.Context) error {
	tx, err := w.ix.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("index: begin: %w", err)
	}
	w.tx, w.st = tx, map[string]*sql.Stmt{}
	w.batch, w.batchLen = 0, 0
	return nil
}

func (w *writer) stmt(ctx context.Context, name string) (*sql.Stmt, error) {
	if s, ok := w.st[name]; ok {
		return s, nil
	}
	s, err := w.tx.PrepareContext(ctx, statements[name])
	if err != nil {
		return nil, fmt.Errorf("index: prepare %s: %w", name, err)
	}
	w.st[name] = s
	return s, nil
}

func (w *writer) exec(ctx context.Context, name string, args ...any) error {
	s, err := w.stmt(ctx, name)
	if err != nil {
		return err
	}
	if _, err := s.ExecContext(ctx, args...); err != nil {
		return fmt.Errorf("index: %s: %w", name, err)
	}
	return nil
}

// indexText brings the FTS tables up to date with the rows this transaction wrote: the old
// text of changed and deleted rows out, the new text in, a few statements per transaction.
func (w *writer) indexText(ctx context.Context) error {
	for _, q := range []string{
		`INSERT INTO message_fts (message_fts, rowid, text) SELECT 'delete', id, a FROM fts_stale WHERE kind = 0`,
		`INSERT INTO tool_fts (tool_fts, rowid, name, params, result) SELECT 'delete', id, a, b, c FROM fts_stale WHERE kind = 1`,
		`DELETE FROM fts_stale`,
		`INSERT INTO message_fts (rowid, text) SELECT id, text FROM messages WHERE fts = 0`,
		`UPDATE messages SET fts = 1 WHERE fts = 0`,
		`INSERT INTO tool_fts (rowid, name, params, result) SELECT id, name, params, result FROM tool_calls WHERE fts = 0`,
		`UPDATE tool_calls SET fts = 1 WHERE fts = 0`,
	} {
		if _, err := w.tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("index: full-text index: %w", err)
		}
	}
	return nil
}

func (w *writer) commit(ctx context.Context) error {
	if err := w.linkSubagents(ctx); err != nil {
		return err
	}
	if err := w.indexText(ctx); err != nil {
		return err
	}
	for _, s := range w.st {
		_ = s.Close()
	}
	if err := w.tx.Commit(); err != nil {
		return fmt.Errorf("index: commit: %w", err)
	}
	w.tx = nil
	return nil
}

func (w *writer) abort() {
	if w.tx != nil {
		for _, s := range w.st {
			_ = s.Close()
		}
		_ = w.tx.Rollback()
		w.tx = nil
	}
}

// finish commits what the last batch wrote. A batch that just filled was committed by write,
// and nothing was written since.
func (w *writer) finish(ctx context.Context) error {
	if w.tx == nil {
		return nil
	}
	return w.commit(ctx)
}

// spawnTools are the tools whose calls start a subagent that names its call (Claude Code's:
// Agent, Task before 2.1), as an SQL list: the partial index tool_calls_spawn holds their ids.
const spawnTools = `('Agent', 'Task')`

// linkByCall link a subagent that names the call that spawned it (Claude Code 2.1's sidechain
// metadata) to the session that made that call, at any depth: that session, message, task and
// status replace what its lines say (their session id is the top one's), and the call names it
// as its child. ?1 is the sync's generation. Each statement starts from what this sync wrote,
// on one side or the other, through an index (the spawning calls' ids, the subagents' calls).
// The unary + keeps SQLite from the index on source, which holds every session of the tool, and
// from the index on gen for the calls: a full sync is one generation, so that index would hand
// every call written so far to each batch's commit (TestLinkPlans).
var linkByCall = []string{ //nolint:gochecknoglobals // immutable
	linkSessionsByCall("sessions.gen = ?1"),
	linkSessionsByCall("+tc.gen = ?1"),
	linkCallsByChild("+tool_calls.gen = ?1"),
	linkCallsByChild("s.gen = ?1"),
}

func linkSessionsByCall(side string) string {
	return `UPDATE sessions SET
			task = coalesce(CASE WHEN json_valid(tc.params) THEN coalesce(json_extract(tc.params, '$.description'),
				json_extract(tc.params, '$.prompt')) END, sessions.task),
			task_status = CASE WHEN tc.gen <> ?1 AND sessions.task_status <> '' THEN sessions.task_status ELSE tc.status END,
			parent_session = p.sid, parent_message = tc.mid, is_subagent = 1
		FROM tool_calls tc JOIN sessions p ON p.id = tc.session
		WHERE ` + side + ` AND sessions.tool_call_id <> '' AND tc.cid = sessions.tool_call_id AND tc.name IN ` + spawnTools + `
			AND +p.source = +sessions.source AND p.id <> sessions.id`
}

func linkCallsByChild(side string) string {
	return `UPDATE tool_calls SET child_session = s.sid FROM sessions s
		WHERE ` + side + ` AND tool_calls.name IN ` + spawnTools + ` AND s.tool_call_id = tool_calls.cid AND s.tool_call_id <> ''
			AND tool_calls.child_session = '' AND s.id <> tool_calls.session`
}

// linkSubagents fills a subagent session's task, status and parent from the call that
// started it, in whichever order the two were read. A status the subagent's own records gave
// (Session.TaskStatus) stands when only the subagent was read again: it is newer than the
// call's, which a nexus parent's transcript does not repeat.
func (w *writer) linkSubagents(ctx context.Context) error {
	if w.linked {
		return nil
	}
	_, err := w.tx.ExecContext(ctx, `UPDATE sessions SET
			task = coalesce(CASE WHEN json_valid(tc.params) THEN coalesce(json_extract(tc.params, '$.description'),
				json_extract(tc.params, '$.task'), json_extract(tc.params, '$.message'), json_extract(tc.params, '$.prompt')) END, sessions.task),
			task_status = CASE WHEN tc.gen <> ?1 AND sessions.task_status <> '' THEN sessions.task_status ELSE tc.status END,
			tool_call_id = coalesce(nullif(sessions.tool_call_id, ''), tc.cid),
			parent_session = coalesce(nullif(sessions.parent_session, ''), p.sid),
			parent_message = coalesce(nullif(sessions.parent_message, ''), tc.mid),
			is_subagent = 1
		FROM tool_calls tc JOIN sessions p ON p.id = tc.session
		WHERE tc.child_session = sessions.sid AND tc.child_session <> '' AND (tc.gen = ?1 OR sessions.gen = ?1)`, w.gen)
	if err != nil {
		return fmt.Errorf("index: link subagents: %w", err)
	}
	for _, q := range linkByCall {
		if _, err := w.tx.ExecContext(ctx, q, w.gen); err != nil {
			return fmt.Errorf("index: link subagents by their spawning call: %w", err)
		}
	}
	w.linked = true
	return nil
}

func (w *writer) write(ctx context.Context, j *job, sum *Summary) error {
	if j.cont && w.failed[j.path] {
		return nil
	}
	if j.err != nil && !j.failed {
		sum.Errors = append(sum.Errors, FileError{Source: j.src.Name(), Path: j.path, Error: j.err.Error()})
		return nil
	}
	if w.tx == nil {
		if err := w.begin(ctx); err != nil {
			return err
		}
	}
	if j.failed {
		return w.fail(ctx, j, j.err, sum)
	}
	switch j.change {
	case changeUnchanged:
		sum.Unchanged++
		return nil
	case changeDeleted:
		sum.Deleted++
		return w.markDeleted(ctx, j)
	}
	var d Summary
	if err := w.writeIsolated(ctx, j, &d); err != nil {
		var fe *fileError
		if errors.As(err, &fe) {
			return w.fail(ctx, j, fe.err, sum)
		}
		return fmt.Errorf("%s: %w", j.path, err)
	}
	switch {
	case j.cont:
	case j.change == changeNew:
		sum.New++
	case j.change == changeAppended:
		sum.Appended++
	case j.change == changeRewritten:
		sum.Rewritten++
	}
	sum.Bytes += j.read
	sum.Cut += j.res.Cut
	for k, v := range j.res.Skipped {
		if sum.Skipped == nil {
			sum.Skipped = map[string]int{}
		}
		sum.Skipped[j.src.Name()+": "+k] += v
	}
	if !j.cont {
		sum.Sessions += d.Sessions
	}
	sum.Messages += d.Messages
	sum.ToolCalls += d.ToolCalls
	w.batch++
	w.batchLen += j.read
	if w.batch >= batchFiles || w.batchLen >= batchBytes {
		return w.commit(ctx)
	}
	return nil
}

// fileError is a file's read or write that will fail the same way until the file changes.
type fileError struct{ err error }

func (e *fileError) Error() string { return e.err.Error() }
func (e *fileError) Unwrap() error { return e.err }

// writeIsolated writes one file's rows in a savepoint of the batch, so that a file whose rows
// fail (a panic, a value SQLite refuses) is rolled back alone: the error is a *fileError, and
// the batch and the sync go on. Any other error (the database's own) fails the sync.
func (w *writer) writeIsolated(ctx context.Context, j *job, d *Summary) (err error) {
	if _, err := w.tx.ExecContext(ctx, "SAVEPOINT file"); err != nil {
		return fmt.Errorf("index: savepoint: %w", err)
	}
	defer func() {
		if v := recover(); v != nil {
			err = &fileError{panicError(v)}
		}
		if err == nil {
			if _, rerr := w.tx.ExecContext(ctx, "RELEASE file"); rerr != nil {
				err = fmt.Errorf("index: release: %w", rerr)
			}
			return
		}
		if refused(err) {
			err = &fileError{err}
		}
		var fe *fileError
		if !errors.As(err, &fe) {
			return // the sync fails and the batch is rolled back whole
		}
		for _, q := range []string{"ROLLBACK TO file", "RELEASE file"} {
			if _, rerr := w.tx.ExecContext(ctx, q); rerr != nil {
				err = fmt.Errorf("index: %s after %w: %w", strings.ToLower(q), fe.err, rerr)
				return
			}
		}
	}()
	if w.ix.testHook != nil {
		w.ix.testHook("write", j.path)
	}
	return w.writeFile(ctx, j, d)
}

// refused reports whether err is SQLite refusing this file's values (a constraint, a type, a
// size), which would refuse them again, rather than the database failing.
func refused(err error) bool {
	var c interface{ Code() int }
	if !errors.As(err, &c) {
		return false
	}
	switch c.Code() & 0xff {
	case sqliteTooBig, sqliteConstraint, sqliteMismatch, sqliteRange:
		return true
	}
	return false
}

// SQLite's primary result codes that refuse a value.
const (
	sqliteTooBig     = 18
	sqliteConstraint = 19
	sqliteMismatch   = 20
	sqliteRange      = 25
)

// fail records a file whose read or write failed for good: its size, mtime and inode (so it
// is skipped until it changes) and the error, reported by Stats. Its offset and hash stay
// those of its last good read, so once it changes it is read again from there.
func (w *writer) fail(ctx context.Context, j *job, err error, sum *Summary) error {
	msg := err.Error()
	w.failed[j.path] = true
	sum.Errors = append(sum.Errors, FileError{Source: j.src.Name(), Path: j.path, Error: msg + " (skipped until the file changes)"})
	return w.exec(ctx, "failFile", j.src.Name(), j.path, j.size, j.mtime, int64(j.inode), msg, ms(w.ix.now())) //nolint:gosec // an inode fits
}

// panicError is a recovered panic as an error naming where it happened.
func panicError(v any) error {
	return fmt.Errorf("panic: %v%s", v, panicSite())
}

// panicSite is " at" the function and line that panicked: the first frame outside the runtime
// below runtime.gopanic, as a deferred recover sees the stack.
func panicSite() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	below := false
	for {
		f, more := frames.Next()
		if below && !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf(" at %s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
		}
		below = below || f.Function == "runtime.gopanic"
		if !more {
			return ""
		}
	}
}

func (w *writer) markDeleted(ctx context.Context, j *job) error {
	s, err := w.stmt(ctx, "deleteFile")
	if err != nil {
		return err
	}
	var sess int64
	err = s.QueryRowContext(ctx, ms(w.ix.now()), j.path).Scan(&sess)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("index: mark %s deleted: %w", j.path, err)
	}
	if sess != 0 {
		return w.exec(ctx, "deleteSession", w.gen, sess)
	}
	return nil
}

// writeFile writes a parse's rows and counts them in sum.
func (w *writer) writeFile(ctx context.Context, j *job, sum *Summary) error {
	res := j.res
	skipped := ""
	if len(res.Skipped) > 0 {
		b, _ := json.Marshal(res.Skipped)
		skipped = string(b)
	}
	fs, err := w.stmt(ctx, "file")
	if err != nil {
		return err
	}
	lines := res.Lines
	size := j.size
	if res.More {
		// Not the file's size until its last piece is written: a sync that stops in between
		// leaves the file changed, to be read on from this piece's offset.
		size = res.Offset
	}
	var fileID, prevSession int64
	if err := fs.QueryRowContext(ctx, j.src.Name(), j.path, size, j.mtime, int64(j.inode), //nolint:gosec // an inode fits
		res.Offset, j.hash, lines, skipped, ms(w.ix.now()), j.change != changeAppended || res.Whole, res.Cut).Scan(&fileID, &prevSession); err != nil {
		return fmt.Errorf("index: file: %w", err)
	}
	// A file read whole (a database of many sessions) replaces its rows as a rewritten one.
	rewritten := j.change == changeRewritten || res.Whole
	if rewritten {
		for _, st := range []string{"staleFile", "staleFileTools"} {
			if err := w.exec(ctx, st, fileID); err != nil {
				return err
			}
		}
		if err := w.exec(ctx, "clearFile", fileID); err != nil {
			return err
		}
		if err := w.exec(ctx, "clearTools", fileID); err != nil {
			return err
		}
	}
	for _, r := range res.Also {
		if err := w.writeSession(ctx, j, r, fileID, 0, rewritten, sum, new(int64)); err != nil {
			return err
		}
	}
	var sessID int64
	if err := w.writeSession(ctx, j, res, fileID, prevSession, rewritten, sum, &sessID); err != nil || sessID == 0 {
		return err
	}
	if prevSession != sessID {
		return w.exec(ctx, "fileSession", sessID, fileID)
	}
	return nil
}

// writeSession writes one session's rows of a parse of the file fileID and sets *id to the
// session's row (0 when there was nothing to write).
func (w *writer) writeSession(ctx context.Context, j *job, res *source.Result, fileID, prevSession int64, rewritten bool, sum *Summary, id *int64) error {
	s := res.Session
	if prevSession == 0 && res.Lines == 0 && !res.Whole {
		return nil // nothing yet: an empty file, or only a partial first line, is no session
	}
	if s.ID == "" {
		if len(res.Messages) == 0 && len(res.ToolCalls) == 0 && prevSession == 0 {
			return nil
		}
		s.ID = j.path
	}
	ss, err := w.stmt(ctx, "session")
	if err != nil {
		return err
	}
	var sessID int64
	var msgCount, turnBase int
	if err := ss.QueryRowContext(ctx, j.src.Name(), s.ID, j.path, s.Project, s.Model, ms(s.Created), ms(s.Updated),
		s.Title, s.ParentSession, s.ParentMessage, s.ToolCallID, s.IsSubagent, s.ForkOrigin,
		res.UsageCumulative, w.gen, s.TaskStatus).Scan(&sessID, &msgCount, &turnBase); err != nil {
		return fmt.Errorf("index: session: %w", err)
	}
	sum.Sessions++
	// A session seen before (in an earlier sync, or another file of this one) may already
	// hold rows with these ids.
	existing := msgCount > 0 || w.seen[sessID]
	w.seen[sessID] = true
	w.linked = false
	if rewritten {
		turnBase = 0 // the file is read again from its start
	}
	var seqBase int64
	if msgCount > 0 && !rewritten {
		st, err := w.stmt(ctx, "nextSeq")
		if err != nil {
			return err
		}
		if err := st.QueryRowContext(ctx, sessID).Scan(&seqBase); err != nil {
			return fmt.Errorf("index: next seq: %w", err)
		}
	}
	firstTurn := -1
	for i := range res.Messages {
		m := &res.Messages[i]
		// A parse counts turns from its own first prompt; what comes before it continues
		// the session's last turn.
		turn := turnBase + m.Turn
		if firstTurn < 0 {
			firstTurn = turn
		}
		if existing {
			if err := w.exec(ctx, "staleMessage", sessID, m.ID); err != nil {
				return err
			}
		}
		if err := w.exec(ctx, "message", sessID, m.ID, fileID, m.Role, m.Text, ms(m.Timestamp), seqBase+int64(m.Seq), turn,
			m.Model, m.Usage.Input, m.Usage.Output, m.Usage.CacheRead, m.Usage.CacheWrite, m.Usage.Reasoning, w.gen); err != nil {
			return err
		}
	}
	sum.Messages += len(res.Messages)
	if err := w.writeOrigins(ctx, j.src.Name(), s.ID, res.Messages); err != nil {
		return err
	}
	for i := range res.ToolCalls {
		tc := &res.ToolCalls[i]
		cid := tc.ID
		if cid == "" {
			cid = fmt.Sprintf("%s#%d", tc.MessageID, i)
		}
		if existing {
			if err := w.exec(ctx, "staleTool", sessID, cid); err != nil {
				return err
			}
		}
		var n int64
		if i < len(j.resultBytes) {
			n = j.resultBytes[i]
		}
		if err := w.exec(ctx, "tool", sessID, cid, tc.MessageID, fileID, tc.Name, tc.Params, tc.Result, tc.Status, tc.ChildSession, w.gen,
			n, tc.ResultCut); err != nil {
			return err
		}
	}
	sum.ToolCalls += len(res.ToolCalls)
	if firstTurn >= 0 {
		if err := w.exec(ctx, "turns", w.gen, sessID, firstTurn); err != nil {
			return err
		}
	}
	if len(res.Messages) > 0 || rewritten {
		if err := w.exec(ctx, "counts", sessID); err != nil {
			return err
		}
	}
	if res.UsageCumulative {
		u := res.Usage
		if u.Total()+u.Reasoning > 0 {
			if err := w.exec(ctx, "usageSet", u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Reasoning, sessID); err != nil {
				return err
			}
		}
	} else if len(res.Messages) > 0 || rewritten {
		if err := w.exec(ctx, "usageSum", sessID); err != nil {
			return err
		}
	}
	if s.Title != "" && (j.cont || res.Whole) {
		// A piece's title is the file's so far (its parse went on from the piece before's);
		// a database's is the tool's latest.
		if err := w.exec(ctx, "setTitle", s.Title, sessID); err != nil {
			return err
		}
	}
	if s.Title == "" {
		if t := fallbackTitle(res.Messages); t != "" {
			if err := w.exec(ctx, "title", t, sessID); err != nil {
				return err
			}
		}
	}
	*id = sessID
	return nil
}

// titleMax bounds a title taken from a first prompt.
const titleMax = 100

// fallbackTitle is a session's first user prompt's first line, for tools that keep no title;
// text the tool injected is no prompt.
func fallbackTitle(msgs []source.Message) string {
	for i := range msgs {
		if msgs[i].Role != "user" || msgs[i].Context {
			continue
		}
		t := strings.TrimSpace(msgs[i].Text)
		if t == "" {
			continue
		}
		if k := strings.IndexByte(t, '\n'); k >= 0 {
			t = strings.TrimSpace(t[:k])
		}
		if len(t) > titleMax {
			t = strings.TrimRight(excerptUTF8(t, titleMax), " ") + "…"
		}
		return t
	}
	return ""
}

// excerptUTF8 cuts s to at most n bytes on a rune boundary.
func excerptUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// Gen is the index's current generation: the number of syncs that wrote, the cursor of the
// newest rows (Export).
func (ix *Index) Gen(ctx context.Context) (int64, error) {
	var g int64
	if err := ix.db.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = 'gen'").Scan(&g); err != nil {
		return 0, fmt.Errorf("index: generation: %w", err)
	}
	return g, nil
}
