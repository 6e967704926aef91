// Package conversation is every operation on durable conversations (chats): pi transcripts
// indexed by session key in state/sessions/sessions.json (docs/conversations.md). The rules of
// those operations live here and nowhere else; the errors carry ABI codes (docs/ABI.md).
//
// API is implemented by the local *Service, which works on the files, and by the gateway's
// client (chatclient.Chats), which calls the same operations under /v1/chats. A caller (the CLI,
// the ai-chat kind, the web console) does not care which it has; conversationtest runs one
// contract suite against both.
package conversation

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"time"

	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

// Reader reads one transcript. For API the name is a chat (a session key, a session id or a
// sessions.json label); for Files it is a file path.
type Reader interface {
	// Show describes the transcript: its sessions.json entry, header, statistics, turns and runs.
	Show(ctx context.Context, name string) (*Show, error)
	// History is the context the model sees, streamed; the caller must Close it.
	History(ctx context.Context, name string, opts HistoryOptions) (*History, error)
	// Tree is every entry with its children, labels, a preview and the active path.
	Tree(ctx context.Context, name string) (*Tree, error)
	// Export writes the transcript in format to w. Nothing is written when it fails before the
	// first byte (an unknown chat, a file that is not a pi transcript).
	Export(ctx context.Context, name string, format ExportFormat, w io.Writer) error
}

// API is every operation on the chats of one sessions directory.
type API interface {
	Reader
	// List returns the chats matching opts, most recently updated first.
	List(ctx context.Context, opts ListOptions) ([]chatstore.Item, error)
	// Fork starts a new chat holding the path of ref up to req.At.
	Fork(ctx context.Context, ref string, req ForkRequest) (*ForkResult, error)
	// Label labels an entry of ref (an empty label clears it).
	Label(ctx context.Context, ref string, req LabelRequest) (*LabelResult, error)
	// Name sets the display name of ref (empty clears it).
	Name(ctx context.Context, ref string, req NameRequest) (*NameResult, error)
	// Compact compacts ref by lines or with a summary.
	Compact(ctx context.Context, ref string, req CompactRequest) (*CompactResult, error)
	// Reset starts a new session for ref's key; the old transcript is archived.
	Reset(ctx context.Context, ref string) (*ResetResult, error)
	// Archive removes ref from sessions.json; its transcript is archived.
	Archive(ctx context.Context, ref string) (*ArchiveResult, error)
	// Resolve returns the current session of a session key for an incoming interaction,
	// created or reset by the reset policy.
	Resolve(ctx context.Context, key string, req ResolveRequest) (*ResolveResult, error)
	// Import adopts a pi or OpenClaw transcript.
	Import(ctx context.Context, req ImportRequest) (*ImportResult, error)
	// Recover repairs a sessions.json that does not parse.
	Recover(ctx context.Context) (*chatstore.RecoverReport, error)
}

// ListOptions select chats. Zero fields match everything.
type ListOptions struct {
	// Agent is an agent id (normalized as keys are).
	Agent string
	// Channel matches the key's channel, else lastChannel or origin.provider.
	Channel string
	// Since keeps chats updated at or after it.
	Since time.Time
	// Label is the exact sessions.json label.
	Label string
	// Search is a substring of key, label, display name or session id (case-insensitive).
	Search string
	// Limit caps the result (0: no cap); it applies after every filter.
	Limit int
}

// HistoryOptions choose the context History builds.
type HistoryOptions struct {
	// Branch is the leaf entry id ("" for the last entry).
	Branch string
	// Limit keeps the last Limit messages (0: all).
	Limit int
	// Count asks for the number of messages only (History.Count); none is returned.
	Count bool
}

// HistoryHeader is what a context tells besides its messages.
type HistoryHeader struct {
	// LeafID is the leaf the context was built for ("" for an empty transcript: JSON null).
	LeafID string `json:"leafId"`
	// Model is nil when the path sets none.
	Model         *transcript.Model `json:"model"`
	ThinkingLevel string            `json:"thinkingLevel"`
}

// MarshalJSON writes the header as `chat history` prints it: leafId null when empty.
func (h HistoryHeader) MarshalJSON() ([]byte, error) {
	var leaf any
	if h.LeafID != "" {
		leaf = h.LeafID
	}
	return json.Marshal(struct {
		LeafID        any               `json:"leafId"`
		Model         *transcript.Model `json:"model"`
		ThinkingLevel string            `json:"thinkingLevel"`
	}{leaf, h.Model, h.ThinkingLevel})
}

// History is a context being read. Messages are the agent messages exactly as pi's context
// builder yields them, each verbatim as stored (docs/conversations.md, history); a message is
// valid only until the sequence moves on (copy what you keep). An error ends the sequence:
// the output is then incomplete. Close releases the transcript (or the connection).
type History struct {
	Header HistoryHeader
	// Count is the number of messages when HistoryOptions.Count asked for it.
	Count    int
	Messages iter.Seq2[json.RawMessage, error]
	// Closer is closed by Close; nil when nothing is held.
	Closer io.Closer
}

// Close releases what the history holds.
func (h *History) Close() error {
	if h == nil || h.Closer == nil {
		return nil
	}
	return h.Closer.Close()
}

// ExportFormat is the form Export writes.
type ExportFormat string

// Export formats.
const (
	// ExportJSONL is the transcript's bytes.
	ExportJSONL ExportFormat = "jsonl"
	// ExportMarkdown and ExportHTML render the active branch for people.
	ExportMarkdown ExportFormat = "md"
	ExportHTML     ExportFormat = "html"
)

// ExportFormats lists the formats.
func ExportFormats() []ExportFormat { return []ExportFormat{ExportJSONL, ExportMarkdown, ExportHTML} }

