package terminal

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// pollable returns f's descriptor as a non-blocking file served by the Go netpoller, and closes
// f. creack/pty's Open calls (*os.File).Fd on the master, which switches it to blocking mode for
// good: every pending Read then holds an OS thread, Close cannot interrupt it (so closing a
// session whose terminal a setsid'd process keeps open waits for that process), and read and
// write deadlines do nothing.
func pollable(f *os.File) (*os.File, error) {
	defer func() { _ = f.Close() }()
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("pty: %w", err)
	}
	nfd := -1
	var dupErr error
	if err := rc.Control(func(fd uintptr) { nfd, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("pty: %w", err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("pty: dup master: %w", dupErr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		_ = unix.Close(nfd)
		return nil, fmt.Errorf("pty: set non-blocking: %w", err)
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil // a non-blocking fd joins the netpoller
}
