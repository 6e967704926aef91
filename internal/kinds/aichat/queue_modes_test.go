package aichat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/transcript"
)

// TestQueueSteerBacklogOnce: a steer-backlog message steers the running turn (it goes before
// the queued followup) and is delivered once, not again as a followup; with no turn running
// it waits its turn like a followup, once.
func TestQueueSteerBacklogOnce(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:steer-backlog"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	sendMode(t, r, s.SessionID, "f1", "followup")
	sendMode(t, r, s.SessionID, "sb", "steer-backlog")
	var ends []string
	for len(ends) < 3 {
		ends = append(ends, w.turnEnded(t).End)
	}
	if fmt.Sprint(ends) != "[cancelled completed completed]" {
		t.Fatalf("turns %v: %s", ends, describe(w.seen))
	}
	sendMode(t, r, s.SessionID, "idle", "steer-backlog")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	if got := userTexts(t, e, key); got != "hang|sb|f1|idle" {
		t.Fatalf("delivered %s", got)
	}
	if q, err := e.queues.Queued(context.Background(), key); err != nil || len(q) != 0 {
		t.Fatalf("still queued %v %v", contentsOf(q), err)
	}
}

func contentsOf(ms []broker.Message) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Content)
	}
	return strings.Join(out, ",")
}

// TestQueueReject: a reject message is refused with BUSY while a turn runs, and while
// messages wait in the queue; nothing of it is stored or delivered. With the conversation
// free it runs. A conversation whose queue mode is reject refuses any message meanwhile.
func TestQueueReject(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	e.collect = aichat.CollectOptions{Debounce: time.Hour} // a collect message waits as long as the test
	r := e.gateway(t)
	key := "agent:main:test:reject"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	ctx := context.Background()
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	_, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("refused"), Mode: "reject"})
	if abi.CodeOf(err) != abi.CodeBusy || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("a reject message during a turn: %v", err)
	}
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.SessionID != s.SessionID || !abi.CodeBusy.Retriable() {
		t.Fatalf("the error %+v", err)
	}
	if _, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	w.turnEnded(t)
	sendMode(t, r, s.SessionID, "free", "reject")
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	// A message waiting in the queue (a collect batch in its debounce) makes it busy too.
	sendMode(t, r, s.SessionID, "waiting", "collect")
	if _, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("refused too"), Mode: "reject"}); abi.CodeOf(err) != abi.CodeBusy {
		t.Fatalf("a reject message with one waiting: %v", err)
	}
	if got := userTexts(t, e, key); got != "hang|free" {
		t.Fatalf("delivered %s", got)
	}
	hist, err := e.queues.History(ctx, key, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := contentsOf(hist); got != "hang,free,waiting" {
		t.Fatalf("stored %s", got)
	}
}

// TestQueueRollback: a rollback message aborts the running turn and runs in its place: its
// user message is a child of the entry before the aborted turn, which stays in the file as an
// abandoned branch; neither the model's next request nor the context built at the leaf (by
// nexus and by pi) holds the rolled-back turn, and the next turns go on from the new branch.
func TestQueueRollback(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:rollback"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	send(t, r, s.SessionID, "first")
	w.turnEnded(t)
	hang := sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	sendMode(t, r, s.SessionID, "instead", "rollback")
	if end := w.turnEnded(t); end.End != abi.TurnCancelled {
		t.Fatalf("the rolled-back turn %+v", end)
	}
	w.until(t, "the rollback", func(ev *live.Event) bool {
		p, ok := ev.Payload.(abi.AIQueue)
		return ok && p.Phase == abi.QueueRolledBack && slicesContains(p.MessageIDs, hang)
	})
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("the rollback's turn %+v: %s", end, describe(w.seen))
	}
	last := e.m.requests[len(e.m.requests)-1]
	if last.lastUser() != "instead" || last.has("hang") || last.has("...") || !last.has("echo: first") {
		t.Fatalf("the rollback's request %+v", last.Messages)
	}
	send(t, r, s.SessionID, "then")
	w.turnEnded(t)
	if got := userTexts(t, e, key); got != "first|instead|then" {
		t.Fatalf("the context's user messages %s", got)
	}
	if last := e.m.requests[len(e.m.requests)-1]; last.has("hang") {
		t.Fatalf("the next request has the rolled-back turn: %+v", last.Messages)
	}

	// The file keeps the aborted turn as a branch beside the rollback's.
	sh, err := e.chats.Show(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := transcript.Open(sh.File)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	start := map[string]*transcript.Entry{} // user text -> its turn's run start
	for _, e := range f.Entries {
		if e.Type != "message" || e.Role != "user" {
			continue
		}
		raw, err := f.Raw(e)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Message struct {
				Content json.RawMessage `json:"content"`
			} `json:"message"`
		}
		_ = json.Unmarshal(raw, &m)
		text := strings.Trim(string(m.Message.Content), `"`)
		if strings.Contains(text, `"text":"`) {
			text = strings.SplitN(strings.SplitN(text, `"text":"`, 2)[1], `"`, 2)[0]
		}
		p := f.Entry(e.ParentID)
		for p != nil && (p.Type != "custom" || p.CustomType != chatstore.RunCustomType) {
			p = f.Entry(p.ParentID)
		}
		if p == nil {
			t.Fatalf("no run start above %q", text)
		}
		start[text] = p
	}
	if start["hang"] == nil || start["instead"] == nil || start["hang"].ParentID != start["instead"].ParentID || start["hang"].ID == start["instead"].ID {
		t.Fatalf("the rollback's turn should start where the aborted one did: %+v", start)
	}
	piSameContext(t, e, key, sh.File)
}

