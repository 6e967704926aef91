package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/tools"
	"github.com/nexus-run/nexus/internal/provider"
)

// Toolset runs a turn's calls through a conversation's tool registry: the name resolved, the
// arguments checked, the permission decided, the user asked when the level says so, then the
// tool under its timeout. It implements Tools.
type Toolset struct {
	Registry *tools.Registry
	// Allowances are the conversation's: an answer that grants more than one call is
	// recorded here, and the caller persists them with the conversation.
	Allowances *permission.Allowances
	// Confirm asks the user about a call (the ai-chat kind sends a confirmation-request
	// event and waits for the answer) and returns the answer. It may be called from several
	// goroutines at once (a parallel batch). Nil refuses every call that needs confirmation.
	Confirm func(ctx context.Context, call provider.ToolCall, req *permission.Request) (permission.Answer, error)

	// mu serializes confirmations and allowance updates: two calls of a parallel batch
	// asking about the same file are asked one after the other, and the second sees the
	// first's allowance.
	mu sync.Mutex
}

// Specs implements Tools: the tools the permission level enables.
func (ts *Toolset) Specs() []provider.Tool {
	var out []provider.Tool
	for _, s := range ts.Registry.Specs() {
		schema, err := json.Marshal(s.Schema)
		if err != nil || s.Schema == nil {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, provider.Tool{Name: s.Name, Description: s.Description, Parameters: schema})
	}
	return out
}

// Run implements Tools.
func (ts *Toolset) Run(ctx context.Context, call provider.ToolCall) Outcome {
	ctx = context.WithValue(ctx, callIDKey{}, call.ID)
	if call.ArgumentsError != "" {
		return Outcome{Output: call.ArgumentsError, IsError: true}
	}
	p, err := ts.prepare(ctx, call)
	if err != nil {
		return Outcome{Output: err.Error(), IsError: true}
	}
	res, err := p.Run(ctx)
	if err != nil {
		return Outcome{Output: err.Error(), IsError: true}
	}
	return Outcome{Output: res.Output, IsError: res.IsError}
}

// marksStart: Prepared.Run marks when the call starts to run, after its confirmation.
func (ts *Toolset) marksStart() {}

// errDenied is the model's answer when the user (or the absence of one) refuses a call.
var errDenied = errors.New("the user denied this call")

func (ts *Toolset) prepare(ctx context.Context, call provider.ToolCall) (*tools.Prepared, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	p, err := ts.Registry.Prepare(call.Name, call.Arguments, ts.Allowances)
	if err != nil {
		return nil, err //nolint:wrapcheck // the registry's text is written for the model
	}
	switch p.Decision.Verdict {
	case permission.Allow:
		return p, nil
	case permission.Refuse:
		return nil, errors.New(p.Decision.Reason)
	}
	if ts.Confirm == nil {
		return nil, errDenied
	}
	answer, err := ts.Confirm(ctx, call, p.Decision.Request)
	if err != nil {
		return nil, fmt.Errorf("no confirmation: %w", err)
	}
	ok, err := p.Confirm(answer, ts.Allowances)
	if err != nil {
		return nil, err //nolint:wrapcheck // Confirm's text names the answer
	}
	if !ok {
		return nil, errDenied
	}
	return p, nil
}

type callIDKey struct{}

// CallID is the id of the tool call a tool runs for (Toolset puts it in the tool's context):
// a tool that records where it was called from (sessions_spawn) reads it.
func CallID(ctx context.Context) string {
	id, _ := ctx.Value(callIDKey{}).(string)
	return id
}
