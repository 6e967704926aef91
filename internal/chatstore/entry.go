package chatstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/nexus-run/nexus/internal/transcript"
)

// SessionEntry is one value of sessions.json (docs/conversations.md, sessions.json, with the
// fields nexus adds). It is
// a decoded view: the store keeps every entry as raw JSON members and writes only patches, so
// fields listed nowhere here (Extra) and relocated values (Blobs) survive untouched.
// Timestamps are Unix milliseconds.
type SessionEntry struct {
	SessionID         string           `json:"sessionId"`
	UpdatedAt         int64            `json:"updatedAt"`
	SessionFile       string           `json:"sessionFile,omitempty"`
	SpawnedBy         string           `json:"spawnedBy,omitempty"`
	ChatType          string           `json:"chatType,omitempty"` // direct | group | channel
	ThinkingLevel     string           `json:"thinkingLevel,omitempty"`
	QueueMode         string           `json:"queueMode,omitempty"`
	QueueDebounceMs   int64            `json:"queueDebounceMs,omitempty"`
	QueueCap          int64            `json:"queueCap,omitempty"`
	QueueDrop         string           `json:"queueDrop,omitempty"`    // old | new | summarize
	InputTokens       int64            `json:"inputTokens,omitempty"`  // last run
	OutputTokens      int64            `json:"outputTokens,omitempty"` // last run
	TotalTokens       int64            `json:"totalTokens,omitempty"`  // prompt size of the last call
	ContextTokens     int64            `json:"contextTokens,omitempty"`
	Model             string           `json:"model,omitempty"`
	ModelProvider     string           `json:"modelProvider,omitempty"`
	CompactionCount   int64            `json:"compactionCount,omitempty"`
	Label             string           `json:"label,omitempty"` // unique per store
	DisplayName       string           `json:"displayName,omitempty"`
	Origin            *Origin          `json:"origin,omitempty"`
	DeliveryContext   *DeliveryContext `json:"deliveryContext,omitempty"`
	LastChannel       string           `json:"lastChannel,omitempty"`
	SessionStartedAt  int64            `json:"sessionStartedAt,omitempty"`
	LastInteractionAt int64            `json:"lastInteractionAt,omitempty"`

	// nexus's extensions (subagents, runs, forks).
	ParentSessionID     string `json:"parentSessionId,omitempty"`
	ParentMessageID     string `json:"parentMessageId,omitempty"`
	ToolCallID          string `json:"toolCallId,omitempty"`
	TaskDescription     string `json:"taskDescription,omitempty"`
	TaskStatus          string `json:"taskStatus,omitempty"` // pending | running | completed | failed
	IsSubagent          bool   `json:"isSubagent,omitempty"`
	ContextTokenLimit   int64  `json:"contextTokenLimit,omitempty"`
	ContextTokensUsed   int64  `json:"contextTokensUsed,omitempty"`
	ForkedFromSessionID string `json:"forkedFromSessionId,omitempty"`
	ForkedFromTurnID    string `json:"forkedFromTurnId,omitempty"`
	HasChildren         bool   `json:"hasChildren,omitempty"`
	Project             string `json:"project,omitempty"`
	IsAgentic           bool   `json:"isAgentic,omitempty"`

	// Extra holds the members nexus does not model (and known members whose value has an
	// unexpected type), raw.
	Extra map[string]json.RawMessage `json:"-"`
	// Blobs holds the members whose values were too big for the index and live in blob files
	// (see Store.ReadBlob); the typed field of such a member is left empty.
	Blobs map[string]BlobRef `json:"-"`
}

// Origin is where a session's conversation comes from.
type Origin struct {
	Label     string  `json:"label,omitempty"`
	Provider  string  `json:"provider,omitempty"`
	Surface   string  `json:"surface,omitempty"`
	ChatType  string  `json:"chatType,omitempty"`
	From      string  `json:"from,omitempty"`
	To        string  `json:"to,omitempty"`
	AccountID string  `json:"accountId,omitempty"`
	ThreadID  IDValue `json:"threadId,omitempty"`
}

// DeliveryContext is where replies go (upstream's DeliveryContext).
type DeliveryContext struct {
	Channel   string  `json:"channel,omitempty"`
	To        string  `json:"to,omitempty"`
	AccountID string  `json:"accountId,omitempty"`
	ThreadID  IDValue `json:"threadId,omitempty"`
}

// IDValue is an id upstream writes either as a string or as a number (Telegram topic ids).
// A number is kept as its JSON text.
type IDValue string

