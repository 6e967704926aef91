package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/index"
)

// indexRoutes serves Options.Index under /v1/index (docs/ABI.md, History index): search, the
// sessions, one session, the counts, and a sync on demand. Query parameters are read strictly:
// an unknown one, or a single-valued one given twice, is INVALID_ARGUMENT rather than ignored,
// so a misspelt filter never widens a search silently.
func (s *server) indexRoutes(mux *http.ServeMux) {
	if s.opt.Index == nil {
		return
	}
	p := abi.APIPrefix + "/index"
	mux.HandleFunc("GET "+p+"/search", s.indexSearch)
	mux.HandleFunc("GET "+p+"/sessions", s.indexSessions)
	mux.HandleFunc("GET "+p+"/sessions/{id}", s.indexShow)
	mux.HandleFunc("GET "+p+"/stats", s.indexStats)
	mux.HandleFunc("POST "+p+"/sync", s.indexSync)
}

// query reads a request's query parameters: each must be one of single (at most once) or
// multi (repeatable).
type query struct {
	v  url.Values
	id string
}

func readQuery(r *http.Request, single, multi []string) (query, error) {
	q := query{v: r.URL.Query(), id: r.PathValue("id")}
	allowed := map[string]bool{}
	for _, k := range single {
		allowed[k] = false
	}
	for _, k := range multi {
		allowed[k] = true
	}
	for k, vs := range q.v {
		repeatable, ok := allowed[k]
		switch {
		case !ok:
			return q, abi.Errorf(abi.CodeInvalidArgument, q.id, "unknown query parameter %q", k)
		case !repeatable && len(vs) > 1:
			return q, abi.Errorf(abi.CodeInvalidArgument, q.id, "query parameter %q is given %d times", k, len(vs))
		}
	}
	return q, nil
}

func (q query) get(k string) string { return q.v.Get(k) }

func (q query) int(k string) (int, error) {
	n, err := intParam(q.v.Get(k), k)
	if err != nil {
		return 0, abi.Errorf(abi.CodeInvalidArgument, q.id, "%s must be a non-negative integer, got %q", k, q.v.Get(k))
	}
	return n, nil
}

func (q query) sources() ([]string, error) {
	srcs := q.v["source"]
	if _, err := index.Sources(srcs); err != nil {
		return nil, err //nolint:wrapcheck // INVALID_ARGUMENT naming the sources
	}
	return srcs, nil
}

func (s *server) indexSearch(w http.ResponseWriter, r *http.Request) {
	q, err := readQuery(r, []string{"q", "project", "role", "since", "tool", "origin", "limit"}, []string{"source"})
	var o index.SearchOptions
	if err == nil {
		o, err = searchOptions(q)
	}
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	hits, err := s.opt.Index.Search(r.Context(), o)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	if hits == nil {
		hits = []index.Hit{}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"hits": hits})
}

func searchOptions(q query) (index.SearchOptions, error) {
	o := index.SearchOptions{Query: q.get("q"), Project: q.get("project"), Role: q.get("role"), Tool: q.get("tool"), Origin: q.get("origin")}
	if o.Query == "" {
		return o, abi.Errorf(abi.CodeInvalidArgument, "", "q (the query) is required")
	}
	var err error
	if o.Sources, err = q.sources(); err != nil {
		return o, err
	}
	if v := q.get("since"); v != "" {
		if o.Since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return o, abi.Errorf(abi.CodeInvalidArgument, "", "since must be an RFC 3339 time, got %q", v)
		}
	}
	o.Limit, err = q.int("limit")
	return o, err
}

func (s *server) indexSessions(w http.ResponseWriter, r *http.Request) {
	q, err := readQuery(r, []string{"project", "limit"}, []string{"source"})
	var o index.SessionsOptions
	if err == nil {
		o.Project = q.get("project")
		if o.Sources, err = q.sources(); err == nil {
			o.Limit, err = q.int("limit")
		}
	}
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	list, err := s.opt.Index.Sessions(r.Context(), o)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	if list == nil {
		list = []index.SessionInfo{}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"sessions": list})
}

