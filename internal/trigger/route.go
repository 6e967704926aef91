package trigger

import (
	"strings"

	"github.com/google/uuid"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
)

// jobOrigin is where a job's firing comes from: the cron job or the heartbeat, by id.
func jobOrigin(j Job) abi.Origin {
	kind := abi.OriginCron
	if j.Kind == KindHeartbeat {
		kind = abi.OriginHeartbeat
	}
	return abi.Origin{Kind: kind, ID: j.ID}
}

// routeHook is the conversation a webhook call goes to, and the call's origin. A hook added
// with --session sends every call there. Otherwise a call that names the chat it relays
// (channel and peer; chatType direct, the default, or group) is routed as seed 004 routes a
// channel's messages: a direct message by the hook's DM scope (main: every channel's DMs in
// agent:<agent>:main, one conversation), a group to its own agent:<agent>:<channel>:group:<peer>.
// A call that names no chat gets a new conversation hook:<uuid>.
func routeHook(h Hook, b hookBody) (string, abi.Origin, error) {
	o := abi.Origin{Kind: abi.OriginWebhook, ID: h.ID, Channel: strings.ToLower(strings.TrimSpace(b.Channel)),
		Peer: strings.TrimSpace(b.Peer), ChatType: strings.ToLower(strings.TrimSpace(b.ChatType))}
	named := o.Channel != "" || o.Peer != "" || o.ChatType != ""
	if named {
		if o.Channel == "" || o.Peer == "" {
			return "", abi.Origin{}, abi.Errorf(abi.CodeInvalidArgument, "", "a call that names its chat needs both channel and peer (and chatType direct or group)")
		}
		if o.ChatType == "" {
			o.ChatType = "direct"
		}
		if o.ChatType != "direct" && o.ChatType != "group" {
			return "", abi.Origin{}, abi.Errorf(abi.CodeInvalidArgument, "", "chatType %q: want direct or group", b.ChatType)
		}
	}
	if h.SessionKey != "" {
		return h.SessionKey, o, nil
	}
	if !named {
		return "hook:" + uuid.NewString(), o, nil
	}
	agent := h.Agent
	if agent == "" {
		agent = chatstore.DefaultAgent
	}
	var key chatstore.Key
	var err error
	if o.ChatType == "group" {
		key, err = chatstore.GroupKey(agent, o.Channel, o.Peer)
	} else {
		scope, serr := chatstore.ParseDMScope(h.DMScope)
		if serr != nil {
			return "", abi.Origin{}, abi.Errorf(abi.CodeInvalidArgument, "", "the hook's DM scope: %v", serr)
		}
		key, err = chatstore.DMKey(agent, scope, o.Channel, o.Peer)
	}
	if err != nil {
		return "", abi.Origin{}, abi.Errorf(abi.CodeInvalidArgument, "", "route the call: %v", err)
	}
	return key.String(), o, nil
}
