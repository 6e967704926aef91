package aichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/provider"
	"github.com/nexus-run/nexus/internal/transcript"
)

// What a turn a killed gateway left running becomes at the next start (docs/ai-chat.md, After
// a crash). A call is never run again by nexus: its result says it was not, and the model or
// the user chooses.
const (
	// RestartReason is the error of a run a gateway restart ended.
	RestartReason = "gateway restarted: the turn was interrupted"
	// restartedRunning answers a call that had started when the gateway stopped.
	restartedRunning = "the gateway restarted while this call was running: it was stopped and will not be run again; " +
		"what it did before it stopped is unknown, so check before calling it again"
	// restartedNotRun answers a call that had not started (waiting for its turn or for a
	// confirmation).
	restartedNotRun = "the gateway restarted before this call ran: it was not run"
	// restartedUnknown answers a call of which nothing says whether it had started.
	restartedUnknown = "the gateway restarted before this call's result was recorded: it will not be run again; " +
		"whether it ran is unknown, so check before calling it again"
	// restartedReply is the error of a reply the restart cut.
	restartedReply = "the gateway restarted during this reply"
)

// cut is what ended the turns recoverHeld closes: a restart of this gateway, or the loss of
// the node that ran them (a cluster's takeover). Its strings go to the model and the user.
type cut struct {
	reason, reply, running, notRun, unknown string
	// detail is the member a call's answer sets true in its details.
	detail string
}

// byRestart is a gateway restart's cut.
var byRestart = cut{reason: RestartReason, reply: restartedReply, running: restartedRunning, notRun: restartedNotRun, unknown: restartedUnknown,
	detail: "gatewayRestart"}

// byNodeLoss is the cut of a turn whose node was lost, taken over on another.
func byNodeLoss(node string) cut {
	n := "node " + node
	return cut{
		reason: n + " was lost: the turn was interrupted and taken over",
		reply:  n + " was lost during this reply",
		running: n + " was lost while this call was running there: it will not be run again; " +
			"what it did before is unknown, so check before calling it again",
		notRun: n + " was lost before this call ran: it was not run",
		unknown: n + " was lost before this call's result was recorded: it will not be run again; " +
			"whether it ran is unknown, so check before calling it again",
		detail: "nodeLost",
	}
}

// interruption is what the log of the session a restart closed says about its last turn.
type interruption struct {
	run     string          // the run its last turn was
	call    int             // the model call that was streaming (0: none seen)
	text    string          // what that call had streamed
	think   string          // and its thinking
	started map[string]bool // calls that had started (a call waiting for a confirmation has)
	asked   map[string]bool // calls that waited for a confirmation still (no answer came)
	request map[string]string
}

// ran reports whether call had begun to run: started, and not still waiting for an answer.
func (in *interruption) ran(call string) bool {
	return in != nil && in.started[call] && !in.asked[call]
}

// readInterruption reads the log of a session a gateway restart closed: the tokens of the
// reply that was streaming and which calls had started. Nothing (nil) when the log is gone.
func (k *Kind) readInterruption(ctx context.Context, sessionID string) *interruption {
	if k.Sessions == nil || sessionID == "" {
		return nil
	}
	b, err := k.Sessions.Read(ctx, sessionID, 0, 0, 0)
	if err != nil {
		k.logger().Warn("read the log of a session a restart closed", "id", sessionID, "err", err)
		return nil
	}
	in := &interruption{started: map[string]bool{}, asked: map[string]bool{}, request: map[string]string{}}
	var text, think strings.Builder
	for _, e := range b.Events {
		if e.Type != abi.EventData {
			continue
		}
		raw, ok := e.Payload.(json.RawMessage)
		if !ok {
			if raw, err = json.Marshal(e.Payload); err != nil {
				continue
			}
		}
		var p struct {
			Type       string `json:"type"`
			Phase      string `json:"phase"`
			RunID      string `json:"runId"`
			MessageID  string `json:"messageId"`
			Content    string `json:"content"`
			ToolCallID string `json:"toolCallId"`
			RequestID  string `json:"requestId"`
		}
		if json.Unmarshal(raw, &p) != nil {
			continue
		}
		switch p.Type {
		case abi.PayloadAIRun:
			if p.Phase == abi.RunStart {
				*in = interruption{run: p.RunID, started: map[string]bool{}, asked: map[string]bool{}, request: map[string]string{}}
				text.Reset()
				think.Reset()
			}
		case abi.PayloadAIToken, abi.PayloadAIReasoning:
			run, n, ok := splitMessageID(p.MessageID)
			if !ok || run != in.run {
				continue
			}
			if n != in.call {
				in.call = n
				text.Reset()
				think.Reset()
			}
			if p.Type == abi.PayloadAIToken {
				text.WriteString(p.Content)
			} else if p.Phase == abi.PhaseDelta {
				think.WriteString(p.Content)
			}
		case abi.PayloadAITool:
			if p.Phase == abi.PhaseStarted {
				in.started[p.ToolCallID] = true
			}
		case abi.PayloadAIConfirmation:
			in.asked[p.ToolCallID] = true
			in.request[p.RequestID] = p.ToolCallID
		case abi.PayloadAIConfirmed:
			delete(in.asked, in.request[p.RequestID])
		}
	}
	in.text, in.think = text.String(), think.String()
	return in
}

