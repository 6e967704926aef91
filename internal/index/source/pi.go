package source

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/transcript"
)

// Pi reads the pi coding agent's transcripts (pi JSONL v1 to v3, docs/conversations.md):
// ~/.pi/agent/sessions/--<cwd>--/<ts>_<id>.jsonl, or $PI_CODING_AGENT_DIR/sessions. Lines are
// decoded by internal/transcript, without migration: the index needs each entry, not the tree.
type Pi struct{}

// Name implements Source.
func (Pi) Name() string { return "pi" }

// DefaultRoots implements Source.
func (Pi) DefaultRoots(env Env) []string {
	if dir := env.get("PI_CODING_AGENT_DIR"); dir != "" {
		return []string{filepath.Join(dir, "sessions")}
	}
	return []string{filepath.Join(env.Home, ".pi", "agent", "sessions")}
}

// Discover implements Source.
func (Pi) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(_, name string) bool { return strings.HasSuffix(name, ".jsonl") })
}

// piKnown are the entry types that hold no message.
var piKnown = map[string]bool{
	"thinking_level_change": true, "compaction": true, "branch_summary": true, "custom": true,
	"label": true, "usage": true, "context_edit": true,
}

type piHeader struct {
	ID            string `json:"id"`
	Cwd           string `json:"cwd"`
	Timestamp     string `json:"timestamp"`
	ParentSession string `json:"parentSession"`
	BranchedFrom  string `json:"branchedFrom"`
	ModelID       string `json:"modelId"`
}

// Parse implements Source. Tool results (toolResult messages) pair with the toolCall blocks of
// the assistant message by toolCallId; a bashExecution (a command the user ran) is a tool call
// of its own, named "bash".
func (p Pi) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res := &Result{Session: Session{Source: p.Name(), Path: path}}
	pair := newPairing(res)
	turn := 0
	if st, ok := stateOf(r).(piState); ok {
		res.Session.Title, res.Session.Model = st.title, st.model
	}
	err := lines(ctx, r, offset, res, func(line []byte, start int64) {
		e, err := transcript.ParseLine(line)
		if err != nil {
			if json.Valid(line) {
				res.skip(ReasonNoRecord)
			} else {
				res.skip(ReasonMalformed)
			}
			return
		}
		ts := parseTime(e.Timestamp)
		res.seen(ts)
		id := e.ID
		if id == "" {
			id = lineID(start)
		}
		switch e.Type {
		case "session":
			var h piHeader
			if json.Unmarshal(line, &h) != nil {
				res.skip(ReasonMalformed)
				return
			}
			res.Session.ID, res.Session.Project = h.ID, h.Cwd
			res.Session.ForkOrigin = h.ParentSession
			if res.Session.ForkOrigin == "" {
				res.Session.ForkOrigin = h.BranchedFrom
			}
			if h.ModelID != "" {
				res.Session.Model = h.ModelID
			}
		case "message":
			if ts.IsZero() {
				res.skip(ReasonNoTimestamp)
				return
			}
			p.message(e, id, ts, &turn, res, pair)
		case "custom_message":
			if ts.IsZero() {
				res.skip(ReasonNoTimestamp)
				return
			}
			res.Messages = append(res.Messages, Message{ID: id, Role: "custom",
				Text: blocksText(e.Content()), Timestamp: ts, Seq: len(res.Messages), Turn: turn})
		case "model_change":
			if e.ModelID != "" {
				res.Session.Model = e.ModelID
			}
		case "session_info":
			if name := e.Name(); name != nil {
				res.Session.Title = *name
			}
		default:
			if !piKnown[e.Type] {
				res.unknown(e.Type)
			}
		}
	})
	if err != nil {
		return res, fmt.Errorf("pi: %s: %w", path, err)
	}
	if res.Session.ID == "" {
		// No header (or a parse after it): pi names files <ts>_<id>, OpenClaw <id>.
		name := stem(path)
		res.Session.ID = name[strings.LastIndexByte(name, '_')+1:]
	}
	for _, m := range res.Messages {
		res.Usage = res.Usage.Add(m.Usage)
	}
	res.state = piState{title: res.Session.Title, model: res.Session.Model}
	return res, nil
}

// piState is what the parse of a session's next piece continues from: its name and model so
// far (which a sessions.json entry does not replace).
type piState struct{ title, model string }

// message reads a message entry; a user message starts a turn (*turn counts them).
func (Pi) message(e *transcript.Entry, id string, ts time.Time, turn *int, res *Result, pair *pairing) {
	info, err := e.MessageInfo()
	if err != nil {
		res.skip(ReasonMalformed)
		return
	}
	switch info.Role {
	case "":
		res.skip(ReasonNoRole)
		return
	case "user", "assistant", "toolResult", "custom":
		// The roles whose content the index reads: a string or blocks.
		if !isContent(info.Content) {
			res.skip(ReasonMalformed)
			return
		}
	}
	msg := Message{ID: id, Role: info.Role, Timestamp: ts, Seq: len(res.Messages)}
	if info.Role == "user" {
		*turn++
		msg.Origin = entryOrigin(e)
	}
	msg.Turn = *turn
	switch info.Role {
	case "assistant":
		msg.Model = info.Model
		if info.Model != "" {
			res.Session.Model = info.Model
		}
		blocks, _ := transcript.Blocks(info.Content)
		var text []string
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if b.Text != "" {
					text = append(text, b.Text)
				}
			case "toolCall":
				pair.call(ToolCall{ID: b.ID, Name: b.Name, Params: string(b.Arguments), MessageID: id})
			}
		}
		msg.Text = strings.Join(text, "\n")
		if u, err := transcript.ParseUsage(info.Usage); err == nil {
			msg.Usage = Usage{Input: num(u.Input), Output: num(u.Output),
				CacheRead: num(u.CacheRead), CacheWrite: num(u.CacheWrite)}
		}
	case "toolResult":
		pair.result(info.ToolCallID, blocksText(info.Content), info.IsError)
		return
	case "bashExecution":
		out := transcript.StringValue(info.Output)
		status := StatusOK
		if info.ExitCode == nil || *info.ExitCode != 0 {
			status = StatusError
		}
		params, _ := json.Marshal(map[string]string{"command": info.Command})
		pair.call(ToolCall{ID: id, Name: "bash", Params: string(params),
			Result: out, ResultCut: res.lineCut, Status: status, MessageID: id})
		return
	case "branchSummary", "compactionSummary":
		msg.Text = transcript.StringValue(info.Summary)
	default:
		msg.Text = blocksText(info.Content)
	}
	res.Messages = append(res.Messages, msg)
}

// blocksText is the text blocks of a pi content (a string or blocks), joined.
func blocksText(content json.RawMessage) string {
	blocks, err := transcript.Blocks(content)
	if err != nil {
		return ""
	}
	var text []string
	for _, b := range blocks {
		if b.Type == "text" && b.Text != "" {
			text = append(text, b.Text)
		}
	}
	return strings.Join(text, "\n")
}

func num(n json.Number) int64 {
	v, err := n.Int64()
	if err != nil {
		f, ferr := n.Float64()
		if ferr != nil {
			return 0
		}
		return int64(f)
	}
	return v
}

// parsePiAs is the pi parse of a tool that writes pi transcripts under another name.
func parsePiAs(ctx context.Context, name string, r io.Reader, path string, offset int64) (*Result, error) {
	res, err := Pi{}.Parse(ctx, r, path, offset)
	if res != nil {
		res.Session.Source = name
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}
