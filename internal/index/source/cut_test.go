package source

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// cutAll runs a cutter with bounds over in, chunk bytes at a time.
func cutAll(in []byte, chunk int, bounds cutter) (out []byte, cut, over bool) {
	c := bounds
	c.out = nil
	for len(in) > 0 {
		n := min(chunk, len(in))
		c.write(in[:n])
		in = in[n:]
	}
	return c.out, c.cut, c.over()
}

func defaultBounds() cutter {
	var c cutter
	c.reset()
	return c
}

// TestCutter: a long line's strings are cut to their bound as JSON strings (before an escape or
// a UTF-8 sequence, closed by their own quote), its structure kept, whatever the chunks it
// arrives in; a line over CutLineMax even cut is over.
func TestCutter(t *testing.T) {
	big := func(unit string, n int) string { return strings.Repeat(unit, n/len(unit)+1) }
	many := func(n, each int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`"k%d":%q`, i, big("y", each))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	for _, tc := range []struct {
		name string
		in   string
		// check looks at the decoded cut form.
		check func(t *testing.T, v map[string]any)
		over  bool
	}{
		{"ascii", `{"a":"` + big("x", 3*TextMax) + `","b":[1,{"c":"d"}]}`, func(t *testing.T, v map[string]any) {
			if a := v["a"].(string); len(a) != TextMax || strings.Trim(a, "x") != "" || fmt.Sprint(v["b"]) != "[1 map[c:d]]" {
				t.Fatalf("a %d bytes, b %v", len(a), v["b"])
			}
		}, false},
		{"utf-8", `{"a":"` + big("é€𝄞", 3*TextMax) + `"}`, func(t *testing.T, v map[string]any) {
			a := v["a"].(string)
			if len(a) > TextMax || len(a) < TextMax-4 || !utf8.ValidString(a) || strings.ContainsRune(a, utf8.RuneError) {
				t.Fatalf("a %d bytes, valid %v", len(a), utf8.ValidString(a))
			}
		}, false},
		{"escapes", `{"a":"` + big(`line\n\"q\"\u00e9\\`, 3*TextMax) + `","b":true}`, func(t *testing.T, v map[string]any) {
			a := v["a"].(string)
			if len(a) > TextMax || len(a) < TextMax/2 || !strings.HasPrefix(a, "line\n\"q\"é\\line") || v["b"] != true {
				t.Fatalf("a %d bytes: %.40q, b %v", len(a), a, v["b"])
			}
		}, false},
		{"nested", `[{"m":{"content":[{"type":"text","text":"` + big("z", 2*TextMax) + `"}]}},"end"]`, nil, false},
		{"many long strings", many(20, 2*TextMax), func(t *testing.T, v map[string]any) {
			if len(v) != 20 || len(v["k0"].(string)) != TextMax || len(v["k19"].(string)) != ResultExcerptMax {
				t.Fatalf("%d keys, k0 %d, k19 %d", len(v), len(v["k0"].(string)), len(v["k19"].(string)))
			}
		}, false},
		{"not json", strings.Repeat("garbage ", CutLineMax/8+1), nil, true},
		{"structure alone too long", "[" + strings.Repeat("1,", CutLineMax/2) + "1]", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var first []byte
			for _, chunk := range []int{7, 4096, 256 << 10, len(tc.in)} {
				out, cut, over := cutAll([]byte(tc.in), chunk, defaultBounds())
				if over != tc.over {
					t.Fatalf("chunk %d: over %v", chunk, over)
				}
				if tc.over {
					continue // nothing of it is kept
				}
				if first == nil {
					first = out
				} else if !bytes.Equal(out, first) {
					t.Fatalf("chunk %d: another cut", chunk)
				}
				if !cut || len(out) > CutLineMax {
					t.Fatalf("chunk %d: cut %v, %d bytes", chunk, cut, len(out))
				}
				var v any
				if err := json.Unmarshal(out, &v); err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				if m, ok := v.(map[string]any); ok && tc.check != nil {
					tc.check(t, m)
				}
			}
		})
	}
}

