package abi

// Meta-chat data events: what happens under a roadmap.
const (
	// PayloadRoadmapItem: an item was added or updated (Action added | updated, Item).
	PayloadRoadmapItem = "roadmap-item"
	// PayloadRoadmapSession: a linked session was created, changed status, or closed.
	PayloadRoadmapSession = "roadmap-session"
	// PayloadRoadmapTurn: a turn ended in a linked ai-chat session (RunID, End, Iterations).
	PayloadRoadmapTurn = "roadmap-turn"
	// PayloadRoadmapSubagent: a linked conversation spawned a subagent (RunID,
	// ChildSessionKey, Label, Task); its outcome comes as the child's session closing and
	// the parent's next turn.
	PayloadRoadmapSubagent = "roadmap-subagent"
)

// RoadmapItem is an item as a meta-chat reports it.
type RoadmapItem struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status string `json:"status"`
}

// RoadmapEvent is a meta-chat session's data event; Type says which fields it has.
type RoadmapEvent struct {
	Type            string       `json:"type"`
	Action          string       `json:"action,omitempty"`
	RoadmapID       string       `json:"roadmapId"`
	Item            *RoadmapItem `json:"item,omitempty"`
	SessionID       string       `json:"sessionId,omitempty"`
	SessionType     string       `json:"sessionType,omitempty"`
	Status          string       `json:"status,omitempty"`
	ChatKey         string       `json:"chatKey,omitempty"`
	RunID           string       `json:"runId,omitempty"`
	End             string       `json:"end,omitempty"`
	Iterations      int          `json:"iterations,omitempty"`
	ChildSessionKey string       `json:"childSessionKey,omitempty"`
	Label           string       `json:"label,omitempty"`
	Task            string       `json:"task,omitempty"`
}

// RoadmapStep is one step of a roadmap as /v1/roadmaps answers it (internal/roadmap keeps
// them): RoadmapItem with its version and the time of its last change.
type RoadmapStep struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Status    string `json:"status"`
	Version   int    `json:"version"`
	UpdatedAt int64  `json:"updatedAt"`
}

// Roadmap is a plan: its steps in order.
type Roadmap struct {
	ID        string        `json:"id"`
	Title     string        `json:"title"`
	CreatedAt int64         `json:"createdAt"`
	Items     []RoadmapStep `json:"items"`
}
