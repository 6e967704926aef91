package chatstore

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		in   string
		want Key
		str  string // canonical form ("" = in)
	}{
		// docs/conversations.md, Session keys
		{"agent:main:main", Key{Kind: KindMain, Agent: "main"}, ""},
		{"agent:main:dm:+15551234567", Key{Kind: KindDM, Agent: "main", Peer: "+15551234567"}, ""},
		{"agent:main:whatsapp:dm:+15551234567", Key{Kind: KindDM, Agent: "main", Channel: "whatsapp", Peer: "+15551234567"}, ""},
		{"agent:main:telegram:group:-123", Key{Kind: KindGroup, Agent: "main", Channel: "telegram", ID: "-123"}, ""},
		{"agent:main:discord:channel:456", Key{Kind: KindChannel, Agent: "main", Channel: "discord", ID: "456"}, ""},
		{"agent:main:discord:channel:456:thread:789", Key{Kind: KindChannel, Agent: "main", Channel: "discord", ID: "456", Thread: "789"}, ""},
		{"agent:main:slack:dm:u1:thread:1712345678.000100", Key{Kind: KindDM, Agent: "main", Channel: "slack", Peer: "u1", Thread: "1712345678.000100"}, ""},
		{"agent:main:subagent:550e8400-e29b-41d4-a716-446655440000", Key{Kind: KindSubagent, Agent: "main", ID: "550e8400-e29b-41d4-a716-446655440000"}, ""},
		{"agent:main:cron:nightly-report", Key{Kind: KindCron, Agent: "main", ID: "nightly-report"}, ""},
		{"hook:550e8400-e29b-41d4-a716-446655440000", Key{Kind: KindHook, ID: "550e8400-e29b-41d4-a716-446655440000"}, ""},
		// examples of the channel-less forms
		{"agent:default:main", Key{Kind: KindMain, Agent: "default"}, ""},
		{"agent:default:dm:user@telegram", Key{Kind: KindDM, Agent: "default", Peer: "user@telegram"}, ""},
		{"agent:default:subagent:550e8400-e29b", Key{Kind: KindSubagent, Agent: "default", ID: "550e8400-e29b"}, ""},
		{"agent:code-worker:main", Key{Kind: KindMain, Agent: "code-worker"}, ""},
		{"agent:default:group:team", Key{Kind: KindGroup, Agent: "default", ID: "team"}, ""},
		// the older cron form
		{"cron:job-1", Key{Kind: KindCron, Agent: "main", ID: "job-1"}, "agent:main:cron:job-1"},
		// normalization
		{"  AGENT:Main:MAIN ", Key{Kind: KindMain, Agent: "main"}, "agent:main:main"},
		{"agent:Code Worker!!:main", Key{Kind: KindMain, Agent: "code-worker"}, "agent:code-worker:main"},
		{"agent::main", Key{Kind: KindMain, Agent: "main"}, "agent:main:main"},
		{"agent:__x:main", Key{Kind: KindMain, Agent: "x"}, "agent:x:main"},
		{"agent:" + strings.Repeat("a", 70) + ":main", Key{Kind: KindMain, Agent: strings.Repeat("a", 64)}, "agent:" + strings.Repeat("a", 64) + ":main"},
		{"agent:main:Telegram:Group:-100ABC", Key{Kind: KindGroup, Agent: "main", Channel: "telegram", ID: "-100abc"}, "agent:main:telegram:group:-100abc"},
		// ids may hold ':' (Matrix rooms); only a last :thread:<id> without ':' is a thread
		{"agent:main:matrix:group:!room:example.org", Key{Kind: KindGroup, Agent: "main", Channel: "matrix", ID: "!room:example.org"}, ""},
		{"agent:main:matrix:group:!r:x.org:thread:t1", Key{Kind: KindGroup, Agent: "main", Channel: "matrix", ID: "!r:x.org", Thread: "t1"}, ""},
		{"agent:main:x:group:a:thread:b:c", Key{Kind: KindGroup, Agent: "main", Channel: "x", ID: "a:thread:b:c"}, ""},
		// other upstream shapes are kept
		{"agent:main:telegram:acct1:dm:42", Key{Kind: KindOther, Agent: "main", Rest: "telegram:acct1:dm:42"}, ""},
		{"agent:main:dm", Key{Kind: KindOther, Agent: "main", Rest: "dm"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			k, err := ParseKey(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if k != tc.want {
				t.Errorf("ParseKey = %+v, want %+v", k, tc.want)
			}
			want := tc.str
			if want == "" {
				want = tc.in
			}
			if k.String() != want {
				t.Errorf("String() = %q, want %q", k.String(), want)
			}
		})
	}
}

func TestParseKeyErrors(t *testing.T) {
	for _, in := range []string{"", "main", "global", "agent:main", "agent:main:", "hook:", "cron:", "agent:main:dm:a b", "agent:main:main\x00", "agent:\xff:main", "telegram:group:1"} {
		if k, err := ParseKey(in); !errors.Is(err, ErrKey) {
			t.Errorf("ParseKey(%q) = %+v, %v; want ErrKey", in, k, err)
		}
	}
}

