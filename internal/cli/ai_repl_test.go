package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/nexus-run/nexus/internal/cli"
	"github.com/nexus-run/nexus/internal/testkit"
)

// lastUser reads a chat completions request: its last user message's text and the role of
// its last message.
func lastUser(r *http.Request) (last, role string) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	for _, m := range req.Messages {
		role = m.Role
		if m.Role == "user" {
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(m.Content, &last) != nil && json.Unmarshal(m.Content, &parts) == nil && len(parts) > 0 {
				last = parts[0].Text
			}
		}
	}
	return last, role
}

// echoModel is an OpenAI-compatible server that answers each request "echo: " and the last
// user message, streamed.
func echoModel(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last, _ := lastUser(r)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			fmt.Sprintf(`{"id":"e","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":null}]}`, "echo: "+last),
			`{"id":"e","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`,
			`[DONE]`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAIChatREPLOnATerminal drives `nexus ai chat` on a real pseudo-terminal: a line is sent and
// its reply printed, the up arrow brings the line back, Ctrl-C clears the line being typed,
// /history lists what was sent, Ctrl-D on an empty line leaves.
func TestAIChatREPLOnATerminal(t *testing.T) {
	home := testkit.ShortTempDir(t)
	ws := t.TempDir()
	cfg := fmt.Sprintf("[backends.fake]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"m\"\n", echoModel(t)+"/v1")
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "NEXUS_HOME" {
			return home
		}
		return os.Getenv(k)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan int, 1)
	var gwErr testkit.Buffer
	go func() {
		served <- cli.Main(ctx, []string{"serve", "--no-index", "--no-ai-logs"}, cli.Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &gwErr, Getenv: getenv})
	}()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	gwErr.WaitFor(t, "listening")

	ptm, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ptm.Close(); _ = tty.Close() })
	if err := pty.Setsize(ptm, &pty.Winsize{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	var screen testkit.Buffer
	go func() { _, _ = io.Copy(&screen, ptm) }()
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"ai", "chat", "--backend", "fake", "--level", "yolo", "--workspace", ws}, cli.Env{Stdin: tty, Stdout: tty, Stderr: tty, Getenv: getenv})
	}()
	typeIn := func(s string) {
		t.Helper()
		if _, err := ptm.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	screen.WaitFor(t, "> ")
	typeIn("hello there\r")
	screen.WaitFor(t, "echo: hello there")
	prompts := func() int { return strings.Count(screen.String(), "> ") }
	testkit.Eventually(t, "the second prompt", func() bool { return prompts() >= 2 })
	typeIn("\x1b[A\r") // up arrow: the last line again
	testkit.Eventually(t, "the line sent again", func() bool { return strings.Count(screen.String(), "echo: hello there") == 2 })
	testkit.Eventually(t, "the third prompt", func() bool { return prompts() >= 3 })
	typeIn("never sent\x03/history\r")
	screen.WaitFor(t, "2  hello there")
	if strings.Contains(screen.String(), "echo: never sent") {
		t.Fatalf("Ctrl-C did not clear the line:\n%s", screen.String())
	}
	testkit.Eventually(t, "the next prompt", func() bool { return prompts() >= 4 })
	typeIn("\x04")
	if code := <-done; code != 0 {
		t.Fatalf("nexus ai chat exited %d:\n%s", code, screen.String())
	}
	// Ctrl-D leaves the prompt's line, as a shell does: what runs next starts on a line of its own.
	testkit.Eventually(t, "a line end after Ctrl-D", func() bool { return strings.HasSuffix(screen.String(), "> \r\n") })
}
