// Package gateway serves the live-session API over HTTP and WebSocket: routes, authentication
// and ABI encoding. It holds no session logic of its own; everything goes to a live.Backend.
package gateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/index"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/roadmap"
	"github.com/nexus-run/nexus/internal/trigger"
)

// Options configure the API handler.
type Options struct {
	// Registry is the live-session backend: a live.Registry in this process, or any other
	// implementation of live.Backend.
	Registry live.Backend
	// Chats, when set, is served under /v1/chats (chats.go).
	Chats conversation.API
	// Shells, when set, serves agent shells: MCP at /v1/mcp and /v1/shells (mcp.go, shells.go).
	Shells *mcp.Server
	// Index, when set, is the history index served under /v1/index (index.go); IndexSync is
	// what POST /v1/index/sync reads.
	Index     *index.Index
	IndexSync index.SyncOptions
	// Triggers, when set, serves the cron jobs and webhooks (triggers.go).
	Triggers *trigger.Service
	// Processes, when set, serves the managed processes and servers (processes.go).
	Processes *process.Manager
	// Roadmaps, when set, serves the roadmaps (roadmaps.go).
	Roadmaps *roadmap.Store
	// Token, when set, is required as "Authorization: Bearer <token>" on every request, or
	// the cookie of a browser signed in to the console.
	Token string
	// Console, when set, serves the web console under /console/ and mints its sign-in codes
	// (POST /v1/console/codes, never with the console's own cookie).
	Console *console.Auth
	Version string
	Logger  *slog.Logger
	Now     func() time.Time
	// MaxWait bounds a long-poll's wait; default 60s.
	MaxWait time.Duration
	// Streams, if set, counts the WebSocket streams being served, so a daemon shutting down can
	// wait until each has delivered its session's final events.
	Streams *atomic.Int64
	// AllowedHosts are the host names (besides IP literals and localhost) a request may name
	// in its Host header when a Token is set, so a web page that rebinds its own DNS name to
	// the gateway's address cannot talk to it from a browser.
	AllowedHosts []string
	// BodyTimeout bounds the reading of a request body; default 30s.
	BodyTimeout time.Duration
	// WriteTimeout bounds the writing of a response once it is ready (a long-poll's wait and a
	// command's run come before it and are not counted); default 30s.
	WriteTimeout time.Duration
}

type server struct {
	opt Options
}

// Handler returns the HTTP handler of the API.
func Handler(opt Options) http.Handler {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.MaxWait <= 0 {
		opt.MaxWait = 60 * time.Second
	}
	if opt.BodyTimeout <= 0 {
		opt.BodyTimeout = 30 * time.Second
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = 30 * time.Second
	}
	s := &server{opt: opt}
	mux := http.NewServeMux()
	p := abi.APIPrefix
	mux.HandleFunc("GET "+p+"/version", s.version)
	mux.HandleFunc("GET "+p+"/sessions", s.list)
	mux.HandleFunc("POST "+p+"/sessions", s.create)
	mux.HandleFunc("GET "+p+"/sessions/{id}", s.get)
	mux.HandleFunc("POST "+p+"/sessions/{id}/send", s.send)
	mux.HandleFunc("POST "+p+"/sessions/{id}/control", s.control)
	mux.HandleFunc("POST "+p+"/sessions/{id}/run", s.run)
	mux.HandleFunc("GET "+p+"/sessions/{id}/events", s.events)
	mux.HandleFunc("GET "+p+"/sessions/{id}/stream", s.stream)
	mux.HandleFunc("GET "+p+"/sessions/watch", s.watchSessions)
	if opt.Console != nil {
		page := console.Handler(opt.Console)
		mux.Handle(console.Prefix, page)
		// A share link is for a session that exists: the console itself has no registry. Only a
		// signed-in page learns whether an id exists.
		mux.HandleFunc("POST "+console.SharePath, func(w http.ResponseWriter, r *http.Request) {
			if id := r.URL.Query().Get("session"); id != "" && opt.Console.SignedIn(r) && console.SameOrigin(r) {
				if _, err := s.opt.Registry.LastSeq(r.Context(), id); err != nil {
					s.fail(w, err, 0)
					return
				}
			}
			page.ServeHTTP(w, r)
		})
	}
	// Registered with the console or without: a gateway without a TCP listener says why there
	// is no sign-in link rather than that the route does not exist.
	mux.HandleFunc("POST "+p+"/console/codes", s.consoleCode)
	s.chatRoutes(mux)
	s.shellRoutes(mux)
	s.indexRoutes(mux)
	s.triggerRoutes(mux)
	s.processRoutes(mux)
	s.roadmapRoutes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "no route %s %s (the API lives under %s/)", r.Method, r.URL.Path, abi.APIPrefix), http.StatusNotFound)
	})
	var h http.Handler = mux
	if opt.Token != "" {
		h = s.auth(h)
	}
	return s.bodyDeadline(h)
}

