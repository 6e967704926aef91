package profile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
)

// Policy is what an agent may do: agent.toml's permission keys, and the same keys in
// config.toml's [defaults] section, which hold for every agent that does not set them
// (docs/ai-chat.md, Tools and permissions).
type Policy struct {
	// Level is yolo, trusted or sandboxed.
	Level string `json:"level,omitempty" toml:"level,omitempty"`
	// DisabledTools are neither offered nor run.
	DisabledTools []string `json:"disabledTools,omitempty" toml:"disabled_tools,omitempty"`
	// AllowedTargets are the conversations the inter-session tools may reach: parent,
	// children, family (both; the default) or session keys.
	AllowedTargets []string `json:"allowedTargets,omitempty" toml:"allowed_targets,omitempty"`
	// AllowedPaths are read without confirmation at level trusted, besides the workspace;
	// BlockedPaths are never read or written. Relative entries are relative to the workspace.
	AllowedPaths []string `json:"allowedPaths,omitempty" toml:"allowed_paths,omitempty"`
	BlockedPaths []string `json:"blockedPaths,omitempty" toml:"blocked_paths,omitempty"`
	// AllowHardLinks lets level sandboxed read and write files with more than one hard link
	// (refused by default: a link planted in the workspace names a file outside it).
	AllowHardLinks *bool `json:"allowHardLinks,omitempty" toml:"allow_hard_links,omitempty"`
	// Tools are per-tool settings, by tool name ([tools.bash]).
	Tools map[string]ToolPolicy `json:"tools,omitempty" toml:"tools,omitempty"`
	// MaxTimeout bounds the timeout a call asks for itself (bash's timeout_secs), a Go
	// duration (default 1h, at most 1h).
	MaxTimeout string `json:"maxTimeout,omitempty" toml:"max_timeout,omitempty"`
	// ConfirmTimeout bounds a confirmation's wait for the user (default: none, the request
	// stays open as long as the session; unanswered by then, the call is denied).
	ConfirmTimeout string `json:"confirmTimeout,omitempty" toml:"confirm_timeout,omitempty"`
	// MaxConcurrentTools bounds the calls of a batch run at once (default 10).
	MaxConcurrentTools int `json:"maxConcurrentTools,omitempty" toml:"max_concurrent_tools,omitempty"`
	// ProgressInterval is how often a running call reports progress (default 10s).
	ProgressInterval string `json:"progressInterval,omitempty" toml:"progress_interval,omitempty"`
}

// ToolPolicy is one tool's settings.
type ToolPolicy struct {
	// Timeout replaces the tool's own (a Go duration; bash 10m, MCP tools 2m, the rest 30s).
	Timeout string `json:"timeout,omitempty" toml:"timeout,omitempty"`
	// AllowedPaths, when set, are the only paths the tool may touch, whatever the level.
	AllowedPaths []string `json:"allowedPaths,omitempty" toml:"allowed_paths,omitempty"`
}

// Where an effective value came from.
const (
	SourceBuiltin = "built-in default"
	SourceConfig  = "config.toml"
	SourceAgent   = "agent.toml"
	SourceBoth    = "config.toml + agent.toml"
)

// Built-in defaults of the policy.
const (
	DefaultLevel              = permission.Trusted
	DefaultMaxConcurrentTools = 10
	DefaultProgressInterval   = 10 * time.Second
)

// Effective is an agent's policy once config.toml's defaults and its agent.toml are read:
// every key's value and where it came from (Sources, by key as written: "level",
// "tools.bash.timeout").
type Effective struct {
	Level              permission.Level         `json:"level"`
	DisabledTools      []string                 `json:"disabledTools,omitempty"`
	AllowedTargets     []string                 `json:"allowedTargets"`
	AllowedPaths       []string                 `json:"allowedPaths,omitempty"`
	BlockedPaths       []string                 `json:"blockedPaths,omitempty"`
	AllowHardLinks     bool                     `json:"allowHardLinks"`
	Tools              map[string]EffectiveTool `json:"tools,omitempty"`
	MaxTimeout         time.Duration            `json:"maxTimeout"`
	ConfirmTimeout     time.Duration            `json:"confirmTimeout"`
	MaxConcurrentTools int                      `json:"maxConcurrentTools"`
	ProgressInterval   time.Duration            `json:"progressInterval"`
	Sources            map[string]string        `json:"sources"`
}

