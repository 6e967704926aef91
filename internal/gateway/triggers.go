package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/trigger"
)

// MaxHookBody bounds a webhook's body: a queued message's limit (1 MiB), which leaves room for
// the line that names the hook.
const MaxHookBody = 1 << 20

// triggerRoutes serves Options.Triggers (docs/triggers.md): the cron jobs under /v1/cron and
// the webhooks under /v1/hooks, managed with the gateway's token; POST /v1/hooks/{id} itself
// is authenticated by the hook's own secret instead (hookPath).
func (s *server) triggerRoutes(mux *http.ServeMux) {
	if s.opt.Triggers == nil {
		return
	}
	p := abi.APIPrefix
	mux.HandleFunc("GET "+p+"/cron", s.cronList)
	mux.HandleFunc("POST "+p+"/cron", s.cronAdd)
	mux.HandleFunc("DELETE "+p+"/cron/{id}", s.cronRemove)
	mux.HandleFunc("POST "+p+"/cron/{id}/run", s.cronRun)
	mux.HandleFunc("GET "+p+"/hooks", s.hookList)
	mux.HandleFunc("POST "+p+"/hooks", s.hookAdd)
	mux.HandleFunc("DELETE "+p+"/hooks/{id}", s.hookRemove)
	mux.HandleFunc("POST "+p+"/hooks/{id}", s.hookCall)
}

// hookPath reports whether r calls a webhook (POST /v1/hooks/{id}): the one request the
// bearer token does not guard, since its caller (a CI system, a forge) has the hook's secret
// and nothing else.
func hookPath(r *http.Request) bool {
	id, ok := strings.CutPrefix(r.URL.Path, abi.APIPrefix+"/hooks/")
	return ok && r.Method == http.MethodPost && id != "" && !strings.Contains(id, "/")
}

func (s *server) cronList(w http.ResponseWriter, r *http.Request) {
	jobs, err := s.opt.Triggers.Jobs(r.Context())
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	if jobs == nil {
		jobs = []trigger.Job{}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
}

func (s *server) cronAdd(w http.ResponseWriter, r *http.Request) {
	var j trigger.Job
	if !s.decode(w, r, &j) {
		return
	}
	s.answer(w, http.StatusCreated)(s.opt.Triggers.AddJob(r.Context(), j))
}

func (s *server) cronRemove(w http.ResponseWriter, r *http.Request) {
	if err := s.opt.Triggers.RemoveJob(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("id")})
}

func (s *server) cronRun(w http.ResponseWriter, r *http.Request) {
	if !s.decodeNone(w, r) {
		return
	}
	id, key, err := s.opt.Triggers.RunNow(r.Context(), r.PathValue("id"))
	if id == "" {
		s.fail(w, err, 0)
		return
	}
	out := map[string]any{"messageId": id, "sessionKey": key}
	if err != nil {
		out["warning"] = err.Error()
	}
	s.writeJSON(w, http.StatusAccepted, out)
}

func (s *server) hookList(w http.ResponseWriter, r *http.Request) {
	hooks, err := s.opt.Triggers.Store.Hooks(r.Context())
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	if hooks == nil {
		hooks = []trigger.Hook{}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"hooks": hooks})
}

func (s *server) hookAdd(w http.ResponseWriter, r *http.Request) {
	var h trigger.Hook
	if !s.decode(w, r, &h) {
		return
	}
	if h.Secret != "" {
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "a hook's secret is made by the gateway"), 0)
		return
	}
	s.answer(w, http.StatusCreated)(s.opt.Triggers.Store.AddHook(r.Context(), h))
}

func (s *server) hookRemove(w http.ResponseWriter, r *http.Request) {
	if err := s.opt.Triggers.Store.RemoveHook(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("id")})
}

// hookCall delivers a webhook's body once its secret checks out. The secret comes from the
// headers, so a caller without it is refused before its body is read.
func (s *server) hookCall(w http.ResponseWriter, r *http.Request) {
	secret, _ := bearer(r.Header.Get("Authorization"))
	if v := r.Header.Get("X-Nexus-Hook-Secret"); v != "" {
		secret = v
	}
	sig, timed := r.Header.Get("X-Hub-Signature-256"), r.Header.Get("X-Nexus-Signature")
	if secret == "" && sig == "" && timed == "" {
		s.refuse(w, abi.Errorf(abi.CodeAuthenticationInvalid, "", "the hook's secret is missing or wrong"), 0)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxHookBody))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			s.refuse(w, abi.Errorf(abi.CodeInvalidArgument, "", "a webhook body over %d bytes", MaxHookBody), http.StatusRequestEntityTooLarge)
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.refuse(w, abi.Errorf(abi.CodeConnectionLost, "", "request body not received within %s", s.opt.BodyTimeout), http.StatusRequestTimeout)
		default:
			s.refuse(w, abi.Errorf(abi.CodeConnectionLost, "", "read request body: %v", err), http.StatusBadRequest)
		}
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	s.answer(w, http.StatusAccepted)(s.opt.Triggers.CallHook(r.Context(), trigger.HookCall{ID: r.PathValue("id"), Secret: secret, Signature: sig,
		TimedSignature: timed, Timestamp: r.Header.Get("X-Nexus-Timestamp"), Body: body, ContentType: r.Header.Get("Content-Type")}))
}