// piSameContext checks that the pi coding agent (tools/pi) builds, at the file's leaf, the
// context nexus builds (the same messages, field for field); skipped where pi is not
// installed (npm ci --prefix tools/pi), except under CI.
func piSameContext(t *testing.T, e *env, key, path string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "tools", "pi"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.SkipUnlessCI(t, "pi: node is not installed")
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@mariozechner", "pi-coding-agent", "package.json")); err != nil {
		testkit.SkipUnlessCI(t, "pi: the pi coding agent is not installed (npm ci --prefix tools/pi)")
		return
	}
	cmd := exec.CommandContext(t.Context(), node, filepath.Join(dir, "context.mjs"), path)
	cmd.Env = append(os.Environ(), "PI_CODING_AGENT_DIR="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pi: %v", err)
	}
	var pi struct {
		Messages []any `json:"messages"`
	}
	if err := json.Unmarshal(out, &pi); err != nil {
		t.Fatalf("pi's context: %v", err)
	}
	h, err := e.chats.History(context.Background(), key, conversation.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	var nexus []any
	for m, err := range h.Messages {
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatal(err)
		}
		nexus = append(nexus, v)
	}
	if len(nexus) == 0 || !reflect.DeepEqual(pi.Messages, nexus) {
		a, _ := json.Marshal(nexus)
		t.Fatalf("pi builds another context:\npi:    %s\nnexus: %s", out, a)
	}
}

// TestDeliverModes: a trigger's firing (stored once under its id) follows its mode like a
// message sent: reject is refused with BUSY while a turn runs, steer aborts the turn; the
// same firing again changes nothing.
func TestDeliverModes(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:deliver-modes"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	ctx := context.Background()
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	if _, err := e.k.Deliver(ctx, aichat.Delivery{Key: key, Text: "cron reject", ID: "cron_r_1", Mode: "reject", From: "cron:r"}); abi.CodeOf(err) != abi.CodeBusy {
		t.Fatalf("a reject firing during a turn: %v", err)
	}
	d, err := e.k.Deliver(ctx, aichat.Delivery{Key: key, Text: "cron steer", ID: "cron_s_1", Mode: "steer", From: "cron:s"})
	if err != nil || d.MessageID != "cron_s_1" || d.Duplicate {
		t.Fatalf("a steer firing: %+v %v", d, err)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCancelled {
		t.Fatalf("the steered turn %+v", end)
	}
	if end := w.turnEnded(t); end.End != abi.TurnCompleted {
		t.Fatalf("the firing's turn %+v", end)
	}
	again, err := e.k.Deliver(ctx, aichat.Delivery{Key: key, Text: "cron steer", ID: "cron_s_1", Mode: "steer", From: "cron:s"})
	if err != nil || !again.Duplicate || again.MessageID != "cron_s_1" {
		t.Fatalf("the same firing again: %+v %v", again, err)
	}
	if got := userTexts(t, e, key); got != "hang|cron steer" {
		t.Fatalf("delivered %s", got)
	}
}
