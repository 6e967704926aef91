package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
)

// chatRoutes serves Options.Chats under /v1/chats (docs/ABI.md, Conversations). A chat is
// named by one path segment (a key, a session id or a label, path-escaped); the routes without
// one (list, import, recover) cannot be taken for a chat, since their methods or lengths
// differ.
func (s *server) chatRoutes(mux *http.ServeMux) {
	if s.opt.Chats == nil {
		return
	}
	p := abi.APIPrefix + "/chats"
	mux.HandleFunc("GET "+p, s.chatList)
	mux.HandleFunc("POST "+p+"/import", s.chatImport)
	mux.HandleFunc("POST "+p+"/recover", s.chatRecover)
	mux.HandleFunc("GET "+p+"/{ref}", s.chatShow)
	mux.HandleFunc("GET "+p+"/{ref}/history", s.chatHistory)
	mux.HandleFunc("GET "+p+"/{ref}/tree", s.chatTree)
	mux.HandleFunc("GET "+p+"/{ref}/export", s.chatExport)
	mux.HandleFunc("POST "+p+"/{ref}/fork", chatCommand(s, s.opt.Chats.Fork))
	mux.HandleFunc("POST "+p+"/{ref}/label", chatCommand(s, s.opt.Chats.Label))
	mux.HandleFunc("POST "+p+"/{ref}/name", chatCommand(s, s.opt.Chats.Name))
	mux.HandleFunc("POST "+p+"/{ref}/compact", chatCommand(s, s.opt.Chats.Compact))
	mux.HandleFunc("POST "+p+"/{ref}/resolve", chatCommand(s, s.opt.Chats.Resolve))
	mux.HandleFunc("POST "+p+"/{ref}/reset", chatNoArgs(s, s.opt.Chats.Reset))
	mux.HandleFunc("POST "+p+"/{ref}/archive", chatNoArgs(s, s.opt.Chats.Archive))
}

// logChat records a chat request at debug level: with --log-level debug the log shows which
// chat operations the gateway carried out.
func (s *server) logChat(r *http.Request) {
	s.opt.Logger.Debug("chat request", "method", r.Method, "path", r.URL.EscapedPath())
}

// chatCommand serves a POST whose body is the operation's request.
func chatCommand[Req, Res any](s *server, op func(ctx context.Context, ref string, req Req) (*Res, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.logChat(r)
		var req Req
		if !s.decode(w, r, &req) {
			return
		}
		out, err := op(r.Context(), r.PathValue("ref"), req)
		if err != nil {
			s.fail(w, err, 0)
			return
		}
		s.writeJSON(w, http.StatusOK, out)
	}
}

// decodeNone accepts a command without arguments: no body, or an empty object.
func (s *server) decodeNone(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength == 0 {
		return true
	}
	var none struct{}
	return s.decode(w, r, &none)
}

// chatNoArgs serves a POST without arguments on a chat.
func chatNoArgs[Res any](s *server, op func(ctx context.Context, ref string) (*Res, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.logChat(r)
		if !s.decodeNone(w, r) {
			return
		}
		out, err := op(r.Context(), r.PathValue("ref"))
		if err != nil {
			s.fail(w, err, 0)
			return
		}
		s.writeJSON(w, http.StatusOK, out)
	}
}

func (s *server) chatRecover(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	if !s.decodeNone(w, r) {
		return
	}
	out, err := s.opt.Chats.Recover(r.Context())
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, out)
}

func (s *server) chatList(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	q := r.URL.Query()
	opts := conversation.ListOptions{Agent: q.Get("agent"), Channel: q.Get("channel"), Label: q.Get("label"), Search: q.Get("search")}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "since must be an RFC 3339 time, got %q", v), 0)
			return
		}
		opts.Since = t
	}
	var err error
	if opts.Limit, err = intParam(q.Get("limit"), "limit"); err != nil {
		s.fail(w, err, 0)
		return
	}
	items, err := s.opt.Chats.List(r.Context(), opts)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"chats": items})
}

// intParam reads a non-negative integer query parameter ("" is 0).
func intParam(v, name string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "", "%s must be a non-negative integer, got %q", name, v)
	}
	return n, nil
}

// boolParam reads a boolean query parameter: true or 1, false or 0, "" is false.
func boolParam(v, name string) (bool, error) {
	switch v {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, abi.Errorf(abi.CodeInvalidArgument, "", "%s must be true or false, got %q", name, v)
}

func (s *server) chatShow(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	out, err := s.opt.Chats.Show(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, out)
}

// streamWriter writes a streamed answer. On the TCP listener every write must complete
// within WriteTimeout (a reader that takes nothing for that long is cut off, as on every
// route); on the unix socket the answer waits for its reader as a pipe would, so
// `nexus chat history KEY | less` may sit at a prompt.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *server) streamWriter(w http.ResponseWriter) *streamWriter {
	sw := &streamWriter{w: w, rc: http.NewResponseController(w)}
	if s.opt.Token != "" {
		sw.timeout = s.opt.WriteTimeout
	} else {
		_ = sw.rc.SetWriteDeadline(time.Time{})
	}
	return sw
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	if sw.timeout > 0 {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	}
	return sw.w.Write(p) //nolint:wrapcheck // an io.Writer passes its writer's errors on
}

