package gateway

import (
	"net/http"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/mcp"
)

// shellRoutes serves the gateway's agent shells when it has them: MCP over the Streamable
// HTTP transport at /v1/mcp (docs/agent-shells.md), and the shells' list and audit events
// under /v1/shells (shells.go). Authentication is the gateway's own: the bearer token on TCP,
// the file system on the unix socket.
func (s *server) shellRoutes(mux *http.ServeMux) {
	if s.opt.Shells == nil {
		return
	}
	p := abi.APIPrefix
	mux.Handle(p+"/mcp", s.boundedWrites(s.opt.Shells.HTTPHandler(mcp.HTTPOptions{})))
	mux.HandleFunc("GET "+p+"/shells", s.shellList)
	mux.HandleFunc("GET "+p+"/shells/{id}", s.shellGet)
	mux.HandleFunc("GET "+p+"/shells/{id}/events", s.shellEvents)
	mux.HandleFunc("GET "+p+"/shells/{id}/stream", s.shellStream)
}

// boundedWrites gives every write of a response (each event of an MCP event stream) the
// gateway's write timeout, so a client that stops reading cannot hold a handler forever; the
// time between writes (a tool call running, a stream waiting for its next event) is not
// bounded.
func (s *server) boundedWrites(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.opt.WriteTimeout}, r)
	})
}

type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	n, err := d.ResponseWriter.Write(p)
	_ = d.rc.SetWriteDeadline(time.Time{})
	return n, err //nolint:wrapcheck // the response writer's own error
}

// FlushError flushes within the write timeout (the SDK flushes after each event).
func (d *deadlineWriter) FlushError() error {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	err := d.rc.Flush()
	_ = d.rc.SetWriteDeadline(time.Time{})
	return err //nolint:wrapcheck // see Write
}

// Flush implements http.Flusher, which the SDK checks for.
func (d *deadlineWriter) Flush() { _ = d.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
