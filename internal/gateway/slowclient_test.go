package gateway_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/testkit"
)

// stalledPost opens a connection and sends a request whose body never finishes: the headers
// promise 1000 bytes and one arrives.
func stalledPost(t *testing.T, network, addr, extraHeaders string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + extraHeaders + "Content-Length: 1000\r\n\r\n{"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c
}

// answer reads the response on c and then expects the server to close the connection. The
// deadline only keeps a broken gateway from hanging the test.
func answer(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(testkit.Patience()))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled request: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the connection stayed open after the answer (read: %v)", err)
	}
	return resp
}

func wantCode(t *testing.T, resp *http.Response, status int, code abi.Code) {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || !strings.Contains(string(b), string(code)) {
		t.Fatalf("HTTP %d %s, want %d %s", resp.StatusCode, b, status, code)
	}
}

// Authentication comes from the headers, before any body is read: 50 connections that never
// finish their bodies each get a 401 at once, and are closed.
func TestUnauthenticatedStalledBodiesAreAnsweredAtOnce(t *testing.T) {
	d := startDaemon(t, shortDir(t), "127.0.0.1:0", func(o *gateway.DaemonOptions) { o.MaxUnauthenticated = 100 })
	conns := make([]net.Conn, 50)
	for i := range conns {
		conns[i] = stalledPost(t, "tcp", d.info.Listen, "")
	}
	for _, c := range conns {
		wantCode(t, answer(t, c), http.StatusUnauthorized, abi.CodeAuthenticationInvalid)
	}
	if n := len(listAll(t, d.reg, true)); n != 0 {
		t.Fatalf("%d sessions created", n)
	}
}

// An authenticated client (or any on the unix socket) whose body stalls is answered with
// CONNECTION_LOST once the body timeout passes, and its connection is closed.
func TestStalledBodyTimesOut(t *testing.T) {
	dir := shortDir(t)
	d := startDaemon(t, dir, "127.0.0.1:0", func(o *gateway.DaemonOptions) { o.BodyTimeout = 200 * time.Millisecond })
	tok, err := os.ReadFile(filepath.Join(dir, gateway.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	auth := "Authorization: Bearer " + strings.TrimSpace(string(tok)) + "\r\n"
	for name, c := range map[string]net.Conn{
		"unix socket":     stalledPost(t, "unix", d.info.Socket, ""),
		"tcp, with token": stalledPost(t, "tcp", d.info.Listen, auth),
	} {
		t.Run(name, func(t *testing.T) {
			wantCode(t, answer(t, c), http.StatusRequestTimeout, abi.CodeConnectionLost)
		})
	}
	if n := len(listAll(t, d.reg, true)); n != 0 {
		t.Fatalf("%d sessions created from torn bodies", n)
	}
}

// One peer cannot hold more than MaxUnauthenticated connections that have not authenticated;
// authenticating frees a slot.
func TestUnauthenticatedConnectionsPerPeerAreBounded(t *testing.T) {
	const maxConns = 4
	dir := shortDir(t)
	d := startDaemon(t, dir, "127.0.0.1:0", func(o *gateway.DaemonOptions) { o.MaxUnauthenticated = maxConns })
	tok, err := os.ReadFile(filepath.Join(dir, gateway.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", d.info.Listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	held := make([]net.Conn, maxConns)
	for i := range held {
		held[i] = dial() // connected, silent
	}
	get := func(c net.Conn) *http.Response {
		_, _ = fmt.Fprintf(c, "GET /v1/version HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: bearer %s\r\n\r\n", strings.TrimSpace(string(tok)))
		_ = c.SetReadDeadline(time.Now().Add(testkit.Patience()))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	// Connections are accepted in the order they were made, so this one is over the limit:
	// its request, even with the token, is answered with 429 and Retry-After, and the
	// connection closed.
	extra := dial()
	resp := get(extra)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("connection %d of one peer: %d %v, want 429 with Retry-After", maxConns+1, resp.StatusCode, resp.Header)
	}
	if n, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("connection %d of one peer after its refusal: read %d bytes, %v; want it closed", maxConns+1, n, err)
	}
	// An authenticated request on a held connection frees its slot for a new connection.
	if resp := get(held[0]); resp.StatusCode != http.StatusOK {
		t.Fatalf("authenticated request: %d", resp.StatusCode)
	}
	if resp := get(dial()); resp.StatusCode != http.StatusOK {
		t.Fatalf("a new connection after a slot was freed: %d", resp.StatusCode)
	}
}
