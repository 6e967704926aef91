package netstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/netstream"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/process"
	"github.com/nexus-run/nexus/internal/reaper"
	"github.com/nexus-run/nexus/internal/sockdiag"
	"github.com/nexus-run/nexus/internal/testkit"
)

// serverEnv makes the test binary a small TCP server (TestServerOfAProcess's process): it
// prints its port, then accepts connections and reads and closes them.
const serverEnv = "NEXUS_NETSTREAM_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(0)
			}
			_, _ = c.Read(make([]byte, 100))
			_ = c.Close()
		}
	}
	os.Exit(m.Run())
}

func newRegistry(t *testing.T, k *netstream.Kind) *live.Registry {
	t.Helper()
	reg, err := live.New(context.Background(), live.Config{IdleTimeout: -1}, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Patience())
		defer cancel()
		_ = reg.Shutdown(ctx)
	})
	return reg
}

func requireSockDiag(t *testing.T) {
	t.Helper()
	if _, err := sockdiag.List(); err != nil {
		testkit.SkipUnlessCI(t, "netlink sock_diag is not available here: "+err.Error())
	}
}

// reader reads a session's events in order.
type reader struct {
	reg   *live.Registry
	id    string
	after uint64
	seen  []*live.Event
}

func (r *reader) until(t *testing.T, what string, pred func(*live.Event) bool) *live.Event {
	t.Helper()
	deadline := time.Now().Add(testkit.Patience())
	for {
		b, err := r.reg.Read(context.Background(), r.id, r.after, 0, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range b.Events {
			r.seen = append(r.seen, e)
			r.after = e.Seq
			if pred(e) {
				return e
			}
		}
		if b.Done || time.Now().After(deadline) {
			t.Fatalf("never saw %s", what)
		}
	}
}

func connEvent(action, remote string, pred func(abi.Connection) bool) func(*live.Event) bool {
	return func(e *live.Event) bool {
		c, ok := e.Payload.(abi.Connection)
		return ok && c.Action == action && (remote == "" || c.Remote == remote) && (pred == nil || pred(c))
	}
}

// TestConnectionsOfTheGateway: the built-in server "gateway" is this process: its listening
// socket, then each of N connections from loopback clients is reported as it opens, with the
// bytes it received once the server has read them, and as it closes, with its last counters;
// the metadata counts the established connections. An interrupt stops the reports; resume
// reports what changed meanwhile.
func TestConnectionsOfTheGateway(t *testing.T) {
	requireSockDiag(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	// The server reads what each client sends and answers with twice as many bytes.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					_, _ = c.Write(append(buf[:n:n], buf[:n]...))
				}
			}()
		}
	}()
	reg := newRegistry(t, &netstream.Kind{})
	raw, _ := json.Marshal(abi.NetworkStreamOptions{IntervalMs: 20})
	s, err := reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: "gateway"}, Options: raw})
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{reg: reg, id: s.SessionID}
	r.until(t, "the listening socket", connEvent("open", "", func(c abi.Connection) bool {
		return c.State == "listen" && c.Local == l.Addr().String()
	}))
	const n = 5
	var clients []net.Conn
	for i := range n {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		msg := strings.Repeat("x", 100*(i+1))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 2*len(msg))); err != nil {
			t.Fatal(err)
		}
		// The server's side of this connection: its remote is the client's local address.
		r.until(t, fmt.Sprintf("connection %d with its bytes", i), func(e *live.Event) bool {
			c, ok := e.Payload.(abi.Connection)
			return ok && c.Remote == clients[i].LocalAddr().String() && c.BytesReceived == uint64(len(msg)) && c.BytesSent == uint64(2*len(msg))
		})
	}
	r.until(t, "the count of established connections", func(e *live.Event) bool {
		p, ok := e.Payload.(abi.MetadataPayload)
		// This process holds both ends of each connection.
		return ok && p.Metadata["established"] == 2*n
	})
	res, err := reg.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt})
	if err != nil || res.Result.(map[string]any)["reporting"] != false {
		t.Fatalf("interrupt %+v %v", res, err)
	}
	gone := clients[0].LocalAddr().String()
	_ = clients[0].Close()
	if _, err := reg.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandResume}); err != nil {
		t.Fatal(err)
	}
	closed := r.until(t, "the close of the first connection", connEvent("close", gone, nil)).Payload.(abi.Connection)
	if closed.BytesReceived != 100 || closed.BytesSent != 200 {
		t.Fatalf("closed %+v", closed)
	}
	for _, c := range clients[1:] {
		_ = c.Close()
	}
	want := map[string]bool{}
	for _, c := range clients[1:] {
		want[c.LocalAddr().String()] = true
	}
	r.until(t, "the other closes", func(e *live.Event) bool {
		if c, ok := e.Payload.(abi.Connection); ok && c.Action == "close" {
			delete(want, c.Remote)
		}
		return len(want) == 0
	})
}

