package source

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Nexus reads nexus's own conversations (docs/conversations.md): pi v3 transcripts in
// state/sessions ($NEXUS_HOME/state, NEXUS_HOME defaulting to ~/nexus), archives included,
// with their sessions.json entries (origin, model, subagent and fork fields).
type Nexus struct{ stores *stores }

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

// Parse implements Source: the pi adapter's parse, then the session's entry in the
// sessions.json of the file's directory, if it has one (chatstore's format, OpenClaw's
// fields and nexus's additions; read through the adapter's cache of stores).
func (n Nexus) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res, err := parsePiAs(ctx, n.Name(), r, path, offset)
	if err != nil {
		return res, err
	}
	key, e, err := n.stores.lookup(filepath.Join(filepath.Dir(path), "sessions.json"), res.Session.ID, path)
	if err != nil {
		return res, fmt.Errorf("nexus: %w", err)
	}
	if e != nil {
		e.apply(&res.Session, key)
	}
	return res, nil
}
