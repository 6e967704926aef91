package conversationtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/conversation"
)

// ReplicaFactory returns a replica for a subtest; every call within one subtest must return
// a view of the same replica (as two nodes of one cluster see it).
type ReplicaFactory func(t *testing.T) func(t *testing.T) conversation.Replica

// RunReplica runs the contract of conversation.Replica: lines kept in order per key,
// compare-and-set on the last line's position, writers that race never interleave.
func RunReplica(t *testing.T, newReplica ReplicaFactory) {
	t.Helper()
	t.Run("Order", func(t *testing.T) {
		r := newReplica(t)(t)
		c := ctx(t)
		key := "0190a6f2-7c1e-7abc-8def-0123456789ab"
		wantLines(t, r, key, nil)
		var want [][]byte
		var pos uint64
		for i := range 5 {
			line := fmt.Appendf(nil, `{"type":"message","id":"%08x","n":%d}`, i, i)
			p, err := r.Append(c, key, pos, line)
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
			if p <= pos {
				t.Fatalf("append %d: position %d after %d", i, p, pos)
			}
			pos = p
			want = append(want, line)
		}
		n, last, err := r.Tail(c, key)
		if err != nil || n != 5 || last != pos {
			t.Fatalf("tail: %d lines, last %d, %v; want 5, %d", n, last, err, pos)
		}
		wantLines(t, r, key, want)
	})
	t.Run("Purge", func(t *testing.T) {
		r := newReplica(t)(t)
		p, ok := r.(conversation.Purger)
		if !ok {
			t.Skip("the replica does not purge")
		}
		c := ctx(t)
		lines := map[string][][]byte{}
		for _, key := range []string{"purged", "kept"} {
			var pos uint64
			for i := range 3 {
				line := fmt.Appendf(nil, `{"key":%q,"n":%d}`, key, i)
				var err error
				if pos, err = r.Append(c, key, pos, line); err != nil {
					t.Fatal(err)
				}
				lines[key] = append(lines[key], line)
			}
		}
		if err := p.Purge(c, "purged"); err != nil {
			t.Fatal(err)
		}
		if n, last, err := r.Tail(c, "purged"); err != nil || n != 0 || last != 0 {
			t.Fatalf("tail after the purge: %d lines, last %d, %v", n, last, err)
		}
		wantLines(t, r, "purged", nil)
		wantLines(t, r, "kept", lines["kept"])
		again := []byte(`{"again":true}`)
		if _, err := r.Append(c, "purged", 0, again); err != nil {
			t.Fatalf("append after the purge: %v", err)
		}
		wantLines(t, r, "purged", [][]byte{again})
	})
	t.Run("Conflict", func(t *testing.T) {
		r := newReplica(t)(t)
		c := ctx(t)
		key := "k"
		p1, err := r.Append(c, key, 0, []byte(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, after := range []uint64{0, p1 + 1000} {
			if _, err := r.Append(c, key, after, []byte(`{"stale":1}`)); !errors.Is(err, conversation.ErrReplicaConflict) {
				t.Fatalf("append after %d (last %d): %v, want ErrReplicaConflict", after, p1, err)
			}
		}
		if _, err := r.Append(c, key, p1, []byte(`{"a":2}`)); err != nil {
			t.Fatal(err)
		}
		wantLines(t, r, key, [][]byte{[]byte(`{"a":1}`), []byte(`{"a":2}`)})
	})
	t.Run("KeysApart", func(t *testing.T) {
		r := newReplica(t)(t)
		c := ctx(t)
		keys := []string{"agent:main:main", "agent:main:main.x", "a b/c*>", "agent:main"}
		for i, k := range keys {
			if _, err := r.Append(c, k, 0, fmt.Appendf(nil, `{"k":%d}`, i)); err != nil {
				t.Fatalf("%q: %v", k, err)
			}
		}
		for i, k := range keys {
			wantLines(t, r, k, [][]byte{fmt.Appendf(nil, `{"k":%d}`, i)})
		}
	})
	t.Run("Large", func(t *testing.T) {
		r := newReplica(t)(t)
		line := append(append([]byte(`{"text":"`), bytes.Repeat([]byte("x"), 300<<10)...), `"}`...)
		if _, err := r.Append(ctx(t), "big", 0, line); err != nil {
			t.Fatal(err)
		}
		wantLines(t, r, "big", [][]byte{line})
	})
	// Writers on two nodes racing on one key: each retries from the tail after a
	// conflict; every line is stored once and the count is exact.
	t.Run("RacingWriters", func(t *testing.T) {
		open := newReplica(t)
		nodes := []conversation.Replica{open(t), open(t)}
		c := ctx(t)
		const writers, each = 4, 8
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := nodes[w%len(nodes)]
				for i := range each {
					line := fmt.Appendf(nil, `{"w":%d,"i":%d}`, w, i)
					for {
						_, last, err := r.Tail(c, "race")
						if err != nil {
							errs <- err
							return
						}
						_, err = r.Append(c, "race", last, line)
						if err == nil {
							break
						}
						if !errors.Is(err, conversation.ErrReplicaConflict) {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for line, err := range nodes[0].Lines(c, "race") {
			if err != nil {
				t.Fatal(err)
			}
			seen[string(line)]++
		}
		if len(seen) != writers*each {
			t.Fatalf("%d distinct lines, want %d", len(seen), writers*each)
		}
		for l, n := range seen {
			if n != 1 {
				t.Fatalf("%s stored %d times", l, n)
			}
		}
		if n, _, err := nodes[1].Tail(c, "race"); err != nil || n != writers*each {
			t.Fatalf("tail: %d, %v", n, err)
		}
	})
}

func wantLines(t *testing.T, r conversation.Replica, key string, want [][]byte) {
	t.Helper()
	var got [][]byte
	for line, err := range r.Lines(context.WithoutCancel(ctx(t)), key) {
		if err != nil {
			t.Fatalf("lines of %s: %v", key, err)
		}
		got = append(got, line)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d lines, want %d", key, len(got), len(want))
	}
	for i, w := range want {
		if !bytes.Equal(got[i], w) {
			t.Fatalf("%s line %d: %.80q, want %.80q", key, i, got[i], w)
		}
	}
}
