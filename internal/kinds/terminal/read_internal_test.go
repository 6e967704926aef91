package terminal

import (
	"errors"
	"io"
	"os"
	"testing"
)

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
	buf := make([]byte, 64)
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if n, err := readReady(rc, buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("got %q, %v", buf[:n], err)
	}
	if _, err := w.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if n, err := readReady(rc, buf[:4]); err != nil || string(buf[:n]) != "0123" {
		t.Fatalf("a full buffer: got %q, %v", buf[:n], err)
	}
	if _, err := w.Write([]byte("!")); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if n, err := readReady(rc, buf); err != nil || string(buf[:n]) != "456789!" {
		t.Fatalf("the rest: got %q, %v", buf[:n], err)
	}
	if n, err := readReady(rc, buf); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %d, %v", n, err)
	}
}
