package shell

import (
	"context"
	"io"
	"syscall"
)

// Transport starts shells somewhere: this machine, an SSH host, a Docker container.
type Transport interface {
	// Kind is "local", "ssh" or "docker".
	Kind() string
	// IDPart is what the session id says after "<n>_": "local", "ssh_user@host:port",
	// "docker_name". Agent-supplied parts are sanitized.
	IDPart() string
	// Start launches a non-interactive shell (bash, else sh) with separate stdin, stdout and
	// stderr streams and no terminal. env holds extra NAME=value variables.
	Start(ctx context.Context, env []string) (Proc, error)
}

// Proc is one running shell.
type Proc interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	Stderr() io.Reader
	// SignalChildren sends sig to every descendant of the shell whose pid (as the shell itself
	// reported it) is shellPID, but not to the shell.
	SignalChildren(ctx context.Context, shellPID int, sig syscall.Signal) error
	// Run runs a one-off script with sh beside the shell (for checkpoints and cleanup), in the
	// same place and as the same user, and returns its stdout.
	Run(ctx context.Context, script string, stdin []byte) ([]byte, error)
	// Done is closed once the shell has ended.
	Done() <-chan struct{}
	// ExitCode is the shell's exit status once Done is closed (-1 if unknown).
	ExitCode() int
	// Close ends the shell and everything it started and releases the transport. Idempotent.
	Close() error
}
