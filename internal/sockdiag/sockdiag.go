// Package sockdiag lists TCP sockets from the kernel's socket diagnostics (netlink
// sock_diag) with their byte counters, round-trip time and queues, follows the ones the
// kernel destroys (sock_diag's destroy multicast groups), and finds which of them a set of
// processes holds (their socket inodes in /proc/<pid>/fd): what a network-stream session
// reports about a server.
package sockdiag

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Socket is one TCP socket.
type Socket struct {
	Inode  uint32
	Cookie uint64
	Local  netip.AddrPort
	Remote netip.AddrPort
	State  string
	// BytesAcked are the bytes sent and acknowledged by the peer (for an actively opened
	// socket, its SYN counts one); BytesReceived the bytes received.
	BytesAcked, BytesReceived uint64
	// DataAcked are the data bytes the peer acknowledged: BytesAcked without the SYN or FIN
	// it counts, once all that was sent is acknowledged (the kernel reports the bytes sent
	// from Linux 4.19 on; before, DataAcked is BytesAcked).
	DataAcked uint64
	// MinAge is how old the socket is at least, by the kernel's clocks: the time since the
	// earliest of its last data sent, last data received and last acknowledgment received,
	// each of which starts when an established socket is made and moves with its traffic. For
	// a socket that never connected these clocks never started, and it means nothing.
	MinAge  time.Duration
	RTT     time.Duration
	Retrans uint32
	// RQueue is, for a listening socket, its accept queue (connections not yet accepted);
	// for another, the bytes received and not yet read. WQueue the bytes not yet acknowledged.
	RQueue, WQueue uint32
}

// States, as ss names them.
var states = map[uint8]string{
	1: "established", 2: "syn-sent", 3: "syn-recv", 4: "fin-wait-1", 5: "fin-wait-2", 6: "time-wait",
	7: "close", 8: "close-wait", 9: "last-ack", 10: "listen", 11: "closing",
}

// recvBuf is the receive buffer of a listing: a netlink read fills it with as many messages
// as fit, and a larger one saves no measurable time (64 KiB and 1 MiB both list 20,000
// sockets in about 50 ms), while many sessions polling every second would each allocate it.
const recvBuf = 64 << 10

// List returns every TCP socket of the network namespace, IPv4 and IPv6.
func List() ([]Socket, error) {
	buf := make([]byte, recvBuf)
	out, err := dump(unix.AF_INET, buf, nil)
	if err != nil {
		return nil, err
	}
	return dump(unix.AF_INET6, buf, out)
}

// ListLibrary is List through vishvananda/netlink (the bench's reference).
func ListLibrary() ([]Socket, error) {
	var out []Socket
	for _, fam := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		res, err := netlink.SocketDiagTCPInfo(fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, r := range res {
			m := r.InetDiagMsg
			if m == nil {
				continue
			}
			s := Socket{
				Inode:  m.INode,
				Cookie: uint64(m.ID.Cookie[0]) | uint64(m.ID.Cookie[1])<<32,
				Local:  addrPort(m.ID.Source, m.ID.SourcePort),
				Remote: addrPort(m.ID.Destination, m.ID.DestinationPort),
				State:  states[m.State],
				RQueue: m.RQueue, WQueue: m.WQueue,
			}
			if ti := r.TCPInfo; ti != nil {
				s.BytesAcked, s.BytesReceived = ti.Bytes_acked, ti.Bytes_received
				s.DataAcked = min(ti.Bytes_acked, ti.Bytes_sent-ti.Bytes_retrans)
				s.MinAge = time.Duration(max(ti.Last_data_sent, ti.Last_data_recv, ti.Last_ack_recv)) * time.Millisecond
				s.RTT = time.Duration(ti.Rtt) * time.Microsecond
				s.Retrans = ti.Total_retrans
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// Inodes returns the socket inodes the processes hold open. A process that is gone, or whose
// descriptors may not be read, holds none.
func Inodes(pids []int) map[uint32]bool {
	out := map[uint32]bool{}
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			link, err := os.Readlink(dir + "/" + e.Name())
			if err != nil {
				continue
			}
			rest, ok := strings.CutPrefix(link, "socket:[")
			if !ok {
				continue
			}
			n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 32)
			if err == nil {
				out[uint32(n)] = true
			}
		}
	}
	return out
}

func addrPort(ip []byte, port uint16) netip.AddrPort {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), port)
	}
	return netip.AddrPortFrom(a.Unmap(), port)
}

// InodeCache finds the socket inodes processes hold, reading a descriptor's link only when it
// is new or its socket is gone from the last listing: a server with ten thousand connections
// costs one directory read per poll, not ten thousand readlinks. A descriptor closed and
// reused for another socket between two polls while its old socket lives on in another
// process is seen at the poll after that socket ends.
type InodeCache struct {
	fds map[int]map[string]uint32 // pid -> fd name -> inode (0: not a socket)
}

// Inodes returns the socket inodes pids hold; alive says whether a socket of the current
// listing has an inode.
func (c *InodeCache) Inodes(pids []int, alive func(uint32) bool) map[uint32]bool {
	if c.fds == nil {
		c.fds = map[int]map[string]uint32{}
	}
	out := map[uint32]bool{}
	seen := map[int]bool{}
	for _, pid := range pids {
		seen[pid] = true
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		f, err := os.Open(dir) //nolint:gosec // G304: /proc/<pid>/fd of a pid the caller owns
		if err != nil {
			delete(c.fds, pid)
			continue
		}
		names, err := f.Readdirnames(-1)
		_ = f.Close()
		if err != nil {
			continue
		}
		old := c.fds[pid]
		cur := make(map[string]uint32, len(names))
		for _, n := range names {
			if ino, ok := old[n]; ok && (ino == 0 || alive(ino)) {
				cur[n] = ino
				if ino != 0 {
					out[ino] = true
				}
				continue
			}
			link, err := os.Readlink(dir + "/" + n)
			if err != nil {
				continue
			}
			var ino uint32
			if rest, ok := strings.CutPrefix(link, "socket:["); ok {
				if v, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 32); err == nil {
					ino = uint32(v)
					out[ino] = true
				}
			}
			cur[n] = ino
		}
		c.fds[pid] = cur
	}
	for pid := range c.fds {
		if !seen[pid] {
			delete(c.fds, pid)
		}
	}
	return out
}
