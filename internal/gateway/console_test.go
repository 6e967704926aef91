package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/console"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
)

// consoleEnv is a gateway with a token and a console, as the TCP listener of nexus serve is.
func consoleEnv(t *testing.T) (*env, *console.Auth) {
	t.Helper()
	e := newEnv(t, "tok", live.Config{})
	auth := console.NewAuth(console.Options{Now: e.clock.Now})
	auth.SetBase("http://127.0.0.1:7777")
	e.h = gateway.Handler(gateway.Options{Registry: e.reg, Token: "tok", Console: auth, Version: "v-test", Now: e.clock.Now, MaxWait: 2 * time.Second})
	return e, auth
}

// signIn redeems a fresh code through the route and returns the cookie.
func signIn(t *testing.T, e *env) string {
	t.Helper()
	rec := e.do(t, "POST", "/v1/console/codes", "", "Authorization", "Bearer tok")
	if rec.Code != http.StatusCreated {
		t.Fatalf("mint: %d %s", rec.Code, rec.Body)
	}
	var code abi.ConsoleCode
	if err := json.Unmarshal(rec.Body.Bytes(), &code); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(code.URL, "http://127.0.0.1:7777/console/signin?code="+code.Code) {
		t.Fatalf("url %q", code.URL)
	}
	rec = e.do(t, "GET", "/console/signin?code="+code.Code, "")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/console/" {
		t.Fatalf("sign-in: %d to %q", rec.Code, rec.Header().Get("Location"))
	}
	if rec.Header().Get("Referrer-Policy") != "no-referrer" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("sign-in headers %v", rec.Header())
	}
	c := rec.Result().Cookies()
	if len(c) != 1 || c[0].Name != console.CookieName || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode || c[0].Path != "/" {
		t.Fatalf("cookie %+v", c)
	}
	// Used once: the same code again is refused, as a wrong one is.
	for _, q := range []string{"code=" + code.Code, "code=wrong", ""} {
		if rec := e.do(t, "GET", "/console/signin?"+q, ""); rec.Code != http.StatusUnauthorized || len(rec.Result().Cookies()) != 0 {
			t.Errorf("sign-in with %q: %d", q, rec.Code)
		}
	}
	return c[0].Value
}

func TestConsoleSignInAndCookie(t *testing.T) {
	e, _ := consoleEnv(t)
	// Without a cookie: the page asks to sign in, the API refuses.
	if rec := e.do(t, "GET", "/console/", ""); rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "nexus console") {
		t.Fatalf("console without a cookie: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(t, "GET", "/v1/sessions", "", "Cookie", console.CookieName+"=forged"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a forged cookie: %d", rec.Code)
	}
	cookie := console.CookieName + "=" + signIn(t, e)

	// The page, with its security headers.
	rec := e.do(t, "GET", "/console/", "", "Cookie", cookie)
	if rec.Code != http.StatusOK && rec.Code != http.StatusServiceUnavailable { // 503: built without the bundle
		t.Fatalf("console: %d %s", rec.Code, rec.Body)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	// The API with the cookie: reads from anywhere on the page; writes only from its origin.
	if rec := e.do(t, "GET", "/v1/sessions", "", "Cookie", cookie); rec.Code != http.StatusOK {
		t.Fatalf("list with the cookie: %d %s", rec.Code, rec.Body)
	}
	body := `{"type":"terminal","context":{"projectId":"p"}}`
	if rec := e.do(t, "POST", "/v1/sessions", body, "Cookie", cookie, "Origin", "http://127.0.0.1:7777"); rec.Code != http.StatusCreated {
		t.Fatalf("create from the console: %d %s", rec.Code, rec.Body)
	}
	for name, hdr := range map[string][]string{
		"another origin":  {"Origin", "http://evil.example"},
		"no origin":       {},
		"another port":    {"Origin", "http://127.0.0.1:8888"},
		"a GET elsewhere": {"Origin", "http://evil.example", "X-Method", "GET"},
	} {
		method := "POST"
		if len(hdr) == 4 {
			method, hdr = "GET", hdr[:2]
		}
		rec := e.do(t, method, "/v1/sessions", body, append([]string{"Cookie", cookie}, hdr...)...)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s", name, rec.Code, rec.Body)
		}
		checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusUnauthorized, abi.CodeAuthenticationInvalid, "")
	}
	// Codes are minted with the token only, never by a signed-in page.
	if rec := e.do(t, "POST", "/v1/console/codes", "", "Cookie", cookie, "Origin", "http://127.0.0.1:7777"); rec.Code != http.StatusUnauthorized {
		t.Errorf("mint with the cookie: %d", rec.Code)
	}
	// The Host check comes first: a rebinding name gets nothing, the console included.
	if rec := e.do(t, "GET", "/console/", "", "Cookie", cookie, "Host", "evil.example:7777"); rec.Code != http.StatusUnauthorized {
		t.Errorf("console under another host name: %d", rec.Code)
	}
	// Sign-out from the page ends the cookie's session.
	if rec := e.do(t, "POST", "/console/signout", "", "Cookie", cookie, "Origin", "http://127.0.0.1:7777"); rec.Code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", rec.Code)
	}
	if rec := e.do(t, "GET", "/v1/sessions", "", "Cookie", cookie); rec.Code != http.StatusUnauthorized {
		t.Errorf("after sign-out: %d", rec.Code)
	}
}