// splitMessageID splits an ai-token's message id (<run>-<model call>).
func splitMessageID(id string) (string, int, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	return id[:i], n, err == nil
}

// recovered is a conversation whose interrupted turn was closed.
type recovered struct {
	key, run string
	// unanswered: the user's message (or the calls' results) still waits for the model.
	unanswered bool
}

// recoverHeld closes the run a killed gateway left open in h's transcript, if any: the reply
// that was streaming is kept as aborted, every call without a result gets one saying the
// gateway restarted, and the run ends with that reason. logOf reads the log of the session
// that ran it, when there is a run to close (nil: no partial reply is known, and no call is
// known to have started).
func (k *Kind) recoverHeld(ctx context.Context, h *conversation.Held, logOf func() *interruption) (*recovered, error) {
	return k.recoverHeldBy(ctx, h, func(string) *interruption {
		if logOf == nil {
			return nil
		}
		return logOf()
	}, byRestart)
}

// recoverHeldBy is recoverHeld with the cause the records name; logOf is given the open run's
// id (the log of the session that ran it, of several, is the one to read).
func (k *Kind) recoverHeldBy(ctx context.Context, h *conversation.Held, logOf func(run string) *interruption, why cut) (*recovered, error) {
	var w conversation.TurnWriter = h
	f := w.File()
	open, err := lastRun(f)
	if err != nil {
		return nil, err
	}
	if open != nil && open.Ended {
		open = nil
	}
	if open == nil {
		if st := string(h.Entry.Extra["state"]); st != "" && st != strconv.Quote(StateIdle) {
			return nil, h.Patch(context.WithoutCancel(ctx), map[string]any{"state": StateIdle})
		}
		return nil, nil
	}
	var in *interruption
	if logOf != nil {
		in = logOf(open.RunID)
	}
	if in != nil && in.run != open.RunID {
		in = nil // the log is of another turn
	}
	cx, err := w.Context()
	if err != nil {
		return nil, fmt.Errorf("read context: %w", err)
	}
	msgs, err := provider.FromContext(cx.Messages)
	if err != nil {
		return nil, fmt.Errorf("context: %w", err)
	}
	now := k.now().UnixMilli()
	// The reply that was streaming: model calls of this run the transcript has not.
	if in != nil && in.call > repliesOf(f, open) && (in.text != "" || in.think != "") {
		m := provider.Message{Role: provider.RoleAssistant, StopReason: provider.StopAborted, ErrorMessage: why.reply, Timestamp: now}
		m.API, m.Provider, m.Model = k.modelOf(h, msgs)
		if in.think != "" {
			m.Content = append(m.Content, provider.Content{Type: provider.BlockThinking, Thinking: in.think})
		}
		if in.text != "" {
			m.Content = append(m.Content, provider.Text(in.text))
		}
		if _, err := w.AppendMessage(m, nil); err != nil {
			return nil, fmt.Errorf("record the cut reply: %w", err)
		}
		msgs = append(msgs, m)
	}
	// Calls of the last reply without a result.
	answered := map[string]bool{}
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == provider.RoleToolResult {
			answered[msgs[i].ToolCallID] = true
			continue
		}
		if msgs[i].Role == provider.RoleAssistant {
			last = i
		}
		break
	}
	if last >= 0 && msgs[last].StopReason != provider.StopAborted && msgs[last].StopReason != provider.StopError {
		for _, c := range msgs[last].Content {
			if c.Type != provider.BlockToolCall || answered[c.ID] {
				continue
			}
			answer := why.unknown
			switch {
			case in.ran(c.ID):
				answer = why.running
			case in != nil:
				answer = why.notRun
			}
			details, _ := json.Marshal(map[string]any{why.detail: true, "ran": in.ran(c.ID), "awaitingConfirmation": in != nil && in.asked[c.ID]})
			r := provider.Message{Role: provider.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name, Content: []provider.Content{provider.Text(answer)},
				IsError: true, Details: details, Timestamp: now}
			if _, err := w.AppendMessage(r, nil); err != nil {
				return nil, fmt.Errorf("answer call %s: %w", c.ID, err)
			}
			msgs = append(msgs, r)
		}
	}
	ev := chatstore.RunEvent{RunID: open.RunID, SessionID: open.SessionID, Phase: chatstore.PhaseEnd, Outcome: chatstore.OutcomeError, Error: why.reason}
	if _, err := w.AppendCustom(chatstore.RunCustomType, ev); err != nil {
		return nil, fmt.Errorf("end run %s: %w", open.RunID, err)
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("sync the transcript: %w", err)
	}
	if err := h.Patch(context.WithoutCancel(ctx), map[string]any{"state": StateIdle}); err != nil {
		return nil, err
	}
	return &recovered{key: h.Key, run: open.RunID, unanswered: waitsForModel(msgs)}, nil
}

