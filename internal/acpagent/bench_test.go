package acpagent

import (
	"encoding/json"
	"io"
	"testing"

	acp "github.com/coder/acp-go-sdk"

	"github.com/nexus-run/nexus/internal/abi"
)

// The relay's own work per update: one ai-token event decoded and mapped, and its
// session/update notification encoded and written by the SDK's connection (to io.Discard).
// bench/acp measures the whole path through the binaries.
func BenchmarkRelayToken(b *testing.B) {
	in, _ := io.Pipe() // the client never writes
	conn := acp.NewAgentSideConnection(New(Config{}), io.Discard, in)
	payload, err := json.Marshal(abi.AIToken{Type: abi.PayloadAIToken, Content: "token ", MessageID: "01a2235f-6d4f-77b9-9b48-ea5f91aab578-1"})
	if err != nil {
		b.Fatal(err)
	}
	e := abi.Event{Event: abi.EventData, Seq: 42, Payload: payload}
	m := newMapper("/ws")
	b.ReportAllocs()
	for b.Loop() {
		for _, u := range m.event(e).updates {
			if err := conn.SessionUpdate(b.Context(), acp.SessionNotification{SessionId: "agent:main:ai:0123456789ab", Update: u}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
