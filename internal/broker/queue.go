package broker

import (
	"context"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

// Queues is the store of the ai-chat message queues, as its users (the ai-chat kind, the
// triggers, the gateway) see it (Queue is the name of a queue mode). Store (SQLite, one node)
// and jetstore.Queues (NATS JetStream, a cluster) implement it; brokertest.Run is the contract
// both pass.
//
// A message id is stored once: a second store of it, on any key and from any caller, changes
// nothing. A message leaves the queued state once, by Deliver, Refuse, Drop or an interrupt's
// clearing, and never comes back to it.
type Queues interface {
	// Enqueue is EnqueueWith with no options.
	Enqueue(ctx context.Context, key string, mode Mode, content, from string) (Message, error)
	// EnqueueWith stores a message for key and returns it once it is durable (Message.Cleared:
	// what an interrupt cleared; Message.Duplicate: o.ID was stored before).
	EnqueueWith(ctx context.Context, key string, mode Mode, content, from string, o EnqueueOptions) (Message, error)
	// EnqueueOnce stores a message under the caller's id unless one with that id exists.
	EnqueueOnce(ctx context.Context, id, key string, mode Mode, content, from string) (fresh bool, err error)
	// Announce stores a subagent run's announcement, a followup under id, once.
	Announce(ctx context.Context, id, key, content, from, runID string) (fresh bool, err error)
	// Has reports whether a message with the id was ever stored.
	Has(ctx context.Context, id string) (bool, error)
	// Get returns the stored messages of the ids (any state), in store order.
	Get(ctx context.Context, ids []string) ([]Message, error)
	// Queued returns key's queued messages in delivery order (priority, then store order).
	Queued(ctx context.Context, key string) ([]Message, error)
	// History returns key's last n messages whatever their state, newest last.
	History(ctx context.Context, key string, n int) ([]Message, error)
	// Keys returns the conversations that have queued messages, sorted.
	Keys(ctx context.Context) ([]string, error)
	// Deliver records that the messages went into the transcript as entry entryID and returns
	// the ids this call moved out of the queued state: of callers delivering one message at
	// once, exactly one has it in its answer.
	Deliver(ctx context.Context, ids []string, entryID string) (won []string, err error)
	// Delivered is Deliver for a caller that does not need to know which it moved.
	Delivered(ctx context.Context, ids []string, entryID string) error
	// Refuse records that a reject message was refused, unless it left the queued state
	// before: refused reports which.
	Refuse(ctx context.Context, id, reason string) (refused bool, err error)
	// Drop records that a collect cap dropped the messages (those still queued).
	Drop(ctx context.Context, ids []string, reason string) error
	// Close releases the store (not the messages: a store opened again has them).
	Close() error
}

var _ Queues = (*Store)(nil)

// Prepare checks a message a store is asked to keep and fills in what every store gives it
// alike: its id (a new one unless o.ID), priority, mode and creation time. Seq is the store's.
func Prepare(key string, mode Mode, content, from string, o EnqueueOptions, now time.Time) (Message, error) {
	switch {
	case key == "":
		return Message{}, abi.Errorf(abi.CodeInvalidArgument, "", "a queued message needs a conversation key")
	case strings.TrimSpace(content) == "":
		return Message{}, abi.Errorf(abi.CodeInvalidArgument, "", "an empty message")
	case len(content) > MaxContent+MaxHeader:
		return Message{}, abi.Errorf(abi.CodeInvalidArgument, "", "a message of %d bytes is over the limit of %d", len(content), MaxContent+MaxHeader)
	case len(o.ID) > MaxID:
		return Message{}, abi.Errorf(abi.CodeInvalidArgument, "", "a message id of %d bytes is over the limit of %d", len(o.ID), MaxID)
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return Message{}, err
	}
	id := o.ID
	if id == "" {
		id = newID()
	}
	m := Message{ID: id, Key: key, Mode: mode, Content: content, From: from, State: StateQueued,
		CreatedMs: now.UnixMilli(), Created: abi.FormatTime(now), RollsBack: o.RollsBack, Origin: o.Origin}
	if mode.Aborts() || (mode == SteerBacklog && o.Steer) {
		m.Priority = 1
	}
	return m, nil
}

// MaxID bounds a message id a caller chooses.
const MaxID = 200

// ErrBusy is the error of a reject message (EnqueueOptions.IfIdle) while n messages wait.
func ErrBusy(n int) error {
	return abi.Errorf(abi.CodeBusy, "", "the conversation is busy: %d message(s) wait to be delivered (queue mode reject refuses a message until it is free)", n)
}

// ClearedBy is the reason an interrupt's clearing gives the messages it cleared.
func ClearedBy(interruptID string) string { return "cleared by interrupt " + interruptID }

// AnnounceOrigin is the origin Announce gives the message of subagent run runID.
func AnnounceOrigin(runID string) abi.Origin { return abi.Origin{Kind: abi.OriginSubagent, ID: runID} }

// Notifier is Queues shared by several processes (a cluster's): OnQueued has fn told the
// conversation of every message queued from then on, whichever process stored it, so the
// process whose session delivers that conversation wakes.
type Notifier interface {
	OnQueued(fn func(key string))
}
