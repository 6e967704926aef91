package shell

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/nexus-run/nexus/internal/testkit"
)

// The SSH transport is tested against a real OpenSSH sshd (Debian's openssh-server; CI runs
// .ci/sshd-setup.sh) started on a loopback port, as the current user, with a throwaway host
// key, authorized_keys and config. Settings checks that need no server run everywhere.
//
// The tests do not depend on the machine's real user: sshd (run by the test, so it can log in
// only the user running the tests, root or not) sets HOME, through SetEnv, to a temporary
// directory holding known rc files for bash, zsh, csh and fish, and PermitUserRC is off. What
// stays the real user's: the login shell of the passwd entry, and the starting directory
// (sshd changes to the passwd home before running anything). Every process sshd starts, itself
// included, carries a marker variable, and a watchdog kills them all when the test ends or the
// test binary dies: no sshd outlives a failed or interrupted run.

const sshdPath = "/usr/sbin/sshd"

// writeKey writes a fresh unencrypted ed25519 private key (OpenSSH format) to path.
func writeKey(t *testing.T, path string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return spub
}

type testSSHD struct {
	port    int
	hostPub ssh.PublicKey
	keyDir  string // id_test (authorized) and id_other (not)
	known   string // known_hosts with the host key
	user    string
	home    string // HOME of every session, with the rc files of rcFiles
	marker  string // NAME=value in the environment of sshd and of every process of a session
}

func (d *testSSHD) base() *SSH {
	return &SSH{Host: "127.0.0.1", Port: d.port, User: d.user, Key: "id_test", KeyDir: d.keyDir,
		KnownHostsFile: d.known, SSHConfigFile: "none", ConnectTimeout: patient}
}

// slowRCSleep is what the rc files run while the file slow-rc exists in the test HOME.
const slowRCSleep = "sleep 86399"

// rcFiles are the test HOME's startup files of the login shells the tests may meet. Each
// exports NX_TEST_RC (so a test can see that this HOME's file ran, not the real user's) and
// hangs while $HOME/slow-rc exists, as a ~/.bashrc waiting on a stale lock would.
var rcFiles = map[string]string{
	".bashrc":                  "export NX_TEST_RC=bash\nif [ -e \"$HOME/slow-rc\" ]; then " + slowRCSleep + "; fi\n",
	".zshenv":                  "export NX_TEST_RC=zsh\nif [ -e \"$HOME/slow-rc\" ]; then " + slowRCSleep + "; fi\n",
	".cshrc":                   "setenv NX_TEST_RC csh\nif ( -e \"$HOME/slow-rc\" ) " + slowRCSleep + "\n",
	".config/fish/config.fish": "set -gx NX_TEST_RC fish\nif test -e \"$HOME/slow-rc\"; " + slowRCSleep + "; end\n",
	".profile":                 "export NX_TEST_PROFILE=1\n",
}

// loginShell is the passwd shell of user ("" if unknown).
func loginShell(user string) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == user {
			return f[6]
		}
	}
	return ""
}

