package shell

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kevinburke/ssh_config"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sys/unix"
)

// SSH runs shells on another machine over SSH: one session without a terminal, so stdout and
// stderr arrive as separate streams, running bash (sh where bash is missing). Side commands
// (signals, checkpoints, cleanup) run in further sessions on the same connection.
//
// The agent is the adversary: it may choose Host, Port, User, Key (by name) and Password; the
// other fields are the operator's and must never come from a tool argument. The host key is
// always verified, against KnownHostsFile, HostKeyFingerprint, or both (both must then
// agree); with neither, Start refuses to connect.
type SSH struct {
	// Host is a host name, an address, or a Host alias of the ssh config file (agent).
	Host string
	// Port is the TCP port; 0 means the ssh config's, else 22 (agent).
	Port int
	// User is the remote user; empty means the ssh config's, else the local user (agent).
	User string
	// Key names a private key file inside KeyDir: a base name, nothing else (agent). Empty
	// means the ssh config's IdentityFile when it lies inside KeyDir, else every key in KeyDir.
	Key string
	// Password is tried after the keys, for password and keyboard-interactive login (agent).
	Password string

	// KeyDir is the directory of private keys the agent may use (operator).
	KeyDir string
	// KnownHostsFile is an OpenSSH known_hosts file the host key must be in (operator).
	KnownHostsFile string
	// HostKeyFingerprint pins the host key: "SHA256:..." as `ssh-keygen -lf` prints it
	// (operator). It is compared with the key the server presents for the negotiated
	// algorithm (ed25519 when the server has one).
	HostKeyFingerprint string
	// ConnectTimeout bounds dialing, the handshake and authentication; default 10 s (operator).
	ConnectTimeout time.Duration
	// StartTimeout bounds the wait, once logged in, for the remote shell to answer nexus's
	// handshake; default DefaultStartTimeout (operator). The user's login shell runs its startup
	// files (~/.bashrc and the like) first, and one that hangs would hang the session's creation.
	StartTimeout time.Duration
	// SSHConfigFile is read for Host aliases (HostName, User, Port, IdentityFile); empty means
	// ~/.ssh/config when it exists, "none" reads none (operator).
	SSHConfigFile string
}

// Errors of the SSH transport a caller can tell apart (with errors.Is).
var (
	// ErrNoHostKeyCheck: neither a known_hosts file nor a fingerprint was configured.
	ErrNoHostKeyCheck = errors.New("no host key verification configured")
	// ErrHostKeyUnknown: the known_hosts file has no key for the host.
	ErrHostKeyUnknown = errors.New("host key unknown")
	// ErrHostKeyMismatch: the host presented a key other than the known or pinned one.
	ErrHostKeyMismatch = errors.New("host key mismatch")
	// ErrKeyName: the agent named a key that is not a plain file name inside the key directory.
	ErrKeyName = errors.New("invalid key name")
)

// DefaultConnectTimeout bounds an SSH connect when ConnectTimeout is zero.
const DefaultConnectTimeout = 10 * time.Second

// maxAutoKeys is how many keys of KeyDir are offered when the agent names none: OpenSSH's
// sshd closes the connection after MaxAuthTries (6) failed attempts.
const maxAutoKeys = 5

// keepaliveInterval is how often an idle connection is probed; a probe unanswered for as long
// closes the connection, so a dead link ends the session instead of hanging its next command.
const keepaliveInterval = 30 * time.Second

// Kind implements Transport.
func (s *SSH) Kind() string { return "ssh" }

// StartLimit implements StartLimiter.
func (s *SSH) StartLimit() (time.Duration, string, string) {
	return s.StartTimeout, "the remote shell", "a slow ~/.bashrc or login script? (the user's login shell on the host " +
		"runs its startup files before nexus's shell starts; the operator can raise the start timeout)"
}

// IDPart implements Transport: ssh_<user>@<host>[:port], the port only when it is not 22, the
// user and the port as the ssh config resolves them, the host as the agent named it.
func (s *SSH) IDPart() string {
	u, port := s.User, s.Port
	if t, err := s.resolve(); err == nil {
		u, port = t.user, t.port
	}
	id := "ssh_" + sanitizeIDPart(u) + "@" + sanitizeIDPart(strings.Trim(s.Host, "[]"))
	if port > 0 && port != 22 {
		id += ":" + strconv.Itoa(port)
	}
	return id
}

