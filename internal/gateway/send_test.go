package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/live"
)

// TestSendAnswer: a send's answer is the ABI's, byte for byte: afterSeq is the session's newest
// event before the input was delivered, and messageId is there when the kind queued the input
// (ai-chat), absent otherwise.
func TestSendAnswer(t *testing.T) {
	for _, tc := range []struct {
		create, want string
	}{
		{`{"type":"terminal"}`, `{"afterSeq":%d,"bytes":2,"sessionId":%q,"status":"ok"}`},
		{`{"type":"ai-chat"}`, `{"afterSeq":%d,"bytes":2,"messageId":"fake-1","sessionId":%q,"status":"ok"}`},
	} {
		t.Run(tc.create, func(t *testing.T) {
			e := newEnv(t, "", live.Config{})
			s := e.create(t, tc.create)
			last, err := e.reg.LastSeq(context.Background(), s.SessionID)
			if err != nil || last == 0 {
				t.Fatalf("last seq %d: %v", last, err)
			}
			rec := e.do(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/send", `{"data":"hi"}`)
			if want := fmt.Sprintf(tc.want, last, s.SessionID); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != want {
				t.Fatalf("send: %d %s, want %s", rec.Code, rec.Body, want)
			}
		})
	}
}
