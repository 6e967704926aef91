package abi

import "time"

// The history index's wire shapes (docs/history.md, docs/ABI.md "History index"): what
// /v1/index answers and `nexus index` prints. internal/index names them without the Index
// prefix; they live here so that the client and the console need not import the index.

// IndexSearch is a search.
type IndexSearch struct {
	Query   string
	Sources []string
	// Project keeps sessions whose project (working directory) contains it.
	Project string
	// Role keeps messages of this role; "tool" keeps tool calls only.
	Role  string
	Since time.Time
	// Tool keeps the calls of this tool (by name), and no messages.
	Tool string
	// Origin keeps the hits of turns whose prompt came from it (nexus conversations): its
	// kind (webhook), kind:id (webhook:ci) or channel (telegram).
	Origin string
	Limit  int
}

// IndexHit is one search result: a message or a tool call.
type IndexHit struct {
	Kind       string  `json:"kind"` // "message" or "tool_call"
	Source     string  `json:"source"`
	Session    string  `json:"session"`
	Project    string  `json:"project,omitempty"`
	Title      string  `json:"title,omitempty"`
	MessageID  string  `json:"message_id,omitempty"`
	Role       string  `json:"role"`
	Tool       string  `json:"tool,omitempty"`
	ToolCallID string  `json:"tool_call_id,omitempty"`
	Timestamp  string  `json:"timestamp,omitempty"`
	Snippet    string  `json:"snippet"`
	Score      float64 `json:"score"`
	Deleted    bool    `json:"deleted,omitempty"`
	// Show is the nexus command that shows the hit in its session; Resume the command that
	// resumes the session in its own tool, when the tool has one.
	Show   string `json:"show"`
	Resume string `json:"resume,omitempty"`
	// ResumeNote says what Resume resumes when it is not the hit's own session (a subagent's
	// hit resumes the session that started it), or why there is no Resume.
	ResumeNote string `json:"resume_note,omitempty"`
	// ResultCut says a tool call's result was longer than what the index keeps and searches:
	// ResultBytes is its length as the transcript held it.
	ResultCut   bool  `json:"result_cut,omitempty"`
	ResultBytes int64 `json:"result_bytes,omitempty"`
}

// IndexSession is one indexed session.
type IndexSession struct {
	Source        string      `json:"source"`
	ID            string      `json:"id"`
	Path          string      `json:"path"`
	Project       string      `json:"project,omitempty"`
	Model         string      `json:"model,omitempty"`
	Created       string      `json:"created,omitempty"`
	Updated       string      `json:"updated,omitempty"`
	Title         string      `json:"title,omitempty"`
	Messages      int         `json:"messages"`
	Turns         int         `json:"turns"`
	ParentSession string      `json:"parent_session,omitempty"`
	ParentMessage string      `json:"parent_message,omitempty"`
	ToolCallID    string      `json:"tool_call_id,omitempty"`
	Task          string      `json:"task,omitempty"`
	TaskStatus    string      `json:"task_status,omitempty"`
	IsSubagent    bool        `json:"is_subagent,omitempty"`
	ContextLimit  int64       `json:"context_limit,omitempty"`
	ForkOrigin    string      `json:"fork_origin,omitempty"`
	Tokens        IndexTokens `json:"tokens"`
	Deleted       bool        `json:"deleted,omitempty"`
	Show          string      `json:"show"`
	Resume        string      `json:"resume,omitempty"`
	// ResumeNote says what Resume resumes when it is not this session (a subagent's), or why
	// there is none.
	ResumeNote string `json:"resume_note,omitempty"`
}

// IndexTokens is a token count.
type IndexTokens struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
	Reasoning  int64 `json:"reasoning,omitempty"`
	Total      int64 `json:"total"`
}

// IndexSessions filters a listing.
type IndexSessions struct {
	Sources []string
	Project string
	Limit   int
}

