package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nexus-run/nexus/internal/chatstore"
)

// Nexus reads nexus's own conversations (docs/conversations.md): pi v3 transcripts in
// state/sessions ($NEXUS_HOME/state, NEXUS_HOME defaulting to ~/nexus), archives included,
// with their sessions.json entries read through internal/chatstore (origin, model, subagent
// and fork fields).
type Nexus struct{}

// Name implements Source.
func (Nexus) Name() string { return "nexus" }

// DefaultRoots implements Source.
func (Nexus) DefaultRoots(env Env) []string {
	home := env.get("NEXUS_HOME")
	if home == "" {
		home = filepath.Join(env.Home, "nexus")
	}
	return []string{filepath.Join(home, "state", "sessions")}
}

// Discover implements Source: the transcripts directly in each root (its subdirectories hold
// blobs and runs, not sessions).
func (Nexus) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(rel, name string) bool {
		return !strings.Contains(rel, "/") && isTranscriptName(name)
	})
}

// Parse implements Source: the pi adapter's parse, then the session's entry in the store of
// the file's directory, if the directory has one.
func (n Nexus) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res, err := parsePiAs(ctx, n.Name(), r, path, offset)
	if err != nil {
		return res, err
	}
	dir := filepath.Dir(path)
	//nolint:gosec // the store beside the transcript being read
	if _, err := os.Lstat(filepath.Join(dir, "sessions.json")); errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	store, err := chatstore.Open(dir, chatstore.Options{})
	if err != nil {
		return res, fmt.Errorf("nexus: %w", err)
	}
	key, e, err := store.Lookup(res.Session.ID)
	if errors.Is(err, chatstore.ErrNotFound) {
		return res, nil // a session the store does not name is still a session
	}
	if err != nil {
		return res, fmt.Errorf("nexus: %w", err)
	}
	se := storeEntry{SessionID: e.SessionID, SessionFile: e.SessionFile, SpawnedBy: e.SpawnedBy,
		Model: e.Model, Label: e.Label, DisplayName: e.DisplayName, ParentSessionID: e.ParentSessionID,
		ParentMessageID: e.ParentMessageID, ToolCallID: e.ToolCallID, IsSubagent: e.IsSubagent,
		ForkedFromSessionID: e.ForkedFromSessionID, Project: e.Project}
	se.apply(&res.Session, key)
	return res, nil
}
