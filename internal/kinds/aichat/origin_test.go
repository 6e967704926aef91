package aichat_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/chatstore"
	"github.com/nexus-run/nexus/internal/kinds/aichat"
	"github.com/nexus-run/nexus/internal/live"
	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/transcript"
	"github.com/nexus-run/nexus/internal/trigger"
)

// userOrigins are the origins the user message entries of key's transcript record
// (nexusOrigin), in order; an entry without one is the zero origin.
func userOrigins(t *testing.T, e *env, key string) []abi.Origin {
	t.Helper()
	sh, err := e.chats.Show(context.Background(), key)
	if err != nil {
		return nil
	}
	f, err := transcript.Open(sh.File)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // the conversation is there, its first entry not yet
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []abi.Origin
	for _, en := range f.Entries {
		if en.Type != "message" || en.Role != "user" {
			continue
		}
		raw, err := f.Raw(en)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Origin abi.Origin `json:"nexusOrigin"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v.Origin)
	}
	return out
}

// originModel sends to the worker agent on "tell the worker", spawns a subagent on
// "delegate", acknowledges an announcement, and echoes the rest.
func originModel(req chatRequest, w *sse) {
	last := req.last()
	switch {
	case last.Role == "tool":
		w.text("ok")
	case strings.HasPrefix(req.lastUser(), aichat.AnnouncePrefix):
		w.text("got it")
	case req.lastUser() == "tell the worker":
		w.call("call_send", "sessions_send", map[string]any{"agent": "worker", "message": "ping"})
	case req.lastUser() == "delegate":
		w.call("call_spawn", "sessions_spawn", map[string]any{"task": "count the files", "label": "counter", "cleanup": "keep"})
	default:
		w.text("echo: " + req.lastUser())
	}
}

// triggers is a trigger service on e's state delivering through e's kind, as nexus serve
// wires them.
func (e *env) triggers(t *testing.T) *trigger.Service {
	t.Helper()
	st, err := trigger.OpenStore(context.Background(), trigger.Path(e.state), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &trigger.Service{Store: st, Deliver: func(ctx context.Context, d trigger.Delivery) (string, string, error) {
		out, err := e.k.Deliver(ctx, aichat.Delivery{Key: d.Key, Text: d.Text, Mode: d.Mode, ID: d.ID, From: d.From, Origin: d.Origin, Options: e.options()})
		return out.MessageID, out.Key, err
	}}
}

// callHook calls the hook id with a JSON body.
func callHook(t *testing.T, svc *trigger.Service, id, secret string, body map[string]any) trigger.HookResult {
	t.Helper()
	b, _ := json.Marshal(body)
	res, err := svc.CallHook(context.Background(), trigger.HookCall{ID: id, Secret: secret, Body: b, ContentType: "application/json"})
	if err != nil {
		t.Fatalf("call hook %s: %v", id, err)
	}
	return res
}

// TestOriginRecorded: every message entering a conversation records where it came from, in
// its transcript entry (nexusOrigin) and in sessions.json (origin, lastChannel), whichever
// way it came: a send through the registry (the CLI's, the console's), a webhook (naming a
// chat or not), a cron job, a heartbeat, another agent's message, a subagent's task and its
// announcement.
func TestOriginRecorded(t *testing.T) {
	ctx := context.Background()
	type sent struct {
		key  string
		want abi.Origin
	}
	for _, tc := range []struct {
		name string
		send func(t *testing.T, e *env, r *live.Registry) []sent
	}{
		{"cli", func(t *testing.T, e *env, r *live.Registry) []sent {
			s := e.open(t, r, "agent:main:test:cli", "yolo")
			// A send with no gateway in between (the local transport) is the CLI's.
			if _, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("hello")}); err != nil {
				t.Fatal(err)
			}
			return []sent{{"agent:main:test:cli", abi.Origin{Kind: abi.OriginCLI}}}
		}},
		{"console", func(t *testing.T, e *env, r *live.Registry) []sent {
			s := e.open(t, r, "agent:main:test:console", "yolo")
			if _, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("hello"), Origin: abi.Origin{Kind: abi.OriginConsole}}); err != nil {
				t.Fatal(err)
			}
			return []sent{{"agent:main:test:console", abi.Origin{Kind: abi.OriginConsole}}}
		}},
		{"webhook", func(t *testing.T, e *env, _ *live.Registry) []sent {
			svc := e.triggers(t)
			h, err := svc.Store.AddHook(ctx, trigger.Hook{ID: "ci"})
			if err != nil {
				t.Fatal(err)
			}
			res := callHook(t, svc, "ci", h.Secret, map[string]any{"message": "the build failed"})
			if !strings.HasPrefix(res.SessionKey, "hook:") {
				t.Fatalf("a call naming no chat went to %s", res.SessionKey)
			}
			return []sent{{res.SessionKey, abi.Origin{Kind: abi.OriginWebhook, ID: "ci"}}}
		}},
		{"webhook with a channel and a peer", func(t *testing.T, e *env, _ *live.Registry) []sent {
			svc := e.triggers(t)
			h, err := svc.Store.AddHook(ctx, trigger.Hook{ID: "relay"})
			if err != nil {
				t.Fatal(err)
			}
			res := callHook(t, svc, "relay", h.Secret, map[string]any{"message": "hi from telegram", "channel": "Telegram", "peer": "alice"})
			return []sent{{res.SessionKey, abi.Origin{Kind: abi.OriginWebhook, ID: "relay", Channel: "telegram", Peer: "alice", ChatType: "direct"}}}
		}},
		{"cron", func(t *testing.T, e *env, _ *live.Registry) []sent {
			svc := e.triggers(t)
			if _, err := svc.AddJob(ctx, trigger.Job{ID: "digest", Schedule: "0 9 * * 1-5", Message: "summarize"}); err != nil {
				t.Fatal(err)
			}
			_, key, err := svc.RunNow(ctx, "digest")
			if err != nil {
				t.Fatal(err)
			}
			return []sent{{key, abi.Origin{Kind: abi.OriginCron, ID: "digest"}}}
		}},
		{"heartbeat", func(t *testing.T, e *env, _ *live.Registry) []sent {
			svc := e.triggers(t)
			if _, err := svc.AddJob(ctx, trigger.Job{ID: "hb", EveryMs: (30 * time.Minute).Milliseconds(), Message: "anything new?",
				TriggerTarget: trigger.Target{SessionKey: "agent:main:test:hb"}}); err != nil {
				t.Fatal(err)
			}
			_, key, err := svc.RunNow(ctx, "hb")
			if err != nil {
				t.Fatal(err)
			}
			return []sent{{key, abi.Origin{Kind: abi.OriginHeartbeat, ID: "hb"}}}
		}},
		{"another agent", func(t *testing.T, e *env, r *live.Registry) []sent {
			writeAgent(t, e, "main", "allowed_targets = [\"agent:worker\"]\n")
			writeAgent(t, e, "worker", "level = \"yolo\"\n")
			s := e.open(t, r, "agent:main:test:manager", "yolo")
			send(t, r, s.SessionID, "tell the worker")
			return []sent{
				{"agent:main:test:manager", abi.Origin{Kind: abi.OriginCLI}},
				{"agent:worker:main", abi.Origin{Kind: abi.OriginAgent, ID: "agent:main:test:manager"}},
			}
		}},
		{"subagent", func(t *testing.T, e *env, r *live.Registry) []sent {
			s := e.open(t, r, "agent:main:test:parent", "yolo")
			send(t, r, s.SessionID, "delegate")
			var runs []chatstore.SubagentRunRecord
			testkit.Eventually(t, "the run", func() bool { runs = runsOf(t, e); return len(runs) == 1 })
			// The run and the child's sessions.json say where the requester's message came from.
			if ro := runs[0].RequesterOrigin; ro == nil || *ro != (chatstore.DeliveryContext{Channel: abi.OriginCLI}) {
				t.Fatalf("requesterOrigin %+v", ro)
			}
			testkit.Eventually(t, "the child's requesterOrigin", func() bool {
				sh, err := e.chats.Show(ctx, runs[0].ChildSessionKey)
				return err == nil && sh.Entry != nil && string(sh.Entry.Extra[aichat.RequesterOriginField]) == `{"channel":"cli"}`
			})
			return []sent{
				// The child's task comes from its requester, the announcement from the run.
				{runs[0].ChildSessionKey, abi.Origin{Kind: abi.OriginAgent, ID: "agent:main:test:parent"}},
				{"agent:main:test:parent", abi.Origin{Kind: abi.OriginSubagent, ID: runs[0].RunID}},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, originModel).withBroker(t)
			r := e.gateway(t)
			for _, s := range tc.send(t, e, r) {
				testkit.Eventually(t, "the message of "+s.want.String()+" in "+s.key, func() bool {
					got := userOrigins(t, e, s.key)
					return len(got) > 0 && got[len(got)-1] == s.want
				})
				// Its turn ends before the test does (a turn cut by the cleanup would send the
				// model a broken request).
				testkit.Eventually(t, "the turn of "+s.key+" ended", func() bool { return e.chatState(t, s.key) == aichat.StateIdle })
				sh, err := e.chats.Show(ctx, s.key)
				if err != nil {
					t.Fatal(err)
				}
				o := sh.Entry.Origin
				if o == nil || o.Label != s.want.String() || o.Surface != s.want.Kind || o.Provider != s.want.LastChannel() || o.ChatType != s.want.ChatType ||
					sh.Entry.LastChannel != s.want.LastChannel() {
					t.Fatalf("sessions.json of %s: origin %+v lastChannel %q, want %+v", s.key, o, sh.Entry.LastChannel, s.want)
				}
			}
		})
	}
}

// TestWebhookDMScope: webhook calls that name their chat are routed as seed 004 routes a
// channel's messages: direct messages from every channel merge into one conversation (the DM
// scope main), or one per peer, or one per channel and peer; groups stay apart. Each message
// keeps its own origin.
func TestWebhookDMScope(t *testing.T) {
	ctx := context.Background()
	type call struct{ channel, peer, chatType, wantKey string }
	for _, tc := range []struct {
		scope string
		calls []call
	}{
		{"", []call{
			{"discord", "alice", "", "agent:main:main"},
			{"telegram", "alice", "direct", "agent:main:main"},
			{"whatsapp", "bob", "", "agent:main:main"},
			{"telegram", "-123", "group", "agent:main:telegram:group:-123"},
			{"telegram", "-456", "group", "agent:main:telegram:group:-456"},
		}},
		{"per-peer", []call{
			{"discord", "alice", "", "agent:main:dm:alice"},
			{"telegram", "alice", "", "agent:main:dm:alice"},
			{"telegram", "bob", "", "agent:main:dm:bob"},
		}},
		{"per-channel-peer", []call{
			{"discord", "alice", "", "agent:main:discord:dm:alice"},
			{"telegram", "alice", "", "agent:main:telegram:dm:alice"},
		}},
	} {
		t.Run("scope "+tc.scope, func(t *testing.T) {
			e := newEnv(t, echo).withBroker(t)
			e.gateway(t)
			svc := e.triggers(t)
			h, err := svc.Store.AddHook(ctx, trigger.Hook{ID: "relay", DMScope: tc.scope})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]abi.Origin{}
			for i, c := range tc.calls {
				res := callHook(t, svc, "relay", h.Secret, map[string]any{"message": "m" + string(rune('0'+i)), "channel": c.channel, "peer": c.peer, "chatType": c.chatType})
				if res.SessionKey != c.wantKey {
					t.Fatalf("%s/%s/%s went to %s, want %s", c.channel, c.peer, c.chatType, res.SessionKey, c.wantKey)
				}
				ct := c.chatType
				if ct == "" {
					ct = "direct"
				}
				want[c.wantKey] = append(want[c.wantKey], abi.Origin{Kind: abi.OriginWebhook, ID: "relay", Channel: c.channel, Peer: c.peer, ChatType: ct})
				e.delivered(t, c.wantKey)
			}
			for key, origins := range want {
				testkit.Eventually(t, "every message of "+key, func() bool { return len(userOrigins(t, e, key)) == len(origins) })
				testkit.Eventually(t, "the turns of "+key+" ended", func() bool { return e.chatState(t, key) == aichat.StateIdle })
				if got := userOrigins(t, e, key); !equalOrigins(got, origins) {
					t.Fatalf("%s: origins %+v, want %+v", key, got, origins)
				}
			}
		})
	}
	// A call naming half a chat, or a chat type nexus does not route, is refused.
	e := newEnv(t, echo).withBroker(t)
	e.gateway(t)
	svc := e.triggers(t)
	h, err := svc.Store.AddHook(ctx, trigger.Hook{ID: "relay"})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []map[string]any{
		{"message": "x", "channel": "telegram"},
		{"message": "x", "peer": "alice"},
		{"message": "x", "channel": "telegram", "peer": "alice", "chatType": "broadcast"},
	} {
		b, _ := json.Marshal(body)
		if _, err := svc.CallHook(ctx, trigger.HookCall{ID: "relay", Secret: h.Secret, Body: b, ContentType: "application/json"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT", body, err)
		}
	}
	if _, err := svc.Store.AddHook(ctx, trigger.Hook{ID: "bad", DMScope: "per-planet"}); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Errorf("an unknown DM scope: %v", err)
	}
}

func equalOrigins(a, b []abi.Origin) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOriginsOfACollectedTurn: a turn delivering messages of several origins (collect)
// records the newest as nexusOrigin and each message's, in the order of nexusMessageIds, as
// nexusOrigins.
func TestOriginsOfACollectedTurn(t *testing.T) {
	e := newEnv(t, hangOrEcho).withBroker(t)
	r := e.gateway(t)
	key := "agent:main:test:collect-origins"
	s := e.open(t, r, key, "yolo")
	w := &watcher{r: r, id: s.SessionID}
	sendMode(t, r, s.SessionID, "hang", "")
	w.started(t)
	ctx := context.Background()
	var ids []string
	for _, kind := range []string{abi.OriginConsole, abi.OriginCLI} {
		res, err := r.Send(ctx, s.SessionID, live.SendRequest{Data: []byte("from " + kind), Mode: "collect", Origin: abi.Origin{Kind: kind}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.MessageID)
	}
	if _, err := r.Control(ctx, s.SessionID, abi.ControlRequest{Command: abi.CommandInterrupt}); err != nil {
		t.Fatal(err)
	}
	w.turnEnded(t) // the hang, interrupted
	w.turnEnded(t) // the collected messages
	sh, err := e.chats.Show(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := transcript.Open(sh.File)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var last json.RawMessage
	for _, en := range f.Entries {
		if en.Type == "message" && en.Role == "user" {
			if last, err = f.Raw(en); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got struct {
		IDs     []string     `json:"nexusMessageIds"`
		Origin  abi.Origin   `json:"nexusOrigin"`
		Origins []abi.Origin `json:"nexusOrigins"`
	}
	if err := json.Unmarshal(last, &got); err != nil {
		t.Fatal(err)
	}
	want := []abi.Origin{{Kind: abi.OriginConsole}, {Kind: abi.OriginCLI}}
	if !equalOrigins(got.Origins, want) || got.Origin != want[1] || strings.Join(got.IDs, ",") != strings.Join(ids, ",") {
		t.Fatalf("the collected entry %s", last)
	}
}
