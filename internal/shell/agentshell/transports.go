package agentshell

import (
	"fmt"

	"github.com/nexus-run/nexus/internal/shell"
)

// newSSH combines the agent's choices (host, user, port, key name, password) with the
// operator's settings (key directory, known_hosts, ssh config, timeout).
func newSSH(c Config, o CreateOptions) (shell.Transport, error) {
	if o.Host == "" {
		return nil, fmt.Errorf("%w: ssh sessions need host", ErrInvalid)
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("%w: port %d out of range", ErrInvalid, o.Port)
	}
	return &shell.SSH{
		Host:               o.Host,
		Port:               o.Port,
		User:               o.User,
		Key:                o.Key,
		Password:           o.Password,
		KeyDir:             c.SSH.KeyDir,
		KnownHostsFile:     c.SSH.KnownHosts,
		HostKeyFingerprint: c.SSH.HostKeyFingerprint,
		ConnectTimeout:     c.SSH.ConnectTimeout,
		StartTimeout:       c.SSH.StartTimeout,
		SSHConfigFile:      c.SSH.ConfigFile,
	}, nil
}

func newDocker(c Config, o CreateOptions) (shell.Transport, error) {
	return &shell.Docker{Container: o.Container, Binary: c.DockerBinary, StartTimeout: c.SSH.StartTimeout}, nil
}