// EffectiveTool is one tool's configured settings (a zero Timeout: the tool's own).
type EffectiveTool struct {
	Timeout      time.Duration `json:"timeout,omitempty"`
	AllowedPaths []string      `json:"allowedPaths,omitempty"`
}

// ToolSettings are the per-tool settings the permission checker takes.
func (e *Effective) ToolSettings() map[string]permission.ToolSettings {
	out := map[string]permission.ToolSettings{}
	for name, t := range e.Tools {
		out[name] = permission.ToolSettings{Timeout: t.Timeout, AllowedPaths: slices.Clone(t.AllowedPaths)}
	}
	for _, name := range e.DisabledTools {
		s := out[name]
		s.Disabled = true
		out[name] = s
	}
	return out
}

// Resolve is the effective policy of an agent whose agent.toml says agent, under config.toml's
// [defaults] section defaults. A key agent.toml sets replaces the default's, per tool for
// [tools.NAME]; disabled_tools and blocked_paths add up (either file may take a power away,
// neither gives back what the other took). An invalid value is an error naming its key and
// its file.
func Resolve(defaults, agent Policy) (*Effective, error) {
	e := &Effective{Level: DefaultLevel, AllowedTargets: []string{"family"}, MaxTimeout: permission.DefaultMaxTimeout,
		MaxConcurrentTools: DefaultMaxConcurrentTools, ProgressInterval: DefaultProgressInterval, Sources: map[string]string{}}
	for _, k := range []string{"level", "allowed_targets", "max_timeout", "confirm_timeout", "max_concurrent_tools", "progress_interval", "allow_hard_links"} {
		e.Sources[k] = SourceBuiltin
	}
	for _, layer := range []struct {
		src string
		p   Policy
	}{{SourceConfig, defaults}, {SourceAgent, agent}} {
		if err := e.apply(layer.src, layer.p); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Effective) apply(src string, p Policy) error {
	bad := func(key, format string, args ...any) error {
		file := src
		if src == SourceConfig {
			file = "config.toml [defaults]"
		}
		return abi.Errorf(abi.CodeInvalidArgument, "", "%s: %s: %s", file, key, fmt.Sprintf(format, args...))
	}
	if p.Level != "" {
		l, err := permission.ParseLevel(p.Level)
		if err != nil {
			return bad("level", "%v", err)
		}
		e.Level, e.Sources["level"] = l, src
	}
	add := func(key string, dst *[]string, vs []string) {
		if len(vs) == 0 {
			return
		}
		for _, v := range vs {
			if !slices.Contains(*dst, v) {
				*dst = append(*dst, v)
			}
		}
		if e.Sources[key] != "" && e.Sources[key] != src {
			e.Sources[key] = SourceBoth
		} else {
			e.Sources[key] = src
		}
	}
	add("disabled_tools", &e.DisabledTools, p.DisabledTools)
	add("blocked_paths", &e.BlockedPaths, p.BlockedPaths)
	if len(p.AllowedPaths) > 0 {
		e.AllowedPaths, e.Sources["allowed_paths"] = slices.Clone(p.AllowedPaths), src
	}
	if len(p.AllowedTargets) > 0 {
		e.AllowedTargets, e.Sources["allowed_targets"] = slices.Clone(p.AllowedTargets), src
	}
	if p.AllowHardLinks != nil {
		e.AllowHardLinks, e.Sources["allow_hard_links"] = *p.AllowHardLinks, src
	}
	duration := func(key, v string, allowZero bool) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return 0, bad(key, "%q is not a duration (write 90s, 10m or 1h)", v)
		case d < 0 || (d == 0 && !allowZero):
			return 0, bad(key, "%s must be more than 0", v)
		}
		return d, nil
	}
	if p.MaxTimeout != "" {
		d, err := duration("max_timeout", p.MaxTimeout, false)
		if err != nil {
			return err
		}
		if d > permission.DefaultMaxTimeout {
			return bad("max_timeout", "%s is more than the %s a shell command may run", d, permission.DefaultMaxTimeout)
		}
		e.MaxTimeout, e.Sources["max_timeout"] = d, src
	}
	if p.ConfirmTimeout != "" {
		d, err := duration("confirm_timeout", p.ConfirmTimeout, true)
		if err != nil {
			return err
		}
		e.ConfirmTimeout, e.Sources["confirm_timeout"] = d, src
	}
	if p.ProgressInterval != "" {
		d, err := duration("progress_interval", p.ProgressInterval, false)
		if err != nil {
			return err
		}
		if d < time.Second {
			return bad("progress_interval", "%s is less than 1s", d)
		}
		e.ProgressInterval, e.Sources["progress_interval"] = d, src
	}
	if p.MaxConcurrentTools != 0 {
		if p.MaxConcurrentTools < 1 || p.MaxConcurrentTools > 100 {
			return bad("max_concurrent_tools", "%d is not between 1 and 100", p.MaxConcurrentTools)
		}
		e.MaxConcurrentTools, e.Sources["max_concurrent_tools"] = p.MaxConcurrentTools, src
	}
	names := make([]string, 0, len(p.Tools))
	for name := range p.Tools {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		tp := p.Tools[name]
		if name == "" || strings.ContainsAny(name, " \t.") {
			return bad("tools", "%q is not a tool name", name)
		}
		if e.Tools == nil {
			e.Tools = map[string]EffectiveTool{}
		}
		t := e.Tools[name]
		if tp.Timeout != "" {
			key := "tools." + name + ".timeout"
			d, err := duration(key, tp.Timeout, false)
			if err != nil {
				return err
			}
			if d > permission.DefaultMaxTimeout {
				return bad(key, "%s is more than %s", d, permission.DefaultMaxTimeout)
			}
			t.Timeout, e.Sources[key] = d, src
		}
		if len(tp.AllowedPaths) > 0 {
			t.AllowedPaths, e.Sources["tools."+name+".allowed_paths"] = slices.Clone(tp.AllowedPaths), src
		}
		e.Tools[name] = t
	}
	return nil
}

