package chatstore

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrKey is returned for a string that is not a session key.
var ErrKey = errors.New("invalid session key")

// KeyKind is the shape of a session key.
type KeyKind string

// Key kinds (docs/conversations.md, Session keys).
const (
	KindMain     KeyKind = "main"     // agent:<a>:main
	KindDM       KeyKind = "dm"       // agent:<a>:dm:<peer>, agent:<a>:<channel>:dm:<peer>
	KindGroup    KeyKind = "group"    // agent:<a>:<channel>:group:<id>
	KindChannel  KeyKind = "channel"  // agent:<a>:<channel>:channel:<id>
	KindSubagent KeyKind = "subagent" // agent:<a>:subagent:<uuid>
	KindCron     KeyKind = "cron"     // agent:<a>:cron:<jobId>
	KindHook     KeyKind = "hook"     // hook:<uuid>
	// KindOther is any other agent:<a>:<rest> key (upstream has more shapes, such as
	// per-account DMs); it is kept as written, lowercased.
	KindOther KeyKind = "other"
)

// DefaultAgent is the agent id used when a key names none (or only invalid characters).
const DefaultAgent = "main"

// Key is a parsed, normalized session key. The zero Key is not valid; build keys with ParseKey
// or the constructors.
type Key struct {
	Kind KeyKind
	// Agent is the normalized agent id ("" only for hook keys).
	Agent string
	// Channel is the channel of per-channel DMs, groups and channels ("" for the older
	// channel-less forms agent:<a>:group:<id> and agent:<a>:channel:<id>).
	Channel string
	// Peer is the DM peer.
	Peer string
	// ID is the group or channel id, subagent uuid, cron job id or hook uuid.
	ID string
	// Thread is the thread id of a DM, group or channel thread.
	Thread string
	// Rest is everything after agent:<a>: for KindOther.
	Rest string
}

// DMScope decides how direct messages map to sessions.
type DMScope string

// DM scopes.
const (
	// DMScopeMain: every DM from any channel lands in agent:<a>:main (the default).
	DMScopeMain DMScope = "main"
	// DMScopePerPeer: one session per peer across channels, agent:<a>:dm:<peer>.
	DMScopePerPeer DMScope = "per-peer"
	// DMScopePerChannelPeer: one session per channel and peer, agent:<a>:<channel>:dm:<peer>.
	DMScopePerChannelPeer DMScope = "per-channel-peer"
)

// ParseDMScope validates a scope name ("" is DMScopeMain).
func ParseDMScope(s string) (DMScope, error) {
	switch DMScope(s) {
	case "", DMScopeMain:
		return DMScopeMain, nil
	case DMScopePerPeer, DMScopePerChannelPeer:
		return DMScope(s), nil
	}
	return "", fmt.Errorf("%w: unknown DM scope %q (want main, per-peer or per-channel-peer)", ErrInvalid, s)
}

// NormalizeAgentID lowercases id and turns every run of characters outside [a-z0-9_-] into
// one '-', drops leading '-' and '_' and trailing '-', and cuts it to 64 characters. An empty
// result is DefaultAgent.
func NormalizeAgentID(id string) string { return normalizeToken(id, DefaultAgent) }

func normalizeToken(s, def string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	var b strings.Builder
	dash := false
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' || r == '-' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.TrimLeft(b.String(), "-_")
	out = strings.TrimRight(out, "-")
	if len(out) > 64 {
		out = strings.TrimRight(out[:64], "-")
	}
	if out == "" {
		return def
	}
	return out
}

// validToken reports whether s is already a normalized agent or channel id.
func validToken(s string) bool {
	return s != "" && normalizeToken(s, "") == s
}

// normalizeID lowercases an id segment (peer, group, channel, job, uuid) and checks it: not
// empty, valid UTF-8, no whitespace or control characters.
func normalizeID(what, s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return "", fmt.Errorf("%w: empty %s", ErrKey, what)
	}
	if err := checkChars(s); err != nil {
		return "", fmt.Errorf("%w: %s %q: %w", ErrKey, what, s, err)
	}
	return s, nil
}

func checkChars(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("contains %U", r)
		}
	}
	return nil
}

