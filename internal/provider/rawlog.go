package provider

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// RawLog records each HTTP exchange of a client with its backend, one JSON line per request,
// response, stream chunk or transport error (an ai-chat session's raw.jsonl). The client owns
// the exchange, so it logs it; the caller only says where (Options.RawLog). Headers that carry
// credentials are left out, and every body passes the caller's redaction.
type RawLog struct {
	mu     sync.Mutex
	w      io.Writer
	now    func() time.Time
	redact func(string) string
}

// NewRawLog writes to w; now stamps the lines (default time.Now) and redact, when set, cleans
// every body before it is written.
func NewRawLog(w io.Writer, now func() time.Time, redact func(string) string) *RawLog {
	if now == nil {
		now = time.Now
	}
	if redact == nil {
		redact = func(s string) string { return s }
	}
	return &RawLog{w: w, now: now, redact: redact}
}

// rawRecord is one line of the raw log.
type rawRecord struct {
	Time    string            `json:"time"`
	Dir     string            `json:"dir"` // request, response, chunk, error
	Method  string            `json:"method,omitempty"`
	URL     string            `json:"url,omitempty"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

// line writes r. A failed write is dropped: the log must never fail the call it records.
func (l *RawLog) line(r rawRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Time = abi.FormatTime(l.now())
	r.Body = l.redact(r.Body)
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	_, _ = l.w.Write(append(b, '\n'))
}

// credentialHeader reports headers (and query parameters) that carry keys: their values are
// left out.
func credentialHeader(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "auth") || strings.Contains(n, "key") || strings.Contains(n, "token") || strings.Contains(n, "cookie") || strings.Contains(n, "secret")
}

func rawHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if credentialHeader(k) {
			out[k] = "[REDACTED]"
			continue
		}
		out[k] = strings.Join(v, ", ")
	}
	return out
}

// maxRawBody bounds a request body copied into the log, and a response line kept whole.
const maxRawBody = 1 << 20

// rawTransport records each exchange it sends in its log.
type rawTransport struct {
	next http.RoundTripper
	log  *RawLog
}

func (t *rawTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := rawRecord{Dir: "request", Method: req.Method, URL: redactURL(req), Headers: rawHeaders(req.Header)}
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxRawBody))
			_ = body.Close()
			rec.Body = string(b)
		}
	}
	t.log.line(rec)
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.log.line(rawRecord{Dir: "error", Body: err.Error()})
		return nil, err //nolint:wrapcheck // a transport passes its errors through
	}
	t.log.line(rawRecord{Dir: "response", Status: resp.StatusCode, Headers: rawHeaders(resp.Header)})
	resp.Body = &rawBody{rc: resp.Body, log: t.log}
	return resp, nil
}

func redactURL(req *http.Request) string {
	u := *req.URL
	u.User = nil
	q := u.Query()
	for k := range q {
		if credentialHeader(k) {
			q.Set(k, "[REDACTED]")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// rawBody logs a response body line by line as the SDK reads it (a stream's chunks).
type rawBody struct {
	rc      io.ReadCloser
	log     *RawLog
	pending bytes.Buffer
}

func (b *rawBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.pending.Write(p[:n])
	for {
		line, rerr := b.pending.ReadBytes('\n')
		if rerr != nil {
			// An incomplete line waits for the rest (at most 1 MiB of it).
			if b.pending.Len() == 0 && len(line) < maxRawBody {
				b.pending.Write(line)
			} else if len(line) > 0 {
				b.log.line(rawRecord{Dir: "chunk", Body: string(line)})
			}
			break
		}
		if s := strings.TrimRight(string(line), "\r\n"); s != "" {
			b.log.line(rawRecord{Dir: "chunk", Body: s})
		}
	}
	if err != nil && b.pending.Len() > 0 {
		b.log.line(rawRecord{Dir: "chunk", Body: b.pending.String()})
		b.pending.Reset()
	}
	return n, err //nolint:wrapcheck // a body passes its reader's errors through
}

func (b *rawBody) Close() error { return b.rc.Close() } //nolint:wrapcheck // passed through
