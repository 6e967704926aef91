package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/client"
	"github.com/nexus-run/nexus/internal/gateway"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// ---------------------------------------------------------------------------------------------
// Fixture: a registry with livetest's fake terminal, ai-chat and debug-stream kinds
// (network-stream is not served), behind the handler. A create whose projectId is "refuse"
// fails with INVALID_ARGUMENT, "boom" with a plain error.

func newFakeKind(typ abi.SessionType) *livetest.FakeKind {
	k := livetest.NewFakeKind(typ, false)
	k.Refuse = func(req abi.CreateRequest) error {
		switch req.Context.ProjectID {
		case "refuse":
			return abi.Errorf(abi.CodeInvalidArgument, "", "unknown project %q", req.Context.ProjectID)
		case "boom":
			return errors.New("backend exploded")
		}
		return nil
	}
	return k
}

// sinkOf is the sink of a fake session, through which a test publishes its output.
func sinkOf(t testing.TB, k *livetest.FakeKind, id string) live.Sink {
	t.Helper()
	inst := k.Instance(id)
	if inst == nil {
		t.Fatalf("no fake session %s", id)
	}
	return inst.Sink()
}

// lastInput returns the last input a fake session received and how many bytes it got in all.
func lastInput(k *livetest.FakeKind, id string) ([]byte, int) {
	inst := k.Instance(id)
	if inst == nil {
		return nil, 0
	}
	sends := inst.Sends()
	n := 0
	for _, s := range sends {
		n += len(s)
	}
	if len(sends) == 0 {
		return nil, 0
	}
	return []byte(sends[len(sends)-1]), n
}

func controlsOf(k *livetest.FakeKind, id string) []abi.ControlRequest {
	if inst := k.Instance(id); inst != nil {
		return inst.Controls()
	}
	return nil
}

