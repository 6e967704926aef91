package main

// Conversation failover (docs/BENCHMARKS.md, "Cluster: nodes"): a node running an ai-chat turn
// is killed -9 mid-reply; the times until another node has taken the conversation over (the
// lost session's record names the new one, movedTo) and until the new session streams the
// continued turn's first token. The model is a fake OpenAI-compatible server in this process
// that streams a token every 20 ms: what is measured is nexus's takeover, not a model.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nexus-run/nexus/internal/abi"
)

var takeoverRuns = flag.Int("takeover-runs", 5, "with -nodes: ai-chat owners killed mid-turn per --node-lost setting")

// slowModel streams every chat completion as 100 tokens, one each 20 ms.
func slowModel() (url string, stop func(), err error) {
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl, _ := w.(http.Flusher)
		chunk := func(delta map[string]any, finish any) bool {
			b, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "model": "slow",
				"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}})
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
				return false
			}
			if fl != nil {
				fl.Flush()
			}
			return true
		}
		if !chunk(map[string]any{"role": "assistant"}, nil) {
			return
		}
		for i := range 100 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			if !chunk(map[string]any{"content": fmt.Sprintf("t%d ", i)}, nil) {
				return
			}
		}
		chunk(map[string]any{}, "stop")
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/v1", func() { _ = srv.Close() }, nil
}

// modelConfig is config.toml naming the slow model as backend "slow".
func modelConfig(url string) string {
	return fmt.Sprintf("[backends.slow]\nkind = \"openai-compatible\"\nbase_url = %q\nmodel = \"slow\"\ncontext_window = 100000\n", url)
}

// firstToken waits for an ai-token event of session id after seq after, as n reads it.
func firstToken(ctx context.Context, n *node, id string, after uint64) error {
	for {
		r, err := n.c.Poll(ctx, id, after, 0, time.Second, "")
		if err != nil {
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != abi.CodeResourceUnavailable {
				return err
			}
		}
		for _, e := range r.Events {
			after = e.Seq
			var p struct {
				Type string `json:"type"`
			}
			if e.Event == abi.EventData && json.Unmarshal(e.Payload, &p) == nil && p.Type == abi.PayloadAIToken {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// takeover: per run, a fresh node opens an ai-chat, sends a message, and is killed -9 at the
// reply's first token; an observer measures until the conversation is taken over and until
// the continued turn streams.
func (b *bench) takeover(ctx context.Context, lost time.Duration, runs int) error {
	flagArg := "--node-lost=" + lost.String()
	ws := filepath.Join(b.dir, "workspace")
	if err := os.MkdirAll(ws, 0o750); err != nil {
		return err
	}
	var watchers []*node
	for i := range 2 {
		n, err := b.startNode(ctx, fmt.Sprintf("tobs%d-%d", i, int(lost.Seconds())), flagArg)
		if err != nil {
			return err
		}
		defer n.kill()
		watchers = append(watchers, n)
	}
	obs := watchers[0]
	opts, err := json.Marshal(abi.AIChatOptions{Backend: "slow", Workspace: ws})
	if err != nil {
		return err
	}
	var moved, streamed []time.Duration
	for i := range runs {
		victim, err := b.startNode(ctx, fmt.Sprintf("tv%d-%d", int(lost.Seconds()), i), flagArg)
		if err != nil {
			return err
		}
		key := fmt.Sprintf("agent:main:bench-%d-%d", int(lost.Seconds()), i)
		s, err := victim.c.Create(ctx, abi.CreateRequest{Type: abi.TypeAIChat, Context: abi.Context{ChatID: key}, Options: opts})
		if err != nil {
			victim.kill()
			return fmt.Errorf("open an ai-chat on the victim: %w", err)
		}
		time.Sleep(1500 * time.Millisecond) // a heartbeat or so of the victim: it is known alive
		sent, err := victim.c.SendMessage(ctx, s.SessionID, []byte("tell me a long story"), "")
		if err != nil {
			victim.kill()
			return err
		}
		tctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = firstToken(tctx, obs, s.SessionID, sent.AfterSeq)
		cancel()
		if err != nil {
			victim.kill()
			return fmt.Errorf("the victim's reply: %w", err)
		}
		killed := time.Now()
		victim.kill()
		var to string
		for to == "" {
			got, err := obs.c.Get(ctx, s.SessionID)
			if err == nil {
				to, _ = got.Metadata["movedTo"].(string)
			}
			if time.Since(killed) > 5*lost+time.Minute {
				return fmt.Errorf("conversation %s of a killed node not taken over after %v", key, time.Since(killed))
			}
			if to == "" {
				time.Sleep(20 * time.Millisecond) // the measurement's resolution
			}
		}
		moved = append(moved, time.Since(killed))
		tctx, cancel = context.WithTimeout(ctx, time.Minute)
		err = firstToken(tctx, obs, to, 0)
		cancel()
		if err != nil {
			return fmt.Errorf("the continued turn on %s: %w", to, err)
		}
		streamed = append(streamed, time.Since(killed))
	}
	for _, m := range []struct {
		what string
		d    []time.Duration
	}{{"taken over (movedTo)", moved}, {"continued turn's first token", streamed}} {
		slices.Sort(m.d)
		fmt.Printf("conversation failover --node-lost %-4v %d kills mid-turn: %s after p50 %v, p95 %v (min %v, max %v)\n", lost, runs, m.what,
			m.d[len(m.d)/2].Round(10*time.Millisecond), m.d[(len(m.d)*95+99)/100-1].Round(10*time.Millisecond),
			m.d[0].Round(10*time.Millisecond), m.d[len(m.d)-1].Round(10*time.Millisecond))
	}
	return nil
}
