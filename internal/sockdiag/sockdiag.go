// Package sockdiag lists TCP sockets from the kernel's socket diagnostics (netlink
// sock_diag, through vishvananda/netlink) with their byte counters, round-trip time and
// queues, and finds which of them a set of processes holds (their socket inodes in
// /proc/<pid>/fd): what a network-stream session reports about a server.
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
	RTT                       time.Duration
	Retrans                   uint32
	// RQueue is, for a listening socket, its accept queue (connections not yet accepted);
	// for another, the bytes received and not yet read. WQueue the bytes not yet acknowledged.
	RQueue, WQueue uint32
}

// States, as ss names them.
var states = map[uint8]string{
	1: "established", 2: "syn-sent", 3: "syn-recv", 4: "fin-wait-1", 5: "fin-wait-2", 6: "time-wait",
	7: "close", 8: "close-wait", 9: "last-ack", 10: "listen", 11: "closing",
}

// List returns every TCP socket of the network namespace, IPv4 and IPv6.
func List() ([]Socket, error) {
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
			if s.State == "" {
				s.State = strconv.Itoa(int(m.State))
			}
			if ti := r.TCPInfo; ti != nil {
				s.BytesAcked, s.BytesReceived = ti.Bytes_acked, ti.Bytes_received
				s.RTT = time.Duration(ti.Rtt) * time.Microsecond
				s.Retrans = ti.Total_retrans
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func addrPort(ip []byte, port uint16) netip.AddrPort {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), port)
	}
	return netip.AddrPortFrom(a.Unmap(), port)
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