// bodyDeadline bounds the reading of a request's body, whoever reads it: decode, or net/http
// discarding what a handler left unread before it answers (which would otherwise wait forever
// for a body that never finishes). A request without a body gets no read deadline, so a
// long-poll notices its client going away.
func (s *server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.ContentLength != 0 {
			_ = rc.SetReadDeadline(time.Now().Add(s.opt.BodyTimeout))
		} else {
			_ = rc.SetReadDeadline(time.Time{})
		}
		next.ServeHTTP(w, r)
	})
}

// auth checks the bearer token and the Host header from the request's headers alone, before any
// body is read; a refused connection is closed after the answer instead of being kept to read
// the rest of a body it may never send.
func (s *server) auth(next http.Handler) http.Handler {
	want := []byte(s.opt.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, s.opt.AllowedHosts) {
			s.refuse(w, abi.Errorf(abi.CodeAuthenticationInvalid, "", "Host %q is not one this gateway answers to (IP addresses and localhost are; start it with --allow-host %s to add a name)", r.Host, hostOnly(r.Host)), 0)
			return
		}
		if s.opt.Triggers != nil && hookPath(r) {
			next.ServeHTTP(w, r) // the hook's own secret guards it (triggers.go)
			return
		}
		if s.opt.Console != nil && strings.HasPrefix(r.URL.Path, console.Prefix) {
			next.ServeHTTP(w, r) // the console's sign-in and cookie guard it (internal/console)
			return
		}
		got, ok := bearer(r.Header.Get("Authorization"))
		if !ok && s.opt.Console != nil && s.opt.Console.SignedIn(r) {
			// A signed-in browser: only from the gateway's own pages. SameSite=Strict keeps the
			// cookie off other sites' requests; the Origin check is the second lock, and
			// minting sign-in codes stays the token's.
			if !console.SameOrigin(r) && (r.Method != http.MethodGet || r.Header.Get("Origin") != "") {
				s.refuse(w, abi.Errorf(abi.CodeAuthenticationInvalid, "", "a console request from another origin (%q)", r.Header.Get("Origin")), 0)
				return
			}
			if r.URL.Path == abi.APIPrefix+"/console/codes" {
				s.refuse(w, abi.Errorf(abi.CodeAuthenticationInvalid, "", "sign-in codes are minted with the gateway's token (nexus console), not from the console"), 0)
				return
			}
			if c, ok := r.Context().Value(connKey{}).(*guardedConn); ok {
				c.authenticated()
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), consoleKey{}, true)))
			return
		}
		if id, revoked, shared := s.sharedView(r); !ok && shared {
			// A share link's holder watches one session: its object and its stream, read-only.
			if r.Method != http.MethodGet || (r.URL.Path != abi.APIPrefix+"/sessions/"+id && r.URL.Path != abi.APIPrefix+"/sessions/"+id+"/stream") ||
				(r.Header.Get("Origin") != "" && !console.SameOrigin(r)) {
				s.refuse(w, abi.Errorf(abi.CodeAuthenticationInvalid, "", "a share link lets its holder watch session %s, read-only, and nothing else", id), 0)
				return
			}
			// Until its owner signs out: then the viewer's stream ends too.
			ctx, cancel := context.WithCancel(context.WithValue(r.Context(), readOnlyKey{}, true))
			defer cancel()
			go func() {
				select {
				case <-revoked:
					cancel()
				case <-ctx.Done():
				}
			}()
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nexus"`)
			s.refuse(w, abi.Errorf(abi.CodeAuthenticationInvalid, "", "missing or wrong bearer token (see state/gateway.token)"), 0)
			return
		}
		if c, ok := r.Context().Value(connKey{}).(*guardedConn); ok {
			c.authenticated()
		}
		next.ServeHTTP(w, r)
	})
}

