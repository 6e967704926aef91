package conversation

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Show describes a chat (docs/conversations.md, show).
type Show struct {
	Key   string                  `json:"key,omitempty"`
	Entry *chatstore.SessionEntry `json:"entry,omitempty"`
	File  string                  `json:"file"`
	// Header is nil for a chat whose first message has not arrived (no transcript yet).
	Header *Header                `json:"header"`
	Stats  *Stats                 `json:"stats"`
	Turns  []transcript.Turn      `json:"turns"`
	Runs   []chatstore.RunSummary `json:"runs"`
}

// Header is a transcript header.
type Header struct {
	ID            string `json:"id"`
	Version       int    `json:"version"`
	Timestamp     string `json:"timestamp,omitempty"`
	Cwd           string `json:"cwd,omitempty"`
	ParentSession string `json:"parentSession,omitempty"`
}

// TokenTotals sums the usage of assistant messages.
type TokenTotals struct {
	Input      int64   `json:"input"`
	Output     int64   `json:"output"`
	CacheRead  int64   `json:"cacheRead"`
	CacheWrite int64   `json:"cacheWrite"`
	Total      int64   `json:"total"`
	Cost       float64 `json:"cost"`
}

// Stats describes a transcript as a whole and its active branch.
type Stats struct {
	Entries int            `json:"entries"`
	ByType  map[string]int `json:"byType"`
	// Messages counts message entries by role (all branches).
	Messages    map[string]int `json:"messages"`
	ToolCalls   int            `json:"toolCalls"`
	ToolResults int            `json:"toolResults"`
	ToolErrors  int            `json:"toolErrors"`
	Roots       int            `json:"roots"`
	// Branches counts entries with more than one child; Leaves entries with none.
	Branches    int               `json:"branches"`
	Leaves      int               `json:"leaves"`
	LeafID      string            `json:"leafId"`
	PathLength  int               `json:"pathLength"`
	Compactions int               `json:"compactions"`
	Labels      map[string]string `json:"labels"`
	Name        string            `json:"name,omitempty"`
	Model       *transcript.Model `json:"model"`
	// ThinkingLevel is the level in effect at the active leaf.
	ThinkingLevel string      `json:"thinkingLevel"`
	Tokens        TokenTotals `json:"tokens"`
	// ContextTokens is the last assistant usage on the active path: the prompt size of the last call.
	ContextTokens int64    `json:"contextTokens"`
	FileSize      int64    `json:"fileSize"`
	Notes         []string `json:"notes"`
}

