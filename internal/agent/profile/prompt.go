package profile

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Workspace rules files read into the system prompt, in this order.
var workspaceFiles = []string{"AGENTS.md", "NEXUS.md"}

// PromptPart is one source of the system prompt.
type PromptPart struct {
	// Source is base, identity, soul or workspace.
	Source string `json:"source"`
	// Path is the file read ("" for the built-in base).
	Path      string `json:"path,omitempty"`
	Chars     int    `json:"chars"`
	Truncated bool   `json:"truncated,omitempty"`
}

// PromptReport is what went into a system prompt (sessions.json systemPromptReport).
type PromptReport struct {
	Agent     string       `json:"agent"`
	Workspace string       `json:"workspace"`
	Chars     int          `json:"chars"`
	Parts     []PromptPart `json:"parts"`
	// RulesFiles are the workspace's rules files that were read.
	RulesFiles []string `json:"rulesFiles,omitempty"`
}

// SystemPrompt composes p's system prompt for a conversation working in workspace: a base
// that says who and where the agent is, the agent's IDENTITY.md and SOUL.md, and the
// workspace's AGENTS.md and NEXUS.md, each cut at 64 KiB. It is read again at each call so an
// edit takes effect at the next turn (and compaction).
func (p *Profile) SystemPrompt(workspace string) (string, PromptReport, error) {
	rep := PromptReport{Agent: p.ID, Workspace: workspace}
	var b strings.Builder
	base := fmt.Sprintf("You are %s, an agent working through nexus. Your workspace is %s: relative paths in your tools resolve there. Use the tools to read, search, edit and run; say what you did and what you found. Calls of one reply run in order; to run independent ones at the same time, add \"_parallel\": true to their arguments.", p.ID, workspace)
	if p.Description != "" {
		base += " Your role: " + p.Description
	}
	b.WriteString(base)
	rep.Parts = append(rep.Parts, PromptPart{Source: "base", Chars: len(base)})
	add := func(source, path, text string, truncated bool) {
		text = strings.TrimSpace(text)
		if text == "" {
			return
		}
		fmt.Fprintf(&b, "\n\n## %s\n\n%s", filepath.Base(path), text)
		rep.Parts = append(rep.Parts, PromptPart{Source: source, Path: path, Chars: len(text), Truncated: truncated})
	}
	if p.Configured {
		for _, f := range []struct{ source, name string }{{"identity", IdentityFile}, {"soul", SoulFile}} {
			path := filepath.Join(p.Dir, f.name)
			data, cut, err := readFile(path)
			if err != nil {
				return "", rep, err
			}
			add(f.source, path, string(data), cut)
		}
	}
	for _, name := range workspaceFiles {
		path := filepath.Join(workspace, name)
		data, cut, err := readFile(path)
		if err != nil {
			return "", rep, err
		}
		if len(data) > 0 {
			rep.RulesFiles = append(rep.RulesFiles, path)
		}
		add("workspace", path, string(data), cut)
	}
	rep.Chars = b.Len()
	return b.String(), rep, nil
}
