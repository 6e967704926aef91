package source

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// OpenClaw reads OpenClaw's (formerly clawdbot's) transcripts: pi JSONL under
// ~/.openclaw/agents/<agentId>/sessions/ (older: ~/.clawdbot/agents/...), with the session store
// sessions.json beside them naming each session's key, label, model and subagent links.
// Archived transcripts (<file>.deleted.<ts>, .reset.<ts>, .bak.<ts>) are sessions too.
type OpenClaw struct{ stores *stores }

// Name implements Source.
func (OpenClaw) Name() string { return "openclaw" }

// DefaultRoots implements Source.
func (OpenClaw) DefaultRoots(env Env) []string {
	return []string{filepath.Join(env.Home, ".openclaw", "agents"), filepath.Join(env.Home, ".clawdbot", "agents")}
}

// Discover implements Source.
func (OpenClaw) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(rel, name string) bool {
		return filepath.Base(filepath.Dir(rel)) == "sessions" && isTranscriptName(name)
	})
}

// isTranscriptName: <id>.jsonl, or an archive of one (<id>.jsonl.deleted.<ts> and the like).
func isTranscriptName(name string) bool {
	if strings.HasSuffix(name, ".jsonl") {
		return true
	}
	for _, kind := range []string{".jsonl.deleted.", ".jsonl.reset.", ".jsonl.bak."} {
		if strings.Contains(name, kind) {
			return true
		}
	}
	return false
}

// ocStoreMax bounds the sessions.json read for metadata: a store bloated past it (a known
// upstream problem) is skipped rather than read into memory.
const ocStoreMax = 64 << 20

// storeEntry is the part of a sessions.json entry the index uses: OpenClaw's fields and the
// ones nexus adds (docs/conversations.md).
type storeEntry struct {
	SessionID           string `json:"sessionId"`
	SessionFile         string `json:"sessionFile"`
	SpawnedBy           string `json:"spawnedBy"`
	Model               string `json:"model"`
	Label               string `json:"label"`
	DisplayName         string `json:"displayName"`
	ParentSessionID     string `json:"parentSessionId"`
	ParentMessageID     string `json:"parentMessageId"`
	ToolCallID          string `json:"toolCallId"`
	IsSubagent          bool   `json:"isSubagent"`
	TaskStatus          string `json:"taskStatus"`
	ForkedFromSessionID string `json:"forkedFromSessionId"`
	Project             string `json:"project"`
}

// Parse implements Source: the pi adapter's parse, then the session's sessions.json entry (by
// sessionId, or by sessionFile naming this file) for what the transcript does not say.
func (o OpenClaw) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res, err := parsePiAs(ctx, o.Name(), r, path, offset)
	if err != nil {
		return res, err
	}
	key, e, err := o.stores.lookup(filepath.Join(filepath.Dir(path), "sessions.json"), res.Session.ID, path)
	if err != nil {
		return res, fmt.Errorf("openclaw: %w", err)
	}
	if e == nil {
		return res, nil
	}
	e.apply(&res.Session, key)
	return res, nil
}

// apply fills what the transcript did not say from the store entry of key.
func (e *storeEntry) apply(s *Session, key string) {
	if s.Title == "" {
		s.Title = e.Label
		if s.Title == "" {
			s.Title = e.DisplayName
		}
	}
	if s.Model == "" {
		s.Model = e.Model
	}
	if s.Project == "" {
		s.Project = e.Project
	}
	s.ParentSession = e.ParentSessionID
	if s.ParentSession == "" {
		s.ParentSession = e.SpawnedBy // a session key, not an id
	}
	s.ParentMessage, s.ToolCallID = e.ParentMessageID, e.ToolCallID
	s.IsSubagent = e.IsSubagent || strings.Contains(key, ":subagent:") || e.SpawnedBy != ""
	if e.ForkedFromSessionID != "" {
		s.ForkOrigin = e.ForkedFromSessionID
	}
}
