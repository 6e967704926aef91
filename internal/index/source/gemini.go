package source

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Gemini reads Gemini CLI's chat recordings: ~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl
// (GEMINI_CLI_HOME moves ~), a subagent's in chats/<parent session id>/<id>.jsonl. The first line
// is the session's metadata, each later one a message (written again whole, same id, as it
// grows: its tokens, its tool calls' results), a {"$set": {...}} of metadata (the summary) or a
// {"$rewindTo": id} that drops the messages from id on. Versions before 0.3x wrote one JSON
// document (session-*.json) with the messages in an array; it is read too. The project's
// directory is in the .project_root file Gemini CLI keeps in tmp/<project>/.
type Gemini struct{}

// Name implements Source.
func (Gemini) Name() string { return "gemini" }

// DefaultRoots implements Source.
func (Gemini) DefaultRoots(env Env) []string {
	home := env.Home
	if h := env.get("GEMINI_CLI_HOME"); h != "" {
		home = h
	}
	return []string{filepath.Join(home, ".gemini", "tmp")}
}

// Discover implements Source.
func (Gemini) Discover(ctx context.Context, roots []string) ([]string, error) {
	return discover(ctx, roots, func(rel, name string) bool {
		if !strings.Contains("/"+rel, "/chats/") {
			return false
		}
		return strings.HasSuffix(name, ".jsonl") || (strings.HasPrefix(name, "session-") && strings.HasSuffix(name, ".json"))
	})
}

type geminiRecord struct {
	// Metadata (the first line, or the whole document of the older format).
	SessionID string          `json:"sessionId"`
	StartTime string          `json:"startTime"`
	Updated   string          `json:"lastUpdated"`
	Kind      string          `json:"kind"`
	Summary   string          `json:"summary"`
	Messages  []geminiMessage `json:"messages"`
	// Updates.
	Set      *geminiRecord `json:"$set"`
	RewindTo string        `json:"$rewindTo"`
	geminiMessage
}

type geminiMessage struct {
	ID        string           `json:"id"`
	Timestamp string           `json:"timestamp"`
	Type      string           `json:"type"`
	Content   json.RawMessage  `json:"content"`
	Model     string           `json:"model"`
	ToolCalls []geminiToolCall `json:"toolCalls"`
	Tokens    *struct {
		Input    int64 `json:"input"`
		Output   int64 `json:"output"`
		Cached   int64 `json:"cached"`
		Thoughts int64 `json:"thoughts"`
	} `json:"tokens"`
}

type geminiToolCall struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Args          json.RawMessage `json:"args"`
	Result        []geminiPart    `json:"result"`
	ResultDisplay json.RawMessage `json:"resultDisplay"`
	Status        string          `json:"status"`
}

// geminiRoles are the message types and the role each is in the index.
var geminiRoles = map[string]string{"user": "user", "gemini": "assistant", "info": "info", "error": "error", "warning": "warning"}

// Parse implements Source.
func (g Gemini) Parse(ctx context.Context, r io.Reader, path string, offset int64) (*Result, error) {
	res := &Result{Session: Session{Source: g.Name(), Path: path}}
	if st, ok := stateOf(r).(piState); ok {
		res.Session.Title, res.Session.Model = st.title, st.model
	}
	p := &geminiParse{res: res, msgs: map[string]int{}, calls: map[string]int{}}
	err := lines(ctx, r, offset, res, func(line []byte, _ int64) {
		var rec geminiRecord
		if !decodeObject(line, &rec, res) {
			return
		}
		switch {
		case rec.Set != nil:
			// A $set of messages is the history as Gemini CLI set it (its injected context
			// first): each is upserted by id.
			p.meta(rec.Set)
			for i := range rec.Set.Messages {
				p.message(&rec.Set.Messages[i])
			}
		case rec.RewindTo != "":
			p.rewind(rec.RewindTo)
		case rec.Type != "":
			p.message(&rec.geminiMessage)
		case rec.SessionID != "" || bytes.Contains(line, []byte(`"projectHash"`)):
			p.meta(&rec)
			for i := range rec.Messages {
				p.message(&rec.Messages[i])
			}
		default:
			res.skip(ReasonNoType)
		}
	})
	if err != nil {
		return res, fmt.Errorf("gemini: %s: %w", path, err)
	}
	if res.Session.ID == "" {
		res.Session.ID = stem(path)
	}
	chats := filepath.Dir(path)
	if filepath.Base(chats) != "chats" {
		// A subagent's recording is in chats/<parent session id>/.
		res.Session.ParentSession, res.Session.IsSubagent = filepath.Base(chats), true
		chats = filepath.Dir(chats)
	}
	res.Session.Project = projectRoot(filepath.Join(filepath.Dir(chats), ".project_root"))
	for i := range res.Messages {
		res.Messages[i].Seq = i
		res.Usage = res.Usage.Add(res.Messages[i].Usage)
	}
	res.state = piState{title: res.Session.Title, model: res.Session.Model}
	return res, nil
}

type geminiParse struct {
	res         *Result
	msgs, calls map[string]int
	turn        int
}