// ParseKey parses and normalizes a session key: lowercase, agent id normalized (see
// NormalizeAgentID). Besides the forms of docs/conversations.md, Session keys it accepts older forms:
// `cron:<jobId>` becomes agent:main:cron:<jobId>, and the channel-less
// `agent:<a>:group:<id>` / `agent:<a>:channel:<id>` are kept as written. Other
// `agent:<a>:<rest>` shapes parse as KindOther. Ids may contain ':'; a trailing
// `:thread:<id>` (no ':' in the thread id) of a DM, group or channel key is its thread.
func ParseKey(s string) (Key, error) {
	orig := s
	if !utf8.ValidString(s) {
		return Key{}, fmt.Errorf("%w %q: not valid UTF-8", ErrKey, orig)
	}
	s = strings.ToLower(strings.TrimSpace(s))
	// the agent id is normalized, everything else must be clean
	if i := strings.IndexByte(s, ':'); i < 0 || !strings.HasPrefix(s, "agent:") {
		if err := checkChars(s); err != nil {
			return Key{}, fmt.Errorf("%w %q: %w", ErrKey, orig, err)
		}
	} else if _, rest, _ := strings.Cut(s[len("agent:"):], ":"); checkChars(rest) != nil {
		return Key{}, fmt.Errorf("%w %q: %w", ErrKey, orig, checkChars(rest))
	}
	switch {
	case strings.HasPrefix(s, "hook:"):
		id := s[len("hook:"):]
		if id == "" {
			return Key{}, fmt.Errorf("%w %q: empty hook id", ErrKey, orig)
		}
		return Key{Kind: KindHook, ID: id}, nil
	case strings.HasPrefix(s, "cron:"):
		id := s[len("cron:"):]
		if id == "" {
			return Key{}, fmt.Errorf("%w %q: empty cron job id", ErrKey, orig)
		}
		return Key{Kind: KindCron, Agent: DefaultAgent, ID: id}, nil
	case !strings.HasPrefix(s, "agent:"):
		return Key{}, fmt.Errorf("%w %q: want agent:<agentId>:<rest>, hook:<uuid> or cron:<jobId>", ErrKey, orig)
	}
	agent, rest, ok := strings.Cut(s[len("agent:"):], ":")
	if !ok || rest == "" {
		return Key{}, fmt.Errorf("%w %q: nothing after the agent id", ErrKey, orig)
	}
	k := Key{Agent: NormalizeAgentID(agent)}
	if rest == "main" {
		k.Kind = KindMain
		return k, nil
	}
	head, body, _ := strings.Cut(rest, ":")
	switch head {
	case "subagent", "cron":
		if body != "" {
			k.Kind, k.ID = KeyKind(head), body
			return k, nil
		}
	case "dm", "group", "channel":
		if body != "" {
			k.Kind = KeyKind(head)
			k.setBody(body)
			return k, nil
		}
	default:
		ch := head
		kind, body2, ok := strings.Cut(body, ":")
		if ok && body2 != "" && validToken(ch) && (kind == "dm" || kind == "group" || kind == "channel") {
			k.Kind, k.Channel = KeyKind(kind), ch
			k.setBody(body2)
			return k, nil
		}
	}
	k.Kind, k.Rest = KindOther, rest
	return k, nil
}

// setBody splits "<id>[:thread:<thread>]" into the id (peer for DMs) and thread.
func (k *Key) setBody(body string) {
	id := body
	if i := strings.LastIndex(body, ":thread:"); i > 0 {
		if th := body[i+len(":thread:"):]; th != "" && !strings.Contains(th, ":") {
			id, k.Thread = body[:i], th
		}
	}
	if k.Kind == KindDM {
		k.Peer = id
	} else {
		k.ID = id
	}
}

// String returns the canonical key.
func (k Key) String() string {
	var b strings.Builder
	switch k.Kind {
	case KindHook:
		return "hook:" + k.ID
	case "":
		return ""
	}
	b.WriteString("agent:")
	b.WriteString(k.Agent)
	b.WriteByte(':')
	switch k.Kind {
	case KindMain:
		b.WriteString("main")
	case KindSubagent, KindCron:
		b.WriteString(string(k.Kind) + ":" + k.ID)
	case KindDM, KindGroup, KindChannel:
		if k.Channel != "" {
			b.WriteString(k.Channel + ":")
		}
		b.WriteString(string(k.Kind) + ":")
		if k.Kind == KindDM {
			b.WriteString(k.Peer)
		} else {
			b.WriteString(k.ID)
		}
		if k.Thread != "" {
			b.WriteString(":thread:" + k.Thread)
		}
	default:
		b.WriteString(k.Rest)
	}
	return b.String()
}

