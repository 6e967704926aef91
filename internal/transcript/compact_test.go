package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		msg  string
		want int
	}{
		{"user string", `{"role":"user","content":"12345678"}`, 2},
		{"user blocks, images not counted", `{"role":"user","content":[{"type":"text","text":"123456789"},{"type":"image","data":"xxxx"}]}`, 3},
		{"assistant text, thinking, tool call", `{"role":"assistant","content":[{"type":"text","text":"abcd"},{"type":"thinking","thinking":"efgh"},{"type":"toolCall","id":"c","name":"read","arguments":{"path":"a"}}]}`, (4 + 4 + 4 + 12 + 3) / 4},
		{"tool call arguments are compacted", `{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"read","arguments":{ "path" : "a" }}]}`, (4 + 12 + 3) / 4},
		{"tool result with an image", `{"role":"toolResult","toolCallId":"c","content":[{"type":"text","text":"1234"},{"type":"image","data":"x"}]}`, (4 + 4800 + 3) / 4},
		{"custom string content", `{"role":"custom","customType":"x","content":"123456789012"}`, 3},
		{"bash execution", `{"role":"bashExecution","command":"ls","output":"a b c"}`, 2},
		{"summary", `{"role":"compactionSummary","summary":"1234567890123"}`, 4},
		{"branch summary", `{"role":"branchSummary","summary":"1234"}`, 1},
		{"UTF-16 units: an emoji counts 2, é counts 1", `{"role":"user","content":"\ud83d\ude00\u00e9x"}`, 1},
		{"UTF-16 units above the BMP", `{"role":"user","content":"` + strings.Repeat("\U0001F600", 4) + `"}`, 2},
		{"unknown role", `{"role":"system","content":"12345678"}`, 0},
		{"aborted assistant without content", `{"role":"assistant","content":[],"stopReason":"aborted"}`, 0},
		{"not JSON", `{"role":`, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := EstimateTokens(json.RawMessage(tc.msg)); got != tc.want {
				t.Errorf("EstimateTokens = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestEstimateContextTokens(t *testing.T) {
	t.Parallel()
	u := json.RawMessage(`{"role":"user","content":"12345678"}`) // 2 tokens
	withUsage := func(total, input int, stop string) json.RawMessage {
		return json.RawMessage(`{"role":"assistant","content":[{"type":"text","text":"1234"}],"stopReason":"` + stop + `","usage":{"input":` +
			strconv.Itoa(input) + `,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":` + strconv.Itoa(total) + `}}`)
	}
	cases := []struct {
		name string
		msgs []json.RawMessage
		want ContextEstimate
	}{
		{"no usage: all estimated", []json.RawMessage{u, u}, ContextEstimate{Tokens: 4, TrailingTokens: 4, LastUsageIndex: -1}},
		{"usage plus trailing", []json.RawMessage{u, withUsage(1000, 0, "stop"), u}, ContextEstimate{Tokens: 1002, UsageTokens: 1000, TrailingTokens: 2, LastUsageIndex: 1}},
		{"no totalTokens: parts summed", []json.RawMessage{withUsage(0, 100, "toolUse")}, ContextEstimate{Tokens: 105, UsageTokens: 105, LastUsageIndex: 0}},
		{"aborted and error messages skipped", []json.RawMessage{withUsage(500, 0, "stop"), u, withUsage(9999, 0, "aborted"), withUsage(9999, 0, "error")}, ContextEstimate{Tokens: 504, UsageTokens: 500, TrailingTokens: 4, LastUsageIndex: 0}},
		{"empty", nil, ContextEstimate{LastUsageIndex: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := EstimateContextTokens(tc.msgs); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestShouldCompact(t *testing.T) {
	t.Parallel()
	cases := []struct {
		tokens, window, reserve int
		want                    bool
	}{
		{100000, 200000, DefaultReserveTokens, false},
		{200000 - DefaultReserveTokens, 200000, DefaultReserveTokens, false},
		{200000 - DefaultReserveTokens + 1, 200000, DefaultReserveTokens, true},
		{10, 8, 0, true},
	}
	for _, tc := range cases {
		if got := ShouldCompact(tc.tokens, tc.window, tc.reserve); got != tc.want {
			t.Errorf("ShouldCompact(%d, %d, %d) = %v", tc.tokens, tc.window, tc.reserve, got)
		}
	}
}

// piCut is what pi 0.73.1's prepareCompaction returns for a pi sample
// (computed once with its SessionManager and compaction module): the index
// of the first kept entry in the file, and the sizes of what it summarizes.
type piCut struct {
	keep, firstKept, tokensBefore int
	split                         bool
	summarize, prefix             int
	readFiles, modifiedFiles      int
}

// TestChooseCutMatchesPi: on the pi samples, ChooseCut picks the entry
// pi picks, with the same token count, split and summarized messages.
func TestChooseCutMatchesPi(t *testing.T) {
	t.Parallel()
	samples := []struct {
		file string
		cuts []piCut
	}{
		{"pi-mono-large-session-v1.jsonl", []piCut{
			{0, 1017, 177657, true, 882, 31, 6, 23},
			{1000, 1011, 177657, true, 882, 25, 6, 23},
			{5000, 983, 177657, true, 874, 5, 6, 23},
			{DefaultKeepRecentTokens, 837, 177657, true, 730, 3, 7, 20},
			{50000, 394, 177657, true, 361, 7, 6, 15},
			{100000, 27, 177657, true, 23, 3, 6, 1},
			{1000000, 0, 177657, false, 0, 0, 0, 0},
		}},
		{"getspecstory-compaction.jsonl", []piCut{
			{0, 5, 28, true, 1, 1, 0, 0},
			{10, 4, 28, false, 1, 0, 0, 0},
			{100, 2, 28, false, 0, 0, 0, 0},
		}},
		{"getspecstory-branching.jsonl", []piCut{
			{0, 4, 2, true, 2, 1, 0, 0},
			{10, 3, 2, false, 2, 0, 0, 0},
			{100, 0, 2, false, 0, 0, 0, 0},
		}},
		{"getspecstory-full_format.jsonl", []piCut{
			{0, 18, 330, true, 2, 1, 1, 0},
			{10, 10, 330, false, 0, 0, 1, 0},
		}},
		{"getspecstory-sample.jsonl", []piCut{
			{0, 0, 1054, false, 0, 0, 0, 0},
			{10, 3, 1054, true, 0, 1, 0, 0},
		}},
		{"getspecstory-fields.jsonl", []piCut{
			{0, 8, 187, true, 5, 3, 0, 0},
			{10, 7, 187, true, 5, 2, 0, 0},
			{100, 0, 187, false, 0, 0, 0, 0},
		}},
	}
	for _, s := range samples {
		t.Run(s.file, func(t *testing.T) {
			t.Parallel()
			f := openFile(t, piSample(t, s.file))
			index := map[string]int{}
			for i, e := range f.Entries {
				index[e.ID] = i
			}
			for _, want := range s.cuts {
				c, err := ChooseCut(f, "", want.keep)
				if err != nil {
					t.Fatalf("keep %d: %v", want.keep, err)
				}
				got := piCut{
					keep: want.keep, firstKept: index[c.FirstKeptEntryID], tokensBefore: c.TokensBefore, split: c.IsSplitTurn,
					summarize: len(c.SummarizeIDs), prefix: len(c.TurnPrefixIDs), readFiles: len(c.ReadFiles), modifiedFiles: len(c.ModifiedFiles),
				}
				if got != want {
					t.Errorf("keep %d: got %+v, pi %+v", want.keep, got, want)
				}
				if e := f.Entry(c.FirstKeptEntryID); e.Type == "message" && e.Role == "toolResult" {
					t.Errorf("keep %d: cut at a tool result", want.keep)
				}
			}
		})
	}
}

// session builds a transcript step by step and names its entries.
type session struct {
	t   *testing.T
	w   *Writer
	ids map[string]string
}

func newSession(t *testing.T, seed byte) *session {
	t.Helper()
	return &session{t: t, w: newWriter(t, filepath.Join(t.TempDir(), "s.jsonl"), testOpts(seed)), ids: map[string]string{}}
}

func (s *session) add(key string, msg json.RawMessage) *session {
	s.t.Helper()
	s.ids[key] = try(s.w.AppendMessage(msg)).ok(s.t)
	return s
}

// text returns n tokens worth of text (4 characters a token).
func text(n int) string { return strings.Repeat("abcd", n) }

func bash(n int) json.RawMessage {
	return json.RawMessage(`{"role":"bashExecution","command":"","output":"` + text(n) + `","exitCode":0,"cancelled":false,"truncated":false,"timestamp":1}`)
}

// TestChooseCutCrafted: cut points, split turns, tool calls, the previous
// compaction, settings entries.
func TestChooseCutCrafted(t *testing.T) {
	t.Parallel()
	type want struct {
		first, turnStart    string
		summarize, prefix   []string
		readFiles, modified []string
		previousSummary     string
		err                 error
	}
	cases := []struct {
		name  string
		build func(s *session)
		keep  int
		want  want
	}{
		{"budget reached at an assistant message: split turn", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg(text(100))).add("u2", userMsg(text(100))).
				add("a2", assistantMsg(text(100))).add("u3", userMsg(text(100))).add("a3", assistantMsg(text(100)))
		}, 250, want{first: "a2", turnStart: "u2", summarize: []string{"u1", "a1"}, prefix: []string{"u2"}}},
		{"budget reached at a user message", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg(text(100))).add("u2", userMsg(text(100))).
				add("a2", assistantMsg(text(100))).add("u3", userMsg(text(100))).add("a3", assistantMsg(text(100)))
		}, 200, want{first: "u3", summarize: []string{"u1", "a1", "u2", "a2"}}},
		{"never at a tool result", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c1", "bash", ""})).
				add("r1", toolResultMsg("c1", text(100))).add("a2", assistantMsg(text(100)))
		}, 150, want{first: "a2", turnStart: "u1", prefix: []string{"u1", "a1", "r1"}}},
		{"a call and its result stay on one side", func(s *session) {
			// A bash execution between a call and its result is a valid
			// cut point for pi; cutting there would orphan r1.
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c1", "bash", ""})).
				add("b1", bash(100)).add("r1", toolResultMsg("c1", "x")).add("a2", assistantMsg("ok"))
		}, 50, want{first: "a1", turnStart: "u1", prefix: []string{"u1"}}},
		{"settings entries before the cut are kept with it", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg(text(100)))
			s.ids["m"] = try(s.w.AppendModelChange("p", "m2")).ok(s.t)
			s.add("u2", userMsg(text(100))).add("a2", assistantMsg(text(100)))
		}, 200, want{first: "m", turnStart: "u1", prefix: []string{"u1", "a1"}}},
		{"file operations", func(s *session) {
			s.add("u1", userMsg(text(10))).
				add("a1", assistantMsg("", call{"c1", "read", `{"path":"a.go"}`}, call{"c2", "read", `{"path":"b.go"}`}, call{"c3", "edit", `{"path":"b.go"}`}, call{"c4", "write", `{"path":"c.go"}`}, call{"c5", "bash", `{"path":"d.go"}`})).
				add("r1", toolResultMsg("c1", "")).add("r2", toolResultMsg("c2", "")).add("r3", toolResultMsg("c3", "")).
				add("r4", toolResultMsg("c4", "")).add("r5", toolResultMsg("c5", "")).add("a2", assistantMsg(text(10))).
				add("u2", userMsg(text(100))).add("a3", assistantMsg(text(100)))
		}, 150, want{first: "u2", summarize: []string{"u1", "a1", "r1", "r2", "r3", "r4", "r5", "a2"}, readFiles: []string{"a.go"}, modified: []string{"b.go", "c.go"}}},
		{"after a compaction only its kept part counts", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg(text(100))).add("u2", userMsg(text(100))).add("a2", assistantMsg(text(100)))
			try(s.w.AppendCompaction("first summary", s.ids["u2"], 400, CompactionDetails{ReadFiles: []string{"old.go"}, ModifiedFiles: []string{}}, false)).ok(s.t)
			s.add("u3", userMsg(text(100))).add("a3", assistantMsg(text(100)))
		}, 150, want{first: "u3", summarize: []string{"u2", "a2"}, readFiles: []string{"old.go"}, previousSummary: "first summary"}},
		{"the leaf is a compaction", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg(text(100)))
			try(s.w.AppendCompaction("s", s.ids["a1"], 1, nil, false)).ok(s.t)
		}, 10, want{err: ErrAlreadyCompacted}},
		{"a tool call waits for its result", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c1", "bash", ""}))
		}, 10, want{err: ErrToolCallPending}},
		{"one of two results is in", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c1", "bash", ""}, call{"c2", "bash", ""})).add("r1", toolResultMsg("c1", "x"))
		}, 10, want{err: ErrToolCallPending}},
		{"one of two calls of one id is answered", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"s", "bash", ""}, call{"s", "bash", ""})).add("r1", toolResultMsg("s", "x"))
		}, 10, want{err: ErrToolCallPending}},
		{"a result stays with its call when a later reply reuses the id", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c", "bash", ""})).
				add("b1", bash(100)).add("r1", toolResultMsg("c", "x")).
				add("a2", assistantMsg("", call{"c", "bash", ""})).add("r2", toolResultMsg("c", "x")).add("a3", assistantMsg("ok"))
		}, 50, want{first: "a1", turnStart: "u1", prefix: []string{"u1"}}},
		{"an aborted call is not pending", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", json.RawMessage(`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{}}],"stopReason":"aborted"}`))
		}, 10, want{first: "u1"}},
		{"a user message after an unanswered call", func(s *session) {
			s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c1", "bash", ""})).add("u2", userMsg(text(100)))
		}, 50, want{first: "u2", summarize: []string{"u1", "a1"}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSession(t, byte(120+i))
			tc.build(s)
			key := map[string]string{}
			for k, v := range s.ids {
				key[v] = k
			}
			keys := func(ids []string) []string {
				var out []string
				for _, id := range ids {
					out = append(out, key[id])
				}
				return out
			}
			c, err := ChooseCut(s.w.File(), s.w.LeafID(), tc.keep)
			if tc.want.err != nil || err != nil {
				if !errors.Is(err, tc.want.err) {
					t.Fatalf("error %v, want %v", err, tc.want.err)
				}
				return
			}
			got := want{
				first: key[c.FirstKeptEntryID], turnStart: key[c.TurnStartID], summarize: keys(c.SummarizeIDs), prefix: keys(c.TurnPrefixIDs),
				readFiles: c.ReadFiles, modified: c.ModifiedFiles, previousSummary: c.PreviousSummary,
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if c.IsSplitTurn != (tc.want.turnStart != "") {
				t.Errorf("IsSplitTurn %v", c.IsSplitTurn)
			}
			// Appending the compaction gives a context whose tool calls and
			// results still pair.
			try(s.w.AppendCompaction("summary", c.FirstKeptEntryID, c.TokensBefore, c.Details(), false)).ok(t)
			ctx := try(s.w.Context()).ok(t)
			for _, p := range CheckToolPairing(ctx.Messages) {
				if p.Kind == "orphan" {
					t.Errorf("compacted context: %s", p)
				}
			}
		})
	}
}

