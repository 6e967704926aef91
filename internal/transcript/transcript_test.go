package transcript

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// piDir holds the real pi transcripts the tests compare nexus with pi on; they are part of the
// repository (testdata/transcripts/README.md gives each file's source and licence).
const piDir = "../../testdata/transcripts/pi"

// largeV1 is the large real pi v1 session among them.
const largeV1 = "pi-mono-large-session-v1.jsonl"

// piSample returns the path of one of the pi samples. The samples ship with the repository, so a
// missing one is a broken checkout, reported as a failure rather than a skip.
func piSample(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(piDir, name)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("pi sample missing from the repository's testdata: %v", err)
	}
	return p
}

// piSamples returns the paths of every pi sample (see piSample).
func piSamples(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(piDir, "*.jsonl"))
	if err != nil || len(files) < 8 {
		tb.Fatalf("pi samples missing from the repository's testdata: %d files under %s (%v)", len(files), piDir, err)
	}
	return files
}

func piFile(t *testing.T, name string) *File {
	t.Helper()
	f, err := Open(piSample(t, name))
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func mustRead(t *testing.T, s string) *File {
	t.Helper()
	f, err := Read(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return f
}

type msgView struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Summary string          `json:"summary"`
}

func roles(t *testing.T, ctx *Context) []string {
	t.Helper()
	var out []string
	for _, m := range ctx.Messages {
		var v msgView
		if err := json.Unmarshal(m, &v); err != nil {
			t.Fatalf("message %s: %v", m, err)
		}
		out = append(out, v.Role)
	}
	return out
}

// firstText returns the first text of a message's content (string or blocks)
// or its summary.
func firstText(t *testing.T, m json.RawMessage) string {
	t.Helper()
	var v msgView
	if err := json.Unmarshal(m, &v); err != nil {
		t.Fatal(err)
	}
	if v.Summary != "" {
		return v.Summary
	}
	var s string
	if json.Unmarshal(v.Content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(v.Content, &blocks)
	for _, b := range blocks {
		if b.Type == "text" {
			return b.Text
		}
	}
	return ""
}

func ids(es []*Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestAllPiFilesLoad(t *testing.T) {
	for _, p := range piSamples(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Entries) == 0 {
				t.Fatal("no entries")
			}
			if len(f.Notes) != 0 {
				t.Errorf("unexpected notes: %v", f.Notes)
			}
			seen := map[string]bool{}
			for _, e := range f.Entries {
				if e.ID == "" || seen[e.ID] {
					t.Fatalf("line %d: missing or duplicate id %q", e.Line, e.ID)
				}
				seen[e.ID] = true
				raw, err := f.Raw(e)
				if err != nil || !json.Valid(raw) {
					t.Fatalf("line %d: invalid raw (%v)", e.Line, err)
				}
			}
			ctx, err := f.BuildContext("")
			if err != nil {
				t.Fatal(err)
			}
			if ctx.LeafID != f.Leaf().ID {
				t.Errorf("leaf %q, want %q", ctx.LeafID, f.Leaf().ID)
			}
			if len(ctx.Messages) == 0 {
				t.Error("empty context")
			}
		})
	}
}

