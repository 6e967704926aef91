package abi_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

func TestTypes(t *testing.T) {
	want := []abi.SessionType{"terminal", "ai-chat", "meta-chat", "debug-stream", "network-stream"}
	got := abi.Types()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Types() = %v, want %v (the ABI's order)", got, want)
	}
	for _, typ := range got {
		if !typ.Valid() {
			t.Errorf("%q.Valid() = false", typ)
		}
	}
	for _, bad := range []abi.SessionType{"", "Terminal", "TERMINAL", "shell", "terminal ", "ai_chat"} {
		if bad.Valid() {
			t.Errorf("%q.Valid() = true", bad)
		}
	}
}

func TestCapabilitiesAllows(t *testing.T) {
	all := abi.Capabilities{Send: true, Receive: true, Interrupt: true, Resize: true, Close: true, Restart: true, Stream: true}
	tests := []struct {
		name string
		caps abi.Capabilities
		cmd  abi.Command
		want bool
	}{
		{"interrupt allowed", all, abi.CommandInterrupt, true},
		{"interrupt refused", abi.Capabilities{Close: true}, abi.CommandInterrupt, false},
		{"resize allowed", all, abi.CommandResize, true},
		{"resize refused", abi.Capabilities{Interrupt: true}, abi.CommandResize, false},
		{"close allowed", abi.Capabilities{Close: true}, abi.CommandClose, true},
		{"close refused", abi.Capabilities{}, abi.CommandClose, false},
		{"restart allowed", all, abi.CommandRestart, true},
		{"restart refused", abi.Capabilities{Send: true, Receive: true, Interrupt: true, Close: true, Stream: true}, abi.CommandRestart, false},
		{"pause needs stream", abi.Capabilities{Stream: true}, abi.CommandPause, true},
		{"resume needs stream", abi.Capabilities{Stream: true}, abi.CommandResume, true},
		{"pause without stream", abi.Capabilities{Send: true}, abi.CommandPause, false},
		{"unknown command", all, "explode", false},
		{"empty command", all, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.caps.Allows(tc.cmd); got != tc.want {
				t.Errorf("%+v.Allows(%q) = %v, want %v", tc.caps, tc.cmd, got, tc.want)
			}
		})
	}
}

func TestEnumsValid(t *testing.T) {
	for _, c := range []abi.Command{"interrupt", "close", "resize", "restart", "pause", "resume"} {
		if !c.Valid() {
			t.Errorf("command %q invalid", c)
		}
	}
	for _, c := range []abi.Command{"", "Close", "kill", "stop"} {
		if c.Valid() {
			t.Errorf("command %q valid", c)
		}
	}
	for _, tr := range []abi.Transport{"websocket", "polling", "hybrid", "local"} {
		if !tr.Valid() {
			t.Errorf("transport %q invalid", tr)
		}
	}
	for _, tr := range []abi.Transport{"", "WebSocket", "http", "sse"} {
		if tr.Valid() {
			t.Errorf("transport %q valid", tr)
		}
	}
	for _, ct := range []abi.ContentType{"ansi", "text", "raw"} {
		if !ct.Valid() {
			t.Errorf("content type %q invalid", ct)
		}
	}
	for _, ct := range []abi.ContentType{"", "ANSI", "binary", "base64"} {
		if ct.Valid() {
			t.Errorf("content type %q valid", ct)
		}
	}
	finals := map[abi.Status]bool{abi.StatusActive: false, abi.StatusPaused: false, abi.StatusClosed: true, abi.StatusError: true, "": false}
	for s, want := range finals {
		if got := s.Final(); got != want {
			t.Errorf("%q.Final() = %v, want %v", s, got, want)
		}
	}
}

func TestFormatTime(t *testing.T) {
	tests := []struct {
		in   time.Time
		want string
	}{
		{time.Date(2023, 10, 1, 12, 0, 0, 0, time.UTC), "2023-10-01T12:00:00.000Z"},
		{time.Date(2023, 10, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600)), "2023-10-01T12:00:00.000Z"},
		{time.Date(2023, 10, 1, 7, 30, 0, 0, time.FixedZone("EST", -5*3600)), "2023-10-01T12:30:00.000Z"},
		// Truncated, never rounded: rounding .9995 up would move the second.
		{time.Date(2023, 12, 31, 23, 59, 59, 999_999_999, time.UTC), "2023-12-31T23:59:59.999Z"},
		{time.Date(2024, 2, 29, 0, 0, 0, 1_000_000, time.UTC), "2024-02-29T00:00:00.001Z"},
		{time.Date(2024, 2, 29, 0, 0, 0, 999_999, time.UTC), "2024-02-29T00:00:00.000Z"},
	}
	for _, tc := range tests {
		got := abi.FormatTime(tc.in)
		if got != tc.want {
			t.Errorf("FormatTime(%v) = %q, want %q", tc.in, got, tc.want)
		}
		if !wireTime.MatchString(got) {
			t.Errorf("FormatTime(%v) = %q is not the wire format", tc.in, got)
		}
		back, err := abi.ParseTime(got)
		if err != nil {
			t.Fatalf("ParseTime(%q): %v", got, err)
		}
		if !back.Equal(tc.in.Truncate(time.Millisecond)) {
			t.Errorf("ParseTime(FormatTime(%v)) = %v", tc.in, back)
		}
	}
}

func TestParseTime(t *testing.T) {
	ok := map[string]time.Time{
		"2023-10-01T12:00:00Z":          time.Date(2023, 10, 1, 12, 0, 0, 0, time.UTC),
		"2023-10-01T12:00:00.5Z":        time.Date(2023, 10, 1, 12, 0, 0, 500_000_000, time.UTC),
		"2023-10-01T14:00:00.000+02:00": time.Date(2023, 10, 1, 12, 0, 0, 0, time.UTC),
	}
	for in, want := range ok {
		got, err := abi.ParseTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "2023-10-01", "2023-10-01 12:00:00Z", "yesterday", "2023-13-01T00:00:00Z"} {
		if _, err := abi.ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) succeeded", bad)
		}
	}
}

