package sockdiag

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The sock_diag multicast groups of destroyed TCP sockets (linux/sock_diag.h), as bits of a
// netlink address's group mask.
const (
	sknlgrpInetTCPDestroy  = 1
	sknlgrpInet6TCPDestroy = 3
	destroyGroups          = 1<<(sknlgrpInetTCPDestroy-1) | 1<<(sknlgrpInet6TCPDestroy-1)
)

// ErrLost is what Destroyed.Read returns when the kernel dropped notifications because the
// subscription's receive buffer was full (ENOBUFS): some sockets ended unreported.
var ErrLost = errors.New("sock_diag: destroy notifications lost (receive buffer full)")

// Destroyed is a subscription to the kernel's notifications of ended TCP sockets, IPv4 and
// IPv6 (the sock_diag multicast groups SKNLGRP_INET_TCP_DESTROY and SKNLGRP_INET6_TCP_DESTROY):
// each socket of the network namespace, when the kernel frees it, with its last tcp_info. A
// connection that opens and ends between two listings is seen here. The kernel lets any
// process join these groups (sock_diag's netlink table has NL_CFG_F_NONROOT_RECV), so no
// capability is needed. A notification has no inode (the socket has left its file by then)
// and its state is usually close.
type Destroyed struct {
	f  *os.File
	rc syscall.RawConn
	// buf is read into by Read; one notification is under 400 bytes.
	buf    []byte
	closed atomic.Bool
}

// destroyRecvBuf is the subscription's receive buffer: the kernel drops notifications that
// do not fit (ENOBUFS), so it is larger than a listing's. Each notification costs about 1 KiB
// of it; where SO_RCVBUFFORCE is refused (no CAP_NET_ADMIN) the kernel caps it at
// net.core.rmem_max.
const destroyRecvBuf = 4 << 20

// SubscribeDestroyed joins the destroy groups. Close ends the subscription.
func SubscribeDestroyed() (*Destroyed, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag destroy groups: %w", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, destroyRecvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, destroyRecvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: destroyGroups}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("sock_diag destroy groups: join: %w", err)
	}
	// A non-blocking descriptor in an os.File is read through the runtime's poller, so Read
	// blocks no thread and a deadline or Close ends it.
	f := os.NewFile(uintptr(fd), "sock_diag")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("sock_diag destroy groups: %w", err)
	}
	return &Destroyed{f: f, rc: rc, buf: make([]byte, 8<<10)}, nil
}

// Read waits for ended sockets and appends them to out: at least one, and as many as are
// there at once (up to 256). It returns ErrLost when the kernel dropped notifications (what
// was read before comes with it; the subscription goes on), ctx's error when ctx ends, and
// os.ErrClosed after Close. A Destroyed is read by one goroutine.
func (d *Destroyed) Read(ctx context.Context, out []Socket) ([]Socket, error) {
	if err := ctx.Err(); err != nil {
		return out, err
	}
	stop := context.AfterFunc(ctx, func() { _ = d.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	start := len(out)
	var rerr error
	err := d.rc.Read(func(fd uintptr) bool {
		for len(out)-start < 256 {
			n, _, err := unix.Recvfrom(int(fd), d.buf, unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.EAGAIN):
				return len(out) > start // nothing yet: wait for the descriptor
			case errors.Is(err, unix.ENOBUFS):
				rerr = ErrLost
				return true
			case err != nil:
				rerr = fmt.Errorf("sock_diag destroy groups: %w", err)
				return true
			}
			out = decodeAll(d.buf[:n], out)
		}
		return true
	})
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if d.closed.Load() {
			return out, os.ErrClosed
		}
		return out, fmt.Errorf("sock_diag destroy groups: %w", err)
	}
	return out, rerr
}

// decodeAll appends the sockets of the SOCK_DIAG_BY_FAMILY messages in b.
func decodeAll(b []byte, out []Socket) []Socket {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(nativeEndian.Uint32(b[0:]))
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			break
		}
		if nativeEndian.Uint16(b[4:]) == sockDiagByFamily {
			if s, ok := decode(b[unix.NLMSG_HDRLEN:l]); ok {
				out = append(out, s)
			}
		}
		b = b[min(align(l), len(b)):]
	}
	return out
}

// Close ends the subscription; a Read under way returns os.ErrClosed.
func (d *Destroyed) Close() error {
	d.closed.Store(true)
	return d.f.Close()
}