func (s *server) chatHistory(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	q := r.URL.Query()
	opts := conversation.HistoryOptions{Branch: q.Get("branch")}
	var err error
	if opts.Limit, err = intParam(q.Get("limit"), "limit"); err == nil {
		opts.Count, err = boolParam(q.Get("count"), "count")
	}
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	h, err := s.opt.Chats.History(r.Context(), r.PathValue("ref"), opts)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	defer func() { _ = h.Close() }()
	w.Header().Set("Content-Type", conversation.HistoryContentType)
	w.WriteHeader(http.StatusOK)
	// A context that fails in the middle is told on the stream's error line.
	if err := conversation.WriteHistoryNDJSON(s.streamWriter(w), h, s.opt.Now()); err != nil && r.Context().Err() == nil {
		s.opt.Logger.Warn("chat history cut short", "path", r.URL.EscapedPath(), "err", err)
	}
}

func (s *server) chatTree(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	t, err := s.opt.Chats.Tree(r.Context(), r.PathValue("ref"))
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if err := t.WriteJSON(s.streamWriter(w), false); err != nil {
		s.opt.Logger.Debug("chat tree not delivered", "err", err)
	}
}

// exportWriter starts the answer with the first byte of an export, so an export refused before
// it (an unknown chat, not a pi transcript) still gets its error response.
type exportWriter struct {
	s       *server
	w       http.ResponseWriter
	format  conversation.ExportFormat
	sw      *streamWriter
	started bool
}

func (e *exportWriter) Write(p []byte) (int, error) {
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Content-Type", e.format.ContentType())
		h.Set("X-Content-Type-Options", "nosniff")
		// The page is a transcript's text: nothing in it may load or run, even in a browser.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		e.w.WriteHeader(http.StatusOK)
		e.sw = e.s.streamWriter(e.w)
	}
	return e.sw.Write(p)
}

func (s *server) chatExport(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	format := conversation.ExportFormat(r.URL.Query().Get("format"))
	if format == "" {
		format = conversation.ExportJSONL
	}
	ew := &exportWriter{s: s, w: w, format: format}
	err := s.opt.Chats.Export(r.Context(), r.PathValue("ref"), format, ew)
	switch {
	case err == nil:
	case !ew.started:
		s.fail(w, err, 0)
	default:
		// Part of the export is out: only a cut connection (no final chunk) tells the client
		// that the rest is missing.
		if r.Context().Err() == nil {
			s.opt.Logger.Warn("chat export cut short", "path", r.URL.EscapedPath(), "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// importBody reads an import's body: each read within BodyTimeout of the one before, so a
// large transcript may take as long as it keeps coming while a stalled client is cut off. The
// API bounds the size (conversation.Options.MaxImportSize); the gateway adds a ceiling of
// conversation.MaxImportSize for any API.
type importBody struct {
	r       io.Reader
	rc      *http.ResponseController
	timeout time.Duration
}

func (b *importBody) Read(p []byte) (int, error) {
	_ = b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	return b.r.Read(p) //nolint:wrapcheck // an io.Reader passes its reader's errors on
}

func (s *server) chatImport(w http.ResponseWriter, r *http.Request) {
	s.logChat(r)
	q := r.URL.Query()
	rc := http.NewResponseController(w)
	body := &importBody{r: http.MaxBytesReader(w, r.Body, conversation.MaxImportSize), rc: rc, timeout: s.opt.BodyTimeout}
	out, err := s.opt.Chats.Import(r.Context(), conversation.ImportRequest{Source: q.Get("source"), Key: q.Get("key"), Body: body})
	// The body is in (or abandoned): what remains of the answer is not bounded by it.
	_ = rc.SetReadDeadline(time.Time{})
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, conversation.ErrImportTooLarge):
		// The rest of the body is not read: the connection ends with the answer.
		s.refuse(w, err, http.StatusRequestEntityTooLarge)
	case errors.As(err, &mbe):
		s.refuse(w, abi.Errorf(abi.CodeInvalidArgument, "", "the transcript exceeds %d bytes, the most a gateway imports (nexus chat --transport local imports any size)", conversation.MaxImportSize), http.StatusRequestEntityTooLarge)
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.refuse(w, abi.Errorf(abi.CodeConnectionLost, "", "the transcript stopped arriving for %s", s.opt.BodyTimeout), http.StatusRequestTimeout)
	case err != nil:
		s.fail(w, err, 0)
	default:
		s.writeJSON(w, http.StatusOK, out)
	}
}
