package gateway

import "syscall"

// umask sets the process umask so the socket is born private, closing the window before chmod.
func umask(m int) int { return syscall.Umask(m) }
