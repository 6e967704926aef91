package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's sock_diag wire format (linux/inet_diag.h, linux/tcp.h).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	inetDiagInfo     = 2  // INET_DIAG_INFO: the tcp_info attribute
	diagMsgLen       = 72 // struct inet_diag_msg
	reqLen           = 56 // struct inet_diag_req_v2
	// Offsets in struct tcp_info.
	tiLastDataSent = 44
	tiLastDataRecv = 52
	tiLastAckRecv  = 56
	tiRTT          = 68
	tiTotalRetrans = 100
	tiBytesAcked   = 120
	tiBytesRecv    = 128
	tiBytesSent    = 200 // Linux 4.19 on, as tiBytesRetrans
	tiBytesRetrans = 208
)

var nativeEndian = binary.NativeEndian

// dump lists the TCP sockets of one family with one netlink request, decoding each message
// in place: a poll of ten thousand connections must not cost an allocation per attribute.
func dump(family uint8, buf []byte, out []Socket) ([]Socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return out, fmt.Errorf("sock_diag: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return out, fmt.Errorf("sock_diag: %w", err)
	}
	req := make([]byte, unix.NLMSG_HDRLEN+reqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], sockDiagByFamily)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	r[2] = 1 << (inetDiagInfo - 1)
	ne.PutUint32(r[4:], 0xfff) // every state
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return out, fmt.Errorf("sock_diag: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("sock_diag: %w", err)
		}
		b := buf[:n]
		for len(b) >= unix.NLMSG_HDRLEN {
			l := int(ne.Uint32(b[0:]))
			typ := ne.Uint16(b[4:])
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return out, errors.New("sock_diag: a torn message")
			}
			switch typ {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if l >= unix.NLMSG_HDRLEN+4 {
					if code := int32(ne.Uint32(b[unix.NLMSG_HDRLEN:])); code != 0 {
						return out, fmt.Errorf("sock_diag: %w", unix.Errno(-code))
					}
				}
				return out, nil
			case sockDiagByFamily:
				if s, ok := decode(b[unix.NLMSG_HDRLEN:l]); ok {
					out = append(out, s)
				}
			}
			b = b[align(l):]
		}
	}
}

func align(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// decode reads one inet_diag_msg and its tcp_info attribute.
func decode(m []byte) (Socket, bool) {
	if len(m) < diagMsgLen {
		return Socket{}, false
	}
	ne := binary.NativeEndian
	be := binary.BigEndian
	fam := m[0]
	id := m[4:52]
	sport, dport := be.Uint16(id[0:]), be.Uint16(id[2:])
	s := Socket{
		Local:  ipPort(fam, id[4:20], sport),
		Remote: ipPort(fam, id[20:36], dport),
		Cookie: uint64(ne.Uint32(id[40:])) | uint64(ne.Uint32(id[44:]))<<32,
		RQueue: ne.Uint32(m[56:]), WQueue: ne.Uint32(m[60:]),
		Inode: ne.Uint32(m[68:]),
	}
	if st, ok := states[m[1]]; ok {
		s.State = st
	} else {
		s.State = strconv.Itoa(int(m[1]))
	}
	for a := m[diagMsgLen:]; len(a) >= 4; {
		al := int(ne.Uint16(a[0:]))
		at := ne.Uint16(a[2:])
		if al < 4 || al > len(a) {
			break
		}
		if at == inetDiagInfo {
			ti := a[4:al]
			if len(ti) >= tiRTT+4 {
				s.RTT = time.Duration(ne.Uint32(ti[tiRTT:])) * time.Microsecond
			}
			if len(ti) >= tiTotalRetrans+4 {
				s.Retrans = ne.Uint32(ti[tiTotalRetrans:])
			}
			if len(ti) >= tiBytesRecv+8 {
				s.BytesAcked, s.BytesReceived = ne.Uint64(ti[tiBytesAcked:]), ne.Uint64(ti[tiBytesRecv:])
			}
			s.DataAcked = s.BytesAcked
			if len(ti) >= tiBytesRetrans+8 {
				// The data sent once is what was sent less what was sent again; the SYN and FIN
				// the peer acknowledged are beyond it.
				s.DataAcked = min(s.BytesAcked, ne.Uint64(ti[tiBytesSent:])-ne.Uint64(ti[tiBytesRetrans:]))
			}
			if len(ti) >= tiLastAckRecv+4 {
				ms := max(ne.Uint32(ti[tiLastDataSent:]), ne.Uint32(ti[tiLastDataRecv:]), ne.Uint32(ti[tiLastAckRecv:]))
				s.MinAge = time.Duration(ms) * time.Millisecond
			}
		}
		a = a[(al+3)&^3:]
	}
	return s, true
}

func ipPort(fam uint8, b []byte, port uint16) netip.AddrPort {
	if fam == unix.AF_INET {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])).Unmap(), port)
}