// Policy is e as agent.toml would say it (a key at its built-in default left out, the level
// included only when a file set it).
func (e *Effective) Policy() Policy {
	p := Policy{DisabledTools: slices.Clone(e.DisabledTools), AllowedPaths: slices.Clone(e.AllowedPaths),
		BlockedPaths: slices.Clone(e.BlockedPaths), MaxConcurrentTools: e.MaxConcurrentTools}
	if e.Sources["level"] != SourceBuiltin {
		p.Level = string(e.Level)
	}
	if e.Sources["allowed_targets"] != SourceBuiltin {
		p.AllowedTargets = slices.Clone(e.AllowedTargets)
	}
	if e.AllowHardLinks {
		p.AllowHardLinks = &e.AllowHardLinks
	}
	p.MaxTimeout, p.ProgressInterval = e.MaxTimeout.String(), e.ProgressInterval.String()
	if e.ConfirmTimeout > 0 {
		p.ConfirmTimeout = e.ConfirmTimeout.String()
	}
	for name, t := range e.Tools {
		if p.Tools == nil {
			p.Tools = map[string]ToolPolicy{}
		}
		tp := ToolPolicy{AllowedPaths: slices.Clone(t.AllowedPaths)}
		if t.Timeout > 0 {
			tp.Timeout = t.Timeout.String()
		}
		p.Tools[name] = tp
	}
	return p
}
