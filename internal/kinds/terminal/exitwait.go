package terminal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once the process pid (a child not yet reaped) has exited, having waited
// in the netpoller on a pidfd: a goroutine parked there holds no OS thread, where
// (*exec.Cmd).Wait blocks one in waitid(2) for the whole life of the shell — a thread, and
// its stack, per idle terminal. cmd.Wait then reaps at once. Where pidfds cannot be polled
// (a kernel before 5.3) it returns at once, and cmd.Wait waits as it always did.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: it joins the netpoller
	defer func() { _ = f.Close() }()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		// WNOWAIT leaves the child to cmd.Wait; an exited child fills in the signal number
		// (SIGCHLD), a running one leaves the zeroed info as it was.
		for {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return true // cmd.Wait will say what is wrong
			}
			return info.Signo != 0
		}
	})
}
