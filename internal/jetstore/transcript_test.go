package jetstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
	"github.com/nexus-run/nexus/internal/conversation/conversationtest"
	"github.com/nexus-run/nexus/internal/jetstore"
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
