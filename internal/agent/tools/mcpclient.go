package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPClient is the MCPServer hook over a connected go-sdk client session. Connecting (the
// command or URL a config names) is the caller's: this adapter lists and calls tools.
type MCPClient struct {
	name string
	cs   *sdk.ClientSession
}

// NewMCPClient names a connected session as the server the config calls name.
func NewMCPClient(name string, cs *sdk.ClientSession) *MCPClient {
	return &MCPClient{name: name, cs: cs}
}

// Name is the server's name in the config.
func (c *MCPClient) Name() string { return c.name }

// ListTools lists every tool of the server (all pages), with its input schema.
func (c *MCPClient) ListTools(ctx context.Context) ([]MCPTool, error) {
	var out []MCPTool
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		s := &jsonschema.Schema{Type: "object"}
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("tool %s: schema: %w", t.Name, err)
			}
			s = &jsonschema.Schema{}
			if err := json.Unmarshal(b, s); err != nil {
				return nil, fmt.Errorf("tool %s: schema: %w", t.Name, err)
			}
		}
		out = append(out, MCPTool{Name: t.Name, Description: t.Description, InputSchema: s})
	}
	return out, nil
}

// CallTool calls one tool; the text of its content is the result.
func (c *MCPClient) CallTool(ctx context.Context, tool string, args json.RawMessage) (Result, error) {
	res, err := c.cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return Result{}, fmt.Errorf("mcp server %s: %s: %w", c.name, tool, err)
	}
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*sdk.TextContent); ok {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(tc.Text)
		} else {
			fmt.Fprintf(&b, "[%T content not shown]", ct)
		}
	}
	return Result{Output: b.String(), IsError: res.IsError}, nil
}