// consoleKey marks a request of a browser signed in to the console: what it sends is the
// console's (a message's origin).
type consoleKey struct{}

// sendOrigin is where input sent in ctx (a request's) comes from: the console's signed-in
// browser, else a client holding the gateway's token (the CLI).
func sendOrigin(ctx context.Context) abi.Origin {
	if ctx.Value(consoleKey{}) != nil {
		return abi.Origin{Kind: abi.OriginConsole}
	}
	return abi.Origin{Kind: abi.OriginCLI}
}

// readOnlyKey marks a request of a share link's holder: it watches, it does not type.
type readOnlyKey struct{}

func readOnly(r *http.Request) bool { return r.Context().Value(readOnlyKey{}) != nil }

// sharedView is the session r's share cookie lets it watch, when the console is served, and
// the channel closed when the share is revoked.
func (s *server) sharedView(r *http.Request) (string, <-chan struct{}, bool) {
	if s.opt.Console == nil {
		return "", nil, false
	}
	return s.opt.Console.SharedView(r)
}

// refuse answers a request whose body is not (or no longer) read, then ends the connection.
// Before it lets go of a connection, net/http reads what is left of the body (even with
// Connection: close), which a client that never finishes its body would turn into a wait
// without end; a read deadline in the past makes that read fail at once.
func (s *server) refuse(w http.ResponseWriter, err error, status int) {
	w.Header().Set("Connection", "close")
	s.fail(w, err, status)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	_ = rc.SetReadDeadline(time.Unix(1, 0))
}

// bearer returns the credentials of an Authorization header using the Bearer scheme, whose name
// is case-insensitive.
func bearer(h string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(cred), true
}

// hostOnly strips the port from a Host header.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.Trim(host, "[]")
}

// hostAllowed accepts IP literals, localhost and the configured names. A DNS-rebinding page
// reaches the gateway under its own domain name, which is none of these.
func hostAllowed(host string, allowed []string) bool {
	h := strings.TrimSuffix(strings.ToLower(hostOnly(host)), ".")
	if h == "" {
		return false
	}
	if net.ParseIP(h) != nil || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	for _, a := range allowed {
		if strings.EqualFold(strings.TrimSuffix(a, "."), h) {
			return true
		}
	}
	return false
}

func (s *server) writeJSON(w http.ResponseWriter, status int, v any) {
	// Commands and output travel in these bodies: keep <, > and & readable.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	var b []byte
	if err := enc.Encode(v); err != nil {
		s.opt.Logger.Error("encode response", "err", err)
		status = http.StatusInternalServerError
		b = []byte(`{"status":"error","data":null,"message":"encode response"}` + "\n")
	} else {
		b = buf.Bytes()
	}
	w.Header().Set("Content-Type", "application/json")
	s.writeDeadline(w)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeDeadline bounds the writing of a response that is ready, so a client that stops reading
// cannot hold the connection and its handler forever.
func (s *server) writeDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opt.WriteTimeout))
}

