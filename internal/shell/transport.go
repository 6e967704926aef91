package shell

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"
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

// DefaultStartTimeout bounds the wait for a new shell's handshake (its first answer) when the
// transport sets no other bound. What runs before the handshake is outside nexus's control: an
// SSH login shell reads the user's ~/.bashrc before it runs anything nexus sends.
const DefaultStartTimeout = 30 * time.Second

// ErrStartTimeout is returned (wrapped) by Start when the shell did not answer its handshake
// within the transport's start timeout.
var ErrStartTimeout = errors.New("did not finish starting")

// StartLimiter is implemented by transports that set their own bound on the handshake and know
// what usually keeps their shells from starting.
type StartLimiter interface {
	// StartLimit returns the bound (zero means DefaultStartTimeout), what the shell is called
	// in the error ("the remote shell") and the likely cause, which ends the error message.
	StartLimit() (limit time.Duration, what, cause string)
}

// startLimit is the handshake bound and the words of its error for tr.
func startLimit(tr Transport) (limit time.Duration, what, cause string) {
	what, cause = "the shell", "the machine may be overloaded"
	if l, ok := tr.(StartLimiter); ok {
		limit, what, cause = l.StartLimit()
	}
	if limit <= 0 {
		limit = DefaultStartTimeout
	}
	return limit, what, cause
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