// Validate checks the settings without connecting: the host, user and port, the key name,
// the ssh config file and the host key settings.
func (s *SSH) Validate() error {
	t, err := s.resolve()
	if err != nil {
		return err
	}
	if s.Key != "" {
		if _, err := s.openKey(s.Key); err != nil {
			return err
		}
	}
	_, _, err = s.hostKeyCheck(net.JoinHostPort(t.host, strconv.Itoa(t.port)))
	return err
}

// sshTarget is where a session goes once the ssh config has been applied.
type sshTarget struct {
	host       string
	port       int
	user       string
	identities []string // IdentityFile entries of the config, expanded
}

var (
	hostRE = regexp.MustCompile(`^[A-Za-z0-9_.:%-]+$`)
	// userRE is what OpenSSH accepts in a user name on the command line, roughly.
	userRE = regexp.MustCompile(`^[A-Za-z0-9_.@$+][A-Za-z0-9_.@$+\\ -]*$`)
)

func checkHost(h string) error {
	if h == "" {
		return errors.New("ssh: host is required")
	}
	if len(h) > 255 || !hostRE.MatchString(h) || strings.HasPrefix(h, "-") {
		return fmt.Errorf("ssh: invalid host %q", h)
	}
	return nil
}

func (s *SSH) resolve() (sshTarget, error) {
	alias := strings.TrimSuffix(strings.TrimPrefix(s.Host, "["), "]")
	if err := checkHost(alias); err != nil {
		return sshTarget{}, err
	}
	if s.Port < 0 || s.Port > 65535 {
		return sshTarget{}, fmt.Errorf("ssh: invalid port %d", s.Port)
	}
	if s.User != "" && (len(s.User) > 128 || !userRE.MatchString(s.User)) {
		return sshTarget{}, fmt.Errorf("ssh: invalid user %q", s.User)
	}
	t := sshTarget{host: alias, port: s.Port, user: s.User}
	cfg, err := s.loadConfig()
	if err != nil {
		return sshTarget{}, err
	}
	local := localUser()
	if cfg != nil {
		get := func(key string) string {
			v, _ := cfg.Get(alias, key)
			return strings.TrimSpace(v)
		}
		// A bastion the operator configured is not bypassed silently: nexus does not implement
		// proxies, so a host behind one is refused.
		for _, k := range []string{"ProxyJump", "ProxyCommand"} {
			if v := get(k); v != "" && !strings.EqualFold(v, "none") {
				return sshTarget{}, fmt.Errorf("ssh config: %s of %s is not supported: nexus connects directly", k, alias)
			}
		}
		if h := get("HostName"); h != "" {
			h = strings.ReplaceAll(strings.ReplaceAll(h, "%h", alias), "%%", "%")
			if err := checkHost(h); err != nil {
				return sshTarget{}, fmt.Errorf("ssh config: HostName of %s: %w", alias, err)
			}
			t.host = h
		}
		if t.user == "" {
			if u := get("User"); u != "" {
				if len(u) > 128 || !userRE.MatchString(u) {
					return sshTarget{}, fmt.Errorf("ssh config: invalid User %q for %s", u, alias)
				}
				t.user = u
			}
		}
		if t.port == 0 {
			if p := get("Port"); p != "" {
				n, err := strconv.Atoi(p)
				if err != nil || n < 1 || n > 65535 {
					return sshTarget{}, fmt.Errorf("ssh config: invalid Port %q for %s", p, alias)
				}
				t.port = n
			}
		}
		if t.user == "" {
			t.user = local
		}
		ids, _ := cfg.GetAll(alias, "IdentityFile")
		for _, id := range ids {
			t.identities = append(t.identities, expandPercent(strings.TrimSpace(id), alias, t.user, local))
		}
	}
	if t.user == "" {
		t.user = local
	}
	if t.user == "" {
		return sshTarget{}, errors.New("ssh: no user given and the local user is unknown")
	}
	if t.port == 0 {
		t.port = 22
	}
	return t, nil
}