func (s *server) indexShow(w http.ResponseWriter, r *http.Request) {
	q, err := readQuery(r, []string{"source", "around", "context"}, nil)
	o := index.ShowOptions{Session: r.PathValue("id")}
	if err == nil {
		o.Source, o.Around = q.get("source"), q.get("around")
		if o.Source != "" {
			_, err = index.Sources([]string{o.Source})
		}
		if err == nil {
			o.Context, err = q.int("context")
		}
	}
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	d, err := s.opt.Index.Show(r.Context(), o)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, d)
}

func (s *server) indexStats(w http.ResponseWriter, r *http.Request) {
	if _, err := readQuery(r, nil, nil); err != nil {
		s.fail(w, err, 0)
		return
	}
	st, err := s.opt.Index.Stats(r.Context())
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, st)
}

// IndexSyncRequest is the optional body of POST /v1/index/sync: which sources to sync (all when
// none). The directories are the gateway's own; a client names none.
type IndexSyncRequest struct {
	Sources []string `json:"sources,omitempty"`
}

func (s *server) indexSync(w http.ResponseWriter, r *http.Request) {
	if _, err := readQuery(r, nil, nil); err != nil {
		s.fail(w, err, 0)
		return
	}
	var req IndexSyncRequest
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	opts := s.opt.IndexSync
	if len(req.Sources) > 0 {
		if _, err := index.Sources(req.Sources); err != nil {
			s.fail(w, err, 0)
			return
		}
		opts.Sources = req.Sources
	}
	sum, err := s.opt.Index.Sync(r.Context(), opts)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, sum)
}

// IndexOptions configure the history index a daemon keeps (docs/history.md).
type IndexOptions struct {
	// Sync is what the index reads: its sources, their directories and the environment that
	// finds the default ones (nil Env: the process's home and environment). POST
	// /v1/index/sync reads the same.
	Sync index.SyncOptions
}

// startIndex opens state/index.db and follows the transcripts with index.Watch until ctx ends.
// stop ends the watch, waits for it, and closes the database.
func startIndex(ctx context.Context, stateDir string, o *IndexOptions, logger *slog.Logger) (ix *index.Index, stop func(), err error) {
	getenv := os.Getenv
	if o != nil && o.Sync.Env != nil && o.Sync.Env.Getenv != nil {
		getenv = o.Sync.Env.Getenv
	}
	resultMax, err := index.ResultMaxFromEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	ix, err = index.Open(ctx, filepath.Join(stateDir, index.FileName), index.Options{ResultMax: resultMax})
	if err != nil {
		return nil, nil, fmt.Errorf("open the history index (nexus serve --no-index serves without it): %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	syncs := 0
	go func() {
		defer close(done)
		err := ix.Watch(wctx, index.WatchOptions{SyncOptions: o.Sync, OnSync: func(sum *index.Summary, err error) {
			syncs++
			logSync(logger, syncs == 1, sum, err, wctx.Err() != nil)
		}})
		if err != nil && wctx.Err() == nil {
			logger.Error("history index: watching the transcripts stopped; the index is no longer kept fresh", "err", err)
		}
	}()
	return ix, func() {
		cancel()
		<-done
		if err := ix.Close(); err != nil {
			logger.Warn("history index: close", "err", err)
		}
	}, nil
}

// logSync logs a watcher's sync: the first (the full one at start) at info level, the later
// ones, one per change to a transcript, at debug level; failures and unreadable files as
// warnings. A sync cut short by the gateway stopping is not a failure.
func logSync(logger *slog.Logger, first bool, sum *index.Summary, err error, stopping bool) {
	if err != nil {
		if !stopping {
			logger.Warn("history index: sync failed", "err", err)
		}
		return
	}
	if sum == nil {
		return
	}
	level := slog.LevelDebug
	if first {
		level = slog.LevelInfo
	}
	logger.Log(context.Background(), level, "history index synced", "files", sum.Files, "new", sum.New, "appended", sum.Appended,
		"rewritten", sum.Rewritten, "deleted", sum.Deleted, "bytes", sum.Bytes, "messages", sum.Messages, "duration_ms", sum.DurationMS)
	const most = 5
	for i, fe := range sum.Errors {
		if i == most {
			logger.Warn("history index: more files not read", "count", len(sum.Errors)-most)
			break
		}
		logger.Warn("history index: file not read", "source", fe.Source, "path", fe.Path, "err", fe.Error)
	}
}