func TestChooseCutErrors(t *testing.T) {
	t.Parallel()
	s := newSession(t, 140)
	s.add("u1", userMsg("x"))
	if _, err := ChooseCut(s.w.File(), "nothere", 10); !errors.Is(err, ErrUnknownEntry) {
		t.Errorf("unknown leaf: %v", err)
	}
	empty := &File{}
	if _, err := ChooseCut(empty, "", 10); !errors.Is(err, ErrNothingToCompact) {
		t.Errorf("empty file: %v", err)
	}
}

// TestCompact: the convenience appends pi's compaction; the context then
// starts with the summary and resumes at the first kept entry.
func TestCompact(t *testing.T) {
	t.Parallel()
	s := newSession(t, 141)
	s.add("u1", userMsg(text(100))).add("a1", assistantMsg("", call{"c1", "read", `{"path":"x.go"}`})).
		add("r1", toolResultMsg("c1", text(100))).add("a2", assistantMsg(text(100))).
		add("u2", userMsg(text(100))).add("a3", assistantMsg(text(100)))
	id := try(Compact(s.w, "what happened", 200, nil)).ok(t)
	e := s.w.File().Entry(id)
	if e.Type != "compaction" || e.FirstKeptEntryID() != s.ids["u2"] || e.Summary() != "what happened" {
		t.Fatalf("compaction entry %+v", e)
	}
	raw := string(e.Raw)
	if !strings.Contains(raw, `"tokensBefore":`) || !strings.HasSuffix(raw, `"details":{"readFiles":["x.go"],"modifiedFiles":[]}}`) {
		t.Errorf("line %s", raw)
	}
	ctx := try(s.w.Context()).ok(t)
	if got := len(ctx.Messages); got != 3 {
		t.Fatalf("%d messages after compaction, want summary, u2, a3", got)
	}
	if !bytes.Equal(ctx.Messages[1], userMsg(text(100))) {
		t.Errorf("first kept message %s", ctx.Messages[1])
	}
	if _, err := Compact(s.w, "again", 200, nil); !errors.Is(err, ErrAlreadyCompacted) {
		t.Errorf("second compaction: %v", err)
	}
	s.add("u3", userMsg("short"))
	if _, err := Compact(s.w, "tiny", 1000000, nil); !errors.Is(err, ErrNothingToCompact) {
		t.Errorf("nothing to summarize: %v", err)
	}
	s.add("a4", assistantMsg("", call{"c9", "bash", ""}))
	if _, err := Compact(s.w, "busy", 1, nil); !errors.Is(err, ErrToolCallPending) {
		t.Errorf("pending tool call: %v", err)
	}
	msgs := try(SummaryMessages(s.w.File(), []string{s.ids["u1"], s.ids["a1"]})).ok(t)
	if len(msgs) != 2 || !bytes.Equal(msgs[0], userMsg(text(100))) {
		t.Errorf("summary messages %s", msgs)
	}
}