// IndexMessage is one indexed message.
type IndexMessage struct {
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Text      string          `json:"text"`
	Timestamp string          `json:"timestamp,omitempty"`
	Seq       int64           `json:"seq"`
	Turn      int             `json:"turn"`
	Model     string          `json:"model,omitempty"`
	Tokens    *IndexTokens    `json:"tokens,omitempty"`
	ToolCalls []IndexToolCall `json:"tool_calls,omitempty"`
}

// IndexToolCall is one indexed tool call.
type IndexToolCall struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Params string `json:"params,omitempty"`
	Result string `json:"result,omitempty"`
	// ResultBytes is the result's length when Result is only its start (nexus index show keeps
	// the first 4 KiB).
	ResultBytes  int64  `json:"result_bytes,omitempty"`
	Status       string `json:"status"`
	ChildSession string `json:"child_session,omitempty"`
}

// IndexShow selects a session and the part of it to show.
type IndexShow struct {
	Session string
	Source  string
	// Around shows the messages within Context of this message id (default: all).
	Around  string
	Context int
}

// IndexSessionDetail is a session with its messages.
type IndexSessionDetail struct {
	Session  IndexSession   `json:"session"`
	Messages []IndexMessage `json:"messages"`
	// Children are the subagent sessions this one started.
	Children []string `json:"children,omitempty"`
}

// IndexStatsRow is the tokens and counts of one group.
type IndexStatsRow struct {
	Key      string      `json:"key"`
	Sessions int         `json:"sessions"`
	Messages int         `json:"messages"`
	Tokens   IndexTokens `json:"tokens"`
}

// IndexStats is the index's contents and token use, by source, model, project and day.
type IndexStats struct {
	Sessions     int            `json:"sessions"`
	Deleted      int            `json:"deleted_sessions"`
	Messages     int            `json:"messages"`
	ToolCalls    int            `json:"tool_calls"`
	Files        int            `json:"files"`
	SkippedLines map[string]int `json:"skipped_lines,omitempty"`
	// CutLines counts the lines read with a text cut to its bound (a line too long to keep).
	CutLines int `json:"cut_lines,omitempty"`
	// FailedFiles are the files whose last read failed (a panic in their parse, rows the
	// database refused): each is skipped until it changes, then read again.
	FailedFiles []IndexFileError `json:"failed_files,omitempty"`
	Tokens      IndexTokens      `json:"tokens"`
	BySource    []IndexStatsRow  `json:"by_source"`
	ByModel     []IndexStatsRow  `json:"by_model"`
	ByProject   []IndexStatsRow  `json:"by_project"`
	ByDay       []IndexStatsRow  `json:"by_day"`
}

// IndexProgress is how far a sync is.
type IndexProgress struct {
	Files      int   `json:"files"`
	FilesTotal int   `json:"files_total"`
	Bytes      int64 `json:"bytes"`
}

// IndexSummary is what a sync did.
type IndexSummary struct {
	Gen       int64 `json:"gen"`
	Files     int   `json:"files"`
	Unchanged int   `json:"unchanged"`
	New       int   `json:"new"`
	Appended  int   `json:"appended"`
	Rewritten int   `json:"rewritten"`
	Deleted   int   `json:"deleted"`
	// Bytes is what was read: only the new bytes of an appended file.
	Bytes     int64 `json:"bytes"`
	Sessions  int   `json:"sessions"`
	Messages  int   `json:"messages"`
	ToolCalls int   `json:"tool_calls"`
	// Skipped counts the lines the adapters left out, by reason.
	Skipped map[string]int `json:"skipped_lines,omitempty"`
	// Cut counts the lines read with a text cut to its bound.
	Cut        int              `json:"cut_lines,omitempty"`
	Errors     []IndexFileError `json:"errors,omitempty"`
	DurationMS int64            `json:"duration_ms"`
}

// IndexFileError is a file a sync could not read; the others were still indexed. A file whose
// read failed for good (its parse panicked) is skipped until it changes.
type IndexFileError struct {
	Source string `json:"source"`
	Path   string `json:"path"`
	Error  string `json:"error"`
}
