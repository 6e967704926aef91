package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Docker runs shells inside a running container with `docker exec -i` (no -t, so stdout and
// stderr stay separate streams): bash, or sh where the image has no bash. Every process of a
// session carries a random NEXUS_SHELL_TAG in its environment, so Close can find and kill
// them inside the container (killing the local `docker exec` client alone would leave them
// running there).
//
// The docker client runs twice to open a session (inspect, then the one long-lived `docker exec
// -i` the whole session talks to), never per command, and once more for each side command:
// a checkpoint's git script, a timeout's signal (one per step of the escalation), the cleanup
// at Close. Tested against a real Docker engine (docs/agent-shells.md).
type Docker struct {
	// Container is the container's name or id (agent); validated, never an option.
	Container string
	// Binary is the docker client to run; empty means "docker" on PATH (operator).
	Binary string
	// StartTimeout bounds the wait for the shell in the container to answer its handshake;
	// zero means DefaultStartTimeout (operator).
	StartTimeout time.Duration
}

// ErrDockerUnreachable is returned (wrapped) when the docker client cannot reach its daemon.
var ErrDockerUnreachable = errors.New("Docker daemon unreachable") //nolint:staticcheck,revive // the product's name

// containerRE is Docker's own rule for container names (ids match it too).
var containerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// maxContainerName bounds a container name or id.
const maxContainerName = 128

// Kind implements Transport.
func (d *Docker) Kind() string { return "docker" }

// StartLimit implements StartLimiter.
func (d *Docker) StartLimit() (time.Duration, string, string) {
	return d.StartTimeout, "the shell in container " + d.Container, "is the container or the Docker daemon overloaded or stuck?"
}

// IDPart implements Transport: docker_<container>, sanitized.
func (d *Docker) IDPart() string { return "docker_" + sanitizeIDPart(d.Container) }

// Validate checks the container name without running docker.
func (d *Docker) Validate() error {
	if d.Container == "" {
		return errors.New("docker: container is required")
	}
	if len(d.Container) > maxContainerName || !containerRE.MatchString(d.Container) {
		return fmt.Errorf("docker: invalid container name %q (want [A-Za-z0-9][A-Za-z0-9_.-]*)", d.Container)
	}
	return nil
}

func (d *Docker) binary() string {
	if d.Binary == "" {
		return "docker"
	}
	return d.Binary
}

// inspectTimeout bounds the running check.
const inspectTimeout = 30 * time.Second

// running checks that the daemon answers and the container exists, runs and is not paused (a
// `docker exec` into a paused container waits until it is unpaused).
func (d *Docker) running(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	out, err := d.client(ctx, "inspect", "--type", "container", "-f", "{{.State.Running}} {{.State.Paused}}", d.Container)
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return err
		}
		// The client says "No such container" or why it could not ask, in words that change
		// between versions: whether the daemon answers is asked of the daemon.
		if _, verr := d.client(ctx, "version", "--format", "{{.Server.Version}}"); verr != nil {
			return fmt.Errorf("docker: %w: %w", ErrDockerUnreachable, verr)
		}
		return fmt.Errorf("docker: no container %q: %w", d.Container, err)
	}
	switch strings.TrimSpace(string(out)) {
	case "true false":
		return nil
	case "true true":
		return fmt.Errorf("docker: container %q is paused (docker unpause it first)", d.Container)
	}
	return fmt.Errorf("docker: container %q is not running (start it first)", d.Container)
}

// client runs the docker client with args and returns its stdout; an error carries what it
// printed on stderr.
func (d *Docker) client(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, d.binary(), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, fmt.Errorf("docker: cannot run %s: %w", d.binary(), err)
		}
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, &clientError{ExitError: ee, msg: msg}
	}
	return out.Bytes(), nil
}

// clientError is a failed docker client run, said with what the client printed.
type clientError struct {
	*exec.ExitError
	msg string
}

func (e *clientError) Error() string { return e.msg }
func (e *clientError) Unwrap() error { return e.ExitError }

// execArgs is the argv of `docker exec` running sh -c script in the container.
func (d *Docker) execArgs(stdin bool, env []string, script string) []string {
	argv := []string{"exec"}
	if stdin {
		argv = append(argv, "-i")
	}
	for _, kv := range env {
		argv = append(argv, "-e", kv)
	}
	return append(argv, d.Container, "sh", "-c", script)
}

// Start implements Transport.
func (d *Docker) Start(ctx context.Context, env []string) (Proc, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if err := checkEnv(env); err != nil {
		return nil, err
	}
	if err := d.running(ctx); err != nil {
		return nil, err
	}
	tag := newToken()
	cmd := exec.Command(d.binary(), d.execArgs(true, append([]string{TagVar + "=" + tag}, env...), startShellScript)...) //nolint:noctx // the shell outlives the request; Close ends it
	// Its own process group, so a signal meant for nexus's group does not reach the client.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, stdout, stderr, err := startPiped(cmd)
	if err != nil {
		return nil, fmt.Errorf("docker: start %s exec: %w", d.binary(), err)
	}
	p := &dockerProc{d: d, cmd: cmd, tag: tag, env: env, stdin: stdin, stdout: stdout, stderr: stderr, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.code = exitStatus(cmd.ProcessState, err)
		close(p.done)
	}()
	return p, nil
}

type dockerProc struct {
	d      *Docker
	cmd    *exec.Cmd
	tag    string
	env    []string
	stdin  io.WriteCloser
	stdout io.Reader
	stderr io.Reader
	done   chan struct{}
	code   int
	once   sync.Once
}

func (p *dockerProc) Stdin() io.WriteCloser { return p.stdin }
func (p *dockerProc) Stdout() io.Reader     { return p.stdout }
func (p *dockerProc) Stderr() io.Reader     { return p.stderr }
func (p *dockerProc) Done() <-chan struct{} { return p.done }

func (p *dockerProc) ExitCode() int {
	<-p.done
	return p.code
}

// side runs sh -c script in the container (beside the shell, not tagged).
func (p *dockerProc) side(ctx context.Context, env []string, script string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, p.d.binary(), p.d.execArgs(stdin != nil, env, script)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%w: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}

func (p *dockerProc) SignalChildren(ctx context.Context, shellPID int, sig syscall.Signal) error {
	script, err := signalChildrenScript(shellPID, sig)
	if err != nil {
		return err
	}
	if _, err := p.side(ctx, nil, script, nil); err != nil {
		return fmt.Errorf("signal children: %w", err)
	}
	return nil
}

func (p *dockerProc) Run(ctx context.Context, script string, stdin []byte) ([]byte, error) {
	if stdin == nil {
		stdin = []byte{}
	}
	return p.side(ctx, p.env, script, stdin)
}

// Close kills every tagged process inside the container (the shell, its jobs, whatever
// double-forked away from it), then the local docker client.
func (p *dockerProc) Close() error {
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_, _ = p.side(ctx, nil, killSessionScript(p.tag), nil)
		cancel()
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(500 * time.Millisecond):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		closeReaders(p.stdout, p.stderr)
	})
	return nil
}