// fail answers with the ABI's error response; status 0 means the code's own HTTP status.
func (s *server) fail(w http.ResponseWriter, err error, status int) {
	if status == 0 {
		status = abi.CodeOf(err).HTTPStatus()
	}
	if abi.CodeOf(err) == abi.CodeInternal {
		s.opt.Logger.Error("request failed", "err", err)
	}
	s.writeJSON(w, status, abi.ErrorResponse(err, s.opt.Now()))
}

// decode reads a bounded body and decodes it strictly.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, abi.MaxRequestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.refuse(w, abi.Errorf(abi.CodeConnectionLost, "", "request body not received within %s", s.opt.BodyTimeout), http.StatusRequestTimeout)
		case errors.As(err, &mbe):
			s.refuse(w, abi.Errorf(abi.CodeInvalidArgument, r.PathValue("id"), "request body exceeds %d bytes", abi.MaxRequestBody), http.StatusRequestEntityTooLarge)
		default:
			s.refuse(w, abi.Errorf(abi.CodeConnectionLost, "", "read request body: %v", err), http.StatusBadRequest)
		}
		return false
	}
	// The body is in: what follows (a command's run) may take long, and the client going away
	// must still be noticed, so the read deadline set by bodyDeadline ends here.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if err := abi.DecodeStrict(data, v); err != nil {
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, r.PathValue("id"), "invalid request body: %v", err), 0)
		return false
	}
	return true
}

func (s *server) version(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, abi.VersionResponse{Version: s.opt.Version, ABIVersion: abi.Version})
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	all := q.Get("all") == "true" || q.Get("all") == "1"
	typ := abi.SessionType(q.Get("type"))
	if typ != "" && !typ.Valid() {
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "unknown session type %q", typ), 0)
		return
	}
	sessions, err := s.opt.Registry.List(r.Context(), all)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	out := abi.ListResponse{Sessions: []abi.Session{}}
	for _, ss := range sessions {
		if typ == "" || ss.Type == typ {
			out.Sessions = append(out.Sessions, ss)
		}
	}
	s.writeJSON(w, http.StatusOK, out)
}

func (s *server) create(w http.ResponseWriter, r *http.Request) {
	var req abi.CreateRequest
	if !s.decode(w, r, &req) {
		return
	}
	obj, err := s.opt.Registry.Create(r.Context(), req)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusCreated, obj)
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	obj, err := s.opt.Registry.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, obj)
}

func decodeInput(id, data, encoding string) ([]byte, error) {
	switch encoding {
	case "", "text":
		return []byte(data), nil
	case "base64":
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, id, "data is not valid base64: %v", err)
		}
		return b, nil
	}
	return nil, abi.Errorf(abi.CodeInvalidArgument, id, "unknown encoding %q (want text or base64)", encoding)
}

func (s *server) send(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req abi.SendRequest
	if !s.decode(w, r, &req) {
		return
	}
	data, err := decodeInput(id, req.Data, req.Encoding)
	var res live.SendResult
	if err == nil {
		// afterSeq (the registry's): the events this input causes come after it (an ai-chat
		// client follows its turn from there).
		res, err = s.opt.Registry.Send(r.Context(), id, live.SendRequest{Data: data, Mode: req.Mode, Origin: sendOrigin(r.Context())})
	}
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	out := map[string]any{"status": abi.ResponseOK, "sessionId": id, "bytes": len(data), "afterSeq": res.AfterSeq}
	if res.MessageID != "" {
		out["messageId"] = res.MessageID
	}
	s.writeJSON(w, http.StatusOK, out)
}

func (s *server) control(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req abi.ControlRequest
	if !s.decode(w, r, &req) {
		return
	}
	data, err := s.opt.Registry.Control(r.Context(), id, req)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, abi.ControlResponse{Status: abi.ResponseOK, Data: data, Message: fmt.Sprintf("%s: ok", req.Command)})
}