// TestServerOfAProcess: a server named by a managed process (this test binary as a small TCP
// server) is watched through that process's sockets; one named by an address alone, through
// its port.
func TestServerOfAProcess(t *testing.T) {
	requireSockDiag(t)
	owner, err := reaper.Open(t.Context(), reaper.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = owner.Close(context.Background()) })
	m, err := process.Open(t.TempDir(), process.Options{Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	// The server is this test binary, run again as a process the manager starts.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := m.Start(context.Background(), process.Spec{Name: "web", Dir: t.TempDir(), Command: []string{self, "-test.run", "^$"},
		Env: []string{serverEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	var port string
	testkit.Eventually(t, "the server's port", func() bool {
		ls, _ := m.Tail(in.ID, 5)
		for _, l := range ls {
			if l.Stream == process.StreamStdout {
				port = l.Text
			}
		}
		return port != ""
	})
	if _, err := m.AddServer(process.Server{Name: "web", ProcessID: in.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddServer(process.Server{Name: "byport", Addr: "127.0.0.1:" + port}); err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, &netstream.Kind{Processes: m})
	raw, _ := json.Marshal(abi.NetworkStreamOptions{IntervalMs: 20})
	for _, name := range []string{"web", "byport"} {
		s, err := reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: name}, Options: raw})
		if err != nil {
			t.Fatal(err)
		}
		r := &reader{reg: reg, id: s.SessionID}
		r.until(t, name+": the listening socket", connEvent("open", "", func(c abi.Connection) bool {
			return c.State == "listen" && strings.HasSuffix(c.Local, ":"+port)
		}))
	}
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("hi"))
	_ = c.Close()
}

// TestBadInput: what a network-stream session refuses.
func TestBadInput(t *testing.T) {
	reg := newRegistry(t, &netstream.Kind{List: func() ([]sockdiag.Socket, error) { return nil, nil }})
	for name, tc := range map[string]struct {
		c    abi.Context
		opts string
		code abi.Code
	}{
		"no server":      {code: abi.CodeInvalidArgument},
		"no processes":   {c: abi.Context{ServerID: "web"}, code: abi.CodeCapabilityUnsupported},
		"short interval": {c: abi.Context{ServerID: "gateway"}, opts: `{"intervalMs":1}`, code: abi.CodeInvalidArgument},
		"unknown option": {c: abi.Context{ServerID: "gateway"}, opts: `{"follow":true}`, code: abi.CodeInvalidArgument},
	} {
		req := abi.CreateRequest{Type: abi.TypeNetworkStream, Context: tc.c}
		if tc.opts != "" {
			req.Options = json.RawMessage(tc.opts)
		}
		if _, err := reg.Create(context.Background(), req); abi.CodeOf(err) != tc.code {
			t.Errorf("%s: %v", name, err)
		}
	}
	s, err := reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: "gateway"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Send(context.Background(), s.SessionID, []byte("x")); abi.CodeOf(err) != abi.CodeCapabilityUnsupported {
		t.Errorf("send: %v", err)
	}
	if _, err := reg.Control(context.Background(), s.SessionID, abi.ControlRequest{Command: abi.CommandRestart}); abi.CodeOf(err) != abi.CodeCapabilityUnsupported {
		t.Errorf("restart: %v", err)
	}
}

// TestSessionsShareAPoller: a second session on the same server at the same interval gets its
// first report from the poller's latest listing, without a listing of its own; another
// interval is another poller.
func TestSessionsShareAPoller(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	listen := sockdiag.Socket{Inode: 7, Cookie: 1, State: "listen", Local: netip.MustParseAddrPort("127.0.0.1:8080"), Remote: netip.MustParseAddrPort("0.0.0.0:0")}
	k := &netstream.Kind{
		List: func() ([]sockdiag.Socket, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			return []sockdiag.Socket{listen}, nil
		},
		Inodes: func([]int) map[uint32]bool { return map[uint32]bool{7: true} },
	}
	reg := newRegistry(t, k)
	open := func(interval int) {
		t.Helper()
		raw, _ := json.Marshal(abi.NetworkStreamOptions{IntervalMs: interval})
		s, err := reg.Create(context.Background(), abi.CreateRequest{Type: abi.TypeNetworkStream, Context: abi.Context{ServerID: "gateway"}, Options: raw})
		if err != nil {
			t.Fatal(err)
		}
		r := &reader{reg: reg, id: s.SessionID}
		r.until(t, "the listening socket", connEvent("open", "", func(c abi.Connection) bool { return c.State == "listen" }))
	}
	hour := 3_600_000
	open(hour)
	open(hour)
	mu.Lock()
	shared := calls
	mu.Unlock()
	if shared != 1 {
		t.Fatalf("%d listings for two sessions on one poller", shared)
	}
	open(hour - 1)
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("%d listings for two pollers", calls)
	}
}
