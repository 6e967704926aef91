package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/fsutil"
)

// cliContext is state/cli-context.json: the active session of each type.
type cliContext struct {
	Active map[abi.SessionType]activeSession `json:"active"`
}

type activeSession struct {
	SessionID string `json:"sessionId"`
	ProjectID string `json:"projectId,omitempty"`
	SetAt     string `json:"setAt"`
}

const contextFile = "cli-context.json"

func (a *app) loadContext() (cliContext, error) {
	c := cliContext{Active: map[abi.SessionType]activeSession{}}
	path := filepath.Join(a.stateDir, contextFile)
	data, err := fsutil.ReadFileNoFollow(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read CLI context %s: %w", path, err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("parse CLI context %s (delete it to start afresh): %w", path, err)
	}
	if c.Active == nil {
		c.Active = map[abi.SessionType]activeSession{}
	}
	return c, nil
}

// setActive records s as the active session of its type.
func (a *app) setActive(ctx context.Context, s abi.Session) error {
	if err := fsutil.MkdirPrivate(a.stateDir); err != nil {
		return err
	}
	path := filepath.Join(a.stateDir, contextFile)
	lk, err := fsutil.LockContext(ctx, path+".lock", 10*time.Millisecond)
	if err != nil {
		return fmt.Errorf("lock CLI context: %w", err)
	}
	defer func() { _ = lk.Unlock() }()
	c, err := a.loadContext()
	if err != nil {
		return err
	}
	c.Active[s.Type] = activeSession{SessionID: s.SessionID, ProjectID: s.Context.ProjectID, SetAt: abi.FormatTime(a.env.Now())}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode CLI context: %w", err)
	}
	return fsutil.WriteFileAtomic(path, append(data, '\n'))
}

// activeID returns the active session of typ, or "" when there is none.
func (a *app) activeID(typ abi.SessionType) (activeSession, error) {
	c, err := a.loadContext()
	if err != nil {
		return activeSession{}, err
	}
	return c.Active[typ], nil
}

// resolveAny picks the session a generic `nexus session` command works on: the explicit id, or
// the one active session of the context when exactly one type has one (or --type names it).
func (a *app) resolveAny(id string, typ abi.SessionType) (string, error) {
	if id != "" {
		return id, nil
	}
	c, err := a.loadContext()
	if err != nil {
		return "", err
	}
	if typ != "" {
		if s, ok := c.Active[typ]; ok {
			return s.SessionID, nil
		}
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "no --id given and no active %s session; pass --id or open one", typ)
	}
	if len(c.Active) == 1 {
		for _, s := range c.Active {
			return s.SessionID, nil
		}
	}
	if len(c.Active) == 0 {
		return "", abi.Errorf(abi.CodeInvalidArgument, "", "no --id given and no active session; pass --id (see nexus session list)")
	}
	return "", abi.Errorf(abi.CodeInvalidArgument, "", "no --id given and %d session types have an active session; pass --id or --type", len(c.Active))
}
