package cli_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/testkit"
)

// chatScripts are the chat scripts of testdata/script that hold for any transport.
var chatScripts = []string{"chat_store.txtar", "chat_file.txtar"}

// TestChatScriptsThroughGateway runs the chat scripts again with a gateway serving their state
// directory and NEXUS_CHAT_TRANSPORT=gateway: every chat command must then go through the
// gateway (without one it fails), and must answer as it does on the files.
func TestChatScriptsThroughGateway(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found; nexus serve's terminals need it")
	}
	dir := t.TempDir()
	for _, name := range chatScripts {
		b, err := os.ReadFile(filepath.Join("testdata", "script", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	testscript.Run(t, testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			home := filepath.Join(env.WorkDir, "home")
			env.Setenv("NEXUS_HOME", home)
			env.Setenv("NEXUS_CHAT_TRANSPORT", "gateway")
			env.Setenv("GORACE", "atexit_sleep_ms=0")
			return startGateway(env, home)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"jsonget":  cmdJSONGet,
			"jsoneq":   cmdJSONEq,
			"exitcode": cmdExitCode,
			"envfile":  cmdEnvFile,
		},
	})
}

// startGateway starts `nexus serve` for the script (stopped with SIGTERM when it ends) and
// waits until its socket answers.
func startGateway(env *testscript.Env, home string) error {
	nexus, err := exec.LookPath("nexus")
	if err != nil {
		// testscript puts the test binary acting as nexus on the script's PATH, not ours.
		for _, d := range filepath.SplitList(env.Getenv("PATH")) {
			if p := filepath.Join(d, "nexus"); fileExists(p) {
				nexus, err = p, nil
				break
			}
		}
		if err != nil {
			return err
		}
	}
	cmd := exec.Command(nexus, "serve", "--grace", "200ms")
	cmd.Env = env.Vars
	cmd.Dir = env.WorkDir
	if err := cmd.Start(); err != nil {
		return err
	}
	env.Defer(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	sock := filepath.Join(home, "state", "gateway.sock")
	poll(func() bool { return !alive(cmd.Process.Pid) || gatewayUp(sock) })
	if !gatewayUp(sock) {
		return errors.New("nexus serve exited, or its gateway did not come up within the patience")
	}
	return nil
}

func gatewayUp(sock string) bool {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
