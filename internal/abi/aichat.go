package abi

import "encoding/json"

// Payload types of ai-chat data events besides ai-token (docs/ABI.md, "AI chat events"). Each
// is one of the turn loop's events; Phase says which step of it.
const (
	PayloadAIReasoning    = "ai-reasoning"
	PayloadAITool         = "ai-tool"
	PayloadAIToolProgress = "ai-tool-progress"
	PayloadAIBatch        = "ai-batch"
	PayloadAIIteration    = "ai-iteration"
	PayloadAITurn         = "ai-turn"
	PayloadAIConfirmation = "confirmation-request"
	PayloadAIConfirmed    = "confirmation-answered"
	PayloadAICompaction   = "ai-compaction"
	PayloadAIQueue        = "ai-queue"
	PayloadAISubagent     = "ai-subagent"
	PayloadAIRun          = "ai-run"
)

// Phases of the ai-chat payloads.
const (
	PhaseStarted   = "started"
	PhaseDelta     = "delta"
	PhaseEnded     = "ended"
	PhaseDetected  = "detected"
	PhaseCompleted = "completed"
	PhaseHalted    = "halted"
	// PhaseSkipped: a compaction that had nothing to do (AICompaction.Message says why).
	PhaseSkipped = "skipped"
	// PhaseMemoryFlush: the silent turn before a compaction (AICompaction.Message: its outcome).
	PhaseMemoryFlush = "memory-flush"
)

// AIChatOptions are the creation options of an ai-chat session (CreateRequest.Options). The
// conversation is context.chatId, a session key (default: a new agent:<agent>:ai:<id> key).
type AIChatOptions struct {
	// Backend names a backend of config.toml (default: the agent's, else the first of
	// claude, codex, gemini, qwen whose key is set).
	Backend string `json:"backend,omitempty"`
	// Model overrides the backend's model.
	Model string `json:"model,omitempty"`
	// Agent is the agent id (default: the key's, else main).
	Agent string `json:"agent,omitempty"`
	// Level is the permission level: yolo, trusted or sandboxed (default: the agent's, else trusted).
	Level string `json:"level,omitempty"`
	// Workspace is the directory tools work in (default: the agent's, else the gateway's cwd).
	Workspace string `json:"workspace,omitempty"`
	// Thinking is a thinking level (off, minimal, low, medium, high, xhigh).
	Thinking string `json:"thinking,omitempty"`
	// Temperature is passed to the model when set.
	Temperature *float64 `json:"temperature,omitempty"`
	// MaxToolIterations caps model calls per turn (default 10).
	MaxToolIterations int `json:"maxToolIterations,omitempty"`
	// QueueMode is the conversation's default queue mode (sessions.json queueMode; default
	// followup).
	QueueMode string `json:"queueMode,omitempty"`
	// Background makes the session close itself once no turn runs and its conversation's
	// queue is empty; the gateway opens such sessions to deliver what triggers and other
	// agents send to a conversation no session is open on.
	Background bool `json:"background,omitempty"`
	// Replaces is the session a gateway restart closed, which this one, opened by the next
	// gateway on the same conversation, takes over from (the old one's movedTo names this).
	Replaces string `json:"replaces,omitempty"`
	// MCPServers are the session's client's own MCP servers (an editor's, through nexus acp),
	// started for this session only, after config.toml's. They are never recorded with the
	// conversation (their env may carry secrets): a session the gateway opens on it later has
	// config.toml's only.
	MCPServers []AIMCPServer `json:"mcpServers,omitempty"`
}