// Valid reports whether f is a known format.
func (f ExportFormat) Valid() bool {
	switch f {
	case ExportJSONL, ExportMarkdown, ExportHTML:
		return true
	}
	return false
}

// ContentType is the media type of an export in f.
func (f ExportFormat) ContentType() string {
	switch f {
	case ExportMarkdown:
		return "text/markdown; charset=utf-8"
	case ExportHTML:
		return "text/html; charset=utf-8"
	}
	return "application/x-ndjson"
}

// ForkRequest asks for a fork.
type ForkRequest struct {
	// At is the entry the new chat ends at (its leaf).
	At string `json:"at"`
	// Key is the session key of the new chat (default <KEY>:fork:<last 8 hex of its id>).
	Key string `json:"key,omitempty"`
}

// ForkResult is a new chat made by Fork. Fields are in alphabetical order, as `chat fork` has
// always printed them.
type ForkResult struct {
	Entry      chatstore.SessionEntry `json:"entry"`
	File       string                 `json:"file"`
	ForkedFrom ForkSource             `json:"forkedFrom"`
	Key        string                 `json:"key"`
}

// ForkSource is the chat a fork came from, its entry as updated (hasChildren).
type ForkSource struct {
	Entry     chatstore.SessionEntry `json:"entry"`
	EntryID   string                 `json:"entryId"`
	Key       string                 `json:"key"`
	SessionID string                 `json:"sessionId"`
}

// LabelRequest labels an entry.
type LabelRequest struct {
	EntryID string `json:"entryId"`
	// Label is the new label; empty clears it.
	Label string `json:"label,omitempty"`
}

// LabelResult is the label entry Label appended.
type LabelResult struct {
	EntryID string `json:"entryId"`
	Key     string `json:"key"`
	// Label is nil when the label was cleared.
	Label     *string `json:"label"`
	SessionID string  `json:"sessionId"`
	TargetID  string  `json:"targetId"`
}

// NameRequest names a chat.
type NameRequest struct {
	// Name is the display name; empty clears it.
	Name string `json:"name"`
}

// NameResult is the chat's entry after Name.
type NameResult struct {
	Entry chatstore.SessionEntry `json:"entry"`
	Key   string                 `json:"key"`
}

// CompactRequest asks for one of the two compactions: MaxLines (line compaction) or Summary
// (a compaction entry with that summary, keeping KeepTokens estimated tokens of recent
// context).
type CompactRequest struct {
	MaxLines int    `json:"maxLines,omitempty"`
	Summary  string `json:"summary,omitempty"`
	// KeepTokens goes with Summary; nil means transcript.DefaultKeepRecentTokens.
	KeepTokens *int `json:"keepTokens,omitempty"`
}

// CompactResult says what Compact did. Line compaction sets Compacted (and Archived when it
// compacted); summary compaction sets CompactionID, FirstKeptEntryID and TokensBefore.
type CompactResult struct {
	Archived         string                 `json:"archived,omitempty"`
	Compacted        *bool                  `json:"compacted,omitempty"`
	CompactionID     string                 `json:"compactionId,omitempty"`
	Entry            chatstore.SessionEntry `json:"entry"`
	FirstKeptEntryID string                 `json:"firstKeptEntryId,omitempty"`
	Key              string                 `json:"key"`
	SessionID        string                 `json:"sessionId"`
	TokensBefore     json.RawMessage        `json:"tokensBefore,omitempty"`
}

// ResetResult is a chat after Reset.
type ResetResult struct {
	// Archived is the old transcript's archive; empty when it had none yet.
	Archived          string                 `json:"archived,omitempty"`
	Entry             chatstore.SessionEntry `json:"entry"`
	Key               string                 `json:"key"`
	PreviousSessionID string                 `json:"previousSessionId"`
	Reason            string                 `json:"reason"`
}

// ArchiveResult is a chat removed by Archive.
type ArchiveResult struct {
	Archived  string `json:"archived,omitempty"`
	Key       string `json:"key"`
	SessionID string `json:"sessionId"`
}

// ResolveRequest is the reset policy of one Resolve; nil fields take the defaults
// (chatstore.DefaultResetPolicy: daily at 04:00 local time, 60 idle minutes).
type ResolveRequest struct {
	// ResetHour is the local hour (0-23) of the daily reset; -1: none.
	ResetHour *int `json:"resetHour,omitempty"`
	// IdleMinutes is the idle window; 0: none.
	IdleMinutes *int `json:"idleMinutes,omitempty"`
	// NoAutoReset never resets (only creates).
	NoAutoReset bool `json:"noAutoReset,omitempty"`
}

// ResolveResult is the session an interaction goes to.
type ResolveResult struct {
	Entry chatstore.SessionEntry `json:"entry"`
	// Fresh is true when a new session was started (the key had none, or the policy reset it).
	Fresh bool   `json:"fresh"`
	Key   string `json:"key"`
}

// ImportRequest adopts a transcript. Source names it; Body, when set, is its bytes (what a
// gateway receives), else Source is a file opened by whoever carries out the import on the
// caller's side (the local Service opens it; the gateway's client uploads it).
type ImportRequest struct {
	Source string
	Body   io.Reader
	// Key is the chat's session key (default agent:main:import:<header id>).
	Key string
}

// ImportResult is the chat an import made or found.
type ImportResult struct {
	// Copied is false when the same transcript was already in the store.
	Copied   bool                   `json:"copied"`
	Entry    chatstore.SessionEntry `json:"entry"`
	File     string                 `json:"file"`
	Key      string                 `json:"key"`
	Migrated bool                   `json:"migrated"`
	// SessionID is the transcript's header id, which names its file.
	SessionID string `json:"sessionId"`
	Source    string `json:"source"`
}
