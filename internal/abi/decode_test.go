package abi_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
)

// decodeTarget builds a fresh pointer of each request type the gateway decodes strictly.
var decodeTargets = []struct {
	name string
	new  func() any
}{
	{"CreateRequest", func() any { return new(abi.CreateRequest) }},
	{"SendRequest", func() any { return new(abi.SendRequest) }},
	{"ControlRequest", func() any { return new(abi.ControlRequest) }},
	{"ClientMessage", func() any { return new(abi.ClientMessage) }},
	{"TerminalOptions", func() any { return new(abi.TerminalOptions) }},
}

func TestDecodeStrictAccepts(t *testing.T) {
	t.Run("CreateRequest full", func(t *testing.T) {
		body := `{"type":"terminal","context":{"projectId":"demo","roadmapId":"r","chatId":"c","processId":"p","serverId":"s"},
			"transport":"polling","ttlSeconds":60,"ephemeral":true,"options":{"shell":"/bin/sh","cols":80}}`
		var got abi.CreateRequest
		if err := abi.DecodeStrict([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		want := abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "demo", RoadmapID: "r", ChatID: "c", ProcessID: "p", ServerID: "s"},
			Transport: abi.TransportPolling, TTLSeconds: 60, Ephemeral: true, Options: json.RawMessage(`{"shell":"/bin/sh","cols":80}`)}
		if string(mustJSON(t, got)) != string(mustJSON(t, want)) {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
	})
	t.Run("ControlRequest", func(t *testing.T) {
		var got abi.ControlRequest
		if err := abi.DecodeStrict([]byte(" \n{\"command\":\"resize\",\"width\":80,\"height\":24}\n\t "), &got); err != nil {
			t.Fatal(err)
		}
		if got != (abi.ControlRequest{Command: abi.CommandResize, Width: 80, Height: 24}) {
			t.Errorf("got %+v", got)
		}
	})
	t.Run("SendRequest escapes", func(t *testing.T) {
		var got abi.SendRequest
		if err := abi.DecodeStrict([]byte(`{"data":"echo \u00e9\n\u0003"}`), &got); err != nil {
			t.Fatal(err)
		}
		if got.Data != "echo é\n\x03" {
			t.Errorf("data = %q", got.Data)
		}
	})
	t.Run("escaped key names the same field", func(t *testing.T) {
		var got abi.ControlRequest
		if err := abi.DecodeStrict([]byte(`{"comm\u0061nd":"close"}`), &got); err != nil {
			t.Fatal(err)
		}
		if got.Command != abi.CommandClose {
			t.Errorf("command = %q", got.Command)
		}
	})

	// RawMessage fields take any JSON value, with keys of any name and case, at any depth.
	for _, opts := range []string{
		`{}`, `[]`, `null`, `1`, `-2.5e3`, `"str"`, `true`,
		`{"Shell":"x","BOGUS":{"deep":[1,{"Unknown":null}]}}`,
		`[{"a":1},{"A":2}]`,
		`{"a":` + strings.Repeat(`{"b":`, 20) + `1` + strings.Repeat(`}`, 21),
	} {
		t.Run("options "+opts, func(t *testing.T) {
			var got abi.CreateRequest
			if err := abi.DecodeStrict([]byte(`{"type":"terminal","options":`+opts+`}`), &got); err != nil {
				t.Fatalf("DecodeStrict: %v", err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, []byte(opts)); err != nil {
				t.Fatal(err)
			}
			if string(got.Options) != compact.String() {
				t.Errorf("options = %s, want %s", got.Options, compact.String())
			}
		})
	}

	// map[string]any (session metadata) also accepts any keys.
	t.Run("Session metadata", func(t *testing.T) {
		var s abi.Session
		body := `{"sessionId":"x","type":"network-stream","createdAt":"2023-10-01T12:00:00.000Z","context":{},"transport":"websocket",
			"status":"active","capabilities":{"send":false,"receive":true,"interrupt":false,"resize":false,"close":true,"restart":false,"stream":true},
			"metadata":{"connectionInfo":{"Host":"h","ports":[1,2,{"X":1}]}}}`
		if err := abi.DecodeStrict([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		if s.SessionID != "x" || s.Metadata["connectionInfo"] == nil {
			t.Errorf("session = %+v", s)
		}
	})
}

func TestDecodeStrictRefuses(t *testing.T) {
	tests := []struct {
		name    string
		target  func() any
		body    string
		wantErr string // substring of the error
	}{
		// empty
		{"empty", newCreate, ``, "empty body"},
		{"whitespace", newCreate, " \n\t\r ", "empty body"},

		// unknown fields
		{"unknown top-level", newCreate, `{"type":"terminal","bogus":1}`, `unknown field "bogus" at $`},
		{"unknown control field", newControl, `{"command":"close","force":true}`, `unknown field "force"`},
		{"unknown send field", newSend, `{"data":"x","encodingg":"base64"}`, `unknown field "encodingg"`},
		{"unknown nested", newCreate, `{"type":"terminal","context":{"projectId":"p","bogus":"x"}}`, `unknown field "bogus" at $.context`},
		{"unknown nested in session", newSession, `{"sessionId":"x","capabilities":{"send":true,"fly":true}}`, `unknown field "fly" at $.capabilities`},
		{"unknown in array element", newList, `{"sessions":[{"sessionId":"a"},{"sessionId":"b","extra":1}]}`, `unknown field "extra" at $.sessions[1]`},
		{"unknown in terminal options", newTermOpts, `{"shell":"sh","colour":true}`, `unknown field "colour"`},

		// keys spelled in another case (encoding/json would match them case-insensitively)
		{"SessionId", newSession, `{"SessionId":"x"}`, `unknown field "SessionId"`},
		{"SESSIONID", newSession, `{"SESSIONID":"x"}`, `unknown field "SESSIONID"`},
		{"Type", newCreate, `{"Type":"terminal"}`, `unknown field "Type"`},
		{"ProjectID nested", newCreate, `{"type":"terminal","context":{"ProjectId":"p"}}`, `unknown field "ProjectId" at $.context`},
		{"Command", newControl, `{"Command":"close"}`, `unknown field "Command"`},
		{"TTLSeconds", newCreate, `{"type":"terminal","TTLSeconds":5}`, `unknown field "TTLSeconds"`},
		{"Go field name", newSend, `{"Data":"x"}`, `unknown field "Data"`},

		// duplicate keys (encoding/json would keep the last one silently)
		{"duplicate top-level", newCreate, `{"type":"terminal","type":"ai-chat"}`, `duplicate field "type" at $`},
		{"duplicate nested", newCreate, `{"context":{"projectId":"a","projectId":"b"}}`, `duplicate field "projectId" at $.context`},
		{"duplicate control", newControl, `{"command":"interrupt","command":"close"}`, `duplicate field "command"`},
		{"duplicate inside raw options", newCreate, `{"options":{"a":1,"a":2}}`, `duplicate field "a" at $.options`},
		{"case variant is unknown before duplicate", newCreate, `{"type":"terminal","Type":"ai-chat"}`, `unknown field "Type"`},

		// wrong types
		{"ttl string", newCreate, `{"type":"terminal","ttlSeconds":"60"}`, `field "ttlSeconds": expected int64, got JSON string`},
		{"ttl float", newCreate, `{"ttlSeconds":1.5}`, `field "ttlSeconds"`},
		{"ttl overflow", newCreate, `{"ttlSeconds":1e40}`, `field "ttlSeconds"`},
		{"ephemeral string", newCreate, `{"ephemeral":"yes"}`, `field "ephemeral": expected bool`},
		{"type number", newCreate, `{"type":3}`, `field "type": expected abi.SessionType, got JSON number`},
		{"context array", newCreate, `{"context":[]}`, `field "context"`},
		{"context string", newCreate, `{"context":"p"}`, `field "context"`},
		{"nested wrong type", newCreate, `{"context":{"projectId":7}}`, `field "context.projectId"`},
		{"width string", newControl, `{"command":"resize","width":"80"}`, `field "width"`},
		{"data number", newSend, `{"data":5}`, `field "data"`},
		{"data object", newSend, `{"data":{"x":1}}`, `field "data"`},
		{"env not strings", newTermOpts, `{"env":[1,2]}`, `field "env`},
		{"top-level array", newCreate, `[]`, `expected abi.CreateRequest, got JSON array`},
		{"top-level string", newControl, `"close"`, `got JSON string`},
		{"top-level number", newSend, `42`, `got JSON number`},

		// trailing data
		{"two objects", newCreate, `{} {}`, "trailing data"},
		{"two control objects", newControl, "{\"command\":\"close\"}\n{\"command\":\"close\"}", "trailing data"},
		{"garbage after", newCreate, `{}x`, "trailing data"},
		{"extra brace", newCreate, `{}}`, "trailing data"},
		{"extra bracket", newSend, `{"data":"x"}]`, "trailing data"},
		{"trailing scalar", newSend, `{"data":"x"} 1`, "trailing data"},

		// malformed
		{"unterminated object", newCreate, `{`, "malformed JSON"},
		{"missing value", newCreate, `{"type":}`, "malformed JSON"},
		{"trailing comma", newCreate, `{"type":"terminal",}`, "malformed JSON"},
		{"single quotes", newCreate, `{'type':'terminal'}`, "malformed JSON"},
		{"bare word", newCreate, `nul`, "malformed JSON"},
		{"unterminated string", newSend, `{"data":"x`, "malformed JSON"},
		{"unterminated raw options", newCreate, `{"options":{"a":[1,2}}`, "malformed JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.target()
			err := abi.DecodeStrict([]byte(tc.body), v)
			if err == nil {
				t.Fatalf("DecodeStrict(%q) succeeded: %+v", tc.body, v)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("DecodeStrict(%q) error = %q, want it to contain %q", tc.body, err, tc.wantErr)
			}
		})
	}
}

// TestDecodeStrictDeepNesting: a body within MaxRequestBody made of nothing but brackets must be
// refused promptly and without exhausting memory (the gateway keeps running).
func TestDecodeStrictDeepNesting(t *testing.T) {
	const depth = 200_000 // 400 kB, under MaxRequestBody
	bodies := map[string]string{
		"arrays in raw options":  `{"options":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`,
		"objects in raw options": `{"options":` + strings.Repeat(`{"a":`, depth/5) + "1" + strings.Repeat("}", depth/5) + `}`,
		"top-level arrays":       strings.Repeat("[", depth) + strings.Repeat("]", depth),
		"unclosed":               `{"options":` + strings.Repeat("[", depth),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			if len(body) > abi.MaxRequestBody {
				t.Fatalf("body of %d bytes exceeds MaxRequestBody", len(body))
			}
			var v abi.CreateRequest
			err := abi.DecodeStrict([]byte(body), &v)
			if err == nil {
				t.Fatal("deeply nested body accepted")
			}
			if !strings.Contains(err.Error(), "nested deeper") && !strings.Contains(err.Error(), "exceeded max depth") {
				t.Errorf("error = %.200s; want it to say the body is nested too deeply", err)
			}
		})
	}
}

func newCreate() any         { return new(abi.CreateRequest) }
func newSend() any           { return new(abi.SendRequest) }
func newControl() any        { return new(abi.ControlRequest) }
func newSession() any        { return new(abi.Session) }
func newList() any           { return new(abi.ListResponse) }
func newTermOpts() any       { return new(abi.TerminalOptions) }
func fuzzTarget(i uint8) int { return int(i) % len(decodeTargets) }

// FuzzDecodeStrict: DecodeStrict never panics, and whatever it accepts re-encodes into a body it
// accepts again, which decodes to the same value.
func FuzzDecodeStrict(f *testing.F) {
	seeds := []struct {
		target uint8
		body   string
	}{
		{0, `{"type":"terminal","context":{"projectId":"demo"},"transport":"websocket","ttlSeconds":60,"ephemeral":true,"options":{"shell":"/bin/bash","cols":80,"rows":24,"env":["A=B"]}}`},
		{0, `{"type":"ai-chat","context":{"chatId":"c"}}`},
		{0, `{}`},
		{0, `{"type":"terminal","options":null}`},
		{0, `{"type":"terminal","bogus":1}`},
		{0, `{"Type":"terminal"}`},
		{0, `{"type":"terminal","type":"terminal"}`},
		{0, `{"context":{"bogus":1}}`},
		{0, `{"ttlSeconds":"1"}`},
		{0, `{"options":[[[{"a":{"b":[]}}]]]}`},
		{0, `{} {}`},
		{0, ``},
		{1, `{"data":"echo hi\n"}`},
		{1, `{"data":"ZWNobyBoaQo=","encoding":"base64"}`},
		{1, `{"data":"\ud800"}`},
		{1, "{\"data\":\"\xff\xfe\"}"},
		{1, `{"Data":"x"}`},
		{1, `{"data":1}`},
		{2, `{"command":"interrupt"}`},
		{2, `{"command":"resize","width":80,"height":24}`},
		{2, `{"command":"resize","width":-1,"height":99999999999999999999}`},
		{2, `{"command":"close","command":"close"}`},
		{2, `{"command":"close"}]`},
		{2, `[{"command":"close"}]`},
		{2, `null`},
		{3, `{"op":"send","data":"x"}`},
		{3, `{"op":"resize","width":10,"height":10}`},
		{4, `{"shell":"/bin/zsh","env":["TERM=xterm"]}`},
		{4, `{"env":null}`},
	}
	for _, s := range seeds {
		f.Add(s.target, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, target uint8, body []byte) {
		tg := decodeTargets[fuzzTarget(target)]
		v := tg.new()
		if err := abi.DecodeStrict(body, v); err != nil {
			return
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: accepted %q but cannot re-encode: %v", tg.name, body, err)
		}
		v2 := tg.new()
		if err := abi.DecodeStrict(enc, v2); err != nil {
			t.Fatalf("%s: accepted %q, re-encoded as %s, which is refused: %v", tg.name, body, enc, err)
		}
		enc2, err := json.Marshal(v2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: not stable: %s then %s", tg.name, enc, enc2)
		}
	})
}
