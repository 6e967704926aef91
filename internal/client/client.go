// Package client is the Go client of the nexus gateway: the HTTP API, the WebSocket stream with
// reconnection and resume by sequence, and long-polling.
package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nexus-run/nexus/internal/abi"
)

// Target says where the gateway is: a unix socket, or an http(s) URL with a bearer token.
type Target struct {
	Socket string
	URL    string
	Token  string
}

func (t Target) String() string {
	if t.Socket != "" {
		return t.Socket
	}
	return t.URL
}

// Client talks to one gateway. It is safe for concurrent use.
type Client struct {
	target Target
	base   string
	hc     *http.Client
}

// New returns a client for target.
func New(target Target) *Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	base := strings.TrimRight(target.URL, "/")
	if target.Socket != "" {
		sock := target.Socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}
		base = "http://nexus"
	}
	return &Client{target: target, base: base, hc: &http.Client{Transport: tr}}
}

// Target returns where the client connects.
func (c *Client) Target() Target { return c.target }

// connectionLost wraps a transport failure as the ABI's CONNECTION_LOST.
func (c *Client) connectionLost(err error) error {
	return &abi.Error{Code: abi.CodeConnectionLost, Message: "gateway not reachable at " + c.target.String() + " (is `nexus serve` running?)", Err: err}
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+abi.APIPrefix+path, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.target.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.target.Token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.connectionLost(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return c.connectionLost(err)
	}
	if resp.StatusCode >= 300 {
		var er abi.ControlResponse
		if json.Unmarshal(data, &er) == nil && er.Status == abi.ResponseError {
			return abi.FromResponse(er)
		}
		return &abi.Error{Code: abi.CodeInternal, Message: fmt.Sprintf("gateway answered %s: %s", resp.Status, bytes.TrimSpace(data))}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode %s %s response: %w", method, path, err)
		}
	}
	return nil
}

func sessionPath(id string, rest string) string {
	return "/sessions/" + url.PathEscape(id) + rest
}

// Version returns the gateway's versions.
func (c *Client) Version(ctx context.Context) (abi.VersionResponse, error) {
	var v abi.VersionResponse
	err := c.do(ctx, http.MethodGet, "/version", nil, &v)
	return v, err
}

// List returns live sessions; all adds the closed ones still retained; typ filters when set.
func (c *Client) List(ctx context.Context, all bool, typ abi.SessionType) ([]abi.Session, error) {
	q := url.Values{}
	if all {
		q.Set("all", "true")
	}
	if typ != "" {
		q.Set("type", string(typ))
	}
	p := "/sessions"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var out abi.ListResponse
	err := c.do(ctx, http.MethodGet, p, nil, &out)
	return out.Sessions, err
}

// Create creates a session.
func (c *Client) Create(ctx context.Context, req abi.CreateRequest) (abi.Session, error) {
	var s abi.Session
	err := c.do(ctx, http.MethodPost, "/sessions", req, &s)
	return s, err
}

// Get returns a session object.
func (c *Client) Get(ctx context.Context, id string) (abi.Session, error) {
	var s abi.Session
	err := c.do(ctx, http.MethodGet, sessionPath(id, ""), nil, &s)
	return s, err
}

// Send delivers input bytes (sent as base64 when they are not valid UTF-8).
func (c *Client) Send(ctx context.Context, id string, data []byte) error {
	_, err := c.SendAfter(ctx, id, data)
	return err
}

// SendAfter is Send, returning the sequence number the events caused by the input come after.
func (c *Client) SendAfter(ctx context.Context, id string, data []byte) (uint64, error) {
	r, err := c.SendMessage(ctx, id, data, "")
	return r.AfterSeq, err
}

// SendResult is what the gateway answers a send with.
type SendResult struct {
	AfterSeq uint64 `json:"afterSeq"`
	// MessageID is the queued message's id (ai-chat).
	MessageID string `json:"messageId"`
}

// SendMessage sends an ai-chat message with its queue mode ("" for the conversation's).
func (c *Client) SendMessage(ctx context.Context, id string, data []byte, mode string) (SendResult, error) {
	req := sendRequest(data)
	req.Mode = mode
	var out SendResult
	err := c.do(ctx, http.MethodPost, sessionPath(id, "/send"), req, &out)
	return out, err
}

func sendRequest(data []byte) abi.SendRequest {
	if utf8.Valid(data) {
		return abi.SendRequest{Data: string(data)}
	}
	return abi.SendRequest{Data: base64.StdEncoding.EncodeToString(data), Encoding: "base64"}
}

// Control runs a control command and returns the ABI's control response.
func (c *Client) Control(ctx context.Context, id string, req abi.ControlRequest) (abi.ControlResponse, error) {
	// Keep the result's bytes as the gateway sent them (field order included).
	result := new(json.RawMessage)
	out := abi.ControlResponse{Data: &abi.ControlData{Result: result}}
	err := c.do(ctx, http.MethodPost, sessionPath(id, "/control"), req, &out)
	return out, err
}

// Run runs one command in a session and returns its structured result as sent.
func (c *Client) Run(ctx context.Context, id string, req abi.RunRequest) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodPost, sessionPath(id, "/run"), req, &out)
	return out, err
}

// Poll reads events after a sequence, waiting up to wait for the first one (long-poll).
func (c *Client) Poll(ctx context.Context, id string, after uint64, limit int, wait time.Duration, ct abi.ContentType) (abi.EventsResponse, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	if ct != "" {
		q.Set("contentType", string(ct))
	}
	var out abi.EventsResponse
	err := c.do(ctx, http.MethodGet, sessionPath(id, "/events?"+q.Encode()), nil, &out)
	return out, err
}

// IsCode reports whether err carries the ABI code.
func IsCode(err error, code abi.Code) bool {
	var e *abi.Error
	return errors.As(err, &e) && e.Code == code
}
