package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// The fuzz targets feed arbitrary bytes to the live handler. Properties: no panic, the answer is
// valid JSON, and its status is 2xx or an error response with a known code and its status.

// fuzzConfig keeps a fuzzing registry small: closed sessions are forgotten quickly.
func fuzzConfig() live.Config {
	return live.Config{MaxSessions: 1000, Retention: time.Millisecond, Sweep: 20 * time.Millisecond, Now: time.Now}
}

func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("answer to %q is not JSON: %d %q", body, rec.Code, rec.Body)
	}
	if rec.Code >= 200 && rec.Code < 300 {
		return
	}
	if err := errorShape(rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
		t.Fatalf("answer to %q: %v\n%s", body, err, rec.Body)
	}
}

// Seeds shared by the body fuzzers: valid bodies of every request, and the classic breakages.
var commonSeeds = []string{
	``, ` `, `{}`, `[]`, `null`, `true`, `0`, `"x"`, `{`, `}`, `{"`, `{"a":}`, `{"a" 1}`, `{,}`,
	`{"type":"terminal"}{"type":"terminal"}`, `{"type":"terminal"} x`,
	`{"__proto__":{}}`, `{"":1}`, "{\"type\":\"\xff\"}", `{"type":"\ud800"}`,
	strings.Repeat("[", 10000), strings.Repeat(`{"context":`, 500) + `{}` + strings.Repeat("}", 500),
	`{"type":"terminal","context":{"projectId":"p"},"options":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`,
	`{"a":1e999999}`, `{"ttlSeconds":-0}`, `{"width":9223372036854775808}`,
}

func FuzzDecodeCreate(f *testing.F) {
	for _, s := range append(commonSeeds,
		`{"type":"terminal","context":{"projectId":"p"}}`,
		`{"type":"ai-chat","context":{"chatId":"c"},"transport":"polling","ttlSeconds":60,"ephemeral":true,"options":{"x":[1,2]}}`,
		`{"type":"debug-stream","context":{"processId":"1","serverId":"s"},"transport":"hybrid"}`,
		`{"type":"network-stream","context":{}}`, `{"type":"meta-chat","context":{"roadmapId":"r"}}`,
		`{"type":5}`, `{"Type":"terminal"}`, `{"type":"terminal","type":"terminal"}`, `{"type":"terminal","bogus":1}`,
		`{"type":"terminal","context":{"projectId":"boom"}}`, `{"type":"terminal","context":{"projectId":"refuse"}}`,
		`{"type":"terminal","ttlSeconds":-5}`, `{"type":"terminal","ttlSeconds":9223372036854775807}`,
		`{"type":"terminal","context":{"projectId":"p"},"options":null}`, `{"type":"terminal","context":null}`,
	) {
		f.Add([]byte(s))
	}
	e := newEnv(f, "", fuzzConfig())
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/sessions", strings.NewReader(string(body))))
		checkAnswer(t, rec, body)
		if rec.Code == http.StatusCreated {
			var s abi.Session
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.SessionID == "" || s.Status != abi.StatusActive {
				t.Fatalf("created %q: %s", body, rec.Body)
			}
			if _, err := e.reg.Close(context.Background(), s.SessionID, abi.CloseRequested); err != nil {
				t.Fatalf("close %s: %v", s.SessionID, err)
			}
		}
	})
}

func FuzzDecodeSend(f *testing.F) {
	for _, s := range append(commonSeeds,
		`{"data":"echo hi\n"}`, `{"data":"aGk=","encoding":"base64"}`, `{"data":"x","encoding":"text"}`,
		`{"data":""}`, `{"data":5}`, `{"Data":"x"}`, `{"data":"x","data":"y"}`, `{"data":"x","encoding":"rot13"}`,
		`{"data":"!!","encoding":"base64"}`, `{"data":"\u0000\u001b[A"}`, `{"data":null}`, `{"encoding":"base64"}`,
	) {
		f.Add([]byte(s))
	}
	e := newEnv(f, "", fuzzConfig())
	s := e.create(f, termBody)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/sessions/"+s.SessionID+"/send", strings.NewReader(string(body))))
		checkAnswer(t, rec, body)
	})
}

