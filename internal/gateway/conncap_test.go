package gateway_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestConnectionCapAnswers: many new connections at once from one address, more than the
// pre-authentication cap, each with a request (with a body or without): every request gets
// an HTTP answer, the normal one or a refusal to come back later (429 with Retry-After), and
// none a connection closed (or reset) without one.
func TestConnectionCapAnswers(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		body               int
		want               int
	}{
		{"GET", "GET", "/v1/version", 0, http.StatusOK},
		{"POST with a body", "POST", "/v1/sessions", 32 << 10, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) { testConnectionCap(t, tc.method, tc.path, tc.body, tc.want) })
	}
}

func testConnectionCap(t *testing.T, method, path string, size, want int) {
	const requests = 500
	dir := shortDir(t)
	d := startDaemon(t, dir, "127.0.0.1:0")
	tok, err := os.ReadFile(filepath.Join(dir, gateway.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	var (
		mu                 sync.Mutex
		ok, refused, other int
		unanswered         []string
	)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body io.Reader
			if size > 0 {
				body = strings.NewReader(`{"type":"` + strings.Repeat("x", size) + `"}`)
			}
			req, _ := http.NewRequestWithContext(ctx, method, "http://"+d.info.Listen+path, body)
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
			<-start
			resp, err := cl.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				unanswered = append(unanswered, err.Error())
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			switch {
			case resp.StatusCode == want:
				ok++
			case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
				refused++
			default:
				other++
				unanswered = append(unanswered, resp.Status)
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("%d requests from one address at once: %d answered as usual, %d refused with 429 and Retry-After, %d unanswered", requests, ok, refused, len(unanswered))
	if len(unanswered) > 0 || other > 0 {
		t.Fatalf("%d of %d requests got no proper answer, for example %q", len(unanswered), requests, unanswered[0])
	}
	if ok == 0 {
		t.Fatal("no request was served")
	}
}