// UnmarshalJSON accepts a string or a number.
func (v *IDValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = IDValue(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*v = IDValue(n.String())
	return nil
}

// Limits of the index. A member value bigger than MaxInlineValue is moved to a blob file and
// the entry keeps a BlobRef; an entry still bigger than MaxEntryBytes is refused.
const (
	MaxInlineValue = 16 << 10
	MaxEntryBytes  = 64 << 10
)

// pinned members are never relocated (the index cannot work without them); a patch giving
// them an oversized value fails.
var pinned = []string{"sessionId", "updatedAt", "sessionFile", "label", "displayName", "sessionStartedAt", "lastInteractionAt", "chatType"}

var enums = map[string][]string{
	"chatType":      {"direct", "group", "channel"},
	"queueDrop":     {"old", "new", "summarize"},
	"queueMode":     {"steer", "followup", "collect", "steer-backlog", "steer+backlog", "queue", "interrupt", "reject", "rollback"},
	"thinkingLevel": {"off", "minimal", "low", "medium", "high", "xhigh", "max"},
	"taskStatus":    {"pending", "running", "completed", "failed"},
}

// decodeEntry builds the typed view of a stored record.
func decodeEntry(r record) SessionEntry {
	var e SessionEntry
	for k, v := range r {
		if ref, ok := parseBlobRef(v); ok {
			if e.Blobs == nil {
				e.Blobs = map[string]BlobRef{}
			}
			e.Blobs[k] = ref
			continue
		}
		if known, ok := e.setField(k, v); !known || !ok {
			if e.Extra == nil {
				e.Extra = map[string]json.RawMessage{}
			}
			e.Extra[k] = bytes.Clone(v) // the record is shared with the store's cache
		}
	}
	return e
}

// setField decodes a known member into e. known is false for an unknown member; ok is false
// when the value has the wrong type.
func (e *SessionEntry) setField(k string, v json.RawMessage) (known, ok bool) {
	str := func(p *string) (bool, bool) { return true, decString(v, p) }
	num := func(p *int64) (bool, bool) { return true, decInt(v, p) }
	boolean := func(p *bool) (bool, bool) { return true, json.Unmarshal(v, p) == nil }
	switch k {
	case "sessionId":
		return str(&e.SessionID)
	case "updatedAt":
		return num(&e.UpdatedAt)
	case "sessionFile":
		return str(&e.SessionFile)
	case "spawnedBy":
		return str(&e.SpawnedBy)
	case "chatType":
		return str(&e.ChatType)
	case "thinkingLevel":
		return str(&e.ThinkingLevel)
	case "queueMode":
		return str(&e.QueueMode)
	case "queueDebounceMs":
		return num(&e.QueueDebounceMs)
	case "queueCap":
		return num(&e.QueueCap)
	case "queueDrop":
		return str(&e.QueueDrop)
	case "inputTokens":
		return num(&e.InputTokens)
	case "outputTokens":
		return num(&e.OutputTokens)
	case "totalTokens":
		return num(&e.TotalTokens)
	case "contextTokens":
		return num(&e.ContextTokens)
	case "model":
		return str(&e.Model)
	case "modelProvider":
		return str(&e.ModelProvider)
	case "compactionCount":
		return num(&e.CompactionCount)
	case "label":
		return str(&e.Label)
	case "displayName":
		return str(&e.DisplayName)
	case "origin":
		var o Origin
		if !isObject(v) || json.Unmarshal(v, &o) != nil {
			return true, false
		}
		e.Origin = &o
		return true, true
	case "deliveryContext":
		var d DeliveryContext
		if !isObject(v) || json.Unmarshal(v, &d) != nil {
			return true, false
		}
		e.DeliveryContext = &d
		return true, true
	case "lastChannel":
		return str(&e.LastChannel)
	case "sessionStartedAt":
		return num(&e.SessionStartedAt)
	case "lastInteractionAt":
		return num(&e.LastInteractionAt)
	case "parentSessionId":
		return str(&e.ParentSessionID)
	case "parentMessageId":
		return str(&e.ParentMessageID)
	case "toolCallId":
		return str(&e.ToolCallID)
	case "taskDescription":
		return str(&e.TaskDescription)
	case "taskStatus":
		return str(&e.TaskStatus)
	case "isSubagent":
		return boolean(&e.IsSubagent)
	case "contextTokenLimit":
		return num(&e.ContextTokenLimit)
	case "contextTokensUsed":
		return num(&e.ContextTokensUsed)
	case "forkedFromSessionId":
		return str(&e.ForkedFromSessionID)
	case "forkedFromTurnId":
		return str(&e.ForkedFromTurnID)
	case "hasChildren":
		return boolean(&e.HasChildren)
	case "project":
		return str(&e.Project)
	case "isAgentic":
		return boolean(&e.IsAgentic)
	}
	return false, false
}

func decString(v json.RawMessage, p *string) bool {
	if len(v) == 0 || v[0] != '"' {
		return false
	}
	return json.Unmarshal(v, p) == nil
}

// decInt accepts an integer, also written as an integral float (1.7e12), as JavaScript may.
func decInt(v json.RawMessage, p *int64) bool {
	if json.Unmarshal(v, p) == nil {
		return true
	}
	var f float64
	if json.Unmarshal(v, &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1<<62 {
		return false
	}
	*p = int64(f)
	return true
}

// validateMember checks a member a patch sets: known members must have their type and, for
// enumerations, one of their values.
func validateMember(k string, v json.RawMessage) error {
	if isNull(v) {
		return nil
	}
	var e SessionEntry
	known, ok := e.setField(k, v)
	if !known {
		return nil
	}
	if !ok {
		return fmt.Errorf("%w: %s: %s has the wrong type", ErrInvalid, k, truncate(v))
	}
	if allowed, has := enums[k]; has {
		var s string
		_ = json.Unmarshal(v, &s)
		if !slices.Contains(allowed, s) {
			return fmt.Errorf("%w: %s %q (want one of %v)", ErrInvalid, k, s, allowed)
		}
	}
	return nil
}

func truncate(v json.RawMessage) string {
	if len(v) > 80 {
		return string(v[:77]) + "..."
	}
	return string(v)
}

// MarshalJSON writes the known fields (omitting empty ones), Extra and the blob references.
func (e SessionEntry) MarshalJSON() ([]byte, error) {
	type plain SessionEntry
	b, err := transcript.Marshal(plain(e))
	if err != nil {
		return nil, err
	}
	if len(e.Extra) == 0 && len(e.Blobs) == 0 {
		return b, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	for k, v := range e.Extra {
		obj[k] = v
	}
	for k, ref := range e.Blobs {
		rb, err := transcript.Marshal(ref)
		if err != nil {
			return nil, err
		}
		obj[k] = rb
	}
	return encodeObject(obj), nil
}

// UnmarshalJSON decodes an entry as the store does, keeping unknown members in Extra.
func (e *SessionEntry) UnmarshalJSON(b []byte) error {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*e = decodeEntry(r)
	return nil
}