// lastRun is the transcript's last run (nil: none). Only the last can be the one a killed
// gateway left: runs follow one another, and one left open by an older crash, with turns after
// it, is history. It reads the file from the end, so a session's start costs no more with a
// long transcript.
func lastRun(f *transcript.File) (*chatstore.RunSummary, error) {
	var id string
	for i := len(f.Entries) - 1; i >= 0; i-- {
		e := f.Entries[i]
		if e.Type != "custom" || e.CustomType != chatstore.RunCustomType {
			continue
		}
		runs, err := chatstore.RunsFromEntries(f, []*transcript.Entry{e})
		if err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		if len(runs) == 0 {
			continue
		}
		if id == "" {
			id = runs[0].RunID
		}
		if runs[0].RunID == id && runs[0].Phases[0].Phase == chatstore.PhaseStart {
			all, err := chatstore.RunsFromEntries(f, f.Entries[i:])
			if err != nil {
				return nil, fmt.Errorf("read runs: %w", err)
			}
			for j := range all {
				if all[j].RunID == id {
					return &all[j], nil
				}
			}
		}
	}
	return nil, nil
}

// repliesOf counts the assistant messages written after run's start.
func repliesOf(f *transcript.File, run *chatstore.RunSummary) int {
	if len(run.Phases) == 0 {
		return 0
	}
	start := slices.IndexFunc(f.Entries, func(e *transcript.Entry) bool { return e.ID == run.Phases[0].EntryID })
	if start < 0 {
		return 0
	}
	n := 0
	for _, e := range f.Entries[start+1:] {
		if e.Type == "message" && e.Role == provider.RoleAssistant {
			n++
		}
	}
	return n
}

// waitsForModel reports whether the context ends with something the model has not answered:
// the user's message, tool results, or a reply that did not finish.
func waitsForModel(msgs []provider.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		switch m.Role {
		case provider.RoleUser, provider.RoleToolResult:
			return true
		case provider.RoleAssistant:
			if m.StopReason == provider.StopAborted || m.StopReason == provider.StopError {
				continue // left out of the context: what it answered still waits
			}
			return false
		}
	}
	return false
}

// modelOf is the API, provider and model a cut reply is recorded with: the conversation's
// last reply's, else its recorded backend's.
func (k *Kind) modelOf(h *conversation.Held, msgs []provider.Message) (api, name, model string) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if m := msgs[i]; m.Role == provider.RoleAssistant && m.API != "" {
			return m.API, m.Provider, m.Model
		}
	}
	opts, _ := recordedOptions(&h.Entry)
	name, model = opts.Backend, opts.Model
	if cfg, err := k.Config(); err == nil {
		if b, ok := cfg.Backends[name]; ok {
			api = provider.APIOf(b.Kind)
		}
	}
	return api, name, model
}

// restartedOn are the ai-chat sessions a gateway restart closed, the newest on each
// conversation.
func (k *Kind) restartedOn(ctx context.Context) map[string]abi.Session {
	out := map[string]abi.Session{}
	if k.Sessions == nil {
		return out
	}
	all, err := k.Sessions.List(ctx, true)
	if err != nil {
		k.logger().Warn("list the sessions a restart closed", "err", err)
		return out
	}
	for _, s := range all {
		if s.Type != abi.TypeAIChat || s.Metadata["closeReason"] != abi.CloseGatewayRestart {
			continue
		}
		if _, moved := s.Metadata["movedTo"]; moved {
			continue // a gateway before this one took it over
		}
		if k.Leases != nil && s.Node != k.Node {
			continue // another node's restart: that node reopens it
		}
		// A session opened without a key got one from the kind: the metadata has it.
		key, _ := s.Metadata["chatKey"].(string)
		if key == "" {
			key = s.Context.ChatID
		}
		if key == "" {
			continue
		}
		out[key] = s // List is oldest first
	}
	return out
}