func writeKnownHosts(t *testing.T, hostport string, key ssh.PublicKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(hostport)}, key) + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSSHD starts sshd on 127.0.0.1, or skips (fails under CI) when Debian's openssh-server is
// not installed.
func startSSHD(t *testing.T) *testSSHD {
	t.Helper()
	if _, err := os.Stat(sshdPath); err != nil {
		testkit.SkipUnlessCI(t, sshdPath+" not found: install Debian's openssh-server (apt-get install openssh-server, "+
			"or run .ci/sshd-setup.sh) to run the SSH transport tests")
	}
	// The test user must reach authorized_keys and its home in here (t.TempDir makes 0700
	// directories).
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	owner := sshTestUser(t)
	d := &testSSHD{keyDir: filepath.Join(dir, "keys"), user: owner.Username, home: filepath.Join(dir, "home"),
		marker: "NEXUS_SSHD_TEST=" + newToken()}
	for _, sub := range []string{d.keyDir, d.home} {
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range rcFiles {
		p := filepath.Join(d.home, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, d.home, owner)
	hostKey := filepath.Join(dir, "host_ed25519")
	d.hostPub = writeKey(t, hostKey)
	clientPub := writeKey(t, filepath.Join(d.keyDir, "id_test"))
	writeKey(t, filepath.Join(d.keyDir, "id_other"))
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, ssh.MarshalAuthorizedKey(clientPub), 0o644); err != nil { //nolint:gosec // a public key the test user's sshd reads
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		_ = os.MkdirAll("/run/sshd", 0o755) // the privilege separation directory
	}
	// Cleanups run last first: the watchdog kills sshd and whatever a failed test left, then
	// this one reaps sshd.
	var logBuf testkit.Buffer
	var exited chan struct{}
	t.Cleanup(func() {
		if exited != nil {
			<-exited
		}
		if t.Failed() {
			t.Logf("sshd log:\n%s", logBuf.String())
		}
	})
	wd := startWatchdog(t, d.marker)
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		d.port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		cfg := filepath.Join(dir, "sshd_config")
		conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PidFile none
StrictModes no
UsePAM no
PermitRootLogin yes
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitUserRC no
PermitUserEnvironment no
SetEnv HOME=%s %s
PrintMotd no
PrintLastLog no
UseDNS no
LogLevel ERROR
`, d.port, hostKey, auth, d.home, d.marker)
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sshdPath, "-D", "-e", "-f", cfg) //nolint:noctx // the watchdog ends it
		cmd.Env = append(os.Environ(), d.marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
		// The watchdog kills every process holding the log pipe; never let one it missed
		// hang the suite.
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wd.watch(t, cmd.Process.Pid)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		if waitSSHD(t, d.port, done) {
			exited = done
			break
		}
		_ = cmd.Process.Kill()
		<-done
		if attempt == 2 {
			t.Fatalf("sshd did not come up:\n%s", logBuf.String())
		}
	}
	d.known = writeKnownHosts(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port)), d.hostPub)
	return d
}

// waitSSHD waits until sshd answers with its banner (true) or exits (false: the port was
// taken, say).
func waitSSHD(t *testing.T, port int, exited <-chan struct{}) bool {
	t.Helper()
	up := false
	testkit.Eventually(t, "sshd to answer or exit", func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), patient)
		if err != nil {
			return false
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(patient))
		line, _ := bufio.NewReader(c).ReadString('\n')
		up = strings.HasPrefix(line, "SSH-")
		return up
	})
	return up
}

// sshTestUserName is the user the SSH tests log in as when they run as root: a system user with
// bash as its login shell and /tmp as its passwd home, created on first use and kept (it owns
// nothing outside the tests' temporary directories). Without root the tests log in as the user
// running them (an sshd that is not root can log in no one else).
//
// Root itself is not used because OpenSSH refuses "signal" requests for root logins (there is no
// privilege-separated child to send them), and a login shell stuck in its rc file can only be
// reached that way.
const sshTestUserName = "nexus-sshtest"

// sshTestUser returns the user the SSH tests log in as.
func sshTestUser(t *testing.T) *user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if u, err := user.Lookup(sshTestUserName); err == nil {
		return u
	}
	// A password field of "*" (not useradd's "!"): no password works, but the account is not
	// locked, which sshd would refuse even for key logins.
	out, err := exec.Command("useradd", "--system", "--shell", "/bin/bash", "--home-dir", "/tmp", "--no-create-home",
		"--password", "*", sshTestUserName).CombinedOutput()
	u, lerr := user.Lookup(sshTestUserName) // another test binary may have created it meanwhile
	if lerr != nil {
		t.Fatalf("create the SSH test user %s: %v %s", sshTestUserName, err, out)
	}
	return u
}

// chownTree gives dir and everything in it to u (nothing to do when u is the current user).
func chownTree(t *testing.T, dir string, u *user.User) {
	t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == os.Geteuid() {
		return
	}
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// slowRC makes the test HOME's rc files hang until the test ends.
func (d *testSSHD) slowRC(t *testing.T) {
	t.Helper()
	flag := filepath.Join(d.home, "slow-rc")
	if err := os.WriteFile(flag, nil, 0o644); err != nil { //nolint:gosec // read by the test user
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(flag) })
}

// rcSleepers lists the processes of this sshd stuck in a slow rc file.
func (d *testSSHD) rcSleepers() []int { return withCmdline(envPIDs(d.marker), slowRCSleep) }

// requireRCShell skips (fails under CI) unless the user's login shell reads one of rcFiles when
// sshd runs a command.
func (d *testSSHD) requireRCShell(t *testing.T) {
	t.Helper()
	switch sh := loginShell(d.user); filepath.Base(sh) {
	case "bash", "zsh", "csh", "tcsh", "fish":
	default:
		testkit.SkipUnlessCI(t, fmt.Sprintf("the login shell of %s is %q, which reads no startup file for `ssh host command`", d.user, sh))
	}
}

// countingListener accepts connections and says nothing; it counts them.
func countingListener(t *testing.T) (int, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().(*net.TCPAddr).Port, &n
}

func TestSSHKeyNamesRefused(t *testing.T) {
	keyDir := t.TempDir()
	writeKey(t, filepath.Join(keyDir, "id_ok"))
	outside := t.TempDir()
	writeKey(t, filepath.Join(outside, "id_outside"))
	if err := os.Symlink(filepath.Join(outside, "id_outside"), filepath.Join(keyDir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../"+filepath.Base(outside)+"/id_outside", filepath.Join(keyDir, "escape_rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("id_ok", filepath.Join(keyDir, "inside_link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(keyDir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeKey(t, filepath.Join(keyDir, "sub", "key"))
	port, conns := countingListener(t)
	for _, name := range []string{"../x", "/etc/passwd", "a/b", "sub/key", "..", ".", "..id_ok", "id_ok/..", "sub",
		"escape", "escape_rel", "missing", "-oProxyCommand=x", "id\x00ok", "id\nok", `..\id_ok`, filepath.Join(keyDir, "id_ok")} {
		s := &SSH{Host: "127.0.0.1", Port: port, Key: name, KeyDir: keyDir, HostKeyFingerprint: ssh.FingerprintSHA256(writeKey(t, filepath.Join(t.TempDir(), "k"))), SSHConfigFile: "none"}
		if err := s.Validate(); !errors.Is(err, ErrKeyName) {
			t.Errorf("Validate with key %q: %v, want ErrKeyName", name, err)
		}
		if _, err := s.Start(context.Background(), nil); !errors.Is(err, ErrKeyName) {
			t.Errorf("Start with key %q: %v, want ErrKeyName", name, err)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections were made with refused key names", n)
	}
	for _, name := range []string{"id_ok", "inside_link"} {
		s := &SSH{Key: name, KeyDir: keyDir}
		if _, err := s.signer(name); err != nil {
			t.Errorf("key %q: %v", name, err)
		}
	}
	// Without a key directory no key can be named.
	if _, err := (&SSH{KeyDir: ""}).openKey("id_ok"); err == nil || !strings.Contains(err.Error(), "no key directory") {
		t.Errorf("no key dir: %v", err)
	}
	// The error lists what the agent may name, not where the directory is.
	_, err := (&SSH{KeyDir: keyDir}).openKey("missing")
	if err == nil || !strings.Contains(err.Error(), "id_ok") || strings.Contains(err.Error(), keyDir) {
		t.Errorf("missing key: %v", err)
	}
}

func TestSSHHostKeySettingsRefusedBeforeDialing(t *testing.T) {
	port, conns := countingListener(t)
	keyDir := t.TempDir()
	writeKey(t, filepath.Join(keyDir, "id"))
	s := &SSH{Host: "127.0.0.1", Port: port, KeyDir: keyDir, Key: "id", SSHConfigFile: "none"}
	_, err := s.Start(context.Background(), nil)
	if !errors.Is(err, ErrNoHostKeyCheck) || !strings.Contains(err.Error(), "known_hosts") || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("no verification: %v", err)
	}
	if err := s.Validate(); !errors.Is(err, ErrNoHostKeyCheck) {
		t.Fatalf("Validate: %v", err)
	}
	for _, fp := range []string{"MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", "SHA256:short", "nonsense", "SHA256:" + strings.Repeat("A", 42)} {
		s.HostKeyFingerprint = fp
		if _, err := s.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "fingerprint") {
			t.Errorf("fingerprint %q: %v", fp, err)
		}
	}
	s.HostKeyFingerprint = ""
	s.KnownHostsFile = filepath.Join(t.TempDir(), "missing")
	if _, err := s.Start(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "known_hosts") {
		t.Errorf("missing known_hosts: %v", err)
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections made without host key verification", n)
	}
	if fp, err := normalizeFingerprint(" SHA256:" + strings.Repeat("A", 43) + "= "); err != nil || fp != "SHA256:"+strings.Repeat("A", 43) {
		t.Errorf("normalize: %q %v", fp, err)
	}
}

func TestSSHConnectTimeout(t *testing.T) {
	port, conns := countingListener(t)
	keyDir := t.TempDir()
	writeKey(t, filepath.Join(keyDir, "id"))
	s := &SSH{Host: "127.0.0.1", Port: port, KeyDir: keyDir, Key: "id", SSHConfigFile: "none",
		HostKeyFingerprint: "SHA256:" + strings.Repeat("A", 43), ConnectTimeout: 300 * time.Millisecond}
	_, err := s.Start(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("silent server: %v", err)
	}
	// Cancelling the context aborts the handshake too: with no other bound in sight, Start
	// returns only because the context ended once the server had accepted the connection.
	s.ConnectTimeout = 24 * time.Hour
	before := conns.Load()
	_, err = startCancelled(t, s, func() bool { return conns.Load() > before })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled connect: %v", err)
	}
}

// startCancelled starts a shell over tr with a context that is cancelled once stalled holds, and
// returns what Start returned.
func startCancelled(t *testing.T, tr Transport, stalled func() bool) (*Shell, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := startAsync(t, ctx, tr)
	testkit.Eventually(t, "the start to stall", stalled)
	cancel()
	r := receive(t, "Start to return once its context was cancelled", res)
	return r.sh, r.err
}

// receive waits for a value of ch, failing the test (rather than hanging it) if none comes.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	var v T
	testkit.Eventually(t, what, func() bool {
		select {
		case v = <-ch:
			return true
		default:
			return false
		}
	})
	return v
}

type started struct {
	sh  *Shell
	err error
}

// startAsync starts a shell over tr in the background; a shell it gets is closed when the test ends.
func startAsync(t *testing.T, ctx context.Context, tr Transport) <-chan started {
	res := make(chan started, 1)
	go func() {
		sh, err := Start(ctx, tr, nil)
		if sh != nil {
			t.Cleanup(func() { _ = sh.Close() })
		}
		res <- started{sh, err}
	}()
	return res
}

// stallServer is an SSH server (golang.org/x/crypto/ssh's) that stops answering at one stage of
// a session's start, to show that every step of the transport gives up when its context ends:
//
//	auth: never decides on the client's key;
//	open: never answers the request for a session channel;
//	exec: never answers the request to run the shell;
//	side: runs nothing but answers the shell's exec, then never answers a side session's.
//
// reached is closed once the client is stuck there.
func stallServer(t *testing.T, stage string) (s *SSH, reached <-chan struct{}) {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	stuck := make(chan struct{})
	var stuckOnce sync.Once
	markStuck := func() { stuckOnce.Do(func() { close(stuck) }) }
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) {
		if stage == "auth" {
			markStuck()
			<-release
		}
		return &ssh.Permissions{}, nil
	}}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		close(release)
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	serve := func(c net.Conn) {
		_, chans, reqs, err := ssh.NewServerConn(c, cfg)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		execs := 0
		for nc := range chans {
			if stage == "open" {
				markStuck()
				continue // never accepted nor rejected
			}
			ch, creqs, err := nc.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = ch.Close() }()
				for r := range creqs {
					if r.Type != "exec" {
						_ = r.Reply(false, nil)
						continue
					}
					mu.Lock()
					execs++
					n := execs
					mu.Unlock()
					if stage == "exec" || (stage == "side" && n > 1) {
						markStuck()
						<-release
						return
					}
					_ = r.Reply(true, nil)
				}
			}()
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	keyDir := t.TempDir()
	writeKey(t, filepath.Join(keyDir, "id"))
	return &SSH{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, User: "u", KeyDir: keyDir, Key: "id", SSHConfigFile: "none",
		HostKeyFingerprint: ssh.FingerprintSHA256(signer.PublicKey()), ConnectTimeout: 24 * time.Hour, StartTimeout: 24 * time.Hour}, stuck
}

// Every step of the transport gives up when its context ends, even against a server that never
// answers: no other bound (connect or start timeout) is near, so Start returns only through
// the context.
func TestSSHStepsHonourContext(t *testing.T) {
	for _, stage := range []string{"auth", "open", "exec"} {
		t.Run(stage, func(t *testing.T) {
			s, reached := stallServer(t, stage)
			_, err := startCancelled(t, s, func() bool {
				select {
				case <-reached:
					return true
				default:
					return false
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Start: %v, want context.Canceled", err)
			}
		})
	}
	t.Run("side", func(t *testing.T) {
		s, reached := stallServer(t, "side")
		p, err := s.Start(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-reached; cancel() }()
		ran := make(chan error, 1)
		go func() { _, err := p.Run(ctx, "true", nil); ran <- err }()
		if err := receive(t, "the side command to return once its context was cancelled", ran); !errors.Is(err, context.Canceled) {
			t.Fatalf("side command: %v, want context.Canceled", err)
		}
		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		if err := p.SignalChildren(ctx, 1234, syscall.SIGINT); !errors.Is(err, context.Canceled) {
			t.Fatalf("signal with an ended context: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		<-p.Done()
	})
}

func TestSSHIDPartAndValidation(t *testing.T) {
	for _, c := range []struct {
		s    SSH
		want string
	}{
		{SSH{Host: "example.com", User: "deploy"}, "ssh_deploy@example.com"},
		{SSH{Host: "example.com", User: "deploy", Port: 22}, "ssh_deploy@example.com"},
		{SSH{Host: "10.0.0.7", User: "root", Port: 2222}, "ssh_root@10.0.0.7:2222"},
		{SSH{Host: "[::1]", User: "u", Port: 2200}, "ssh_u@__1:2200"},
		{SSH{Host: strings.Repeat("h", 60), User: strings.Repeat("u", 60)}, "ssh_" + strings.Repeat("u", 40) + "@" + strings.Repeat("h", 40)},
		{SSH{Host: "bad host/../x", User: "a b"}, "ssh_a_b@bad_host_.._x"},
	} {
		c.s.SSHConfigFile = "none"
		if got := c.s.IDPart(); got != c.want {
			t.Errorf("IDPart(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
	if k := (&SSH{}).Kind(); k != "ssh" {
		t.Errorf("Kind = %q", k)
	}
	for _, s := range []SSH{
		{Host: ""}, {Host: "-oProxyCommand=x"}, {Host: "a b"}, {Host: "a/b"}, {Host: "a\nb"},
		{Host: "h", Port: 70000}, {Host: "h", Port: -1}, {Host: "h", User: "a\nb"}, {Host: "h", User: "-x"},
	} {
		s.SSHConfigFile = "none"
		if _, err := s.resolve(); err == nil {
			t.Errorf("resolve accepted %+v", s)
		}
	}
	if _, err := (&SSH{Host: "h", KeyDir: t.TempDir(), HostKeyFingerprint: "SHA256:" + strings.Repeat("A", 43), SSHConfigFile: "none"}).Start(context.Background(), []string{"1BAD=x"}); err == nil {
		t.Error("Start accepted a bad environment name")
	}
}

func TestSSHConfigAliases(t *testing.T) {
	keyDir := t.TempDir()
	writeKey(t, filepath.Join(keyDir, "id_web"))
	writeKey(t, filepath.Join(keyDir, "id_aaa"))
	home, _ := os.UserHomeDir()
	cfg := filepath.Join(t.TempDir(), "config")
	conf := `# operator's aliases
Host web
  HostName 127.0.0.2
  Port 2222
  User deploy
  IdentityFile ` + filepath.Join(keyDir, "id_web") + `
  IdentityFile ~/.ssh/id_outside

Host *.example.com !bad.example.com
  User wild
  HostName %h.internal

Host quoted
  HostName "q.example.org"
  IdentityFile "` + filepath.Join(keyDir, "id_aaa") + `"

Host *
  Port 2200
`
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s                SSH
		host, user       string
		port             int
		identities, keys []string
	}{
		{SSH{Host: "web"}, "127.0.0.2", "deploy", 2222, []string{filepath.Join(keyDir, "id_web"), filepath.Join(home, ".ssh", "id_outside")}, []string{"id_web"}},
		{SSH{Host: "web", User: "me", Port: 22}, "127.0.0.2", "me", 22, nil, []string{"id_web"}},
		{SSH{Host: "a.example.com"}, "a.example.com.internal", "wild", 2200, nil, []string{"id_aaa", "id_web"}},
		{SSH{Host: "bad.example.com", User: "x"}, "bad.example.com", "x", 2200, nil, []string{"id_aaa", "id_web"}},
		{SSH{Host: "quoted", User: "x"}, "q.example.org", "x", 2200, nil, []string{"id_aaa"}},
		{SSH{Host: "web", Key: "id_aaa"}, "127.0.0.2", "deploy", 2222, nil, []string{"id_aaa"}},
	} {
		c.s.SSHConfigFile, c.s.KeyDir = cfg, keyDir
		got, err := c.s.resolve()
		if err != nil {
			t.Fatalf("%s: %v", c.s.Host, err)
		}
		if got.host != c.host || got.user != c.user || got.port != c.port || (c.identities != nil && !slices.Equal(got.identities, c.identities)) {
			t.Errorf("%s: got %+v, want host %s user %s port %d identities %v", c.s.Host, got, c.host, c.user, c.port, c.identities)
		}
		if keys, _ := c.s.keyChoice(got); !slices.Equal(keys, c.keys) {
			t.Errorf("%s: keys %v, want %v", c.s.Host, keys, c.keys)
		}
	}
	if id := (&SSH{Host: "web", SSHConfigFile: cfg}).IDPart(); id != "ssh_deploy@web:2222" {
		t.Errorf("IDPart of alias = %q", id)
	}
	// An explicit config file that is missing or unparseable is an error; "none" reads nothing.
	if _, err := (&SSH{Host: "web", SSHConfigFile: filepath.Join(t.TempDir(), "nope")}).resolve(); err == nil {
		t.Error("missing explicit config accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad")
	_ = os.WriteFile(bad, []byte("Match exec \"true\"\n  User x\n"), 0o600)
	if _, err := (&SSH{Host: "web", SSHConfigFile: bad}).resolve(); err == nil || !strings.Contains(err.Error(), "ssh config") {
		t.Errorf("Match exec config: %v", err)
	}
	if got, err := (&SSH{Host: "web", User: "u", SSHConfigFile: "none"}).resolve(); err != nil || got.host != "web" || got.port != 22 {
		t.Errorf("none: %+v %v", got, err)
	}
	// Proxies are refused rather than bypassed.
	proxy := filepath.Join(t.TempDir(), "proxy")
	_ = os.WriteFile(proxy, []byte("Host behind\n  ProxyJump bastion\nHost cmd\n  ProxyCommand nc %h %p\nHost direct\n  ProxyJump none\n"), 0o600)
	for _, h := range []string{"behind", "cmd"} {
		if _, err := (&SSH{Host: h, SSHConfigFile: proxy}).resolve(); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("proxy %s: %v", h, err)
		}
	}
	if _, err := (&SSH{Host: "direct", SSHConfigFile: proxy}).resolve(); err != nil {
		t.Errorf("ProxyJump none: %v", err)
	}
	// A HostName that is not a host name is refused.
	evil := filepath.Join(t.TempDir(), "evil")
	_ = os.WriteFile(evil, []byte("Host x\n  HostName a b\n"), 0o600)
	if _, err := (&SSH{Host: "x", SSHConfigFile: evil}).resolve(); err == nil {
		t.Error("bad HostName accepted")
	}
}

// lockedKey is a throwaway ed25519 key encrypted with the passphrase "secret" (generating one
// costs bcrypt rounds, slow under -race).
const lockedKey = `-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHIAAAAGYmNyeXB0AAAAGAAAABCe
zUH3XW5SBCefGRWN6InvAAAAEAAAAAEAAAAzAAAAC3NzaC1lZDI1NTE5AAAAIMwJ
gUSECfTjcbFFkFUBCc2mf1wmdlsbTZLYod+lNUN1AAAAkF+A+JxZg1gFVMowSxtV
+ipfyGEF5zI1Zl9c3HKAqj04xtlyW1hNtlGY7nrtSbg4I9mR61ymzYc8+UEX5HaC
L2LW3ha9/I9ZmRIL9uUwy9vXqJXOhkmI4ZHu59XTMS43I2XtGWRemJPSvUHQ0+Rg
s6xvlCaBfYh+OGf8TG9ee3pJXHhYyZjjZeS7Xz/5uUu0Yg==
-----END OPENSSH PRIVATE KEY-----
`

func TestSSHAuthMethods(t *testing.T) {
	keyDir := t.TempDir()
	if _, _, err := (&SSH{KeyDir: keyDir}).authMethods(sshTarget{}); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Errorf("no credentials: %v", err)
	}
	if m, _, err := (&SSH{Password: "pw"}).authMethods(sshTarget{}); err != nil || len(m) != 2 {
		t.Errorf("password: %d methods, %v", len(m), err)
	}
	// Encrypted keys are refused with a clear message when named, skipped when not.
	_ = os.WriteFile(filepath.Join(keyDir, "id_locked"), []byte(lockedKey), 0o600)
	_ = os.WriteFile(filepath.Join(keyDir, "README"), []byte("not a key"), 0o600)
	if _, _, err := (&SSH{KeyDir: keyDir, Key: "id_locked"}).authMethods(sshTarget{}); err == nil || !strings.Contains(err.Error(), "passphrase") {
		t.Errorf("locked key: %v", err)
	}
	for i := range 7 {
		writeKey(t, filepath.Join(keyDir, "id_"+strconv.Itoa(i)))
	}
	m, note, err := (&SSH{KeyDir: keyDir}).authMethods(sshTarget{})
	if err != nil || len(m) != 1 || !strings.Contains(note, "only the first 5") {
		t.Errorf("auto keys: %d methods, note %q, %v", len(m), note, err)
	}
}

func TestSSHRealServer(t *testing.T) {
	d := startSSHD(t)
	hostport := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))
	ctx := context.Background()
	echo := func(t *testing.T, s *SSH) {
		t.Helper()
		sh, err := Start(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sh.Close() }()
		if res, out, _ := remoteRun(t, sh, "echo hi", patient); out != "hi\n" || res.ExitCode != 0 {
			t.Fatalf("echo: %+v %q", res, out)
		}
	}
	t.Run("key and known_hosts", func(t *testing.T) { echo(t, d.base()) })
	t.Run("pinned fingerprint", func(t *testing.T) {
		s := d.base()
		s.KnownHostsFile, s.HostKeyFingerprint = "", ssh.FingerprintSHA256(d.hostPub)
		echo(t, s)
		s.HostKeyFingerprint += "=" // as some tools print it
		echo(t, s)
	})
	t.Run("known_hosts and fingerprint", func(t *testing.T) {
		s := d.base()
		s.HostKeyFingerprint = ssh.FingerprintSHA256(d.hostPub)
		echo(t, s)
	})
	other := writeKey(t, filepath.Join(t.TempDir(), "other"))
	t.Run("unknown host key", func(t *testing.T) {
		s := d.base()
		s.KnownHostsFile = writeKnownHosts(t, "127.0.0.1:1", d.hostPub) // the key, but for another host
		_, err := s.Start(ctx, nil)
		if !errors.Is(err, ErrHostKeyUnknown) || !strings.Contains(err.Error(), ssh.FingerprintSHA256(d.hostPub)) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("changed host key", func(t *testing.T) {
		s := d.base()
		s.KnownHostsFile = writeKnownHosts(t, hostport, other)
		if _, err := s.Start(ctx, nil); !errors.Is(err, ErrHostKeyMismatch) || !strings.Contains(err.Error(), "man-in-the-middle") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("wrong fingerprint", func(t *testing.T) {
		s := d.base()
		s.KnownHostsFile, s.HostKeyFingerprint = "", ssh.FingerprintSHA256(other)
		if _, err := s.Start(ctx, nil); !errors.Is(err, ErrHostKeyMismatch) {
			t.Fatalf("got %v", err)
		}
		s.KnownHostsFile = d.known // known_hosts agrees, the pin does not: refused
		if _, err := s.Start(ctx, nil); !errors.Is(err, ErrHostKeyMismatch) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("key not authorized", func(t *testing.T) {
		s := d.base()
		s.Key = "id_other"
		if _, err := s.Start(ctx, nil); err == nil || !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("keys of the key directory", func(t *testing.T) {
		s := d.base()
		s.Key = ""
		echo(t, s)
	})
	t.Run("ssh config alias", func(t *testing.T) {
		// Six unauthorized keys sort before the right one: only the alias's IdentityFile
		// gets it offered.
		keyDir := t.TempDir()
		for i := range 6 {
			writeKey(t, filepath.Join(keyDir, "id_"+strconv.Itoa(i)))
		}
		b, err := os.ReadFile(filepath.Join(d.keyDir, "id_test"))
		if err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(keyDir, "zz_test"), b, 0o600)
		cfg := filepath.Join(t.TempDir(), "config")
		_ = os.WriteFile(cfg, []byte(fmt.Sprintf("Host testbox\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %s\n",
			d.port, d.user, filepath.Join(keyDir, "zz_test"))), 0o600)
		s := &SSH{Host: "testbox", KeyDir: keyDir, KnownHostsFile: d.known, SSHConfigFile: cfg}
		if id := s.IDPart(); id != "ssh_"+sanitizeIDPart(d.user)+"@testbox:"+strconv.Itoa(d.port) {
			t.Errorf("IDPart %q", id)
		}
		echo(t, s)
		s.SSHConfigFile = "none"
		if _, err := s.Start(ctx, nil); err == nil {
			t.Fatal("without the config the alias resolved")
		}
	})
	t.Run("test HOME", func(t *testing.T) {
		d.requireRCShell(t)
		sh, err := Start(ctx, d.base(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sh.Close() }()
		// The session's HOME is the test's, and its rc file ran (not the real user's).
		res, out, _ := remoteRun(t, sh, `echo "$HOME"; [ -n "$NX_TEST_RC" ] && echo rc-ran; echo "$NEXUS_SSHD_TEST"`, patient)
		want := d.home + "\nrc-ran\n" + strings.TrimPrefix(d.marker, "NEXUS_SSHD_TEST=") + "\n"
		if res.ExitCode != 0 || out != want {
			t.Fatalf("got %q, want %q", out, want)
		}
	})
	t.Run("slow login script", func(t *testing.T) {
		d.requireRCShell(t)
		d.slowRC(t)
		s := d.base()
		s.StartTimeout = 2 * time.Second
		ctx, cancel := context.WithTimeout(ctx, patient) // only against a hang of the old code
		defer cancel()
		res := startAsync(t, ctx, s)
		// Usually the rc file is seen sleeping before the timeout; on a loaded machine the
		// timeout may come first.
		var r *started
		testkit.Eventually(t, "the login shell to sit in its slow rc file, or Start to return", func() bool {
			select {
			case v := <-res:
				r = &v
				return true
			default:
				return len(d.rcSleepers()) > 0
			}
		})
		if r == nil {
			v := receive(t, "Start to return", res)
			r = &v
		}
		if !errors.Is(r.err, ErrStartTimeout) || !strings.Contains(r.err.Error(), "the remote shell did not finish starting within 2s: a slow ~/.bashrc or login script?") {
			t.Fatalf("Start: %v", r.err)
		}
		// Nothing is left: the login shell was killed with its process group.
		testkit.Eventually(t, "the login shell stuck in its rc file to be killed", func() bool { return len(d.rcSleepers()) == 0 })
	})
	t.Run("slow login script, cancelled", func(t *testing.T) {
		d.requireRCShell(t)
		d.slowRC(t)
		s := d.base()
		s.StartTimeout = 24 * time.Hour
		if _, err := startCancelled(t, s, func() bool { return len(d.rcSleepers()) > 0 }); !errors.Is(err, context.Canceled) {
			t.Fatalf("Start: %v, want context.Canceled", err)
		}
		testkit.Eventually(t, "the login shell stuck in its rc file to be killed", func() bool { return len(d.rcSleepers()) == 0 })
	})
	t.Run("side command stuck in a slow login script", func(t *testing.T) {
		d.requireRCShell(t)
		sh, err := Start(ctx, d.base(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sh.Close() }()
		d.slowRC(t)
		ctx, cancel := context.WithCancel(ctx)
		go func() {
			testkit.Eventually(t, "the side session to sit in its slow rc file", func() bool { return len(d.rcSleepers()) > 0 })
			cancel()
		}()
		if _, err := sh.Proc().Run(ctx, "echo never", nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v, want context.Canceled", err)
		}
		testkit.Eventually(t, "the side session stuck in its rc file to be killed", func() bool { return len(d.rcSleepers()) == 0 })
		_ = os.Remove(filepath.Join(d.home, "slow-rc"))
		if res, out, _ := remoteRun(t, sh, "echo still here", patient); out != "still here\n" || res.ExitCode != 0 {
			t.Fatalf("the shell after a cancelled side command: %+v %q", res, out)
		}
	})
	t.Run("engine", func(t *testing.T) {
		testRemoteEngine(t, d.base(), func(_ *testing.T, sh *Shell, line string) int {
			return len(withCmdline(taggedPIDs(sh.Proc().(*sshProc).tag), line))
		})
	})
	t.Run("exit with a job left", func(t *testing.T) {
		sh, err := Start(ctx, d.base(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sh.Close() }() // a failed check must not leave the session holding sshd
		tag := sh.Proc().(*sshProc).tag
		// exit must not wait for the 300 s job (a timeout would say so).
		res, _, _ := remoteRun(t, sh, "sleep 300 & exit 3", patient)
		if !res.ShellExited || res.ExitCode != 3 || res.TimedOut {
			t.Fatalf("exit: %+v", res)
		}
		if len(taggedPIDs(tag)) == 0 {
			t.Fatal("the job should outlive the shell until Close")
		}
		_ = sh.Close()
		waitTagGone(t, tag)
	})
	t.Run("close", func(t *testing.T) {
		sh, err := Start(ctx, d.base(), nil)
		if err != nil {
			t.Fatal(err)
		}
		tag := sh.Proc().(*sshProc).tag
		pid := sh.PID()
		remoteRun(t, sh, "sleep 300 & (sleep 301 &); setsid sleep 302 </dev/null >/dev/null 2>&1 &", patient)
		waitTaggedSleeps(t, tag, 3)
		if !slices.Contains(taggedPIDs(tag), pid) {
			t.Fatalf("the shell's pid %d (as it reported it) is not a process of the session", pid)
		}
		if err := sh.Close(); err != nil {
			t.Fatal(err)
		}
		waitTagGone(t, tag)
		if len(descendants(pid)) != 0 {
			t.Fatalf("descendants of the shell left: %v", descendants(pid))
		}
		waitExited(t, sh)
		if _, err := sh.Run(ctx, "true", time.Second, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, ErrShellExited) {
			t.Fatalf("run after close: %v", err)
		}
		_ = sh.Close() // idempotent
	})
}

// The start script runs bash where there is one, else sh (a failed exec would end sh).
func TestSSHStartShellFallsBackToSh(t *testing.T) {
	dash, err := exec.LookPath("dash")
	if err != nil {
		t.Skip("dash not installed")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	for _, c := range []struct {
		tools map[string]string
		want  string
	}{
		{map[string]string{"sh": dash}, "sh\n"},
		{map[string]string{"sh": dash, "bash": bash}, "bash\n"},
	} {
		dir := t.TempDir()
		for name, target := range c.tools {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(dash, "-c", startShellScript)
		cmd.Env = []string{"PATH=" + dir}
		cmd.Stdin = strings.NewReader("if [ -n \"$BASH_VERSION\" ]; then echo bash; else echo sh; fi\n")
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != c.want {
			t.Errorf("tools %v: %q %v, want %q", c.tools, out, err, c.want)
		}
	}
}
