package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/policy"
)

// shellFlags are the operator's settings of agent shells: `nexus mcp` takes them as they are
// named here, `nexus serve` with the prefix "mcp-" for the shells of its /v1/mcp (its own
// --max-sessions and --idle-timeout are the live sessions'). Each also reads its NEXUS_MCP_*
// variable (mcpEnv) when not given, under either command.
type shellFlags struct {
	prefix         string
	auditDir       string
	keyDir         string
	knownHosts     string
	fingerprint    string
	sshConfig      string
	connectTimeout time.Duration
	startTimeout   time.Duration
	maxSessions    int
	idle           time.Duration
	policyFile     string
	shadowDir      string
}

// bind registers the flags on f, and --audit-dir on audit (`nexus mcp watch` reads it too,
// so `nexus mcp` makes it persistent).
func (sf *shellFlags) bind(f, audit *pflag.FlagSet) {
	n := func(name string) string { return sf.prefix + name }
	audit.StringVar(&sf.auditDir, n("audit-dir"), "", "directory of the agent shells' audit log, one <session_id>.jsonl per shell (default <state>/audit)")
	f.StringVar(&sf.keyDir, n("key-dir"), "", "directory of the SSH private keys session_create's key may name (unset: no keys)")
	f.StringVar(&sf.knownHosts, n("known-hosts"), "", `known_hosts file SSH host keys are checked against; unknown hosts are refused (default ~/.ssh/known_hosts when it exists; "none" for none)`)
	f.StringVar(&sf.fingerprint, n("host-key-fingerprint"), "", `pin the host key of every SSH session: "SHA256:..." as ssh-keygen -lf prints it`)
	f.StringVar(&sf.sshConfig, n("ssh-config"), "", `ssh_config file for host aliases (default ~/.ssh/config when it exists; "none" for none)`)
	f.DurationVar(&sf.connectTimeout, n("connect-timeout"), 0, "SSH connect timeout (0: the transport's default)")
	f.DurationVar(&sf.startTimeout, n("start-timeout"), 0, "how long a new SSH or Docker shell may take to answer its handshake, the remote user's startup files included (0: 30s)")
	f.IntVar(&sf.maxSessions, n("max-sessions"), agentshell.DefaultMaxSessions, "most agent shells open at once")
	f.DurationVar(&sf.idle, n("idle-timeout"), agentshell.DefaultIdleTimeout, "close agent shells idle this long (0 disables)")
	f.StringVar(&sf.policyFile, n("policy"), "", `operator policy JSON file: {"allow": [...], "deny": [...], "deny_patterns": [...]}`)
	f.StringVar(&sf.shadowDir, n("shadow-dir"), "", "directory of the shadow git repositories of local checkpoints (default <state>/checkpoints)")
}

// config checks the flags and builds the session manager's configuration (without its
// owner, which the caller opens once the flags are known to be good).
func (a *app) shellConfig(sf *shellFlags) (agentshell.Config, error) {
	if sf.maxSessions < 1 {
		return agentshell.Config{}, fmt.Errorf("--%smax-sessions is %d; it must be at least 1", sf.prefix, sf.maxSessions)
	}
	if sf.idle < 0 {
		return agentshell.Config{}, fmt.Errorf("--%sidle-timeout is %s; use 0 to disable idle reaping", sf.prefix, sf.idle)
	}
	if sf.connectTimeout < 0 || sf.startTimeout < 0 {
		return agentshell.Config{}, fmt.Errorf("--%sconnect-timeout and --%sstart-timeout must not be negative (0: the default)", sf.prefix, sf.prefix)
	}
	idle := sf.idle
	if idle == 0 {
		idle = -1 // agentshell.Config: negative disables
	}
	var op policy.Operator
	if sf.policyFile != "" {
		var err error
		if op, err = policy.LoadOperatorFile(sf.policyFile); err != nil {
			return agentshell.Config{}, err //nolint:wrapcheck // it names the file and the problem
		}
	}
	return agentshell.Config{
		MaxSessions: sf.maxSessions,
		IdleTimeout: idle,
		AuditDir:    a.orState(sf.auditDir, "audit"),
		ShadowDir:   a.orState(sf.shadowDir, "checkpoints"),
		Operator:    op,
		SSH: agentshell.SSHConfig{
			KeyDir:             absPath(sf.keyDir),
			KnownHosts:         knownHostsFile(sf.knownHosts),
			HostKeyFingerprint: sf.fingerprint,
			ConfigFile:         absPath(sf.sshConfig),
			ConnectTimeout:     sf.connectTimeout,
			StartTimeout:       sf.startTimeout,
		},
		Now: a.env.Now,
	}, nil
}

// runPrefixes returns n different id prefixes for the session managers of one process, whose
// shells share an audit directory: two managers drawing the same random prefix would give two
// shells one id, and one audit log.
func runPrefixes(n int) []string {
	seen := map[string]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		if p := hex.EncodeToString(b); !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