func (p *geminiParse) meta(m *geminiRecord) {
	if m.SessionID != "" {
		p.res.Session.ID = m.SessionID
	}
	if m.Kind == "subagent" {
		p.res.Session.IsSubagent = true
	}
	if m.Summary != "" {
		p.res.Session.Title = m.Summary
	}
	p.res.seen(parseTime(m.StartTime))
	p.res.seen(parseTime(m.Updated))
}

// message adds a message, or replaces the one of its id: Gemini CLI writes a message again
// whole each time it grows.
func (p *geminiParse) message(m *geminiMessage) {
	res := p.res
	role, ok := geminiRoles[m.Type]
	if !ok {
		res.unknown(m.Type)
		return
	}
	ts := parseTime(m.Timestamp)
	if ts.IsZero() {
		res.skip(ReasonNoTimestamp)
		return
	}
	if m.ID == "" {
		res.skip(ReasonNoID)
		return
	}
	res.seen(ts)
	msg := Message{ID: m.ID, Role: role, Text: contentText(m.Content), Timestamp: ts, Model: m.Model}
	if role == "user" && injected(msg.Text) {
		msg.Role = "context"
	}
	if role == "user" && msg.Text == "" && bytes.Contains(m.Content, []byte(`"functionResponse"`)) {
		return // the results sent back to the model, which its tool calls hold
	}
	if m.Model != "" {
		res.Session.Model = m.Model
	}
	if t := m.Tokens; t != nil {
		msg.Usage = Usage{Input: max(t.Input-t.Cached, 0), Output: t.Output, CacheRead: t.Cached, Reasoning: t.Thoughts}
	}
	if i, ok := p.msgs[m.ID]; ok {
		msg.Turn, msg.Seq = res.Messages[i].Turn, i
		res.Messages[i] = msg
	} else {
		if msg.Role == "user" {
			p.turn++
		}
		msg.Turn, msg.Seq = p.turn, len(res.Messages)
		p.msgs[m.ID] = len(res.Messages)
		res.Messages = append(res.Messages, msg)
	}
	for _, c := range m.ToolCalls {
		tc := ToolCall{ID: c.ID, Name: c.Name, Params: string(c.Args), MessageID: m.ID, Status: StatusPending}
		switch c.Status {
		case "success":
			tc.Status = StatusOK
		case "error", "cancelled":
			tc.Status = StatusError
		}
		if tc.Status != StatusPending {
			tc.Result = toolResultText(c)
		}
		if i, ok := p.calls[c.ID]; ok && c.ID != "" {
			res.ToolCalls[i] = tc
			continue
		}
		if c.ID != "" {
			p.calls[c.ID] = len(res.ToolCalls)
		}
		res.ToolCalls = append(res.ToolCalls, tc)
	}
}

// rewind drops the message id and every one after it, with their tool calls.
func (p *geminiParse) rewind(id string) {
	i, ok := p.msgs[id]
	if !ok {
		return
	}
	res := p.res
	gone := map[string]bool{}
	for _, m := range res.Messages[i:] {
		gone[m.ID] = true
		delete(p.msgs, m.ID)
	}
	res.Messages = res.Messages[:i]
	p.turn = 0
	if i > 0 {
		p.turn = res.Messages[i-1].Turn
	}
	kept := res.ToolCalls[:0]
	p.calls = map[string]int{}
	for _, tc := range res.ToolCalls {
		if !gone[tc.MessageID] {
			p.calls[tc.ID] = len(kept)
			kept = append(kept, tc)
		}
	}
	res.ToolCalls = kept
}

// injected reports whether a user message's text is one Gemini CLI writes itself (its session
// and hook context), which it does not count as a prompt either.
func injected(text string) bool {
	t := strings.TrimSpace(text)
	return strings.HasPrefix(t, "<session_context>") || strings.HasPrefix(t, "<hook_context>")
}

// toolResultText is a tool call's result: the output of its functionResponse parts, else what
// it displayed.
func toolResultText(c geminiToolCall) string {
	var out []string
	for _, part := range c.Result {
		if fr := part.FunctionResponse; fr != nil {
			if t, _ := responseText(fr.Response); t != "" {
				out = append(out, t)
			}
		} else if part.Text != "" {
			out = append(out, part.Text)
		}
	}
	if len(out) == 0 {
		if s, ok := gmString(c.ResultDisplay); ok {
			return s
		}
	}
	return strings.Join(out, "\n")
}

// contentText is a Gemini content's text: a string, a part, or a list of parts (or strings).
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if s, ok := gmString(raw); ok {
		return s
	}
	if len(raw) > 0 && raw[0] == '{' {
		raw = append(append([]byte{'['}, raw...), ']')
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var out []string
	for _, pr := range parts {
		if s, ok := gmString(pr); ok {
			out = append(out, s)
			continue
		}
		var p geminiPart
		if json.Unmarshal(pr, &p) == nil && p.Text != "" && !p.Thought {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// projectRoot reads the small file that names a project's directory (Gemini CLI's
// .project_root); "" when it is missing, not a regular file or not small.
func projectRoot(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0) //nolint:gosec // beside the transcripts read
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil || len(b) > 4096 {
		return ""
	}
	return strings.TrimSpace(string(b))
}