func TestContextOnSamples(t *testing.T) {
	tests := []struct {
		file, leaf    string
		roles         []string
		first, last   string // first text of the first and last message
		model         Model
		thinking      string
		pathLen       int
		labels        map[string]string
		name, version string
	}{
		{
			file:  "getspecstory-compaction.jsonl",
			roles: []string{"compactionSummary", "assistant", "user", "assistant"},
			first: "summarized earlier turns", last: "second answer after compaction",
			model: Model{"fireworks", "glm"}, thinking: "off", pathLen: 6,
		},
		{
			// firstKeptEntryId is not on the path: nothing before the compaction is kept.
			file:  "getspecstory-compaction_missing.jsonl",
			roles: []string{"compactionSummary", "user"},
			first: "summarized earlier turns", last: "prompt after compaction",
			model: Model{"fireworks", "glm"}, thinking: "off", pathLen: 5,
		},
		{
			file:  "getspecstory-branching.jsonl",
			roles: []string{"user", "assistant", "user", "assistant"},
			first: "common prompt", last: "right branch answer",
			model: Model{"x", "m"}, thinking: "off", pathLen: 4,
		},
		{
			file: "getspecstory-branching.jsonl", leaf: "u2left",
			roles: []string{"user", "assistant", "user"},
			first: "common prompt", last: "left branch prompt",
			model: Model{"x", "m"}, thinking: "off", pathLen: 3,
		},
		{
			// unknown leaf: the last entry
			file: "getspecstory-branching.jsonl", leaf: "nope",
			roles: []string{"user", "assistant", "user", "assistant"},
			first: "common prompt", last: "right branch answer",
			model: Model{"x", "m"}, thinking: "off", pathLen: 4,
		},
		{
			file:  "getspecstory-full_format.jsonl",
			roles: []string{"compactionSummary", "assistant", "branchSummary", "user", "assistant"},
			first: "final compaction", last: "final answer",
			model: Model{"fireworks", "glm-1"}, thinking: "high", pathLen: 15,
			labels: map[string]string{"u1": "checkpoint-1"}, name: "My test session",
		},
		{
			// before the compaction: custom_message becomes role custom
			file: "getspecstory-full_format.jsonl", leaf: "u1b",
			roles: []string{"custom", "user", "user"},
			first: "Injected context from extension", last: "hello as array",
			model: Model{"fireworks", "glm-1"}, thinking: "high", pathLen: 8,
			labels: map[string]string{"u1": "checkpoint-1"}, name: "My test session",
		},
		{
			file:  "getspecstory-fields.jsonl",
			roles: []string{"user", "user", "assistant", "toolResult", "assistant", "bashExecution", "custom", "branchSummary", "compactionSummary"},
			first: "hello as a plain string", last: "compacted earlier",
			model: Model{"fireworks", "glm-1"}, thinking: "off", pathLen: 9,
		},
		{
			file:  "getspecstory-sample.jsonl",
			roles: []string{"user", "assistant", "toolResult"},
			first: "look at specstory-cli and give me an overview", last: "specstory-cli",
			model: Model{"fireworks", "accounts/fireworks/routers/glm-5p2-fast"}, thinking: "high", pathLen: 5,
		},
		{
			file:  "getspecstory-v1_legacy.jsonl",
			roles: []string{"user", "assistant"},
			first: "legacy prompt", last: "legacy answer",
			model: Model{"x", "m"}, thinking: "off", pathLen: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.file+"@"+tc.leaf, func(t *testing.T) {
			f := piFile(t, tc.file)
			ctx, err := f.BuildContext(tc.leaf)
			if err != nil {
				t.Fatal(err)
			}
			if got := roles(t, ctx); !reflect.DeepEqual(got, tc.roles) {
				t.Fatalf("roles %v, want %v", got, tc.roles)
			}
			if got := firstText(t, ctx.Messages[0]); got != tc.first {
				t.Errorf("first text %q, want %q", got, tc.first)
			}
			if got := firstText(t, ctx.Messages[len(ctx.Messages)-1]); got != tc.last {
				t.Errorf("last text %q, want %q", got, tc.last)
			}
			if ctx.Model == nil || *ctx.Model != tc.model {
				t.Errorf("model %+v, want %+v", ctx.Model, tc.model)
			}
			if ctx.ThinkingLevel != tc.thinking {
				t.Errorf("thinking %q, want %q", ctx.ThinkingLevel, tc.thinking)
			}
			if got := len(f.Path(tc.leaf)); got != tc.pathLen {
				t.Errorf("path length %d, want %d", got, tc.pathLen)
			}
			labels := tc.labels
			if labels == nil {
				labels = map[string]string{}
			}
			if got := f.Labels(); !reflect.DeepEqual(got, labels) {
				t.Errorf("labels %v, want %v", got, labels)
			}
			if got := f.SessionName(); got != tc.name {
				t.Errorf("name %q, want %q", got, tc.name)
			}
		})
	}
}

