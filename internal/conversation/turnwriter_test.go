package conversation_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/transcript"
)

// msg is a message as the turn loop writes one (pi's message model, by role).
func msg(role, text string, calls ...string) map[string]any {
	m := map[string]any{"role": role, "timestamp": 1}
	content := []map[string]any{{"type": "text", "text": text}}
	for _, id := range calls {
		content = append(content, map[string]any{"type": "toolCall", "id": id, "name": "bash", "arguments": map[string]any{}})
	}
	m["content"] = content
	if role == "assistant" {
		m["stopReason"] = "toolUse"
	}
	return m
}

func result(id string) map[string]any {
	return map[string]any{"role": "toolResult", "toolCallId": id, "toolName": "bash", "isError": false, "timestamp": 1,
		"content": []map[string]any{{"type": "text", "text": "ok"}}}
}

// TestTurnWriterPairing: through the turn writer a tool result must answer an unanswered
// call of the last assistant message: an unknown call, a call answered already or one of an
// older reply is refused, whether the calls were appended through this hold or read back
// from the file by the next; the entry is not written.
func TestTurnWriterPairing(t *testing.T) {
	ctx := context.Background()
	s := conversation.New(conversation.Options{Dir: t.TempDir()})
	key := "agent:main:pairing"
	h, err := s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var w conversation.TurnWriter = h
	for _, m := range []any{msg("user", "go"), msg("assistant", "", "a", "b", "b")} {
		if _, err := w.AppendMessage(m, nil); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		id string
		ok bool
	}{{"a", true}, {"a", false}, {"c", false}, {"b", true}}
	for _, st := range steps {
		n := len(w.File().Entries)
		_, err := w.AppendMessage(result(st.id), nil)
		if st.ok != (err == nil) || (err != nil && !errors.Is(err, conversation.ErrUnpairedResult)) {
			t.Fatalf("result %s: %v (want ok=%v)", st.id, err, st.ok)
		}
		if !st.ok && len(w.File().Entries) != n {
			t.Fatalf("a refused result was written")
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// The next hold reads the open calls back: one "b" is left, then none.
	h, err = s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if _, err := h.AppendMessage(result("b"), nil); err != nil {
		t.Fatalf("the second b: %v", err)
	}
	for _, id := range []string{"b", "a"} {
		if _, err := h.AppendMessage(result(id), nil); !errors.Is(err, conversation.ErrUnpairedResult) {
			t.Fatalf("result %s after every call was answered: %v", id, err)
		}
	}
	// A new reply's calls replace the old: a result of the old reply is refused.
	if _, err := h.AppendMessage(msg("assistant", "again", "d"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(result("a"), nil); !errors.Is(err, conversation.ErrUnpairedResult) {
		t.Fatalf("a result of an older reply: %v", err)
	}
	if _, err := h.AppendMessage(result("d"), nil); err != nil {
		t.Fatal(err)
	}
}

// TestTurnWriterCompact: a compaction through the turn writer waits for the calls to be
// answered and is counted in sessions.json's compactionCount, as conversation's own compact
// is.
func TestTurnWriterCompact(t *testing.T) {
	ctx := context.Background()
	s := conversation.New(conversation.Options{Dir: t.TempDir()})
	key := "agent:main:compact"
	h, err := s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	long := strings.Repeat("words ", 2000)
	for i := range 3 {
		for _, m := range []any{msg("user", long), msg("assistant", long)} {
			if _, err := h.AppendMessage(m, nil); err != nil {
				t.Fatal(i, err)
			}
		}
	}
	if _, err := h.AppendMessage(msg("assistant", "", "x"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Compact(ctx, "summary", 100, nil); !errors.Is(err, transcript.ErrToolCallPending) {
		t.Fatalf("compact with a call open: %v", err)
	}
	if _, err := h.AppendMessage(result("x"), nil); err != nil {
		t.Fatal(err)
	}
	id, err := h.Compact(ctx, "summary", 100, nil)
	if err != nil || id == "" {
		t.Fatalf("compact: %q %v", id, err)
	}
	sh, err := s.Show(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Entry.CompactionCount != 1 {
		t.Fatalf("compactionCount %d, want 1", sh.Entry.CompactionCount)
	}
}