// TestCompactLargeSample: compacting the large real session (migrated to
// v3) at pi's default keeps pi's cut and a context whose results all have
// their calls.
func TestCompactLargeSample(t *testing.T) {
	t.Parallel()
	orig := try(os.ReadFile(piSample(t, largeV1))).ok(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	try(Migrate(path, time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))).ok(t)
	w := try(OpenWriter(path, testOpts(142))).ok(t)
	defer func() { _ = w.Close() }()
	id := try(Compact(w, "summary of a long session", DefaultKeepRecentTokens, nil)).ok(t)
	f := w.File()
	if first := f.Entry(f.Entry(id).FirstKeptEntryID()); first.Line != 837+2 {
		t.Errorf("first kept entry on line %d, pi's is on line %d", first.Line, 837+2)
	}
	ctx := try(w.Context()).ok(t)
	// Kept assistant messages carry the usage of the uncompacted context,
	// so estimate every message instead.
	est := 0
	for _, m := range ctx.Messages {
		est += EstimateTokens(m)
	}
	if est < DefaultKeepRecentTokens || est > 177657/2 {
		t.Errorf("compacted context of about %d tokens", est)
	}
	for _, p := range CheckToolPairing(ctx.Messages) {
		if p.Kind == "orphan" {
			t.Errorf("compacted context: %s", p)
		}
	}
}