func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// expandPercent expands ~ and the tokens of IdentityFile that depend on nothing but the host
// and the users; what is left unexpanded will not be found inside KeyDir.
func expandPercent(p, host, remoteUser, localUser string) string {
	home, _ := os.UserHomeDir()
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = home + p[1:]
	}
	r := strings.NewReplacer("%%", "%", "%d", home, "%h", host, "%r", remoteUser, "%u", localUser)
	return r.Replace(p)
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return home + p[1:]
		}
	}
	return p
}

// loadConfig reads the operator's ssh config (nil when there is none). The parser is
// github.com/kevinburke/ssh_config: it implements OpenSSH's Host pattern rules (wildcards,
// negation, first value wins), Include and Match host, and refuses Match exec rather than
// run commands. A file it cannot parse is an error, not silently ignored.
func (s *SSH) loadConfig() (*ssh_config.Config, error) {
	path := s.SSHConfigFile
	if strings.EqualFold(path, "none") {
		return nil, nil
	}
	explicit := path != ""
	if !explicit {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nil //nolint:nilerr // no home, no default config
		}
		path = filepath.Join(home, ".ssh", "config")
	}
	b, err := os.ReadFile(expandHome(path))
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("ssh config: %w", err)
	}
	cfg, err := ssh_config.DecodeBytes(b)
	if err != nil {
		return nil, fmt.Errorf("ssh config %s: %w (the operator can point SSHConfigFile elsewhere, or at \"none\")", path, err)
	}
	return cfg, nil
}

// checkKeyName accepts a plain file name: no directory part, no "..", nothing hidden in it.
func checkKeyName(name string) error {
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "/\\\x00") || strings.Contains(name, "..") ||
		name != filepath.Base(name) || strings.HasPrefix(name, "-") {
		return fmt.Errorf("%w %q: name a key file of the key directory by its base name", ErrKeyName, name)
	}
	for _, r := range name {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("%w %q: control character", ErrKeyName, name)
		}
	}
	return nil
}

// maxKeyFile bounds what is read of a key file.
const maxKeyFile = 64 << 10

// openKey reads a key of KeyDir by name. os.Root confines the lookup to the directory: a
// symlink that leads out of it fails like a missing file.
func (s *SSH) openKey(name string) ([]byte, error) {
	if err := checkKeyName(name); err != nil {
		return nil, err
	}
	if s.KeyDir == "" {
		return nil, fmt.Errorf("ssh: key %q: no key directory is configured (the operator sets it)", name)
	}
	root, err := os.OpenRoot(expandHome(s.KeyDir))
	if err != nil {
		// The path stays out of the message: it goes to the agent.
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("ssh: the operator's key directory cannot be opened: %w", err)
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q: no such key in the key directory%s", ErrKeyName, name, s.keyHint())
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w %q: not a regular file in the key directory", ErrKeyName, name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("ssh: read key %q: %w", name, err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("ssh: key %q is too large to be a private key", name)
	}
	return b, nil
}

// keyNames lists the candidate key files of KeyDir (sorted, no .pub, no known_hosts).
func (s *SSH) keyNames() []string {
	if s.KeyDir == "" {
		return nil
	}
	entries, err := os.ReadDir(expandHome(s.KeyDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasSuffix(n, ".pub") || strings.HasPrefix(n, "known_hosts") ||
			n == "authorized_keys" || n == "config" || checkKeyName(n) != nil {
			continue
		}
		out = append(out, n)
	}
	return out
}

func (s *SSH) keyHint() string {
	names := s.keyNames()
	if len(names) == 0 {
		return ""
	}
	if len(names) > 20 {
		names = names[:20]
	}
	return " (available: " + strings.Join(names, ", ") + ")"
}

func (s *SSH) signer(name string) (ssh.Signer, error) {
	b, err := s.openKey(name)
	if err != nil {
		return nil, err
	}
	sg, err := ssh.ParsePrivateKey(b)
	if err != nil {
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, fmt.Errorf("ssh: key %q is passphrase-protected; nexus cannot unlock it (the operator can store an unencrypted key for it)", name)
		}
		return nil, fmt.Errorf("ssh: key %q: %w", name, err)
	}
	return sg, nil
}

// insideKeyDir returns the base name of path when path is a file directly inside KeyDir
// (symlinks of the directories resolved), else "".
func (s *SSH) insideKeyDir(path string) string {
	if s.KeyDir == "" || !filepath.IsAbs(path) {
		return ""
	}
	dir, err := filepath.EvalSymlinks(expandHome(s.KeyDir))
	if err != nil {
		return ""
	}
	pdir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil || pdir != dir {
		return ""
	}
	return filepath.Base(path)
}

