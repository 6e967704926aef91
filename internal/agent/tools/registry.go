package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/nexus-run/nexus/internal/agent/permission"
)

// MCPTool is a tool an MCP server offers.
type MCPTool struct {
	Name        string
	Description string
	InputSchema *jsonschema.Schema
}

// MCPServer is the registry's hook for an MCP server named in the config: list its tools and
// call one. (The go-sdk client that implements it for a configured server is not wired here.)
type MCPServer interface {
	Name() string
	ListTools(ctx context.Context) ([]MCPTool, error)
	CallTool(ctx context.Context, tool string, args json.RawMessage) (Result, error)
}

// Registry is one conversation's tools under its permission checker.
type Registry struct {
	perm *permission.Checker

	mu       sync.Mutex
	builtins map[string]entry
	mcp      map[string]entry
	order    []string
	cache    *SchemaCache
}

type entry struct {
	tool     Tool
	resolved *jsonschema.Resolved
}

// NewRegistry makes an empty registry deciding with perm.
func NewRegistry(perm *permission.Checker) *Registry {
	return &Registry{perm: perm, builtins: map[string]entry{}, mcp: map[string]entry{}}
}

// Add registers a built-in tool.
func (r *Registry) Add(t Tool) error {
	return r.add(r.builtins, t)
}

// SchemaCache shares resolved argument schemas between registries (a gateway's conversations):
// each distinct schema is resolved once, not once per conversation. A resolved schema is only
// read when validating, so sharing it is safe. Safe for concurrent use.
type SchemaCache struct {
	mu sync.Mutex
	m  map[string]*jsonschema.Resolved
}

// NewSchemaCache returns an empty cache.
func NewSchemaCache() *SchemaCache { return &SchemaCache{m: map[string]*jsonschema.Resolved{}} }

func (c *SchemaCache) resolve(s *jsonschema.Schema) (*jsonschema.Resolved, error) {
	if c == nil {
		return s.Resolve(nil) //nolint:wrapcheck // the caller names the tool
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode schema: %w", err)
	}
	key := string(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.m[key]; ok {
		return r, nil
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, err //nolint:wrapcheck // the caller names the tool
	}
	c.m[key] = r
	return r, nil
}

// UseSchemaCache makes the registry resolve its tools' schemas through c.
func (r *Registry) UseSchemaCache(c *SchemaCache) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cache = c
}

