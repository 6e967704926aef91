package profile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/agent/profile"
)

func TestMainWithoutConfiguration(t *testing.T) {
	p, err := profile.Load(t.TempDir(), profile.Main)
	if err != nil || p.Configured || p.ID != "main" {
		t.Fatalf("%+v %v", p, err)
	}
	ps, err := profile.List(t.TempDir())
	if err != nil || len(ps) != 1 || ps[0].ID != "main" {
		t.Fatalf("%+v %v", ps, err)
	}
}

func TestSaveLoad(t *testing.T) {
	state := t.TempDir()
	p := &profile.Profile{ID: "worker", Settings: profile.Settings{Backend: "claude", Model: "m", Policy: profile.Policy{Level: "sandboxed", DisabledTools: []string{"bash"}}, Description: "reviews"},
		Identity: "You are Worker.", Soul: "Be brief."}
	if err := profile.Save(state, p, true); err != nil {
		t.Fatal(err)
	}
	if err := profile.Save(state, p, true); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("adding it twice: %v", err)
	}
	got, err := profile.Load(state, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Configured || got.Backend != "claude" || got.Level != "sandboxed" || got.Identity != "You are Worker." || got.Soul != "Be brief." || strings.Join(got.DisabledTools, ",") != "bash" {
		t.Fatalf("%+v", got)
	}
	for _, f := range []string{"", profile.ConfigFile, profile.IdentityFile} {
		fi, err := os.Stat(filepath.Join(state, "agents", "worker", f))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if f == "" {
			want = 0o700 | os.ModeDir
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", f, fi.Mode(), want)
		}
	}
	ps, err := profile.List(state)
	if err != nil || len(ps) != 2 || ps[1].ID != "worker" {
		t.Fatalf("%+v %v", ps, err)
	}
}

func TestRefused(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "agents")
	if err := os.MkdirAll(filepath.Join(dir, "typo"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "typo", profile.ConfigFile), []byte("modle = \"x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, profile.IdentityFile), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "filelink"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, profile.IdentityFile), filepath.Join(dir, "filelink", profile.IdentityFile)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, want string }{
		{"typo", "unknown key modle"},
		{"linked", "not a directory"},
		{"filelink", "IDENTITY.md"},
		{"nobody", "no agent"},
		{"../etc", "agent id"},
		{"UPPER", "agent id"},
		{"", "agent id"},
	} {
		_, err := profile.Load(state, tc.id)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v, want an error with %q", tc.id, err, tc.want)
		}
	}
}

func TestSystemPrompt(t *testing.T) {
	state, ws := t.TempDir(), t.TempDir()
	p := &profile.Profile{ID: "coder", Settings: profile.Settings{Description: "writes Go"}, Identity: "IDENTITY-TEXT", Soul: "SOUL-TEXT"}
	if err := profile.Save(state, p, true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "AGENTS.md"), []byte("AGENTS-RULES"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "NEXUS.md"), []byte(strings.Repeat("n", 70<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Load(state, "coder")
	if err != nil {
		t.Fatal(err)
	}
	prompt, rep, err := p.SystemPrompt(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"You are coder", ws, "writes Go", "IDENTITY-TEXT", "SOUL-TEXT", "AGENTS-RULES"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the prompt lacks %q", want)
		}
	}
	if strings.Index(prompt, "IDENTITY-TEXT") > strings.Index(prompt, "AGENTS-RULES") {
		t.Error("the workspace's rules come before the agent's identity")
	}
	var sources []string
	for _, part := range rep.Parts {
		sources = append(sources, part.Source)
	}
	if strings.Join(sources, ",") != "base,identity,soul,workspace,workspace" || len(rep.RulesFiles) != 2 || !rep.Parts[4].Truncated || rep.Parts[4].Chars != 64<<10 || rep.Chars != len(prompt) {
		t.Fatalf("report %+v", rep)
	}
}

// TestUnknownKeyNamesLine: a key agent.toml does not know is an error naming it and its line;
// so is a value of the wrong type.
func TestUnknownKeyNamesLine(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{"level = \"yolo\"\n\nlevle = \"trusted\"\n", "line 3: unknown key levle"},
		{"level = \"yolo\"\n[tools.bash]\ntimeout = \"1m\"\ntimout = \"2m\"\n", "line 4: unknown key tools.bash.timout"},
		{"description = \"x\"\nmax_concurrent_tools = \"many\"\n", "line 2 column"},
	} {
		state := t.TempDir()
		dir := filepath.Join(state, "agents", "worker")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, profile.ConfigFile), []byte(c.toml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := profile.Load(state, "worker")
		if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%q: %v, want %q", c.toml, err, c.want)
		}
	}
}

// TestResolvePolicy: agent.toml over config.toml's [defaults] over the built-ins, key by key,
// with where each value came from; disabled tools and blocked paths add up; bad values are
// errors naming the key and the file.
func TestResolvePolicy(t *testing.T) {
	yes := true
	defaults := profile.Policy{Level: "sandboxed", BlockedPaths: []string{".env"}, DisabledTools: []string{"bash"},
		MaxTimeout: "20m", AllowHardLinks: &yes,
		Tools: map[string]profile.ToolPolicy{"bash": {Timeout: "15m"}, "grep": {Timeout: "5s"}}}
	agent := profile.Policy{Level: "trusted", BlockedPaths: []string{"secrets"}, AllowedTargets: []string{"children"},
		MaxConcurrentTools: 2, Tools: map[string]profile.ToolPolicy{"bash": {Timeout: "40m"}}}
	e, err := profile.Resolve(defaults, agent)
	if err != nil {
		t.Fatal(err)
	}
	if e.Level != "trusted" || e.Sources["level"] != profile.SourceAgent ||
		fmt.Sprint(e.BlockedPaths) != "[.env secrets]" || e.Sources["blocked_paths"] != profile.SourceBoth ||
		fmt.Sprint(e.DisabledTools) != "[bash]" || e.Sources["disabled_tools"] != profile.SourceConfig ||
		e.MaxTimeout != 20*time.Minute || e.Sources["max_timeout"] != profile.SourceConfig ||
		e.Tools["bash"].Timeout != 40*time.Minute || e.Sources["tools.bash.timeout"] != profile.SourceAgent ||
		e.Tools["grep"].Timeout != 5*time.Second || e.Sources["tools.grep.timeout"] != profile.SourceConfig ||
		e.MaxConcurrentTools != 2 || e.ProgressInterval != profile.DefaultProgressInterval || e.Sources["progress_interval"] != profile.SourceBuiltin ||
		!e.AllowHardLinks || fmt.Sprint(e.AllowedTargets) != "[children]" || e.ConfirmTimeout != 0 {
		t.Fatalf("effective %+v", e)
	}
	for _, c := range []struct {
		p    profile.Policy
		want string
	}{
		{profile.Policy{Level: "root"}, "agent.toml: level"},
		{profile.Policy{MaxTimeout: "2h"}, "agent.toml: max_timeout: 2h0m0s is more than"},
		{profile.Policy{ConfirmTimeout: "soon"}, "agent.toml: confirm_timeout: \"soon\" is not a duration"},
		{profile.Policy{MaxConcurrentTools: -1}, "agent.toml: max_concurrent_tools"},
		{profile.Policy{ProgressInterval: "10ms"}, "agent.toml: progress_interval"},
		{profile.Policy{Tools: map[string]profile.ToolPolicy{"bash": {Timeout: "0s"}}}, "agent.toml: tools.bash.timeout"},
	} {
		if _, err := profile.Resolve(profile.Policy{}, c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}