// TestCompactLines: archive byte-identical, header and last entries kept
// as they were, never starting with tool results.
func TestCompactLines(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 10, 11, 12, 345e6, time.UTC)
	build := func(t *testing.T, path string) map[string]string {
		t.Helper()
		s := &session{t: t, w: newWriter(t, path, testOpts(150)), ids: map[string]string{}}
		s.add("u1", userMsg("one")).add("a1", assistantMsg("", call{"c1", "bash", ""}, call{"c2", "bash", ""})).
			add("r1", toolResultMsg("c1", "x")).add("r2", toolResultMsg("c2", "y")).add("a2", assistantMsg("done")).
			add("u2", userMsg("two")).add("a3", assistantMsg("two done"))
		if err := s.w.Close(); err != nil {
			t.Fatal(err)
		}
		return s.ids
	}
	cases := []struct {
		name     string
		maxLines int
		// kept entries; nil means nothing to do
		want []string
	}{
		{"last three", 3, []string{"a2", "u2", "a3"}},
		{"leading tool results dropped", 5, []string{"a2", "u2", "a3"}},
		{"cut at the first result", 4, []string{"a2", "u2", "a3"}},
		{"cut at the call", 6, []string{"a1", "r1", "r2", "a2", "u2", "a3"}},
		{"as many as there are", 7, nil},
		{"more than there are", 100, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "s.jsonl")
			ids := build(t, path)
			orig := try(os.ReadFile(path)).ok(t)
			origLines := fileLines(t, path)
			of := openFile(t, path)
			archive := try(CompactLines(path, tc.maxLines, now)).ok(t)
			if tc.want == nil {
				if archive != "" {
					t.Errorf("archived %q with nothing to do", archive)
				}
				if b := try(os.ReadFile(path)).ok(t); !bytes.Equal(b, orig) {
					t.Error("file changed with nothing to do")
				}
				return
			}
			if archive != path+".bak.2026-05-01T10-11-12.345Z" {
				t.Errorf("archive %q", archive)
			}
			if b := try(os.ReadFile(archive)).ok(t); !bytes.Equal(b, orig) {
				t.Error("archive differs from the original")
			}
			lines := fileLines(t, path)
			if lines[0] != origLines[0] {
				t.Errorf("header changed: %s", lines[0])
			}
			if len(lines) != 1+len(tc.want) {
				t.Fatalf("%d lines, want %d", len(lines), 1+len(tc.want))
			}
			for i, k := range tc.want {
				if want := origLines[of.Entry(ids[k]).Line-1]; lines[1+i] != want {
					t.Errorf("line %d is not %s's original line", i+2, k)
				}
			}
			for _, fi := range []string{path, archive} {
				if st := try(os.Stat(fi)).ok(t); st.Mode().Perm() != 0o600 {
					t.Errorf("%s mode %v", fi, st.Mode().Perm())
				}
			}
			f := openFile(t, path)
			if roots := f.Roots(); len(roots) != 1 || roots[0].ID != ids[tc.want[0]] {
				t.Errorf("roots %v", roots)
			}
			ctx := buildCtx(t, f, "")
			if p := CheckToolPairing(ctx.Messages); len(p) != 0 {
				t.Errorf("pairing after line compaction: %v", p)
			}
			w := try(OpenWriter(path, testOpts(151))).ok(t)
			try(w.AppendMessage(userMsg("after line compaction"))).ok(t)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCompactLinesErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	path := filepath.Join(dir, "s.jsonl")
	writeSession(t, path, 6, 152)
	orig := try(os.ReadFile(path)).ok(t)
	if _, err := CompactLines(path, 0, now); err == nil {
		t.Error("maxLines 0 accepted")
	}
	if err := os.WriteFile(ArchiveName(path, "bak", now), []byte("older archive\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CompactLines(path, 2, now); !errors.Is(err, fs.ErrExist) {
		t.Errorf("archive name taken: %v", err)
	}
	if b := try(os.ReadFile(path)).ok(t); !bytes.Equal(b, orig) {
		t.Error("file changed although the archive failed")
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := CompactLines(link, 2, now); err == nil {
		t.Error("compacted through a symlink")
	}
	// A v1 file becomes v3 (its migrated lines) when compacted.
	v1 := filepath.Join(dir, "v1.jsonl")
	if err := os.WriteFile(v1, []byte(`{"type":"session","id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}`+"\n"+
		`{"type":"message","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}}`+"\n"+
		`{"type":"message","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"user","content":"two","timestamp":2}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	try(CompactLines(v1, 1, now)).ok(t)
	f := openFile(t, v1)
	if f.Header.Version != 3 || len(f.Entries) != 1 || f.Entries[0].ID == "" {
		t.Errorf("compacted v1: header %s, entries %d", f.Header.Raw, len(f.Entries))
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
