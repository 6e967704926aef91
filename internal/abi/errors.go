package abi

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code is an error type of the ABI.
type Code string

// Error codes. The first five are the core ABI's; the rest are nexus additions.
const (
	CodeSessionExpired        Code = "SESSION_EXPIRED"
	CodeSessionClosed         Code = "SESSION_CLOSED"
	CodeConnectionLost        Code = "CONNECTION_LOST"
	CodeAuthenticationInvalid Code = "AUTHENTICATION_INVALID"
	CodeResourceUnavailable   Code = "RESOURCE_UNAVAILABLE"
	CodeSessionNotFound       Code = "SESSION_NOT_FOUND"
	CodeInvalidArgument       Code = "INVALID_ARGUMENT"
	CodeCapabilityUnsupported Code = "CAPABILITY_UNSUPPORTED"
	CodeLimitExceeded         Code = "LIMIT_EXCEEDED"
	// CodeBusy: the conversation is busy and the request asked not to wait (an ai-chat
	// message of queue mode reject while a turn runs or messages wait).
	CodeBusy         Code = "BUSY"
	CodeEventsMissed Code = "EVENTS_MISSED"
	CodeInternal     Code = "INTERNAL"
)

// Codes lists every error code.
func Codes() []Code {
	return []Code{CodeSessionExpired, CodeSessionClosed, CodeConnectionLost, CodeAuthenticationInvalid,
		CodeResourceUnavailable, CodeSessionNotFound, CodeInvalidArgument, CodeCapabilityUnsupported,
		CodeLimitExceeded, CodeBusy, CodeEventsMissed, CodeInternal}
}

// Retriable reports whether the same request may succeed later without change.
func (c Code) Retriable() bool {
	switch c {
	case CodeConnectionLost, CodeResourceUnavailable, CodeLimitExceeded, CodeBusy:
		return true
	}
	return false
}

// HTTPStatus is the HTTP status the gateway answers with for c.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeSessionExpired, CodeSessionClosed:
		return http.StatusGone
	case CodeConnectionLost, CodeResourceUnavailable:
		return http.StatusServiceUnavailable
	case CodeAuthenticationInvalid:
		return http.StatusUnauthorized
	case CodeSessionNotFound:
		return http.StatusNotFound
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeCapabilityUnsupported, CodeBusy:
		return http.StatusConflict
	case CodeLimitExceeded:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// ErrorItem is one entry of an error response's errors array.
type ErrorItem struct {
	Type      Code   `json:"type"`
	Message   string `json:"message"`
	Timestamp string `json:"timestamp"`
	SessionID string `json:"sessionId"` // empty when no session is involved
	Retriable bool   `json:"retriable"`
}

// Error is a Go error carrying an ABI code. Every layer returns it so the code survives to the wire.
type Error struct {
	Code      Code
	Message   string
	SessionID string
	Err       error
}

func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &abi.Error{Code: X}) match on the code alone.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code && t.Message == "" && t.SessionID == ""
	}
	return false
}

// Errorf builds an *Error.
func Errorf(code Code, sessionID, format string, args ...any) *Error {
	return &Error{Code: code, SessionID: sessionID, Message: fmt.Sprintf(format, args...)}
}

// CodeOf extracts the ABI code of err, INTERNAL when it carries none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorResponse renders err as the ABI's error response.
func ErrorResponse(err error, now time.Time) ControlResponse {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeInternal, Message: err.Error()}
	}
	msg := e.Message
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return ControlResponse{
		Status:  ResponseError,
		Message: msg,
		Errors: []ErrorItem{{
			Type:      e.Code,
			Message:   e.Error(),
			Timestamp: FormatTime(now),
			SessionID: e.SessionID,
			Retriable: e.Code.Retriable(),
		}},
	}
}

// FromResponse turns an error response back into an *Error (used by clients).
func FromResponse(r ControlResponse) *Error {
	if len(r.Errors) == 0 {
		return &Error{Code: CodeInternal, Message: r.Message}
	}
	it := r.Errors[0]
	return &Error{Code: it.Type, Message: r.Message, SessionID: it.SessionID}
}