func show(c chat) (*Show, error) {
	if c.Entry != nil && !exists(c.Path) {
		// A chat whose first message has not arrived has no transcript yet.
		return &Show{Key: c.Key, Entry: c.Entry, File: c.Path, Turns: []transcript.Turn{}, Runs: []chatstore.RunSummary{}}, nil
	}
	f, err := openTranscript(c.Path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	st, err := statsOf(f, c.Path)
	if err != nil {
		return nil, err
	}
	turns, err := transcript.Turns(f, "")
	if err != nil {
		return nil, fmt.Errorf("turns of %s: %w", c.Path, err)
	}
	if turns == nil {
		turns = []transcript.Turn{}
	}
	runs, err := chatstore.RunsFromFile(f)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	if runs == nil {
		runs = []chatstore.RunSummary{}
	}
	return &Show{Key: c.Key, Entry: c.Entry, File: c.Path, Header: headerOf(f), Stats: st, Turns: turns, Runs: runs}, nil
}

func headerOf(f *transcript.File) *Header {
	h := f.Header
	return &Header{ID: h.ID, Version: h.Version, Timestamp: h.Timestamp, Cwd: h.Cwd, ParentSession: h.ParentSession}
}

// usage is an assistant message's token usage, summed as int64 like encoding/json decodes it
// (a count that is not an integer literal counts 0). Old files lack totalTokens: the parts are
// summed.
type usage struct {
	Input, Output, CacheRead, CacheWrite, TotalTokens int64
	Cost                                              float64
}

func (u usage) total() int64 {
	if u.TotalTokens > 0 {
		return u.TotalTokens
	}
	return u.Input + u.Output + u.CacheRead + u.CacheWrite
}

// usageOf reads a message's raw usage; a malformed one counts zero.
func usageOf(raw []byte) usage {
	u, _ := transcript.ParseUsage(raw)
	count := func(n json.Number) int64 {
		v, err := n.Int64()
		if err != nil {
			return 0
		}
		return v
	}
	cost, err := u.CostTotal.Float64()
	if err != nil {
		cost = 0
	}
	return usage{
		Input: count(u.Input), Output: count(u.Output), CacheRead: count(u.CacheRead),
		CacheWrite: count(u.CacheWrite), TotalTokens: count(u.TotalTokens), Cost: cost,
	}
}

// statsOf reads every entry once (the assistant and tool result messages back from the file in
// batches, only their bookkeeping fields decoded).
func statsOf(f *transcript.File, path string) (*Stats, error) {
	s := &Stats{
		Entries: len(f.Entries), ByType: map[string]int{}, Messages: map[string]int{},
		Labels: f.Labels(), Name: f.SessionName(), ThinkingLevel: "off", Notes: f.Notes,
	}
	if s.Notes == nil {
		s.Notes = []string{}
	}
	if fi, err := os.Stat(path); err == nil {
		s.FileSize = fi.Size()
	}
	roots, children := f.ChildIndex()
	s.Roots = len(roots)
	var counted []*transcript.Entry
	for _, e := range f.Entries {
		s.ByType[e.Type]++
		switch n := len(children[e]); {
		case n == 0:
			s.Leaves++
		case n > 1:
			s.Branches++
		}
		switch e.Type {
		case "compaction":
			s.Compactions++
		case "message":
			s.Messages[e.Role]++
			if e.Role == "assistant" || e.Role == "toolResult" {
				counted = append(counted, e)
			}
		}
	}
	for full, err := range f.FullEntries(counted) {
		if err != nil {
			return nil, fmt.Errorf("read messages: %w", err)
		}
		m, err := full.MessageInfo()
		if err != nil {
			// A malformed message counts nothing, as the reader tolerates it.
			continue
		}
		if m.Role == "toolResult" {
			s.ToolResults++
			if m.IsError {
				s.ToolErrors++
			}
			continue
		}
		s.ToolCalls += len(m.ToolCalls)
		if m.Usage != nil {
			u := usageOf(m.Usage)
			s.Tokens.Input += u.Input
			s.Tokens.Output += u.Output
			s.Tokens.CacheRead += u.CacheRead
			s.Tokens.CacheWrite += u.CacheWrite
			s.Tokens.Total += u.total()
			s.Tokens.Cost += u.Cost
		}
	}
	p := f.Path("")
	s.PathLength = len(p)
	if len(p) > 0 {
		s.LeafID = p[len(p)-1].ID
	}
	// Model and thinking level as the context builder decides them (docs/conversations.md,
	// "Building the context", step 2), from the resident fields only.
	var assistants []*transcript.Entry
	for _, e := range p {
		switch {
		case e.Type == "thinking_level_change":
			s.ThinkingLevel = e.ThinkingLevel()
		case e.Type == "model_change":
			s.Model = &transcript.Model{Provider: e.Provider, ModelID: e.ModelID}
		case e.Type == "message" && e.Role == "assistant":
			s.Model = &transcript.Model{Provider: e.Provider, ModelID: e.ModelID}
			assistants = append(assistants, e)
		}
	}
	// Aborted replies carry zero usage: the last call that reported one tells the prompt size.
	for i := len(assistants) - 1; i >= 0; i-- {
		full, err := f.Full(assistants[i])
		if err != nil {
			return nil, fmt.Errorf("read entry %s: %w", assistants[i].ID, err)
		}
		m, err := full.MessageInfo()
		if err != nil {
			continue
		}
		if u := usageOf(m.Usage); u.total() > 0 {
			s.ContextTokens = u.total()
			break
		}
	}
	// Sums of float costs carry binary noise (0.07150000000000001); a micro-dollar is plenty.
	s.Tokens.Cost = math.Round(s.Tokens.Cost*1e6) / 1e6
	return s, nil
}
