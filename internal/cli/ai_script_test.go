package cli_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/nexus-run/nexus/internal/testkit"
	"github.com/nexus-run/nexus/internal/testkit/llmserver"
)

// scriptedModel is an OpenAI-compatible server for what the tiny real model cannot be made
// to do: the message "slow" makes it call bash with a command that runs for minutes (a turn
// to kill the gateway in), "spawn" makes it spawn a subagent on "child task", "spawn deep" one
// on "spawn" (which spawns its own); after a tool result it says "done"; any other message it
// echoes.
func scriptedModel(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last, role := lastUser(r)
		var delta string
		finish := "stop"
		switch {
		case role == "tool":
			delta = `{"role":"assistant","content":"done"}`
		case last == "spawn":
			delta = `{"role":"assistant","tool_calls":[{"index":0,"id":"call_spawn","type":"function","function":{"name":"sessions_spawn","arguments":"{\"task\":\"child task\",\"label\":\"kid\",\"cleanup\":\"keep\"}"}}]}`
			finish = "tool_calls"
		case last == "spawn deep":
			delta = `{"role":"assistant","tool_calls":[{"index":0,"id":"call_spawn","type":"function","function":{"name":"sessions_spawn","arguments":"{\"task\":\"spawn\",\"label\":\"parent\",\"cleanup\":\"keep\"}"}}]}`
			finish = "tool_calls"
		case last == "slow":
			delta = `{"role":"assistant","tool_calls":[{"index":0,"id":"call_slow","type":"function","function":{"name":"bash","arguments":"{\"command\":\"sleep 300\",\"timeout_secs\":600}"}}]}`
			finish = "tool_calls"
		default:
			b, _ := json.Marshal(map[string]string{"role": "assistant", "content": "echo: " + last})
			delta = string(b)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"scripted\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":null}]}\n\n", delta)
		fmt.Fprintf(w, "data: {\"id\":\"s\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"scripted\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":%q}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12}}\n\ndata: [DONE]\n\n", finish)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// llm is the package's real model server (llama.cpp's llama-server with the tiny
// deterministic model); its watchdog stops it when the test binary exits.
var llm llmserver.Once

// TestAIScript runs testdata/ai: ai chats through the real binary against the real model
// server. $NEXUS_HOME/config.toml names it as backends local (its OpenAI route) and
// local-anthropic (its Anthropic route); $PI_CODING_AGENT_DIR is a scratch directory for the
// pi coding agent that reads the transcripts back.
func TestAIScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		testkit.SkipUnlessCI(t, "bash not found; the ai scripts run the bash tool")
	}
	base := llm.URL(t)
	scripted := scriptedModel(t)
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, scriptParams(filepath.Join("testdata", "ai"), repo, bash, func(env *testscript.Env) error {
		home := filepath.Join(env.WorkDir, "home")
		if err := os.MkdirAll(home, 0o700); err != nil {
			return err
		}
		cfg := fmt.Sprintf(`[backends.local]
kind = "openai-compatible"
base_url = "%[1]s/v1"
model = "probe"
context_window = 4096
max_tokens = 256

[backends.scripted]
kind = "openai-compatible"
base_url = "%[2]s/v1"
model = "scripted"
context_window = 100000

[backends.local-anthropic]
kind = "anthropic"
base_url = "%[1]s"
model = "probe"
context_window = 4096
max_tokens = 256

[backends.agent]
kind = "acp"
command = "acptest-agent"
env = { NEXUS_ACPTEST_DIR = "%[3]s" }
`, base, scripted, filepath.Join(env.WorkDir, "agent"))
		if err := os.MkdirAll(filepath.Join(env.WorkDir, "agent"), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
			return err
		}
		env.Setenv("PI_CODING_AGENT_DIR", filepath.Join(env.WorkDir, "pi"))
		return nil
	}))
}
