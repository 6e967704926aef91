package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// The gateway's agent shells (docs/agent-shells.md, "MCP over HTTP"): the shells its /v1/mcp
// opened and the lines of their audit logs.

func shellPath(id, rest string) string { return "/shells/" + url.PathEscape(id) + rest }

// Shells returns the open agent shells of the gateway, as session_list describes them.
func (c *Client) Shells(ctx context.Context) ([]abi.Shell, error) {
	var out struct {
		Sessions []abi.Shell `json:"sessions"`
	}
	err := c.do(ctx, http.MethodGet, "/shells", nil, &out)
	return out.Sessions, err
}

// Shell returns one open shell; a closed one is SESSION_CLOSED, an unknown one
// SESSION_NOT_FOUND.
func (c *Client) Shell(ctx context.Context, id string) (abi.Shell, error) {
	var out abi.Shell
	err := c.do(ctx, http.MethodGet, shellPath(id, ""), nil, &out)
	return out, err
}

// ShellEvents reads a shell's audit lines after a sequence (the line number in its log) as
// "audit" events, waiting up to wait for the first one (long-poll). closed is set once the
// close record has been read.
func (c *Client) ShellEvents(ctx context.Context, id string, after uint64, limit int, wait time.Duration) (abi.EventsResponse, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out abi.EventsResponse
	err := c.do(ctx, http.MethodGet, shellPath(id, "/events?"+q.Encode()), nil, &out)
	return out, err
}