// ChatType is the sessions.json chatType of the key: direct for main and DM sessions, group,
// channel, or "" for other kinds.
func (k Key) ChatType() string {
	switch k.Kind {
	case KindMain, KindDM:
		return "direct"
	case KindGroup:
		return "group"
	case KindChannel:
		return "channel"
	}
	return ""
}

// MainKey is agent:<agent>:main, the main session (and, with DMScopeMain, every DM's).
func MainKey(agent string) Key {
	return Key{Kind: KindMain, Agent: NormalizeAgentID(agent)}
}

// DMKey routes a direct message from peer on channel according to scope.
func DMKey(agent string, scope DMScope, channel, peer string) (Key, error) {
	switch scope {
	case DMScopeMain, "":
		return MainKey(agent), nil
	case DMScopePerPeer:
		channel = ""
	case DMScopePerChannelPeer:
		if !validChannel(channel) {
			return Key{}, fmt.Errorf("%w: channel %q (want [a-z0-9][a-z0-9_-]*)", ErrKey, channel)
		}
	default:
		return Key{}, fmt.Errorf("%w: unknown DM scope %q", ErrKey, scope)
	}
	p, err := normalizeID("peer", peer)
	if err != nil {
		return Key{}, err
	}
	if strings.Contains(p, ":thread:") {
		return Key{}, fmt.Errorf("%w: peer %q contains %q", ErrKey, p, ":thread:")
	}
	return Key{Kind: KindDM, Agent: NormalizeAgentID(agent), Channel: strings.ToLower(channel), Peer: p}, nil
}

// GroupKey is agent:<agent>:<channel>:group:<id>.
func GroupKey(agent, channel, id string) (Key, error) {
	return roomKey(KindGroup, agent, channel, id)
}

// ChannelKey is agent:<agent>:<channel>:channel:<id>.
func ChannelKey(agent, channel, id string) (Key, error) {
	return roomKey(KindChannel, agent, channel, id)
}

func validChannel(ch string) bool { return validToken(strings.ToLower(ch)) }

func roomKey(kind KeyKind, agent, channel, id string) (Key, error) {
	if !validChannel(channel) {
		return Key{}, fmt.Errorf("%w: channel %q (want [a-z0-9][a-z0-9_-]*)", ErrKey, channel)
	}
	n, err := normalizeID(string(kind)+" id", id)
	if err != nil {
		return Key{}, err
	}
	if strings.Contains(n, ":thread:") {
		return Key{}, fmt.Errorf("%w: %s id %q contains %q", ErrKey, kind, n, ":thread:")
	}
	return Key{Kind: kind, Agent: NormalizeAgentID(agent), Channel: strings.ToLower(channel), ID: n}, nil
}

// ThreadKey is parent's key with :thread:<threadID> appended. The parent must be a DM, group
// or channel key without a thread; the thread id must not contain ':'.
func ThreadKey(parent Key, threadID string) (Key, error) {
	switch parent.Kind {
	case KindDM, KindGroup, KindChannel:
	default:
		return Key{}, fmt.Errorf("%w: a %s key has no threads", ErrKey, parent.Kind)
	}
	if parent.Thread != "" {
		return Key{}, fmt.Errorf("%w: %s is already a thread", ErrKey, parent)
	}
	th, err := normalizeID("thread id", threadID)
	if err != nil {
		return Key{}, err
	}
	if strings.Contains(th, ":") {
		return Key{}, fmt.Errorf("%w: thread id %q contains ':'", ErrKey, th)
	}
	parent.Thread = th
	return parent, nil
}

// SubagentKey is agent:<agent>:subagent:<id> (id: the spawn's uuid).
func SubagentKey(agent, id string) (Key, error) {
	n, err := normalizeID("subagent id", id)
	if err != nil {
		return Key{}, err
	}
	return Key{Kind: KindSubagent, Agent: NormalizeAgentID(agent), ID: n}, nil
}

// CronKey is agent:<agent>:cron:<jobID>.
func CronKey(agent, jobID string) (Key, error) {
	n, err := normalizeID("cron job id", jobID)
	if err != nil {
		return Key{}, err
	}
	return Key{Kind: KindCron, Agent: NormalizeAgentID(agent), ID: n}, nil
}

// HookKey is hook:<id> (id: the webhook's uuid).
func HookKey(id string) (Key, error) {
	n, err := normalizeID("hook id", id)
	if err != nil {
		return Key{}, err
	}
	return Key{Kind: KindHook, ID: n}, nil
}
