package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/nexus-run/nexus/internal/abi"
)

// ErrContextOverflow is matched (errors.Is) by the error of a request that does not fit the
// model's context window, whichever provider said so: the loop compacts and retries.
var ErrContextOverflow = errors.New("the request exceeds the model's context window")

// errTruncated is a stream that ended, without an error, before the provider said the reply
// was over: a proxy or server that closed the connection early.
var errTruncated = errors.New("the stream ended before the reply was complete")

// overflowPatterns are the messages each provider answers a request too large for the
// context window with.
var overflowPatterns = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`context_length_exceeded`,                             // OpenAI error code (chat and Responses)
	`exceeds the context window`,                          // OpenAI: "Your input exceeds the context window of this model"
	`maximum context length is \d+`,                       // OpenAI (older), vLLM, OpenRouter
	`prompt is too long`,                                  // Anthropic: "prompt is too long: 213462 tokens > 200000 maximum"
	`request_too_large`,                                   // Anthropic: the request's bytes (HTTP 413)
	`exceeds the available context size`,                  // llama.cpp: "request (9009 tokens) exceeds the available context size (8192 tokens)"
	`exceed_context_size_error`,                           // llama.cpp error type
	`input token count.*exceeds the maximum`,              // Gemini: "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)"
	`exceeds the maximum number of tokens allowed`,        // Gemini, other wording
	`range of input length should be`,                     // Qwen/DashScope: "Range of input length should be [1, 129024]"
	`input length.*exceeds`,                               // Qwen/DashScope variants
	`prompt too long; exceeded (max )?context length`,     // Ollama
	`greater than the context length`,                     // LM Studio
	`too large for model with \d+ maximum context length`, // Mistral
}, "|"))

// notOverflow are rate-limit messages that mention tokens without being about the window.
var notOverflow = regexp.MustCompile(`(?i)rate limit|too many requests|tokens per min|quota`)

// isOverflow reports whether a provider error is a context overflow.
func isOverflow(status int, text string) bool {
	if status == http.StatusTooManyRequests || notOverflow.MatchString(text) {
		return false
	}
	return overflowPatterns.MatchString(text)
}

// exchange records what the retrying transport saw of one request, for the error.
type exchange struct {
	mu       sync.Mutex
	attempts int
	status   int
	body     []byte
	// wait is a retry-after longer than the policy allows (0 otherwise).
	wait time.Duration
}

type exchangeKey struct{}

func withExchange(ctx context.Context) (context.Context, *exchange) {
	ex := &exchange{}
	return context.WithValue(ctx, exchangeKey{}, ex), ex
}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

func (ex *exchange) snapshot() (attempts, status int, body []byte, wait time.Duration) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.attempts, ex.status, ex.body, ex.wait
}

// maxErrorBody bounds the bytes of an error response kept for the message.
const maxErrorBody = 64 << 10

// providerError is what a provider said about a failure: from an error response's body or
// an error event in the stream.
type providerError struct {
	Message string
	Type    string
	Code    string
}

// parseProviderError reads the error of a body in any of the providers' shapes:
// {"error":{"message","type","code"}} (OpenAI, llama.cpp, Anthropic's inner object),
// {"type":"error","error":{...}} (Anthropic), {"code","message"} (Responses error events),
// [{"error":{...}}] (Gemini), or plain text.
func parseProviderError(body []byte) providerError {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return providerError{Message: strings.TrimSpace(string(body))}
	}
	if arr, ok := v.([]any); ok && len(arr) > 0 {
		v = arr[0]
	}
	obj, _ := v.(map[string]any)
	if inner, ok := obj["error"].(map[string]any); ok {
		obj = inner
	} else if s, ok := obj["error"].(string); ok {
		return providerError{Message: s}
	}
	pe := providerError{Message: str(obj["message"]), Type: str(obj["type"]), Code: str(obj["code"])}
	if st := str(obj["status"]); pe.Type == "" {
		pe.Type = st // Gemini's "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"
	}
	if pe.Message == "" && pe.Type == "" && pe.Code == "" {
		pe.Message = strings.TrimSpace(string(body))
	}
	return pe
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return fmt.Sprint(x)
	}
	return ""
}

func (pe providerError) text() string {
	parts := make([]string, 0, 3)
	if pe.Message != "" {
		parts = append(parts, pe.Message)
	}
	var tags []string
	for _, t := range []string{pe.Type, pe.Code} {
		if t != "" && !strings.Contains(pe.Message, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) > 0 {
		parts = append(parts, "("+strings.Join(tags, ", ")+")")
	}
	return strings.Join(parts, " ")
}

// errorf builds the *abi.Error of backend name, its message redacted.
func (c *client) errorf(code abi.Code, wrapped error, format string, args ...any) *abi.Error {
	return &abi.Error{Code: code, Message: c.redact("backend " + c.name + ": " + fmt.Sprintf(format, args...)), Err: wrapped}
}

// redact removes the API key from s, and control characters a provider might send.
func (c *client) redact(s string) string {
	if c.key.value != "" {
		s = strings.ReplaceAll(s, c.key.value, "[REDACTED]")
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return -1
		}
		return r
	}, s)
}

