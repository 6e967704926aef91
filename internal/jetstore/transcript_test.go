package jetstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/conversation/conversationtest"
	"github.com/nexus-run/nexus/internal/jetstore"
	"github.com/nexus-run/nexus/internal/transcript"
)

func (c *natsCluster) transcripts(t *testing.T, nc *nats.Conn, cluster string, replicas int) *jetstore.Transcripts {
	t.Helper()
	r, err := jetstore.OpenTranscripts(testCtx(t), nc, jetstore.TranscriptOptions{Cluster: cluster, Replicas: replicas})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTranscriptContract: the transcript stream keeps conversation.Replica's contract at R1
// and R3 on three servers; each view is a node of its own (its own connection).
func TestTranscriptContract(t *testing.T) {
	c := startCluster(t)
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprint("R", replicas), func(t *testing.T) {
			conversationtest.RunReplica(t, func(t *testing.T) func(t *testing.T) conversation.Replica {
				name := clusterName()
				return func(t *testing.T) conversation.Replica { return c.transcripts(t, c.connect(t), name, replicas) }
			})
		})
	}
}

// TestTranscriptTooLarge: a line over the server's largest message is refused, saying so,
// and nothing is stored.
func TestTranscriptTooLarge(t *testing.T) {
	c := startCluster(t)
	nc := c.connect(t)
	r := c.transcripts(t, nc, clusterName(), 1)
	line := bytes.Repeat([]byte("x"), int(nc.MaxPayload()))
	_, err := r.Append(testCtx(t), "k", 0, line)
	if abi.CodeOf(err) != abi.CodeLimitExceeded {
		t.Fatalf("a line of %d bytes: %v, want LIMIT_EXCEEDED", len(line), err)
	}
	if n, _, err := r.Tail(testCtx(t), "k"); err != nil || n != 0 {
		t.Fatalf("tail: %d, %v", n, err)
	}
	// Through a Held the entry is refused before the file has it; the conversation goes on.
	h, err := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: r}).Hold(testCtx(t), "agent:main:big", conversation.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	big := map[string]any{"role": "user", "content": string(line), "timestamp": 1}
	if _, err := h.AppendMessage(big, nil); abi.CodeOf(err) != abi.CodeLimitExceeded {
		t.Fatalf("a message of %d bytes through a Held: %v", len(line), err)
	}
	if _, err := h.AppendMessage(map[string]any{"role": "user", "content": "small", "timestamp": 2}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestTranscriptTakeover: node a writes a conversation through its Held with the R3 stream
// as replica; node b, with a state directory of its own, rebuilds the same file from it.
func TestTranscriptTakeover(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	ra := c.transcripts(t, c.connect(t), name, 3)
	rb := c.transcripts(t, c.connect(t), name, 3)
	ctx := context.Background()
	a := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: ra})
	h, err := a.Hold(ctx, "agent:main:main", conversation.HoldOptions{Cwd: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]any{"role": "assistant", "stopReason": "toolUse", "timestamp": 2,
		"content": []map[string]any{{"type": "toolCall", "id": "c1", "name": "bash", "arguments": map[string]any{"cmd": "ls"}}}}
	res := map[string]any{"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "isError": false, "timestamp": 3,
		"content": []map[string]any{{"type": "text", "text": "a.go"}}}
	done := map[string]any{"role": "assistant", "stopReason": "stop", "timestamp": 4, "content": []map[string]any{{"type": "text", "text": "a.go"}}}
	for i, m := range []any{map[string]any{"role": "user", "content": "list", "timestamp": 1}, calls, res, done,
		map[string]any{"role": "user", "content": "and now?", "timestamp": 5}} {
		if _, err := h.AppendMessage(m, nil); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if _, err := h.Compact(ctx, "listed the files", 1, nil); err != nil {
		t.Fatal(err)
	}
	pathA, sid := h.Path(), h.SessionID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	pathB := filepath.Join(t.TempDir(), "b.jsonl")
	if err := conversation.Rebuild(ctx, rb, sid, pathB); err != nil {
		t.Fatal(err)
	}
	fa, err := os.ReadFile(pathA)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.ReadFile(pathB)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fa, fb) {
		t.Fatalf("rebuilt file differs:\n%s\n%s", fa, fb)
	}
}

// BenchmarkHeldAppend: one transcript entry appended through a Held as a turn does
// (SyncBatch), on the file alone and replicated on the stream at R1 and R3 (three servers
// in this process).
func BenchmarkHeldAppend(b *testing.B) {
	c := startCluster(b)
	for _, mode := range []string{"file", "R1", "R3"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			opts := conversation.Options{Dir: b.TempDir()}
			if mode != "file" {
				replicas := 1
				if mode == "R3" {
					replicas = 3
				}
				nc := c.connect(b)
				r, err := jetstore.OpenTranscripts(ctx, nc, jetstore.TranscriptOptions{Cluster: clusterName(), Replicas: replicas})
				if err != nil {
					b.Fatal(err)
				}
				opts.Replica = r
			}
			h, err := conversation.New(opts).Hold(ctx, "agent:main:bench", conversation.HoldOptions{Sync: transcript.SyncBatch})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = h.Close() }()
			m := map[string]any{"role": "user", "content": string(bytes.Repeat([]byte("x"), 1024)), "timestamp": 1}
			for b.Loop() {
				if _, err := h.AppendMessage(m, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRebuild: a transcript of 1,000 lines of 1 KiB rebuilt from the stream at R3, the
// file part of a takeover.
func BenchmarkRebuild(b *testing.B) {
	c := startCluster(b)
	ctx := context.Background()
	r, err := jetstore.OpenTranscripts(ctx, c.connect(b), jetstore.TranscriptOptions{Cluster: clusterName(), Replicas: 3})
	if err != nil {
		b.Fatal(err)
	}
	var pos uint64
	line := append(append([]byte(`{"type":"custom","data":"`), bytes.Repeat([]byte("x"), 1000)...), `"}`...)
	for range 1000 {
		if pos, err = r.Append(ctx, "bench", pos, line); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "r.jsonl")
	for b.Loop() {
		if err := conversation.Rebuild(ctx, r, "bench", path); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTranscriptServerLost: a conversation written through a Held while the transcript
// stream's leader (one nats-server of three, R3) is shut down loses no acknowledged entry:
// every message whose append returned is in the stream afterwards, once and in order, and the
// stream and the file agree. An append that failed stops that Held; the writer holds again
// (as the next turn does) and goes on.
func TestTranscriptServerLost(t *testing.T) {
	c := startCluster(t)
	name := clusterName()
	nc := c.connect(t)
	rep := c.transcripts(t, nc, name, 3)
	ctx := testCtx(t)
	s := conversation.New(conversation.Options{Dir: t.TempDir(), Replica: rep})
	const key = "agent:main:server-lost"
	var acked []string
	failed := 0
	var h *conversation.Held
	write := func(i int) {
		if h == nil {
			var err error
			if h, err = s.Hold(ctx, key, conversation.HoldOptions{Cwd: "/w"}); err != nil {
				if failed++; failed <= 5 {
					t.Logf("hold before message %d: %v", i, err)
				}
				h = nil
				return
			}
		}
		text := fmt.Sprint("m", i)
		if _, err := h.AppendMessage(map[string]any{"role": "user", "content": text, "timestamp": i}, nil); err != nil {
			// Not acknowledged: it may or may not be in the file and the stream.
			if failed++; failed <= 5 {
				t.Logf("message %d: %v", i, err)
			}
			_ = h.Close()
			h = nil
			return
		}
		acked = append(acked, text)
	}
	for i := range 30 {
		write(i)
	}
	stream, _ := jetstore.TranscriptNames(name)
	leader, done := c.shutDownLeader(t, ctx, stream)
	for i := 30; i < 60; i++ {
		write(i)
	}
	<-done
	before := len(acked)
	for i := 60; len(acked) < before+20 && i < 1000; i++ {
		write(i)
	}
	if len(acked) < before+20 {
		t.Fatalf("only %d messages acknowledged after the loss (%d failed)", len(acked)-before, failed)
	}
	sid, path := h.SessionID, h.Path()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages acknowledged, %d appends failed across the loss of %s", len(acked), failed, leader)
	var streamed []string
	for line, err := range c.transcripts(t, c.connect(t), name, 3).Lines(ctx, sid) {
		if err != nil {
			t.Fatal(err)
		}
		streamed = append(streamed, string(line))
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(streamed, "\n")+"\n", string(file); got != want {
		t.Fatalf("the stream and the file differ:\n%s\nthe file:\n%s", got, want)
	}
	// Every acknowledged message once, in order (unacknowledged ones may be there too).
	seen := map[string]int{}
	next := 0
	for _, l := range streamed {
		for _, text := range acked[next:] {
			if strings.Contains(l, `"content":"`+text+`"`) {
				next++
				break
			}
		}
		for i := 0; i < 1000; i++ {
			if strings.Contains(l, fmt.Sprintf(`"content":"m%d"`, i)) {
				seen[fmt.Sprint("m", i)]++
			}
		}
	}
	if next != len(acked) {
		t.Fatalf("the stream has %d of the %d acknowledged messages in order", next, len(acked))
	}
	for text, n := range seen {
		if n > 1 {
			t.Fatalf("%s is in the stream %d times", text, n)
		}
	}
}