func (s *server) run(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req abi.RunRequest
	if !s.decode(w, r, &req) {
		return
	}
	res, err := s.opt.Registry.Run(r.Context(), id, req)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	s.writeJSON(w, http.StatusOK, res)
}

// readParams are the query parameters shared by events and stream.
type readParams struct {
	after uint64
	limit int
	wait  time.Duration
	ct    abi.ContentType
	hold  bool
	// clientAck: a stream whose follower is acknowledged by the client's ack messages (once
	// it has rendered the events), not by the gateway's writes.
	clientAck bool
	// merge: consecutive terminal output events that are ready together go out as one frame
	// (the last one's seq), so a flood costs a browser a message per batch, not per PTY read.
	merge bool
	// binary: terminal output events go out as binary messages, an 8-byte big-endian seq and
	// then the output's bytes (no JSON, no base64: a browser hands them to xterm.js as they are).
	binary bool
}

func (s *server) params(r *http.Request) (readParams, error) {
	q := r.URL.Query()
	id := r.PathValue("id")
	p := readParams{ct: abi.ContentType(q.Get("contentType"))}
	if p.ct == "" {
		p.ct = abi.ContentANSI
	}
	if !p.ct.Valid() {
		return p, abi.Errorf(abi.CodeInvalidArgument, id, "unknown contentType %q (want ansi, text or raw)", p.ct)
	}
	var err error
	if v := q.Get("after"); v != "" {
		if p.after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return p, abi.Errorf(abi.CodeInvalidArgument, id, "after must be a sequence number, got %q", v)
		}
	}
	if v := q.Get("limit"); v != "" {
		if p.limit, err = strconv.Atoi(v); err != nil || p.limit < 0 {
			return p, abi.Errorf(abi.CodeInvalidArgument, id, "limit must be a non-negative integer, got %q", v)
		}
	}
	if v := q.Get("wait"); v != "" {
		if p.wait, err = time.ParseDuration(v); err != nil {
			secs, err2 := strconv.ParseFloat(v, 64)
			if err2 != nil || secs < 0 {
				return p, abi.Errorf(abi.CodeInvalidArgument, id, "wait must be a duration such as 25s, got %q", v)
			}
			p.wait = time.Duration(secs * float64(time.Second))
		}
		p.wait = min(p.wait, s.opt.MaxWait)
	}
	p.hold = q.Get("hold") == "1" || q.Get("hold") == "true"
	switch v := q.Get("merge"); v {
	case "", "0", "false":
	case "1", "true", "data":
		p.merge = true
	default:
		return p, abi.Errorf(abi.CodeInvalidArgument, id, "merge must be true or false, got %q", v)
	}
	switch v := q.Get("binary"); v {
	case "", "0", "false":
	case "1", "true":
		p.binary = true
	default:
		return p, abi.Errorf(abi.CodeInvalidArgument, id, "binary must be true or false, got %q", v)
	}
	if p.binary && p.ct != abi.ContentRaw {
		return p, abi.Errorf(abi.CodeInvalidArgument, id, "binary=true carries the output's own bytes: ask for contentType=raw")
	}
	switch v := q.Get("ack"); v {
	case "", "server":
	case "client":
		p.clientAck = true
	default:
		return p, abi.Errorf(abi.CodeInvalidArgument, id, "ack must be server or client, got %q", v)
	}
	return p, nil
}

func (s *server) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	p, err := s.params(r)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	if p.wait > 0 {
		unwatch, err := s.opt.Registry.Watch(r.Context(), id)
		if err != nil {
			s.fail(w, err, 0)
			return
		}
		defer unwatch()
	}
	b, err := s.opt.Registry.Read(r.Context(), id, p.after, p.limit, p.wait)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	// Events carry their encoding already; splice them rather than re-encode.
	buf := make([]byte, 0, 256)
	buf = append(buf, `{"events":[`...)
	for i, e := range b.Events {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = e.AppendJSON(buf, p.ct)
	}
	buf = append(buf, `],"next":`...)
	buf = strconv.AppendUint(buf, b.Next, 10)
	buf = append(buf, `,"closed":`...)
	buf = strconv.AppendBool(buf, b.Done)
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	s.writeDeadline(w)
	_, _ = w.Write(buf)
}

