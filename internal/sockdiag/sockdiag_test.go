package sockdiag_test

import (
	"net"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/nexus-run/nexus/internal/sockdiag"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestListAgreesWithTheLibrary: the in-place decoder reads what vishvananda/netlink reads,
// socket for socket, on live loopback connections with data in flight; and this process's
// inodes name exactly its own sockets.
func TestListAgreesWithTheLibrary(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err == nil {
		defer func() { _ = l6.Close() }()
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := s.Read(buf); err != nil {
		t.Fatal(err)
	}
	mine, err := sockdiag.List()
	if err != nil {
		testkit.SkipUnlessCI(t, "netlink sock_diag is not available here: "+err.Error())
	}
	lib, err := sockdiag.ListLibrary()
	if err != nil {
		t.Fatal(err)
	}
	byCookie := func(ss []sockdiag.Socket) map[uint64]sockdiag.Socket {
		m := map[uint64]sockdiag.Socket{}
		for _, s := range ss {
			m[s.Cookie] = s
		}
		return m
	}
	a, b := byCookie(mine), byCookie(lib)
	own := sockdiag.Inodes([]int{os.Getpid()})
	checked := 0
	for ck, x := range a {
		y, ok := b[ck]
		if !ok || !own[x.Inode] {
			continue // another process's, or gone between the two listings
		}
		checked++
		if x.Local != y.Local || x.Remote != y.Remote || x.State != y.State || x.Inode != y.Inode || x.BytesReceived != y.BytesReceived || x.BytesAcked != y.BytesAcked || x.DataAcked != y.DataAcked {
			t.Errorf("socket %d: %+v, the library read %+v", ck, x, y)
		}
	}
	if checked < 3 {
		t.Fatalf("compared %d of this process's sockets", checked)
	}
	var got []string
	for _, x := range mine {
		if own[x.Inode] && x.Inode != 0 {
			got = append(got, x.State)
		}
	}
	if !slices.Contains(got, "listen") || !slices.Contains(got, "established") {
		t.Fatalf("this process's sockets %v", got)
	}
}

// TestInodeCache: the cache finds a new socket, and one on a reused descriptor once the old
// socket is gone from the listing, and forgets closed ones.
func TestInodeCache(t *testing.T) {
	alive := func() func(uint32) bool {
		all, err := sockdiag.List()
		if err != nil {
			testkit.SkipUnlessCI(t, "netlink sock_diag is not available here: "+err.Error())
		}
		m := map[uint32]bool{}
		for _, s := range all {
			m[s.Inode] = true
		}
		return func(i uint32) bool { return m[i] }
	}
	var c sockdiag.InodeCache
	pid := []int{os.Getpid()}
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ino1 := inodeOf(t, l1)
	if got := c.Inodes(pid, alive()); !got[ino1] {
		t.Fatalf("the first listener %d not in %v", ino1, got)
	}
	_ = l1.Close()
	l2, err := net.Listen("tcp", "127.0.0.1:0") // likely on the same descriptor number
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l2.Close() }()
	ino2 := inodeOf(t, l2)
	got := c.Inodes(pid, alive())
	if !got[ino2] || got[ino1] {
		t.Fatalf("after the swap: %v (old %d, new %d)", got, ino1, ino2)
	}
}

func inodeOf(t *testing.T, l net.Listener) uint32 {
	t.Helper()
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return uint32(fi.Sys().(*syscall.Stat_t).Ino)
}
