package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Nexus reads nexus's own conversations (docs/conversations.md): pi v3 transcripts in
// state/sessions ($NEXUS_HOME/state, NEXUS_HOME defaulting to ~/nexus), archives included,
// with their sessions.json entries (origin, model, subagent and fork fields) and the subagent
// runs of state/subagents/runs.json.
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
// fields and nexus's additions; read through the adapter's cache of stores), then the
// subagent runs of runs.json beside that directory.
func (n Nexus) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res, err := parsePiAs(ctx, n.Name(), r, path, offset)
	if err != nil {
		return res, err
	}
	storePath := filepath.Join(filepath.Dir(path), "sessions.json")
	key, e, err := n.stores.lookup(storePath, res.Session.ID, path)
	if err != nil {
		return res, fmt.Errorf("nexus: %w", err)
	}
	if e != nil {
		e.apply(&res.Session, key)
	}
	// A runs.json that cannot be read links nothing; the transcripts are still read.
	runs, _ := n.stores.runsAt(filepath.Join(filepath.Dir(filepath.Dir(path)), "subagents", "runs.json"))
	n.linkSubagent(res, e, runs, storePath)
	n.linkSpawns(res, runs, storePath)
	return res, nil
}

// linkSubagent completes a child conversation's session: its run (found by the child's
// session id, so an archived child, gone from sessions.json, is still found) says who
// started it and how it went. A child's header names its parent's transcript as
// parentSession: that is the parent, not a fork's source.
func (n Nexus) linkSubagent(res *Result, e *storeEntry, runs *runsFile, storePath string) {
	s := &res.Session
	run, ok := runs.child(s.ID)
	if !ok && (e == nil || !e.IsSubagent && e.SpawnedBy == "") {
		return
	}
	s.IsSubagent = true
	if e == nil || e.ForkedFromSessionID == "" {
		s.ForkOrigin = ""
	}
	if e != nil {
		s.TaskStatus = entryTaskStatus(e.TaskStatus)
	}
	if !ok {
		return
	}
	s.TaskStatus = run.status()
	if s.ParentSession == "" {
		s.ParentSession = n.stores.sessionOfKey(storePath, run.RequesterSessionKey)
	}
	if s.ParentMessage == "" {
		s.ParentMessage = run.ParentMessageID
	}
	if s.ToolCallID == "" {
		s.ToolCallID = run.ToolCallID
	}
}

// linkSpawns names the child session of each sessions_spawn call (from its result, or its
// run's record), and gives the call its run's status: like a Claude Code Task call's, it is
// pending while the subagent works, then says how the subagent ended.
func (n Nexus) linkSpawns(res *Result, runs *runsFile, storePath string) {
	for i := range res.ToolCalls {
		tc := &res.ToolCalls[i]
		if tc.Name != "sessions_spawn" || tc.Status != StatusOK {
			continue
		}
		var out struct {
			RunID           string `json:"runId"`
			ChildSessionID  string `json:"childSessionId"`
			ChildSessionKey string `json:"childSessionKey"`
		}
		if json.Unmarshal([]byte(tc.Result), &out) != nil {
			continue
		}
		run, ok := runs.run(out.RunID)
		tc.ChildSession = out.ChildSessionID
		if tc.ChildSession == "" && ok {
			tc.ChildSession = run.ChildSessionID
		}
		if tc.ChildSession == "" && out.ChildSessionKey != "" {
			tc.ChildSession = n.stores.sessionOfKey(storePath, out.ChildSessionKey)
		}
		if ok {
			tc.Status = run.status()
		}
	}
}

// entryTaskStatus is sessions.json's taskStatus in the index's words.
func entryTaskStatus(s string) string {
	switch s {
	case "":
		return ""
	case "running", "pending":
		return StatusPending
	case "completed":
		return StatusOK
	case "failed":
		return StatusError
	}
	return s
}

// nexusRun is the part of a runs.json record the index uses.
type nexusRun struct {
	RunID               string `json:"runId"`
	ChildSessionKey     string `json:"childSessionKey"`
	RequesterSessionKey string `json:"requesterSessionKey"`
	ChildSessionID      string `json:"childSessionId"`
	ToolCallID          string `json:"toolCallId"`
	ParentMessageID     string `json:"parentMessageId"`
	EndedAt             int64  `json:"endedAt"`
	Outcome             *struct {
		Status string `json:"status"`
	} `json:"outcome"`
}

// status is the run's: pending until it ends, then its outcome (ok, error or timeout).
func (r nexusRun) status() string {
	if r.EndedAt == 0 || r.Outcome == nil || r.Outcome.Status == "" {
		return StatusPending
	}
	return r.Outcome.Status
}

// runsFile is a decoded runs.json: the runs by id and by child session id.
type runsFile struct {
	fileStamp
	byRun   map[string]nexusRun
	byChild map[string]nexusRun
}

func (rf *runsFile) child(sessionID string) (nexusRun, bool) {
	if rf == nil || sessionID == "" {
		return nexusRun{}, false
	}
	r, ok := rf.byChild[sessionID]
	return r, ok
}

func (rf *runsFile) run(id string) (nexusRun, bool) {
	if rf == nil || id == "" {
		return nexusRun{}, false
	}
	r, ok := rf.byRun[id]
	return r, ok
}

// runsAt decodes the runs.json at path, once while its size, mtime and inode stay the same
// (nil: none, or not a regular file of at most ocStoreMax). A nil *stores decodes it every
// time.
func (c *stores) runsAt(path string) (*runsFile, error) {
	stamp, ok, err := stampOf(path, "subagent runs")
	if !ok || err != nil {
		return nil, err
	}
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if rf := c.runs[path]; rf != nil && rf.fileStamp == stamp {
			return rf, nil
		}
	}
	b, err := readNoFollow(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Runs map[string]nexusRun `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("subagent runs %s: %w", path, err)
	}
	rf := &runsFile{fileStamp: stamp,
		byRun: make(map[string]nexusRun, len(doc.Runs)), byChild: make(map[string]nexusRun, len(doc.Runs))}
	for id, r := range doc.Runs {
		if r.RunID == "" {
			r.RunID = id
		}
		rf.byRun[r.RunID] = r
		if r.ChildSessionID != "" {
			rf.byChild[r.ChildSessionID] = r
		}
	}
	if c != nil {
		if c.runs == nil {
			c.runs = map[string]*runsFile{}
		}
		c.runs[path] = rf
	}
	return rf, nil
}

func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0) //nolint:gosec // beside the sessions directory being read
	if err != nil {
		return nil, fmt.Errorf("subagent runs: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, ocStoreMax+1))
	if err != nil {
		return nil, fmt.Errorf("subagent runs: %w", err)
	}
	return b, nil
}

// sessionOfKey is the session id sessions.json at storePath gives key, "" when none.
func (c *stores) sessionOfKey(storePath, key string) string {
	sf, err := c.load(storePath)
	if err != nil || sf == nil {
		return ""
	}
	return sf.idOfKey[key]
}
