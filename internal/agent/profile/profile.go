// Package profile is the agents of an ai-chat (docs/ai-chat.md, Agents): a configured persona
// under state/agents/<agentId>/ (IDENTITY.md, SOUL.md and agent.toml: backend, model,
// permission level, workspace, disabled tools, allowed and blocked paths, allowed targets),
// and the system prompt composed from it and the workspace's AGENTS.md and NEXUS.md, with a
// report of what went in. The agent "main" exists without configuration.
package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// Main is the agent that exists without configuration.
const Main = "main"

// Files of an agent's directory.
const (
	ConfigFile   = "agent.toml"
	IdentityFile = "IDENTITY.md"
	SoulFile     = "SOUL.md"
)

// maxFile bounds each file read into a prompt or config; a larger one is cut (and the report says so).
const maxFile = 64 << 10

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// CheckID refuses an agent id that is not a key segment (lower-case letters, digits, _ and -).
func CheckID(id string) error {
	if !idPattern.MatchString(id) {
		return abi.Errorf(abi.CodeInvalidArgument, "", "agent id %q: use 1-64 lower-case letters, digits, _ and -, starting with a letter or digit", id)
	}
	return nil
}

// Settings are agent.toml's keys; empty ones take the caller's defaults.
type Settings struct {
	Backend   string `json:"backend,omitempty" toml:"backend,omitempty"`
	Model     string `json:"model,omitempty" toml:"model,omitempty"`
	Workspace string `json:"workspace,omitempty" toml:"workspace,omitempty"`
	Thinking  string `json:"thinking,omitempty" toml:"thinking,omitempty"`
	// Description says what the agent is for (nexus agent list).
	Description string `json:"description,omitempty" toml:"description,omitempty"`
	// Policy is what the agent may do: level, disabled tools, allowed and blocked paths,
	// allowed targets, per-tool settings, timeouts and the concurrency limit.
	Policy
}

// Profile is one agent.
type Profile struct {
	ID string `json:"id"`
	// Dir is its directory; Configured is false for the built-in main without one.
	Dir        string `json:"dir"`
	Configured bool   `json:"configured"`
	Settings
	Identity string `json:"identity,omitempty"`
	Soul     string `json:"soul,omitempty"`
}

// Dir is state/agents.
func Dir(stateDir string) string { return filepath.Join(stateDir, "agents") }

// Load reads agent id. main without a directory is the default agent.
func Load(stateDir, id string) (*Profile, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	p := &Profile{ID: id, Dir: filepath.Join(Dir(stateDir), id)}
	fi, err := os.Lstat(p.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && id == Main:
		return p, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "no agent %q (add it with: nexus agent add %s)", id, id)
	case err != nil:
		return nil, fmt.Errorf("agent %s: %w", id, err)
	case !fi.IsDir():
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "agent %s: %s is not a directory (a symlink is refused)", id, p.Dir)
	}
	p.Configured = true
	cfg, _, err := readFile(filepath.Join(p.Dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	if len(cfg) > 0 {
		dec := toml.NewDecoder(bytes.NewReader(cfg)).DisallowUnknownFields()
		if err := dec.Decode(&p.Settings); err != nil {
			var strict *toml.StrictMissingError
			var de *toml.DecodeError
			switch {
			case errors.As(err, &strict):
				row, _ := strict.Errors[0].Position()
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "agent %s: %s line %d: unknown key %s", id, ConfigFile, row, strings.Join(strict.Errors[0].Key(), "."))
			case errors.As(err, &de):
				// DecodeError.String quotes the document's lines: only the message is used.
				row, col := de.Position()
				return nil, abi.Errorf(abi.CodeInvalidArgument, "", "agent %s: %s line %d column %d: %s", id, ConfigFile, row, col, de.Error())
			}
			return nil, abi.Errorf(abi.CodeInvalidArgument, "", "agent %s: %s: %v", id, ConfigFile, err)
		}
	}
	id1, _, err := readFile(filepath.Join(p.Dir, IdentityFile))
	if err != nil {
		return nil, err
	}
	soul, _, err := readFile(filepath.Join(p.Dir, SoulFile))
	if err != nil {
		return nil, err
	}
	p.Identity, p.Soul = string(id1), string(soul)
	return p, nil
}

// List returns every agent, main first.
func List(stateDir string) ([]*Profile, error) {
	ents, err := os.ReadDir(Dir(stateDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	ids := []string{Main}
	for _, e := range ents {
		if e.IsDir() && idPattern.MatchString(e.Name()) && e.Name() != Main {
			ids = append(ids, e.Name())
		}
	}
	slices.Sort(ids[1:])
	out := make([]*Profile, 0, len(ids))
	for _, id := range ids {
		p, err := Load(stateDir, id)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Save writes p's files (0600, in a 0700 directory); create refuses an agent that exists.
func Save(stateDir string, p *Profile, create bool) error {
	if err := CheckID(p.ID); err != nil {
		return err
	}
	dir := filepath.Join(Dir(stateDir), p.ID)
	if err := fsutil.MkdirPrivate(Dir(stateDir)); err != nil {
		return fmt.Errorf("agents directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("agent %s: %w", p.ID, err)
		}
		if create {
			return abi.Errorf(abi.CodeInvalidArgument, "", "agent %s exists (change it with: nexus agent edit %s)", p.ID, p.ID)
		}
		if err := fsutil.CheckDir(dir); err != nil {
			return fmt.Errorf("agent %s: %w", p.ID, err)
		}
	}
	cfg, err := toml.Marshal(p.Settings)
	if err != nil {
		return fmt.Errorf("agent %s: encode %s: %w", p.ID, ConfigFile, err)
	}
	for name, data := range map[string][]byte{ConfigFile: cfg, IdentityFile: []byte(p.Identity), SoulFile: []byte(p.Soul)} {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, name), data); err != nil {
			return fmt.Errorf("agent %s: %w", p.ID, err)
		}
	}
	p.Dir, p.Configured = dir, true
	return nil
}

// readFile reads at most maxFile bytes of path, refusing a symlink; a missing file is empty.
func readFile(path string) ([]byte, bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0) //nolint:gosec // G304: an agent's or workspace's own file, symlinks refused
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, abi.Errorf(abi.CodeInvalidArgument, "", "%s is not a regular file", path)
	}
	buf := make([]byte, maxFile+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	if n > maxFile {
		return buf[:maxFile], true, nil
	}
	return buf[:n], false, nil
}