func TestCompactionSummaryMessage(t *testing.T) {
	f := piFile(t, "getspecstory-compaction.jsonl")
	ctx, err := f.BuildContext("")
	if err != nil {
		t.Fatal(err)
	}
	want := `{"role":"compactionSummary","summary":"summarized earlier turns","tokensBefore":5000,"timestamp":1783591203000}`
	if string(ctx.Messages[0]) != want {
		t.Errorf("summary message\n got %s\nwant %s", ctx.Messages[0], want)
	}
	// message entries are passed through byte-for-byte
	a1, err := f.Full(f.Entry("a1"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ctx.Messages[1], a1.Message) || !bytes.Contains(a1.Raw, a1.Message) {
		t.Errorf("a1 not passed through verbatim: %s", ctx.Messages[1])
	}
	text, ok := LLMText(ctx.Messages[0])
	if !ok || text != CompactionSummaryPrefix+"summarized earlier turns\n</summary>" {
		t.Errorf("LLMText = %q, %v", text, ok)
	}
}

func TestBranchingTree(t *testing.T) {
	f := piFile(t, "getspecstory-branching.jsonl")
	if got := f.Leaf().ID; got != "a2right" {
		t.Errorf("leaf %q, want a2right", got)
	}
	if got := ids(f.Children("a1")); !reflect.DeepEqual(got, []string{"u2left", "u2right"}) {
		t.Errorf("children of a1: %v", got)
	}
	if got := ids(f.Roots()); !reflect.DeepEqual(got, []string{"u1"}) {
		t.Errorf("roots: %v", got)
	}
	if got := ids(f.Path("u2left")); !reflect.DeepEqual(got, []string{"u1", "a1", "u2left"}) {
		t.Errorf("path: %v", got)
	}
}

func TestLargeV1Migrates(t *testing.T) {
	f := piFile(t, largeV1)
	if f.Header.Version != 1 {
		t.Errorf("version %d, want 1", f.Header.Version)
	}
	if len(f.Entries) != 1018 {
		t.Fatalf("%d entries, want 1018", len(f.Entries))
	}
	for i, e := range f.Entries {
		if e.ID != v1ID(i+1) {
			t.Fatalf("entry %d id %q", i, e.ID)
		}
		wantParent := ""
		if i > 0 {
			wantParent = f.Entries[i-1].ID
		}
		if e.ParentID != wantParent {
			t.Fatalf("entry %d parent %q, want %q", i, e.ParentID, wantParent)
		}
		var raw struct {
			ID       string  `json:"id"`
			ParentID *string `json:"parentId"`
		}
		if err := json.Unmarshal(e.Raw, &raw); err != nil || raw.ID != e.ID || (raw.ParentID == nil) != (i == 0) {
			t.Fatalf("entry %d raw not migrated: %s", i, e.Raw)
		}
	}
	ctx, err := f.BuildContext("")
	if err != nil {
		t.Fatal(err)
	}
	if len(ctx.Messages) != 914 {
		t.Errorf("%d messages, want 914", len(ctx.Messages))
	}
	if len(f.Path("")) != 1018 {
		t.Errorf("path %d, want 1018", len(f.Path("")))
	}
	// deterministic: a second read gives the same ids
	g := piFile(t, largeV1)
	if g.Leaf().ID != f.Leaf().ID {
		t.Error("ids differ between reads")
	}
}

func TestV1CompactionAndV2Migration(t *testing.T) {
	tests := []struct {
		name, in  string
		firstKept string
		roles     []string
		check     func(t *testing.T, f *File)
	}{
		{
			name: "v1 compaction index to id",
			in: `{"type":"session","id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x","provider":"p"}
{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}}
{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"two"}],"provider":"p","model":"m"}}
{"type":"message","timestamp":"2025-01-01T00:00:03.000Z","message":{"role":"user","content":"three","timestamp":3}}
{"type":"compaction","timestamp":"2025-01-01T00:00:04.000Z","summary":"sum","firstKeptEntryIndex":2,"tokensBefore":9}
{"type":"message","timestamp":"2025-01-01T00:00:05.000Z","message":{"role":"hookMessage","customType":"h","content":"five","display":true,"timestamp":5}}
`,
			firstKept: "00000002",
			roles:     []string{"compactionSummary", "assistant", "user", "custom"},
			check: func(t *testing.T, f *File) {
				t.Helper()
				c := f.Entry("00000004")
				if c == nil || c.Type != "compaction" {
					t.Fatalf("compaction entry: %+v", c)
				}
				if bytes.Contains(c.Raw, []byte("firstKeptEntryIndex")) || !bytes.Contains(c.Raw, []byte(`"firstKeptEntryId":"00000002"`)) {
					t.Errorf("compaction raw not migrated: %s", c.Raw)
				}
				if h := f.Entry("00000005"); h.Role != "custom" || !bytes.Contains(h.Message, []byte(`"role":"custom"`)) {
					t.Errorf("hookMessage not migrated: %s", h.Message)
				}
			},
		},
		{
			name: "v1 compaction index pointing at the header keeps nothing before",
			in: `{"type":"session","id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}
{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}}
{"type":"compaction","timestamp":"2025-01-01T00:00:04.000Z","summary":"sum","firstKeptEntryIndex":0,"tokensBefore":9}
`,
			roles: []string{"compactionSummary"},
		},
		{
			name: "version as a string is not v1",
			in: `{"type":"session","version":"3","id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}
{"type":"message","id":"keep","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"one","timestamp":1}}
`,
			roles: []string{"user"},
			check: func(t *testing.T, f *File) {
				if f.Header.Version != 3 || f.Entry("keep") == nil {
					t.Errorf("version %d, ids %v", f.Header.Version, ids(f.Entries))
				}
			},
		},
		{
			name: "v2 hookMessage becomes custom, unknown fields kept",
			in: `{"type":"session","version":2,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}
{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","extra":{"k":"<&>"},"message":{"role":"hookMessage","customType":"h","content":"hi","display":false,"timestamp":1,"zz":[1,2]}}
`,
			roles: []string{"custom"},
			check: func(t *testing.T, f *File) {
				e := f.Entry("a")
				if !bytes.Contains(e.Raw, []byte(`"extra":{"k":"<&>"}`)) || !bytes.Contains(e.Raw, []byte(`"zz":[1,2]`)) {
					t.Errorf("unknown fields not kept: %s", e.Raw)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustRead(t, tc.in)
			if tc.firstKept != "" {
				var found bool
				for _, e := range f.Entries {
					if e.Type == "compaction" {
						found = true
						if e.FirstKeptEntryID() != tc.firstKept {
							t.Errorf("firstKeptEntryId %q, want %q", e.FirstKeptEntryID(), tc.firstKept)
						}
					}
				}
				if !found {
					t.Fatal("no compaction")
				}
			}
			if got := roles(t, mustContext(t, f, "")); !reflect.DeepEqual(got, tc.roles) {
				t.Errorf("roles %v, want %v", got, tc.roles)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

const v3head = `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}` + "\n"

func TestQuirks(t *testing.T) {
	unknown := `{"type":"weird_future","id":"w","parentId":"u","timestamp":"2026-01-01T00:00:02.000Z","payload":{"a":"\u2028<b>"},"n":1.50}`
	in := v3head +
		`{"type":"message","id":"u","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}` + "\r\n" +
		"\n" +
		"not json at all\n" +
		unknown + "\n" +
		`{"type":"message","id":"torn","parentId":"w","message":{"ro`
	f := mustRead(t, in)
	if got := ids(f.Entries); !reflect.DeepEqual(got, []string{"u", "w"}) {
		t.Fatalf("entries %v", got)
	}
	if string(f.Entries[1].Raw) != unknown {
		t.Errorf("unknown entry not kept byte-for-byte: %s", f.Entries[1].Raw)
	}
	if len(f.Notes) != 2 || !strings.Contains(f.Notes[1], "torn last line") || !strings.Contains(f.Notes[0], "line 4") {
		t.Errorf("notes %q", f.Notes)
	}
	if f.Leaf().ID != "w" {
		t.Errorf("leaf %q", f.Leaf().ID)
	}
	if got := roles(t, mustContext(t, f, "")); !reflect.DeepEqual(got, []string{"user"}) {
		t.Errorf("roles %v", got)
	}
}

func TestHeaderErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error
	}{
		{"harness v4", `{"kind":"header","version":4,"id":"x"}` + "\n", ErrForeignFormat},
		{"claude code", `{"type":"user","uuid":"x"}` + "\n", ErrForeignFormat},
		{"empty", "", ErrEmpty},
		{"blank", "\n\n", ErrEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.in))
			if !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestLongLines(t *testing.T) {
	big := strings.Repeat("x", 300<<10) // larger than the bufio buffer
	line := `{"type":"message","id":"u","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"` + big + `","timestamp":1}}`
	f := mustRead(t, v3head+line+"\n")
	if len(f.Entries) != 1 || string(f.Entries[0].Raw) != line {
		t.Fatal("long line not read whole")
	}
	rd, err := NewReader(strings.NewReader(v3head + line + "\n" + `{"type":"label","id":"l","parentId":"u","targetId":"u","label":"x"}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	rd.maxLine = 1 << 10
	e, err := rd.Next()
	if err != nil || e.ID != "l" || len(rd.Notes()) != 1 || !strings.Contains(rd.Notes()[0], "longer than") {
		t.Fatalf("over-long line: %v %+v %q", err, e, rd.Notes())
	}
}

func TestTreeQuirks(t *testing.T) {
	in := v3head +
		`{"type":"message","id":"a","parentId":"a","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"self","timestamp":1}}` + "\n" +
		`{"type":"message","id":"b","parentId":"missing","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"user","content":"orphan","timestamp":2}}` + "\n" +
		`{"type":"message","id":"c","parentId":"d","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"cycle c","timestamp":3}}` + "\n" +
		`{"type":"message","id":"d","parentId":"c","timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"user","content":"cycle d","timestamp":4}}` + "\n" +
		`{"type":"session_info","id":"n1","parentId":"d","name":"  named  "}` + "\n" +
		`{"type":"label","id":"l1","parentId":"n1","targetId":"a","label":"A"}` + "\n" +
		`{"type":"label","id":"l2","parentId":"l1","targetId":"b","label":"B"}` + "\n" +
		`{"type":"label","id":"l3","parentId":"l2","targetId":"a"}` + "\n"
	f := mustRead(t, in)
	if got := ids(f.Roots()); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("roots %v", got)
	}
	if got := ids(f.Path("a")); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("self-parent path %v", got)
	}
	if got := ids(f.Path("d")); !reflect.DeepEqual(got, []string{"c", "d"}) {
		t.Errorf("cycle path %v", got)
	}
	if got := f.Labels(); !reflect.DeepEqual(got, map[string]string{"b": "B"}) {
		t.Errorf("labels %v", got)
	}
	if got := f.SessionName(); got != "named" {
		t.Errorf("name %q", got)
	}
	f2 := mustRead(t, in+`{"type":"session_info","id":"n2","parentId":"l3","name":""}`+"\n")
	if got := f2.SessionName(); got != "" {
		t.Errorf("cleared name %q", got)
	}
}

func TestContextEdit(t *testing.T) {
	in := v3head +
		`{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"secret","timestamp":1}}` + "\n" +
		`{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"long output"}],"provider":"p","model":"m"}}` + "\n" +
		`{"type":"custom_message","id":"cm","parentId":"a1","timestamp":"2026-01-01T00:00:03.000Z","customType":"t","content":"injected","display":false}` + "\n" +
		`{"type":"context_edit","id":"e1","parentId":"cm","timestamp":"2026-01-01T00:00:04.000Z","targetId":"u1","replacement":null}` + "\n" +
		`{"type":"context_edit","id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:05.000Z","targetId":"a1","replacement":{"content":[{"type":"text","text":"short"}]}}` + "\n" +
		`{"type":"context_edit","id":"e3","parentId":"e2","timestamp":"2026-01-01T00:00:06.000Z","targetId":"cm","replacement":{"content":"edited"}}` + "\n"
	f := mustRead(t, in)
	ctx, err := f.BuildContext("")
	if err != nil {
		t.Fatal(err)
	}
	if got := roles(t, ctx); !reflect.DeepEqual(got, []string{"assistant", "custom"}) {
		t.Fatalf("roles %v", got)
	}
	if got := firstText(t, ctx.Messages[0]); got != "short" {
		t.Errorf("edited assistant text %q", got)
	}
	want := `{"role":"custom","customType":"t","content":"edited","display":false,"timestamp":1767225603000}`
	if string(ctx.Messages[1]) != want {
		t.Errorf("custom message\n got %s\nwant %s", ctx.Messages[1], want)
	}
	// edits off the path do not apply
	if got := roles(t, mustContext(t, f, "cm")); !reflect.DeepEqual(got, []string{"user", "assistant", "custom"}) {
		t.Errorf("roles before edits %v", got)
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"type":"message","id":"u","parentId":null,"message":{"role":"user","content":"hi"}}`))
	f.Add([]byte(`{"type":"compaction","id":"c","parentId":"u","summary":"s","firstKeptEntryIndex":1}`))
	f.Add([]byte(`{"type":"label","targetId":5,"label":null}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"message":"x","type":"message"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := ParseLine(line)
		if err == nil && e == nil {
			t.Fatal("nil entry without error")
		}
		for _, head := range []string{v3head, `{"type":"session","id":"s"}` + "\n", `{"type":"session","version":2}` + "\n"} {
			in := head + string(line) + "\n" + string(line)
			file, err := Read(strings.NewReader(in))
			if err != nil {
				continue
			}
			ctx := mustContext(t, file, "")
			for _, m := range ctx.Messages {
				if !json.Valid(m) {
					t.Fatalf("invalid message %q", m)
				}
			}
			_ = file.Labels()
			_ = file.SessionName()
			_ = file.Roots()
		}
	})
}

func TestCheckToolPairing(t *testing.T) {
	asst := func(ids ...string) string {
		var b []string
		for _, id := range ids {
			b = append(b, `{"type":"toolCall","id":"`+id+`","name":"bash","arguments":{}}`)
		}
		return `{"role":"assistant","content":[{"type":"text","text":"x"}` + strings.Repeat(",", min(1, len(b))) + strings.Join(b, ",") + `]}`
	}
	res := func(id string) string { return `{"role":"toolResult","toolCallId":"` + id + `","content":[]}` }
	user := `{"role":"user","content":"hi"}`
	for _, tc := range []struct {
		name string
		msgs []string
		want []string
	}{
		{"ok", []string{user, asst("a", "b"), res("a"), res("b"), asst()}, nil},
		{"unanswered", []string{user, asst("a", "b"), res("b")}, []string{`message 1: tool call "a" unanswered`}},
		{"orphan before call", []string{res("a"), asst("a"), res("a")}, []string{`message 0: tool call "a" orphan`}},
		{"duplicate", []string{asst("a"), res("a"), res("a")}, []string{`message 2: tool call "a" duplicate`}},
		{"one id twice in a reply, answered in order", []string{user, asst("s", "s"), res("s"), res("s"), asst()}, nil},
		{"no ids", []string{user, asst("", ""), res(""), res("")}, nil},
		{"one id twice in a reply, answered once", []string{user, asst("s", "s"), res("s"), user}, []string{`message 1: tool call "s" unanswered`}},
		{"one id in two replies", []string{user, asst("c"), res("c"), asst("c"), res("c")}, nil},
		{"one id in two replies, the first unanswered", []string{user, asst("c"), asst("c"), res("c")}, []string{`message 1: tool call "c" unanswered`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []json.RawMessage
			for _, m := range tc.msgs {
				msgs = append(msgs, json.RawMessage(m))
			}
			var got []string
			for _, p := range CheckToolPairing(msgs) {
				got = append(got, p.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	// the small samples are well paired
	for _, name := range []string{"getspecstory-full_format.jsonl", "getspecstory-sample.jsonl"} {
		f := piFile(t, name)
		if p := CheckToolPairing(mustContext(t, f, "").Messages); len(p) != 0 {
			t.Errorf("%s: %d pairing problems, first %v", name, len(p), p[0])
		}
	}
	// the real session has tool calls left unanswered only by failed turns
	f := piFile(t, largeV1)
	msgs := mustContext(t, f, "").Messages
	problems := CheckToolPairing(msgs)
	if len(problems) == 0 {
		t.Error("expected unanswered calls in the large session")
	}
	for _, p := range problems {
		var m struct {
			StopReason string `json:"stopReason"`
		}
		_ = json.Unmarshal(msgs[p.Index], &m)
		if p.Kind != "unanswered" || (m.StopReason != "error" && m.StopReason != "aborted") {
			t.Errorf("%v (stopReason %q)", p, m.StopReason)
		}
	}
}

func mustContext(t *testing.T, f *File, leaf string) *Context {
	t.Helper()
	ctx, err := f.BuildContext(leaf)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

func TestChildIndexMatchesChildren(t *testing.T) {
	f := piFile(t, "getspecstory-branching.jsonl")
	roots, children := f.ChildIndex()
	if !reflect.DeepEqual(roots, f.Roots()) {
		t.Errorf("roots differ")
	}
	for _, e := range f.Entries {
		want := f.Children(e.ID)
		if got := children[e]; len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("children of %s: %d, want %d", e.ID, len(got), len(want))
		}
	}
}