func FuzzDecodeControl(f *testing.F) {
	for _, s := range append(commonSeeds,
		`{"command":"interrupt"}`, `{"command":"resize","width":80,"height":24}`, `{"command":"restart"}`,
		`{"command":"pause"}`, `{"command":"resume"}`, `{"command":"close"}`, `{"command":"explode"}`,
		`{"command":5}`, `{"Command":"close"}`, `{"command":"close","command":"close"}`,
		`{"command":"resize","width":-1,"height":1e3}`, `{"command":"resize","width":"80"}`, `{"command":"resize","width":10001,"height":1}`,
	) {
		f.Add([]byte(s))
	}
	e := newEnv(f, "", fuzzConfig())
	f.Fuzz(func(t *testing.T, body []byte) {
		// A fresh session each time, so close, pause and restart inputs do not shadow the rest.
		s, err := e.reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = e.reg.Close(context.Background(), s.SessionID, abi.CloseRequested) }()
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/sessions/"+s.SessionID+"/control", strings.NewReader(string(body))))
		checkAnswer(t, rec, body)
		if rec.Code == http.StatusOK {
			var cr abi.ControlResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &cr); err != nil || cr.Status != abi.ResponseOK || cr.Data == nil || cr.Data.SessionID != s.SessionID {
				t.Fatalf("ok answer to %q: %s", body, rec.Body)
			}
		}
	})
}

// FuzzClientMessage sends arbitrary messages over a live WebSocket stream. After each one it sends
// a sentinel the gateway must refuse; every message up to that refusal must be a valid event, and
// a refusal must be a seq 0 error event with a known code.
func FuzzClientMessage(f *testing.F) {
	for _, s := range append(commonSeeds,
		`{"op":"send","data":"ls\n"}`, `{"op":"send","data":"AAE=","encoding":"base64"}`, `{"op":"resize","width":80,"height":24}`,
		`{"op":"resize","width":0,"height":0}`, `{"op":"resize","width":"80"}`, `{"op":"dance"}`, `{"op":5}`, `{"Op":"send"}`,
		`{"op":"send","op":"resize"}`, `{"op":"send","data":"x","encoding":"gzip"}`, `{"op":"send","data":"%%%","encoding":"base64"}`,
		`{"op":"close"}`, `{"op":""}`,
	) {
		f.Add([]byte(s))
	}
	e := newEnv(f, "", fuzzConfig())
	srv := httptest.NewServer(e.h)
	f.Cleanup(srv.Close)
	s := e.create(f, termBody)
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/sessions/" + s.SessionID + "/stream?after=1000000"
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = c.CloseNow() })
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, msg []byte) {
		if len(msg) > 64<<10 {
			t.Skip("beyond what one message may carry")
		}
		typ := websocket.MessageBinary
		if utf8.Valid(msg) {
			typ = websocket.MessageText
		}
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		defer tcancel()
		if err := c.Write(tctx, typ, msg); err != nil {
			t.Fatalf("write %q: %v", msg, err)
		}
		sentinel := fmt.Sprintf("sentinel-%d", n.Add(1))
		if err := c.Write(tctx, websocket.MessageText, []byte(`{"op":"`+sentinel+`"}`)); err != nil {
			t.Fatalf("write sentinel after %q: %v", msg, err)
		}
		for {
			_, b, err := c.Read(tctx)
			if err != nil {
				t.Fatalf("after %q the stream failed: %v", msg, err)
			}
			var ev abi.Event
			if !json.Valid(b) || json.Unmarshal(b, &ev) != nil || ev.SessionID != s.SessionID || ev.Timestamp == "" {
				t.Fatalf("after %q: not an event: %q", msg, b)
			}
			if ev.Event != abi.EventError {
				continue // session events (none expected, but allowed)
			}
			var p abi.ErrorPayload
			if err := json.Unmarshal(ev.Payload, &p); err != nil || ev.Seq != 0 || p.Type != abi.PayloadError || p.Error.Message == "" {
				t.Fatalf("after %q: bad error event %s", msg, b)
			}
			known := false
			for _, code := range abi.Codes() {
				known = known || code == p.Error.Code
			}
			if !known {
				t.Fatalf("after %q: unknown code %q", msg, p.Error.Code)
			}
			if strings.Contains(p.Error.Message, sentinel) {
				return
			}
		}
	})
}
