package terminal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/kinds/terminal"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/live/livetest"
	"github.com/nexus-run/nexus/internal/testkit"
)

// TestKindContract runs the kind's part of the registry contract (livetest.RunKind) with real
// bash shells on real PTYs.
func TestKindContract(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash is not installed")
	}
	livetest.RunKind(t, livetest.KindHarness{
		New: func(t *testing.T) live.Kind {
			dir, home := t.TempDir(), t.TempDir()
			return &terminal.Kind{
				Shell: bash,
				Grace: 300 * time.Millisecond,
				Env:   []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8", "PS1=$ ", "HISTFILE=/dev/null"},
				Projects: func(id string) (string, error) {
					if id == "p" {
						return dir, nil
					}
					return "", abi.Errorf(abi.CodeInvalidArgument, "", "unknown project %q", id)
				},
			}
		},
		Request: abi.CreateRequest{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}},
		BadRequests: []abi.CreateRequest{
			{Type: abi.TypeTerminal},
			{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "nope"}},
			{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"cols":20000}`)},
			{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"shell":"no-such-shell-here"}`)},
			{Type: abi.TypeTerminal, Context: abi.Context{ProjectID: "p"}, Options: json.RawMessage(`{"colour":"red"}`)},
		},
		// The typed line holds the text in two quoted halves, so only the output has it whole.
		Print: func(t *testing.T, r live.Backend, id, text string) {
			t.Helper()
			half := len(text) / 2
			cmd := fmt.Sprintf("printf '%%s%%s\\n' '%s' '%s'\n", text[:half], text[half:])
			if _, err := r.Send(context.Background(), id, live.SendRequest{Data: []byte(cmd)}); err != nil {
				t.Fatalf("send: %v", err)
			}
		},
		Exit: func(t *testing.T, r live.Backend, id string, code int) {
			t.Helper()
			if _, err := r.Send(context.Background(), id, live.SendRequest{Data: fmt.Appendf(nil, "exit %d\n", code)}); err != nil {
				t.Fatalf("send: %v", err)
			}
		},
	})
}