// TestConsoleCodeExpires: a code is good for its TTL only.
func TestConsoleCodeExpires(t *testing.T) {
	e, auth := consoleEnv(t)
	code, _, _, err := auth.NewCode()
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(11 * time.Minute)
	if rec := e.do(t, "GET", "/console/signin?code="+code, ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("an expired code: %d", rec.Code)
	}
}

// TestSessionsWatchAndClientAck: the sessions view's WebSocket sends a snapshot now and after
// each change; a stream opened with ack=client is acknowledged by its client, and an ack on
// a stream that is not is refused.
func TestSessionsWatchAndClientAck(t *testing.T) {
	e, _ := consoleEnv(t)
	cookie := console.CookieName + "=" + signIn(t, e)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hdr := http.Header{"Cookie": {cookie}, "Origin": {srv.URL}}
	ws := "ws" + strings.TrimPrefix(srv.URL, "http")
	// A page of another origin cannot open it, cookie or not.
	if _, _, err := websocket.Dial(ctx, ws+"/v1/sessions/watch", &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {cookie}, "Origin": {"http://evil.example"}}}); err == nil {
		t.Fatal("a watch from another origin was accepted")
	}
	c, _, err := websocket.Dial(ctx, ws+"/v1/sessions/watch", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CloseNow() }()
	type snap struct {
		Version  uint64        `json:"version"`
		Sessions []abi.Session `json:"sessions"`
	}
	next := func() snap {
		t.Helper()
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var s snap
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := next()
	rec := e.do(t, "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"p"}}`, "Authorization", "Bearer tok")
	var s abi.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	second := next()
	if second.Version <= first.Version || len(second.Sessions) != len(first.Sessions)+1 {
		t.Fatalf("snapshots %+v then %+v", first, second)
	}

	// ack=client: the gateway waits for the client's acks; an ack elsewhere is an error.
	st, _, err := websocket.Dial(ctx, ws+"/v1/sessions/"+s.SessionID+"/stream?ack=client", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.CloseNow() }()
	if _, _, err := st.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Write(ctx, websocket.MessageText, []byte(`{"op":"ack","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	plain, _, err := websocket.Dial(ctx, ws+"/v1/sessions/"+s.SessionID+"/stream", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.CloseNow() }()
	if err := plain.Write(ctx, websocket.MessageText, []byte(`{"op":"ack","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := plain.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "ack=client") {
			break
		}
	}
	if rec := e.do(t, "GET", "/v1/sessions/"+s.SessionID+"/stream?ack=sometimes", "", "Authorization", "Bearer tok"); rec.Code != http.StatusBadRequest {
		t.Errorf("ack=sometimes: %d", rec.Code)
	}
}

// servedSession is a terminal session of a gateway served over HTTP.
type servedSession struct {
	abi.Session
	ws string // its WebSocket base URL: ws://host/v1/sessions/{id}
}

// servedTerminal opens a terminal on a served gateway and returns it, the sink its output is
// printed through, and the seq its stream starts after.
func servedTerminal(t *testing.T) (*env, servedSession, live.Sink, uint64) {
	t.Helper()
	e := newEnv(t, "", live.Config{})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	s := e.create(t, termBody)
	start, err := e.reg.LastSeq(context.Background(), s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	ws := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sessions/" + s.SessionID
	return e, servedSession{s, ws}, sinkOf(t, e.terminal, s.SessionID), start
}

// TestStreamMerge: with merge=true, terminal output that is ready together comes as one frame
// carrying the last event's seq; other events keep their own frames, in order, and a reader
// resuming after the merged frame's seq misses nothing. With binary=true, output goes as
// binary messages (the event's seq, 8 bytes big-endian, then the output's own bytes) and every
// other event stays a JSON text message; binary needs contentType=raw.
func TestStreamMerge(t *testing.T) {
	e, s, sink, start := servedTerminal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, chunk := range []string{"one ", "two ", "\x1b[1mthree\xff"} {
		sink.Output([]byte(chunk))
	}
	sink.SetMetadata(map[string]any{"mark": 1})
	sink.Output([]byte(" four"))
	last, _ := e.reg.LastSeq(ctx, s.SessionID)
	// read returns n messages of a stream from after, as "seq:output" or "seq:event".
	read := func(query string, after uint64, n int) []string {
		t.Helper()
		c, _, err := websocket.Dial(ctx, s.ws+fmt.Sprintf("/stream?after=%d&contentType=raw&merge=true%s", after, query), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.CloseNow() }()
		var got []string
		for len(got) < n {
			typ, b, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if typ == websocket.MessageBinary {
				if len(b) < 8 {
					t.Fatalf("binary message of %d bytes", len(b))
				}
				got = append(got, fmt.Sprintf("%d:%q (binary)", binary.BigEndian.Uint64(b)-start, b[8:]))
				continue
			}
			var ev abi.Event
			if err := json.Unmarshal(b, &ev); err != nil {
				t.Fatal(err)
			}
			var out abi.TerminalOutput
			if ev.Event == abi.EventData && json.Unmarshal(ev.Payload, &out) == nil {
				data, _ := out.Bytes()
				got = append(got, fmt.Sprintf("%d:%q", ev.Seq-start, data))
			} else {
				got = append(got, fmt.Sprintf("%d:%s", ev.Seq-start, ev.Event))
			}
		}
		return got
	}
	for _, tc := range []struct{ query, suffix string }{{"", ""}, {"&binary=true", " (binary)"}} {
		want := []string{`3:"one two \x1b[1mthree\xff"` + tc.suffix, "4:metadata", fmt.Sprintf("%d:%q", last-start, " four") + tc.suffix}
		if got := read(tc.query, start, 3); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("%s: messages %q, want %q", tc.query, got, want)
		}
		if got := read(tc.query, start+3, 2); strings.Join(got, "|") != strings.Join(want[1:], "|") {
			t.Fatalf("%s: resumed after the merged message: %q, want %q", tc.query, got, want[1:])
		}
	}
	for _, q := range []string{"merge=sometimes", "binary=true", "binary=true&contentType=ansi", "binary=sometimes&contentType=raw"} {
		rec := e.do(t, "GET", "/v1/sessions/"+s.SessionID+"/stream?"+q, "")
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), string(abi.CodeInvalidArgument)) {
			t.Errorf("%s: %d %s", q, rec.Code, rec.Body)
		}
	}
}

