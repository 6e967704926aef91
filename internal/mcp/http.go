package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nexus-run/nexus/internal/jsonrpcline"
)

// DefaultHTTPSessionTimeout is how long an MCP session over HTTP may go without a request
// before the SDK forgets it (its shells stay: they belong to the server, see HTTPHandler).
const DefaultHTTPSessionTimeout = 30 * time.Minute

// HTTPOptions configure HTTPHandler.
type HTTPOptions struct {
	// SessionTimeout forgets an MCP session that sent no request for this long (the client
	// then gets 404 and opens a new one); default DefaultHTTPSessionTimeout, negative never.
	SessionTimeout time.Duration
	// MaxBodyBytes bounds one POST body; default MaxMessageBytes, the bound of a stdio line.
	MaxBodyBytes int64
}

// httpState is the server's one Streamable HTTP handler.
type httpState struct {
	once sync.Once
	h    http.Handler
}

// HTTPHandler serves the server over the MCP Streamable HTTP transport (POST, GET and DELETE
// on one endpoint; the gateway mounts it at /v1/mcp). It is built on the first call, with
// the options of that call; later calls return the same handler.
//
// Every MCP session of the handler shares the server's one session manager: a shell belongs
// to the server, not to the MCP session that opened it, so a client that reconnects (a new
// MCP session) finds its shells in session_list, and a shell outlives the connection that
// created it until session_destroy, the idle timeout or Close.
//
// Authentication and the Host check are the embedder's: the SDK's own localhost protection
// is off, because the gateway checks the Host header against its own allow list (which
// --allow-host extends) before any handler runs. A POST body is read whole, bounded, and
// checked as ServeStdio checks a line before the SDK sees it (see guardHTTP).
func (s *Server) HTTPHandler(o HTTPOptions) http.Handler {
	s.http.once.Do(func() {
		if o.SessionTimeout == 0 {
			o.SessionTimeout = DefaultHTTPSessionTimeout
		}
		if o.SessionTimeout < 0 {
			o.SessionTimeout = 0 // the SDK: never
		}
		if o.MaxBodyBytes <= 0 {
			o.MaxBodyBytes = MaxMessageBytes
		}
		h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
			Logger:                     slog.New(quieter{s.log.Handler()}),
			SessionTimeout:             o.SessionTimeout,
			DisableLocalhostProtection: true,
			// The guard has bounded the body already; the SDK's bound stays as a second line.
			MaxRequestBodyBytes: o.MaxBodyBytes + 1,
		})
		s.http.h = &httpGuard{next: h, s: s, maxBody: o.MaxBodyBytes, maxDepth: MaxMessageDepth}
	})
	return s.http.h
}

// httpGuard checks a POST body before the SDK reads it. The SDK answers what it cannot
// parse with a plain-text 400 and keeps the session, so what the guard adds over HTTP is the
// answers of the stdio transport: a JSON-RPC error (-32700 for what is not JSON, nests deeper
// than MaxMessageDepth or is too long, -32600 for JSON that is not a JSON-RPC message), with
// the request's id when it has a usable one. It also ends the body's read deadline once the
// body is in (the gateway sets one for every request with a body), since a tool call may run
// for an hour and the connection must still tell when the client goes away.
type httpGuard struct {
	next     http.Handler
	s        *Server
	maxBody  int64
	maxDepth int
}

