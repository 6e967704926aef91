package provider

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// replayTransport answers every request with a recorded stream from memory: the benchmarks
// measure decoding, not the network.
type replayTransport struct{ data []byte }

func (rt replayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(rt.data)), Request: r}, nil
}

// longStream is a recorded stream with its first event containing marker repeated to n
// delta events in all.
func longStream(tb testing.TB, file, marker string, n int) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		tb.Fatal(err)
	}
	events := strings.SplitAfter(string(data), "\n\n")
	var out strings.Builder
	done := false
	for _, ev := range events {
		if !done && strings.Contains(ev, marker) {
			for range n {
				out.WriteString(ev)
			}
			done = true
			continue
		}
		out.WriteString(ev)
	}
	if !done {
		tb.Fatalf("%s has no %s", file, marker)
	}
	return []byte(out.String())
}

var benchStreams = []struct {
	name, kind, file, marker string
}{
	{"chat", KindOpenAICompatible, "chat-plain.sse", `"content":"Hello"`},
	{"anthropic", KindAnthropic, "anthropic-plain.sse", `"text":"Hello"`},
	{"responses", KindOpenAIResponses, "responses-reasoning-tools.sse", `"delta":"Let me check"`},
}

const benchDeltas = 1000

// BenchmarkStream is the whole path per event: the SDK's SSE and JSON decoding, then the
// builder and the event queue (ns/event and allocs per op over 1000 text deltas).
func BenchmarkStream(b *testing.B) {
	for _, bs := range benchStreams {
		b.Run(bs.name, func(b *testing.B) {
			data := longStream(b, bs.file, bs.marker, benchDeltas)
			bk := Backend{Name: "bench", Kind: bs.kind, BaseURL: "http://127.0.0.1:1/v1", Model: "m", MaxTokens: 100}
			p, err := Open(bk, Options{Transport: replayTransport{data}})
			if err != nil {
				b.Fatal(err)
			}
			req := Request{Messages: userAsk()}
			b.ReportAllocs()
			events := 0
			for b.Loop() {
				s, err := p.Stream(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				for s.Next() {
					events++
				}
				if s.Err() != nil {
					b.Fatal(s.Err())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}

// BenchmarkSDKOnly is the SDK's decoding alone over the same streams, for the part of
// BenchmarkStream that is this package's.
func BenchmarkSDKOnly(b *testing.B) {
	for _, bs := range benchStreams {
		b.Run(bs.name, func(b *testing.B) {
			data := longStream(b, bs.file, bs.marker, benchDeltas)
			hc := &http.Client{Transport: replayTransport{data}}
			ctx := context.Background()
			b.ReportAllocs()
			events := 0
			for b.Loop() {
				switch bs.kind {
				case KindOpenAICompatible:
					svc := openai.NewChatCompletionService(option.WithBaseURL("http://127.0.0.1:1/v1"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
					s := svc.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
					for s.Next() {
						events++
					}
				case KindAnthropic:
					svc := anthropic.NewMessageService(anthropicoption.WithBaseURL("http://127.0.0.1:1"), anthropicoption.WithHTTPClient(hc), anthropicoption.WithMaxRetries(0))
					s := svc.NewStreaming(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 100, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
					for s.Next() {
						events++
					}
				case KindOpenAIResponses:
					p, err := Open(Backend{Name: "bench", Kind: bs.kind, BaseURL: "http://127.0.0.1:1/v1", Model: "m"}, Options{Transport: replayTransport{data}})
					if err != nil {
						b.Fatal(err)
					}
					c := p.(*client)
					dec, err := c.open(ctx, Request{Messages: userAsk()}, userAsk())
					if err != nil {
						b.Fatal(err)
					}
					s := dec.(*sdkDecoder[responses.ResponseStreamEventUnion]).s
					for s.Next() {
						events++
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}
