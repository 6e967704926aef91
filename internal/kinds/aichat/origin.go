package aichat

import (
	"context"
	"fmt"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
)

// OriginField is the user message entry's field saying where its message came from (an
// abi.Origin); OriginsField lists each message's, in the order of MessageIDsField, when one
// turn delivers messages of several origins (collect). pi ignores fields it does not know.
const (
	OriginField  = "nexusOrigin"
	OriginsField = "nexusOrigins"
)

// sendOrigin is where a message sent to a session came from: what the gateway said, else the
// CLI (an in-process send has no gateway in between).
func sendOrigin(o abi.Origin) abi.Origin {
	if !o.IsZero() {
		return o
	}
	return abi.Origin{Kind: abi.OriginCLI}
}

// turnOrigins are the origins of the queued messages a turn delivers, in the order of ids. A
// message stored before origins were recorded has the zero origin.
func (k *Kind) turnOrigins(ctx context.Context, ids []string) ([]abi.Origin, error) {
	if len(ids) == 0 || k.Broker == nil {
		return nil, nil
	}
	ms, err := k.Broker.Get(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("the messages' origins: %w", err)
	}
	by := make(map[string]abi.Origin, len(ms))
	for _, m := range ms {
		by[m.ID] = m.Origin
	}
	out := make([]abi.Origin, len(ids))
	for i, id := range ids {
		out[i] = by[id]
	}
	return out, nil
}

// lastOrigin is the origin of the newest message of origins that has one.
func lastOrigin(origins []abi.Origin) abi.Origin {
	for i := len(origins) - 1; i >= 0; i-- {
		if !origins[i].IsZero() {
			return origins[i]
		}
	}
	return abi.Origin{}
}

// originFields are the user entry's fields for its messages' origins: the one origin, or,
// when they differ, the newest and every message's.
func originFields(origins []abi.Origin, extra map[string]any) map[string]any {
	last := lastOrigin(origins)
	if last.IsZero() {
		return extra
	}
	if extra == nil {
		extra = map[string]any{}
	}
	extra[OriginField] = last
	for _, o := range origins {
		if o != last {
			extra[OriginsField] = origins
			break
		}
	}
	return extra
}

// originPatch is the sessions.json patch of a turn delivering a message of o: origin (in
// OpenClaw's shape: provider the channel, surface the kind, from the peer or sender) and
// lastChannel. nil when o names nothing.
func originPatch(o abi.Origin) map[string]any {
	if o.IsZero() {
		return nil
	}
	from := o.Peer
	if from == "" {
		from = o.ID
	}
	return map[string]any{
		"origin":      chatstore.Origin{Label: o.String(), Provider: o.LastChannel(), Surface: o.Kind, ChatType: o.ChatType, From: from},
		"lastChannel": o.LastChannel(),
	}
}
