package mcp

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nexus-run/nexus/internal/shell/agentshell"
)

// BenchmarkInMemoryExecTrue is session_exec "true" through the server and the SDK's client
// over in-memory transports: the protocol's cost without the pipes.
func BenchmarkInMemoryExecTrue(b *testing.B) {
	s := New(Config{Session: agentshell.Config{AuditDir: b.TempDir()}})
	ct, st := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Run(ctx, st) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cs.Close() }()
	info, err := s.Manager().Create(ctx, agentshell.CreateOptions{Transport: "local"})
	if err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"session_id": info.SessionID, "command": "true"}
	for b.Loop() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "session_exec", Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("exec: %v %v", err, res)
		}
	}
}

// BenchmarkManagerExecTrue is the session manager alone, for comparison.
func BenchmarkManagerExecTrue(b *testing.B) {
	m := agentshell.New(agentshell.Config{AuditDir: b.TempDir()})
	defer m.Close()
	ctx := context.Background()
	info, err := m.Create(ctx, agentshell.CreateOptions{Transport: "local"})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Exec(ctx, info.SessionID, "true", agentshell.ExecOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
