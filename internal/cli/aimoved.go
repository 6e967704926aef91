package cli

import (
	"context"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// maxMoves bounds how many restarts a session id is followed through.
const maxMoves = 16

// followMoved is the session that took sid's place when a gateway restart closed it and the
// next gateway opened its conversation again (the closed one's movedTo), else sid. A moved
// active session is replaced in the CLI context, so later commands go to the new one too.
func (a *app) followMoved(ctx context.Context, sid string) string {
	act, _ := a.activeID(abi.TypeAIChat)
	cur := sid
	var last abi.Session
	for range maxMoves {
		s, err := a.client().Get(ctx, cur)
		if err != nil || !s.Status.Final() {
			break
		}
		to, _ := s.Metadata[live.MovedToField].(string)
		if to == "" {
			break
		}
		cur = to
		if next, err := a.client().Get(ctx, to); err == nil {
			last = next
		}
	}
	if cur != sid && act.SessionID == sid && last.SessionID == cur {
		_ = a.setActive(ctx, last) // best effort: the message goes to cur either way
	}
	return cur
}
