package tools

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPConnect says how to reach an MCP server: a command to start (stdio) or a URL
// (Streamable HTTP, or HTTP+SSE when SSE is set).
type MCPConnect struct {
	Command string
	Args    []string
	// Env is the command's whole environment.
	Env []string
	Dir string
	URL string
	SSE bool
	// Headers are set on every request to URL (a client's tokens).
	Headers map[string]string
}

// headerTransport sets a server's headers on each of its requests.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper must not change the request it is given.
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	return h.base.RoundTrip(req)
}

// ConnectMCP starts or dials the server and returns the connected client; Close ends the
// session (and stops the command: stdin closed, then SIGTERM, then SIGKILL of its group).
func ConnectMCP(ctx context.Context, name, version string, c MCPConnect) (*MCPClient, error) {
	var t sdk.Transport
	if c.URL != "" {
		hc := &http.Client{}
		if len(c.Headers) > 0 {
			hc.Transport = headerTransport{base: http.DefaultTransport, headers: c.Headers}
		}
		if c.SSE {
			t = &sdk.SSEClientTransport{Endpoint: c.URL, HTTPClient: hc}
		} else {
			t = &sdk.StreamableClientTransport{Endpoint: c.URL, HTTPClient: hc, MaxRetries: -1}
		}
	} else {
		// The server lives as long as the client session, not as long as ctx (the connect).
		cmd := exec.CommandContext(context.WithoutCancel(ctx), c.Command, c.Args...) //nolint:gosec // G204: the operator's config names the server
		cmd.Env, cmd.Dir, cmd.Stderr = c.Env, c.Dir, os.Stderr
		// Its own process group, killed with the gateway: an MCP server never outlives the
		// conversation that started it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		t = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "nexus", Version: version}, nil).Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: connect: %w", name, err)
	}
	return &MCPClient{name: name, cs: cs}, nil
}

// Close ends the session with the server.
func (c *MCPClient) Close() error {
	if err := c.cs.Close(); err != nil {
		return fmt.Errorf("mcp server %s: close: %w", c.name, err)
	}
	return nil
}
