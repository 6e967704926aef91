package provider

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Retry defaults: four attempts, backoff ceilings of 1 s, 2 s, 4 s (capped at 30 s), and a
// server's retry-after honoured up to a minute.
const (
	defaultAttempts = 4
	defaultBase     = time.Second
	defaultMaxDelay = 30 * time.Second
	defaultMaxWait  = time.Minute
)

// retryPolicy says when and how long to wait before sending a request again.
type retryPolicy struct {
	// attempts is the number of tries in all (1: no retry).
	attempts int
	// base is the first backoff ceiling, doubled per attempt up to maxDelay.
	base, maxDelay time.Duration
	// maxWait is the longest retry-after honoured: a server asking for more fails at once.
	maxWait time.Duration
	// sleep waits d or until ctx ends; now reads the clock for retry-after dates; jitter
	// returns a duration uniform in [0, ceiling]. Tests inject all three.
	sleep  func(ctx context.Context, d time.Duration) error
	now    func() time.Time
	jitter func(ceiling time.Duration) time.Duration
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func fullJitter(ceiling time.Duration) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling + 1) //nolint:gosec // jitter spreads retries; it guards nothing
}

// backoff is the wait before attempt+1: full jitter under an exponential ceiling.
func (p *retryPolicy) backoff(attempt int) time.Duration {
	ceiling := p.base
	for i := 1; i < attempt && ceiling < p.maxDelay; i++ {
		ceiling *= 2
	}
	return p.jitter(min(ceiling, p.maxDelay))
}

// retryTransport sends a request again on 429, on 5xx (but 501) and on a connection that
// failed before any response, after the server's retry-after or a backoff. It is the only
// retrying layer: both SDKs are built with their own retries off, so a failing request is
// tried exactly policy.attempts times. Error responses it does not retry reach the SDK with
// their body, a copy of which goes to the request's exchange for the error message.
type retryTransport struct {
	next http.RoundTripper
	p    *retryPolicy
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	ex := exchangeFrom(ctx)
	if ex == nil {
		ex = &exchange{}
	}
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 {
			r = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, err //nolint:wrapcheck // the SDK's own body, reported as the transport's error
				}
				r.Body = body
			}
		}
		ex.mu.Lock()
		ex.attempts = attempt
		ex.mu.Unlock()
		resp, err := t.next.RoundTrip(r)
		last := attempt >= t.p.attempts || !replayable
		var delay time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil || last {
				return nil, err //nolint:wrapcheck // net/http wraps it with the URL; requestError unwraps
			}
			delay = t.p.backoff(attempt)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented:
			wait, ok := retryAfter(resp.Header, t.p.now())
			if ok && wait > t.p.maxWait {
				ex.mu.Lock()
				ex.wait = wait
				ex.mu.Unlock()
				return keep(resp, ex), nil
			}
			if last {
				return keep(resp, ex), nil
			}
			delay = wait
			if !ok {
				delay = t.p.backoff(attempt)
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
			_ = resp.Body.Close()
		case resp.StatusCode >= 400:
			return keep(resp, ex), nil
		default:
			return resp, nil
		}
		if err := t.p.sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// keep records an error response in ex and returns it with its body readable again.
func keep(resp *http.Response, ex *exchange) *http.Response {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	ex.mu.Lock()
	ex.status, ex.body = resp.StatusCode, body
	ex.mu.Unlock()
	return resp
}

// retryAfter reads the wait a response asks for: retry-after-ms (OpenAI, Anthropic), else
// retry-after in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(min(ms, 1e10) * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		// Clamped so a huge value cannot overflow: anything this long exceeds maxWait.
		return time.Duration(min(s, 1e7) * float64(time.Second)), true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}
