package orchestrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/permission"
	"github.com/nexus-run/nexus/internal/agent/profile"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
)

// PowersField is the sessions.json field, and the runs.json member, recording the powers a
// conversation was given by the one that started it (a subagent's by its spawner, one a
// message opened by its sender): every session on it gets at most these, whatever its
// options and its agent say, after a restart too.
const PowersField = "nexusPowers"

// Powers are what a conversation's model may do. A conversation started by another gets the
// intersection of its starter's and its own agent's (docs/ai-chat.md, Subagents): the stricter
// level, the union of the disabled tools and of the blocked paths, the intersection of the
// allowed paths, and every allowed_targets list of both.
type Powers struct {
	Level     permission.Level `json:"level"`
	Workspace string           `json:"workspace,omitempty"`
	// DisabledTools are neither offered nor run.
	DisabledTools []string `json:"disabledTools,omitempty"`
	// AllowedPaths are read without confirmation at level trusted besides the workspace,
	// BlockedPaths never touched; both absolute.
	AllowedPaths []string `json:"allowedPaths,omitempty"`
	BlockedPaths []string `json:"blockedPaths,omitempty"`
	// AllowedTargets must each let a target be reached.
	AllowedTargets []TargetScope `json:"allowedTargets,omitempty"`
	// AllowHardLinks: level sandboxed may open files with more than one link (both the
	// conversation's agent and its starter must allow it; a record without it refuses).
	AllowHardLinks bool `json:"allowHardLinks,omitempty"`
}

// TargetScope is one agent's allowed_targets as it bounds a conversation. From is the
// conversation whose agent said it ("" for the conversation's own agent), and the relations
// (parent, children, family) are read from there: a subagent may reach what its spawner may,
// besides the spawner itself and the conversations it started in its turn.
type TargetScope struct {
	From    string   `json:"from,omitempty"`
	Allowed []string `json:"allowed"`
}

// OwnPowers are a session's powers by its options (level, workspace) and its agent alone.
func OwnPowers(prof *profile.Profile, level permission.Level, ws string) Powers {
	allowed := prof.AllowedTargets
	if len(allowed) == 0 {
		allowed = []string{RelFamily}
	}
	return Powers{
		Level: level, Workspace: ws,
		DisabledTools:  unionStrings(nil, prof.DisabledTools),
		AllowedPaths:   permission.UnionPaths(ws, prof.AllowedPaths, nil),
		BlockedPaths:   permission.UnionPaths(ws, prof.BlockedPaths, nil),
		AllowedTargets: []TargetScope{{Allowed: slices.Clone(allowed)}},
		AllowHardLinks: prof.AllowHardLinks != nil && *prof.AllowHardLinks,
	}
}

// Bound is p limited by b: the stricter level (b without a level does not bound it), b's
// workspace when it names one, the union of the disabled tools and blocked paths, the
// intersection of the allowed paths, and b's target scopes added to p's.
func (p Powers) Bound(b Powers) Powers {
	out := p
	if b.Level != "" {
		out.Level = permission.Stricter(p.Level, b.Level)
	}
	if b.Workspace != "" {
		out.Workspace = b.Workspace
	}
	out.AllowHardLinks = p.AllowHardLinks && b.AllowHardLinks
	out.DisabledTools = unionStrings(p.DisabledTools, b.DisabledTools)
	out.AllowedPaths = permission.IntersectPaths(out.Workspace, p.AllowedPaths, b.AllowedPaths)
	out.BlockedPaths = permission.UnionPaths(out.Workspace, p.BlockedPaths, b.BlockedPaths)
	out.AllowedTargets = slices.Clone(p.AllowedTargets)
	for _, s := range b.AllowedTargets {
		if !slices.ContainsFunc(out.AllowedTargets, func(o TargetScope) bool { return o.From == s.From && slices.Equal(o.Allowed, s.Allowed) }) {
			out.AllowedTargets = append(out.AllowedTargets, s)
		}
	}
	return out
}

// inherited are p as they bound a conversation that key starts: its own target scope is read
// from key.
func (p Powers) inherited(key string) Powers {
	out := p
	out.AllowedTargets = make([]TargetScope, 0, len(p.AllowedTargets))
	for _, s := range p.AllowedTargets {
		if s.From == "" {
			s.From = key
		}
		out.AllowedTargets = append(out.AllowedTargets, s)
	}
	return out
}