func (g *httpGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Body == nil {
		g.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			g.refuse(w, http.StatusRequestEntityTooLarge, jsonrpc.CodeParseError, jsonrpcline.IDFromHead(body[:min(len(body), jsonrpcline.MaxHead)]),
				fmt.Sprintf("Parse error: a message of more than %d bytes is over the limit; it was dropped", g.maxBody))
		case errors.Is(err, os.ErrDeadlineExceeded):
			g.refuse(w, http.StatusRequestTimeout, jsonrpc.CodeParseError, nil, "Parse error: the request body did not arrive in time")
		default:
			g.refuse(w, http.StatusBadRequest, jsonrpc.CodeParseError, nil, fmt.Sprintf("Parse error: reading the request body: %v", err))
		}
		w.Header().Set("Connection", "close")
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if code, id, msg := g.check(body); code != 0 {
		g.refuse(w, http.StatusBadRequest, code, id, msg)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	jw := &jsonErrors{ResponseWriter: w, id: idOf(body)}
	g.next.ServeHTTP(jw, r)
	jw.finish()
}

// jsonErrors turns the SDK's plain-text refusals of a POST (a batch under a protocol without
// batches, a method it does not know, a second initialize...) into JSON-RPC error responses
// with the same HTTP status, so every refusal a client gets is a message it can match to its
// request: -32601 for a method not handled, -32600 for the others.
type jsonErrors struct {
	http.ResponseWriter
	id        any
	capturing bool
	status    int
	text      []byte
}

// maxRefusalText bounds what is kept of a refusal's text.
const maxRefusalText = 4 << 10

func (j *jsonErrors) WriteHeader(status int) {
	if status >= 400 && strings.HasPrefix(j.Header().Get("Content-Type"), "text/plain") {
		j.capturing, j.status = true, status
		return
	}
	j.ResponseWriter.WriteHeader(status)
}

func (j *jsonErrors) Write(p []byte) (int, error) {
	if !j.capturing {
		return j.ResponseWriter.Write(p) //nolint:wrapcheck // the response writer's own error
	}
	if room := maxRefusalText - len(j.text); room > 0 {
		j.text = append(j.text, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Unwrap lets http.ResponseController reach the connection (flushes of event streams,
// deadlines).
func (j *jsonErrors) Unwrap() http.ResponseWriter { return j.ResponseWriter }

func (j *jsonErrors) finish() {
	if !j.capturing {
		return
	}
	msg := strings.TrimSpace(string(j.text))
	code := jsonrpc.CodeInvalidRequest
	if strings.Contains(msg, "not handled") {
		code = jsonrpc.CodeMethodNotFound
	}
	j.Header().Del("X-Content-Type-Options")
	j.Header().Set("Content-Type", "application/json")
	j.ResponseWriter.WriteHeader(j.status)
	_, _ = j.ResponseWriter.Write(jsonrpcline.ErrorLine(code, j.id, msg))
}

// check returns the error code, id and message of a body that cannot be taken, or code 0.
func (g *httpGuard) check(body []byte) (code int, id any, msg string) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return jsonrpc.CodeParseError, nil, "Parse error: the body is empty; POST one JSON-RPC message"
	}
	if err := jsonrpcline.CheckDepth(body, g.maxDepth); err != nil {
		return jsonrpc.CodeParseError, nil, "Parse error: " + err.Error()
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		return jsonrpc.CodeParseError, nil, fmt.Sprintf("Parse error: the body is not JSON (%v); POST one JSON-RPC message", err)
	}
	if body[0] == '[' {
		// Batches are for the SDK to take or refuse (it knows the session's protocol
		// version); each element must still be a message.
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil || len(elems) == 0 {
			return jsonrpc.CodeInvalidRequest, nil, "Invalid Request: an empty batch"
		}
		for i, e := range elems {
			if _, err := jsonrpc.DecodeMessage(e); err != nil {
				return jsonrpc.CodeInvalidRequest, idOf(e), fmt.Sprintf("Invalid Request: element %d of the batch is not a JSON-RPC message: %v", i, err)
			}
		}
		return 0, nil, ""
	}
	if _, err := jsonrpc.DecodeMessage(body); err != nil {
		return jsonrpc.CodeInvalidRequest, idOf(body), fmt.Sprintf("Invalid Request: %v", err)
	}
	return 0, nil, ""
}

// refuse answers a body the guard will not pass on, noting it (without its content) in the
// operator's log.
func (g *httpGuard) refuse(w http.ResponseWriter, status, code int, id any, msg string) {
	g.s.log.Warn("refused a message from an MCP client over HTTP", "code", code, "error", redactFixed(msg))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(jsonrpcline.ErrorLine(code, id, msg))
}