// AIMCPServer is an MCP server a client names for its session: a command speaking MCP on
// stdio, run in the session's workspace with PATH, HOME, LANG and Env (Type "" or "stdio"), or
// the URL of a server speaking Streamable HTTP (Type "http") or the older HTTP+SSE transport
// (Type "sse"), dialled with Headers on every request (an editor's tokens).
type AIMCPServer struct {
	Name    string            `json:"name"`
	Type    string            `json:"type,omitempty"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// The transports of an AIMCPServer.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
	MCPSSE   = "sse"
)

// AIReasoning is a thinking block: started, a delta of its text, ended.
type AIReasoning struct {
	Type      string `json:"type"`
	Phase     string `json:"phase"`
	Content   string `json:"content,omitempty"`
	MessageID string `json:"messageId,omitempty"`
}

// AITool is one tool call: detected in the reply (with its arguments), started, completed
// (with its output, and isError when it failed or did not run).
type AITool struct {
	Type       string          `json:"type"`
	Phase      string          `json:"phase"`
	ToolCallID string          `json:"toolCallId"`
	Name       string          `json:"name"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Output     string          `json:"output,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
}

// AIToolProgress says a tool call still runs, every few seconds while it does: how long since
// it started to run (a wait for the user's confirmation is not counted) and the tail of its
// output so far (the last 2 KiB of what a command wrote; empty for a tool that streams none).
// A client that does not know the type ignores it.
type AIToolProgress struct {
	Type       string `json:"type"`
	ToolCallID string `json:"toolCallId"`
	Name       string `json:"name"`
	ElapsedMs  int64  `json:"elapsedMs"`
	Output     string `json:"output,omitempty"`
}

// AIBatch is a reply's tool calls as a batch: started (calls, parallel), halted (reason: an
// ordered call failed, the rest did not run), completed.
type AIBatch struct {
	Type     string `json:"type"`
	Phase    string `json:"phase"`
	Calls    int    `json:"calls,omitempty"`
	Parallel bool   `json:"parallel,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// AIIteration is one model call and its tools done; WillContinue when the model is called again.
type AIIteration struct {
	Type         string `json:"type"`
	Iteration    int    `json:"iteration"`
	WillContinue bool   `json:"willContinue"`
}

// Ends of a turn (AITurn.End).
const (
	TurnCompleted     = "completed"
	TurnCancelled     = "cancelled"
	TurnMaxIterations = "max_iterations"
	TurnLoopDetected  = "loop_detected"
	TurnError         = "error"
)

// AITurn is a turn starting (Phase started, RunID) or ending (Phase ended with End, and
// Reason for loop_detected and error).
type AITurn struct {
	Type  string `json:"type"`
	Phase string `json:"phase"`
	RunID string `json:"runId,omitempty"`
	// MessageIDs are the queued messages the turn delivers (started).
	MessageIDs []string `json:"messageIds,omitempty"`
	End        string   `json:"end,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Iterations int      `json:"iterations,omitempty"`
	Usage      *AIUsage `json:"usage,omitempty"`
}

// Run lifecycle phases (seed 003's run: start, then end with an outcome, or error).
const (
	RunStart = "start"
	RunEnd   = "end"
	RunError = "error"
)

// AIRun is a run's lifecycle, next to the turn it runs: start, then end (Outcome ok,
// cancelled, max_iterations or loop_detected) or error (Outcome error, with Error). The finer
// states between (streaming, compacting, awaiting-confirmation) are the session's metadata
// state.
type AIRun struct {
	Type    string `json:"type"`
	Phase   string `json:"phase"`
	RunID   string `json:"runId,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Error   string `json:"error,omitempty"`
}

// RunOf is the run lifecycle event a turn's end event implies.
func RunOf(t AITurn) AIRun {
	r := AIRun{Type: PayloadAIRun, Phase: RunEnd, RunID: t.RunID, Outcome: t.End}
	switch t.End {
	case TurnCompleted:
		r.Outcome = "ok"
	case TurnError:
		r.Phase, r.Outcome, r.Error = RunError, "error", t.Reason
	}
	return r
}

// AIUsage is the tokens of a turn's model calls.
type AIUsage struct {
	Input      int `json:"input"`
	Output     int `json:"output"`
	CacheRead  int `json:"cacheRead"`
	CacheWrite int `json:"cacheWrite"`
	Total      int `json:"total"`
}

// AIConfirmation asks the user about a tool call (permission level trusted). The answer goes
// back with the confirm control command: {"command":"confirm","requestId":...,"answer":...}.
type AIConfirmation struct {
	Type       string          `json:"type"`
	RequestID  string          `json:"requestId"`
	ToolCallID string          `json:"toolCallId"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	// Paths are the paths the call touches that need the answer, as shown to the user.
	Paths []string `json:"paths,omitempty"`
	// Command, Cwd and Programs are a bash call's: the whole command, where it runs, and the
	// programs no allowance covers yet.
	Command  string   `json:"command,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	Programs []string `json:"programs,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	// Options are the answers offered (deny, allow-once, allow-file, ...).
	Options []string `json:"options"`
}

// AIConfirmed says a confirmation request was answered (by whom: user, or "interrupt" when
// the turn ended first).
type AIConfirmed struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId"`
	Answer    string `json:"answer"`
}

// Queue phases (AIQueue.Phase).
const (
	QueueQueued  = "queued"
	QueueCleared = "cleared"
	QueueDropped = "dropped"
	// QueueRolledBack names a delivered message whose turn a rollback message left as an
	// abandoned branch (Reason says from which entry the conversation goes on).
	QueueRolledBack = "rolled-back"
)

// AIQueue says what happened to queued messages: stored (queued, with the mode), cleared by an
// interrupt, or dropped by a collect cap (Reason), or a delivered one whose turn was rolled
// back. Delivery is the ai-turn that names them.
type AIQueue struct {
	Type       string   `json:"type"`
	Phase      string   `json:"phase"`
	MessageIDs []string `json:"messageIds"`
	Mode       string   `json:"mode,omitempty"`
	Reason     string   `json:"reason,omitempty"`
}

// AISubagent is a subagent this conversation spawned (started); its result arrives later as a
// queued message from "subagent:<runId>".
type AISubagent struct {
	Type            string `json:"type"`
	Phase           string `json:"phase"`
	RunID           string `json:"runId"`
	ChildSessionKey string `json:"childSessionKey"`
	SessionID       string `json:"sessionId,omitempty"`
	Label           string `json:"label,omitempty"`
	Task            string `json:"task,omitempty"`
}

// AICompaction is a compaction of the conversation: started (Reason: threshold, overflow or
// requested; TokensBefore), then ended with the compaction entry's id, the first entry kept,
// the estimated context after it and the summary's length.
type AICompaction struct {
	Type             string `json:"type"`
	Phase            string `json:"phase"`
	Reason           string `json:"reason"`
	TokensBefore     int    `json:"tokensBefore"`
	TokensAfter      int    `json:"tokensAfter,omitempty"`
	CompactionID     string `json:"compactionId,omitempty"`
	FirstKeptEntryID string `json:"firstKeptEntryId,omitempty"`
	SummaryChars     int    `json:"summaryChars,omitempty"`
	// Message says why a compaction was skipped, or what a memory flush before it did.
	Message string `json:"message,omitempty"`
}