// stream serves a session's events over a WebSocket from ?after=N, and accepts input and resize
// messages from the client. With ?hold=1 the connection owns the session: an ephemeral session
// closes when its last owning connection ends.
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	if s.opt.Streams != nil {
		s.opt.Streams.Add(1)
		defer s.opt.Streams.Add(-1)
	}
	id := r.PathValue("id")
	p, err := s.params(r)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	ro := readOnly(r)
	if ro && p.clientAck {
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, id, "a shared view does not pace the session: open it without ack=client"), 0)
		return
	}
	// A follower: the session's output waits (boundedly) for this stream to keep up, so a
	// client that reads as fast as it can loses nothing. Made first, it is also the check that
	// the session exists; another node's session's log is opened once, for the stream's life.
	fl, err := s.opt.Registry.Follow(r.Context(), id, p.after)
	if err != nil {
		s.fail(w, err, 0)
		return
	}
	defer fl.Close()
	// A plain GET would get websocket.Accept's text/plain answer; give it the ABI's error instead,
	// and before Hold, whose release would close an ephemeral session.
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, id, "%s is a WebSocket endpoint: send a WebSocket upgrade request (or poll .../events)", r.URL.Path), http.StatusUpgradeRequired)
		return
	}
	if p.hold {
		release, err := s.opt.Registry.Hold(r.Context(), id)
		if err != nil {
			s.fail(w, err, 0)
			return
		}
		defer release()
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer func() { _ = c.CloseNow() }()
	c.SetReadLimit(abi.MaxRequestBody)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var acks *ackWindow
	if p.clientAck {
		acks = &ackWindow{fl: fl, acked: p.after, moved: make(chan struct{})}
		if w, ok := fl.(live.Windowed); ok {
			w.SetWindow(clientWindow) // the program waits too, not only this stream's writes
		}
	}
	go s.readClient(ctx, cancel, c, id, acks, ro)

	after := p.after
	var frame []byte // reused: Write is done with it when it returns
	for {
		// A client slower than the output: wait for room for a whole merged frame before
		// reading, so that the output that piles up meanwhile goes in a few large frames
		// rather than a frame per PTY read (a browser pays per message).
		if acks != nil && p.merge && !acks.space(ctx, maxMerged) {
			return
		}
		b, err := s.opt.Registry.Read(ctx, id, after, 512, 30*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				_ = c.Close(websocket.StatusInternalError, err.Error())
			}
			return
		}
		events := b.Events
		if p.merge {
			events = mergeOutput(events)
		}
		for _, e := range events {
			typ := websocket.MessageText
			if out, ok := e.Payload.(live.Output); ok && p.binary && e.Seq != 0 {
				typ = websocket.MessageBinary
				frame = append(binary.BigEndian.AppendUint64(frame[:0], e.Seq), out...)
			} else {
				frame = e.AppendJSON(frame[:0], p.ct)
			}
			if acks != nil && !acks.room(ctx, e.Seq, len(frame)) {
				return
			}
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			err := c.Write(wctx, typ, frame)
			wcancel()
			if err != nil {
				return
			}
			if !p.clientAck {
				fl.Ack(e.Seq)
			}
		}
		after = b.Next
		if !p.clientAck || len(b.Events) == 0 {
			fl.Ack(after) // a batch that skipped a lost range still moves the follower on
		}
		if b.Done {
			_ = c.Close(websocket.StatusNormalClosure, "session closed")
			return
		}
	}
}

// maxMerged bounds the output one merged frame carries.
const maxMerged = 64 << 10