func (r *Registry) add(into map[string]entry, t Tool) error {
	s := t.Spec()
	if s.Schema == nil {
		return fmt.Errorf("tool %s: no schema", s.Name)
	}
	r.mu.Lock()
	cache := r.cache
	r.mu.Unlock()
	res, err := cache.resolve(s.Schema)
	if err != nil {
		return fmt.Errorf("tool %s: schema: %w", s.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := into[s.Name]; dup {
		return fmt.Errorf("tool %s registered twice", s.Name)
	}
	into[s.Name] = entry{tool: t, resolved: res}
	if !slices.Contains(r.order, s.Name) { // a built-in may take an MCP tool's name
		r.order = append(r.order, s.Name)
	}
	return nil
}

var mcpNameRE = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// MCPName is the registry name of server's tool: mcp_<server>_<tool>, with characters a model
// API refuses in a tool name replaced by _.
func MCPName(server, tool string) string {
	return "mcp_" + mcpNameRE.ReplaceAllString(server, "_") + "_" + mcpNameRE.ReplaceAllString(tool, "_")
}

// AddMCP registers every tool of srv under MCPName. They resolve after the built-ins: a
// built-in of the same name wins.
func (r *Registry) AddMCP(ctx context.Context, srv MCPServer) error {
	ts, err := srv.ListTools(ctx)
	if err != nil {
		return fmt.Errorf("mcp server %s: list tools: %w", srv.Name(), err)
	}
	for _, t := range ts {
		if err := r.add(r.mcp, &mcpTool{srv: srv, t: t}); err != nil {
			return err
		}
	}
	return nil
}

// MCPTimeout is an MCP tool's default timeout: a server's tool may do real work (a query, a
// fetch), more than a file operation.
const MCPTimeout = 2 * time.Minute

type mcpTool struct {
	srv MCPServer
	t   MCPTool
}

func (m *mcpTool) Spec() Spec {
	s := m.t.InputSchema
	if s == nil {
		s = &jsonschema.Schema{Type: "object"}
	}
	return Spec{Name: MCPName(m.srv.Name(), m.t.Name), Description: m.t.Description, Schema: s, Timeout: MCPTimeout}
}

func (m *mcpTool) Run(ctx context.Context, args json.RawMessage) (Result, error) {
	return m.srv.CallTool(ctx, m.t.Name, args)
}

// Lookup resolves a name as the dispatcher does: built-ins first, then MCP tools.
func (r *Registry) Lookup(name string) (Tool, bool) {
	e, ok := r.lookup(name)
	return e.tool, ok
}

func (r *Registry) lookup(name string) (entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.builtins[name]; ok {
		return e, true
	}
	e, ok := r.mcp[name]
	return e, ok
}

// Specs lists the registered tools (built-ins first, in registration order) that the
// permission level enables: what the model is offered.
func (r *Registry) Specs() []Spec {
	r.mu.Lock()
	var ts []Tool
	for _, n := range r.order {
		if e, ok := r.builtins[n]; ok {
			ts = append(ts, e.tool)
		}
	}
	for _, n := range r.order {
		_, shadowed := r.builtins[n]
		if e, ok := r.mcp[n]; ok && !shadowed {
			ts = append(ts, e.tool)
		}
	}
	r.mu.Unlock()
	var out []Spec
	for _, t := range ts {
		s := t.Spec()
		if r.perm.ToolEnabled(s.Name, s.Paths.Command != "" || isMCP(t)) == nil {
			out = append(out, s)
		}
	}
	return out
}

func isMCP(t Tool) bool {
	_, ok := t.(*mcpTool)
	return ok
}

// Prepared is a checked call: its decision, and what runs it.
type Prepared struct {
	Tool     Tool
	Args     json.RawMessage
	Decision permission.Decision
	Timeout  time.Duration
	// Note is said after the tool's output (a timeout asked for beyond the maximum).
	Note    string
	decided decided
	grace   time.Duration
}

// ParallelArg is the argument member by which a model asks for a reply's calls to run at
// once; the turn loop reads it, Prepare removes it before the tool sees its arguments.
const ParallelArg = "_parallel"

// Prepare checks a call before it runs: the name resolves; the tool is enabled; no JSON string
// in the arguments exceeds MaxFieldBytes; the arguments validate against the tool's schema;
// every path argument passes permission.Checker.Resolve; then Checker.Decide says whether it
// runs, is refused, or needs the user's confirmation. An error is a refusal whose text is safe
// to show to the model.
func (r *Registry) Prepare(name string, args json.RawMessage, al *permission.Allowances) (*Prepared, error) {
	e, ok := r.lookup(name)
	if !ok {
		return nil, fmt.Errorf("unknown tool %q", clipName(name))
	}
	spec := e.tool.Spec()
	shell := spec.Paths.Command != ""
	external := isMCP(e.tool)
	if err := r.perm.ToolEnabled(spec.Name, shell || external); err != nil {
		return nil, err //nolint:wrapcheck // the checker's text is the refusal
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if err := CheckFieldSizes(args, MaxFieldBytes); err != nil {
		return nil, err
	}
	var inst any
	if err := json.Unmarshal(args, &inst); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %w", ErrArguments, err)
	}
	// The loop's own flag (a batch run at once) is no argument of the tool: the schemas refuse
	// unknown members and an MCP server must not receive it.
	if m, ok := inst.(map[string]any); ok {
		if _, flagged := m[ParallelArg]; flagged {
			delete(m, ParallelArg)
			b, err := json.Marshal(m)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrArguments, err)
			}
			args = b
		}
	}
	if err := e.resolved.Validate(inst); err != nil {
		return nil, fmt.Errorf("%w for %s: %w", ErrArguments, spec.Name, err)
	}
	obj, _ := inst.(map[string]any)
	call := permission.Call{Tool: spec.Name, Shell: shell, External: external}
	dec := decided{}
	for _, group := range []struct {
		names []string
		acc   permission.Access
	}{{spec.Paths.Reads, permission.Read}, {spec.Paths.Writes, permission.Write}} {
		for _, arg := range group.names {
			v, present := obj[arg]
			if !present {
				continue
			}
			s, _ := v.(string)
			p, err := r.perm.Resolve(spec.Name, s, group.acc)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", arg, err)
			}
			for _, shown := range spec.Paths.Show {
				if shown == arg {
					call.Shown = append(call.Shown, len(call.Paths))
				}
			}
			call.Paths = append(call.Paths, p)
			dec[s] = p.Abs
		}
	}
	if shell {
		call.Command, _ = obj[spec.Paths.Command].(string)
		if c, ok := e.tool.(Cwder); ok {
			call.Cwd = c.Cwd()
		}
	}
	timeout := r.perm.Timeout(spec.Name, spec.Timeout)
	var note string
	var grace time.Duration
	if ct, ok := e.tool.(CallTimeouter); ok {
		grace = callGrace
		if t := ct.CallTimeout(args); t > 0 {
			if maxT := r.perm.MaxTimeout(); t > maxT {
				note = fmt.Sprintf("[the call asked for a timeout of %s; the maximum is %s, so it ran with %s]", t, maxT, maxT)
				t = maxT
			}
			timeout = t
		}
	}
	return &Prepared{Tool: e.tool, Args: args, Decision: r.perm.Decide(call, al), Timeout: timeout, Note: note, decided: dec, grace: grace}, nil
}