func unionStrings(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// BoundsOf are the powers recorded for the conversation key: on its sessions.json entry and
// on the run that spawned it. A record that does not decode refuses the start: a session must
// not run unbounded because its bounds could not be read.
func (k *Orchestrator) BoundsOf(ctx context.Context, key string) ([]Powers, error) {
	if key == "" {
		return nil, nil
	}
	if pk, err := chatstore.ParseKey(key); err == nil {
		key = pk.String()
	}
	var raws []json.RawMessage
	// The index entry alone (Show would read the whole transcript at every start).
	items, err := k.Chats.List(ctx, conversation.ListOptions{Search: key})
	if err != nil {
		return nil, fmt.Errorf("the powers of %s: %w", key, err)
	}
	for _, it := range items {
		if raw, ok := it.Entry.Extra[PowersField]; ok && it.Key == key {
			raws = append(raws, raw)
		}
	}
	if k.Runs != nil {
		runs, err := k.Runs.List(chatstore.SubagentFilter{ChildSessionKey: key})
		if err != nil {
			return nil, fmt.Errorf("the powers of %s: subagents: %w", key, err)
		}
		for _, r := range runs {
			if raw, ok := r.Extra[PowersField]; ok {
				raws = append(raws, raw)
			}
		}
	}
	out := make([]Powers, 0, len(raws))
	for _, raw := range raws {
		var p Powers
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, abi.Errorf(abi.CodeInternal, "", "the powers recorded for %s do not decode: %v", key, err)
		}
		if p.Level != "" {
			l, err := permission.ParseLevel(string(p.Level))
			if err != nil {
				return nil, abi.Errorf(abi.CodeInternal, "", "the powers recorded for %s: %v", key, err)
			}
			p.Level = l
		}
		out = append(out, p)
	}
	return out, nil
}

// reach checks that every target scope of the conversation's powers lets it reach target;
// errors say why for the model, never what else exists.
func (c *caller) reach(target string) error {
	if target == c.Key {
		return errors.New("that is this conversation")
	}
	runs, err := c.k.Runs.List(chatstore.SubagentFilter{})
	if err != nil {
		return fmt.Errorf("subagents: %w", err)
	}
	requester := make(map[string]string, len(runs))
	for _, r := range runs {
		requester[r.ChildSessionKey] = r.RequesterSessionKey
	}
	parentOf := func(key string) string {
		if key == c.Key && c.SpawnedBy != "" {
			return c.SpawnedBy
		}
		return requester[key]
	}
	// started: target descends from this conversation (it, or a subagent of it, spawned it).
	started := func() bool {
		k, ok := requester[target]
		for n := 0; ok && n <= len(runs); n++ {
			if k == c.Key {
				return true
			}
			k, ok = requester[k]
		}
		return false
	}
	scopes := c.Powers.AllowedTargets
	if len(scopes) == 0 {
		scopes = []TargetScope{{Allowed: []string{RelFamily}}}
	}
	for _, s := range scopes {
		from := firstOf(s.From, c.Key)
		if from != c.Key && (target == from || started()) {
			continue
		}
		rel := ""
		switch {
		case parentOf(from) == target:
			rel = RelParent
		case parentOf(target) == from:
			rel = "child"
		}
		if !targetAllowed(s.Allowed, target, rel) {
			if from != c.Key {
				return fmt.Errorf("refused: %s is not among the conversations this agent may reach (%s, as %s, which started this one, may)", target, strings.Join(s.Allowed, ", "), from)
			}
			return fmt.Errorf("refused: %s is not among the conversations this agent may reach (%s)", target, strings.Join(s.Allowed, ", "))
		}
	}
	return nil
}

// targetAllowed reports whether an allowed_targets list lets a conversation reach target,
// which is its rel (parent, child or "").
func targetAllowed(allowed []string, target, rel string) bool {
	for _, a := range allowed {
		switch {
		case a == target,
			isAgentTarget(a) && strings.HasPrefix(target, a+":"),
			a == RelFamily && rel != "",
			a == RelParent && rel == RelParent,
			a == RelChildren && rel == "child":
			return true
		}
	}
	return false
}

// levelOf is an agent's configured level, "" when it sets none (then it does not bound).
func levelOf(p *profile.Profile) (permission.Level, error) {
	if p.Level == "" {
		return "", nil
	}
	l, err := permission.ParseLevel(p.Level)
	if err != nil {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "agent %s: %v", p.ID, err)
	}
	return l, nil
}