// newRegistry builds an in-memory registry for a test.
func newRegistry(t testing.TB, cfg live.Config, kinds ...live.Kind) *live.Registry {
	t.Helper()
	reg, err := live.New(context.Background(), cfg, kinds...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

type env struct {
	reg      *live.Registry
	h        http.Handler
	clock    *livetest.FakeClock
	terminal *livetest.FakeKind
	chat     *livetest.FakeKind
	debug    *livetest.FakeKind
}

func newEnv(t testing.TB, token string, cfg live.Config) *env {
	t.Helper()
	e := &env{
		clock:    livetest.NewFakeClock(),
		terminal: newFakeKind(abi.TypeTerminal),
		chat:     newFakeKind(abi.TypeAIChat),
		debug:    newFakeKind(abi.TypeDebugStream),
	}
	if cfg.Now == nil {
		cfg.Now = e.clock.Now
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = -1
	}
	e.clock.Set(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	e.reg = newRegistry(t, cfg, e.terminal, e.chat, e.debug)
	e.h = gateway.Handler(gateway.Options{Registry: e.reg, Token: token, Version: "v-test", Now: e.clock.Now, MaxWait: 2 * time.Second})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.reg.Shutdown(ctx)
	})
	return e
}

func (e *env) do(t testing.TB, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Host = "127.0.0.1:7777" // what a client of the TCP listener sends (httptest's is example.com)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func (e *env) create(t testing.TB, body string) abi.Session {
	t.Helper()
	rec := e.do(t, http.MethodPost, "/v1/sessions", body)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create %s: %d %s", body, rec.Code, rec.Body)
	}
	var s abi.Session
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

const termBody = `{"type":"terminal","context":{"projectId":"p"}}`

// ---------------------------------------------------------------------------------------------
// The error response shape.

// requireSessionIDKey demands errors[0].sessionId on every error answer, as the ABI's shape
// lists it (empty when no session is involved).
const requireSessionIDKey = true

// checkError asserts body is the ABI's error response with the given code and session id.
func checkError(t testing.TB, status int, hdr http.Header, body []byte, wantStatus int, wantCode abi.Code, wantSession string) {
	t.Helper()
	if err := errorShape(status, hdr, body); err != nil {
		t.Fatalf("%v\nbody: %s", err, body)
	}
	var r abi.ControlResponse
	_ = json.Unmarshal(body, &r)
	if status != wantStatus || r.Errors[0].Type != wantCode {
		t.Fatalf("got %d %s, want %d %s\nbody: %s", status, r.Errors[0].Type, wantStatus, wantCode, body)
	}
	if r.Errors[0].SessionID != wantSession {
		t.Fatalf("errors[0].sessionId = %q, want %q", r.Errors[0].SessionID, wantSession)
	}
}

// errorShape checks what every error answer must be, whatever the code.
func errorShape(status int, hdr http.Header, body []byte) error {
	if !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		return fmt.Errorf("content type %q", hdr.Get("Content-Type"))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return fmt.Errorf("error body is not a JSON object: %w", err)
	}
	if string(m["status"]) != `"error"` {
		return fmt.Errorf("status = %s", m["status"])
	}
	if d, ok := m["data"]; !ok || string(d) != "null" {
		return fmt.Errorf("data = %s (present %v), want null", d, ok)
	}
	var msg string
	if err := json.Unmarshal(m["message"], &msg); err != nil || msg == "" {
		return fmt.Errorf("message = %s", m["message"])
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(m["errors"], &items); err != nil || len(items) != 1 {
		return fmt.Errorf("errors = %s", m["errors"])
	}
	it := items[0]
	keys := []string{"type", "message", "timestamp", "retriable"}
	if requireSessionIDKey {
		keys = append(keys, "sessionId")
	}
	for _, k := range keys {
		if _, ok := it[k]; !ok {
			return fmt.Errorf("errors[0] lacks %q: %s", k, m["errors"])
		}
	}
	var item abi.ErrorItem
	if err := json.Unmarshal(m["errors"][1:len(m["errors"])-1], &item); err != nil {
		return fmt.Errorf("errors[0]: %w", err)
	}
	known := false
	for _, c := range abi.Codes() {
		known = known || c == item.Type
	}
	if !known {
		return fmt.Errorf("unknown error type %q", item.Type)
	}
	if item.Retriable != item.Type.Retriable() {
		return fmt.Errorf("%s retriable = %v", item.Type, item.Retriable)
	}
	if item.Message == "" {
		return errors.New("errors[0].message is empty")
	}
	if _, err := time.Parse(abi.TimeFormat, item.Timestamp); err != nil {
		return fmt.Errorf("timestamp %q is not ISO 8601 UTC: %w", item.Timestamp, err)
	}
	want := item.Type.HTTPStatus()
	switch {
	case status == want:
	case item.Type == abi.CodeInvalidArgument && (status == http.StatusRequestEntityTooLarge || status == http.StatusNotFound || status == http.StatusUpgradeRequired):
	default:
		return fmt.Errorf("HTTP %d for %s (want %d)", status, item.Type, want)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// Happy paths of every route.

func TestRoutesHappyPath(t *testing.T) {
	e := newEnv(t, "", live.Config{})

	rec := e.do(t, http.MethodGet, "/v1/version", "")
	var v abi.VersionResponse
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &v) != nil || v.Version != "v-test" || v.ABIVersion != abi.Version {
		t.Fatalf("version: %d %s", rec.Code, rec.Body)
	}

	// Create: the full session object, in active status, with the type's capabilities.
	s := e.create(t, `{"type":"terminal","context":{"projectId":"p","chatId":"c"},"transport":"polling","ttlSeconds":60,"options":{"cols":100}}`)
	if s.SessionID == "" || s.Type != abi.TypeTerminal || s.Status != abi.StatusActive || s.Transport != abi.TransportPolling ||
		s.Context.ProjectID != "p" || s.Context.ChatID != "c" || s.Capabilities != e.terminal.Capabilities() {
		t.Fatalf("created %+v", s)
	}
	if s.CreatedAt != "2026-01-02T03:04:05.000Z" || s.ExpiresAt != "2026-01-02T03:05:05.000Z" {
		t.Fatalf("createdAt %q expiresAt %q", s.CreatedAt, s.ExpiresAt)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID, "").Body.Bytes(), &raw)
	for _, k := range []string{"sessionId", "type", "createdAt", "expiresAt", "context", "transport", "status", "capabilities", "metadata"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("session object lacks %q", k)
		}
	}
	chat := e.create(t, `{"type":"ai-chat","context":{},"ephemeral":false}`)
	if chat.Transport != abi.TransportWebSocket || chat.Capabilities.Resize || chat.ExpiresAt != "" {
		t.Fatalf("ai-chat defaults: %+v", chat)
	}
	eph := e.create(t, `{"type":"debug-stream","context":{"processId":"42"},"ephemeral":true}`)
	if eph.Metadata["ephemeral"] != true {
		t.Fatalf("ephemeral metadata: %v", eph.Metadata)
	}

	// Get.
	rec = e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID, "")
	var got abi.Session
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.SessionID != s.SessionID {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}

	// List, filtered by type.
	list := func(q string) []abi.Session {
		rec := e.do(t, http.MethodGet, "/v1/sessions"+q, "")
		var l abi.ListResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &l) != nil || l.Sessions == nil {
			t.Fatalf("list%s: %d %s", q, rec.Code, rec.Body)
		}
		return l.Sessions
	}
	if l := list(""); len(l) != 3 {
		t.Fatalf("list: %d sessions", len(l))
	}
	if l := list("?type=ai-chat"); len(l) != 1 || l[0].SessionID != chat.SessionID {
		t.Fatalf("list ai-chat: %+v", l)
	}

	// Send, as text and as base64.
	rec = e.do(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/send", `{"data":"echo hi\n"}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"ok"`) || !strings.Contains(rec.Body.String(), `"bytes":8`) {
		t.Fatalf("send: %d %s", rec.Code, rec.Body)
	}
	rec = e.do(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/send", `{"data":"`+base64.StdEncoding.EncodeToString([]byte{0, 0xff, 3})+`","encoding":"base64"}`)
	if in, _ := lastInput(e.terminal, s.SessionID); rec.Code != http.StatusOK || !bytes.Equal(in, []byte{0, 0xff, 3}) {
		t.Fatalf("send base64: %d %s, kind got %q", rec.Code, rec.Body, in)
	}

	// Control: every command answers the ABI's control response.
	for _, c := range []struct{ body, cmd string }{
		{`{"command":"interrupt"}`, "interrupt"},
		{`{"command":"resize","width":120,"height":40}`, "resize"},
		{`{"command":"restart"}`, "restart"},
		{`{"command":"pause"}`, "pause"},
		{`{"command":"resume"}`, "resume"},
	} {
		rec = e.do(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/control", c.body)
		var cr map[string]json.RawMessage
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &cr) != nil || string(cr["status"]) != `"ok"` {
			t.Fatalf("control %s: %d %s", c.body, rec.Code, rec.Body)
		}
		var data abi.ControlData
		if err := json.Unmarshal(cr["data"], &data); err != nil || data.SessionID != s.SessionID || string(data.Command) != c.cmd || data.Result == nil {
			t.Fatalf("control %s data: %s", c.body, cr["data"])
		}
		if _, ok := cr["errors"]; ok {
			t.Fatalf("control %s: errors present in an ok answer", c.body)
		}
	}
	if cs := controlsOf(e.terminal, s.SessionID); len(cs) != 3 || cs[1].Width != 120 || cs[1].Height != 40 {
		t.Fatalf("kind saw controls %+v", cs)
	}

	// Events: polling, from a sequence, with a limit, in every content type.
	sinkOf(t, e.terminal, s.SessionID).Output([]byte("\x1b[1mbold\x1b[0m"))
	rec = e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID+"/events", "")
	var er abi.EventsResponse
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &er) != nil || len(er.Events) == 0 || er.Closed {
		t.Fatalf("events: %d %s", rec.Code, rec.Body)
	}
	last := er.Events[len(er.Events)-1]
	if er.Next != last.Seq || last.Event != abi.EventData {
		t.Fatalf("events next %d, last %+v", er.Next, last)
	}
	for i, ev := range er.Events {
		if ev.Seq != uint64(i+1) || ev.SessionID != s.SessionID {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	for ct, want := range map[string]string{"ansi": "\x1b[1mbold\x1b[0m", "text": "bold", "raw": base64.StdEncoding.EncodeToString([]byte("\x1b[1mbold\x1b[0m"))} {
		rec = e.do(t, http.MethodGet, fmt.Sprintf("/v1/sessions/%s/events?after=%d&contentType=%s", s.SessionID, last.Seq-1, ct), "")
		var r abi.EventsResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil || len(r.Events) != 1 {
			t.Fatalf("events %s: %s", ct, rec.Body)
		}
		var out abi.TerminalOutput
		if err := json.Unmarshal(r.Events[0].Payload, &out); err != nil || out.Type != abi.PayloadTerminalOutput || string(out.ContentType) != ct || out.Content != want {
			t.Fatalf("events %s payload %s", ct, r.Events[0].Payload)
		}
	}
	rec = e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID+"/events?after=1&limit=2", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || len(er.Events) != 2 || er.Events[0].Seq != 2 || er.Next != 3 {
		t.Fatalf("after=1 limit=2: %s", rec.Body)
	}
	// A long-poll returns as soon as an event arrives: the event is published once the poll
	// has reached the backend's Read (through a handler over a backend that says so).
	polling := make(chan struct{}, 1)
	poll := &env{h: gateway.Handler(gateway.Options{Registry: readSpy{Backend: e.reg, reading: polling}, Version: "v-test", Now: e.clock.Now, MaxWait: 2 * time.Second})}
	go func() {
		<-polling
		sinkOf(t, e.terminal, s.SessionID).Output([]byte("late"))
	}()
	rec = poll.do(t, http.MethodGet, fmt.Sprintf("/v1/sessions/%s/events?after=%d&wait=10s", s.SessionID, last.Seq), "")
	if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || len(er.Events) != 1 || !strings.Contains(string(er.Events[0].Payload), "late") {
		t.Fatalf("long-poll: %s", rec.Body)
	}
	// A long-poll with nothing to say answers empty once the wait is over (wait=0.05 seconds).
	rec = e.do(t, http.MethodGet, fmt.Sprintf("/v1/sessions/%s/events?after=%d&wait=0.05", s.SessionID, er.Next), "")
	if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || len(er.Events) != 0 || er.Closed {
		t.Fatalf("empty long-poll: %s", rec.Body)
	}

	// Close answers the session object with its final status; closed sessions show with all=true.
	rec = e.do(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/control", `{"command":"close"}`)
	var cr struct {
		Status string `json:"status"`
		Data   struct {
			SessionID string      `json:"sessionId"`
			Command   string      `json:"command"`
			Result    abi.Session `json:"result"`
		} `json:"data"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &cr) != nil || cr.Status != "ok" || cr.Data.Command != "close" ||
		cr.Data.Result.Status != abi.StatusClosed || cr.Data.Result.SessionID != s.SessionID {
		t.Fatalf("close: %d %s", rec.Code, rec.Body)
	}
	if l := list(""); len(l) != 2 {
		t.Fatalf("list after close: %d sessions", len(l))
	}
	if l := list("?all=true"); len(l) != 3 {
		t.Fatalf("list all after close: %d sessions", len(l))
	}
	rec = e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID+"/events?after="+fmt.Sprint(er.Next), "")
	if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || !er.Closed || er.Events[len(er.Events)-1].Event != abi.EventClose {
		t.Fatalf("events after close: %s", rec.Body)
	}
	// Get still answers a closed session (status closed), as the ABI's close does.
	rec = e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID, "")
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || got.Status != abi.StatusClosed {
		t.Fatalf("get closed: %d %s", rec.Code, rec.Body)
	}
}

// The WebSocket stream: events from a sequence, input and resize from the client, a seq 0 error
// for a bad client message, and a normal closure after the close event.
func TestStreamRoute(t *testing.T) {
	e := newEnv(t, "", live.Config{})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	s := e.create(t, termBody)
	sink := sinkOf(t, e.terminal, s.SessionID)
	sink.Output([]byte("one"))
	sink.Output([]byte("two"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last, err := e.reg.LastSeq(ctx, s.SessionID) // "two"
	if err != nil {
		t.Fatal(err)
	}
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sessions/" + s.SessionID + fmt.Sprintf("/stream?after=%d&contentType=raw", last-1)
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CloseNow() }()
	next := func() abi.Event {
		t.Helper()
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var ev abi.Event
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("event %s: %v", b, err)
		}
		return ev
	}
	ev := next()
	var out abi.TerminalOutput
	if err := json.Unmarshal(ev.Payload, &out); ev.Seq != last || err != nil || out.ContentType != abi.ContentRaw {
		t.Fatalf("first streamed event: %+v", ev)
	}
	if b, _ := out.Bytes(); string(b) != "two" {
		t.Fatalf("payload %q", b)
	}
	for _, m := range []string{
		`{"op":"send","data":"hello"}`,
		`{"op":"send","data":"` + base64.StdEncoding.EncodeToString([]byte("bin\x00")) + `","encoding":"base64"}`,
		`{"op":"resize","width":90,"height":30}`,
	} {
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{`{"op":"send","data":5}`, `{"op":"dance"}`, `not json`, `{"op":"resize"}`, `{"op":"send","data":"x","encoding":"base64"}`} {
		if err := c.Write(ctx, websocket.MessageText, []byte(bad)); err != nil {
			t.Fatal(err)
		}
		ev := next()
		var p abi.ErrorPayload
		if ev.Seq != 0 || ev.Event != abi.EventError || json.Unmarshal(ev.Payload, &p) != nil || p.Error.Code != abi.CodeInvalidArgument || ev.SessionID != s.SessionID {
			t.Fatalf("bad message %s answered %+v %s", bad, ev, ev.Payload)
		}
	}
	if in, n := lastInput(e.terminal, s.SessionID); string(in) != "bin\x00" || n != 9 {
		t.Fatalf("kind input %q (%d bytes)", in, n)
	}
	if cs := controlsOf(e.terminal, s.SessionID); len(cs) != 1 || cs[0].Command != abi.CommandResize || cs[0].Width != 90 {
		t.Fatalf("kind controls %+v", cs)
	}
	// The bad messages' errors went to this client only: they are not in the log.
	rec := e.do(t, http.MethodGet, "/v1/sessions/"+s.SessionID+"/events", "")
	if strings.Contains(rec.Body.String(), `"error"`) {
		t.Fatalf("client errors leaked into the log: %s", rec.Body)
	}
	if _, err := e.reg.Close(ctx, s.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	var lastEv abi.Event
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("stream ended with %v, want a normal closure", err)
			}
			break
		}
		_ = json.Unmarshal(b, &lastEv)
	}
	if lastEv.Event != abi.EventClose {
		t.Fatalf("last event before closure: %+v", lastEv)
	}
}

// An ephemeral session closes when the last connection holding it ends.
func TestStreamHoldClosesEphemeral(t *testing.T) {
	e := newEnv(t, "", live.Config{})
	// The gateway over a backend that says when a hold is released, so the test knows the
	// first holder's release has happened before it checks that the session stayed open.
	released := make(chan struct{}, 2)
	h := gateway.Handler(gateway.Options{Registry: releaseSpy{Backend: e.reg, released: released}, Version: "v-test", Now: e.clock.Now, MaxWait: 2 * time.Second})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s := e.create(t, `{"type":"terminal","context":{"projectId":"p"},"ephemeral":true}`)
	c := client.New(client.Target{URL: srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := c.Dial(ctx, s.SessionID, client.DialOptions{Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Dial(ctx, s.SessionID, client.DialOptions{Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	<-released
	if got, _ := e.reg.Get(ctx, s.SessionID); got.Status != abi.StatusActive {
		t.Fatalf("closed with a holder left: %s", got.Status)
	}
	_ = b.Abort()
	testkit.Eventually(t, "the ephemeral session closes", func() bool { got, _ := e.reg.Get(ctx, s.SessionID); return got.Status == abi.StatusClosed })
	got, _ := e.reg.Get(ctx, s.SessionID)
	if got.Metadata["closeReason"] != abi.CloseEphemeral {
		t.Fatalf("close reason %v", got.Metadata["closeReason"])
	}
	// Holding a closed session is refused; reading it is not (it replays to the close event).
	if _, err := c.Dial(ctx, s.SessionID, client.DialOptions{Hold: true}); !client.IsCode(err, abi.CodeSessionClosed) {
		t.Fatalf("hold of a closed session: %v", err)
	}
	n := 0
	if err := c.Stream(ctx, s.SessionID, client.StreamOptions{Follow: true}, func(abi.Event) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("replay of a closed session: %d events, %v", n, err)
	}
}

// readSpy is a backend that reports each long-poll (a Read that may wait) on reading.
type readSpy struct {
	live.Backend
	reading chan<- struct{}
}

func (b readSpy) Read(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (live.Batch, error) {
	if wait > 0 {
		select {
		case b.reading <- struct{}{}:
		default:
		}
	}
	return b.Backend.Read(ctx, id, after, limit, wait)
}

// releaseSpy is a backend that reports each release of a hold on released.
type releaseSpy struct {
	live.Backend
	released chan<- struct{}
}

func (b releaseSpy) Hold(ctx context.Context, id string) (func(), error) {
	release, err := b.Backend.Hold(ctx, id)
	if err != nil {
		return nil, err
	}
	return func() { release(); b.released <- struct{}{} }, nil
}

// ---------------------------------------------------------------------------------------------
// Errors: every bad request gets a clear error response, and the gateway keeps serving.

func TestErrors(t *testing.T) {
	e := newEnv(t, "", live.Config{})
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	term := e.create(t, termBody)
	chat := e.create(t, `{"type":"ai-chat","context":{}}`)
	debug := e.create(t, `{"type":"debug-stream","context":{}}`)
	closed := e.create(t, termBody)
	if _, err := e.reg.Close(context.Background(), closed.SessionID, abi.CloseRequested); err != nil {
		t.Fatal(err)
	}
	expiring := e.create(t, `{"type":"terminal","context":{"projectId":"p"},"ttlSeconds":5}`)
	e.clock.Advance(10 * time.Second)

	huge := `{"type":"terminal","context":{"projectId":"` + strings.Repeat("a", abi.MaxRequestBody+1) + `"}}`
	hugeSend := `{"data":"` + strings.Repeat("a", abi.MaxRequestBody) + `"}`
	tid, sp := term.SessionID, "/v1/sessions/"+term.SessionID
	const bad = http.StatusBadRequest
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     abi.Code
		session                  string
	}{
		// Create: malformed, unknown, mistyped, duplicated, mis-cased, oversized.
		{"create malformed", "POST", "/v1/sessions", `{"type":`, bad, abi.CodeInvalidArgument, ""},
		{"create empty", "POST", "/v1/sessions", ``, bad, abi.CodeInvalidArgument, ""},
		{"create whitespace", "POST", "/v1/sessions", " \n\t", bad, abi.CodeInvalidArgument, ""},
		{"create null", "POST", "/v1/sessions", `null`, bad, abi.CodeInvalidArgument, ""},
		{"create array", "POST", "/v1/sessions", `[]`, bad, abi.CodeInvalidArgument, ""},
		{"create string", "POST", "/v1/sessions", `"terminal"`, bad, abi.CodeInvalidArgument, ""},
		{"create unknown field", "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"p"},"colour":"red"}`, bad, abi.CodeInvalidArgument, ""},
		{"create unknown nested field", "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"p","planet":"mars"}}`, bad, abi.CodeInvalidArgument, ""},
		{"create wrong type", "POST", "/v1/sessions", `{"type":5}`, bad, abi.CodeInvalidArgument, ""},
		{"create wrong type context", "POST", "/v1/sessions", `{"type":"terminal","context":"p"}`, bad, abi.CodeInvalidArgument, ""},
		{"create wrong type ttl", "POST", "/v1/sessions", `{"type":"terminal","ttlSeconds":"60"}`, bad, abi.CodeInvalidArgument, ""},
		{"create fractional ttl", "POST", "/v1/sessions", `{"type":"terminal","ttlSeconds":1.5}`, bad, abi.CodeInvalidArgument, ""},
		{"create overflowing ttl", "POST", "/v1/sessions", `{"type":"terminal","ttlSeconds":1e400}`, bad, abi.CodeInvalidArgument, ""},
		{"create wrong type ephemeral", "POST", "/v1/sessions", `{"type":"terminal","ephemeral":"yes"}`, bad, abi.CodeInvalidArgument, ""},
		{"create duplicate field", "POST", "/v1/sessions", `{"type":"terminal","type":"ai-chat"}`, bad, abi.CodeInvalidArgument, ""},
		{"create duplicate nested field", "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"p","projectId":"q"}}`, bad, abi.CodeInvalidArgument, ""},
		{"create case-mismatched key", "POST", "/v1/sessions", `{"Type":"terminal"}`, bad, abi.CodeInvalidArgument, ""},
		{"create case-mismatched nested key", "POST", "/v1/sessions", `{"type":"terminal","context":{"projectID":"p"}}`, bad, abi.CodeInvalidArgument, ""},
		{"create trailing value", "POST", "/v1/sessions", `{"type":"terminal"} {}`, bad, abi.CodeInvalidArgument, ""},
		{"create trailing garbage", "POST", "/v1/sessions", `{"type":"terminal"}x`, bad, abi.CodeInvalidArgument, ""},
		{"create huge body", "POST", "/v1/sessions", huge, http.StatusRequestEntityTooLarge, abi.CodeInvalidArgument, ""},
		{"create unknown type", "POST", "/v1/sessions", `{"type":"toaster"}`, bad, abi.CodeInvalidArgument, ""},
		{"create unserved type", "POST", "/v1/sessions", `{"type":"network-stream"}`, http.StatusConflict, abi.CodeCapabilityUnsupported, ""},
		{"create unknown transport", "POST", "/v1/sessions", `{"type":"terminal","transport":"pigeon"}`, bad, abi.CodeInvalidArgument, ""},
		{"create negative ttl", "POST", "/v1/sessions", `{"type":"terminal","ttlSeconds":-1}`, bad, abi.CodeInvalidArgument, ""},
		{"create ttl beyond a duration", "POST", "/v1/sessions", `{"type":"terminal","ttlSeconds":9223372037}`, bad, abi.CodeInvalidArgument, ""},
		{"create refused by kind", "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"refuse"}}`, bad, abi.CodeInvalidArgument, ""},
		{"create kind failure", "POST", "/v1/sessions", `{"type":"terminal","context":{"projectId":"boom"}}`, http.StatusServiceUnavailable, abi.CodeResourceUnavailable, ""},

		// Send.
		{"send malformed", "POST", sp + "/send", `{"data":`, bad, abi.CodeInvalidArgument, tid},
		{"send wrong type", "POST", sp + "/send", `{"data":5}`, bad, abi.CodeInvalidArgument, tid},
		{"send unknown field", "POST", sp + "/send", `{"data":"x","urgent":true}`, bad, abi.CodeInvalidArgument, tid},
		{"send case-mismatched key", "POST", sp + "/send", `{"Data":"x"}`, bad, abi.CodeInvalidArgument, tid},
		{"send duplicate field", "POST", sp + "/send", `{"data":"x","data":"y"}`, bad, abi.CodeInvalidArgument, tid},
		{"send unknown encoding", "POST", sp + "/send", `{"data":"x","encoding":"rot13"}`, bad, abi.CodeInvalidArgument, tid},
		{"send bad base64", "POST", sp + "/send", `{"data":"!!!","encoding":"base64"}`, bad, abi.CodeInvalidArgument, tid},
		{"send huge body", "POST", sp + "/send", hugeSend, http.StatusRequestEntityTooLarge, abi.CodeInvalidArgument, tid},
		{"send unknown session", "POST", "/v1/sessions/nope/send", `{"data":"x"}`, http.StatusNotFound, abi.CodeSessionNotFound, "nope"},
		{"send unsupported", "POST", "/v1/sessions/" + debug.SessionID + "/send", `{"data":"x"}`, http.StatusConflict, abi.CodeCapabilityUnsupported, debug.SessionID},
		{"send closed", "POST", "/v1/sessions/" + closed.SessionID + "/send", `{"data":"x"}`, http.StatusGone, abi.CodeSessionClosed, closed.SessionID},
		{"send expired", "POST", "/v1/sessions/" + expiring.SessionID + "/send", `{"data":"x"}`, http.StatusGone, abi.CodeSessionExpired, expiring.SessionID},

		// Control.
		{"control malformed", "POST", sp + "/control", `{`, bad, abi.CodeInvalidArgument, tid},
		{"control unknown command", "POST", sp + "/control", `{"command":"explode"}`, bad, abi.CodeInvalidArgument, tid},
		{"control wrong type", "POST", sp + "/control", `{"command":5}`, bad, abi.CodeInvalidArgument, tid},
		{"control wrong type width", "POST", sp + "/control", `{"command":"resize","width":"80","height":24}`, bad, abi.CodeInvalidArgument, tid},
		{"control resize without size", "POST", sp + "/control", `{"command":"resize"}`, bad, abi.CodeInvalidArgument, tid},
		{"control resize too big", "POST", sp + "/control", `{"command":"resize","width":10001,"height":24}`, bad, abi.CodeInvalidArgument, tid},
		{"control resize negative", "POST", sp + "/control", `{"command":"resize","width":-1,"height":24}`, bad, abi.CodeInvalidArgument, tid},
		{"control resume while active", "POST", sp + "/control", `{"command":"resume"}`, bad, abi.CodeInvalidArgument, tid},
		{"control unknown field", "POST", sp + "/control", `{"command":"interrupt","signal":9}`, bad, abi.CodeInvalidArgument, tid},
		{"control unsupported resize", "POST", "/v1/sessions/" + chat.SessionID + "/control", `{"command":"resize","width":80,"height":24}`, http.StatusConflict, abi.CodeCapabilityUnsupported, chat.SessionID},
		{"control unsupported restart", "POST", "/v1/sessions/" + debug.SessionID + "/control", `{"command":"restart"}`, http.StatusConflict, abi.CodeCapabilityUnsupported, debug.SessionID},
		{"control unknown session", "POST", "/v1/sessions/nope/control", `{"command":"interrupt"}`, http.StatusNotFound, abi.CodeSessionNotFound, "nope"},
		{"control close closed", "POST", "/v1/sessions/" + closed.SessionID + "/control", `{"command":"close"}`, http.StatusGone, abi.CodeSessionClosed, closed.SessionID},
		{"control interrupt closed", "POST", "/v1/sessions/" + closed.SessionID + "/control", `{"command":"interrupt"}`, http.StatusGone, abi.CodeSessionClosed, closed.SessionID},

		// Get, events and stream.
		{"get unknown session", "GET", "/v1/sessions/nope", "", http.StatusNotFound, abi.CodeSessionNotFound, "nope"},
		{"events unknown session", "GET", "/v1/sessions/nope/events", "", http.StatusNotFound, abi.CodeSessionNotFound, "nope"},
		{"events long-poll unknown session", "GET", "/v1/sessions/nope/events?wait=1s", "", http.StatusNotFound, abi.CodeSessionNotFound, "nope"},
		{"events after=abc", "GET", sp + "/events?after=abc", "", bad, abi.CodeInvalidArgument, tid},
		{"events after=-1", "GET", sp + "/events?after=-1", "", bad, abi.CodeInvalidArgument, tid},
		{"events limit=x", "GET", sp + "/events?limit=x", "", bad, abi.CodeInvalidArgument, tid},
		{"events limit=-1", "GET", sp + "/events?limit=-1", "", bad, abi.CodeInvalidArgument, tid},
		{"events wait=forever", "GET", sp + "/events?wait=forever", "", bad, abi.CodeInvalidArgument, tid},
		{"events wait=-5", "GET", sp + "/events?wait=-5", "", bad, abi.CodeInvalidArgument, tid},
		{"events contentType=bogus", "GET", sp + "/events?contentType=bogus", "", bad, abi.CodeInvalidArgument, tid},
		{"stream unknown session", "GET", "/v1/sessions/nope/stream", "", http.StatusNotFound, abi.CodeSessionNotFound, "nope"},
		{"stream after=abc", "GET", sp + "/stream?after=abc", "", bad, abi.CodeInvalidArgument, tid},
		{"stream contentType=bogus", "GET", sp + "/stream?contentType=bogus", "", bad, abi.CodeInvalidArgument, tid},
		{"stream without upgrade", "GET", sp + "/stream", "", http.StatusUpgradeRequired, abi.CodeInvalidArgument, tid},
		{"list unknown type", "GET", "/v1/sessions?type=toaster", "", bad, abi.CodeInvalidArgument, ""},

		// Unknown routes and methods.
		{"unknown route", "GET", "/nope", "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"unversioned route", "GET", "/sessions", "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"future version", "GET", "/v2/sessions", "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"unknown subroute", "GET", sp + "/teleport", "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"wrong method on sessions", "DELETE", "/v1/sessions", "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"wrong method on session", "DELETE", sp, "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"wrong method on send", "GET", sp + "/send", "", http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"wrong method on control", "PUT", sp + "/control", `{"command":"close"}`, http.StatusNotFound, abi.CodeInvalidArgument, ""},
		{"wrong method on version", "POST", "/v1/version", "{}", http.StatusNotFound, abi.CodeInvalidArgument, ""},
	}
	hc := srv.Client()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Through a real server, so connection handling (oversized bodies) is exercised too.
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			checkError(t, resp.StatusCode, resp.Header, data, tc.status, tc.code, tc.session)
		})
	}

	// After all of that the gateway still serves, and nothing was created or changed.
	if rec := e.do(t, http.MethodGet, "/v1/version", ""); rec.Code != http.StatusOK {
		t.Fatalf("version after errors: %d", rec.Code)
	}
	if got, err := e.reg.Get(context.Background(), tid); err != nil || got.Status != abi.StatusActive {
		t.Fatalf("terminal session after errors: %v %v", got.Status, err)
	}
	if n := len(listAll(t, e.reg, false)); n != 3 { // term, chat, debug
		t.Fatalf("%d live sessions after errors, want 3", n)
	}
	e.create(t, termBody)
	if in, _ := lastInput(e.terminal, tid); in != nil {
		t.Fatalf("a failed send reached the kind: %q", in)
	}
	// Expired and closed sessions are out of the active list, still visible with all=true.
	if got, _ := e.reg.Get(context.Background(), expiring.SessionID); got.Status != abi.StatusClosed || got.Metadata["closeReason"] != abi.CloseTimeout {
		t.Fatalf("expired session: %s %v", got.Status, got.Metadata["closeReason"])
	}
}

func TestLimitExceeded(t *testing.T) {
	e := newEnv(t, "", live.Config{MaxSessions: 2})
	a := e.create(t, termBody)
	e.create(t, termBody)
	rec := e.do(t, http.MethodPost, "/v1/sessions", termBody)
	checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusTooManyRequests, abi.CodeLimitExceeded, "")
	if rec := e.do(t, http.MethodPost, "/v1/sessions/"+a.SessionID+"/control", `{"command":"close"}`); rec.Code != http.StatusOK {
		t.Fatalf("close: %d %s", rec.Code, rec.Body)
	}
	e.create(t, termBody) // a freed slot is usable again
}

// ---------------------------------------------------------------------------------------------
// Authentication.

func TestAuth(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef-token"
	e := newEnv(t, token, live.Config{})
	for _, c := range []struct {
		name, method, path, auth string
	}{
		{"missing", "GET", "/v1/version", ""},
		{"wrong", "GET", "/v1/version", "Bearer nope"},
		{"prefix of the token", "GET", "/v1/version", "Bearer " + token[:10]},
		{"token plus more", "GET", "/v1/version", "Bearer " + token + "x"},
		{"no scheme", "GET", "/v1/version", token},
		{"wrong scheme", "GET", "/v1/version", "Basic " + token},
		{"lower-case scheme without token", "GET", "/v1/sessions", "bearer"},
		{"unknown route", "GET", "/nope", ""},
		{"create", "POST", "/v1/sessions", ""},
		{"stream", "GET", "/v1/sessions/x/stream", ""},
	} {
		var body string
		if c.method == "POST" {
			body = termBody
		}
		rec := e.do(t, c.method, c.path, body, "Authorization", c.auth)
		checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusUnauthorized, abi.CodeAuthenticationInvalid, "")
		if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", c.name, rec.Header().Get("WWW-Authenticate"))
		}
	}
	if n := len(listAll(t, e.reg, true)); n != 0 {
		t.Fatalf("an unauthenticated create made %d sessions", n)
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token, "BEARER " + token, "  Bearer   " + token + " "} {
		rec := e.do(t, "GET", "/v1/version", "", "Authorization", auth)
		if rec.Code != http.StatusOK {
			t.Fatalf("right token as %q: %d %s", auth, rec.Code, rec.Body)
		}
	}
	// A page that rebinds its own DNS name to the gateway's address sends that name as Host.
	for host, ok := range map[string]bool{
		"127.0.0.1:7777": true, "[::1]:7777": true, "localhost:7777": true, "LOCALHOST": true, "10.1.2.3": true,
		"evil.example:7777": false, "attacker.com": false, "127.0.0.1.nip.io:7777": false, "": false,
	} {
		rec := e.do(t, "GET", "/v1/version", "", "Authorization", "Bearer "+token, "Host", host)
		if got := rec.Code == http.StatusOK; got != ok {
			t.Errorf("Host %q: HTTP %d, want allowed=%v", host, rec.Code, ok)
		}
		if !ok {
			checkError(t, rec.Code, rec.Header(), rec.Body.Bytes(), http.StatusUnauthorized, abi.CodeAuthenticationInvalid, "")
		}
	}
	allow := gateway.Handler(gateway.Options{Registry: e.reg, Token: token, AllowedHosts: []string{"nexus.internal"}})
	req := httptest.NewRequest("GET", "/v1/version", nil)
	req.Host, req.Header["Authorization"] = "nexus.internal:7777", []string{"Bearer " + token}
	rec := httptest.NewRecorder()
	allow.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("an allowed host name: %d %s", rec.Code, rec.Body)
	}

	// Over a real server, through the client: HTTP and the WebSocket upgrade carry the header.
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good := client.New(client.Target{URL: srv.URL, Token: token})
	s, err := good.Create(ctx, abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := good.Dial(ctx, s.SessionID, client.DialOptions{})
	if err != nil {
		t.Fatalf("websocket with the token: %v", err)
	}
	if ev, err := conn.Next(ctx); err != nil || ev.Seq != 1 {
		t.Fatalf("first event over the authenticated stream: %+v %v", ev, err)
	}
	_ = conn.Close()
	for _, tok := range []string{"", "wrong"} {
		bad := client.New(client.Target{URL: srv.URL, Token: tok})
		if _, err := bad.Dial(ctx, s.SessionID, client.DialOptions{}); !client.IsCode(err, abi.CodeAuthenticationInvalid) {
			t.Fatalf("websocket with token %q: %v", tok, err)
		}
		if _, err := bad.List(ctx, false, ""); !client.IsCode(err, abi.CodeAuthenticationInvalid) {
			t.Fatalf("list with token %q: %v", tok, err)
		}
		err := bad.Stream(ctx, s.SessionID, client.StreamOptions{Follow: true, Transport: abi.TransportHybrid}, func(abi.Event) error { return nil })
		if !client.IsCode(err, abi.CodeAuthenticationInvalid) {
			t.Fatalf("hybrid stream with token %q: %v", tok, err)
		}
	}
}

func listAll(t testing.TB, reg *live.Registry, all bool) []abi.Session {
	t.Helper()
	ss, err := reg.List(context.Background(), all)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}