func TestCodes(t *testing.T) {
	tests := []struct {
		code      abi.Code
		retriable bool
		status    int
	}{
		{abi.CodeSessionExpired, false, http.StatusGone},
		{abi.CodeSessionClosed, false, http.StatusGone},
		{abi.CodeConnectionLost, true, http.StatusServiceUnavailable},
		{abi.CodeAuthenticationInvalid, false, http.StatusUnauthorized},
		{abi.CodeResourceUnavailable, true, http.StatusServiceUnavailable},
		{abi.CodeSessionNotFound, false, http.StatusNotFound},
		{abi.CodeInvalidArgument, false, http.StatusBadRequest},
		{abi.CodeCapabilityUnsupported, false, http.StatusConflict},
		{abi.CodeLimitExceeded, true, http.StatusTooManyRequests},
		{abi.CodeBusy, true, http.StatusConflict},
		{abi.CodeEventsMissed, false, http.StatusInternalServerError},
		{abi.CodeInternal, false, http.StatusInternalServerError},
	}
	if len(tests) != len(abi.Codes()) {
		t.Fatalf("table covers %d codes, Codes() has %d", len(tests), len(abi.Codes()))
	}
	for i, tc := range tests {
		t.Run(string(tc.code), func(t *testing.T) {
			if abi.Codes()[i] != tc.code {
				t.Errorf("Codes()[%d] = %s", i, abi.Codes()[i])
			}
			if got := tc.code.Retriable(); got != tc.retriable {
				t.Errorf("Retriable() = %v, want %v", got, tc.retriable)
			}
			if got := tc.code.HTTPStatus(); got != tc.status {
				t.Errorf("HTTPStatus() = %d, want %d", got, tc.status)
			}
		})
	}
	// The core ABI's five codes come first, spelled as docs/ABI.md spells them.
	seed := []abi.Code{"SESSION_EXPIRED", "SESSION_CLOSED", "CONNECTION_LOST", "AUTHENTICATION_INVALID", "RESOURCE_UNAVAILABLE"}
	for i, c := range seed {
		if abi.Codes()[i] != c {
			t.Errorf("Codes()[%d] = %s, want %s", i, abi.Codes()[i], c)
		}
	}
}

func TestErrorValue(t *testing.T) {
	cause := errors.New("disk on fire")
	e := &abi.Error{Code: abi.CodeResourceUnavailable, Message: "send", SessionID: "s1", Err: cause}
	if got, want := e.Error(), "RESOURCE_UNAVAILABLE: send: disk on fire"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, cause) {
		t.Error("errors.Is(e, cause) = false; Unwrap must expose the cause")
	}
	if !errors.Is(e, &abi.Error{Code: abi.CodeResourceUnavailable}) {
		t.Error("errors.Is does not match on the code alone")
	}
	if errors.Is(e, &abi.Error{Code: abi.CodeSessionClosed}) {
		t.Error("errors.Is matched another code")
	}
	if errors.Is(e, &abi.Error{Code: abi.CodeResourceUnavailable, Message: "other"}) {
		t.Error("a target with a message must not be a code-only matcher")
	}
	wrapped := fmt.Errorf("outer: %w", e)
	if abi.CodeOf(wrapped) != abi.CodeResourceUnavailable {
		t.Errorf("CodeOf(wrapped) = %s", abi.CodeOf(wrapped))
	}
	if abi.CodeOf(errors.New("plain")) != abi.CodeInternal {
		t.Error("CodeOf(plain error) != INTERNAL")
	}
	if got := abi.Errorf(abi.CodeSessionNotFound, "x", "no session %q", "x").Error(); got != `SESSION_NOT_FOUND: no session "x"` {
		t.Errorf("Errorf message = %q", got)
	}
}

func TestErrorResponse(t *testing.T) {
	now := time.Date(2023, 10, 1, 12, 0, 0, 42_000_000, time.UTC)
	for _, code := range abi.Codes() {
		t.Run(string(code), func(t *testing.T) {
			resp := abi.ErrorResponse(fmt.Errorf("ctx: %w", abi.Errorf(code, "s1", "went %s", "wrong")), now)
			if resp.Status != abi.ResponseError || resp.Data != nil {
				t.Errorf("status/data = %q/%v", resp.Status, resp.Data)
			}
			if resp.Message != "went wrong" {
				t.Errorf("message = %q", resp.Message)
			}
			if len(resp.Errors) != 1 {
				t.Fatalf("errors = %v", resp.Errors)
			}
			it := resp.Errors[0]
			if it.Type != code || it.SessionID != "s1" || it.Timestamp != "2023-10-01T12:00:00.042Z" || it.Retriable != code.Retriable() {
				t.Errorf("item = %+v", it)
			}
			back := abi.FromResponse(resp)
			if back.Code != code || back.SessionID != "s1" || back.Message != "went wrong" {
				t.Errorf("FromResponse = %+v", back)
			}
		})
	}
	plain := abi.ErrorResponse(errors.New("boom"), now)
	if plain.Errors[0].Type != abi.CodeInternal || plain.Message != "boom" || plain.Errors[0].Retriable {
		t.Errorf("plain error response = %+v", plain)
	}
	if got := abi.FromResponse(abi.ControlResponse{Status: abi.ResponseError, Message: "no items"}); got.Code != abi.CodeInternal || got.Message != "no items" {
		t.Errorf("FromResponse without items = %+v", got)
	}
}
