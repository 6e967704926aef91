package mcp_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/mcp"
	"github.com/nexus-run/nexus/internal/shell/agentshell"
	"github.com/nexus-run/nexus/internal/shell/audit"
	"github.com/nexus-run/nexus/internal/testkit"
)

// The server reads the audit log of its own directory, and tells an open shell from a closed
// one and from one it never had; package audit tests the reading itself.
func TestServerShellsFromAudit(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.SkipUnlessCI(t, "bash not found: local sessions run it")
	}
	s := mcp.New(mcp.Config{Session: agentshell.Config{AuditDir: t.TempDir(), IdleTimeout: -1}})
	defer s.Close()
	ctx := t.Context()
	info, err := s.Manager().Create(ctx, agentshell.CreateOptions{Transport: "local"})
	if err != nil {
		t.Fatal(err)
	}
	id := info.SessionID
	if got, err := s.Shell(id); err != nil || got.SessionID != id {
		t.Fatalf("an open shell: %+v %v", got, err)
	}
	if b, err := s.ReadAudit(ctx, id, 0, 0, 0); err != nil || len(b.Lines) != 1 || b.Lines[0].Event != "open" {
		t.Fatalf("its audit log: %+v %v", b, err)
	}
	if err := s.Manager().Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Shell(id); !errors.Is(err, mcp.ErrShellClosed) || !strings.Contains(err.Error(), "was closed (destroyed)") {
		t.Fatalf("a closed shell: %v", err)
	}
	if _, err := s.Shell("nosuch"); !errors.Is(err, audit.ErrUnknownSession) {
		t.Fatalf("an unknown shell: %v", err)
	}
	if _, err := s.Shell("../x"); !errors.Is(err, audit.ErrBadSessionID) {
		t.Fatalf("an id naming a path: %v", err)
	}

	off := mcp.New(mcp.Config{})
	defer off.Close()
	if _, err := off.ReadAudit(ctx, "x", 0, 0, 0); !errors.Is(err, audit.ErrNoAudit) {
		t.Errorf("no audit directory: %v", err)
	}
	if _, err := off.Shell("x"); !errors.Is(err, audit.ErrUnknownSession) {
		t.Errorf("no audit directory, Shell: %v", err)
	}
}