// keyChoice names the keys of KeyDir to offer: the agent's; else the ssh config's
// IdentityFiles that lie inside KeyDir; else the keys of KeyDir. note says what was left
// out, for the error when authentication fails.
func (s *SSH) keyChoice(t sshTarget) (names []string, note string) {
	if s.Key != "" {
		return []string{s.Key}, ""
	}
	for _, id := range t.identities {
		if n := s.insideKeyDir(id); n == "" {
			note += "; the ssh config's IdentityFile " + filepath.Base(id) + " is outside the key directory and was not used"
		} else if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		names = s.keyNames()
	}
	return names, note
}

// authMethods: the chosen keys, then the password.
func (s *SSH) authMethods(t sshTarget) ([]ssh.AuthMethod, string, error) {
	names, note := s.keyChoice(t)
	var signers []ssh.Signer
	for _, n := range names {
		sg, err := s.signer(n)
		if err != nil {
			if s.Key != "" {
				return nil, "", err
			}
			continue // not a usable key: skipped when the agent did not name it
		}
		if len(signers) == maxAutoKeys {
			note += "; only the first " + strconv.Itoa(maxAutoKeys) + " keys of the key directory were offered: name one with key"
			break
		}
		signers = append(signers, sg)
	}
	var methods []ssh.AuthMethod
	if len(signers) > 0 {
		methods = append(methods, ssh.PublicKeys(signers...))
	}
	if s.Password != "" {
		pw := s.Password
		methods = append(methods, ssh.Password(pw), ssh.KeyboardInteractive(func(_, _ string, questions []string, echos []bool) ([]string, error) {
			answers := make([]string, len(questions))
			for i := range questions {
				if echos[i] {
					return nil, errors.New("keyboard-interactive asks more than a password")
				}
				answers[i] = pw
			}
			return answers, nil
		}))
	}
	if len(methods) == 0 {
		return nil, "", errors.New("ssh: no credentials: name a key of the operator's key directory (key) or give a password" + note)
	}
	return methods, note, nil
}

// normalizeFingerprint accepts "SHA256:<base64>" (padding optional) and returns it unpadded,
// as ssh.FingerprintSHA256 prints it.
func normalizeFingerprint(fp string) (string, error) {
	fp = strings.TrimSpace(fp)
	body, ok := strings.CutPrefix(fp, "SHA256:")
	if !ok {
		return "", fmt.Errorf("ssh: host key fingerprint %q: want SHA256:<base64> as `ssh-keygen -lf` prints it", fp)
	}
	body = strings.TrimRight(body, "=")
	if b, err := base64.RawStdEncoding.DecodeString(body); err != nil || len(b) != 32 {
		return "", fmt.Errorf("ssh: host key fingerprint %q is not a SHA256 fingerprint", fp)
	}
	return "SHA256:" + body, nil
}

