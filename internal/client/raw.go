package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
)

// PathSegment is s as one path segment, escaped, with a name of dots only spelled with %2E,
// which no router may take for a relative path.
func PathSegment(s string) string { return pathSegment(s) }

// Open sends a request to a route under /v1 with a streamed body (nil: none) and returns the
// response of a success, whose body the caller reads and closes; an answer with an error
// status is returned as its ABI error. What other packages build on the client (chatclient)
// uses it for what JSON requests (Do) cannot carry.
func (c *Client) Open(ctx context.Context, method, path string, body io.Reader, size int64, ctype string) (*http.Response, error) {
	return c.open(ctx, method, path, body, size, ctype)
}

// ConnectionLost wraps a failure to reach the gateway, or to read its answer, as the ABI's
// CONNECTION_LOST naming where the client connects.
func (c *Client) ConnectionLost(err error) error { return c.connectionLost(err) }

// Do sends a JSON request (body nil: none) to a route under /v1 and decodes the answer into
// out (nil: discarded).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, method, path, body, out)
}

// pathSegment is s as one path segment, escaped, with a name of dots only spelled with %2E.
func pathSegment(s string) string {
	if strings.Trim(s, ".") == "" {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// open sends a request and returns the response of a success; an answer with an error status
// is returned as its ABI error.
func (c *Client) open(ctx context.Context, method, path string, body io.Reader, size int64, ctype string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+abi.APIPrefix+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", ctype)
	}
	if c.target.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.target.Token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, c.connectionLost(err)
	}
	if resp.StatusCode < 300 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, abi.MaxRequestBody))
	if err != nil {
		return nil, c.connectionLost(err)
	}
	return nil, errorAnswer(resp, data)
}

// errorAnswer is the error of a response with an error status: its ABI error response, or
// INTERNAL naming what came instead.
func errorAnswer(resp *http.Response, data []byte) error {
	var er abi.ControlResponse
	if json.Unmarshal(data, &er) == nil && er.Status == abi.ResponseError {
		return abi.FromResponse(er)
	}
	return &abi.Error{Code: abi.CodeInternal, Message: fmt.Sprintf("gateway answered %s: %s", resp.Status, bytes.TrimSpace(data))}
}
