package orchestrate

import (
	"context"
	"fmt"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/broker"
	"github.com/nexus-run/nexus/internal/chatstore"
)

// Delivery is a message for a conversation that comes from outside its sessions: a trigger
// (cron, heartbeat, webhook) or another agent.
type Delivery struct {
	// Key is the conversation (a session key).
	Key string
	// Text is the message; Mode its queue mode there (default the conversation's).
	Text, Mode string
	// ID, when set, makes the delivery idempotent: a message with this id is stored once, so
	// a trigger retried after a crash does not fire twice.
	ID string
	// From names the sender (an agent's key, cron:<job>, hook:<id>), kept with the message.
	From string
	// Origin is where the message came from (webhook and its id, cron job, heartbeat,
	// another agent's key...): its transcript entry and sessions.json record it.
	Origin abi.Origin
	// Options open the conversation when it has none recorded (a new one); a conversation
	// that had a session is opened as that session was.
	Options abi.AIChatOptions
	// Powers, when set, bound a conversation opened with Options (another conversation's, for
	// a message it sends): they are recorded on it (PowersField) before it opens, so every
	// session on it gets at most these.
	Powers *Powers
}

// Delivered is what Deliver stored.
type Delivered struct {
	MessageID string `json:"messageId"`
	Key       string `json:"sessionKey"`
	// Duplicate: a message with the delivery's id was stored before; nothing new was.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Deliver stores a message durably in the conversation's queue, then makes sure a session
// delivers it: the conversation's live session if it has one, else a background session the
// gateway opens (and closes once the queue is empty).
func (k *Orchestrator) Deliver(ctx context.Context, d Delivery) (Delivered, error) {
	if k.Broker == nil || k.Sessions == nil || k.Host == nil {
		return Delivered{}, abi.Errorf(abi.CodeCapabilityUnsupported, "", "this gateway has no message queue")
	}
	parsed, err := chatstore.ParseKey(d.Key)
	if err != nil {
		return Delivered{}, abi.Errorf(abi.CodeInvalidArgument, "", "%v", err)
	}
	key := parsed.String()
	mode, err := broker.ParseMode(d.Mode)
	if err != nil {
		return Delivered{}, err
	}
	// The mode applies to a trigger's firing as to a message sent (a steer aborts, a reject
	// is refused while the conversation is busy); a firing stored before changes nothing.
	m, err := k.Host.Enqueue(ctx, d.ID, key, mode, d.Text, d.From, d.Origin)
	if err != nil {
		return Delivered{}, err
	}
	out := Delivered{Key: key, MessageID: m.ID, Duplicate: m.Duplicate}
	if err := k.Host.Open(ctx, key, d.Options, d.Powers); err != nil {
		// The message is stored: the next session on the key, or the next gateway, delivers it.
		return out, fmt.Errorf("message %s is queued, but no session could be opened to deliver it: %w", out.MessageID, err)
	}
	return out, nil
}
