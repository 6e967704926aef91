package testkit

import (
	"sync/atomic"
	"testing"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var n atomic.Int32
	Eventually(t, "the counter to reach 5", func() bool { return n.Add(1) >= 5 })
	if got := n.Load(); got != 5 {
		t.Fatalf("condition evaluated %d times, want 5", got)
	}
}

func TestBufferWaitFor(t *testing.T) {
	var b Buffer
	go func() {
		for _, s := range []string{"he", "llo ", "world"} {
			_, _ = b.Write([]byte(s))
		}
	}()
	if got := b.WaitFor(t, "world"); got != "hello world" {
		t.Fatalf("got %q", got)
	}
	if b.Len() != len("hello world") {
		t.Fatalf("Len %d", b.Len())
	}
}

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "false": false, "0": false, "true": true, "1": true} {
		t.Setenv("CI", v)
		if InCI() != want {
			t.Errorf("CI=%q: InCI()=%v", v, !want)
		}
	}
}
