package live_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// The hand-written envelope must be what encoding/json writes for abi.Event.
func TestEventJSONMatchesABI(t *testing.T) {
	at := time.Date(2026, 11, 25, 1, 2, 3, 456789000, time.FixedZone("x", 3600))
	line := abi.LogLine{Type: abi.PayloadLogLine, Stream: abi.StreamStdout, Line: "a <b> & \"c\"", Offset: 9}
	for name, p := range map[string]any{
		"output":   live.Output("hi \x1b[1mthere\x1b[0m \xff\n"),
		"status":   abi.StatusPayload{Type: abi.PayloadStatus, Status: abi.StateConnected, Message: "<ok>"},
		"log-line": line,
		"raw":      json.RawMessage(line.AppendJSON(nil)),
		"joined":   live.Joined{[]byte(`{"type":"log-lines","lines":[`), line.AppendJSON(nil), []byte(`]}`)},
		"nil":      nil,
		"map":      map[string]any{"z": 1, "a": []int{1, 2}},
	} {
		for _, ct := range []abi.ContentType{abi.ContentANSI, abi.ContentText, abi.ContentRaw} {
			e := &live.Event{Seq: 42, Type: abi.EventData, Time: at, SessionID: "s_\u2028<id>", Payload: p}
			want, err := json.Marshal(e.Wire(ct))
			if err != nil {
				t.Fatal(err)
			}
			if got := e.JSON(ct); string(got) != string(want) {
				t.Errorf("%s %s:\n got %s\nwant %s", name, ct, got, want)
			}
		}
	}
}