// mergeOutput joins runs of consecutive terminal output events into one event each (the
// sequence number and time of the run's last), up to maxMerged bytes: a reader that resumes
// after it, or acknowledges it, has had the whole run.
func mergeOutput(events []*live.Event) []*live.Event {
	out := events[:0:0]
	for i := 0; i < len(events); {
		e := events[i]
		first, ok := e.Payload.(live.Output)
		if !ok || e.Seq == 0 {
			out = append(out, e)
			i++
			continue
		}
		j, size := i+1, len(first)
		for j < len(events) {
			o, ok := events[j].Payload.(live.Output)
			if !ok || events[j].Seq == 0 || size+len(o) > maxMerged {
				break
			}
			size += len(o)
			j++
		}
		if j == i+1 {
			out = append(out, e)
			i++
			continue
		}
		buf := make(live.Output, 0, size)
		for _, m := range events[i:j] {
			buf = append(buf, m.Payload.(live.Output)...)
		}
		last := events[j-1]
		out = append(out, &live.Event{Seq: last.Seq, Type: last.Type, Time: last.Time, SessionID: last.SessionID, Payload: buf})
		i = j
	}
	return out
}

// clientWindow is how many bytes of frames a stream opened with ack=client writes ahead of the
// client's acknowledgments. It bounds what a browser holds unrendered (xterm.js parses some
// tens of MB/s): Ctrl-C after a flood shows its prompt within a fraction of a second, and the
// session's own flow control holds the program while the window is full.
const clientWindow = 256 << 10

// ackWindow is the client-acknowledged pacing of one stream: the frames written and not yet
// acknowledged, and the follower the acknowledgments move.
type ackWindow struct {
	fl      live.Follower
	mu      sync.Mutex
	acked   uint64
	pending []sentFrame // written after acked, oldest first
	bytes   int
	moved   chan struct{} // closed and replaced at each acknowledgment
}

type sentFrame struct {
	seq  uint64
	size int
}

// room waits until a frame of size for event seq fits in the window (one frame always goes, so
// a frame larger than the window is not stuck), and counts it; false when ctx ends first. A
// seq 0 frame (an error for this client only) is not acknowledged, so it neither waits nor
// counts.
func (a *ackWindow) room(ctx context.Context, seq uint64, size int) bool {
	if seq == 0 {
		return true
	}
	if !a.space(ctx, size) {
		return false
	}
	// Only the stream's writer adds to the window; acknowledgments meanwhile only free it.
	a.mu.Lock()
	a.pending = append(a.pending, sentFrame{seq, size})
	a.bytes += size
	a.mu.Unlock()
	return true
}

// space waits until size bytes of frames fit in the window (or nothing is in flight); false
// when ctx ends first.
func (a *ackWindow) space(ctx context.Context, size int) bool {
	for {
		a.mu.Lock()
		ok := a.bytes == 0 || a.bytes+size <= clientWindow
		moved := a.moved
		a.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return false
		}
	}
}

// ack records the client's acknowledgment of every event up to seq.
func (a *ackWindow) ack(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if seq <= a.acked {
		return
	}
	a.acked = seq
	n := 0
	for n < len(a.pending) && a.pending[n].seq <= seq {
		a.bytes -= a.pending[n].size
		n++
	}
	a.pending = a.pending[n:]
	a.fl.Ack(seq)
	close(a.moved)
	a.moved = make(chan struct{})
}

