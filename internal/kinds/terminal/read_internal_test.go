package terminal

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"testing"

	"github.com/nexus-run/nexus/internal/testkit"
)

// lender lends one buffer and counts what is out.
type lender struct {
	buf      []byte
	out      atomic.Int32
	lent     atomic.Int32
	returned atomic.Int32
}

func (l *lender) take() []byte { l.out.Add(1); l.lent.Add(1); return l.buf }
func (l *lender) give()        { l.out.Add(-1); l.returned.Add(1) }

// TestReadReady: what is ready comes back at once, however large the buffer; a full buffer
// stops the reading; an end after output comes back at the next call.
func TestReadReady(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	read := func(size int) (string, error) {
		t.Helper()
		l := &lender{buf: make([]byte, size)}
		n, err := readReady(rc, l.take, l.give)
		if l.out.Load() != 1 {
			t.Fatalf("%d buffers out after a read, want the one read into", l.out.Load())
		}
		return string(l.buf[:n]), err
	}
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(64); err != nil || got != "hello" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := w.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(4); err != nil || got != "0123" {
		t.Fatalf("a full buffer: got %q, %v", got, err)
	}
	if _, err := w.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if got, err := read(64); err != nil || got != "456789!" {
		t.Fatalf("the rest: got %q, %v", got, err)
	}
	if got, err := read(64); got != "" || !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %q, %v", got, err)
	}
}

// TestReadReadyWaitsHoldingNoBuffer: a reader waiting for output (an idle terminal) has given
// its buffer back; it takes one again when output comes.
func TestReadReadyWaitsHoldingNoBuffer(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(); _ = w.Close() }()
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	l := &lender{buf: make([]byte, 64)}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := readReady(rc, l.take, l.give)
		done <- result{n, err}
	}()
	// It tried a read, found nothing and gave the buffer back before waiting.
	testkit.Eventually(t, "the waiting reader holds no buffer", func() bool { return l.returned.Load() >= 1 && l.out.Load() == 0 })
	if _, err := w.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || string(l.buf[:res.n]) != "ok" || l.out.Load() != 1 {
		t.Fatalf("got %q, %v, %d buffers out", l.buf[:res.n], res.err, l.out.Load())
	}
}
