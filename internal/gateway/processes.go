package gateway

import (
	"net/http"
	"strconv"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/process"
)

// processRoutes serves Options.Processes (docs/observers.md): the managed processes under
// /v1/processes and the servers under /v1/servers.
func (s *server) processRoutes(mux *http.ServeMux) {
	if s.opt.Processes == nil {
		return
	}
	p := abi.APIPrefix
	mux.HandleFunc("GET "+p+"/processes", s.processList)
	mux.HandleFunc("POST "+p+"/processes", s.processStart)
	mux.HandleFunc("GET "+p+"/processes/{id}", s.processGet)
	mux.HandleFunc("POST "+p+"/processes/{id}/stop", s.processStop)
	mux.HandleFunc("POST "+p+"/processes/{id}/restart", s.processRestart)
	mux.HandleFunc("GET "+p+"/processes/{id}/logs", s.processLogs)
	mux.HandleFunc("GET "+p+"/servers", s.serverList)
	mux.HandleFunc("POST "+p+"/servers", s.serverAdd)
	mux.HandleFunc("DELETE "+p+"/servers/{id}", s.serverRemove)
}

func (s *server) processList(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]any{"processes": s.opt.Processes.List()})
}

func (s *server) processStart(w http.ResponseWriter, r *http.Request) {
	var spec process.Spec
	if !s.decode(w, r, &spec) {
		return
	}
	s.answer(w, http.StatusCreated)(s.opt.Processes.Start(r.Context(), spec))
}

func (s *server) processGet(w http.ResponseWriter, r *http.Request) {
	in, err := s.opt.Processes.Get(r.PathValue("id"))
	if err != nil {
		s.fail(w, err, http.StatusNotFound)
		return
	}
	s.writeJSON(w, http.StatusOK, in)
}

func (s *server) processStop(w http.ResponseWriter, r *http.Request) {
	if !s.decodeNone(w, r) {
		return
	}
	s.answer(w, http.StatusOK)(s.opt.Processes.Stop(r.Context(), r.PathValue("id")))
}

func (s *server) processRestart(w http.ResponseWriter, r *http.Request) {
	if !s.decodeNone(w, r) {
		return
	}
	s.answer(w, http.StatusOK)(s.opt.Processes.Restart(r.Context(), r.PathValue("id")))
}

// processLogs answers the newest lines at once (?lines=N, default 100, at most the ring);
// following them live is a debug-stream session's job.
func (s *server) processLogs(w http.ResponseWriter, r *http.Request) {
	q, err := readQuery(r, []string{"lines"}, nil)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	n := 100
	if v := q.get("lines"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "lines must be a non-negative integer, got %q", v), 0)
			return
		}
	}
	lines, err := s.opt.Processes.Tail(r.PathValue("id"), n)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	if lines == nil {
		lines = []process.Line{}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"lines": lines})
}

func (s *server) serverList(w http.ResponseWriter, _ *http.Request) {
	all, err := s.opt.Processes.Servers()
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"servers": all})
}

func (s *server) serverAdd(w http.ResponseWriter, r *http.Request) {
	var srv process.Server
	if !s.decode(w, r, &srv) {
		return
	}
	s.answer(w, http.StatusCreated)(s.opt.Processes.AddServer(srv))
}

func (s *server) serverRemove(w http.ResponseWriter, r *http.Request) {
	if err := s.opt.Processes.RemoveServer(r.PathValue("id")); err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("id")})
}