// recoverTurns closes the turns a killed gateway left running: every conversation sessions.json
// says runs (or compacts). It returns those whose user still waits for an answer.
func (k *Kind) recoverTurns(ctx context.Context, closed map[string]abi.Session) []recovered {
	items, err := k.Chats.List(ctx, conversation.ListOptions{})
	if err != nil {
		k.logger().Warn("find interrupted turns", "err", err)
		return nil
	}
	var out []recovered
	for _, it := range items {
		st := string(it.Entry.Extra["state"])
		if st != strconv.Quote(StateRunning) && st != strconv.Quote(StateCompacting) {
			continue
		}
		r, err := k.recoverKey(ctx, it.Key, func() *interruption {
			if s, ok := closed[it.Key]; ok {
				return k.readInterruption(ctx, s.SessionID)
			}
			return nil
		})
		if err != nil {
			k.logger().Warn("close an interrupted turn", "key", it.Key, "err", err)
			continue
		}
		if r != nil {
			k.logger().Info("interrupted turn closed", "key", it.Key, "run", r.run, "unanswered", r.unanswered)
			out = append(out, *r)
		}
	}
	return out
}

func (k *Kind) recoverKey(ctx context.Context, key string, logOf func() *interruption) (*recovered, error) {
	var lease conversation.Lease
	if k.Leases != nil {
		// On a cluster the conversation may have gone on on another node since this one
		// stopped: only the lease's holder closes its turn, from the cluster's transcript.
		lk := leaseKeyOf(key)
		l, prev, err := k.acquireLease(ctx, lk)
		if errors.Is(err, conversation.ErrLeaseHeld) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer k.releaseLease(lk, l)
		if err := k.adopt(ctx, lk, prev); err != nil {
			return nil, err
		}
		lease = l
	}
	h, err := k.Chats.Hold(ctx, key, conversation.HoldOptions{Sync: transcript.SyncBatch, Lease: lease})
	if err != nil {
		return nil, err
	}
	r, err := k.recoverHeld(ctx, h, logOf)
	if cerr := h.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return r, err
}

// continueTurns reports whether config.toml lets interrupted turns continue.
func (k *Kind) continueTurns() bool {
	cfg, err := k.Config()
	if err != nil {
		return true
	}
	return cfg.Recovery.Continue()
}

// markContinue has the next session delivering key's queue first run a turn on the recorded
// context (no new user message).
func (k *Kind) markContinue(key string) {
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	if k.continuing == nil {
		k.continuing = map[string]bool{}
	}
	k.continuing[key] = true
}

// takeContinue takes key's pending continuation, if any.
func (k *Kind) takeContinue(key string) bool {
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	if !k.continuing[key] {
		return false
	}
	delete(k.continuing, key)
	return true
}

// pendingContinue reports whether key has a continuation waiting for a session.
func (k *Kind) pendingContinue(key string) bool {
	k.chatsMu.Lock()
	defer k.chatsMu.Unlock()
	return k.continuing[key]
}

// mover is a registry that records where a closed session went.
type mover interface {
	Moved(ctx context.Context, id, to string) error
}

// reopen opens a session on the conversation a restart closed old on, as old was opened, and
// records on old that it moved there.
func (k *Kind) reopen(ctx context.Context, key string, old abi.Session) error {
	sh, err := k.Chats.Show(ctx, key)
	if err != nil {
		return err
	}
	opts, ok := recordedOptions(sh.Entry)
	if !ok {
		return fmt.Errorf("reopen %s: no options recorded", key)
	}
	opts.Background, opts.Replaces = false, old.SessionID
	raw, err := json.Marshal(opts)
	if err != nil {
		return fmt.Errorf("options: %w", err)
	}
	cx := old.Context
	cx.ChatID = key
	s, err := k.Sessions.Create(context.WithoutCancel(ctx), abi.CreateRequest{Type: abi.TypeAIChat, Context: cx, Options: raw})
	if err != nil {
		return fmt.Errorf("reopen %s: %w", key, err)
	}
	if m, ok := k.Sessions.(mover); ok {
		if err := m.Moved(ctx, old.SessionID, s.SessionID); err != nil {
			return fmt.Errorf("record where %s went: %w", old.SessionID, err)
		}
	}
	k.logger().Info("session reopened after a restart", "key", key, "old", old.SessionID, "new", s.SessionID)
	return nil
}
