package sockdiag_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nexus-run/nexus/internal/sockdiag"
	"github.com/nexus-run/nexus/internal/testkit"
)

// unprivEnv makes the test binary (run again as nobody) join the destroy groups, end one
// connection of its own and print what it was told of it: TestDestroyedUnprivileged's child.
const unprivEnv = "NEXUS_SOCKDIAG_TEST_UNPRIVILEGED"

func TestMain(m *testing.M) {
	if os.Getenv(unprivEnv) != "" {
		status, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(l, "CapEff:") || strings.HasPrefix(l, "Uid:") {
				fmt.Println(strings.Join(strings.Fields(l), " "))
			}
		}
		d, err := sockdiag.SubscribeDestroyed()
		if err != nil {
			fmt.Println("join:", err)
			os.Exit(0)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		srv, cli, err := exchange(5, 7)
		if err != nil {
			fmt.Println("exchange:", err)
			os.Exit(1)
		}
		want := srv.RemoteAddr().String()
		if err := closeInTurn(srv, cli); err != nil {
			fmt.Println("close:", err)
			os.Exit(1)
		}
		s, err := readUntil(ctx, d, func(s sockdiag.Socket) bool { return s.Remote.String() == want })
		if err != nil {
			fmt.Println("read:", err)
			os.Exit(1)
		}
		fmt.Printf("ended received=%d sent=%d\n", s.BytesReceived, s.DataAcked) // the client's FIN counts one received
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// exchange makes a loopback connection on which the client sends up bytes and the server
// answers down bytes, each read by the other side; it returns the server's and the client's
// ends.
func exchange(up, down int) (srv, cli net.Conn, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = l.Close() }()
	cli, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	srv, err = l.Accept()
	if err == nil {
		_, err = cli.Write(make([]byte, up))
	}
	if err == nil {
		_, err = io.ReadFull(srv, make([]byte, up))
	}
	if err == nil {
		_, err = srv.Write(make([]byte, down))
	}
	if err == nil {
		_, err = io.ReadFull(cli, make([]byte, down))
	}
	if err != nil {
		_ = cli.Close()
		if srv != nil {
			_ = srv.Close()
		}
		return nil, nil, err
	}
	return srv, cli, nil
}

// closeInTurn closes the client's end, waits until the server has read its FIN, then closes
// the server's: the server's end ends with the FIN received (counted as one byte) and all its
// data acknowledged, whatever the scheduling.
func closeInTurn(srv, cli net.Conn) error {
	_ = cli.Close()
	if n, err := srv.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("the server read %d bytes, not the client's FIN: %w", n, err)
	}
	return srv.Close()
}

// readUntil reads ended sockets until one matches (the namespace's other sockets end too).
func readUntil(ctx context.Context, d *sockdiag.Destroyed, match func(sockdiag.Socket) bool) (sockdiag.Socket, error) {
	for {
		got, err := d.Read(ctx, nil)
		for _, s := range got {
			if match(s) {
				return s, nil
			}
		}
		if err != nil && !errors.Is(err, sockdiag.ErrLost) {
			return sockdiag.Socket{}, err
		}
	}
}

// TestDestroyed: both ends of a loopback connection that a listing saw are reported when
// they end, by the cookie the listing gave them, with their last counters (the data
// acknowledged, without the SYN and FIN); a Read ends with its context, and after Close.
func TestDestroyed(t *testing.T) {
	d, err := sockdiag.SubscribeDestroyed()
	if err != nil {
		testkit.SkipUnlessCI(t, "the sock_diag destroy groups are not available here: "+err.Error())
	}
	defer func() { _ = d.Close() }()
	srv, cli, err := exchange(5, 7)
	if err != nil {
		t.Fatal(err)
	}
	all, err := sockdiag.List()
	if err != nil {
		t.Fatal(err)
	}
	cookies := map[string]uint64{} // "server", "client"
	for _, s := range all {
		switch {
		case s.Local.String() == srv.LocalAddr().String() && s.Remote.String() == srv.RemoteAddr().String():
			cookies["server"] = s.Cookie
		case s.Local.String() == cli.LocalAddr().String() && s.Remote.String() == cli.RemoteAddr().String():
			cookies["client"] = s.Cookie
		}
	}
	if len(cookies) != 2 {
		t.Fatalf("the listing's cookies %v", cookies)
	}
	if err := closeInTurn(srv, cli); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
	defer cancel()
	ended := map[uint64]sockdiag.Socket{}
	if _, err := readUntil(ctx, d, func(s sockdiag.Socket) bool {
		if s.Cookie == cookies["server"] || s.Cookie == cookies["client"] {
			ended[s.Cookie] = s
		}
		return len(ended) == 2
	}); err != nil {
		t.Fatalf("ended %v: %v", ended, err)
	}
	// The client closed first and the server read its FIN, which counts one received byte.
	// The client's end may have ended before or after the server's FIN came (the kernel
	// frees an orphaned end in FIN-WAIT-2 at once): 7 or 8.
	for _, tc := range []struct {
		end                 string
		local, remote       net.Addr
		received, dataAcked uint64
	}{
		{"server", srv.LocalAddr(), srv.RemoteAddr(), 5 + 1, 7},
		{"client", cli.LocalAddr(), cli.RemoteAddr(), 7, 5},
	} {
		s := ended[cookies[tc.end]]
		received := s.BytesReceived == tc.received || tc.end == "client" && s.BytesReceived == tc.received+1
		if s.Local.String() != tc.local.String() || s.Remote.String() != tc.remote.String() || !received || s.DataAcked != tc.dataAcked || s.Inode != 0 {
			t.Errorf("%s ended as %+v", tc.end, s)
		}
	}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := readUntil(cctx, d, func(sockdiag.Socket) bool { return false })
		done <- err
	}()
	ccancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
	_ = d.Close()
	if _, err := d.Read(context.Background(), nil); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

// TestDestroyedUnprivileged: a process without capabilities (this test binary run again as
// nobody) may join the destroy groups and is told of its connection's end, with its bytes:
// the kernel's sock_diag table allows unprivileged receivers (NL_CFG_F_NONROOT_RECV).
func TestDestroyedUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: TestDestroyed already runs unprivileged")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The build's directory is private to root: nobody runs a copy in a directory it may enter.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil { //nolint:gosec // G302: nobody must enter it
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile(self) //nolint:gosec // G304: this test binary
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "sockdiag.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil { //nolint:gosec // G306: nobody must run it
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$") //nolint:gosec // G204: the copy made above
	cmd.Env = append(os.Environ(), unprivEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "CapEff: 0000000000000000") || !strings.Contains(string(out), "Uid: 65534") {
		t.Fatalf("the child was not unprivileged: %s", out)
	}
	if !strings.Contains(string(out), "ended received=6 sent=7") {
		t.Fatalf("the unprivileged child: %s", out)
	}
}