// hostKeyCheck builds the host key callback (fail closed) and, from known_hosts, the host key
// algorithms to ask for, so a host known by its RSA key is not asked for its ed25519 one.
func (s *SSH) hostKeyCheck(hostport string) (ssh.HostKeyCallback, []string, error) {
	if s.KnownHostsFile == "" && s.HostKeyFingerprint == "" {
		return nil, nil, fmt.Errorf("ssh: refusing to connect to %s: %w; the operator must set a known_hosts file "+
			"(add the host after checking its key, e.g. `ssh-keyscan -p PORT HOST >> known_hosts`) or pin its host key "+
			"fingerprint (SHA256:..., as `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` prints it on the host)",
			hostport, ErrNoHostKeyCheck)
	}
	var pin string
	if s.HostKeyFingerprint != "" {
		var err error
		if pin, err = normalizeFingerprint(s.HostKeyFingerprint); err != nil {
			return nil, nil, err
		}
	}
	var kh ssh.HostKeyCallback
	var algos []string
	if s.KnownHostsFile != "" {
		var err error
		if kh, err = knownhosts.New(expandHome(s.KnownHostsFile)); err != nil {
			return nil, nil, fmt.Errorf("ssh: known_hosts: %w", err)
		}
		algos = knownAlgorithms(kh, hostport)
	}
	cb := func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		got := ssh.FingerprintSHA256(key)
		if kh != nil {
			if err := kh(hostname, remote, key); err != nil {
				var ke *knownhosts.KeyError
				var re *knownhosts.RevokedError
				switch {
				case errors.As(err, &re):
					return fmt.Errorf("%w: the host key %s of %s is revoked in the known_hosts file", ErrHostKeyMismatch, got, hostname)
				case errors.As(err, &ke) && len(ke.Want) == 0:
					return fmt.Errorf("%w: %s presented %s %s, which is not in the known_hosts file; "+
						"the operator must verify it out of band and add it", ErrHostKeyUnknown, hostname, key.Type(), got)
				case errors.As(err, &ke):
					return fmt.Errorf("%w: %s presented %s %s, but the known_hosts file has another key for it "+
						"(line %d); this may be a man-in-the-middle attack, refusing", ErrHostKeyMismatch, hostname, key.Type(), got, ke.Want[0].Line)
				}
				return fmt.Errorf("%w: %w", ErrHostKeyMismatch, err)
			}
		}
		if pin != "" && subtle.ConstantTimeCompare([]byte(got), []byte(pin)) != 1 {
			return fmt.Errorf("%w: %s presented %s %s, not the pinned fingerprint; refusing", ErrHostKeyMismatch, hostname, key.Type(), got)
		}
		return nil
	}
	return cb, algos, nil
}

// knownAlgorithms lists the host key algorithms of the keys known_hosts has for hostport, by
// asking it about a key it cannot have.
func knownAlgorithms(kh ssh.HostKeyCallback, hostport string) []string {
	probe, err := ssh.NewPublicKey(ed25519.PublicKey(make([]byte, ed25519.PublicKeySize)))
	if err != nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if err := kh(hostport, &net.TCPAddr{IP: net.IPv4zero}, probe); !errors.As(err, &ke) {
		return nil
	}
	supported := ssh.SupportedAlgorithms().HostKeys
	var out []string
	add := func(a string) {
		if slices.Contains(supported, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, k := range ke.Want {
		if t := k.Key.Type(); t == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512)
			add(ssh.KeyAlgoRSASHA256)
			add(ssh.KeyAlgoRSA)
		} else {
			add(t)
		}
	}
	return out
}

