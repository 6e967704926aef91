package aichat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/live"
)

// policyTurn sends text and reads the turn to its end, answering every confirmation request
// with answer ("" leaves them unanswered); it returns the last tool result's text and
// whether it was an error, the progress events seen, and the confirmation requests.
func policyTurn(t *testing.T, r *live.Registry, w *watcher, id, text, answer string) (string, bool, int, int) {
	t.Helper()
	send(t, r, id, text)
	var out string
	var isErr bool
	progress, asked := 0, 0
	w.until(t, "the turn's end", func(e *live.Event) bool {
		switch p := e.Payload.(type) {
		case abi.AIConfirmation:
			asked++
			if answer != "" {
				if _, err := r.Control(context.Background(), id, abi.ControlRequest{Command: abi.CommandConfirm, RequestID: p.RequestID, Answer: answer}); err != nil {
					t.Errorf("answer: %v", err)
				}
			}
		case abi.AIToolProgress:
			progress++
		case abi.AITool:
			if p.Phase == abi.PhaseCompleted {
				out, isErr = p.Output, p.IsError
			}
		case abi.AITurn:
			return p.Phase == abi.PhaseEnded
		}
		return false
	})
	return out, isErr, progress, asked
}

// TestPolicyKeys: every key of agent.toml's policy, and the same key in config.toml's
// [defaults], changes what the agent may do: a turn whose one call the key decides, run with
// the key and without it (or with another value).
func TestPolicyKeys(t *testing.T) {
	type want struct {
		has      string // the call's result holds this
		lacks    string // and not this
		isErr    bool
		anyErr   bool // isErr is not checked
		progress bool // progress events were seen
		asked    bool // a confirmation was asked
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "notes.txt"), []byte("outside-notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key            string
		level          string // the session's option ("" leaves the level to the policy)
		call           map[string]any
		tool           string
		with           string // the key as written (agent.toml; under [defaults] in config.toml)
		without        string // another value, or "" for none
		answer         string // the answer to a confirmation request
		broker         bool   // the inter-session tools are offered
		got, otherwise want
	}{
		{key: "level", tool: "bash", call: map[string]any{"command": "echo hi"}, with: `level = "sandboxed"`, without: `level = "yolo"`,
			got: want{has: "not available at permission level sandboxed", isErr: true}, otherwise: want{has: "hi\n[exit code 0]"}},
		{key: "disabled_tools", level: "yolo", tool: "bash", call: map[string]any{"command": "echo hi"}, with: `disabled_tools = ["bash"]`,
			got: want{has: "disabled", isErr: true}, otherwise: want{has: "hi\n[exit code 0]"}},
		{key: "blocked_paths", level: "yolo", tool: "read_file", call: map[string]any{"path": "secret.txt"}, with: `blocked_paths = ["secret.txt"]`,
			got: want{has: "blocked", isErr: true}, otherwise: want{has: "top-secret"}},
		{key: "allowed_paths", level: "trusted", tool: "read_file", call: map[string]any{"path": filepath.Join(outside, "notes.txt")}, answer: "deny",
			with: fmt.Sprintf("allowed_paths = [%q]", outside),
			got:  want{has: "outside-notes"}, otherwise: want{has: "denied", isErr: true, asked: true}},
		{key: "tools.NAME.allowed_paths", level: "yolo", tool: "read_file", call: map[string]any{"path": "secret.txt"},
			with: "[tools.read_file]\nallowed_paths = [\"docs\"]",
			got:  want{has: "outside the paths tool read_file may use", isErr: true}, otherwise: want{has: "top-secret"}},
		{key: "tools.NAME.timeout", level: "yolo", tool: "bash", call: map[string]any{"command": "sleep 2; echo late"},
			with: "[tools.bash]\ntimeout = \"1s\"",
			got:  want{has: "[timed out]"}, otherwise: want{has: "late\n[exit code 0]"}},
		{key: "max_timeout", level: "yolo", tool: "bash", call: map[string]any{"command": "sleep 2; echo late", "timeout_secs": 60},
			with: `max_timeout = "1s"`,
			got:  want{has: "the maximum is 1s"}, otherwise: want{has: "late\n[exit code 0]"}},
		{key: "confirm_timeout", level: "trusted", tool: "bash", call: map[string]any{"command": "echo hi"}, answer: "",
			with: `confirm_timeout = "1s"`, got: want{has: "no answer within 1s", isErr: true, asked: true}},
		{key: "progress_interval", level: "yolo", tool: "bash", call: map[string]any{"command": "echo started; sleep 2"},
			with: `progress_interval = "1s"`, got: want{has: "started", progress: true}, otherwise: want{has: "started"}},
		{key: "allowed_targets", level: "yolo", broker: true, tool: "sessions_history", call: map[string]any{"key": "agent:main:other"},
			with: `allowed_targets = ["agent:main:other"]`,
			got:  want{lacks: "refused", anyErr: true}, otherwise: want{has: "not among the conversations this agent may reach", isErr: true}},
		{key: "allow_hard_links", level: "sandboxed", tool: "read_file", call: map[string]any{"path": "linked.txt"},
			with: "allow_hard_links = true", got: want{has: "outside-link"}, otherwise: want{has: "hard link", isErr: true}},
	} {
		for _, where := range []string{"agent.toml", "config.toml"} {
			for _, on := range []bool{true, false} {
				setting := c.with
				expect := c.got
				if !on {
					if c.otherwise == (want{}) {
						continue
					}
					setting, expect = c.without, c.otherwise
				}
				name := fmt.Sprintf("%s/%s/%v", c.key, where, on)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					e := newEnv(t, func(req chatRequest, w *sse) {
						if req.last().Role == "tool" {
							w.text("done")
							return
						}
						w.call("call_1", c.tool, c.call)
					})
					for path, body := range map[string]string{"secret.txt": "top-secret\n", "docs/readme.txt": "docs\n"} {
						if err := os.MkdirAll(filepath.Dir(filepath.Join(e.ws, path)), 0o700); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(filepath.Join(e.ws, path), []byte(body), 0o600); err != nil {
							t.Fatal(err)
						}
					}
					if c.key == "allow_hard_links" {
						target := filepath.Join(t.TempDir(), "target.txt")
						if err := os.WriteFile(target, []byte("outside-link\n"), 0o600); err != nil {
							t.Fatal(err)
						}
						if err := os.Link(target, filepath.Join(e.ws, "linked.txt")); err != nil {
							t.Skipf("hard links across these temp directories: %v", err)
						}
					}
					if setting != "" {
						if where == "agent.toml" {
							writeAgent(t, e, "main", setting+"\n")
						} else {
							// [tools.NAME] becomes [defaults.tools.NAME]; top-level keys go under [defaults].
							if strings.HasPrefix(setting, "[tools.") {
								e.extra = "\n[defaults]\n" + strings.Replace(setting, "[tools.", "[defaults.tools.", 1) + "\n"
							} else {
								e.extra = "\n[defaults]\n" + setting + "\n"
							}
						}
					}
					if c.broker {
						e.withBroker(t)
					}
					r := e.gateway(t)
					opts, _ := json.Marshal(abi.AIChatOptions{Backend: "fake", Level: c.level, Workspace: e.ws})
					s, err := r.Create(context.Background(), abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: "agent:main:test:policy"}, Options: opts})
					if err != nil {
						t.Fatalf("create: %v", err)
					}
					w := &watcher{r: r, id: s.SessionID}
					out, isErr, progress, asked := policyTurn(t, r, w, s.SessionID, "go", c.answer)
					if !strings.Contains(out, expect.has) || (expect.lacks != "" && strings.Contains(out, expect.lacks)) || (!expect.anyErr && isErr != expect.isErr) || (progress > 0) != expect.progress || (asked > 0) != expect.asked {
						t.Fatalf("result %q (error %v), %d progress events, %d confirmations; want %+v\nevents %s", out, isErr, progress, asked, expect, describe(w.seen))
					}
				})
			}
		}
	}
}