func TestKeyConstructors(t *testing.T) {
	must := func(k Key, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return k.String()
	}
	group := func() Key {
		k, err := GroupKey("main", "telegram", "-123")
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	tests := []struct {
		got, want string
	}{
		{MainKey("").String(), "agent:main:main"},
		{MainKey("Ops Team").String(), "agent:ops-team:main"},
		{must(DMKey("main", DMScopeMain, "discord", "Bob")), "agent:main:main"},
		{must(DMKey("main", DMScopePerPeer, "discord", "Bob")), "agent:main:dm:bob"},
		{must(DMKey("main", DMScopePerChannelPeer, "Discord", "Bob")), "agent:main:discord:dm:bob"},
		{must(GroupKey("main", "telegram", "-123")), "agent:main:telegram:group:-123"},
		{must(ChannelKey("main", "discord", "456")), "agent:main:discord:channel:456"},
		{must(ThreadKey(group(), "99")), "agent:main:telegram:group:-123:thread:99"},
		{must(SubagentKey("default", "550E8400-E29B")), "agent:default:subagent:550e8400-e29b"},
		{must(CronKey("main", "nightly")), "agent:main:cron:nightly"},
		{must(HookKey("abc")), "hook:abc"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
		k, err := ParseKey(tc.got)
		if err != nil || k.String() != tc.got {
			t.Errorf("ParseKey(%q) = %q, %v", tc.got, k.String(), err)
		}
	}
	thread, _ := ThreadKey(group(), "1")
	bad := []func() (Key, error){
		func() (Key, error) { return DMKey("main", DMScopePerPeer, "", "") },
		func() (Key, error) { return DMKey("main", DMScopePerChannelPeer, "", "bob") },
		func() (Key, error) { return DMKey("main", "per-galaxy", "x", "bob") },
		func() (Key, error) { return GroupKey("main", "bad channel!", "1") },
		func() (Key, error) { return GroupKey("main", "telegram", "a:thread:b") },
		func() (Key, error) { return ChannelKey("main", "discord", " ") },
		func() (Key, error) { return ThreadKey(MainKey("main"), "1") },
		func() (Key, error) { return ThreadKey(thread, "2") },
		func() (Key, error) { return ThreadKey(group(), "a:b") },
		func() (Key, error) { return SubagentKey("main", "") },
		func() (Key, error) { return CronKey("main", "a b") },
		func() (Key, error) { return HookKey("") },
	}
	for i, f := range bad {
		if k, err := f(); err == nil {
			t.Errorf("case %d: built %q", i, k)
		}
	}
	if _, err := ParseDMScope("per-peer"); err != nil {
		t.Error(err)
	}
	if _, err := ParseDMScope("per-room"); err == nil {
		t.Error("ParseDMScope accepted per-room")
	}
}

func TestNormalizeAgentID(t *testing.T) {
	for in, want := range map[string]string{
		"":               "main",
		"Main":           "main",
		"code_worker":    "code_worker",
		"-x-":            "x",
		"a..b//c":        "a-b-c",
		"ÜBER agent":     "ber-agent",
		"!!!":            "main",
		"_a":             "a",
		"a_":             "a_",
		"x" + "\u00e9y":  "x-y",
		"0start":         "0start",
		"UPPER-and-low_": "upper-and-low_",
	} {
		if got := NormalizeAgentID(in); got != want {
			t.Errorf("NormalizeAgentID(%q) = %q, want %q", in, got, want)
		}
		if got := NormalizeAgentID(want); got != want && want != "main" {
			t.Errorf("not idempotent on %q: %q", want, got)
		}
	}
}

// FuzzParseKey: parsing never panics, and a parsed key prints to a string that parses back to
// the same key and prints the same (parse → String → parse is stable).
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"agent:main:main", "agent:main:dm:bob", "agent:main:telegram:group:-1:thread:2", "hook:x",
		"cron:y", "agent::main", "agent:A B:c:d", "agent:main:x:dm::thread:", "agent:main:matrix:group:!a:b",
		"agent:main:dm:a:thread:b:thread:c", "AGENT:İ:main", "agent:main:subagent:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, ErrKey) {
				t.Fatalf("ParseKey(%q) error %v is not ErrKey", s, err)
			}
			return
		}
		str := k.String()
		k2, err := ParseKey(str)
		if err != nil {
			t.Fatalf("ParseKey(%q) = %+v prints %q, which does not parse: %v", s, k, str, err)
		}
		if k2 != k || k2.String() != str {
			t.Fatalf("unstable: %q → %+v → %q → %+v", s, k, str, k2)
		}
		if k.Kind != KindHook && !validToken(k.Agent) {
			t.Fatalf("agent %q of %q is not normalized", k.Agent, s)
		}
	})
}
