package mcp_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/testkit"
)

// The agent shells a gateway serves at /v1/mcp belong to the gateway's owner: a `nexus serve`
// killed with SIGKILL leaves none of their processes behind (its watchdog reaps them; a shell
// outside the owner's groups would keep a plain background job alive, since a pipe shell gets
// no SIGHUP when its parent dies). A clean stop closes them with reason shutdown.
func TestGatewayMCPShellsDieWithTheGateway(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found: local sessions run it")
	}
	bin := nexusBinary(t)
	for _, stop := range []string{"SIGKILL", "SIGTERM"} {
		t.Run(stop, func(t *testing.T) {
			home := testkit.ShortTempDir(t)
			// --no-index: the gateway must not index the machine's own transcripts (its HOME).
			cmd := exec.Command(bin, "serve", "--no-index", "--mcp-idle-timeout", "0") //nolint:gosec // G204: the binary built by nexusBinary
			cmd.Env = append(os.Environ(), "NEXUS_HOME="+home)
			var stderr testkit.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				t.Logf("gateway after the test: %v", <-exited)
			})
			stderr.WaitFor(t, "listening on")
			sock := filepath.Join(home, "state", "gateway.sock")
			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			cs, err := sdk.NewClient(&sdk.Implementation{Name: "owner", Version: "v0"}, nil).
				Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "http://nexus/v1/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
			if err != nil {
				t.Fatalf("connect: %v\n%s", err, stderr.String())
			}
			defer func() { _ = cs.Close() }()
			e := &e2e{t: t, ctx: ctx, cs: cs}
			var created struct {
				SessionID string `json:"session_id"`
			}
			e.ok("session_create", map[string]any{"transport": "local", "cwd": home}, &created)
			jobs := startJobs(e, created.SessionID, 320)
			sig := os.Kill
			if stop == "SIGTERM" {
				sig = syscall.SIGTERM
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err = <-exited
			exited <- err // for the cleanup
			if stop == "SIGTERM" && err != nil {
				t.Fatalf("nexus serve after SIGTERM: %v\n%s", err, stderr.String())
			}
			jobs.waitReaped(t, "nexus serve got "+stop)
			if stop == "SIGTERM" {
				data, err := os.ReadFile(filepath.Join(home, "state", "audit", created.SessionID+".jsonl"))
				if err != nil || !bytes.Contains(data, []byte(`"event":"close","reason":"shutdown"`)) {
					t.Fatalf("audit log: %s %v", data, err)
				}
			}
		})
	}
}
