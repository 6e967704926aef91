package transcript

import (
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"time"
)

// Summary wrappers pi uses when a summary message reaches the model as user text.
const (
	CompactionSummaryPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	CompactionSummarySuffix = "\n</summary>"
	BranchSummaryPrefix     = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	BranchSummarySuffix     = "</summary>"
)

// Model is the provider and model id in effect at a leaf.
type Model struct {
	Provider string `json:"provider"`
	ModelID  string `json:"modelId"`
}

// Context is what the model sees at a leaf.
type Context struct {
	// LeafID is the id of the leaf the context was built for.
	LeafID string
	// Model is nil when the path sets none.
	Model *Model
	// ThinkingLevel is the last thinking_level_change on the path ("off" by default).
	ThinkingLevel string
	// Messages are the agent messages as pi's buildSessionContext yields
	// them: message entries verbatim, custom_message as role "custom",
	// compaction as role "compactionSummary", branch_summary as role
	// "branchSummary".
	Messages []json.RawMessage
}

type customMessage struct {
	Role       string          `json:"role"`
	CustomType string          `json:"customType"`
	Content    json.RawMessage `json:"content,omitempty"`
	Display    json.RawMessage `json:"display,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`
	Timestamp  *int64          `json:"timestamp"`
}

type compactionSummaryMessage struct {
	Role         string          `json:"role"`
	Summary      string          `json:"summary"`
	TokensBefore json.RawMessage `json:"tokensBefore,omitempty"`
	Timestamp    *int64          `json:"timestamp"`
}

type branchSummaryMessage struct {
	Role      string `json:"role"`
	Summary   string `json:"summary"`
	FromID    string `json:"fromId,omitempty"`
	Timestamp *int64 `json:"timestamp"`
}

// unixMillis converts an entry's ISO timestamp like JavaScript's
// new Date(ts).getTime(); nil (JSON null, as NaN serializes) when invalid.
func unixMillis(ts string) *int64 {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil
	}
	ms := t.UnixMilli()
	return &ms
}

// BuildContext builds the context for the leaf with id leafID (empty or
// unknown: the last entry), following docs/conversations.md, The transcript:
//   - the path from the root to the leaf;
//   - model: the later of the last model_change and the last assistant
//     message's provider/model; thinking level: the last
//     thinking_level_change, default "off";
//   - with a compaction on the path, the last one's summary first, then the
//     path entries before it from firstKeptEntryId (none when that id is not
//     on the path), then every entry after it; otherwise the whole path;
//   - context_edit entries on the path replace the content of their target
//     message (or custom_message) or, with a null replacement, remove it;
//     the last edit on the path per target wins, other replacements are ignored.
func (f *File) BuildContext(leafID string) (*Context, error) {
	ctx, msgs := f.contextMessages(leafID, streamBatch, true)
	// Lines are read into one reused buffer; the messages are copied into
	// chunks that hold only message bytes (not the lines around them).
	var chunk []byte
	for m, err := range msgs {
		if err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
		if len(chunk)+len(m) > cap(chunk) {
			// Chunks grow from 64 KiB to 1 MiB: a short context costs no megabyte.
			chunk = make([]byte, 0, max(min(max(2*cap(chunk), 64<<10), contextChunk), len(m)))
		}
		start := len(chunk)
		chunk = append(chunk, m...)
		ctx.Messages = append(ctx.Messages, chunk[start:len(chunk):len(chunk)])
	}
	return ctx, nil
}

// contextChunk is the size of the blocks BuildContext copies messages into.
const contextChunk = 1 << 20

// streamBatch bounds the bytes of light entries ContextMessages reads back
// at once.
const streamBatch = 8 << 20

// ContextMessages is BuildContext for contexts too large to hold: it
// returns the context without its messages (LeafID, Model and ThinkingLevel
// set, Messages empty) and the messages as a sequence that reads light
// entries back in bounded batches into one reused buffer. A message is
// valid until the sequence moves past its batch: copy what you keep. A read
// error ends the sequence with that error.
func (f *File) ContextMessages(leafID string) (*Context, iter.Seq2[json.RawMessage, error]) {
	return f.contextMessages(leafID, streamBatch, true)
}