// connect dials, verifies the host key and authenticates, all within ConnectTimeout.
func (s *SSH) connect(ctx context.Context) (*ssh.Client, error) {
	t, err := s.resolve()
	if err != nil {
		return nil, err
	}
	hostport := net.JoinHostPort(t.host, strconv.Itoa(t.port))
	hk, algos, err := s.hostKeyCheck(hostport)
	if err != nil {
		return nil, err
	}
	auth, note, err := s.authMethods(t)
	if err != nil {
		return nil, err
	}
	timeout := s.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	cfg := &ssh.ClientConfig{User: t.user, Auth: auth, HostKeyCallback: hk, HostKeyAlgorithms: algos, Timeout: timeout}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", hostport)
	if err != nil {
		return nil, fmt.Errorf("ssh: connect to %s: %w", hostport, err)
	}
	if dl, ok := dctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// Cancelling ctx aborts the handshake too.
	stop := context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	c, chans, reqs, err := ssh.NewClientConn(conn, hostport, cfg)
	if !stop() && err == nil {
		_ = c.Close()
		err = dctx.Err()
	}
	if err != nil {
		_ = conn.Close()
		var ne net.Error
		switch {
		case ctxEnded(ctx):
			return nil, fmt.Errorf("ssh %s: %w", hostport, cmp.Or(ctx.Err(), context.DeadlineExceeded))
		case errors.Is(err, ErrHostKeyUnknown), errors.Is(err, ErrHostKeyMismatch):
			return nil, fmt.Errorf("ssh %s: %w", hostport, errors.Unwrap(err))
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, fmt.Errorf("ssh %s@%s: authentication failed (%w)%s", t.user, hostport, err, note)
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("ssh %s: no answer within %s: %w", hostport, timeout, err)
		}
		return nil, fmt.Errorf("ssh %s: %w", hostport, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// ctxEnded reports whether ctx is done or its deadline has passed (the connection's deadline,
// the same instant, may fire first).
func ctxEnded(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// remoteCommand is the command line the remote login shell runs: sh -c script with the
// variables set. Only sh syntax that csh and fish parse alike is used (exec, env, '...').
func remoteCommand(env []string, script string) string {
	var b strings.Builder
	b.WriteString("exec ")
	if len(env) > 0 {
		b.WriteString("env")
		for _, kv := range env {
			b.WriteByte(' ')
			b.WriteString(shQuote(kv))
		}
		b.WriteByte(' ')
	}
	b.WriteString("sh -c ")
	b.WriteString(shQuote(script))
	return b.String()
}

// Start implements Transport.
func (s *SSH) Start(ctx context.Context, env []string) (Proc, error) {
	if err := checkEnv(env); err != nil {
		return nil, err
	}
	client, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	p := &sshProc{client: client, tag: newToken(), env: env, done: make(chan struct{}), stop: make(chan struct{})}
	ch, reqs, err := openChannel(ctx, client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("ssh: open session: %w", err)
	}
	p.ch = ch
	p.stdout = &firstByte{r: ch}
	go p.watch(reqs)
	cmd := remoteCommand(append([]string{TagVar + "=" + p.tag}, env...), startShellScript)
	if err := sendRequest(ctx, client, ch, "exec", ssh.Marshal(&struct{ Command string }{cmd})); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("ssh: start shell: %w", err)
	}
	go p.keepalive(keepaliveInterval)
	return p, nil
}

// sendRequest sends a channel request that wants a reply and waits for it, or for ctx to end,
// which closes the connection: a server that never answers must not hold the caller.
func sendRequest(ctx context.Context, client *ssh.Client, ch ssh.Channel, name string, payload []byte) error {
	answered := make(chan error, 1)
	go func() {
		ok, err := ch.SendRequest(name, true, payload)
		if err == nil && !ok {
			err = fmt.Errorf("the server refused the %s request", name)
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		return err
	case <-ctx.Done():
		_ = client.Close() // unblocks SendRequest
		return ctx.Err()
	}
}

// firstByte is the shell's stdout; it records whether the shell ever printed anything, that is
// whether it got past the login shell's startup files.
type firstByte struct {
	r    io.Reader
	seen atomic.Bool
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 {
		f.seen.Store(true)
	}
	return n, err
}

// openChannel opens a session channel, giving up when ctx ends.
func openChannel(ctx context.Context, c *ssh.Client) (ssh.Channel, <-chan *ssh.Request, error) {
	type opened struct {
		ch   ssh.Channel
		reqs <-chan *ssh.Request
		err  error
	}
	res := make(chan opened, 1)
	go func() {
		ch, reqs, err := c.OpenChannel("session", nil)
		res <- opened{ch, reqs, err}
	}()
	select {
	case o := <-res:
		return o.ch, o.reqs, o.err
	case <-ctx.Done():
		go func() {
			if o := <-res; o.err == nil {
				_ = o.ch.Close()
				ssh.DiscardRequests(o.reqs)
			}
		}()
		return nil, nil, ctx.Err()
	}
}

type sshProc struct {
	client *ssh.Client
	ch     ssh.Channel
	stdout *firstByte
	tag    string
	env    []string

	done       chan struct{}
	finishOnce sync.Once
	code       int

	stop      chan struct{}
	closeOnce sync.Once
}

// chanStdin closes only the writing half: the shell reads EOF, its output still arrives.
type chanStdin struct{ ch ssh.Channel }

func (w chanStdin) Write(p []byte) (int, error) { return w.ch.Write(p) }
func (w chanStdin) Close() error                { return w.ch.CloseWrite() }

func (p *sshProc) Stdin() io.WriteCloser { return chanStdin{p.ch} }
func (p *sshProc) Stdout() io.Reader     { return p.stdout }
func (p *sshProc) Stderr() io.Reader     { return p.ch.Stderr() }
func (p *sshProc) Done() <-chan struct{} { return p.done }

func (p *sshProc) ExitCode() int {
	<-p.done
	return p.code
}

func (p *sshProc) finish(code int) {
	p.finishOnce.Do(func() {
		p.code = code
		close(p.done)
	})
}

// watch ends the shell when the server reports its exit. It does not wait for the channel to
// close: sshd keeps it open while a background job still holds the shell's stdout.
func (p *sshProc) watch(reqs <-chan *ssh.Request) {
	for r := range reqs {
		switch r.Type {
		case "exit-status":
			if len(r.Payload) >= 4 {
				p.finish(int(binary.BigEndian.Uint32(r.Payload)))
			}
		case "exit-signal":
			var m struct {
				Signal     string
				CoreDumped bool
				Error      string
				Lang       string
			}
			code := 255
			if ssh.Unmarshal(r.Payload, &m) == nil {
				if n := unix.SignalNum("SIG" + m.Signal); n != 0 {
					code = 128 + int(n)
				}
			}
			p.finish(code)
		}
		if r.WantReply {
			_ = r.Reply(false, nil)
		}
	}
	p.finish(-1)
}

func (p *sshProc) keepalive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.done:
			return
		case <-t.C:
		}
		answered := make(chan error, 1)
		go func() {
			_, _, err := p.client.SendRequest("keepalive@openssh.com", true, nil)
			answered <- err
		}()
		select {
		case err := <-answered:
			if err != nil {
				_ = p.client.Close()
				return
			}
		case <-time.After(interval):
			_ = p.client.Close()
			return
		case <-p.stop:
			return
		}
	}
}

// side runs command in another session of the connection and returns its stdout and stderr.
// It goes through the user's login shell like the shell itself, so its startup files run first:
// every step gives up when ctx ends.
func (p *sshProc) side(ctx context.Context, command string, stdin []byte) ([]byte, []byte, error) {
	sess, err := newSession(ctx, p.client)
	if err != nil {
		return nil, nil, fmt.Errorf("ssh: open side session: %w", err)
	}
	defer func() { _ = sess.Close() }()
	var out, errb bytes.Buffer
	sess.Stdin = bytes.NewReader(stdin)
	sess.Stdout, sess.Stderr = &out, &errb
	// Start waits for the server's answer to the exec request: it runs beside ctx too.
	waited := make(chan error, 1)
	go func() {
		if err := sess.Start(command); err != nil {
			waited <- fmt.Errorf("ssh: side command: %w", err)
			return
		}
		waited <- sess.Wait()
	}()
	select {
	case err := <-waited:
		return out.Bytes(), errb.Bytes(), err
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		return nil, nil, ctx.Err()
	}
}

// newSession opens an ssh.Session, giving up when ctx ends.
func newSession(ctx context.Context, c *ssh.Client) (*ssh.Session, error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	res := make(chan opened, 1)
	go func() {
		s, err := c.NewSession()
		res <- opened{s, err}
	}()
	select {
	case o := <-res:
		return o.s, o.err
	case <-ctx.Done():
		go func() {
			if o := <-res; o.err == nil {
				_ = o.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func (p *sshProc) SignalChildren(ctx context.Context, shellPID int, sig syscall.Signal) error {
	script, err := signalChildrenScript(shellPID, sig)
	if err != nil {
		return err
	}
	_, errb, err := p.side(ctx, remoteCommand(nil, script), nil)
	if err != nil {
		return fmt.Errorf("signal children: %w: %s", err, bytes.TrimSpace(errb))
	}
	return nil
}

func (p *sshProc) Run(ctx context.Context, script string, stdin []byte) ([]byte, error) {
	out, errb, err := p.side(ctx, remoteCommand(p.env, script), stdin)
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, bytes.TrimSpace(errb))
	}
	return out, nil
}

// closeTimeout bounds the cleanup a Close runs on the far side.
const closeTimeout = 10 * time.Second

// Close kills every process of the session on the host (the tagged ones and the shell's
// descendants) through a side session, then the shell's process group through the server (a
// "signal" request), then closes the connection.
//
// A shell that never printed anything is still in the login shell's startup files (a slow
// ~/.bashrc): nothing of it is tagged yet, and a side session would sit in the same startup
// files, so only the process group is killed.
func (p *sshProc) Close() error {
	p.closeOnce.Do(func() {
		close(p.stop)
		if p.stdout.seen.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_, _, _ = p.side(ctx, remoteCommand(nil, killSessionScript(p.tag)), nil)
			cancel()
		}
		_, _ = p.ch.SendRequest("signal", false, ssh.Marshal(&struct{ Signal string }{"KILL"}))
		_ = p.ch.Close()
		_ = p.client.Close()
		select {
		case <-p.done:
		case <-time.After(closeTimeout):
			p.finish(-1)
		}
	})
	return nil
}