// FuzzCutter, with small bounds: the cut form of JSON is JSON (unless over: then nothing of it
// is kept), nothing is cut from a text within the bounds, and the chunks it arrives in change
// nothing.
func FuzzCutter(f *testing.F) {
	for _, s := range []string{`{"a":"abcdefghijklmnop","b":"\u00e9\u00e9\u00e9\u00e9\n\n\n\n"}`, `["é€𝄞é€𝄞é€𝄞", "\\\\\\\\\\\\\\\""]`,
		`{"type":"user","message":{"content":[{"type":"text","text":"0123456789012345"}]}}`, `not json "at \" all`, `"`, `\`} {
		f.Add([]byte(s), uint8(3))
	}
	bounds := cutter{textMax: 8, budget: 40, small: 2, max: 200}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		whole, cut, over := cutAll(in, len(in)+1, bounds)
		chunked, _, chunkedOver := cutAll(in, int(chunk)+1, bounds)
		if over != chunkedOver {
			t.Fatalf("chunks of %d: over %v, whole: over %v", int(chunk)+1, chunkedOver, over)
		}
		if !over && !bytes.Equal(whole, chunked) {
			t.Fatalf("chunks of %d: %q, whole: %q", int(chunk)+1, chunked, whole)
		}
		if !cut && !over && !bytes.Equal(whole, in) {
			t.Fatalf("nothing cut, yet %q became %q", in, whole)
		}
		if json.Valid(in) && !over && !json.Valid(whole) {
			t.Fatalf("%q cut to %q, not JSON", in, whole)
		}
	})
}

// TestLongLines: a transcript with lines over LineMax is read in bounded memory: a line's long
// texts are cut (and counted), a line whose cut form is still over CutLineMax is skipped as
// oversized, the lines around them are read as ever, and the offsets are the file's.
func TestLongLines(t *testing.T) {
	huge := strings.Repeat("output line\n", 3*TextMax/12)
	user := func(uuid, text string) string {
		b, _ := json.Marshal(text)
		return fmt.Sprintf(`{"type":"user","sessionId":"s","uuid":%q,"timestamp":"2026-01-02T03:04:05Z","message":{"role":"user","content":%s}}`, uuid, b)
	}
	reply := func(uuid, id, text string) string {
		b, _ := json.Marshal(text)
		return fmt.Sprintf(`{"type":"assistant","sessionId":"s","uuid":%q,"timestamp":"2026-01-02T03:04:06Z","message":{"id":%q,"role":"assistant","content":[{"type":"text","text":%s}]}}`, uuid, id, b)
	}
	result := func(uuid, text string) string {
		b, _ := json.Marshal(text)
		return fmt.Sprintf(`{"type":"user","sessionId":"s","uuid":%q,"timestamp":"2026-01-02T03:04:07Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":%s}]}}`, uuid, b)
	}
	data := join(
		user("u1", "before the walrus"),
		`{"type":"assistant","sessionId":"s","uuid":"a0","timestamp":"2026-01-02T03:04:06Z","message":{"id":"m0","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"yes"}}]}}`,
		result("r1", huge),
		reply("a1", "m1", huge),
		// One reply over many lines, each under LineMax, joined past TextMax.
		reply("a2", "m2", strings.Repeat("n", TextMax/2+10)),
		reply("a3", "m2", strings.Repeat("n", TextMax/2+10)),
		reply("a4", "m2", strings.Repeat("n", TextMax/2+10)),
		strings.Repeat("garbage ", CutLineMax/8+1),
		user("u2", "after the narwhal"),
	)
	res := parseBytes(t, ClaudeCode{}, data, 0)
	if res.Offset != int64(len(data)) || res.Pending != 0 || res.Lines != 9 {
		t.Fatalf("offset %d of %d, pending %d, %d lines", res.Offset, len(data), res.Pending, res.Lines)
	}
	var sizes []int
	for _, m := range res.Messages {
		sizes = append(sizes, len(m.Text))
	}
	// before, the call, the long reply, the joined reply, after.
	if len(res.Messages) != 5 || res.Messages[0].Text != "before the walrus" || res.Messages[4].Text != "after the narwhal" ||
		sizes[1] != 0 || sizes[3] != TextMax || !strings.HasPrefix(res.Messages[2].Text, "output line\n") ||
		// the bound is on the JSON text: "\n" is two bytes of it
		sizes[2] > TextMax || sizes[2] < TextMax*12/13-13 {
		t.Fatalf("%d messages of %v bytes", len(res.Messages), sizes)
	}
	// The result is kept as the cut line holds it (up to TextMax of JSON text), and said cut.
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Status != StatusOK || !res.ToolCalls[0].ResultCut ||
		len(res.ToolCalls[0].Result) <= ResultExcerptMax || len(res.ToolCalls[0].Result) > TextMax {
		t.Fatalf("%d calls", len(res.ToolCalls))
	}
	// Cut: the result's line, the long reply's, the joined reply's second and third lines.
	if res.Cut != 4 || res.Skipped[ReasonOversized] != 1 || len(res.Skipped) != 1 {
		t.Fatalf("cut %d, skipped %v", res.Cut, res.Skipped)
	}

	// A long last line without its newline is pending, as any: read whole once it ends.
	tail := []byte(result("r2", huge))
	res = parseBytes(t, ClaudeCode{}, append(join(user("u1", "x")), tail[:len(tail)-2]...), 0)
	if res.Lines != 1 || res.Pending != int64(len(tail)-2) {
		t.Fatalf("unfinished: %d lines, pending %d", res.Lines, res.Pending)
	}
	res, err := ClaudeCode{}.Parse(context.Background(), bytes.NewReader(tail), "/p/s.jsonl", 100)
	if err != nil || res.Lines != 1 || res.Pending != 0 || res.Offset != 100+int64(len(tail)) || res.Cut != 1 {
		t.Fatalf("finished: %d lines, pending %d, offset %d, cut %d, %v", res.Lines, res.Pending, res.Offset, res.Cut, err)
	}
}