// TestMaxConcurrentTools: max_concurrent_tools bounds the calls of a "_parallel" batch run at
// once. Two calls of an MCP tool that each wait for the other meet when two may run together;
// with one at a time the first waits out its timeout (5 s, set for the test) and the second,
// run after it, meets the first's mark.
func TestMaxConcurrentTools(t *testing.T) {
	for _, c := range []struct {
		toml     string
		timedOut int
	}{{"", 0}, {"max_concurrent_tools = 2\n", 0}, {"max_concurrent_tools = 1\n", 1}} {
		t.Run(strings.TrimSpace(c.toml), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			e := newEnv(t, func(req chatRequest, w *sse) {
				if req.last().Role == "tool" {
					w.text("done")
					return
				}
				w.chunk(map[string]any{"role": "assistant"}, "")
				for i, who := range [][2]string{{"a", "b"}, {"b", "a"}} {
					args, _ := json.Marshal(map[string]any{"dir": dir, "me": who[0], "other": who[1], "_parallel": true})
					w.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": "call_" + who[0], "type": "function",
						"function": map[string]any{"name": "mcp_fs_meet", "arguments": string(args)}}}}, "")
				}
				w.chunk(map[string]any{}, "tool_calls")
				w.done()
			})
			e.extra = fmt.Sprintf("\n[mcp_servers.fs]\ncommand = %q\nenv_vars = [%q]\n", os.Args[0], mcpServerVar)
			writeAgent(t, e, "main", c.toml+"[tools.mcp_fs_meet]\ntimeout = \"5s\"\n")
			r := e.gateway(t)
			s := e.open(t, r, "agent:main:test:meet", "yolo")
			w := &watcher{r: r, id: s.SessionID}
			send(t, r, s.SessionID, "meet")
			if end := w.turnEnded(t); end.End != abi.TurnCompleted {
				t.Fatalf("turn %+v: %s", end, describe(w.seen))
			}
			timedOut, met := 0, 0
			for _, ev := range w.seen {
				if p, ok := ev.Payload.(abi.AITool); ok && p.Phase == abi.PhaseCompleted {
					switch {
					case strings.Contains(p.Output, "timed out after 5s"):
						timedOut++
					case strings.Contains(p.Output, " met "):
						met++
					}
				}
			}
			if timedOut != c.timedOut || met != 2-c.timedOut {
				t.Fatalf("%d timed out, %d met; want %d timed out: %s", timedOut, met, c.timedOut, describe(w.seen))
			}
		})
	}
}
