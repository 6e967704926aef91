package chatclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatclient"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/conversation/conversationtest"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/testkit"
)

// serveChats serves a gateway handler with a conversation Service over opts on a unix socket
// (token "" ) or on TCP with the token, and returns a client of it.
func serveChats(t *testing.T, opts conversation.Options, token string) *client.Client {
	t.Helper()
	h := gateway.Handler(gateway.Options{Chats: conversation.New(opts), Token: token})
	if token != "" {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return client.New(client.Target{URL: srv.URL, Token: token})
	}
	dir := testkit.ShortTempDir(t)
	sock := filepath.Join(dir, "gw.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return client.New(client.Target{Socket: sock})
}

// TestChatsContract runs the conversation contract suite through the gateway: chatclient.Chats
// against a real gateway handler whose Service works on the suite's directory, over the unix
// socket and over TCP with a token.
func TestChatsContract(t *testing.T) {
	for _, tc := range []struct{ name, token string }{{"unix", ""}, {"tcp", strings.Repeat("k", 40)}} {
		t.Run(tc.name, func(t *testing.T) {
			conversationtest.Run(t, func(t *testing.T, opts conversation.Options) conversation.API {
				return chatclient.New(serveChats(t, opts, tc.token))
			})
		})
	}
}

func TestChatPath(t *testing.T) {
	for ref, want := range map[string]string{
		"agent:main:telegram:dm:42": "/chats/agent:main:telegram:dm:42/history",
		"a/b":                       "/chats/a%2Fb/history",
		"..":                        "/chats/%2E%2E/history",
		".":                         "/chats/%2E/history",
		"x?y#z":                     "/chats/x%3Fy%23z/history",
		"%2F":                       "/chats/%252F/history",
	} {
		if got := chatclient.ChatPath(ref, "/history"); got != want {
			t.Errorf("ChatPath(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestChatsCutShort: a history or an export that the gateway cuts off in the middle is an
// error, never a shorter answer that looks complete.
func TestChatsCutShort(t *testing.T) {
	const full = `{"history":{"leafId":"a","model":null,"thinkingLevel":"off"}}` + "\n" +
		`{"message":{"role":"user","content":"one"}}` + "\n" +
		`{"message":{"role":"user","content":"two"}}` + "\n" +
		`{"end":{"count":2}}` + "\n"
	for _, tc := range []struct {
		name, body string
		code       abi.Code
	}{
		{"whole", full, ""},
		{"no end line", full[:strings.Index(full, `{"end"`)], abi.CodeConnectionLost},
		{"torn message", full[:strings.Index(full, `"two"`)], abi.CodeConnectionLost},
		{"wrong count", strings.Replace(full, `"count":2`, `"count":3`, 1), abi.CodeConnectionLost},
		{"error line", full[:strings.Index(full, `{"end"`)] + `{"error":{"status":"error","data":null,"message":"disk gone","errors":[{"type":"INTERNAL","message":"INTERNAL: disk gone","timestamp":"2026-01-01T00:00:00.000Z","sessionId":"","retriable":false}]}}` + "\n", abi.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", conversation.HistoryContentType)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			h, err := chatclient.New(client.New(client.Target{URL: srv.URL})).History(t.Context(), "k", conversation.HistoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = h.Close() }()
			n := 0
			var last error
			for _, err := range h.Messages {
				if err != nil {
					last = err
					break
				}
				n++
			}
			switch {
			case tc.code == "" && (last != nil || n != 2):
				t.Fatalf("whole answer: %d messages, %v", n, last)
			case tc.code != "" && abi.CodeOf(last) != tc.code:
				t.Fatalf("got %d messages and %v, want %s", n, last, tc.code)
			}
		})
	}
	// An export whose connection is cut before the end of its chunked body.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 10000))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer srv.Close()
	var b bytes.Buffer
	err := chatclient.New(client.New(client.Target{URL: srv.URL})).Export(t.Context(), "k", conversation.ExportJSONL, &b)
	if abi.CodeOf(err) != abi.CodeConnectionLost {
		t.Fatalf("cut export: %v after %d bytes", err, b.Len())
	}
}

// TestChatsImportTooLarge: a file over the gateway's import limit is refused before it is sent.
func TestChatsImportTooLarge(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.jsonl")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: its size is what counts.
	if err := f.Truncate(conversation.MaxImportSize + 1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	var reached bool
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	defer srv.Close()
	_, err = chatclient.New(client.New(client.Target{URL: srv.URL})).Import(context.Background(), conversation.ImportRequest{Source: big})
	if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "--transport local") || reached {
		t.Fatalf("import of a file over the limit: %v (sent: %v)", err, reached)
	}
	var ae *abi.Error
	if !errors.As(err, &ae) {
		t.Fatal("not an ABI error")
	}
}