// Run runs an allowed call under its timeout, which starts now: a confirmation's wait before
// it is not the call's time. A call that needs confirmation runs only after Confirm allowed it.
func (p *Prepared) Run(ctx context.Context) (Result, error) {
	if p.Decision.Verdict != permission.Allow {
		return Result{}, errors.New("the call was not allowed")
	}
	ProgressOf(ctx).Start(time.Now())
	res, err := runWithTimeout(context.WithValue(ctx, decidedKey{}, p.decided), p.Tool, p.Timeout, p.grace, p.Args)
	if err == nil && p.Note != "" {
		res.Output = strings.TrimSuffix(res.Output, "\n") + "\n" + p.Note
	}
	return res, err
}

// Confirm applies the user's answer, recording its allowances in al; after an allowing answer
// Run runs the call.
func (p *Prepared) Confirm(a permission.Answer, al *permission.Allowances) (bool, error) {
	if p.Decision.Verdict != permission.Ask || p.Decision.Request == nil {
		return false, errors.New("the call does not need confirmation")
	}
	ok, err := al.Grant(p.Decision.Request, a)
	if err != nil {
		return false, err //nolint:wrapcheck // Grant's text names the answer
	}
	if ok {
		p.Decision = permission.Decision{Verdict: permission.Allow}
	} else {
		p.Decision = permission.Decision{Verdict: permission.Refuse, Reason: "the user denied the call"}
	}
	return ok, nil
}

// CheckFieldSizes refuses a JSON document in which any string (a value or a key, decoded) or
// number is longer than limit bytes: each field is measured, not the whole document.
func CheckFieldSizes(doc []byte, limit int) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: not JSON: %w", ErrArguments, err)
		}
		switch v := tok.(type) {
		case string:
			if len(v) > limit {
				return fmt.Errorf("%w: a field holds %d bytes, more than the %d MB allowed", ErrArguments, len(v), limit>>20)
			}
		case json.Number:
			if len(v) > limit {
				return fmt.Errorf("%w: a number holds %d bytes, more than the %d MB allowed", ErrArguments, len(v), limit>>20)
			}
		}
	}
}

func clipName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
