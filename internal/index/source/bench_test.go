package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchSize is the size of each generated transcript: large enough that the per-file setup
// does not count.
const benchSize = 32 << 20

// filler is prose of realistic width for message and tool-result text.
var filler = strings.Repeat("The quick brown fox jumps over the lazy dog; ", 12)

// generators write one exchange (a prompt, a reply with a tool call, its result, a final reply)
// per call, with ids unique to i, in each tool's format.
var generators = map[string]func(b *strings.Builder, i int){
	"claude-code": func(b *strings.Builder, i int) {
		ts := "2026-01-01T00:00:00.000Z"
		fmt.Fprintf(b, `{"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":"question %d: %s"},"uuid":"u%d","timestamp":"%s","cwd":"/w","sessionId":"s"}`+"\n", i, filler, i, ts)
		for _, part := range []string{`{"type":"thinking","thinking":"` + filler + `"}`, `{"type":"tool_use","id":"t` + fmt.Sprint(i) + `","name":"Bash","input":{"command":"ls -la"}}`} {
			fmt.Fprintf(b, `{"type":"assistant","uuid":"a%d","requestId":"r%d","timestamp":"%s","sessionId":"s","message":{"id":"m%d","role":"assistant","model":"claude-x","content":[%s],"usage":{"input_tokens":10,"output_tokens":20,"cache_read_input_tokens":30}}}`+"\n", i, i, ts, i, part)
		}
		fmt.Fprintf(b, `{"type":"user","uuid":"r%d","timestamp":"%s","sessionId":"s","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t%d","content":"%s"}]}}`+"\n", i, ts, i, filler)
		fmt.Fprintf(b, `{"type":"assistant","uuid":"b%d","requestId":"q%d","timestamp":"%s","sessionId":"s","message":{"id":"n%d","role":"assistant","model":"claude-x","content":[{"type":"text","text":"%s"}],"usage":{"input_tokens":10,"output_tokens":20}}}`+"\n", i, i, ts, i, filler)
	},
	"codex": func(b *strings.Builder, i int) {
		ts := "2026-01-01T00:00:00.000Z"
		if i == 0 {
			fmt.Fprintf(b, `{"timestamp":"%s","type":"session_meta","payload":{"id":"019e0000-0000-7000-8000-000000000000","cwd":"/w"}}`+"\n", ts)
		}
		fmt.Fprintf(b, `{"timestamp":"%s","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"question %d: %s"}]}}`+"\n", ts, i, filler)
		fmt.Fprintf(b, `{"timestamp":"%s","type":"response_item","payload":{"type":"reasoning","summary":[],"encrypted_content":"%s"}}`+"\n", ts, strings.Repeat("QUJD", 100))
		fmt.Fprintf(b, `{"timestamp":"%s","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"ls -la\"}","call_id":"call_%d"}}`+"\n", ts, i)
		fmt.Fprintf(b, `{"timestamp":"%s","type":"response_item","payload":{"type":"function_call_output","call_id":"call_%d","output":"%s"}}`+"\n", ts, i, filler)
		fmt.Fprintf(b, `{"timestamp":"%s","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"%s"}]}}`+"\n", ts, filler)
		fmt.Fprintf(b, `{"timestamp":"%s","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":%d,"cached_input_tokens":0,"output_tokens":%d}}}}`+"\n", ts, i*10, i*20)
	},
	"pi": func(b *strings.Builder, i int) {
		ts := "2026-01-01T00:00:00.000Z"
		if i == 0 {
			fmt.Fprintf(b, `{"type":"session","version":3,"id":"p","timestamp":"%s","cwd":"/w"}`+"\n", ts)
		}
		fmt.Fprintf(b, `{"type":"message","id":"u%07x","parentId":null,"timestamp":"%s","message":{"role":"user","content":"question %d: %s","timestamp":1}}`+"\n", i, ts, i, filler)
		fmt.Fprintf(b, `{"type":"message","id":"a%07x","parentId":"u%07x","timestamp":"%s","message":{"role":"assistant","content":[{"type":"thinking","thinking":"%s"},{"type":"toolCall","id":"t%d","name":"bash","arguments":{"command":"ls -la"}}],"provider":"p","model":"m","usage":{"input":10,"output":20,"cacheRead":30,"cacheWrite":0},"stopReason":"toolUse","timestamp":1}}`+"\n", i, i, ts, filler, i)
		fmt.Fprintf(b, `{"type":"message","id":"r%07x","parentId":"a%07x","timestamp":"%s","message":{"role":"toolResult","toolCallId":"t%d","toolName":"bash","content":[{"type":"text","text":"%s"}],"isError":false,"timestamp":1}}`+"\n", i, i, ts, i, filler)
		fmt.Fprintf(b, `{"type":"message","id":"b%07x","parentId":"r%07x","timestamp":"%s","message":{"role":"assistant","content":[{"type":"text","text":"%s"}],"provider":"p","model":"m","usage":{"input":10,"output":20},"stopReason":"stop","timestamp":1}}`+"\n", i, i, ts, filler)
	},
}

// BenchmarkParse measures each adapter's parse throughput (MB/s) on a generated transcript of
// benchSize bytes read from disk.
func BenchmarkParse(b *testing.B) {
	for _, src := range All() {
		b.Run(src.Name(), func(b *testing.B) {
			var sb strings.Builder
			sb.Grow(benchSize + 1<<16)
			name := src.Name()
			if name == "openclaw" || name == "nexus" {
				name = "pi" // the same format
			}
			for i := 0; sb.Len() < benchSize; i++ {
				generators[name](&sb, i)
			}
			path := filepath.Join(b.TempDir(), "bench.jsonl")
			if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(sb.Len()))
			for b.Loop() {
				res, err := ParseFile(context.Background(), src, path, 0)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Skipped) != 0 || res.Offset != int64(sb.Len()) || len(res.Messages) == 0 {
					b.Fatalf("skipped %v offset %d of %d", res.Skipped, res.Offset, sb.Len())
				}
			}
		})
	}
}
