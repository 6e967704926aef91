package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/transcript"
)

// API names written in assistant messages (pi's).
const (
	APIOpenAICompletions = "openai-completions"
	APIOpenAIResponses   = "openai-responses"
	APIAnthropicMessages = "anthropic-messages"
	// APIACP marks the replies of an acp backend's agent (package acpengine).
	APIACP = "acp"
)

// Options are what Open takes from its caller rather than from the config.
type Options struct {
	// Getenv reads the API key's variable (default os.Getenv).
	Getenv func(string) string
	// Transport sends the requests (default: a clone of http.DefaultTransport).
	Transport http.RoundTripper
	// RawLog, when set, records every HTTP exchange with the backend (each retry's too).
	RawLog *RawLog
	// Sleep, Now and Jitter drive the retries: Sleep waits d or until ctx ends (default a
	// timer), Now reads the clock for retry-after dates, Jitter returns a duration uniform
	// in [0, ceiling]. Tests inject them so nothing sleeps.
	Sleep  func(ctx context.Context, d time.Duration) error
	Now    func() time.Time
	Jitter func(ceiling time.Duration) time.Duration
}

// secret holds an API key and prints as [REDACTED] in every format, so a struct holding it
// never shows it.
type secret struct{ value string }

func (secret) String() string               { return "[REDACTED]" }
func (secret) GoString() string             { return "[REDACTED]" }
func (secret) Format(f fmt.State, _ rune)   { _, _ = f.Write([]byte("[REDACTED]")) }
func (secret) MarshalJSON() ([]byte, error) { return []byte(`"[REDACTED]"`), nil }
func (secret) MarshalText() ([]byte, error) { return []byte("[REDACTED]"), nil }

// client is the Provider of every kind.
type client struct {
	name  string
	cfg   Backend
	key   secret
	retry retryPolicy
	httpc *http.Client
	now   func() time.Time
	// shown is the base URL as errors show it: no credentials, no query.
	shown string
	api   string
	// open starts a stream of the backend's kind.
	open func(ctx context.Context, req Request, msgs []Message) (decoder, error)
}

// Open returns the Provider of a validated backend. The API key is read from the variable
// the backend names; an unset or empty variable is an INVALID_ARGUMENT error naming it.
func Open(b Backend, opts Options) (Provider, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &client{name: b.Name, cfg: b, now: opts.Now}
	if b.APIKeyEnv != "" {
		c.key.value = strings.TrimSpace(getenv(b.APIKeyEnv))
		if c.key.value == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "backend %s: the environment variable %s (api_key_env) is not set", b.Name, b.APIKeyEnv)
		}
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.retry = retryPolicy{attempts: defaultAttempts, base: defaultBase, maxDelay: defaultMaxDelay, maxWait: defaultMaxWait,
		sleep: opts.Sleep, now: c.now, jitter: opts.Jitter}
	if b.MaxAttempts > 0 {
		c.retry.attempts = b.MaxAttempts
	}
	if b.MaxRetryWait != "" {
		c.retry.maxWait, _ = time.ParseDuration(b.MaxRetryWait) // checked by Validate
	}
	if c.retry.sleep == nil {
		c.retry.sleep = sleepContext
	}
	if c.retry.jitter == nil {
		c.retry.jitter = fullJitter
	}
	next := opts.Transport
	if next == nil {
		next = http.DefaultTransport.(*http.Transport).Clone()
	}
	if opts.RawLog != nil {
		next = &rawTransport{next: next, log: opts.RawLog}
	}
	c.httpc = &http.Client{Transport: &retryTransport{next: next, p: &c.retry}}
	u, _ := url.Parse(b.BaseURL)
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	c.shown = strings.TrimSuffix(u.String(), "/")
	c.api = APIOf(b.Kind)
	switch b.Kind {
	case KindOpenAICompatible:
		c.open = c.openChat()
	case KindOpenAIResponses:
		c.open = c.openResponses()
	case KindAnthropic:
		c.open = c.openAnthropic()
	}
	return c, nil
}

// Format prints a provider as its backend's name and API only: fmt does not call the
// methods of unexported fields, so a %+v of the struct would show the key.
func (c *client) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "provider(%s, %s at %s)", c.name, c.cfg.Kind, c.shown)
}

// endpoint names the backend's API in errors.
func (c *client) endpoint() string { return c.cfg.Kind + " at " + c.shown }

func (c *client) model(req Request) string {
	if req.Model != "" {
		return req.Model
	}
	return c.cfg.Model
}

func (c *client) maxTokens(req Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	return c.cfg.MaxTokens
}

// Stream implements Provider.
func (c *client) Stream(ctx context.Context, req Request) (Stream, error) {
	if req.Thinking != "" && !transcript.ValidThinkingLevel(req.Thinking) {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "thinking level %q: use off, minimal, low, medium, high, xhigh or max", req.Thinking)
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "tool %d has no name", i)
		}
	}
	msgs, err := prepare(req.Messages, target{api: c.api, provider: c.name, model: c.model(req), callID: c.callID()})
	if err != nil {
		return nil, err
	}
	// The stream's own context: Close cancels it, which closes the connection.
	sctx, cancel := context.WithCancel(ctx)
	sctx, ex := withExchange(sctx)
	dec, err := c.open(sctx, req, msgs)
	if err != nil {
		cancel()
		return nil, c.requestError(ctx, ex, err)
	}
	msg := Message{Role: RoleAssistant, API: c.api, Provider: c.name, Model: c.model(req), Timestamp: c.now().UnixMilli()}
	maxArgs := req.MaxToolArguments
	if maxArgs <= 0 {
		maxArgs = DefaultMaxToolArguments
	}
	maxReply := req.MaxReply
	if maxReply <= 0 {
		maxReply = DefaultMaxReply
	}
	s := newEventStream(sctx, cancel, dec, msg, maxArgs, c.streamError)
	s.b.maxReply = maxReply
	return s, nil
}

// callID maps tool call ids to what the backend's API accepts.
func (c *client) callID() func(string) string {
	switch c.cfg.Kind {
	case KindAnthropic:
		// ^[a-zA-Z0-9_-]+$, at most 64.
		return func(id string) string { return shortID(id, 64, idChar) }
	case KindOpenAICompatible:
		// A Responses id is "call_id|item_id": the call id is the part the result pairs with.
		return func(id string) string {
			if i := strings.IndexByte(id, '|'); i > 0 {
				id = id[:i]
			}
			// OpenAI refuses ids longer than 40.
			return shortID(id, 40, func(r rune) bool { return r > ' ' && r < 0x7f })
		}
	}
	return nil
}

// APIOf is the API (a message's api field) a backend of kind speaks.
func APIOf(kind string) string {
	switch kind {
	case KindOpenAICompatible:
		return APIOpenAICompletions
	case KindOpenAIResponses:
		return APIOpenAIResponses
	case KindAnthropic:
		return APIAnthropicMessages
	case KindACP:
		return APIACP
	}
	return ""
}