func (f *File) contextMessages(leafID string, batch int, reuse bool) (*Context, iter.Seq2[json.RawMessage, error]) {
	path := f.Path(leafID)
	ctx := &Context{ThinkingLevel: "off", Messages: []json.RawMessage{}}
	if len(path) == 0 {
		return ctx, func(func(json.RawMessage, error) bool) {}
	}
	ctx.LeafID = path[len(path)-1].ID

	compactionIdx := -1
	edits := map[string]json.RawMessage{}
	for i, e := range path {
		switch e.Type {
		case "thinking_level_change":
			ctx.ThinkingLevel = e.ThinkingLevel()
		case "model_change":
			ctx.Model = &Model{Provider: e.Provider, ModelID: e.ModelID}
		case "message":
			if e.Role == "assistant" {
				ctx.Model = &Model{Provider: e.Provider, ModelID: e.ModelID}
			}
		case "compaction":
			compactionIdx = i
		case "context_edit":
			if e.TargetID() != "" {
				edits[e.TargetID()] = e.Replacement()
			}
		}
	}

	var emit []*Entry
	var summary json.RawMessage
	if compactionIdx < 0 {
		emit = path
	} else {
		c := path[compactionIdx]
		summary, _ = marshal(compactionSummaryMessage{
			Role: "compactionSummary", Summary: c.Summary(), TokensBefore: c.TokensBefore(), Timestamp: unixMillis(c.Timestamp),
		})
		kept := false
		for _, e := range path[:compactionIdx] {
			if e.ID != "" && e.ID == c.FirstKeptEntryID() {
				kept = true
			}
			if kept {
				emit = append(emit, e)
			}
		}
		emit = append(emit, path[compactionIdx+1:]...)
	}
	return ctx, func(yield func(json.RawMessage, error) bool) {
		if summary != nil && !yield(summary, nil) {
			return
		}
		// Batches of entries in path order; a plain message read back is
		// sliced out of its line without building a full Entry.
		var arena *[]byte
		if reuse {
			arena = new([]byte)
		}
		for start := 0; start < len(emit); {
			end := batchEnd(emit, start, batch)
			msgs := make([]json.RawMessage, end-start)
			err := f.readBack(emit[start:end], arena, func(i int, line []byte) error {
				e := emit[start+i]
				if line != nil {
					if _, edited := edits[e.ID]; !edited {
						if m, ok := plainSpan(e, line); ok {
							msgs[i] = m
							return nil
						}
					}
					full, err := f.reparse(e, line)
					if err != nil {
						return err
					}
					e = full
				}
				msgs[i] = f.message(e, edits)
				return nil
			})
			if err != nil {
				yield(nil, err)
				return
			}
			for _, m := range msgs {
				if m != nil && !yield(m, nil) {
					return
				}
			}
			start = end
		}
	}
}

// batchEnd returns the end of the batch of entries from start: about batch
// bytes of lines, at least one entry.
func batchEnd(entries []*Entry, start, batch int) int {
	end, n := start, 0
	for end < len(entries) && (end == start || n < batch) {
		n += entries[end].size
		end++
	}
	return end
}

// inBatches calls fn with Full of consecutive runs of entries, each run
// reading at most about batch bytes of light entries back.
func (f *File) inBatches(entries []*Entry, batch int, fn func(full []*Entry) error) error {
	for start := 0; start < len(entries); {
		end := batchEnd(entries, start, batch)
		full, err := f.fullAll(entries[start:end])
		if err != nil {
			return err
		}
		if err := fn(full); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// writeLines writes the lines of entries, each followed by a newline, byte
// for byte as read, reading light entries back in bounded batches.
func (f *File) writeLines(w io.Writer, entries []*Entry) error {
	return f.inBatches(entries, streamBatch, func(full []*Entry) error {
		for _, e := range full {
			if _, err := w.Write(e.Raw); err != nil {
				return err
			}
			if _, err := w.Write([]byte{'\n'}); err != nil {
				return err
			}
		}
		return nil
	})
}

// message returns the agent message an entry contributes to the context, or
// nil when it contributes none.
func (f *File) message(e *Entry, edits map[string]json.RawMessage) json.RawMessage {
	repl, edited := edits[e.ID]
	if edited && string(repl) == "null" {
		return nil
	}
	var newContent json.RawMessage
	if edited {
		var r struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(repl, &r) != nil || r.Content == nil {
			edited = false
		} else {
			newContent = r.Content
		}
	}
	switch e.Type {
	case "message":
		if len(e.Message) == 0 || isNull(e.Message) {
			return nil
		}
		if edited {
			if m, err := patchObject(e.Message, map[string]any{"content": newContent}); err == nil {
				return m
			}
		}
		return e.Message
	case "custom_message":
		content := e.Content()
		if edited {
			content = newContent
		}
		m, err := marshal(customMessage{
			Role: "custom", CustomType: e.CustomType, Content: content, Display: e.Display(),
			Details: e.Details(), Timestamp: unixMillis(e.Timestamp),
		})
		if err != nil {
			return nil
		}
		return m
	case "branch_summary":
		if e.Summary() == "" {
			return nil
		}
		m, err := marshal(branchSummaryMessage{
			Role: "branchSummary", Summary: e.Summary(), FromID: e.FromID(), Timestamp: unixMillis(e.Timestamp),
		})
		if err != nil {
			return nil
		}
		return m
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// LLMText returns the user text a compactionSummary or branchSummary message
// reaches the model as, and false for any other message.
func LLMText(msg json.RawMessage) (string, bool) {
	var m struct {
		Role    string `json:"role"`
		Summary string `json:"summary"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return "", false
	}
	switch m.Role {
	case "compactionSummary":
		return CompactionSummaryPrefix + m.Summary + CompactionSummarySuffix, true
	case "branchSummary":
		return BranchSummaryPrefix + m.Summary + BranchSummarySuffix, true
	}
	return "", false
}