// TestClientAckFlood: a client that acknowledges what it has handled, as the console does
// (per 128 KiB), gets a flood whole and in order, in binary messages no larger than a merged
// frame, while the program's output waits for it.
func TestClientAckFlood(t *testing.T) {
	_, s, sink, start := servedTerminal(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	c, _, err := websocket.Dial(ctx, s.ws+fmt.Sprintf("/stream?after=%d&contentType=raw&binary=true&merge=true&ack=client", start), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CloseNow() }()
	c.SetReadLimit(1 << 20)
	const chunks, size = 400, 4 << 10 // 1.6 MB: six windows
	go func() {
		for i := range chunks {
			sink.Output(bytes.Repeat([]byte{byte('a' + i%26)}, size)) // waits while the client lags
		}
	}()
	var got bytes.Buffer
	unacked, lastSeq := 0, uint64(0)
	for got.Len() < chunks*size {
		typ, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got.Len(), err)
		}
		if typ != websocket.MessageBinary {
			continue
		}
		seq := binary.BigEndian.Uint64(b)
		if seq <= lastSeq || len(b)-8 > 64<<10 {
			t.Fatalf("message seq %d after %d, %d bytes", seq, lastSeq, len(b)-8)
		}
		lastSeq = seq
		got.Write(b[8:])
		if unacked += len(b); unacked >= 128<<10 {
			unacked = 0
			if err := c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"op":"ack","seq":%d}`, seq))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range chunks {
		if !bytes.Equal(got.Bytes()[i*size:(i+1)*size], bytes.Repeat([]byte{byte('a' + i%26)}, size)) {
			t.Fatalf("chunk %d is not where it belongs", i)
		}
	}
}

// TestConsoleShare: a signed-in page mints a read-only share link for one session; its holder
// gets that session's object and stream and nothing else, and only for a day.
func TestConsoleShare(t *testing.T) {
	e, _ := consoleEnv(t)
	cookie := console.CookieName + "=" + signIn(t, e)
	mk := func() abi.Session {
		rec := e.do(t, "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"p"}}`, "Authorization", "Bearer tok")
		var s abi.Session
		if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || rec.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		return s
	}
	s, other := mk(), mk()
	if rec := e.do(t, "POST", "/console/share?session="+s.SessionID, ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a share minted without signing in: %d", rec.Code)
	}
	if rec := e.do(t, "POST", "/console/share?session="+s.SessionID, "", "Cookie", cookie, "Origin", "http://evil.example"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a share minted from another origin: %d", rec.Code)
	}
	// A session that does not exist gets no link; only a signed-in page learns that.
	if rec := e.do(t, "POST", "/console/share?session=no-such-session", "", "Cookie", cookie, "Origin", "http://127.0.0.1:7777"); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), string(abi.CodeSessionNotFound)) {
		t.Fatalf("a share for no session: %d %s", rec.Code, rec.Body)
	}
	if rec := e.do(t, "POST", "/console/share?session=no-such-session", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a share for no session, not signed in: %d", rec.Code)
	}
	rec := e.do(t, "POST", "/console/share?session="+s.SessionID, "", "Cookie", cookie, "Origin", "http://127.0.0.1:7777")
	var out struct{ URL string }
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusOK || !strings.HasPrefix(out.URL, "http://127.0.0.1:7777/console/share?token=") {
		t.Fatalf("mint: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(t, "GET", strings.TrimPrefix(out.URL, "http://127.0.0.1:7777"), "")
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/console/#/view/"+s.SessionID {
		t.Fatalf("redeem: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	c := rec.Result().Cookies()
	if len(c) != 1 || c[0].Name != console.ShareCookie || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("share cookie %+v", c)
	}
	share := console.ShareCookie + "=" + c[0].Value
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/console/", http.StatusOK},
		{"GET", "/v1/sessions/" + s.SessionID, http.StatusOK},
		{"GET", "/v1/sessions/" + other.SessionID, http.StatusUnauthorized},
		{"GET", "/v1/sessions", http.StatusUnauthorized},
		{"POST", "/v1/sessions/" + s.SessionID + "/send", http.StatusUnauthorized},
		{"POST", "/v1/sessions/" + s.SessionID + "/control", http.StatusUnauthorized},
		{"GET", "/v1/sessions/" + s.SessionID + "/events", http.StatusUnauthorized},
		{"POST", "/v1/console/codes", http.StatusUnauthorized},
	} {
		rec := e.do(t, tc.method, tc.path, `{"data":"x","command":"close"}`, "Cookie", share, "Origin", "http://127.0.0.1:7777")
		if rec.Code != tc.want && (tc.want != http.StatusOK || rec.Code != http.StatusServiceUnavailable) {
			t.Errorf("%s %s with the share: %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
	// A viewer's stream cannot pace the session; its input is refused (stream tests: the
	// browser test). The link lasts a day.
	if rec := e.do(t, "GET", "/v1/sessions/"+s.SessionID+"/stream?ack=client", "", "Cookie", share); rec.Code != http.StatusBadRequest {
		t.Errorf("ack=client on a shared view: %d", rec.Code)
	}
	e.clock.Advance(console.ShareTTL)
	if rec := e.do(t, "GET", "/v1/sessions/"+s.SessionID, "", "Cookie", share); rec.Code != http.StatusUnauthorized {
		t.Errorf("a share past its day: %d", rec.Code)
	}
}

// TestConsoleShareEndsAtSignOut: signing out revokes the share links that sign-in made: the
// link, the viewer's cookie and a viewer's open stream all stop, while another sign-in's link
// goes on working.
func TestConsoleShareEndsAtSignOut(t *testing.T) {
	e, _ := consoleEnv(t)
	owner := console.CookieName + "=" + signIn(t, e)
	other := console.CookieName + "=" + signIn(t, e)
	rec := e.do(t, "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"p"}}`, "Authorization", "Bearer tok")
	var s abi.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	share := func(cookie string) (link, viewer string) {
		t.Helper()
		rec := e.do(t, "POST", "/console/share?session="+s.SessionID, "", "Cookie", cookie, "Origin", "http://127.0.0.1:7777")
		var out struct{ URL string }
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("mint: %d %s", rec.Code, rec.Body)
		}
		link = strings.TrimPrefix(out.URL, "http://127.0.0.1:7777")
		rec = e.do(t, "GET", link, "")
		c := rec.Result().Cookies()
		if rec.Code != http.StatusSeeOther || len(c) != 1 {
			t.Fatalf("redeem: %d %+v", rec.Code, c)
		}
		return link, console.ShareCookie + "=" + c[0].Value
	}
	link, viewer := share(owner)
	otherLink, otherViewer := share(other)

	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	st, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/sessions/"+s.SessionID+"/stream", &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {viewer}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.CloseNow() }()
	if _, _, err := st.Read(ctx); err != nil {
		t.Fatalf("the viewer's stream before the sign-out: %v", err)
	}

	if rec := e.do(t, "POST", "/console/signout", "", "Cookie", owner, "Origin", "http://127.0.0.1:7777"); rec.Code != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", rec.Code)
	}
	for _, tc := range []struct {
		name, path, cookie string
		want               int
	}{
		{"the link", link, "", http.StatusUnauthorized},
		{"the viewer's session", "/v1/sessions/" + s.SessionID, viewer, http.StatusUnauthorized},
		{"the viewer's page", "/console/", viewer, http.StatusUnauthorized},
		{"another sign-in's link", otherLink, "", http.StatusSeeOther},
		{"another sign-in's viewer", "/v1/sessions/" + s.SessionID, otherViewer, http.StatusOK},
	} {
		if rec := e.do(t, "GET", tc.path, "", "Cookie", tc.cookie); rec.Code != tc.want {
			t.Errorf("%s after the sign-out: %d, want %d", tc.name, rec.Code, tc.want)
		}
	}
	// The open stream ends (closed by the gateway, not by this test's deadline).
	for {
		if _, _, err = st.Read(ctx); err != nil {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the viewer's stream outlived the sign-out: %v", err)
	}
}
