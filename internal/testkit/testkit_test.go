package testkit

import (
	"net"
	"strconv"
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

// TestFreeAddr: the address is free and below the ephemeral range, where no ":0" listen or
// outgoing connection is given it.
func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if port, _ := strconv.Atoi(p); port >= ephemeralLow() || port < 10000 {
		t.Errorf("port %d: want 10000 up to %d", port, ephemeralLow())
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("listen on the free address %s: %v", addr, err)
	}
	_ = ln.Close()
}
