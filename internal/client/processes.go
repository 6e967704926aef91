package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nexus-run/nexus/internal/abi"
)

// Processes lists the managed processes.
func (c *Client) Processes(ctx context.Context) ([]abi.ProcessInfo, error) {
	var out struct {
		Processes []abi.ProcessInfo `json:"processes"`
	}
	return out.Processes, c.do(ctx, http.MethodGet, "/processes", nil, &out)
}

// ProcessStart starts a managed process.
func (c *Client) ProcessStart(ctx context.Context, s abi.ProcessSpec) (abi.ProcessInfo, error) {
	var out abi.ProcessInfo
	return out, c.do(ctx, http.MethodPost, "/processes", s, &out)
}

// Process returns a process by id or name.
func (c *Client) Process(ctx context.Context, ref string) (abi.ProcessInfo, error) {
	var out abi.ProcessInfo
	return out, c.do(ctx, http.MethodGet, "/processes/"+url.PathEscape(ref), nil, &out)
}

// ProcessControl stops or restarts a process (what: stop or restart).
func (c *Client) ProcessControl(ctx context.Context, ref, what string) (abi.ProcessInfo, error) {
	var out abi.ProcessInfo
	return out, c.do(ctx, http.MethodPost, "/processes/"+url.PathEscape(ref)+"/"+what, nil, &out)
}

// ProcessLogs returns a process's newest lines.
func (c *Client) ProcessLogs(ctx context.Context, ref string, lines int) ([]abi.ProcessLine, error) {
	var out struct {
		Lines []abi.ProcessLine `json:"lines"`
	}
	return out.Lines, c.do(ctx, http.MethodGet, "/processes/"+url.PathEscape(ref)+"/logs?lines="+strconv.Itoa(lines), nil, &out)
}

// Servers lists the servers, the gateway first.
func (c *Client) Servers(ctx context.Context) ([]abi.ProcessServer, error) {
	var out struct {
		Servers []abi.ProcessServer `json:"servers"`
	}
	return out.Servers, c.do(ctx, http.MethodGet, "/servers", nil, &out)
}

// ServerAdd records a server.
func (c *Client) ServerAdd(ctx context.Context, s abi.ProcessServer) (abi.ProcessServer, error) {
	var out abi.ProcessServer
	return out, c.do(ctx, http.MethodPost, "/servers", s, &out)
}

// ServerRemove forgets a server.
func (c *Client) ServerRemove(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/servers/"+url.PathEscape(name), nil, nil)
}

// ConsoleCode mints a one-time sign-in code for the gateway's web console.
func (c *Client) ConsoleCode(ctx context.Context) (abi.ConsoleCode, error) {
	var out abi.ConsoleCode
	err := c.do(ctx, http.MethodPost, "/console/codes", nil, &out)
	return out, err
}