// watchSessions streams the registry's sessions over a WebSocket: a snapshot {version,
// sessions} now and after every change (a session created, closed, or its status or metadata
// changed), closed ones included, so a page keeps its list current without polling.
func (s *server) watchSessions(w http.ResponseWriter, r *http.Request) {
	if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
		w.Header().Set("Upgrade", "websocket")
		s.fail(w, abi.Errorf(abi.CodeInvalidArgument, "", "%s is a WebSocket endpoint: send a WebSocket upgrade request (or GET %s/sessions)", r.URL.Path, abi.APIPrefix), http.StatusUpgradeRequired)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered the client
	}
	defer func() { _ = c.CloseNow() }()
	ctx := c.CloseRead(r.Context()) // nothing is read; a close from the client ends ctx
	var version uint64
	for {
		snap, err := s.opt.Registry.WatchSessions(ctx, version, 30*time.Second)
		if err != nil {
			return
		}
		if snap.Version == version && version != 0 {
			continue // the wait elapsed with no change
		}
		version = snap.Version
		b, err := json.Marshal(struct {
			Version  uint64        `json:"version"`
			Sessions []abi.Session `json:"sessions"`
		}{snap.Version, snap.Sessions})
		if err != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = c.Write(wctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			return
		}
	}
}

// consoleCode mints a one-time sign-in code for the web console (nexus console).
func (s *server) consoleCode(w http.ResponseWriter, _ *http.Request) {
	if s.opt.Console == nil {
		s.fail(w, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway has no TCP listener, so no console: start it with nexus serve --listen 127.0.0.1:7777"), 0)
		return
	}
	code, url, exp, err := s.opt.Console.NewCode()
	if err != nil {
		s.fail(w, fmt.Errorf("mint a sign-in code: %w", err), 0)
		return
	}
	s.writeJSON(w, http.StatusCreated, abi.ConsoleCode{Code: code, URL: url, ExpiresAt: abi.FormatTime(exp)})
}

// headerHasToken reports whether a comma-separated header of h holds token (case-insensitive).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// readClient handles what a stream's client sends: input, resizes, and (acks set: a stream
// opened with ack=client) acknowledgments of the events it has rendered, which are what its
// follower waits for, so a session's output is paced by the browser's rendering.
func (s *server) readClient(ctx context.Context, cancel context.CancelFunc, c *websocket.Conn, id string, acks *ackWindow, readOnly bool) {
	defer cancel()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m abi.ClientMessage
		if err := abi.DecodeStrict(data, &m); err != nil {
			s.notify(ctx, c, id, abi.Errorf(abi.CodeInvalidArgument, id, "invalid client message: %v", err))
			continue
		}
		if readOnly {
			s.notify(ctx, c, id, abi.Errorf(abi.CodeAuthenticationInvalid, id, "a shared view is read-only: %s refused", m.Op))
			continue
		}
		switch m.Op {
		case "send":
			b, err := decodeInput(id, m.Data, m.Encoding)
			if err == nil {
				_, err = s.opt.Registry.Send(ctx, id, live.SendRequest{Data: b, Origin: sendOrigin(ctx)})
			}
			if err != nil {
				s.notify(ctx, c, id, err)
			}
		case "resize":
			if _, err := s.opt.Registry.Control(ctx, id, abi.ControlRequest{Command: abi.CommandResize, Width: m.Width, Height: m.Height}); err != nil {
				s.notify(ctx, c, id, err)
			}
		case "ack":
			if acks == nil {
				s.notify(ctx, c, id, abi.Errorf(abi.CodeInvalidArgument, id, "ack on a stream the gateway acknowledges (open it with ack=client)"))
				continue
			}
			acks.ack(m.Seq)
		default:
			s.notify(ctx, c, id, abi.Errorf(abi.CodeInvalidArgument, id, "unknown op %q (want send, resize or ack)", m.Op))
		}
	}
}

// notify tells one client about its own failed request with an error event outside the log
// (seq 0), so other subscribers never see it.
func (s *server) notify(ctx context.Context, c *websocket.Conn, id string, err error) {
	ev := abi.Event{Event: abi.EventError, Timestamp: abi.FormatTime(s.opt.Now()), SessionID: id}
	ev.Payload, _ = json.Marshal(abi.ErrorPayload{Type: abi.PayloadError, Error: abi.ErrorDetail{Code: abi.CodeOf(err), Message: err.Error()}})
	b, _ := json.Marshal(ev)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Write(wctx, websocket.MessageText, b)
}
