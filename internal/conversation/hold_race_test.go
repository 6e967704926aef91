package conversation_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nexus-run/nexus/internal/conversation"
)

// TestHoldNewKeyAtOnce: callers holding a conversation no one has held yet, at once (two
// ai-chat sessions opened on a new key together), all hold it, one after the other, the same
// transcript: the one whose index entry came second takes the first's instead of failing
// "session already exists" (seen in TestClusterConversationOneOwner: INVALID_ARGUMENT for the
// second open of a new conversation on one node).
func TestHoldNewKeyAtOnce(t *testing.T) {
	s := conversation.New(conversation.Options{Dir: t.TempDir()})
	ctx := context.Background()
	for round := range 20 {
		key := fmt.Sprintf("agent:main:at-once-%d", round)
		var wg sync.WaitGroup
		ids := make([]string, 4)
		errs := make([]error, 4)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := s.Hold(ctx, key, conversation.HoldOptions{})
				if err != nil {
					errs[i] = err
					return
				}
				ids[i] = h.SessionID
				errs[i] = h.Close()
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: hold %d of a new key: %v", round, i, err)
			}
			if ids[i] != ids[0] {
				t.Fatalf("round %d: holds of one key got transcripts %v", round, ids)
			}
		}
	}
}
