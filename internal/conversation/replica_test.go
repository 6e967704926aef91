package conversation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/conversation/conversationtest"
	"github.com/nexus-run/nexus/internal/transcript"
)

func TestMemoryReplicaContract(t *testing.T) {
	conversationtest.RunReplica(t, func(t *testing.T) func(t *testing.T) conversation.Replica {
		r := conversation.NewMemoryReplica()
		return func(*testing.T) conversation.Replica { return r }
	})
}

// writeTurns writes a conversation with tool calls, a model change and a compaction
// through h, as a turn loop does.
func writeTurns(t *testing.T, h *conversation.Held) {
	t.Helper()
	ctx := context.Background()
	steps := []func() (string, error){
		func() (string, error) { return h.AppendModelChange("anthropic", "claude-sonnet-4-5") },
		func() (string, error) { return h.AppendMessage(msg("user", "find the bug <here> & fix it"), nil) },
		func() (string, error) { return h.AppendMessage(msg("assistant", "reading", "c1", "c2"), nil) },
		func() (string, error) { return h.AppendMessage(result("c1"), nil) },
		func() (string, error) {
			return h.AppendMessage(result("c2"), map[string]any{"nexus": map[string]any{"turnId": "t1"}})
		},
		func() (string, error) { return h.AppendThinkingLevel("high") },
		func() (string, error) { return h.AppendCustom("nexus.turn", map[string]any{"turn": 1}) },
		func() (string, error) { return h.AppendMessage(msg("user", "and the writer"), nil) },
		func() (string, error) { return h.AppendMessage(msg("assistant", "done"), nil) },
		func() (string, error) { return h.Compact(ctx, "fixed the bug; the writer pending", 1, nil) },
		func() (string, error) { return h.AppendMessage(msg("user", "after the compaction"), nil) },
	}
	for i, step := range steps {
		if _, err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
}

func contextJSON(t *testing.T, path string) []byte {
	t.Helper()
	f, err := transcript.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	cx, err := f.BuildContext("")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cx)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplicaRebuild: a conversation written through node A's Held with a replica (tool
// calls, a compaction) is rebuilt on node B, from a state directory of its own, as the
// same file byte for byte, with the same context; B's Hold of the session rebuilds it
// itself and writes on, and A's stale file is refused by the replica.
func TestReplicaRebuild(t *testing.T) {
	ctx := context.Background()
	rep := conversation.NewMemoryReplica()
	a := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	key := "agent:main:takeover"
	h, err := a.Hold(ctx, key, conversation.HoldOptions{Cwd: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	writeTurns(t, h)
	pathA, sid := h.Path(), h.SessionID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	pathB := filepath.Join(t.TempDir(), "b.jsonl")
	if err := conversation.Rebuild(ctx, rep, sid, pathB); err != nil {
		t.Fatal(err)
	}
	fileA, err := os.ReadFile(pathA)
	if err != nil {
		t.Fatal(err)
	}
	fileB, err := os.ReadFile(pathB)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fileA, fileB) {
		t.Fatalf("rebuilt file differs:\nA:\n%s\nB:\n%s", fileA, fileB)
	}
	if fi, err := os.Stat(pathB); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("rebuilt file mode: %v, %v", fi.Mode(), err)
	}
	if ca, cb := contextJSON(t, pathA), contextJSON(t, pathB); !bytes.Equal(ca, cb) {
		t.Fatalf("contexts differ:\nA: %s\nB: %s", ca, cb)
	}
	if err := conversation.Rebuild(ctx, rep, "no-such-session", filepath.Join(t.TempDir(), "x.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rebuild of nothing: %v", err)
	}

	// A's file lost: the next Hold on a node with the session's entry rebuilds it first.
	if err := os.Remove(pathA); err != nil {
		t.Fatal(err)
	}
	h, err = a.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(msg("assistant", "on B"), nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conversation.Rebuild(ctx, rep, sid, pathB); err != nil {
		t.Fatal(err)
	}
	if ca, cb := contextJSON(t, pathA), contextJSON(t, pathB); !bytes.Equal(ca, cb) {
		t.Fatalf("contexts differ after writing on:\nA: %s\nB: %s", ca, cb)
	}

	// A stale copy (the file before the last entry) is refused, never appended from.
	if err := os.WriteFile(pathA, fileA, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Hold(ctx, key, conversation.HoldOptions{}); !errors.Is(err, conversation.ErrReplicaConflict) {
		t.Fatalf("hold of a stale file: %v, want ErrReplicaConflict", err)
	}
}

// TestReplicaSeedsExisting: a transcript written before its node had a replica is copied
// whole (header first) by the first Hold with one.
func TestReplicaSeedsExisting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	key := "agent:main:seed"
	h, err := conversation.New(conversation.Options{Dir: dir}).Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeTurns(t, h)
	path, sid := h.Path(), h.SessionID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	rep := conversation.NewMemoryReplica()
	h, err = conversation.New(conversation.Options{Dir: dir, Replica: rep}).Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	rebuilt := filepath.Join(t.TempDir(), "r.jsonl")
	if err := conversation.Rebuild(ctx, rep, sid, rebuilt); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(path)
	got, _ := os.ReadFile(rebuilt)
	if !bytes.Equal(want, got) {
		t.Fatalf("seeded replica differs:\n%s\n%s", want, got)
	}
}

type flagLease struct{ lost atomic.Bool }

func (l *flagLease) Valid() error {
	if l.lost.Load() {
		return conversation.ErrLeaseLost
	}
	return nil
}

// failingReplica refuses appends once fail is set.
type failingReplica struct {
	*conversation.MemoryReplica
	fail atomic.Bool
}

func (r *failingReplica) Append(ctx context.Context, key string, after uint64, line []byte) (uint64, error) {
	if r.fail.Load() {
		return 0, errors.New("no quorum")
	}
	return r.MemoryReplica.Append(ctx, key, after, line)
}

// TestHeldStops: a Held whose lease is lost refuses every write and writes nothing; one
// whose replica failed stops after the entry it could not replicate.
func TestHeldStops(t *testing.T) {
	ctx := context.Background()
	rep := &failingReplica{MemoryReplica: conversation.NewMemoryReplica()}
	s := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	lease := &flagLease{}
	h, err := s.Hold(ctx, "agent:main:stops", conversation.HoldOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if _, err := h.AppendMessage(msg("user", "one"), nil); err != nil {
		t.Fatal(err)
	}
	lease.lost.Store(true)
	n := len(h.File().Entries)
	writes := map[string]func() (string, error){
		"message":  func() (string, error) { return h.AppendMessage(msg("assistant", "two"), nil) },
		"model":    func() (string, error) { return h.AppendModelChange("openai", "gpt-5") },
		"thinking": func() (string, error) { return h.AppendThinkingLevel("low") },
		"custom":   func() (string, error) { return h.AppendCustom("x", 1) },
		"compact":  func() (string, error) { return h.Compact(ctx, "s", 1, nil) },
	}
	for name, w := range writes {
		if _, err := w(); !errors.Is(err, conversation.ErrLeaseLost) {
			t.Fatalf("%s with the lease lost: %v", name, err)
		}
	}
	if len(h.File().Entries) != n {
		t.Fatalf("a write went through without the lease")
	}

	lease.lost.Store(false)
	rep.fail.Store(true)
	if _, err := h.AppendMessage(msg("assistant", "unreplicated"), nil); err == nil {
		t.Fatal("an append the replica refused succeeded")
	}
	rep.fail.Store(false)
	if _, err := h.AppendMessage(msg("user", "after"), nil); err == nil {
		t.Fatal("the writer went on after a line the replica does not hold")
	}
	if n, _, _ := rep.Tail(ctx, h.SessionID); n != 2 {
		t.Fatalf("replica holds %d lines, want the header and the first message", n)
	}
}

// TestReplicaCatchesUp: entries written to the file outside a Held (a label by `nexus chat
// label`) reach the replica with the next Hold.
func TestReplicaCatchesUp(t *testing.T) {
	ctx := context.Background()
	rep := conversation.NewMemoryReplica()
	s := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	key := "agent:main:label"
	h, err := s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeTurns(t, h)
	path, sid := h.Path(), h.SessionID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := transcript.OpenWriter(path, transcript.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendSessionInfo("named outside"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h, err = s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(msg("assistant", "after the name"), nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	rebuilt := filepath.Join(t.TempDir(), "r.jsonl")
	if err := conversation.Rebuild(ctx, rep, sid, rebuilt); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(path)
	got, _ := os.ReadFile(rebuilt)
	if !bytes.Equal(want, got) {
		t.Fatalf("replica after a write outside a Held:\n%s\nwant\n%s", got, want)
	}
}

// limitedReplica holds lines of at most max bytes.
type limitedReplica struct {
	*conversation.MemoryReplica
	max int
}

func (r limitedReplica) MaxLine() int { return r.max }

// TestReplicaLineLimit: an entry longer than the replica's longest line is refused before it
// is written (LIMIT_EXCEEDED): neither the file nor the replica has it, and the conversation
// goes on.
func TestReplicaLineLimit(t *testing.T) {
	ctx := context.Background()
	rep := limitedReplica{conversation.NewMemoryReplica(), 4096}
	s := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	h, err := s.Hold(ctx, "agent:main:big", conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if _, err := h.AppendMessage(msg("user", "small"), nil); err != nil {
		t.Fatal(err)
	}
	big := msg("assistant", string(bytes.Repeat([]byte("x"), 5000)))
	_, err = h.AppendMessage(big, nil)
	if abi.CodeOf(err) != abi.CodeLimitExceeded || !errors.Is(err, transcript.ErrLineTooLong) {
		t.Fatalf("an entry over the replica's line: %v", err)
	}
	if _, err := h.AppendCustom("big", string(bytes.Repeat([]byte("y"), 5000))); abi.CodeOf(err) != abi.CodeLimitExceeded {
		t.Fatalf("a custom entry over the replica's line: %v", err)
	}
	if _, err := h.AppendMessage(msg("assistant", "small again"), nil); err != nil {
		t.Fatalf("after a refused entry: %v", err)
	}
	if n, _, _ := rep.Tail(ctx, h.SessionID); n != 3 || len(h.File().Entries) != 2 {
		t.Fatalf("replica %d lines, file %d entries; want 3 and 2", n, len(h.File().Entries))
	}
}

// TestReplicaHeaderWithFirstEntry: a Hold of a new conversation that writes nothing leaves
// nothing in the replica (as no file), and the next Hold starts the transcript afresh.
func TestReplicaHeaderWithFirstEntry(t *testing.T) {
	ctx := context.Background()
	rep := conversation.NewMemoryReplica()
	s := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	for i, write := range []bool{false, false, true} {
		h, err := s.Hold(ctx, "agent:main:empty", conversation.HoldOptions{})
		if err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		if write {
			if _, err := h.AppendMessage(msg("user", "x"), nil); err != nil {
				t.Fatal(err)
			}
		}
		path, sid := h.Path(), h.SessionID
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		n, _, _ := rep.Tail(ctx, sid)
		_, serr := os.Stat(path)
		if want := map[bool]int{false: 0, true: 2}[write]; n != want || (serr == nil) != write {
			t.Fatalf("hold %d: replica %d lines (want %d), file: %v", i, n, want, serr)
		}
	}
}

// replicaLines are key's lines in r.
func replicaLines(t *testing.T, r conversation.Replica, key string) []string {
	t.Helper()
	var out []string
	for l, err := range r.Lines(context.Background(), key) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(l))
	}
	return out
}

// fileLines are the lines of the file at path.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestReplicaRewritten: a transcript rewritten in place (line compaction) has its replica made
// the new file (the next Hold was refused before: the replica held more lines, or others);
// a reset drops the previous transcript's lines, an archive the chat's.
func TestReplicaRewritten(t *testing.T) {
	ctx := context.Background()
	rep := conversation.NewMemoryReplica()
	s := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	const key = "agent:main:rewritten"
	h, err := s.Hold(ctx, key, conversation.HoldOptions{Cwd: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	writeTurns(t, h)
	sid, path := h.SessionID, h.Path()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	before := len(replicaLines(t, rep, sid))
	res, err := s.Compact(ctx, key, conversation.CompactRequest{MaxLines: 3})
	if err != nil || res.Compacted == nil || !*res.Compacted {
		t.Fatalf("compact: %+v %v", res, err)
	}
	if got, want := replicaLines(t, rep, sid), fileLines(t, path); strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) >= before {
		t.Fatalf("replica after the compaction (%d lines before):\n%s\nthe file:\n%s", before, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	h, err = s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatalf("hold after a compaction in place: %v", err)
	}
	if _, err := h.AppendMessage(map[string]any{"role": "user", "content": "after", "timestamp": 9}, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := replicaLines(t, rep, sid), fileLines(t, path); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("replica after an append:\n%s\nthe file:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	r, err := s.Reset(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := replicaLines(t, rep, r.PreviousSessionID); len(got) != 0 {
		t.Fatalf("the reset transcript keeps %d replicated lines", len(got))
	}
	h, err = s.Hold(ctx, key, conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AppendMessage(map[string]any{"role": "user", "content": "new", "timestamp": 10}, nil); err != nil {
		t.Fatal(err)
	}
	sid = h.SessionID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Archive(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := replicaLines(t, rep, sid); len(got) != 0 {
		t.Fatalf("the archived transcript keeps %d replicated lines", len(got))
	}
}