// clip bounds a provider's message.
func clip(s string) string {
	const limit = 2000
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// requestError is the error of a request that received no stream: err from the SDK, the
// exchange for what the transport saw.
func (c *client) requestError(ctx context.Context, ex *exchange, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("backend %s: request cancelled: %w", c.name, context.Cause(ctx))
	}
	attempts, status, body, wait := ex.snapshot()
	if status >= 400 {
		return c.statusError(status, body, attempts, wait)
	}
	var after string
	if attempts > 1 {
		after = fmt.Sprintf(" after %d attempts", attempts)
	}
	// The SDK's own error text may hold the URL and the body; ours holds neither.
	cause := transportCause(err)
	return c.errorf(abi.CodeResourceUnavailable, cause, "%s: no response%s: %s", c.endpoint(), after, clip(cause.Error()))
}

// transportCause returns the transport's error without net/http's wrapper, which names the
// URL.
func transportCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// statusError is the error of an HTTP error response.
func (c *client) statusError(status int, body []byte, attempts int, wait time.Duration) error {
	pe := parseProviderError(body)
	text := clip(pe.text())
	head := fmt.Sprintf("%s: HTTP %d %s", c.endpoint(), status, http.StatusText(status))
	if attempts > 1 {
		head += fmt.Sprintf(" after %d attempts", attempts)
	}
	if wait > 0 {
		head += fmt.Sprintf(" (the server asks to wait %s, more than max_retry_wait %s)", wait, c.retry.maxWait)
	}
	if text != "" {
		head += ": " + text
	}
	switch {
	case isOverflow(status, pe.text()) || status == http.StatusRequestEntityTooLarge:
		return c.errorf(abi.CodeInvalidArgument, ErrContextOverflow, "%s", head)
	case status == http.StatusTooManyRequests:
		return c.errorf(abi.CodeLimitExceeded, nil, "%s", head)
	case status >= 500:
		return c.errorf(abi.CodeResourceUnavailable, nil, "%s", head)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		hint := "the backend sends no key: name its variable with api_key_env"
		if c.cfg.APIKeyEnv != "" {
			hint = "check the key in $" + c.cfg.APIKeyEnv
		}
		return c.errorf(abi.CodeAuthenticationInvalid, nil, "%s (%s)", head, hint)
	}
	return c.errorf(abi.CodeInvalidArgument, nil, "%s", head)
}

// streamFailure is an error the provider reported inside a stream.
type streamFailure struct {
	body []byte
}

func (e *streamFailure) Error() string { return parseProviderError(e.body).text() }

// streamError is the error of a stream that ended early.
func (c *client) streamError(err error) error {
	var sf *streamFailure
	var tooLong *ReplyTooLongError
	switch {
	case errors.As(err, &tooLong):
		return c.errorf(abi.CodeLimitExceeded, err, "%s: %s", c.endpoint(), err)
	case errors.Is(err, errTruncated):
		return c.errorf(abi.CodeConnectionLost, err, "%s: %s", c.endpoint(), err)
	case errors.As(err, &sf):
		pe := parseProviderError(sf.body)
		text := pe.text()
		head := fmt.Sprintf("%s: error in the stream: %s", c.endpoint(), clip(text))
		switch {
		case isOverflow(0, text):
			return c.errorf(abi.CodeInvalidArgument, ErrContextOverflow, "%s", head)
		case notOverflow.MatchString(text):
			return c.errorf(abi.CodeLimitExceeded, nil, "%s", head)
		case strings.Contains(strings.ToLower(pe.Type+pe.Code), "invalid"):
			return c.errorf(abi.CodeInvalidArgument, nil, "%s", head)
		}
		return c.errorf(abi.CodeResourceUnavailable, nil, "%s", head)
	case errors.Is(err, io.ErrUnexpectedEOF) || isConnError(err):
		return c.errorf(abi.CodeConnectionLost, err, "%s: connection lost mid-reply: %s", c.endpoint(), err)
	}
	return c.errorf(abi.CodeResourceUnavailable, err, "%s: bad stream: %s", c.endpoint(), clip(err.Error()))
}

// isConnError reports a network error: reset, closed, timed out.
func isConnError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || os.IsTimeout(err)
}
