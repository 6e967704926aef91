package gateway

import (
	"net/http"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/roadmap"
)

// roadmapRoutes serves Options.Roadmaps under /v1/roadmaps (docs/observers.md).
func (s *server) roadmapRoutes(mux *http.ServeMux) {
	if s.opt.Roadmaps == nil {
		return
	}
	p := abi.APIPrefix + "/roadmaps"
	mux.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) {
		s.writeJSON(w, http.StatusOK, map[string]any{"roadmaps": s.opt.Roadmaps.List()})
	})
	mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Title string `json:"title"`
		}
		if !s.decode(w, r, &req) {
			return
		}
		s.answer(w, http.StatusCreated)(s.opt.Roadmaps.Create(req.Title))
	})
	mux.HandleFunc("GET "+p+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.answer(w, http.StatusOK)(s.opt.Roadmaps.Get(r.PathValue("id")))
	})
	mux.HandleFunc("POST "+p+"/{id}/items", func(w http.ResponseWriter, r *http.Request) {
		var req roadmap.Item
		if !s.decode(w, r, &req) {
			return
		}
		s.answer(w, http.StatusCreated)(s.opt.Roadmaps.AddItem(r.PathValue("id"), req.Title, req.Status))
	})
	mux.HandleFunc("POST "+p+"/{id}/items/{item}", func(w http.ResponseWriter, r *http.Request) {
		var req roadmap.Item
		if !s.decode(w, r, &req) {
			return
		}
		s.answer(w, http.StatusOK)(s.opt.Roadmaps.UpdateItem(r.PathValue("id"), r.PathValue("item"), req.Title, req.Status))
	})
}

// answer writes v with status, or err as the ABI's error answer.
func (s *server) answer(w http.ResponseWriter, status int) func(v any, err error) {
	return func(v any, err error) {
		if err != nil {
			s.fail(w, err, 0)
			return
		}
		s.writeJSON(w, status, v)
	}
}
